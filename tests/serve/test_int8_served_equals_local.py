"""An INT8 Python-backend repository gives what the local ``OrtStreamSession`` (``cosyedge run``) gives, bit for bit,
alone and batched: its pool runs the stored graph with the session's own in-memory rewrites (``conv_sum`` included).
Before, only the local session fused ``Conv -> Add``: on loud speech one float rounding of that sum flipped an INT8
step that the recurrent state carried on, 61 dB apart (quiet clips happened to match)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from cosyedge.builders.triton import build_triton
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime.ort import OrtStreamSession
from cosyedge.runtime.pool import StreamPool
from tests.serve.test_python_backend_sequences import CHUNK, DEMO, open_model, pb, req  # noqa: F401 - pb: fixture

LIBRIVOX = REFERENCE_STREAM_ONNX.parents[2] / "tests" / "data" / "speech_librivox_0890.wav"


@pytest.fixture(scope="module")
def int8_repo(tmp_path_factory):
    from cosyedge.precision.calibset import DemoMix, make_calibration_set

    from cosyedge.builders.config import BuildConfig, Calibration

    tmp = tmp_path_factory.mktemp("int8")
    calib = make_calibration_set(tmp / "calib", count=4, seed=0, training_data=DemoMix()).folder
    # the trt placement (float convs between Q/DQ, conv_sum): where the local and pool graphs had parted
    return build_triton(REFERENCE_STREAM_ONNX, tmp / "engines", triton_backend="python", max_sequences=4,
                        config=BuildConfig(precision="int8", calibration=Calibration(set=calib), placement="trt"))


@pytest.fixture(scope="module")
def int8_default_repo(int8_repo):
    """The plain INT8 Python-backend repository (ort_matmul: the pool runs ONNX Runtime CPU), same amax cache."""
    import json

    amax = json.loads((int8_repo / "manifest.json").read_text())["reports"]["int8"]["amax_path"]
    return build_triton(REFERENCE_STREAM_ONNX, int8_repo.parent, triton_backend="python", precision="int8",
                        amax=amax, max_sequences=4)


def inputs() -> list[np.ndarray]:
    """(chunks, 160) float32: loud speech (the demo x4, clipped: where the two graphs parted), noise, a reversed and a
    plain reading."""
    demo, _ = sf.read(DEMO, dtype="float32")
    lib, _ = sf.read(LIBRIVOX, dtype="float32")
    noise = (0.1 * np.random.default_rng(0).standard_normal(48000)).astype(np.float32)
    xs = [np.clip(4 * demo, -1, 1), noise, demo[::-1], lib[:48000]]
    return [x[: x.size // CHUNK * CHUNK].reshape(-1, CHUNK).astype(np.float32) for x in xs]


def local(model, x: np.ndarray) -> np.ndarray:
    with OrtStreamSession(model) as s:
        return np.stack([s.push(c.reshape(1, 1, CHUNK))["enhanced"].reshape(-1).copy() for c in x])


def test_the_pool_without_batch_rewrite_runs_the_local_sessions_graph_alone_and_batched(int8_repo):
    model = int8_repo / "reference" / "1" / "model.onnx"
    xs = inputs()
    want = [local(model, x) for x in xs]
    for slots in (1, 4):
        with StreamPool(model, max_streams=slots, batch_rewrite=False) as p:
            assert p.rewritten.get("conv_sum") == 1  # what OrtStreamSession fuses
            sid = p.join()
            alone = np.stack([p.push({sid: c})[sid].copy() for c in xs[0]])
        assert np.array_equal(alone, want[0]), slots
    with StreamPool(model, max_streams=4, batch_rewrite=False) as p:
        ids = [p.join() for _ in xs]
        outs: list[list] = [[] for _ in xs]
        for t in range(max(len(x) for x in xs)):
            o = p.push({i: x[t] for i, x in zip(ids, xs) if t < len(x)})
            for k, i in enumerate(ids):
                if i in o:
                    outs[k].append(o[i].copy())
    for k, (y, w) in enumerate(zip(outs, want)):
        assert np.array_equal(np.stack(y), w), k


def test_int8_sequences_through_the_python_backend_equal_the_local_run(int8_repo, pb):  # noqa: F811
    m = open_model(int8_repo, pb)
    xs = inputs()
    got: list[list] = [[] for _ in xs]
    for t in range(max(len(x) for x in xs)):
        live = [k for k, x in enumerate(xs) if t < len(x)]
        rs = m.execute([req(k + 1, xs[k][t], start=t == 0) for k in live])
        for k, r in zip(live, rs):
            assert r.error is None, r.error
            got[k].append(r.outputs["enhanced"].reshape(-1).copy())
    for k, x in enumerate(xs):
        assert np.array_equal(np.stack(got[k]), local(int8_repo / "reference" / "1" / "model.onnx", x)), k
    m.finalize()


def test_the_default_int8_python_backend_repository_is_ort_matmul_and_serves_like_the_local_run(
        int8_default_repo, pb):  # noqa: F811
    """The plain INT8 Python-backend repository gets ONNX Runtime's default placement (ort_matmul, in a Scan over
    hops): one sequence alone is bit-identical to the local run; four at once were bit-identical too here, and are
    held to 40 dB (a batched kernel may round a float step differently, which the state then carries)."""
    import json

    assert int8_default_repo.name == "reference-int8-triton-python"
    m = json.loads((int8_default_repo / "manifest.json").read_text())
    assert m["flags"]["int8_placement"] == "ort_matmul" and m["reports"]["int8"]["placement"] == "ort_matmul"
    model = int8_default_repo / "reference" / "1" / "model.onnx"
    xs = inputs()
    want = [local(model, x) for x in xs]
    srv = open_model(int8_default_repo, pb)
    alone = [srv.execute([req(9, c, start=t == 0)])[0].outputs["enhanced"].reshape(-1).copy()
             for t, c in enumerate(xs[0])]
    assert np.array_equal(np.stack(alone), want[0])
    got: list[list] = [[] for _ in xs]
    for t in range(max(len(x) for x in xs)):
        live = [k for k, x in enumerate(xs) if t < len(x)]
        rs = srv.execute([req(k + 1, xs[k][t], start=t == 0) for k in live])
        for k, r in zip(live, rs):
            assert r.error is None, r.error
            got[k].append(r.outputs["enhanced"].reshape(-1).copy())
    srv.finalize()
    for k, w in enumerate(want):
        y, w = np.stack(got[k]).astype(np.float64), w.astype(np.float64)
        err = np.sum((y - w) ** 2)
        snr = np.inf if err == 0 else 10 * np.log10(np.sum(w ** 2) / err)
        print(f"stream {k}: {snr:.1f} dB from the local run")
        assert snr >= 40.0, (k, snr)
