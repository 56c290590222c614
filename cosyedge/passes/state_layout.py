"""Pass ``state_layout``: a causal conv's state is carried time-major, (N, P, C) instead of (N, C, P), inside a
StreamPool, so its per-tick shift copies a few long rows instead of one short row per channel.

A streaming conv keeps its last P input frames: ``W = Concat(state_in, x, axis=-1)`` (N, C, P+T), the conv reads W,
``state_out = Slice(W, T:, axis=-1)``. Laid out (N, C, P), ONNX Runtime copies both the Concat and the Slice one
(channel, stream) row of P floats at a time: 96 x 64 rows of 2..64 floats per state at 64 streams, 34 % of a batched
run of the reference model once its matrix products were cut (ORT profile, 1 thread; measured (64, 96, 16): 163 ->
58 us for Concat + both Slices; ``docs/bench/roofline_reference.json``). Time-major, every stream's state is one
contiguous block: the Concat and the state Slice copy one row per stream, and the conv's taps (``batch_gemm``'s
strided Slice) are C-long rows, turned back to (N, C, K) by a small Transpose so the GEMM reads the same numbers in
the same order. Outputs are bit-identical (only copies move).

The graph's state inputs and outputs change layout, so only a runtime that binds them that way may run the result:
:class:`~cosyedge.runtime.pool.StreamPool` (:data:`cosyedge.passes.POOL_PASSES`), which reads the permutation from the
metadata key :data:`LAYOUT_KEY` (state input name -> axes order, e.g. ``{"state_in.03": [0, 2, 1]}``), keeps its slot
stores in that layout and gives :meth:`~cosyedge.runtime.pool.StreamPool.state` back in the model's.

Rewrites (top-level graph): a graph input ``s`` with dims (N, C, P) (N symbolic, C > 1 and P known) read only by
``Concat(s, x, axis=2|-1)``, whose output feeds exactly one ``Slice(starts=[T] or [-P], ends>=P+T, axes=[2|-1])``
that is a graph output: ``s`` and that output become (N, P, C); the Concat runs on axis 1 with ``Transpose(x)``; a
constant ``Slice`` on axis 2 of the window reads the time-major window on axis 1 and is transposed back; any other
reader of the window reads one ``Transpose`` of it.

Source: ONNX operator specs (Concat, Slice, Transpose).
"""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")

LAYOUT_KEY = "cosyedge.pool.state_layout"
"""str: metadata key: JSON {state input name: axes order of the graph's layout, from the model's (N first)}."""
_SWAP = [0, 2, 1]


def _ints(inits: dict, name: str) -> list | None:
    t = inits.get(name) if name else None
    return None if t is None else [int(v) for v in onnx.numpy_helper.to_array(t).ravel()]


def _slice_args(node: Any, inits: dict) -> tuple | None:
    """(starts, ends, axes, steps) of a Slice whose arguments are initializers (steps default 1), or None."""
    if node.op_type != "Slice" or node.domain not in DEFAULT_DOMAINS or len(node.input) < 4:
        return None
    starts, ends, axes = (_ints(inits, node.input[i]) for i in (1, 2, 3))
    has_steps = len(node.input) > 4 and bool(node.input[4])
    steps = _ints(inits, node.input[4]) if has_steps else None
    if starts is None or ends is None or axes is None or (has_steps and steps is None):
        return None
    return starts, ends, axes, steps or [1] * len(starts)


