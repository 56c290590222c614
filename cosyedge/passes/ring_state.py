"""Pass ``ring_state``: a dilated conv's time-major state is a ring buffer written in place, one frame per tick,
inside a StreamPool, instead of being shifted by two copies of the whole window every tick.

After ``state_layout`` a streaming conv's state (N, P, C) is used as ``W = Concat(state_in, x, axis=1)`` (N, P+1, C),
the conv's taps are a strided ``Slice`` of W (a dilation-``d`` conv of kernel ``K`` reads ``K`` of the ``P+1 = (K-1)d+1``
frames) and ``state_out = Slice(W, 1:, axis=1)``. ONNX Runtime materialises both: per tick and stream it copies
``2P+1`` frames of ``C`` floats to read ``K`` of them (the reference model at 128 streams: 23 % of a tick in Concat +
Slice, ``docs/bench/bench_targets.json`` roofline). Here the state is a ring of ``R = P + 1`` frames (N, R, C) and the
graph gets one more input, ``cosyedge_ring_pos`` (int64 (N,): frames each stream has run, kept by the pool):

* frame ``tau`` of a stream (its ``tau``-th frame, from 0) sits in ring row ``tau mod R``; at a tick with position
  ``t`` the current frame ``x`` is written to row ``t mod R`` (which held frame ``t - R``, older than any tap) and
  the frame of age ``a`` (0 <= a <= P, 0 being ``x``) is row ``(t - a) mod R``;
* ``state_out`` is ``ScatterND(ring, [[n, pos_n mod R]], x)``: ONNX Runtime's CPU ScatterND copies its input only
  when the output is another buffer, and the pool binds a ring state's input and output to the **same** rows, so
  the tick writes ``C`` floats per stream (a (256, 65, 96) ring: 179 us copied, 6.6 us in place);
* each tap ``Slice`` of W (constant starts/ends/steps on the time axis; frame ``f`` of W has age ``P - f``) becomes
  ``GatherND(state_out, (pos - ages) mod R, batch_dims=1)``: it reads the ring after the write (a data dependency,
  so the order holds), the same numbers in the same order, so every output is bit-identical.

A ring's rows are in rotation order, so only a runtime that keeps the positions may run the result:
:class:`~cosyedge.runtime.pool.StreamPool` reads :data:`RING_KEY` (state input name -> ``R``) and :data:`POS_INPUT`,
binds each ring's input and output to one buffer, advances the positions of the streams a tick ran, resets them
when a stream joins, and turns a ring back into the model's window in :meth:`~cosyedge.runtime.pool.StreamPool.state`.
A ring filled with the state's initial value (the pool fills it when a stream joins) reads as that initial window
whatever the position: the model's zero (or ``init``) state.

Rewrites (top-level graph, states ``state_layout`` turned time-major): a state (N, P, C) read only by
``Concat(state, x, axis=1)`` with ``x`` one frame (N, 1, C), whose window W is read by the state ``Slice`` (a graph
output) and by constant time-axis Slices that read fewer than ``P`` frames of W in all; a state whose window has
any other reader, or whose taps read most of it, is left as it is (its shift copies a window the conv reads
anyway); so is a model of default-domain opset below 13 (:data:`MIN_OPSET`).

Source: ONNX operator specs (GatherND ``batch_dims``, ScatterND, Mod); ONNX Runtime
``onnxruntime/core/providers/cpu/tensor/scatter_nd.cc`` (input copied to the output only when they differ).
"""

from __future__ import annotations

import collections
import json
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model, opset, splice
from cosyedge.passes.shapes import partial_shapes
from cosyedge.passes.state_layout import _slice_args, layout_dims, layout_of

onnx = lazy_import("onnx")

RING_KEY = "cosyedge.pool.ring_state"
"""str: metadata key: JSON {state input name: ring frames R} of the states this pass turned into rings."""
POS_INPUT = "cosyedge_ring_pos"
"""str: the graph input the rewrite adds: int64 (N,), the frames each stream has run before this tick."""
MIN_OPSET = 13
"""int: the default-domain opset the rewrite needs (Unsqueeze with an axes input, GatherND ``batch_dims``); an older
model is left as it is (else ONNX Runtime refuses the rewritten graph and the pool runs without any of its passes)."""
_BIG = 1 << 62


def _frames(args: tuple, length: int) -> list[int] | None:
    """Frames (list[int], ascending) that a constant Slice (starts, ends, axes, steps) reads from an axis of
    ``length``; None for a negative step or more than one axis."""
    starts, ends, _, steps = args
    if len(starts) != 1 or steps[0] < 1:
        return None
    return list(range(*slice(starts[0], min(ends[0], _BIG), steps[0]).indices(length)))


