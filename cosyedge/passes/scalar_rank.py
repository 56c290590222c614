"""Pass ``scalar_rank``: give a one-element constant operand of an elementwise op the rank of the other operand.

ONNX Runtime 1.32's CPU ``Add``/``Sub``/``Mul``/``Div`` are about 25x slower when one operand is a rank-0 (or rank-1)
one-element constant and the other a rank-3 tensor whose last axis is 1 than with the same constant shaped
(1, 1, 1): measured ``Add`` on (64, 161, 1), 1 thread: 246 us with a () constant, 208 us with (1,), 9 us with
(1, 1, 1). The reference model's batched graph has five such nodes on its (N, 161, 1) spectra (log-power epsilons,
the output gain's scale and offset): 0.75 ms of an 11.5 ms run at 64 streams (ORT profile;
``docs/bench/roofline_reference.json``). Reshaping the constant changes no value: broadcasting gives every
element the same operand, so the output is bit-identical at any batch.

Rewrites (top-level graph only): a default-domain ``Add``, ``Sub``, ``Mul`` or ``Div`` with one input a one-element
initializer of rank lower than the other input's known rank (>= 2), whose output feeds no ``MatMul``/``Gemm`` and
whose other input comes from none (ONNX Runtime folds such a scale or bias into the matrix product; that fusion is
left as it is): the constant becomes a new initializer of shape (1, ..., 1).

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after the other rewrites (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator spec (multidirectional broadcasting); ONNX Runtime ``core/providers/cpu/math/element_wise_ops.cc``
(the measured kernels).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, copy_model, spliced
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")

OPS = ("Add", "Sub", "Mul", "Div")
"""tuple[str, ...]: the elementwise ops rewritten."""
_PRODUCTS = frozenset({"MatMul", "Gemm", "FusedMatMul", "Conv", "FusedConv", "ConvTranspose"})


def rank_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose one-element constant operands of elementwise ops have their partner's rank.

    Args:
        model (onnx.ModelProto): The graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims (batch axis symbolic), for the ranks.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"scalar_rank": <nodes rewritten>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m = copy_model(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n.op_type for n in g.node for o in n.output}
    readers: dict[str, set] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, set()).add(n.op_type)
    replace, new_inits = {}, []
    for idx, node in enumerate(g.node):
        if node.op_type not in OPS or node.domain not in DEFAULT_DOMAINS or len(node.input) != 2:
            continue
        if readers.get(node.output[0], set()) & _PRODUCTS:
            continue
        for k in (0, 1):
            name, other = node.input[k], node.input[1 - k]
            t = inits.get(name)
            if t is None or other in inits or producer.get(other) in _PRODUCTS:
                continue
            rank = len(shapes.get(other) or [])
            if rank < 2 or len(t.dims) >= rank or int(np.prod(t.dims, dtype=np.int64)) != 1:
                continue
            a = onnx.numpy_helper.to_array(t).reshape((1,) * rank)
            new = onnx.numpy_helper.from_array(a, f"{name}/rank{rank}")
            if new.name not in {x.name for x in new_inits}:
                new_inits.append(new)
            n2 = onnx.NodeProto()
            n2.CopyFrom(node)
            n2.input[k] = new.name
            replace[idx] = [n2]
            break
    m, count = spliced(m, replace, new_inits)
    return m, {"scalar_rank": count}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`rank_rewrite` at ``target.dims``."""
    return rank_rewrite(model, target.dims)


__all__ = ["OPS", "rank_rewrite", "run"]
