"""Pass ``onehot_conv``: a one-frame convolution whose every weight row is one tap of weight 1 is a copy of the
window: a ``Reshape`` (the taps in window order) or a ``Gather`` of the flattened window.

Such a "convolution" only picks samples (the reference model's pitch branch ``/pc_frames/taps/Conv``: a depthwise
conv, ``group`` 160, kernel 4, weight (640, 1, 4) with one 1.0 per row, turns the (N, 160, 4) window into (N, 640, 1)
channel by channel). ONNX Runtime still runs it as a grouped convolution: one tiny GEMM per group and stream (160 x
batch GEMM calls), 1.45 ms of an 11.5 ms batched run at 64 streams (ORT profile, 1 thread, shared CPU;
``docs/bench/roofline_reference.json``). Rewritten it costs a reshape (no copy) or one gather.

Rewrites (top-level graph, default-domain ``Conv`` only; anything else is left alone):

* weight an FP32 initializer (M, C/group, K), each row holding exactly one nonzero, equal to 1.0; no bias or an
  all-zero bias; input (N, C, L) with C and L known, no padding, exactly one output frame (N, M, 1):
  output channel ``o`` = input channel ``group(o) * C/group + c`` at time ``k * dilation``, where row ``o`` has its
  1.0 at ``(c, k)``; ``Reshape`` (N, M, 1) when that is every window sample in order, else ``Reshape`` (N, C*L) ->
  ``Gather`` (axis 1, constant indices) -> ``Reshape`` (N, M, 1).

The result equals the convolution bit for bit on finite inputs (``1 * x + 0 * y + ... = x`` exactly; only the sign
of a zero sample may differ); it holds at any batch.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after ``batch_gemm`` (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator specs (Conv, Gather, Reshape).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import Builder, node_attrs, rewrite_each
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")


def onehot_indices(w: np.ndarray, channels: int, length: int, group: int, dilation: int) -> np.ndarray | None:
    """Flat window index (int64 (M,), into the (C, L) window) each output channel copies, or None when a row of the
    weight ``w`` (M, C/group, K) is not exactly one tap of 1.0 (or a tap falls outside the window)."""
    m_out, cg, k = w.shape
    if group < 1 or channels % group or m_out % group or cg != channels // group:
        return None
    rows = w.reshape(m_out, cg * k)
    nz = rows != 0
    if not (nz.sum(axis=1) == 1).all():
        return None
    hot = nz.argmax(axis=1)
    if not (rows[np.arange(m_out), hot] == 1.0).all():
        return None
    c, tap = hot // k, hot % k
    if (tap * dilation >= length).any():
        return None
    grp = np.arange(m_out) // (m_out // group)
    return ((grp * cg + c) * length + tap * dilation).astype(np.int64)


def _rewrite(node: Any, inits: dict, shapes: dict) -> Builder | None:
    """The replacement of one-hot ``Conv`` ``node``, or None when it does not match."""
    if len(node.input) < 2 or node.input[1] not in inits:
        return None
    w = onnx.numpy_helper.to_array(inits[node.input[1]])
    if len(node.input) > 2 and node.input[2]:
        b = inits.get(node.input[2])
        if b is None or onnx.numpy_helper.to_array(b).any():
            return None
    xs, ys = shapes.get(node.input[0]), shapes.get(node.output[0])
    if w.dtype != np.float32 or w.ndim != 3 or not xs or len(xs) != 3 or not ys or len(ys) != 3 or ys[2] != 1:
        return None
    a = node_attrs(node)
    c, length = xs[1], xs[2]
    if c is None or length is None or any(a.get("pads", [0, 0])) or a.get("auto_pad", b"NOTSET") not in (
            b"NOTSET", b"VALID", "NOTSET", "VALID"):
        return None
    d = int((a.get("dilations") or [1])[0])
    s = int((a.get("strides") or [1])[0])
    span = d * (w.shape[2] - 1) + 1
    if span > length or (length - span) // s != 0:  # not exactly one output frame
        return None
    idx = onehot_indices(w, c, length, int(a.get("group", 1)), d)
    if idx is None:
        return None
    m_out = w.shape[0]
    b = Builder(node.name or node.output[0], "onehot")
    y_shape = b.const("shape", np.array([-1, m_out, 1], np.int64))
    if m_out == c * length and (idx == np.arange(m_out)).all():
        b.node("Reshape", [node.input[0], y_shape], out=node.output[0])
        return b
    x = b.node("Reshape", [node.input[0], b.const("shape", np.array([-1, c * length], np.int64))])
    x = b.node("Gather", [x, b.const("indices", idx)], axis=1)
    b.node("Reshape", [x, y_shape], out=node.output[0])
    return b


def onehot_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose one-hot one-frame convolutions are reshapes/gathers of their window.

    Args:
        model (onnx.ModelProto): A streaming graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims with the batch axis symbolic
            (``{"audio": ["N", 1, 160], ...}``), to find one-frame convolutions.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"onehot_conv": <convs replaced>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    return rewrite_each(model, "Conv", lambda node, inits: _rewrite(node, inits, shapes), "onehot_conv")


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`onehot_rewrite` at ``target.dims``."""
    return onehot_rewrite(model, target.dims)


__all__ = ["onehot_indices", "onehot_rewrite", "run"]
