"""batch_rewrite: one-frame convs and matrix-vector MatMuls as batched GEMMs; StreamPool runs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import soundfile as sf
from onnx import TensorProto, helper, numpy_helper

from cosyedge.passes.batch_gemm import batch_rewrite
from cosyedge.runtime.pool import StreamPool
from tests.helpers import models
from tests.runtime.test_pool import _inputs, _solo
from tests.helpers.streams import pool_outputs, session_outputs

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def _graph() -> onnx.ModelProto:
    """x (N, 8, 9), x2 (N, 8, 5): a dilated one-frame conv + bias, a matrix-vector MatMul on its output, a
    depthwise one-frame conv + bias, a conv with 7 output frames, and a one-frame conv feeding an ArgMax."""
    rng = np.random.default_rng(0)
    w = {"wa": rng.standard_normal((6, 8, 3)), "ba": rng.standard_normal(6), "wm": rng.standard_normal((7, 6)),
         "wd": rng.standard_normal((16, 1, 5)), "bd": rng.standard_normal(16), "wc": rng.standard_normal((4, 8, 3)),
         "wk": rng.standard_normal((5, 8, 9))}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()]
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["ya"], dilations=[4], kernel_shape=[3], name="a"),
        helper.make_node("MatMul", ["wm", "ya"], ["ym"], name="m"),
        helper.make_node("Conv", ["x2", "wd", "bd"], ["yd"], group=8, kernel_shape=[5], name="d"),
        helper.make_node("Conv", ["x", "wc"], ["yc"], kernel_shape=[3], name="c"),
        helper.make_node("Conv", ["x", "wk"], ["yk"], kernel_shape=[9], name="k"),
        helper.make_node("ArgMax", ["yk"], ["choice"], axis=1, name="choose"),
    ]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, ["N", 8, "T"]),
                                       helper.make_tensor_value_info("x2", f, ["N", 8, 5])],
                          [helper.make_tensor_value_info(n, f, None) for n in ("ya", "ym", "yd", "yc")]
                          + [helper.make_tensor_value_info("choice", TensorProto.INT64, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_batch_rewrite_replaces_one_frame_convs_and_matvecs_and_keeps_the_rest():
    model = _graph()
    new, counts = batch_rewrite(model, {"x": ["N", 8, 9]})
    assert counts == {"conv_gemm": 1, "conv_depthwise": 1, "matmul_gemm": 1, "kept_sensitive": 1}
    names = {n.name for n in new.graph.node}
    assert {"c", "k", "choose"} <= names and not {"a", "m", "d"} & names  # 7-frame conv and ArgMax feeder kept
    assert len(model.graph.node) == 6  # the input model is untouched
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((5, 8, 9)).astype(np.float32),
             "x2": rng.standard_normal((5, 8, 5)).astype(np.float32)}
    want, got = _run(model, feeds), _run(new, feeds)
    for w, g in zip(want, got):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert np.abs(want[0]).max() > 1  # real values, not zeros
    # a chunk of another length gives 3 frames from conv 'a': nothing matches the one-frame rule then
    assert batch_rewrite(model, {"x": ["N", 8, 11], "x2": ["N", 8, 6]})[1]["conv_gemm"] == 0


@pytest.mark.skipif(not REFERENCE.is_file(), reason="bundled reference model missing")
def test_pool_on_the_reference_model_equals_single_sessions_on_real_speech():
    """Three streams of the demo recording (17.3 s, other offsets) through the rewritten graph in one pool: each is
    the single-session output to >= 120 dB; the pitch lag choice (ArgMax) and the log-power spectra stay unrewritten."""
    x, _ = sf.read(str(NOISY), dtype="float32")
    hop = 160
    n = (x.size // hop) * hop
    streams = [np.roll(x, 997 * i)[:n].copy() for i in range(3)]
    with StreamPool(REFERENCE, max_streams=4) as pool:
        assert pool.rewritten == {"conv_gemm": 26, "kept_sensitive": 6, "onehot_conv": 2, "conv_matvec": 2,
                                  "matvec_groups": 1, "scalar_rank": 7, "state_layout": 12, "perm_gather": 2,
                                  "gather_inner": 1, "reshape_chain": 17, "ring_state": 8}
    with StreamPool(REFERENCE, max_streams=4, batch_rewrite=False) as pool:
        assert pool.rewritten == {"conv_sum": 12}  # no batched GEMMs: the graph OrtStreamSession runs
    for want, got in zip(session_outputs(REFERENCE, streams, hop), pool_outputs(REFERENCE, streams, hop, 4)):
        snr = 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / np.sum((want - got).astype(np.float64) ** 2))
        assert snr >= 120.0, snr


def test_pool_keeps_slots_compact_when_a_stream_leaves(tmp_path):
    """Stream 1 of 4 leaves after 3 ticks: stream 3 moves into its slot, so the next ticks of the 3 left run in
    place (no state gather), and every stream still equals its single-session output."""
    model = models.make_two_state_model(tmp_path / "two.onnx", hop=4)
    chunk = 4
    xs = _inputs(4, chunks=8, chunk=chunk, seed=11)
    with StreamPool(model, max_streams=4, chunk_samples=chunk) as pool:
        ids = [pool.join() for _ in xs]
        outs = [[] for _ in xs]
        for t in range(8):
            live = [i for i in range(4) if i != 1 or t < 3]
            if t == 3:
                pool.leave(ids[1])
                assert sorted(pool._slot_of.values()) == [0, 1, 2]
                before = pool.inplace_ticks
            res = pool.push({ids[i]: xs[i][t * chunk:(t + 1) * chunk] for i in live})
            for i in live:
                outs[i].append(res[ids[i]])
        assert pool.inplace_ticks == before + 5
    for i, x in enumerate(xs):
        want = _solo(model, x, chunk)[: len(outs[i]) * chunk]
        np.testing.assert_allclose(np.concatenate(outs[i]), want, atol=1e-5)
    assert np.abs(np.concatenate(outs[3]) - np.concatenate(outs[0])).max() > 0.1
