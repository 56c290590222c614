"""Pass ``batch_gemm``: one-frame convolutions and matrix-vector MatMuls of a streaming graph become one GEMM per batch.

A streaming graph run on one hop computes every convolution for exactly one output frame: the conv's input is
the state window (``Concat(state, x)``), its output has length 1. ONNX Runtime's CPU ``Conv`` loops over the batch
and runs one im2col + matrix-*vector* product per stream, reading the whole weight once per stream; at 64 streams
the reference model spends over half of a batched run there (ONNX Runtime profile, 1 thread, batch 64: Conv
6.6 ms and the spectrum MatMul 1.5 ms of 11.4 ms; ``scripts/benchmarks/bench_streams.py``). Written as one ``MatMul`` of the batch ``(N, C*K)`` by the weight
``(C*K, M)``, the weight is read once per tick and MLAS runs a real GEMM. The same holds for
``MatMul(W, x)`` with a constant ``W`` (P, K) and ``x`` (N, K, 1): ONNX Runtime broadcasts it into N
matrix-vector products; ``MatMul(x (N, K), W^T)`` is one GEMM.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` with more than one stream (:data:`cosyedge.passes.POOL_PASSES`,
any provider) and by the INT8 ``ort_matmul`` build at one hop (:data:`cosyedge.passes.MATMUL_FORM_PASSES`).

Rewrites (top-level graph only; anything that does not match exactly is left as it is):

* ``Conv`` on (N, C, L), weight an FP32 initializer (M, C, K), ``group`` 1, no padding, one output frame:
  ``Slice`` (the K taps, ``dilation`` apart; omitted when they are the whole window) -> ``Reshape`` (N, C*K)
  -> ``MatMul`` (C*K, M) -> ``Add`` bias -> ``Reshape`` (N, M, 1).
* Depthwise ``Conv`` (``group`` = C, weight (C*r, 1, K)), one output frame: ``Slice`` -> ``Reshape``
  (N, C, 1, K) -> ``Mul`` by the weight (C, r, K) -> ``ReduceSum`` over the taps -> ``Reshape`` (N, C*r, 1)
  (-> ``Add`` bias).
* ``MatMul(W, x)``, ``W`` an FP32 initializer (P, K), ``x`` (N, K, 1): ``Reshape`` (N, K) -> ``MatMul`` (K, P)
  -> ``Reshape`` (N, P, 1).

The result is the same function; the float sums run in another order (MLAS GEMM blocking instead of one dot
product per stream), so outputs agree to rounding (tests: StreamPool vs one OrtStreamSession per stream on the
demo recording, SNR >= 120 dB), not bit for bit.

Source: ONNX operator specs (onnx.ai/onnx/operators: Conv, MatMul, Slice, ReduceSum); the batching argument is
the im2col + GEMM lowering of convolution (Chellapilla et al., "High Performance Convolutional Neural Networks
for Document Processing", 2006) with the batch as the GEMM's N dimension.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model, node_attrs, opset
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")


_Builder = Builder


def _conv(node: Any, inits: dict[str, np.ndarray], shapes: dict[str, list], opset: int) -> _Builder | None:
    """The batched replacement of one-frame ``Conv`` ``node``, or None when it does not match."""
    if len(node.input) < 2 or node.input[1] not in inits:
        return None
    w = inits[node.input[1]]
    bias = inits.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 2 and node.input[2] and bias is None:
        return None
    xs, ys = shapes.get(node.input[0]), shapes.get(node.output[0])
    if w.dtype != np.float32 or w.ndim != 3 or not xs or len(xs) != 3 or not ys or len(ys) != 3:
        return None
    a = node_attrs(node)
    m_out, cg, k = w.shape
    c, length = xs[1], xs[2]
    d = int((a.get("dilations") or [1])[0])
    s = int((a.get("strides") or [1])[0])
    g = int(a.get("group", 1))
    if (c is None or length is None or ys[2] != 1 or any(a.get("pads", [0, 0])) or a.get("auto_pad", b"NOTSET")
            not in (b"NOTSET", b"VALID", "NOTSET", "VALID")):
        return None
    span = d * (k - 1) + 1
    if span > length or (length - span) // s != 0:  # not exactly one output frame
        return None
    depthwise = g == c and cg == 1 and m_out % c == 0 and g > 1
    if g != 1 and not depthwise:
        return None
    if g == 1 and cg != c:
        return None
    b = _Builder(node.name or node.output[0])
    x = node.input[0]
    if not (d == 1 and span == length):
        x = b.node("Slice", [x, b.const("starts", np.array([0], np.int64)), b.const("ends", np.array([span], np.int64)),
                             b.const("axes", np.array([2], np.int64)), b.const("steps", np.array([d], np.int64))])
    y_shape = b.const("shape", np.array([-1, m_out, 1], np.int64))
    if g == 1:
        x = b.node("Reshape", [x, b.const("shape", np.array([-1, c * k], np.int64))])
        y = b.node("MatMul", [x, b.const("weight", w.reshape(m_out, c * k).T.copy())])
        if bias is not None:
            y = b.node("Add", [y, b.const("bias", bias.astype(np.float32))])
        b.node("Reshape", [y, y_shape], out=node.output[0])
        return b
    r = m_out // c
    x = b.node("Reshape", [x, b.const("shape", np.array([-1, c, 1, k], np.int64))])
    y = b.node("Mul", [x, b.const("weight", w.reshape(c, r, k))])
    if opset >= 13:
        y = b.node("ReduceSum", [y, b.const("axes", np.array([3], np.int64))], keepdims=0)
    else:
        y = b.node("ReduceSum", [y], axes=[3], keepdims=0)
    if bias is None:
        b.node("Reshape", [y, y_shape], out=node.output[0])
    else:
        y = b.node("Reshape", [y, y_shape])
        b.node("Add", [y, b.const("bias", bias.astype(np.float32).reshape(m_out, 1))], out=node.output[0])
    return b


def _matmul(node: Any, inits: dict[str, np.ndarray], shapes: dict[str, list]) -> _Builder | None:
    """The batched replacement of ``MatMul(W (P, K) constant, x (N, K, 1))``, or None when it does not match."""
    w = inits.get(node.input[0])
    xs = shapes.get(node.input[1])
    if w is None or w.dtype != np.float32 or w.ndim != 2 or node.input[1] in inits:
        return None
    if not xs or len(xs) != 3 or xs[2] != 1 or xs[1] != w.shape[1]:
        return None
    p, k = w.shape
    b = _Builder(node.name or node.output[0])
    x = b.node("Reshape", [node.input[1], b.const("shape", np.array([-1, k], np.int64))])
    y = b.node("MatMul", [x, b.const("weight", w.T.copy())])
    b.node("Reshape", [y, b.const("shape", np.array([-1, p, 1], np.int64))], out=node.output[0])
    return b


def _names_used(nodes: list) -> set[str]:
    """Every tensor name read by ``nodes`` or by the nodes of their subgraphs (Scan, Loop, If bodies)."""
    used = set()
    for n in nodes:
        used.update(n.input)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                used |= _names_used(list(sub.node))
    return used


DISCRETE_OPS = frozenset({"ArgMax", "ArgMin", "TopK", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal",
                          "Round", "Floor", "Ceil", "Sign", "NonZero", "Cast"})
"""frozenset[str]: ops whose output jumps when their input moves by a rounding error (a choice, a comparison, an
integer)."""
ILL_CONDITIONED_OPS = frozenset({"Log", "Reciprocal", "Sqrt", "Div", "Pow"})
"""frozenset[str]: ops that magnify a relative rounding error near 0 (log power of a quiet bin). Measured on the
reference: rewriting only the analysis conv in front of its log power leaves the pool at about 113 dB from single
sessions, so the whole cone upstream of one is kept, as for :data:`DISCRETE_OPS`."""
_LINEAR_OPS = frozenset({"Conv", "MatMul", "Gemm", "ConvTranspose"})
SHAPE_OPS = frozenset({"Shape", "Size"})
"""frozenset[str]: ops whose output reads only their input's shape (a rounding error upstream cannot move it)."""


