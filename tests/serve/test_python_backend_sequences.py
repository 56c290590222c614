"""The Python-backend model of a ``--triton-backend python`` repository, driven as Triton's sequence batcher drives it
(START/END/READY/CORRID control inputs, one ``execute()`` per batch), with a stand-in for
``triton_python_backend_utils`` (the real stub only exists inside tritonserver; tests/serve/test_triton_server.py runs
the real one): each sequence's outputs equal its own solo run; START gives a fresh zero state even to a reused id; END
and Triton's idle timeout free the slot; READY = 0 touches nothing; a bad request fails alone.
"""

from __future__ import annotations

import json
import sys
import time
import types

import numpy as np
import pytest
import soundfile as sf

from cosyedge.builders.triton import build_triton
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime.pool import StreamPool

DEMO = REFERENCE_STREAM_ONNX.parents[1] / "assets" / "demo" / "noisy.wav"
CHUNK = 160


class FakeTensor:
    """pb_utils.Tensor: a name and a numpy array, exchanged through DLPack as the real stub's must be."""

    def __init__(self, name, array):
        self._name, self.array = name, np.asarray(array)

    def name(self):
        return self._name

    def __dlpack__(self, *a, **k):
        return self.array.__dlpack__(*a, **k)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    @classmethod
    def from_dlpack(cls, name, obj):
        return cls(name, np.from_dlpack(obj))

    def as_numpy(self):  # the real stub's as_numpy() is wrong under numpy 2: the model must not use it
        raise AssertionError("as_numpy() used")


class FakeResponse:
    def __init__(self, output_tensors=(), error=None):
        self.outputs = {t.name(): t.array for t in output_tensors}
        self.error = error


class FakeError:
    def __init__(self, msg):
        self.msg = msg


class FakeRequest:
    def __init__(self, inputs: dict):
        self.inputs = {k: FakeTensor(k, v) for k, v in inputs.items()}


@pytest.fixture()
def pb(monkeypatch):
    mod = types.ModuleType("triton_python_backend_utils")
    mod.Tensor = FakeTensor
    mod.InferenceResponse = FakeResponse
    mod.TritonError = FakeError
    mod.get_input_tensor_by_name = lambda r, name: r.inputs.get(name)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", mod)
    return mod


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return build_triton(REFERENCE_STREAM_ONNX, tmp_path_factory.mktemp("engines"), triton_backend="python",
                        max_sequences=3, max_batch_size=8, idle_us=200_000)


def open_model(repo, pb):
    from google.protobuf import json_format

    from cosyedge.builders.triton import load_model_config
    from cosyedge.serve.model import TritonPythonModel

    cfg = json_format.MessageToDict(load_model_config(repo / "reference" / "config.pbtxt"),
                                    preserving_proto_field_name=True)
    m = TritonPythonModel()
    m.initialize({"model_config": json.dumps(cfg), "model_repository": str(repo / "reference"), "model_version": "1",
                  "model_name": "reference"})
    return m


def req(corrid, chunk, start=False, end=False, ready=True, dtype=np.float32, name="audio"):
    f = lambda v, t=np.float32: np.array([[v]], t)  # noqa: E731
    return FakeRequest({name: np.asarray(chunk, dtype).reshape(1, 1, -1), "START": f(float(start)),
                        "END": f(float(end)), "READY": f(float(ready)), "CORRID": f(corrid, np.uint64)})


def speech(n_chunks: int, offset: int) -> np.ndarray:
    x, _ = sf.read(DEMO, dtype="float32", frames=n_chunks * CHUNK, start=offset)
    return x.reshape(n_chunks, CHUNK)


def solo(chunks: np.ndarray) -> np.ndarray:
    with StreamPool(REFERENCE_STREAM_ONNX, max_streams=1) as p:
        sid = p.join()
        return np.stack([p.push({sid: c})[sid] for c in chunks])


def test_sequences_batched_per_execute_equal_solo_runs_and_reused_ids_start_from_zero(repo, pb):
    m = open_model(repo, pb)
    a, b = speech(30, 8000), speech(30, 40000)
    ya, yb = [], []
    for t in range(30):
        rs = m.execute([req(7, a[t], start=t == 0), req(2**63 + 5, b[t], start=t == 0, end=t == 29)])
        assert all(r.error is None for r in rs)
        ya.append(rs[0].outputs["enhanced"].reshape(-1))
        yb.append(rs[1].outputs["enhanced"].reshape(-1))
    assert m.counts["executions"] == 30 and m.counts["ended"] == 1 and list(m.sequences) == [7]
    np.testing.assert_allclose(np.stack(ya), solo(a), atol=1e-5)
    np.testing.assert_allclose(np.stack(yb), solo(b), atol=1e-5)
    # id 7 is reused by a new sequence (START): it must not see the old state
    c = speech(10, 90000)
    yc = [m.execute([req(7, c[t], start=t == 0)])[0].outputs["enhanced"].reshape(-1) for t in range(10)]
    np.testing.assert_allclose(np.stack(yc), solo(c), atol=1e-5)
    m.finalize()


