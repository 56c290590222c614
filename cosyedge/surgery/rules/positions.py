"""Positions as state: ``Range`` over time (positions counted from the sequence start) streams with a counter.

``arange(T)`` (``Range(start, start + delta * T, delta)`` whose length is the frames of a time axis, with a start and
a step that are the same at every length) becomes, on one chunk, ``start + delta * (counter + arange(chunk
frames))`` where ``counter`` is a per-stream **position state**: int64 ``(N, 1)``, zeros at the stream's start, kind
``"position"``, advanced by the chunk's frames (of that time axis's rate) on every run. An encoding table sliced to
the length (``pe[:, :T]``: a Slice of a constant whose end is the sequence length) becomes a Gather of the table at
the same positions.

The positions differ per stream (StreamPool runs streams that joined at different times in one batch), so in the
chunk graph they carry a leading batch axis that the full graph does not have: such a tensor is **lifted** (its
chunk shape is ``(N, *full shape)``). Ops on lifted tensors are rewritten by :func:`lifted` (the walker sends every
node with a lifted input here): elementwise ops with constants, Cast, Unsqueeze/Squeeze/Reshape/Concat/Transpose
(axes moved by one), Shape (the lifted axis dropped), table lookups (Gather/GatherND of a constant with lifted
indices), MatMul with a constant, Einsum with constants (``torch.outer(positions, inv_freq)``; the positions' time
letter kept in the output), Expand (joined to the batch axis where the target shape holds the batch size). Where a
lifted tensor meets a tensor that has a batch axis (``x + pe``, ``cumsum(x) / count``, ``x * scale(pos)``), the
batch axis is moved to where the full graph broadcasts it and the tensor is an ordinary stream again. Positions used
in a way that needs the sequence's end are refused: combined with anything computed from the sequence length (``T -
pos``, ``pos / T``), counted from a start that depends on it or downwards (``arange(T - 1, -1, -1)``), reversed or
sliced (``pos.flip(0)``), or returned as a graph output.

Sources: ONNX Range (``number_of_elements = max(ceil((limit - start) / delta), 0)``), Gather, GatherND, numpy
broadcasting; the cache offsets of streaming transformers (NeMo ``cache_last_channel_len``, Zipformer
``processed_lens``, Mimi ``end_offset``) are the same per-stream counter.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge.surgery.rules import RULES, Blocker

POSITION = "position"
"""str: :class:`~cosyedge.artifacts.StateSpec` kind of a position counter."""

_UNARY = set(("Abs Acos Asin Atan Cast Ceil Cos Cosh Erf Exp Floor Identity IsInf IsNaN Log Neg Not Reciprocal Relu "
              "Round Sigmoid Sign Sin Sinh Softplus Sqrt Tan Tanh").split())
_NARY = set(("Add And BitShift CastLike Clip Div Equal Greater GreaterOrEqual Less LessOrEqual Max Mean Min Mod Mul "
             "Or Pow PRelu Sub Sum Where Xor").split())
_FUTURE = ("needs the sequence's total length, which a stream does not know (T - pos, pos / T, positions counted "
           "from the end)")


def _same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and np.shape(a) == np.shape(b) and np.array_equal(a, b)


def _dtype(ctx: Any, t: Any) -> Any:
    v = ctx.value(t)
    if v is not None:
        return np.asarray(v).dtype
    return np.dtype(t.dtype) if t.dtype is not None else np.dtype(np.float32)


def _chunk_positions(ctx: Any, rate: Fraction, base: str) -> Any:
    """int64 (N, frames): each stream's positions of this chunk's frames at ``rate`` frames per tick, counted from
    its stream's start (the position counter state plus ``arange(frames)``)."""
    counter = ctx.position_counter(rate)
    n = ctx.unsqueeze(ctx.frames_tensor(rate, base), [0], base, squeeze=True)
    rng = ctx.op("Range", [ctx.const(0), n, ctx.const(1)], base, dtype=np.int64)
    return ctx.op("Add", [counter, rng], base, dtype=np.int64)


