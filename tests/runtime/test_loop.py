"""The shared stream mechanics: session_from_onnx, the one chunk loop, StreamContract.require_streaming."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError
from cosyedge.runtime import OrtStreamSession, loop
from cosyedge.runtime.ort import session_from_onnx
from tests.helpers import models

HOP = 4


@pytest.fixture(scope="module")
def fir(tmp_path_factory):
    return models.make_fir_model(tmp_path_factory.mktemp("loop") / "fir.onnx", hop=HOP)


@pytest.fixture(scope="module")
def two_state(tmp_path_factory):
    return models.make_two_state_model(tmp_path_factory.mktemp("loop2") / "two_state.onnx", hop=HOP)


def _x(n: int, seed: int = 0) -> np.ndarray:
    return (0.3 * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def _infer(sess):
    names = [o.name for o in sess.get_outputs()]
    return lambda feeds: dict(zip(names, sess.run(None, feeds)))


def test_session_from_path_bytes_and_proto_agree(fir):
    import onnx

    c = StreamContract.from_onnx(fir)
    feeds = {c.input: _x(HOP).reshape(1, 1, HOP), **{s.input: s.zeros(1) for s in c.states}}
    proto = onnx.load(str(fir))
    outs = [session_from_onnx(src).run(None, feeds)[0]
            for src in (fir, str(fir), proto, proto.SerializeToString())]
    for o in outs[1:]:
        np.testing.assert_array_equal(outs[0], o)


def test_session_options_are_the_callers(fir):
    sess = session_from_onnx(fir, threads=2, inter_threads=None, optimize=False, log_severity=3)
    so = sess.get_session_options()
    assert so.intra_op_num_threads == 2
    assert so.log_severity_level == 3
    import onnxruntime as ort

    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_stream_equals_the_runtime_session(two_state):
    """loop.stream over raw ONNX Runtime == OrtStreamSession (which keeps its own ping-pong state loop)."""
    c = StreamContract.from_onnx(two_state)
    x = _x(12 * HOP)
    chunks = loop.stream(_infer(session_from_onnx(two_state)), c, {c.input: x.reshape(1, 1, -1)}, 3 * HOP,
                         outputs=[c.output])
    got = np.concatenate([ch[c.output] for ch in chunks], axis=-1).reshape(-1)
    with OrtStreamSession(two_state, chunk_samples=3 * HOP) as s:
        want = np.concatenate([s.push(x[i:i + 3 * HOP].reshape(1, 1, -1))[c.output].reshape(-1).copy()
                               for i in range(0, x.size, 3 * HOP)])
    np.testing.assert_array_equal(got, want)


def test_stream_feeds_states_back_and_forces_them(two_state):
    c = StreamContract.from_onnx(two_state)
    x = _x(8 * HOP, seed=1).reshape(1, 1, -1)
    infer = _infer(session_from_onnx(two_state))
    seen = []
    loop.stream(infer, c, {c.input: x}, HOP, on_chunk=lambda k, feeds, res: seen.append((k, feeds, res)))
    assert [k for k, _f, _r in seen] == list(range(8))
    for (_k, _f, res), (_k2, feeds, _r) in zip(seen, seen[1:]):
        for s in c.states:
            np.testing.assert_array_equal(feeds[s.input], res[s.output])
    # teacher forcing: the recorded states fed back give the same outputs; zeroing every state does not
    forced = [{s.input: f[s.input] for s in c.states} for _k, f, _r in seen]
    again = loop.stream(infer, c, {c.input: x}, HOP, forced_states=forced, outputs=[c.output])
    for (_k, _f, res), r2 in zip(seen, again):
        np.testing.assert_array_equal(res[c.output], r2[c.output])
    zeroed = loop.stream(infer, c, {c.input: x}, HOP, zero=[s.input for s in c.states], outputs=[c.output])
    assert any(not np.array_equal(res[c.output], z[c.output]) for (_k, _f, res), z in zip(seen, zeroed))


def test_stream_maps_errors_to_one_line(two_state):
    c = StreamContract.from_onnx(two_state)

    def boom(_feeds):
        raise RuntimeError("backend says no\nsecond line")

    with pytest.raises(ArtifactError, match="chunk 0 failed"):
        loop.stream(boom, c, {c.input: np.zeros((1, 1, HOP), np.float32)}, HOP,
                    on_error=lambda err, k: ArtifactError(f"chunk {k} failed"))
    with pytest.raises(RuntimeError, match="backend says no"):
        loop.stream(boom, c, {c.input: np.zeros((1, 1, HOP), np.float32)}, HOP)


def test_require_streaming(tmp_path, fir):
    StreamContract.from_onnx(fir).require_streaming(fir)  # a stream graph passes
    stateless = models.make_stateless_model(tmp_path / "stateless.onnx", hop=HOP)
    c = StreamContract.from_onnx(stateless)
    assert not c.is_streaming
    with pytest.raises(ArtifactError, match=r"stateless.onnx has no streaming state \(state_in\.\*/state_out\.\*\); "
                                            r"run 'cosyedge streamify' first"):
        c.require_streaming(stateless)
