"""Pass ``conv_matvec``: a strided one-frame ``Conv`` over its whole input, left per stream by ``batch_gemm``, becomes
the same matrix-vector product as a ``MatMul`` (row blocks of the weight when it is larger than the L2 cache), with
the same float result bit for bit.

``batch_gemm`` keeps the convolutions in front of a ``Log``/``ArgMax`` per stream (a batched GEMM would sum in
another order). When such a conv reads its whole input in one frame (window length = input length, dilation 1,
stride > 1: the reference model's analysis filterbanks ``/analysis/conv/Conv`` (322 x 320), ``/lw_analysis/conv/Conv``
(256 x 1024) and ``/pc_frames/poly/Conv`` (160 x 160)), ONNX Runtime's CPU ``Conv`` runs, per stream, MLAS's
matrix-vector kernel on the flattened input: exactly what ``MatMul(W (M, C*L), x (C*L, 1))`` runs, without the
convolution's per-stream set-up. A weight above :data:`BLOCK_BYTES` x 2 is cut into blocks of rows (a multiple of 16
rows, at most :data:`BLOCK_BYTES` each) so a block stays in the L2 cache while every stream of the tick reads it,
instead of the whole weight streaming from L3 once per stream (the 1 MB ``lw_analysis`` weight: 1.27 ms of a 7.3 ms
batched run at 64 streams). Every output row is still one stream's dot product in the kernel's order.

Rewrites (top-level graph, default-domain ``Conv``): weight an FP32 initializer (M, C, L), ``group`` 1, no bias, no
padding, dilation 1, stride > 1, input (N, C, L) (C, L known), output (N, M, 1): ``Reshape`` (N, C*L, 1) ->
``MatMul`` (M, C*L) [or one ``MatMul`` per row block -> ``Concat`` axis 1]. (With stride 1 ONNX Runtime runs such a conv
through another kernel that sums otherwise: left alone.)

Bit-identity rests on ONNX Runtime 1.32's CPU kernels (measured, x86-64); ``tests/passes/test_conv_matvec.py`` proves
it on generated graphs and ``tests/runtime/test_pool_passes.py`` on the bundled model, so a kernel that sums otherwise
fails there.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after ``batch_gemm`` (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator specs (Conv, MatMul broadcasting); ONNX Runtime ``core/mlas/lib/sgemm.cpp`` (the N == 1
matrix-vector case) and ``core/mlas/lib/convolve.cpp``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import Builder, node_attrs, rewrite_each
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")

BLOCK_BYTES = 256 * 1024
"""int: the most weight bytes per row block (a quarter of a 1 MiB L2); weights up to twice this stay whole."""


def block_rows(m_out: int, k: int) -> int:
    """Rows per weight block (int) for an (m_out, k) FP32 weight: ``m_out`` when it is at most 2 x
    :data:`BLOCK_BYTES`, else the largest multiple of 16 rows within :data:`BLOCK_BYTES` (at least 16)."""
    if m_out * k * 4 <= 2 * BLOCK_BYTES:
        return m_out
    return max(16, (BLOCK_BYTES // (k * 4)) // 16 * 16)


def _rewrite(node: Any, inits: dict, shapes: dict) -> Builder | None:
    """The MatMul replacement of whole-input one-frame ``Conv`` ``node``, or None when it does not match."""
    if len(node.input) < 2 or node.input[1] not in inits or (len(node.input) > 2 and node.input[2]):
        return None
    w = onnx.numpy_helper.to_array(inits[node.input[1]])
    xs, ys = shapes.get(node.input[0]), shapes.get(node.output[0])
    if w.dtype != np.float32 or w.ndim != 3 or not xs or len(xs) != 3 or not ys or len(ys) != 3 or ys[2] != 1:
        return None
    a = node_attrs(node)
    m_out, c, k = w.shape
    if (xs[1] != c or xs[2] != k or int(a.get("group", 1)) != 1 or any(a.get("pads", [0, 0]))
            or int((a.get("dilations") or [1])[0]) != 1 or int((a.get("strides") or [1])[0]) <= 1
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID")):
        return None
    w2 = w.reshape(m_out, c * k)
    b = Builder(node.name or node.output[0], "matvec")
    x = b.node("Reshape", [node.input[0], b.const("shape", np.array([-1, c * k, 1], np.int64))])
    r = block_rows(m_out, c * k)
    if r >= m_out:
        b.node("MatMul", [b.const("weight", w2), x], out=node.output[0])
        return b
    parts = [b.node("MatMul", [b.const("weight", w2[i:i + r]), x]) for i in range(0, m_out, r)]
    b.node("Concat", parts, out=node.output[0], axis=1)
    return b


def matvec_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose strided whole-input one-frame convolutions are (row-blocked) MatMuls.

    Args:
        model (onnx.ModelProto): A streaming graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims with the batch axis symbolic.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"conv_matvec": <convs replaced>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    return rewrite_each(model, "Conv", lambda node, inits: _rewrite(node, inits, shapes), "conv_matvec")


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`matvec_rewrite` at ``target.dims``."""
    return matvec_rewrite(model, target.dims)


__all__ = ["BLOCK_BYTES", "block_rows", "matvec_rewrite", "run"]
