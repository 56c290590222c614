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

    tmp = tmp_path_factory.mktemp("int8")
    calib = make_calibration_set(tmp / "calib", count=4, seed=0, training_data=DemoMix()).folder
    return build_triton(REFERENCE_STREAM_ONNX, tmp / "engines", triton_backend="python", precision="int8",
                        calib=calib, max_sequences=4)


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