def test_ready_zero_requests_are_answered_with_zeros_and_touch_no_state(repo, pb):
    m = open_model(repo, pb)
    a = speech(12, 16000)
    ys = []
    for t in range(12):
        batch = [req(0, np.full(CHUNK, 0.5), ready=False), req(11, a[t], start=t == 0), req(0, a[t], ready=False)]
        rs = m.execute(batch)
        assert np.array_equal(rs[0].outputs["enhanced"], np.zeros((1, 1, CHUNK), np.float32))
        assert np.array_equal(rs[2].outputs["enhanced"], np.zeros((1, 1, CHUNK), np.float32))
        ys.append(rs[1].outputs["enhanced"].reshape(-1))
    assert list(m.sequences) == [11] and m.counts["not_ready"] == 24
    np.testing.assert_allclose(np.stack(ys), solo(a), atol=1e-5)


def test_bad_requests_fail_alone_and_the_batch_runs(repo, pb):
    m = open_model(repo, pb)
    a = speech(3, 20000)
    m.execute([req(1, a[0], start=True)])
    nan = a[1].copy()
    nan[5] = np.nan
    rs = m.execute([req(1, a[1]), req(99, a[1]), req(3, nan, start=True), req(4, a[1], start=True, dtype=np.float64)])
    assert rs[0].error is None
    assert "sequence 99 holds no state" in rs[1].error.msg and "sequence_start" in rs[1].error.msg
    assert "NaN" in rs[2].error.msg and "float64" in rs[3].error.msg
    short = FakeRequest({"audio": a[1][:80].reshape(1, 1, 80), "CORRID": np.array([[3]], np.uint64),
                         "END": np.ones((1, 1), np.float32)})
    assert "shape [1, 1, 80]" in m.execute([short])[0].error.msg
    assert m.counts["refused"] == 4 and 3 not in m.sequences  # a failed last request still ends its sequence
    y = [rs[0].outputs["enhanced"].reshape(-1), m.execute([req(1, a[2])])[0].outputs["enhanced"].reshape(-1)]
    np.testing.assert_allclose(np.stack(y), solo(a)[1:], atol=1e-5)


def test_idle_sequences_are_freed_after_trittons_timeout_and_a_full_pool_frees_the_least_recent(repo, pb):
    m = open_model(repo, pb)  # 3 slots, idle timeout 0.2 s
    a = speech(4, 30000)
    for cid in (1, 2, 3):
        m.execute([req(cid, a[0], start=True)])
    m.execute([req(2, a[1]), req(3, a[1])])
    # a fourth START with every slot taken: Triton has ended one of them for idleness; 1 is the least recent
    m.execute([req(4, a[0], start=True)])
    assert sorted(m.sequences) == [2, 3, 4] and m.counts["idle_freed"] == 1
    time.sleep(0.25)
    rs = m.execute([req(4, a[1])])  # 2 and 3 are swept before this request runs; 4 ran just now
    assert rs[0].error is None and sorted(m.sequences) == [4] and m.counts["idle_freed"] == 3
    assert "holds no state" in m.execute([req(2, a[2])])[0].error.msg


def test_two_requests_of_one_sequence_in_one_call_run_in_order(repo, pb):
    m = open_model(repo, pb)
    a = speech(3, 50000)
    rs = m.execute([req(9, a[0], start=True), req(9, a[1]), req(9, a[2], end=True)])
    np.testing.assert_allclose(np.stack([r.outputs["enhanced"].reshape(-1) for r in rs]), solo(a), atol=1e-5)
    assert m.sequences == {} and m.counts["ended"] == 1


def test_fp16_repository_runs_its_sequences_and_records_the_serve_time_versions(tmp_path, pb):
    """--fp16 builds (its pool check runs the FP16 graph); the manifest records the serve-time versions."""
    import onnxruntime

    import cosyedge
    from cosyedge.artifacts import load_manifest

    repo = build_triton(REFERENCE_STREAM_ONNX, tmp_path, triton_backend="python", precision="fp16", max_sequences=2)
    assert repo.name == "reference-fp16-triton-python"
    man = load_manifest(repo)
    assert man["serve"]["requires"] == {"cosyedge": cosyedge.__version__, "onnxruntime": onnxruntime.__version__}
    assert man["triton"]["backend"] == "python" and man["triton"]["pool"] == "pool"
    m = open_model(repo, pb)
    a = speech(5, 8000)
    ys = [m.execute([req(1, a[t], start=t == 0)])[0].outputs["enhanced"].reshape(-1) for t in range(5)]
    assert np.isfinite(np.stack(ys)).all() and np.abs(np.stack(ys) - solo(a)).max() < 0.05


