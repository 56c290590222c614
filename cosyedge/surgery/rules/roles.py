"""The rules of the roles that are not an op family: uniform tensors, shape-only nodes, replaced nodes.

Every node has one role (:mod:`cosyedge.surgery.rules`); three of them are decided from the facts of the node's
outputs rather than its op, and one rule serves every op of the role:

* :data:`~cosyedge.surgery.rules.UNIFORM` (:func:`is_uniform`, :func:`uniform`): the node's one output runs over time,
  depends on shapes only and holds one value everywhere at every length; it becomes ``Expand`` of that value;
* :data:`~cosyedge.surgery.rules.SHAPE_ONLY` (:func:`shape_only`): the fallback of a stream node whose rule refused it,
  when only the shapes of its outputs are read and they do not grow with the length;
* :data:`~cosyedge.surgery.rules.REPLACED` (:func:`replaced`): a node that only computes what an attention or
  relative-position rule replaces (the walk leaves it; it becomes dead).

Rules use the walker's public context API (:class:`cosyedge.surgery.walker.Walker`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.artifacts import BOOKKEEPING
from cosyedge.surgery.rules import ANY, REPLACED, SHAPE_ONLY, UNIFORM, Blocker, register


def is_uniform(node: Any, ctx: Any) -> bool:
    """bool: ``node``'s one output runs over time, depends on shapes only and holds one value everywhere at every
    length (NeMo's pad mask ``arange(T) < new_full((N,), T)``: all true at full length): both probe runs and an
    evaluation at a long length and batch 3 hold that one value. Its positions would otherwise be compared with the
    chunk's own length (:func:`uniform` rewrites it)."""
    if ctx.masks is None or len(node.outputs) != 1 or not node.outputs[0].name:
        return False
    o = node.outputs[0]
    f = ctx.facts.get(o.name)
    if (f is None or not f.is_stream or f.extra < 0 or ctx.masks.data_path(o.name)
            or node.op in ("Range", "Shape", "Size", "ConstantOfShape")):
        return False
    v1, v2 = ctx.values.get(o.name), ctx.values2.get(o.name)
    if v1 is None or v2 is None or not np.size(v1) or v1.dtype != v2.dtype:
        return False
    first = np.asarray(v1).reshape(-1)[0]
    if not (np.all(v1 == first) and np.all(v2 == first)):
        return False
    try:
        # a long length, and batch 3: a batch coordinate (ScatterND index tuples) is 0 at the probes' batch 1
        v3 = ctx.masks.evaluate([o.name], ctx.ticks_for_frames(f.rate, 1103), batch=3)[o.name]
    except Exception:  # noqa: BLE001 - not evaluable from shapes alone: leave it to its rule
        return False
    return bool(np.all(v3 == first))


@register(ANY, roles=(UNIFORM,))
def uniform(node: Any, ctx: Any) -> None:
    """Rewrite a node :func:`is_uniform` names into ``Expand`` of its one value to this chunk's shape (delay None:
    the same at every frame)."""
    o = node.outputs[0]
    f = ctx.facts[o.name]
    v1 = ctx.values[o.name]
    first = np.asarray(v1).reshape(-1)[0]
    base = f"{node.name}/{BOOKKEEPING}_uniform"
    parts = []
    b = ctx.batch_axes.get(o.name)
    for i, d in enumerate(f.shape1):
        if i == f.axis:
            n = ctx.frames_tensor(f.rate, base)
            if i == b:  # batch folded into time (N x frames: zeros for a per-frame RNN's initial state)
                n = ctx.op("Mul", [n, ctx.batch_tensor(base)], base, dtype=np.int64)
            parts.append(n)
        elif i == b:
            n = ctx.batch_tensor(base)
            parts.append(n if int(d) == 1 else ctx.op("Mul", [n, ctx.const([int(d)])], base, dtype=np.int64))
        else:
            parts.append(ctx.const([int(d)]))
    shape = ctx.op("Concat", parts, base, {"axis": 0}, dtype=np.int64)
    value = ctx.const(np.full([1] * len(f.shape1), first, dtype=v1.dtype), base, dtype=v1.dtype)
    node.op, node.attrs = "Expand", {}
    node.inputs.clear()
    node.inputs.extend([value, shape])
    ctx.set_delay(o, None)


@register(ANY, roles=(REPLACED,))
def replaced(node: Any, ctx: Any) -> None:
    """Leave a node whose outputs a site replaces as it is (it becomes dead); its outputs are constant along time."""
    for o in node.outputs:
        ctx.set_delay(o, None)


@register(ANY, roles=(SHAPE_ONLY,))
def shape_only(node: Any, ctx: Any) -> None:
    """Stream a node whose rule refused it when its outputs' values are never used, only their shapes, and
    those shapes do not change with the sequence length (``zeros_like(x[..., :1])`` exports as Slice -> Shape
    -> ConstantOfShape: only the slice's shape, one frame at any length, is read). Every ``Shape``/``Size``
    consumer is rewritten to compute the full graph's shape from constants and this chunk's batch, so the
    node becomes dead and is dropped.

    Raises:
        Blocker: some output streams, changes shape with the length, is a graph output, or has a consumer that reads
            its values (nothing is rewritten; the walker reports the rule's own reason).
    """
    outs = [o for o in node.outputs if o.name]
    graph_outs = {t.name for t in ctx.graph.outputs}
    for o in outs:
        f = ctx.facts.get(o.name)
        if f is None or f.is_stream or f.error or tuple(f.shape1) != tuple(f.shape2) or o.name in graph_outs:
            raise Blocker("not shape-only")
        if any(c.op not in ("Shape", "Size") for c in o.outputs):
            raise Blocker("not shape-only")
    base = f"{node.name}/{BOOKKEEPING}_shape"
    for o in outs:
        for c in list(o.outputs):
            parts = _static_shape(ctx, o, base)
            if c.op == "Shape":
                rank = len(parts)
                start = int(c.attrs.get("start", 0))
                end = int(c.attrs.get("end", rank))
                start, end = [max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end)]
                parts = parts[start:end]
                value = (ctx.op("Concat", parts, base, {"axis": 0}, dtype=np.int64) if parts else
                         ctx.const(np.zeros(0, dtype=np.int64)))
            else:  # Size: a scalar, the product of the shape
                value = parts[0] if parts else ctx.const([1])
                for p in parts[1:]:
                    value = ctx.op("Mul", [value, p], base, dtype=np.int64)
                value = ctx.unsqueeze(value, [0], base, squeeze=True)
            c.op, c.attrs = "Identity", {}
            c.inputs.clear()
            c.inputs.append(value)
    for o in outs:
        ctx.set_delay(o, None)


def _static_shape(ctx: Any, t: Any, base: str) -> list:
    """The shape of ``t`` (a tensor that does not grow with the input) in this chunk, one int64 (1,) tensor
    per axis: the measured size, except the batch axis (where the batch probe found one), which is this
    chunk's batch times the sequences the axis folds per stream."""
    f = ctx.fact(t)
    b = ctx.batch_axes.get(t.name)
    parts = []
    for i, v in enumerate(f.shape1):
        if i == b:
            n = ctx.batch_tensor(base)
            parts.append(n if int(v) == 1 else ctx.op("Mul", [n, ctx.const([int(v)])], base, dtype=np.int64))
        else:
            parts.append(ctx.const([int(v)]))
    return parts
