"""Pass ``perm_gather``: a Gather / GatherElements that reads a transposed-and-flattened tensor through constant
indices reads the untransposed tensor instead, as a Slice when the composed indices are one contiguous run.

The reference model's pitch branch flattens its polyphase audio window (N, 160, 4) to (N, 640, 1) and picks samples
back in time order: ``Gather(window, [2, 6, ..., 639])`` (the last two hops) and
``GatherElements(window, Gather(table, lag + arange(320)))`` with ``table[s] = 4 (s mod 160) + s // 160`` (a lag's
320 samples). Inside a StreamPool the window is carried time-major (``state_layout``: (N, 4, 160) flattened is the
audio in time order), and the Transpose back to (N, 160, 4) before the flattening Reshape undoes it, so both picks
compose to plain ranges: the Gather is a Slice of the time-major window and the table Gather (64 x 320 int64 look-ups
per tick) is the identity. ORT profile at 64 streams, 1 thread: Gather 0.33 ms, table Gather 0.27 ms, the Transpose
and Reshape copies; a Slice of 320 floats per stream instead. Only copies and index arithmetic move, so outputs are
bit-identical.

Rewrites (top-level graph): ``X = Reshape(Transpose(W, perm), shape)`` with ``perm[0] == 0`` (batch kept), W's other
dims known and ``shape`` a constant ``[-1 | 0, K, 1, ..., 1]`` with K their product; π maps X's flat index to W's.

* ``Gather(X, idx, axis=1)`` with ``idx`` a 1-D constant: when ``π[idx]`` is ``c0 .. c0+len-1`` it becomes
  ``Slice(Reshape(W, shape), c0, c0+len, axis=1)``;
* ``GatherElements(X, Gather(table, J, axis=0), axis=1)`` with ``table`` a 1-D constant of K indices read by that
  Gather only: when ``π[table]`` is ``0 .. K-1`` it becomes ``GatherElements(Reshape(W, shape), J, axis=1)``
  (negative indices wrap alike: the table has K entries);
* any other reader keeps X. The Transpose, Reshape and table Gather left without readers are dropped.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` after ``state_layout`` (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator specs (Gather, GatherElements, Reshape, Slice, Transpose).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, Builder, copy_model, node_attrs, spliced
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")


def _const(inits: dict, name: str) -> np.ndarray | None:
    t = inits.get(name)
    return None if t is None else onnx.numpy_helper.to_array(t)


def _flat_perm(dims: list, perm: list) -> np.ndarray | None:
    """π (int64 array of K): flat index of ``Transpose(W, perm)``'s non-batch elements -> W's, or None when W's
    non-batch ``dims`` are not all known or ``perm`` moves the batch axis."""
    rest = dims[1:]
    if not rest or perm[0] != 0 or sorted(perm) != list(range(len(dims))) or not all(isinstance(d, int) and d > 0
                                                                                        for d in rest):
        return None
    return np.arange(int(np.prod(rest)), dtype=np.int64).reshape(rest).transpose([p - 1 for p in perm[1:]]).ravel()


def _is_run(a: np.ndarray) -> bool:
    return a.ndim == 1 and a.size > 0 and np.array_equal(a, a[0] + np.arange(a.size, dtype=a.dtype))


def gather_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose Gather / GatherElements of a transposed, flattened tensor read it untransposed
    (module doc), and the nodes rewritten.

    Args:
        model (onnx.ModelProto): The graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims (batch axis symbolic), for W's dims.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"perm_gather": <Gather/GatherElements rewritten>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m = copy_model(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    readers: dict[str, list] = collections.defaultdict(list)
    for i, n in enumerate(g.node):
        for name in n.input:
            readers[name].append(i)
    outputs = {o.name for o in g.output}

    def default(i: int | None, op: str) -> bool:
        return i is not None and g.node[i].op_type == op and g.node[i].domain in DEFAULT_DOMAINS

    replace: dict[int, list] = {}
    new_inits: list = []
    done = 0
    for ri, rs in enumerate(g.node):
        if rs.op_type != "Reshape" or rs.domain not in DEFAULT_DOMAINS or len(rs.input) < 2:
            continue
        ti = producer.get(rs.input[0])
        shape = _const(inits, rs.input[1])
        if not default(ti, "Transpose") or shape is None or shape.ndim != 1 or shape.size < 2:
            continue
        tr = g.node[ti]
        w = tr.input[0]
        dims = shapes.get(w)
        perm = node_attrs(tr).get("perm")
        if not dims or perm is None or len(perm) != len(dims):
            continue
        pi = _flat_perm(dims, list(perm))
        if pi is None or int(shape[0]) not in (-1, 0) or int(shape[1]) != pi.size or np.any(shape[2:] != 1):
            continue
        if any(a.name == "allowzero" and a.i for a in rs.attribute):
            continue
        x = rs.output[0]
        b = Builder(rs.name or x, "perm_gather")
        wr = None
        kept = x in outputs
        for gi in readers[x]:
            gn = g.node[gi]
            axis = node_attrs(gn).get("axis", 0)
            if gn.input[0] != x or axis not in (1, 1 - len(shape)) or gi in replace:
                kept = True
                continue
            if default(gi, "Gather"):
                idx = _const(inits, gn.input[1])
                if idx is None or idx.ndim != 1 or np.any(idx < -pi.size) or np.any(idx >= pi.size):
                    kept = True
                    continue
                c = pi[idx.astype(np.int64) % pi.size]
                if not _is_run(c):
                    kept = True
                    continue
                wr = wr or b.node("Reshape", [w, rs.input[1]])
                bs = Builder(gn.name or gn.output[0], "perm_gather")
                bs.node("Slice", [wr, bs.const("starts", np.array([c[0]], np.int64)),
                                  bs.const("ends", np.array([c[-1] + 1], np.int64)),
                                  bs.const("axes", np.array([1], np.int64))], out=gn.output[0])
                replace[gi] = bs.nodes
                new_inits += bs.inits
                done += 1
            elif default(gi, "GatherElements"):
                li = producer.get(gn.input[1])
                table = _const(inits, g.node[li].input[0]) if default(li, "Gather") else None
                if (table is None or table.ndim != 1 or table.size != pi.size or len(readers[gn.input[1]]) != 1
                        or gn.input[1] in outputs or node_attrs(g.node[li]).get("axis", 0) != 0 or li in replace
                        or np.any(table < -pi.size) or np.any(table >= pi.size)
                        or not np.array_equal(pi[table.astype(np.int64) % pi.size], np.arange(pi.size))):
                    kept = True
                    continue
                wr = wr or b.node("Reshape", [w, rs.input[1]])
                n2 = onnx.NodeProto()
                n2.CopyFrom(gn)
                n2.input[0], n2.input[1] = wr, g.node[li].input[1]
                replace[gi], replace[li] = [n2], []
                done += 1
            else:
                kept = True
        if wr is None:
            continue
        replace[ri] = (b.nodes + [rs]) if kept else b.nodes
        if not kept and len(readers[tr.output[0]]) == 1 and tr.output[0] not in outputs:
            replace[ti] = []
    if not done:
        return m, {"perm_gather": 0}
    m, _ = spliced(m, replace, new_inits)
    gone = {o for i, ns in replace.items() if not ns for o in model.graph.node[i].output}
    keep = [v for v in g.value_info if v.name not in gone]
    del g.value_info[:]
    g.value_info.extend(keep)
    return m, {"perm_gather": done}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`gather_rewrite` at ``target.dims``, the states a
    ``state_layout`` rewrite turned time-major given in their new layout."""
    from cosyedge.passes.state_layout import layout_dims

    return gather_rewrite(model, layout_dims(model, target.dims))


__all__ = ["gather_rewrite", "run"]
