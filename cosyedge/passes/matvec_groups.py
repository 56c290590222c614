"""Pass ``matvec_groups``: a scaled matrix-vector ``MatMul(W, x * s)`` run per stream becomes one GEMM per group of
streams, with the same float result bit for bit.

``batch_gemm`` leaves the matrix products in front of a ``Log``/``ArgMax`` as they are (its ``kept_sensitive``): a
batched GEMM sums in another order, and the log power of a quiet bin magnifies that (113 dB from single sessions).
One of them can still be batched exactly. ONNX Runtime folds a scalar ``Mul`` feeding a ``MatMul`` into the product
(``FusedMatMul``, alpha = s), and with alpha != 1 MLAS runs each stream's (M, K) x (K, 1) product through its
general SGEMM: every output is one fused multiply-add chain over k = 0..K-1 (one K block: MLAS widens the K block to
1024 when the GEMM has at most 16 columns), times alpha. A GEMM of W by G streams side by side, (M, K) x (K, G), runs
the same chain for every column as long as MLAS keeps K in one block, which it does for G <= 16 (K <= 1024),
G <= 32 (K <= 512), G <= 64 (K <= 256) (``MlasSgemmOperation``: K block 128 x 128 / N block, the N block halved
from 128 while it is at least twice G). The reference model's ``/MatMul_1`` (322 x 320, the pitch branch's
spectrum) took 2.1 ms of an 11.5 ms batched run at 64 streams as 64 matrix-vector products (ORT profile, 1 thread,
shared CPU; ``docs/bench/roofline_reference.json``).

Rewrites (top-level graph only): ``MatMul(W, Mul(x, s))`` (either Mul input order), ``W`` an FP32 initializer
(M, K) with K <= 1024, ``s`` a one-element FP32 initializer, the Mul read by that MatMul alone, ``x`` (N, K, 1):
``Reshape`` (N, K) -> ``Pad`` rows to a multiple of G (``Shape``, ``Neg``, ``Mod``, ``Concat``) -> ``Reshape``
(B, G, K) -> ``Transpose`` (B, K, G) -> ``Mul`` s -> ``MatMul`` W -> ``Transpose`` (B, G, M) -> ``Reshape`` (B*G, M)
-> ``Slice`` the N rows -> ``Reshape`` (N, M, 1). The ``Mul`` stays next to the ``MatMul`` so ONNX Runtime fuses
it exactly as in the stored graph.

Bit-identity rests on MLAS's x86-64 SGEMM blocking (ONNX Runtime 1.32); ``tests/passes/test_matvec_groups.py``
proves it on the reference model and on generated graphs, so another ONNX Runtime or CPU that sums otherwise fails
there, not silently.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after ``batch_gemm`` (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX Runtime ``core/mlas/lib/sgemm.cpp`` (``MlasSgemmOperation``: the M == 1 / N == 1 kernels when alpha
is 1, the stride expansion when N is small) and ``core/optimizer/matmul_scale_fusion.cc``; ONNX operator specs
(MatMul broadcasting, Pad, Mod).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model, spliced
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")

MAX_K = 1024
"""int: the longest product rewritten (MLAS's widest K block: beyond it a stream's own product is split too)."""


def group_size(k: int) -> int:
    """Streams per GEMM (int) for products of length ``k`` (<= :data:`MAX_K`): the most columns for which MLAS keeps
    ``k`` in one K block (16 -> 1024, 32 -> 512, 64 -> 256)."""
    g = 64
    while g > 16 and (128 * 128) // g < k:
        g //= 2
    return g


def _scalar(t: Any) -> bool:
    return t is not None and t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims, dtype=np.int64)) == 1


def _rewrite(mm: Any, mul: Any, inits: dict, shapes: dict) -> Builder | None:
    """The grouped replacement of ``MatMul(W, Mul(x, s))`` (nodes ``mm``, ``mul``), or None when it does not match."""
    wt = inits.get(mm.input[0])
    if wt is None or wt.data_type != onnx.TensorProto.FLOAT or len(wt.dims) != 2 or mm.input[1] in inits:
        return None
    if _scalar(inits.get(mul.input[1])) and mul.input[0] not in inits:
        x, s = mul.input
    elif _scalar(inits.get(mul.input[0])) and mul.input[1] not in inits:
        s, x = mul.input
    else:
        return None
    m_out, k = (int(d) for d in wt.dims)
    xs = shapes.get(x)
    if k > MAX_K or not xs or len(xs) != 3 or xs[1] != k or xs[2] != 1 or shapes.get(mul.output[0]) != xs:
        return None
    g = group_size(k)
    b = Builder(mm.name or mm.output[0], "grouped")
    x2 = b.node("Reshape", [x, b.const("shape", np.array([-1, k], np.int64))])
    n = b.node("Shape", [x2], start=0, end=1)
    pad = b.node("Mod", [b.node("Neg", [n]), b.const("group", np.array([g], np.int64))])
    pads = b.node("Concat", [b.const("zeros", np.zeros(2, np.int64)), pad, b.const("zero", np.zeros(1, np.int64))],
                  axis=0)
    xp = b.node("Pad", [x2, pads])
    xg = b.node("Reshape", [xp, b.const("shape", np.array([-1, g, k], np.int64))])
    xt = b.node("Transpose", [xg], perm=[0, 2, 1])
    y = b.node("MatMul", [mm.input[0], b.node("Mul", [xt, s])])
    yt = b.node("Transpose", [y], perm=[0, 2, 1])
    yr = b.node("Reshape", [yt, b.const("shape", np.array([-1, m_out], np.int64))])
    ys = b.node("Slice", [yr, b.const("starts", np.zeros(1, np.int64)), n, b.const("axes", np.zeros(1, np.int64))])
    b.node("Reshape", [ys, b.const("shape", np.array([-1, m_out, 1], np.int64))], out=mm.output[0])
    return b


def group_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose scaled matrix-vector MatMuls run as one GEMM per group of streams.

    Args:
        model (onnx.ModelProto): A streaming graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims with the batch axis symbolic.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"matvec_groups": <MatMuls replaced>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m = copy_model(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    prod = {o: (i, n) for i, n in enumerate(g.node) for o in n.output}
    readers = collections.Counter(i for n in g.node for i in n.input)
    outputs = {o.name for o in g.output}
    replace, new_inits = {}, []
    for i, node in enumerate(g.node):
        if node.op_type != "MatMul" or node.domain not in DEFAULT_DOMAINS or len(node.input) != 2:
            continue
        j, mul = prod.get(node.input[1], (None, None))
        if (mul is None or mul.op_type != "Mul" or mul.domain not in DEFAULT_DOMAINS or j in replace
                or readers[mul.output[0]] != 1 or mul.output[0] in outputs):
            continue
        b = _rewrite(node, mul, inits, shapes)
        if b is None:
            continue
        replace[j], replace[i] = [], b.nodes
        new_inits += b.inits
    m, _ = spliced(m, replace, new_inits)
    return m, {"matvec_groups": sum(1 for v in replace.values() if v)}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`group_rewrite` at ``target.dims``."""
    return group_rewrite(model, target.dims)


__all__ = ["MAX_K", "group_rewrite", "group_size", "run"]