def range_positions(node: Any, ctx: Any) -> None:
    """Range whose output runs over time (module doc): positions from the sequence start become the position
    counter plus the chunk's frames; the output is lifted (``(N, frames)``), delay 0.

    Raises:
        Blocker: start or step computed from the sequence length or the data, a step that is not positive (counts
            down from the end), or more positions than the time axis has frames.
    """
    out = node.outputs[0]
    f = ctx.fact(out)
    start, _, delta = node.inputs
    s1, d1 = ctx.value(start), ctx.value(delta)
    if not _same(s1, ctx.value2(start)):
        raise Blocker(f"counts positions from a start computed from the sequence length or the data: it {_FUTURE}")
    if not _same(d1, ctx.value2(delta)):
        raise Blocker("counts positions with a step computed from the sequence length or the data")
    s, d = np.asarray(s1).reshape(()), np.asarray(d1).reshape(())
    if not d > 0:
        raise Blocker(f"counts positions downwards (step {d}): it {_FUTURE}")
    if f.axis != 0 or f.extra != 0:
        raise Blocker(f"counts {f.extra} positions beyond the frames of a time axis (only arange over the frames "
                      "of a time axis streams)")
    base = f"{node.name}/position"
    dt = _dtype(ctx, out)
    pos = _chunk_positions(ctx, f.rate, base)
    if dt != np.int64:
        pos = ctx.op("Cast", [pos], base, {"to": _onnx_type(dt)}, dtype=dt)
    if d != 1:
        pos = ctx.op("Mul", [pos, ctx.const(d, dtype=dt)], base, dtype=dt)
    if s != 0:
        pos = ctx.op("Add", [pos, ctx.const(s, dtype=dt)], base, dtype=dt)
    _become(node, "Identity", [pos])
    ctx.lifted.add(out.name)
    ctx.set_delay(out, 0)


def _onnx_type(dt: Any) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))


def _become(node: Any, op: str, inputs: list, attrs: dict | None = None) -> None:
    node.op, node.attrs = op, attrs or {}
    node.inputs.clear()
    node.inputs.extend(inputs)


def table_slice(node: Any, ctx: Any, v1: dict, v2: dict) -> None:
    """A Slice of a constant table whose end runs with the sequence length (``pe[:, :T]``, ``pe[:, s:s + T]``): the
    rows at this chunk's positions, ``Gather(table, s + positions)`` on the sliced axis; the output is lifted.

    Args:
        node: The Slice node (data input not streaming, output streaming).
        ctx: The walker.
        v1, v2 (dict[str, np.ndarray]): starts/ends/axes/steps (int64, axes and steps filled in) in both probes.
    Raises:
        Blocker: the start depends on the sequence length, a step other than 1 on that axis, another axis sliced
            by a length-dependent amount, or more rows than the time axis has frames.
    """
    data, out = node.inputs[0], node.outputs[0]
    fo = ctx.fact(out)
    table = ctx.value(data)
    if table is None or not _same(table, ctx.value2(data)):
        raise Blocker("its starts/ends run over time and it slices a tensor that is not a constant table")
    rank = table.ndim
    axes = [int(a) % rank for a in v1["axes"]]
    a = fo.axis
    if a not in axes:
        raise Blocker("its starts/ends run over time")
    j = axes.index(a)
    if v1["starts"][j] != v2["starts"][j] or int(v1["steps"][j]) != 1:
        raise Blocker(f"slices a table at a start computed from the sequence length, or by steps: it {_FUTURE}")
    for key in ("starts", "ends", "axes", "steps"):
        for i in range(len(axes)):
            if i != j and v1[key][i] != v2[key][i]:
                raise Blocker(f"slices another axis by a {key} computed from the sequence length")
    if fo.extra != 0:
        raise Blocker("slices a table to a length other than the frames of a time axis")
    n = table.shape[a]
    s = int(v1["starts"][j])
    s = max(0, min(n, s + n if s < 0 else s))
    base = f"{node.name}/position"
    keep = [i for i in range(len(axes)) if i != j]
    src = data
    if keep:
        src = ctx.op("Slice", [data] + [ctx.const([int(v1[k][i]) for i in keep]) for k in ("starts", "ends")]
                     + [ctx.const([axes[i] for i in keep]), ctx.const([int(v1["steps"][i]) for i in keep])], base,
                     dtype=table.dtype)
    ctx.limit_ticks(math.floor(Fraction(n - s) / fo.rate), f"the encoding table '{data.name}' of {node.op} node "
                    f"'{node.name}' ({n - s} rows)")
    idx = _chunk_positions(ctx, fo.rate, base)
    if s:
        idx = ctx.op("Add", [idx, ctx.const(s)], base, dtype=np.int64)
    if a == 0:
        _become(node, "Gather", [src, idx], {"axis": 0})
    else:
        g = ctx.op("Gather", [src, idx], base, {"axis": a}, dtype=table.dtype)  # table[:a] + (N, frames) + ...
        perm = [a] + list(range(a)) + list(range(a + 1, rank + 1))
        _become(node, "Transpose", [g], {"perm": perm})
    ctx.lifted.add(out.name)
    ctx.set_delay(out, 0)


