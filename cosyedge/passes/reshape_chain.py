"""Pass ``reshape_chain``: a chain of ops that only re-shape a tensor (Reshape, Flatten, Squeeze, Unsqueeze, and a
Transpose that moves size-1 axes only) runs as one Reshape, or as none when it ends in its start's shape.

After the StreamPool's rewrites the reference model's batched graph holds two such chains, each op one ONNX Runtime
kernel (a Transpose copies, the others at best alias): the pitch branch turns its audio (N, 1, 160) to (N, 160, 1)
and back (``onehot_conv``'s Reshape, then ``state_layout``'s Transpose to time-major), and the output stage turns the
synthesis GEMM's (N, 160) to (N, 160, 1), (N, 1, 160), (N, 160) and (N, 1, 160) (Reshape, Transpose, Flatten,
Unsqueeze). Six kernels become one. A lone Transpose that moves unit axes only (``state_layout``'s Transpose of a
conv's (N, C, 1) input to (N, 1, C), twelve of them) becomes a Reshape, which ONNX Runtime runs without a copy. No
number moves, so outputs are bit-identical.

Rewrites (top-level graph): a run (two or more, or one Transpose) of default-domain ``Reshape`` (``allowzero`` 0),
``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Transpose`` (its axes of size other than 1 kept in order) in which each
output but the last feeds only the next and is no graph output, every dim of the last output known except at most
one (the batch): the readers of the last output read the run's input when the shapes are equal (same rank, the same
known dims at the same places; the one unknown dim then equal too, the element count being the same) and it is no
graph output; else one ``Reshape`` to the last shape (the unknown dim as -1) writes it.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after the other rewrites (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator specs (Reshape, Flatten, Squeeze, Unsqueeze, Transpose).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model, node_attrs, spliced
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")

OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
"""tuple[str, ...]: the ops a chain is made of."""


def _reshapes_only(node: Any, shapes: dict) -> bool:
    """Whether ``node`` only re-shapes its input (one of :data:`OPS`; a Transpose keeping its non-unit axes in
    order)."""
    if node.op_type not in OPS or node.domain not in DEFAULT_DOMAINS:
        return False
    attrs = node_attrs(node)
    if node.op_type == "Reshape":
        return not attrs.get("allowzero", 0)
    if node.op_type != "Transpose":
        return True
    dims, perm = shapes.get(node.input[0]), attrs.get("perm")
    if not dims or perm is None or len(perm) != len(dims):
        return False
    moved = [p for p in perm if dims[p] != 1]  # unknown dims (None) count as non-unit
    return moved == sorted(moved)


def chain_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose re-shaping chains run as one Reshape or none (module doc).

    Args:
        model (onnx.ModelProto): The graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims (batch axis symbolic), for the shapes.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"reshape_chain": <nodes folded>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m = copy_model(model)
    g = m.graph
    outputs = {o.name for o in g.output}
    readers: dict[str, list] = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for name in n.input:
            readers[name].append(i)
    nested = any(a.type == onnx.AttributeProto.GRAPH for n in g.node for a in n.attribute)
    ok = [_reshapes_only(n, shapes) for n in g.node]

    def next_of(i: int) -> int | None:
        out = g.node[i].output[0]
        r = readers[out]
        return r[0] if len(r) == 1 and out not in outputs and ok[r[0]] and g.node[r[0]].input[0] == out else None

    heads = {i for i, n in enumerate(g.node) if ok[i]} - {j for i in range(len(g.node)) if ok[i]
                                                          for j in [next_of(i)] if j is not None}
    replace: dict[int, list] = {}
    new_inits: list = []
    rewire: dict[str, str] = {}
    removed = 0
    for h in sorted(heads):
        run = [h]
        while (j := next_of(run[-1])) is not None:
            run.append(j)
        if len(run) < 2 and g.node[h].op_type != "Transpose":  # a lone Transpose of unit axes: a Reshape (no copy)
            continue
        src, last = g.node[h].input[0], g.node[run[-1]].output[0]
        dims_in, dims_out = shapes.get(src), shapes.get(last)
        if not dims_out or sum(d is None for d in dims_out) > 1 or any(d == 0 for d in dims_out):
            continue
        same = dims_in is not None and len(dims_in) == len(dims_out) and all(
            a == b for a, b in zip(dims_in, dims_out))
        if same and last not in outputs and not nested:
            rewire[last] = src
            for i in run:
                replace[i] = []
            removed += len(run)
            continue
        b = Builder(g.node[run[-1]].name or last, "chain")
        shape = np.array([-1 if d is None else d for d in dims_out], np.int64)
        b.node("Reshape", [src, b.const("shape", shape)], out=last)
        replace[run[0]] = b.nodes
        for i in run[1:]:
            replace[i] = []
        new_inits += b.inits
        removed += len(run)
    if not removed:
        return m, {"reshape_chain": 0}
    for n in g.node:
        for k, name in enumerate(n.input):
            if name in rewire:
                n.input[k] = rewire[name]
    m, _ = spliced(m, replace, new_inits)
    gone = {o for i, ns in replace.items() for o in model.graph.node[i].output} - {o for ns in replace.values()
                                                                                  for n in ns for o in n.output}
    keep = [v for v in g.value_info if v.name not in gone]
    del g.value_info[:]
    g.value_info.extend(keep)
    return m, {"reshape_chain": removed}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`chain_rewrite` at ``target.dims``, the states a
    ``state_layout`` rewrite turned time-major given in their new layout."""
    from cosyedge.passes.state_layout import layout_dims

    return chain_rewrite(model, layout_dims(model, target.dims))


__all__ = ["OPS", "chain_rewrite", "run"]