def test_cli_build_writes_a_python_backend_repository_with_the_idle_timeout(cli, tmp_path):
    from cosyedge.builders.triton import load_model_config

    rc, out, err = cli("build", "--backend", "triton", "--triton-backend", "python", "--idle-timeout-ms", "2500",
                       "--max-sequences", "8", "--max-batch-size", "4", "-o", tmp_path, "-q")
    assert rc == 0, err
    repo = tmp_path / "reference-fp32-triton-python"
    assert out.strip().splitlines()[-1] == str(repo)
    cfg = load_model_config(repo / "reference" / "config.pbtxt")
    sb = cfg.sequence_batching
    assert cfg.backend == "python" and cfg.max_batch_size == 4 and sb.max_sequence_idle_microseconds == 2_500_000
    assert sb.oldest.max_candidate_sequences == 8 and sb.oldest.max_queue_delay_microseconds == 0
    assert [c.name for c in sb.control_input] == ["START", "END", "READY", "CORRID"] and not len(sb.state)
    assert (repo / "reference" / "1" / "model.py").read_text().count("import") == 1
    rc, _, err = cli("build", "--triton-backend", "python", "-o", tmp_path)
    assert rc == 2 and "--triton-backend applies to --backend triton only" in err


def test_a_graph_with_a_fixed_batch_of_one_gets_one_pool_per_sequence(tmp_path, pb):
    """A stream graph whose batch is fixed to 1 (as some adopted graphs are) cannot share a pool tick: the repository
    records pool 'solo' and the model runs one single-slot pool per sequence, each equal to its solo run."""
    import onnx

    from cosyedge.artifacts import load_manifest
    from tests.helpers.models import make_fir_model

    path = make_fir_model(tmp_path / "fir.stream.onnx", hop=CHUNK)
    m = onnx.load(str(path))
    for v in list(m.graph.input) + list(m.graph.output):
        d = v.type.tensor_type.shape.dim[0]
        d.Clear()
        d.dim_value = 1
    onnx.save(m, str(path))
    repo = build_triton(path, tmp_path / "engines", triton_backend="python", max_sequences=2, name="fir")
    assert load_manifest(repo)["triton"]["pool"] == "solo"
    from google.protobuf import json_format

    from cosyedge.builders.triton import load_model_config
    from cosyedge.serve.model import TritonPythonModel

    cfg = json_format.MessageToDict(load_model_config(repo / "fir" / "config.pbtxt"), preserving_proto_field_name=True)
    model = TritonPythonModel()
    model.initialize({"model_config": json.dumps(cfg), "model_repository": str(repo / "fir"), "model_version": "1"})
    a, b = speech(6, 8000), speech(6, 30000)
    out_name = model.contract.output
    inp = model.contract.input
    ys = [model.execute([req(1, a[t], start=t == 0, name=inp), req(2, b[t], start=t == 0, name=inp)]) for t in range(6)]
    assert all(r.error is None for rs in ys for r in rs), [r.error.msg for rs in ys for r in rs if r.error]
    for k, x in enumerate((a, b)):
        with StreamPool(path, max_streams=1) as p:
            sid = p.join()
            want = np.stack([p.push({sid: c})[sid] for c in x])
        np.testing.assert_allclose(np.stack([r[k].outputs[out_name].reshape(-1) for r in ys]), want, atol=1e-6)


def test_clients_read_the_contract_of_both_repository_kinds(repo, tmp_path):
    """The GPU (onnxruntime, implicit state) repository carries the same client parameters, so `cosyedge run --server`
    streams to NVIDIA's container as to `cosyedge serve`; a config without them is refused in one line."""
    from google.protobuf import json_format

    from cosyedge.builders.triton import load_model_config
    from cosyedge.errors import UsageError
    from cosyedge.serve.client import served_model

    gpu = build_triton(REFERENCE_STREAM_ONNX, tmp_path, max_sequences=4)
    for r in (repo, gpu):
        cfg = json_format.MessageToDict(load_model_config(r / "reference" / "config.pbtxt"),
                                        preserving_proto_field_name=True)
        m = served_model("127.0.0.1:8001", "reference", cfg)
        assert m.chunk_samples == CHUNK and m.contract.delay_samples == 160 and m.contract.sample_rate_hz == 16000
        assert str(m) == "model 'reference' at 127.0.0.1:8001"
    cfg.pop("parameters")
    with pytest.raises(UsageError, match="is not a cosyedge model"):
        served_model("127.0.0.1:8001", "reference", cfg)