def _table_limit(ctx: Any, node: Any, idx: Any, rows: int) -> None:
    """Record the stream length a lookup of ``rows`` rows by positions ``idx`` allows (``nn.Embedding(arange(T))``):
    from the probe's indices, the row the first frame reads and how many rows a frame advances."""
    f, v = ctx.fact(idx), ctx.value(idx)
    if v is None or f.axis is None or not np.size(v):
        return
    seq = np.moveaxis(np.asarray(v), f.axis, 0).reshape(np.shape(v)[f.axis], -1)[:, 0]
    if len(seq) < 2 or seq[1] <= seq[0]:
        return
    step, start = int(seq[1] - seq[0]), int(seq[0])
    frames = (rows - start + step - 1) // step  # rows start, start + step, ... < rows
    ctx.limit_ticks(math.floor(Fraction(frames) / f.rate), f"the table '{node.inputs[0].name}' of {node.op} node "
                    f"'{node.name}' ({rows} rows)")


def _const_ok(ctx: Any, t: Any) -> bool:
    """True when ``t`` is the same in both probe runs and at a chunk's lengths and does not stream (a constant, or
    sizes that do not change with the length: :meth:`cosyedge.surgery.walker.Walker.length_dependence`)."""
    if not t.name:
        return True
    if ctx.is_stream(t):
        return False
    return _same(ctx.value(t), ctx.value2(t)) and not ctx.length_dependence(t, Fraction(1))


def _rank(ctx: Any, t: Any) -> int:
    v = ctx.value(t)
    return int(np.ndim(v)) if v is not None else len(ctx.fact(t).shape1)


def _pad(ctx: Any, t: Any, k: int, base: str) -> Any:
    """Lifted ``t`` with ``k`` axes of 1 inserted after its lifted axis (numpy broadcasting against a higher rank)."""
    if k <= 0:
        return t
    return ctx.unsqueeze(t, list(range(1, k + 1)), base)


def _axes_input(ctx: Any, node: Any) -> tuple[list[int], bool]:
    if len(node.inputs) > 1 and node.inputs[1].name:
        v = ctx.value(node.inputs[1])
        if v is None or not _same(v, ctx.value2(node.inputs[1])):
            raise Blocker("its axes are computed at run time")
        return [int(a) for a in np.asarray(v).reshape(-1)], True
    return [int(a) for a in node.attrs.get("axes", [])], False