def layout_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose conv states are carried time-major (module doc), and the states changed.

    Args:
        model (onnx.ModelProto): A streaming graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims with the batch axis symbolic (``"N"``).
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy (its :data:`LAYOUT_KEY` metadata lists the states changed)
        and ``{"state_layout": <states changed>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m = copy_model(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {vi.name: vi for vi in g.output}
    readers: dict[str, list] = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for name in n.input:
            readers[name].append(i)
    replace: dict[int, list] = {}
    new_inits: list = []
    layout: dict[str, list] = {}
    for vi in g.input:
        dims = input_dims.get(vi.name)
        if not dims or len(dims) != 3 or isinstance(dims[0], int) or not all(isinstance(d, int) for d in dims[1:]):
            continue
        c, p = dims[1], dims[2]
        if c <= 1 or len(readers[vi.name]) != 1:
            continue
        ci = readers[vi.name][0]
        cat = g.node[ci]
        axis = next((a.i for a in cat.attribute if a.name == "axis"), None)
        if (cat.op_type != "Concat" or cat.domain not in DEFAULT_DOMAINS or axis not in (2, -1) or len(cat.input) != 2
                or cat.input[0] != vi.name or ci in replace):
            continue
        x, w = cat.input[1], cat.output[0]
        xs = shapes.get(x)
        if not xs or len(xs) != 3 or xs[1] != c or not isinstance(xs[2], int):
            continue
        t = xs[2]
        state, others, ok = None, [], True
        for ri in readers[w]:
            n = g.node[ri]
            args = _slice_args(n, inits)
            is_state = (args is not None and n.output[0] in outputs and args[2] in ([2], [-1]) and len(args[0]) == 1
                        and args[0][0] in (t, -p) and args[1][0] >= p + t and args[3] == [1])
            if is_state and state is None:
                state = ri
            else:
                others.append(ri)
            ok &= ri not in replace
        if state is None or not ok or w in outputs:
            continue
        b = Builder(cat.name or w, "time_major")
        xt = b.node("Transpose", [x], perm=_SWAP)
        wt = b.node("Concat", [vi.name, xt], axis=1)
        generic = None
        for ri in others:
            n = g.node[ri]
            args = _slice_args(n, inits)
            if args is not None and args[2] in ([2], [-1]):
                bs = Builder(n.name or n.output[0], "time_major")
                ins = [wt, n.input[1], n.input[2], bs.const("axes", np.array([1], np.int64))]
                if len(n.input) > 4 and n.input[4]:
                    ins.append(n.input[4])
                bs.node("Transpose", [bs.node("Slice", ins)], out=n.output[0], perm=_SWAP)
                replace[ri] = bs.nodes
                new_inits += bs.inits
            else:
                generic = w
        if generic:
            b.node("Transpose", [wt], out=w, perm=_SWAP)
        sn = g.node[state]
        bs = Builder(sn.name or sn.output[0], "time_major")
        bs.node("Slice", [wt, bs.const("starts", np.array([t], np.int64)),
                          bs.const("ends", np.array([p + t], np.int64)), bs.const("axes", np.array([1], np.int64))],
                out=sn.output[0])
        replace[ci], replace[state] = b.nodes, bs.nodes
        new_inits += b.inits + bs.inits
        for v in (vi, outputs[sn.output[0]]):
            d = v.type.tensor_type.shape.dim
            if len(d) == 3:
                d1, d2 = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
                d1.CopyFrom(d[1])
                d2.CopyFrom(d[2])
                d[1].CopyFrom(d2)
                d[2].CopyFrom(d1)
        layout[vi.name] = list(_SWAP)
    if not layout:
        return m, {"state_layout": 0}
    nodes = []
    for i, n in enumerate(g.node):
        nodes.extend(replace.get(i, [n]))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    stale = set(layout) | {o for i in replace for n in replace[i] for o in n.output}
    keep = [v for v in g.value_info if v.name not in stale]
    del g.value_info[:]
    g.value_info.extend(keep)
    old = next((p for p in m.metadata_props if p.key == LAYOUT_KEY), None)
    merged = {**(json.loads(old.value) if old is not None else {}), **layout}
    if old is None:
        old = m.metadata_props.add()
        old.key = LAYOUT_KEY
    old.value = json.dumps(merged, sort_keys=True)
    return m, {"state_layout": len(layout)}


def layout_of(model: Any) -> dict[str, list[int]]:
    """{state input name: axes order} a ``state_layout`` rewrite recorded in ``model`` (onnx.ModelProto); {} when
    none (or when ``model`` is a path: a stored graph keeps the contract's layout)."""
    props = getattr(model, "metadata_props", None) or []
    for p in props:
        if p.key == LAYOUT_KEY:
            return {k: list(v) for k, v in json.loads(p.value).items()}
    return {}


def layout_dims(model: Any, dims: dict[str, list]) -> dict[str, list]:
    """``dims`` (graph input name -> dims, as a pass's :class:`~cosyedge.passes.base.Target` gives them, in the
    model's layout) with the states a ``state_layout`` rewrite of ``model`` turned time-major in their new layout:
    the dims a later pass infers shapes at."""
    layout = layout_of(model)
    return {k: ([v[a] for a in layout[k]] if k in layout else v) for k, v in dims.items()}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`layout_rewrite` at ``target.dims``."""
    return layout_rewrite(model, target.dims)


__all__ = ["LAYOUT_KEY", "layout_dims", "layout_of", "layout_rewrite", "run"]
