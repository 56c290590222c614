"""A streamify pre-roll mask (``x * (counter + arange(frames of x) >= delay)``, ``cosyedge/surgery/clock.py``
``before_frame``) no longer hides the shapes the pool passes match on: ``partial_shapes`` knows the mask's Range length
(ONNX infers a Range only from initializer bounds; here the limit is ``Cast(Shape(x)[2])``), so the masked tensor
keeps its one-frame time axis; and ``batch_gemm`` does not keep a conv as it is because the mask's ``Less`` reads the
conv's output *shape* (the cone of a sensitive op stops at ``Shape``). Before, every conv behind such a mask ran
unbatched and no state behind it was laid out time-major or turned into a ring (asteroid's causal Conv-TasNet TCN:
tests/passes/test_ring_state_thirdparty_tcn.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.batch_gemm import batch_rewrite
from cosyedge.passes.shapes import partial_shapes
from tests.passes.graphs import model, run

F32 = lambda *v: np.array(v, np.float32)  # noqa: E731


def _masked_conv(c: int = 4, m_out: int = 6, k: int = 3, delay: float = 2.0):
    """x (N, c, 1), s (N, c, k-1), counter (N, 1): h = Conv(Concat(s, x)) (N, m_out, 1); y = h * mask, the mask
    built as streamify's clock builds it from Shape(h)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Concat", ["s", "x"], ["w"], axis=2),
             helper.make_node("Conv", ["w", "wt", "b"], ["h"]),
             helper.make_node("Shape", ["h"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["n"], axis=0),
             helper.make_node("Squeeze", ["n", "zero_ax"], ["n0"]),
             helper.make_node("Cast", ["n0"], ["nf"], to=1),
             helper.make_node("Range", ["f0", "nf", "f1"], ["rng"]),
             helper.make_node("Add", ["counter", "rng"], ["idx"]),
             helper.make_node("Less", ["idx", "delay"], ["early"]),
             helper.make_node("Not", ["early"], ["late"]),
             helper.make_node("Cast", ["late"], ["keep"], to=1),
             helper.make_node("Unsqueeze", ["keep", "one_ax"], ["mask"]),
             helper.make_node("Mul", ["h", "mask"], ["y"])]
    inits = {"wt": rng.standard_normal((m_out, c, k)).astype(np.float32), "b": F32(*range(m_out)),
             "two": np.array([2], np.int64), "zero_ax": np.array([0], np.int64), "one_ax": np.array([1], np.int64),
             "f0": np.array(0, np.float32), "f1": np.array(1, np.float32), "delay": np.array([[delay]], np.float32)}
    dims = {"x": ["N", c, 1], "s": ["N", c, k - 1], "counter": ["N", 1]}
    return model(nodes, dims, ["y"], inits), dims


def test_partial_shapes_knows_the_masked_tensors_time_axis():
    m, dims = _masked_conv()
    shapes = partial_shapes(m, dims)
    assert shapes["rng"] == [1]  # was [None]: Range's limit is Cast(Shape(h)[2]), not an initializer
    assert shapes["mask"] == [None, 1, 1] and shapes["y"] == [None, 6, 1]  # was [None, 6, None]


def test_batch_gemm_batches_a_conv_whose_shape_a_mask_reads():
    m, dims = _masked_conv()
    new, counts = batch_rewrite(m, dims)
    assert counts["conv_gemm"] == 1 and counts["kept_sensitive"] == 0  # was 0 and 1 (the Less cone ran into Shape)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((3, 4, 1)).astype(np.float32),
             "s": rng.standard_normal((3, 4, 2)).astype(np.float32), "counter": F32([0.0], [1.0], [7.0])}
    (y,), (y2,) = run(m, feeds), run(new, feeds)
    assert np.allclose(y2, y, rtol=1e-6, atol=1e-6) and np.all(y[:2] == 0) and np.abs(y[2]).max() > 1.0