def lifted(node: Any, ctx: Any) -> None:
    """The rule for every node with a lifted input (positions, module doc): rewrite it for the extra leading
    batch axis, or join the positions to a batched stream.

    Raises:
        Blocker: an op with no position rule, positions combined with something computed from the sequence length or
            the data that has no batch axis, a graph output that is positions, a join where the full graph's
            broadcast puts a frame axis at the batch axis.
    """
    ins = node.inputs
    lift = [i for i, t in enumerate(ins) if t.name in ctx.lifted]
    base = f"{node.name}/position"
    op = node.op
    if op in _UNARY or op in _NARY or op == "MatMul":
        inputs = {t.name for t in ctx.graph.inputs}
        batched = [i for i, t in enumerate(ins) if i not in lift and t.name
                   and (t.name in ctx.batch_axes or (ctx.is_stream(t) and t.name in inputs))]
        other = [i for i, t in enumerate(ins) if i not in lift and i not in batched and not _const_ok(ctx, t)]
        for i in other:
            _check_operand(ctx, ins[i])
        if other and ctx.fixed_batch is None:
            raise Blocker(f"combines positions counted from the sequence start with '{ins[other[0]].name}', which "
                          "runs over time but has no batch axis the batch probe found (a batch folded into another "
                          "axis?): the positions of each stream cannot be joined to it")
        if ctx.fixed_batch is not None and (other or batched):  # one start for every row: positions as one stream
            for i in lift:
                _unlift(node, i, ctx, base)
            return RULES[op](node, ctx)
        if op == "MatMul" and (lift not in ([0], [1]) or batched):
            raise Blocker("multiplies positions by something other than a constant")
        R = max(_rank(ctx, t) if t.name else 0 for t in ins)
        if batched:
            out = node.outputs[0]
            b = ctx.batch_axis(out)
            for i in lift:
                _join(node, i, ctx, R, b, base)
            return RULES[op](node, ctx)
        for i in lift:
            ins[i] = _pad(ctx, ins[i], R - len(ctx.fact(ins[i]).shape1), base)
        return _lift_outputs(node, ctx)
    if op in ("Unsqueeze", "Squeeze"):
        axes, as_input = _axes_input(ctx, node)
        axes = [a + 1 if a >= 0 else a for a in axes]
        if as_input:
            ins[1] = ctx.const(axes)
        else:
            node.attrs["axes"] = axes
        return _lift_outputs(node, ctx)
    if op == "Reshape":
        shp, shp2 = ctx.value(ins[1]), ctx.value2(ins[1])
        lead = ctx.op("Slice", [ctx.op("Shape", [ins[0]], base, dtype=np.int64), ctx.const([0]), ctx.const([1])],
                      base, dtype=np.int64)  # this chunk's N (allowzero may forbid a 0 there)
        if _same(shp, shp2):
            ins[1] = ctx.op("Concat", [lead, ctx.const([int(v) for v in np.asarray(shp).reshape(-1)])], base,
                            {"axis": 0}, dtype=np.int64)
        else:
            fo = ctx.fact(node.outputs[0])
            if shp is None or shp2 is None or np.shape(shp) != np.shape(shp2) or fo.axis is None:
                raise Blocker("reshapes positions to a shape computed from data")
            parts = [lead]
            for i, (p, q) in enumerate(zip(np.asarray(shp).reshape(-1), np.asarray(shp2).reshape(-1))):
                if i == fo.axis:
                    parts.append(ctx.frames_tensor(fo.rate, base))
                elif p == q:
                    parts.append(ctx.const([int(p)]))
                else:
                    raise Blocker("reshapes positions by a size computed from the sequence length on an axis "
                                  "other than time")
            ins[1] = ctx.op("Concat", parts, base, {"axis": 0}, dtype=np.int64)
        return _lift_outputs(node, ctx)
    if op == "Concat":
        if lift != list(range(len(ins))):
            raise Blocker("concatenates positions with tensors that are not positions")
        rank = len(ctx.fact(ins[0]).shape1)
        a = int(node.attrs.get("axis", 0))
        if a % rank == ctx.fact(ins[0]).axis:
            raise Blocker("concatenates positions along the time axis")
        node.attrs["axis"] = a + 1 if a >= 0 else a
        return _lift_outputs(node, ctx)
    if op == "Shape":  # the full graph's shape: the lifted axis dropped, then its start/end
        rank = len(ctx.fact(ins[0]).shape1)
        start, end = int(node.attrs.get("start", 0)), int(node.attrs.get("end", rank))
        start, end = [max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end)]
        full = ctx.op("Shape", [ins[0]], base, dtype=np.int64)
        node.attrs.clear()
        _become(node, "Slice", [full, ctx.const([1 + start]), ctx.const([1 + max(start, end)]), ctx.const([0])])
        for o in node.outputs:
            ctx.set_delay(o, None)
        return None
    if op in ("Gather", "GatherND") and lift == [1]:
        table = ctx.value(ins[0])
        if ctx.is_stream(ins[0]) or not _const_ok(ctx, ins[0]):
            raise Blocker("looks positions up in a tensor that is not a constant table")
        if op == "GatherND":
            if int(node.attrs.get("batch_dims", 0)):
                raise Blocker("looks positions up with batch_dims")
            return _lift_outputs(node, ctx)
        a = int(node.attrs.get("axis", 0)) % np.ndim(table)
        _table_limit(ctx, node, ins[1], np.shape(table)[a])
        if a:
            out = node.outputs[0]
            g = ctx.op("Gather", list(ins), base, {"axis": a}, dtype=table.dtype)
            k = len(ctx.fact(ins[1]).shape1) + 1  # lifted index axes
            rank = np.ndim(table) - 1 + k
            perm = [a] + list(range(a)) + list(range(a + 1, rank))
            _become(node, "Transpose", [g], {"perm": perm})
            node.outputs[0] = out
        return _lift_outputs(node, ctx)
    if op in ("Gather", "Slice", "Split") and lift == [0]:
        return _along_other_axis(node, ctx)
    if op == "Einsum":
        return _einsum(node, ctx, lift)
    if op == "Transpose":  # the lifted axis stays first, the full graph's axes move by one
        perm = node.attrs.get("perm")
        perm = list(range(_rank(ctx, ins[0]) - 1, -1, -1)) if perm is None else [int(p) for p in perm]
        node.attrs["perm"] = [0] + [p + 1 for p in perm]
        return _lift_outputs(node, ctx)
    if op == "Expand" and lift == [0]:
        return _expand(node, ctx, base)
    raise Blocker(f"{op} on positions counted from the sequence start (no position rule for it)")