def test_int8_repository_runs_the_stored_graph_alone_bit_identical_and_batched_within_int8_rounding(tmp_path, pb):
    """INT8 (the default ort_matmul placement: activation step per call): batched GEMMs would move rounding steps
    (about 50 dB from the local run, carried by the state), so the repository runs the stored graph: a sequence alone
    equals the local OrtStreamSession bit for bit; three batched per execute() stay within INT8 rounding of it (each
    row quantized from its own range, but the float layers of a batch of 3 round differently and a flipped step is
    carried: 52.0, 154 and 150 dB measured here, held to 45 dB)."""
    from cosyedge.artifacts import load_manifest
    from cosyedge.precision.calibset import DemoMix, make_calibration_set
    from cosyedge.runtime.ort import OrtStreamSession

    calib = make_calibration_set(tmp_path / "calib", count=4, seed=0, training_data=DemoMix()).folder
    repo = build_triton(REFERENCE_STREAM_ONNX, tmp_path / "engines", triton_backend="python", precision="int8",
                        calib=calib, max_sequences=3)
    assert load_manifest(repo)["triton"]["batch_rewrite"] is False
    xs = [speech(40, off) for off in (8000, 60000, 120000)]
    wants = []
    for x in xs:
        with OrtStreamSession(repo / "reference" / "1" / "model.onnx") as s:
            wants.append(np.stack([s.push(c.reshape(1, 1, CHUNK))["enhanced"].reshape(-1).copy() for c in x]))
    m = open_model(repo, pb)
    alone = [m.execute([req(9, c, start=t == 0)])[0].outputs["enhanced"].reshape(-1).copy() for t, c in enumerate(xs[0])]
    assert np.array_equal(np.stack(alone), wants[0])
    outs = [m.execute([req(k + 1, x[t], start=t == 0) for k, x in enumerate(xs)]) for t in range(40)]
    for k, want in enumerate(wants):
        y = np.stack([o[k].outputs["enhanced"].reshape(-1) for o in outs]).astype(np.float64)
        err = np.sum((y - want) ** 2)
        snr = np.inf if err == 0 else 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / err)
        print(f"sequence {k}: {snr:.1f} dB from the local run")
        assert snr >= 45.0, (k, snr)
    m.finalize()


def test_an_attention_model_with_a_kv_cache_streams_its_sequences(tmp_path, pb):
    """Sliding-window attention (window 16; streamified: a key/value cache and positions as states) in a repository:
    three sequences of real-speech features, batched per execute() and joining at different times, each equal to
    its solo run."""
    pytest.importorskip("torch")
    from cosyedge.surgery import streamify
    from tests.helpers import models_attention as M

    src = M.export(M.build("sliding_explicit"), tmp_path / "attn.onnx", M.example_input(1), time_axis=1)
    c = streamify(src, tmp_path / "attn.stream.onnx", sample_rate_hz=16000, hop_samples=CHUNK, frames_per_hop=1)
    assert [s for s in c.states if s.kind not in ("context", "position", "counter")]  # a KV cache
    repo = build_triton(tmp_path / "attn.stream.onnx", tmp_path / "engines", triton_backend="python", max_sequences=4,
                        name="attn")
    from google.protobuf import json_format

    from cosyedge.builders.triton import load_model_config
    from cosyedge.serve.model import TritonPythonModel

    cfg = json_format.MessageToDict(load_model_config(repo / "attn" / "config.pbtxt"), preserving_proto_field_name=True)
    m = TritonPythonModel()
    m.initialize({"model_config": json.dumps(cfg), "model_repository": str(repo / "attn"), "model_version": "1"})
    feats = M.speech_features(60, 1, n=3)  # (3, 60, 16)
    starts = [0, 7, 19]
    outs: dict[int, list] = {k: [] for k in range(3)}
    f = lambda v, t=np.float32: np.array([[v]], t)  # noqa: E731
    for t in range(80):
        batch, who = [], []
        for k in range(3):
            i = t - starts[k]
            if 0 <= i < 60 - starts[k] // 2:
                batch.append(FakeRequest({"x": feats[k, i][None, None, :], "START": f(float(i == 0)),
                                          "CORRID": f(100 + k, np.uint64)}))
                who.append(k)
        for k, r in zip(who, m.execute(batch)):
            assert r.error is None, r.error.msg
            outs[k].append(r.outputs["y"].reshape(-1))
    for k in range(3):
        with StreamPool(tmp_path / "attn.stream.onnx", max_streams=1) as p:
            sid = p.join()
            want = [p.push({sid: {"x": feats[k, i][None, :]}})[sid]["y"].reshape(-1) for i in range(len(outs[k]))]
        np.testing.assert_allclose(np.stack(outs[k]), np.stack(want), atol=1e-5)
