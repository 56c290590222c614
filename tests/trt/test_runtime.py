"""TrtStreamSession on the fake TensorRT/pycuda stack: streaming equals full-sequence, state carried on the
device in ping-pong buffers whose addresses swap, CUDA-graph replay equals plain enqueues, context
push/pop from any thread, clear errors. The fake runs the real ONNX with ONNX Runtime on fake device
memory (tests/trt/fakes.py); numerics of real TensorRT are checked by scripts/gpu_check.py on a GPU."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cosyedge.builders import trt as bt
from cosyedge.builders.cache import load_or_rebuild
from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.runtime.stream import stream_array
from cosyedge.runtime.trt import missing_stack_message
from tests.helpers import models
from tests.trt import fakes
from tests.trt.conftest import HOP

ATOL = 1e-5


def _x(n, seed=0, rows=None):
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((n,) if rows is None else (rows, n))).astype(np.float32)


@pytest.fixture
def engine(fake10, two_state, tmp_path):
    return load_or_rebuild(bt.build_trt(two_state, out_dir=tmp_path, max_batch=4))


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_stream_matches_full_sequence(engine, fake10, cuda_graph):
    x = _x(803)
    with engine(cuda_graph=cuda_graph) as s:
        y = stream_array(s, x)
        assert s.gpu_latencies_ms.shape == (201,) and (s.gpu_latencies_ms > 0).all()
    assert np.abs(y - models.two_state_reference(x)[0]).max() <= ATOL
    if cuda_graph:
        launched = fake10.cudart.launched
        assert len(launched) == 201 and len(set(launched)) == 2  # one graph per ping-pong parity
        assert launched[0] != launched[1] and launched[0] == launched[2]
    assert fake10.state.contexts_alive == 0 and fake10.state.stack() == []


def test_graph_and_plain_give_identical_output(engine):
    x = _x(400, seed=3)
    with engine() as s:
        a = stream_array(s, x)
    with engine(cuda_graph=True) as s:
        b = stream_array(s, x)
    np.testing.assert_array_equal(a, b)


def test_state_stays_on_device_in_ping_pong_buffers(engine, fake10):
    x = _x(10 * HOP, seed=1)
    ref = models.two_state_reference(x)[0]
    s = engine()
    assert s.state_addresses == []
    with s:
        pairs = s.state_addresses
        addrs = [a for p in pairs for a in p]
        assert len(pairs) == 2 and len(set(addrs)) == 4  # distinct, never aliased
        fake10.state.log.clear()
        out = [s.push(x[i:i + HOP].reshape(1, 1, HOP))[models.OUTPUT].copy() for i in range(0, x.size, HOP)]
        enq = s._context.enqueues
    assert np.abs(np.concatenate(out, axis=2).reshape(-1) - ref).max() <= ATOL
    assert len(enq) == 10
    for i, e in enumerate(enq):
        for k, st in enumerate(("00", "01")):
            a, b = pairs[k]
            assert e[f"state_in.{st}"] == (a if i % 2 == 0 else b)  # reads set A, B, A, ...
            assert e[f"state_out.{st}"] == (b if i % 2 == 0 else a)  # writes the other set
            if i:
                assert e[f"state_in.{st}"] == enq[i - 1][f"state_out.{st}"]  # last output is the next input
    assert fake10.state.log.count("htod") == 10 and fake10.state.log.count("dtoh") == 10  # no state copies


def test_state_is_carried_and_reset(engine):
    x = _x(20 * HOP, seed=2)
    with engine() as s:
        chunk = x[:HOP].reshape(1, 1, HOP)
        first = s.push(chunk)[models.OUTPUT].copy()
        second = s.push(chunk)[models.OUTPUT].copy()
        assert np.abs(first - second).max() > 1e-3  # same chunk, other state
        st = s.state()
        assert sorted(st) == ["state_in.00", "state_in.01"] and all(v.shape == (1, 1, 4) for v in st.values())
        assert all(np.abs(v).max() > 0 for v in st.values())
        s.reset()
        assert all(not v.any() for v in s.state().values())
        again = s.push(chunk)[models.OUTPUT].copy()
    np.testing.assert_array_equal(first, again)


def test_batch_streams_are_independent(fake10, fir, tmp_path):
    eng = load_or_rebuild(bt.build_trt(fir, out_dir=tmp_path, max_batch=4))
    x = _x(500, seed=4, rows=3)
    with eng(batch=3) as s:
        y = stream_array(s, x)
    ref = models.fir_reference(x, models.default_taps())
    assert y.shape == (3, 500) and np.abs(y - ref).max() <= ATOL
    with pytest.raises(UsageError, match="batch 5 is above the engine's optimization profile maximum 4"):
        eng(batch=5)


def test_push_from_another_thread_pushes_the_context(engine, fake10):
    x = _x(8 * HOP, seed=5)
    outs = {}
    with engine() as s:
        def worker(name, part):
            outs[name] = [s.push(part[i:i + HOP].reshape(1, 1, HOP))[models.OUTPUT].copy()
                          for i in range(0, part.size, HOP)]
            outs[name + "_stack"] = list(fake10.state.stack())

        t = threading.Thread(target=worker, args=("t", x[: 4 * HOP]))
        t.start()
        t.join()
        worker("main", x[4 * HOP:])
        assert fake10.state.stack() == []  # popped after every call
    assert outs["t_stack"] == [] and outs["main_stack"] == []
    y = np.concatenate(outs["t"] + outs["main"], axis=2).reshape(-1)
    assert np.abs(y - models.two_state_reference(x)[0]).max() <= ATOL  # state carried across threads


def test_chunk_must_be_the_built_one(engine):
    with pytest.raises(UsageError, match=r"streams chunks of 4 samples \(0.25 ms\), not 8: use --chunk-ms 0.25 "
                                         r"or rebuild with --chunk-ms 0.5"):
        engine(chunk_samples=8)
    s = engine()
    with pytest.raises(UsageError, match="push\\(\\) on an inactive session"):
        s.push(np.zeros((1, 1, HOP), np.float32))
    with s, pytest.raises(UsageError, match="NaN/Inf"):
        s.push(np.full((1, 1, HOP), np.nan, np.float32))


def test_plan_from_another_version_fails_with_rebuild_hint(monkeypatch, two_state, tmp_path):
    fakes.install(monkeypatch, version="10.3.0")
    out = bt.build_trt(two_state, out_dir=tmp_path)
    eng = load_or_rebuild(out)
    f = fakes.install(monkeypatch, version="10.4.0")  # the plan cannot be deserialized any more
    with pytest.raises(ArtifactError, match="TensorRT 10.4.0 cannot deserialize .*engine.plan .*rebuild it with "
                                            "'cosyedge build --backend tensorrt"):
        eng().activate()
    assert f.state.contexts_alive == 0 and f.state.stack() == []  # context released on failure


def test_cuda_graph_needs_cuda_python(monkeypatch, two_state, tmp_path):
    f = fakes.install(monkeypatch, version="10.3.0", with_cudart=False)
    import sys

    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    eng = load_or_rebuild(bt.build_trt(two_state, out_dir=tmp_path))
    with pytest.raises(DependencyError, match="CUDA graph capture needs cuda-python"):
        eng(cuda_graph=True).activate()
    assert f.state.contexts_alive == 0


def test_no_gpu(monkeypatch, two_state, tmp_path):
    fakes.install(monkeypatch, version="10.3.0")
    eng = load_or_rebuild(bt.build_trt(two_state, out_dir=tmp_path))
    fakes.install(monkeypatch, version="10.3.0", gpus=())
    with pytest.raises(DependencyError, match="needs CUDA device 0 but 0 GPU"):
        eng().activate()


def test_missing_stack_messages():
    assert missing_stack_message(True, True, True) is None
    m = missing_stack_message(False, True, None, "build TensorRT engines")
    assert m.startswith("to build TensorRT engines cosyedge needs tensorrt (missing); install: pip install "
                        "'cosyedge[trt]'") and "JetPack" in m and m.endswith("or use --backend onnxruntime")
    m = missing_stack_message(True, False, None)
    assert "needs pycuda (missing)" in m
    m = missing_stack_message(True, True, False)
    assert "needs an NVIDIA GPU with its CUDA driver (missing)" in m and "nvidia-smi" in m and "pip" not in m
    assert "\n" not in m


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_bindings_api_path(monkeypatch, two_state, tmp_path, cuda_graph):
    """execute_async_v2 with one bindings list per ping-pong parity (TensorRT without execute_async_v3)."""
    fakes.install(monkeypatch, version="8.6.1", v3=False)
    eng = load_or_rebuild(bt.build_trt(two_state, out_dir=tmp_path))
    x = _x(200, seed=7)
    with eng(cuda_graph=cuda_graph) as s:
        assert s._feat.execute_api == "v2"
        y = stream_array(s, x)
        b0, b1 = s._bindings
        assert b0 != b1 and sorted(b0) == sorted(b1)  # same buffers, state in/out swapped
    assert np.abs(y - models.two_state_reference(x)[0]).max() <= ATOL


def test_no_allocation_per_chunk(engine, fake10):
    """Device memory and state size stay constant over a long stream (no per-chunk allocations)."""
    x = _x(2000 * HOP, seed=8)
    with engine() as s:
        n_buffers = len(fake10.state.memory)
        sizes = sorted(a.size for a in fake10.state.memory.values())
        stream_array(s, x)
        assert len(fake10.state.memory) == n_buffers
        assert sorted(a.size for a in fake10.state.memory.values()) == sizes
        assert all(v.shape == (1, 1, 4) for v in s.state().values())
    assert len(fake10.state.memory) == 0  # everything freed on deactivate