def _along_other_axis(node: Any, ctx: Any) -> None:
    """Gather (constant indices), Slice (constant starts/ends/axes/steps) or Split of positions along an axis other than
    their time axis (torchtune's ``rope_cache[..., 0]``, a rotate-half ``x[..., :d // 2]``): the axes move by one for
    the lifted axis.

    Raises:
        Blocker: an index, bound or axis computed at run time, or the positions' time axis (slicing or picking frames
            of positions, which needs the sequence's end).
    """
    ins = node.inputs
    f = ctx.fact(ins[0])
    rank = len(f.shape1)

    def moved(a: int) -> int:
        a = int(a)
        if a % rank == f.axis:
            raise Blocker(f"{node.op} of positions along their time axis (reversing, picking or slicing frames of "
                          f"positions): it {_FUTURE}")
        return a + 1 if a >= 0 else a

    if node.op == "Slice":
        return _slice_lifted(node, ctx, moved)
    for t in ins[1:]:
        if t.name and not _const_ok(ctx, t):
            raise Blocker(f"{node.op} of positions with indices or bounds computed at run time")
    node.attrs["axis"] = moved(node.attrs.get("axis", 0))
    return _lift_outputs(node, ctx)


def _slice_lifted(node: Any, ctx: Any, moved: Any) -> None:
    """Slice of positions (:func:`_along_other_axis`): constant bounds on other axes move by one; on the time axis only
    a slice that keeps every frame at both probe lengths is allowed (x-transformers' ``freqs[:, -seq_len:]`` of
    ``seq_len`` rows: its start, ``-T``, is computed from the length, yet it is the whole axis) and is dropped."""
    ins = node.inputs
    f = ctx.fact(ins[0])
    rank = len(f.shape1)
    probe = []
    for value, shape in ((ctx.value, f.shape1), (ctx.value2, f.shape2)):
        v = [value(t) if t.name else None for t in ins[1:5]] + [None] * (5 - len(ins))
        if v[0] is None or v[1] is None:
            raise Blocker("Slice of positions with bounds computed from the data")
        n = np.size(v[0])
        axes = np.arange(n) if v[2] is None else np.asarray(v[2]).reshape(-1) % rank
        steps = np.ones(n, dtype=np.int64) if v[3] is None else np.asarray(v[3]).reshape(-1)
        probe.append((np.asarray(v[0]).reshape(-1), np.asarray(v[1]).reshape(-1), axes, steps, shape))
    keep = []
    for j, a in enumerate(probe[0][2]):
        if a == f.axis:
            for starts, ends, _, steps, shape in probe:
                dim = int(shape[a])
                lo = int(starts[j]) + dim if starts[j] < 0 else int(starts[j])
                hi = int(ends[j]) + dim if ends[j] < 0 else int(ends[j])
                if steps[j] != 1 or max(0, lo) != 0 or min(hi, dim) != dim:
                    raise Blocker("Slice of positions along their time axis (reversing, picking or slicing frames of "
                                  f"positions): it {_FUTURE}")
            continue
        if any(not np.array_equal(probe[0][k][j], probe[1][k][j]) for k in range(4)):
            raise Blocker("Slice of positions with bounds computed from the sequence length on an axis other than time")
        keep.append(j)
    if not keep:
        _become(node, "Identity", [ins[0]])
        return _lift_outputs(node, ctx)
    starts, ends, axes, steps, _ = probe[0]
    _become(node, "Slice", [ins[0], ctx.const([int(starts[j]) for j in keep]), ctx.const([int(ends[j]) for j in keep]),
                            ctx.const([moved(int(axes[j])) for j in keep]), ctx.const([int(steps[j]) for j in keep])])
    return _lift_outputs(node, ctx)