def _kept(nodes: list) -> set[str]:
    """Output names of the nodes left as they are: every node upstream of a :data:`DISCRETE_OPS` or
    :data:`ILL_CONDITIONED_OPS` node (its whole backward cone in ``nodes``), so those see the numbers a one-stream
    session sees. The cone stops at a :data:`SHAPE_OPS` node: its output is the input's shape, not its values (a
    streamify pre-roll mask compares positions with ``Less``; the positions come from ``Shape`` of the conv input
    it masks, which is no reason to keep every conv upstream of it)."""
    prod = {o: n for n in nodes for o in n.output}
    sensitive = DISCRETE_OPS | ILL_CONDITIONED_OPS
    kept, todo = set(), [i for n in nodes if n.op_type in sensitive for i in n.input]
    while todo:
        name = todo.pop()
        n = prod.get(name)
        if n is None or name in kept:
            continue
        kept.update(n.output)
        todo += [] if n.op_type in SHAPE_OPS else list(n.input)
    return kept


def batch_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose one-frame convolutions and matrix-vector MatMuls run as batched GEMMs.

    Args:
        model (onnx.ModelProto): A streaming graph (FP32 weights as initializers).
        input_dims (dict[str, list[int | str]]): Graph input name -> its dims for the chunk the runtime feeds,
            with the batch axis left symbolic (e.g. ``{"audio": ["N", 1, 160], "state_in.00": ["N", 1, 160]}``);
            inputs not named keep their declared dims. Only used to infer which convolutions give one frame.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: The rewritten copy (the input model is not modified; graph inputs,
        outputs and metadata unchanged) and the count of rewritten nodes by kind (``conv_gemm``,
        ``conv_depthwise``, ``matmul_gemm``; all 0 when nothing matched), and ``kept_sensitive``: the Conv/MatMul
        nodes left as they are because they feed a :data:`DISCRETE_OPS` or :data:`ILL_CONDITIONED_OPS` node.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of (callers fall back to the original).
    """
    shapes = partial_shapes(model, input_dims)
    out = copy_model(model)
    g = out.graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    version = opset(out)
    counts = collections.Counter(conv_gemm=0, conv_depthwise=0, matmul_gemm=0, kept_sensitive=0)
    nodes, new_inits = [], []
    cone = _kept(list(g.node))  # left as they are
    for node in g.node:
        b, kind = None, None
        if node.output[0] in cone:
            counts["kept_sensitive"] += node.op_type in _LINEAR_OPS
        elif node.op_type == "Conv" and node.domain in DEFAULT_DOMAINS:
            b = _conv(node, inits, shapes, version)
            kind = "conv_depthwise" if b is not None and any(n.op_type == "ReduceSum" for n in b.nodes) else "conv_gemm"
        elif node.op_type == "MatMul" and node.domain in DEFAULT_DOMAINS:
            b, kind = _matmul(node, inits, shapes), "matmul_gemm"
        if b is None:
            nodes.append(node)
            continue
        nodes += b.nodes
        new_inits += b.inits
        counts[kind] += 1
    if not (counts["conv_gemm"] + counts["conv_depthwise"] + counts["matmul_gemm"]):
        return out, dict(counts)
    used = _names_used(nodes) | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]  # weights only the replaced nodes read
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    return out, dict(counts)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`batch_rewrite` at ``target.dims`` (batch axis symbolic)."""
    return batch_rewrite(model, target.dims)


__all__ = ["DISCRETE_OPS", "ILL_CONDITIONED_OPS", "batch_rewrite", "run"]