def ring_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose time-major conv states are ring buffers (module doc), and the states changed.

    Args:
        model (onnx.ModelProto): A streaming graph after ``state_layout`` (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims in the model's layout, batch axis
            symbolic (``"N"``); the states ``state_layout`` changed are read in its layout.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy (:data:`RING_KEY` metadata, :data:`POS_INPUT` input) and
        ``{"ring_state": <states changed>}``; the model itself when none qualifies.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    timed = layout_of(model)
    if not timed or any(vi.name == POS_INPUT for vi in model.graph.input) or opset(model) < MIN_OPSET:
        return model, {"ring_state": 0}
    dims = layout_dims(model, input_dims)
    shapes = partial_shapes(model, dims)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {vi.name for vi in g.output}
    readers: dict[str, list] = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for name in n.input:
            readers[name].append(i)
    plans = []
    for vi in g.input:
        d = dims.get(vi.name)
        if vi.name not in timed or not d or len(d) != 3 or not all(isinstance(v, int) for v in d[1:]):
            continue
        p, c = d[1], d[2]
        if len(readers[vi.name]) != 1:
            continue
        ci = readers[vi.name][0]
        cat = g.node[ci]
        axis = next((a.i for a in cat.attribute if a.name == "axis"), None)
        if (cat.op_type != "Concat" or cat.domain not in DEFAULT_DOMAINS or axis != 1 or len(cat.input) != 2
                or cat.input[0] != vi.name):
            continue
        x, w = cat.input[1], cat.output[0]
        xs = shapes.get(x)
        if not xs or len(xs) != 3 or xs[1] != 1 or xs[2] != c or w in outputs:
            continue
        state, taps, ok = None, [], True
        for ri in readers[w]:
            n = g.node[ri]
            args = _slice_args(n, inits)
            if args is None or args[2] not in ([1], [-3]):
                ok = False
                break
            frames = _frames(args, p + 1)
            if frames is None:
                ok = False
                break
            if state is None and n.output[0] in outputs and frames == list(range(1, p + 1)):
                state = ri
            else:
                taps.append((ri, frames))
        if not ok or state is None or sum(len(f) for _, f in taps) >= p or any(not f for _, f in taps):
            continue
        plans.append((vi, ci, x, state, taps, p, c))
    if not plans:
        return model, {"ring_state": 0}
    m = copy_model(model)
    g = m.graph
    vis = {vi.name: vi for vi in g.input}
    outs = {vi.name: vi for vi in g.output}
    b = Builder("ring_state", "ring")
    pos2 = b.node("Unsqueeze", [POS_INPUT, b.const("axes", np.array([1], np.int64))])  # (N, 1)
    n_scalar = b.node("Squeeze", [b.node("Shape", [POS_INPUT])])
    rows = b.node("Unsqueeze", [b.node("Range", [b.const("zero", np.array(0, np.int64)), n_scalar,
                                                b.const("one", np.array(1, np.int64))]),
                                b.const("axes", np.array([1], np.int64))])  # (N, 1): each stream's row
    write_at: dict[int, str] = {}
    taps_at: dict[tuple, str] = {}
    replace: dict[int, list] = {}
    rings: dict[str, int] = {}
    for vi, ci, x, state, taps, p, c in plans:
        r = p + 1
        if r not in write_at:
            wrow = b.node("Mod", [pos2, b.const("ring", np.array([[r]], np.int64))])
            write_at[r] = b.node("Concat", [rows, wrow], axis=1)  # (N, 2): [n, pos_n mod R]
        sn = g.node[state]
        for ri, frames in taps:
            tn = g.node[ri]
            ages = tuple(p - f for f in frames)  # 0: the current frame, written before the taps are read
            if (r, ages) not in taps_at:
                shift = np.array([[r - a for a in ages]], np.int64)  # (pos + R - age) mod R >= 0
                idx = b.node("Mod", [b.node("Add", [pos2, b.const("shift", shift)]),
                                     b.const("ring", np.array([[r]], np.int64))])
                taps_at[(r, ages)] = b.node("Unsqueeze", [idx, b.const("axes", np.array([2], np.int64))])
            bt = Builder(tn.name or tn.output[0], "ring")
            bt.node("GatherND", [sn.output[0], taps_at[(r, ages)]], out=tn.output[0], batch_dims=1)  # (N, k, C)
            replace[ri] = bt.nodes
        bs = Builder(sn.name or sn.output[0], "ring")
        upd = bs.node("Reshape", [x, bs.const("shape", np.array([-1, c], np.int64))])  # (N, C)
        bs.node("ScatterND", [vi.name, write_at[r], upd], out=sn.output[0])
        # the write goes where the Concat was: before every tap, whichever order the taps and the state Slice had
        replace[ci], replace[state] = bs.nodes, []
        b.inits += bs.inits
        for v in (vis[vi.name], outs[sn.output[0]]):
            dd = v.type.tensor_type.shape.dim
            if len(dd) == 3:
                dd[1].Clear()
                dd[1].dim_value = r
        rings[vi.name] = r
    replace[0] = b.nodes + replace.get(0, [g.node[0]])  # the shared position nodes first
    splice(m, replace, b.inits)  # (drops the replaced Slices' constants)
    batch = vis[plans[0][0].name].type.tensor_type.shape.dim[0]
    pos_vi = onnx.helper.make_tensor_value_info(POS_INPUT, onnx.TensorProto.INT64, [batch.dim_param or "N"])
    g.input.append(pos_vi)
    stale = set(rings) | {o for i in replace for n in replace[i] for o in n.output}
    keep = [v for v in g.value_info if v.name not in stale]
    del g.value_info[:]
    g.value_info.extend(keep)
    prop = m.metadata_props.add()
    prop.key, prop.value = RING_KEY, json.dumps(rings, sort_keys=True)
    return m, {"ring_state": len(rings)}


def rings_of(model: Any) -> dict[str, int]:
    """{state input name: ring frames R} a ``ring_state`` rewrite recorded in ``model`` (onnx.ModelProto); {} when
    none (or when ``model`` is a path)."""
    for p in getattr(model, "metadata_props", None) or []:
        if p.key == RING_KEY:
            return {k: int(v) for k, v in json.loads(p.value).items()}
    return {}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`ring_rewrite` at ``target.dims``."""
    return ring_rewrite(model, target.dims)


__all__ = ["MIN_OPSET", "POS_INPUT", "RING_KEY", "ring_rewrite", "rings_of", "run"]