def _expand(node: Any, ctx: Any, base: str) -> None:
    """Expand of positions (HF LLaMA ``arange(T)[None].expand(N, -1)``). Where the full graph's output has a batch
    axis (the target shape holds the data's batch size) the positions are joined there (:func:`_join`) and the
    ordinary Expand rule runs; otherwise the positions stay lifted (axes of 1 inserted after the lifted axis when the
    target shape is longer) and a target size computed from the sequence length gets the chunk's frames.

    Raises:
        Blocker: a target shape computed from the data (other than sizes of streaming tensors).
    """
    from cosyedge.surgery.rules import RULES as _R

    out = node.outputs[0]
    shp = node.inputs[1]
    if out.name in ctx.batch_axes:
        _join(node, 0, ctx, len(ctx.fact(out).shape1), ctx.batch_axes[out.name], base)
        return _R["Expand"](node, ctx)
    if not _const_ok(ctx, shp) and not ctx.fact(shp).sizes:
        raise Blocker("expands positions to a shape computed from data")
    k = int(np.size(ctx.value(shp))) if ctx.value(shp) is not None else len(ctx.fact(out).shape1)
    node.inputs[0] = _pad(ctx, node.inputs[0], k - len(ctx.fact(node.inputs[0]).shape1), base)
    if ctx.fact(shp).sizes:
        node.inputs[1] = ctx.stream_sizes(shp, out, node.name)
    return _lift_outputs(node, ctx)


def _einsum(node: Any, ctx: Any, lift: list[int]) -> None:
    """Einsum with lifted operands and constant others (``torch.outer(positions, inv_freq)``, ``einsum("i,j->ij")``
    of RoPE): a new letter for the lifted axis is put first in every lifted operand and in the output, so each
    stream's positions meet the constants as in the full graph.

    Args:
        node: The Einsum node (attribute ``equation`` with an explicit ``->``, no ``...``).
        ctx: The walker's rule context.
        lift: Indices of the lifted inputs.

    Raises:
        Blocker: an implicit or ellipsis equation, an operand that streams or depends on the length or data, or a
            time letter of positions that is summed over or repeated (a sum or diagonal over positions needs the
            sequence's end).
    """
    eq = node.attrs.get("equation", "")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    eq = eq.replace(" ", "")
    if "->" not in eq or "." in eq:
        raise Blocker("Einsum on positions with an implicit output or '...' (no position rule for it)")
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(node.inputs):
        raise Blocker("Einsum on positions whose equation does not match its inputs")
    for i, t in enumerate(node.inputs):
        if i not in lift and not _const_ok(ctx, t):
            raise Blocker(f"Einsum combines positions counted from the sequence start with '{t.name}', which "
                          f"streams or depends on the sequence length or the data")
    for i in lift:
        f = ctx.fact(node.inputs[i])
        letter = terms[i][f.axis] if f.axis is not None and f.axis < len(terms[i]) else None
        if letter is None or terms[i].count(letter) != 1 or letter not in rhs:
            raise Blocker("Einsum sums over or takes a diagonal of positions counted from the sequence start: it "
                          + _FUTURE)
    new = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in eq)
    terms = [new + t if i in lift else t for i, t in enumerate(terms)]
    node.attrs["equation"] = ",".join(terms) + "->" + new + rhs
    return _lift_outputs(node, ctx)


def _lift_outputs(node: Any, ctx: Any) -> None:
    graph_outs = {t.name for t in ctx.graph.outputs}
    if any(o.name in graph_outs for o in node.outputs):
        raise Blocker("returns positions counted from the sequence start as a graph output (a chunk graph has "
                      "them per stream; use them inside the model)")
    for o in node.outputs:
        if o.name:
            ctx.lifted.add(o.name)
            ctx.set_delay(o, 0)


def _check_operand(ctx: Any, t: Any) -> None:
    """Refuse positions combined with ``t`` (not a constant, no batch axis) where the full graph needs the sequence's
    length: ``t`` is computed from the length alone (``T - pos``, ``pos / T``), or is no stream (a summary of the whole
    sequence). A tensor that runs over time (data, per frame) passes: a fixed-batch graph joins it (:func:`_unlift`).

    Raises:
        Blocker: which of the two, naming ``t``.
    """
    f = ctx.fact(t)
    data = ctx.masks.data_path(t.name) if ctx.masks is not None else "data"
    if not data:
        raise Blocker(f"combines positions counted from the sequence start with '{t.name}', which is computed from "
                      f"the sequence length alone (T - pos, pos / T, positions counted from the end): it needs the "
                      f"sequence's total length, which a stream does not know")
    if not f.is_stream:
        raise Blocker(f"combines positions counted from the sequence start with '{t.name}', which does not run over "
                      "time but depends on the data (a summary of the whole sequence): it needs the whole sequence")


def _unlift(node: Any, i: int, ctx: Any, base: str) -> None:
    """Replace lifted input ``i`` of ``node`` by row 0 of its per-stream positions, shaped as in the full graph: for a
    graph whose fixed batch could not be freed (:mod:`cosyedge.surgery.batch`), which runs every row of its batch from
    the same start, so every row has the same positions."""
    t = node.inputs[i]
    g = ctx.op("Gather", [t, ctx.const(0)], base, {"axis": 0},
               dtype=t.dtype if t.dtype is not None else _dtype(ctx, t))
    ctx.facts[g.name] = ctx.fact(t)
    ctx.set_delay(g, ctx.delay_of(t))
    node.inputs[i] = g


def _join(node: Any, i: int, ctx: Any, R: int, b: int, base: str) -> None:
    """Replace lifted input ``i`` of ``node`` by the same positions with their lifted axis at ``b``, the batch axis of
    the full graph's broadcast (rank ``R``), so that it broadcasts against the batched inputs as in the full graph;
    the new tensor is an ordinary stream (fact and batch axis recorded, delay of the positions)."""
    from cosyedge.surgery.facts import TimeFact

    t = ins_t = node.inputs[i]
    f = ctx.fact(ins_t)
    k = R - len(f.shape1)
    q1 = (1,) * k + tuple(f.shape1)
    q2 = (1,) * k + tuple(f.shape2)
    if q1[b] != 1:
        raise Blocker(f"positions meet a batched tensor with their axis {b - k} where the batch broadcasts")
    t = _pad(ctx, t, k, base)  # (N, *q)
    t = ctx.unsqueeze(t, [b + 1], base, squeeze=True)  # (N, q without b)
    if b:
        t = ctx.op("Transpose", [t], base, {"perm": list(range(1, b + 1)) + [0] + list(range(b + 1, R))})
    t.dtype = ins_t.dtype if ins_t.dtype is not None else _dtype(ctx, ins_t)
    ctx.facts[t.name] = TimeFact(q1, q2, f.axis + k, f.rate, f.extra)
    ctx.batch_axes[t.name] = b
    ctx.set_delay(t, ctx.delay_of(ins_t))
    node.inputs[i] = t
