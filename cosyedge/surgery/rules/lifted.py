"""Ops on positions: the rules of role :data:`~cosyedge.surgery.rules.POSITIONS`.

Positions counted from the sequence start (:mod:`cosyedge.surgery.rules.positions`) differ per stream (StreamPool runs
streams that joined at different times in one batch), so in the chunk graph they carry a leading batch axis that the
full graph does not have: such a tensor is **lifted** (its chunk shape is ``(N, *full shape)``). The walker gives
every node with a lifted input the role :data:`~cosyedge.surgery.rules.POSITIONS`, and its rule here rewrites it:
elementwise ops with constants, Cast, Unsqueeze/Squeeze/Reshape/Concat/Transpose (axes moved by one), Shape (the
lifted axis dropped), table lookups (Gather/GatherND of a constant with lifted indices), MatMul with a constant, Einsum
with constants (``torch.outer(positions, inv_freq)``; the positions' time letter kept in the output), Expand (joined to
the batch axis where the target shape holds the batch size). Where a lifted tensor meets a tensor that has a batch axis
(``x + pe``, ``cumsum(x) / count``, ``x * scale(pos)``), the batch axis is moved to where the full graph broadcasts it
and the tensor is an ordinary stream again. Positions used in a way that needs the sequence's end are refused:
combined with anything computed from the sequence length (``T - pos``, ``pos / T``), reversed or sliced
(``pos.flip(0)``), or returned as a graph output.

Source: numpy broadcasting; ONNX Gather, GatherND, Einsum.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge.surgery.rules import ANY, POSITIONS, STREAM, Blocker, lookup, register
from cosyedge.surgery.rules.positions import _FUTURE, _become, _dtype, _same, _table_limit

_UNARY = set(("Abs Acos Asin Atan Cast Ceil Cos Cosh Erf Exp Floor Identity IsInf IsNaN Log Neg Not Reciprocal Relu "
              "Round Sigmoid Sign Sin Sinh Softplus Sqrt Tan Tanh").split())
_NARY = set(("Add And BitShift CastLike Clip Div Equal Greater GreaterOrEqual Less LessOrEqual Max Mean Min Mod Mul "
             "Or Pow PRelu Sub Sum Where Xor").split())


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


def _lift(node: Any, ctx: Any) -> list[int]:
    """Indices (list[int]) of ``node``'s inputs that are positions (lifted)."""
    return [i for i, t in enumerate(node.inputs) if t.name in ctx.positions.lifted]


@register(*(_UNARY | _NARY | {"MatMul"}), roles=(POSITIONS,))
def lifted_elementwise(node: Any, ctx: Any) -> None:
    """Elementwise ops and MatMul on positions (role :data:`~cosyedge.surgery.rules.POSITIONS`, module doc): with
    constants they stay lifted; with a batched stream the positions are joined to its batch axis and the op's stream
    rule runs.

    Raises:
        Blocker: positions combined with something computed from the sequence length or the data that has no batch
            axis, or multiplied by something other than a constant.
    """
    ins = node.inputs
    lift = _lift(node, ctx)
    base = f"{node.name}/position"
    op = node.op
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
        return lookup(STREAM, op)(node, ctx)
    if op == "MatMul" and (lift not in ([0], [1]) or batched):
        raise Blocker("multiplies positions by something other than a constant")
    R = max(_rank(ctx, t) if t.name else 0 for t in ins)
    if batched:
        out = node.outputs[0]
        b = ctx.batch_axis(out)
        for i in lift:
            _join(node, i, ctx, R, b, base)
        return lookup(STREAM, op)(node, ctx)
    for i in lift:
        ins[i] = _pad(ctx, ins[i], R - len(ctx.fact(ins[i]).shape1), base)
    return _lift_outputs(node, ctx)


@register("Unsqueeze", "Squeeze", roles=(POSITIONS,))
def lifted_unsqueeze(node: Any, ctx: Any) -> None:
    """Unsqueeze/Squeeze of positions: the axes move by one for the lifted axis."""
    axes, as_input = _axes_input(ctx, node)
    axes = [a + 1 if a >= 0 else a for a in axes]
    if as_input:
        node.inputs[1] = ctx.const(axes)
    else:
        node.attrs["axes"] = axes
    return _lift_outputs(node, ctx)


@register("Reshape", roles=(POSITIONS,))
def lifted_reshape(node: Any, ctx: Any) -> None:
    """Reshape of positions: this chunk's N first, then the full graph's shape (a time size from the chunk).

    Raises:
        Blocker: a shape computed from data, or from the sequence length on an axis other than time.
    """
    ins = node.inputs
    base = f"{node.name}/position"
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


@register("Concat", roles=(POSITIONS,))
def lifted_concat(node: Any, ctx: Any) -> None:
    """Concat of positions with positions, along an axis other than time.

    Raises:
        Blocker: positions concatenated with other tensors, or along time.
    """
    ins = node.inputs
    if _lift(node, ctx) != list(range(len(ins))):
        raise Blocker("concatenates positions with tensors that are not positions")
    rank = len(ctx.fact(ins[0]).shape1)
    a = int(node.attrs.get("axis", 0))
    if a % rank == ctx.fact(ins[0]).axis:
        raise Blocker("concatenates positions along the time axis")
    node.attrs["axis"] = a + 1 if a >= 0 else a
    return _lift_outputs(node, ctx)


@register("Shape", roles=(POSITIONS,))
def lifted_shape(node: Any, ctx: Any) -> None:
    """Shape of positions: the full graph's shape (the lifted axis dropped, then its start/end)."""
    ins = node.inputs
    base = f"{node.name}/position"
    rank = len(ctx.fact(ins[0]).shape1)
    start, end = int(node.attrs.get("start", 0)), int(node.attrs.get("end", rank))
    start, end = [max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end)]
    full = ctx.op("Shape", [ins[0]], base, dtype=np.int64)
    node.attrs.clear()
    _become(node, "Slice", [full, ctx.const([1 + start]), ctx.const([1 + max(start, end)]), ctx.const([0])])
    for o in node.outputs:
        ctx.set_delay(o, None)
    return None


@register("Gather", "GatherND", "Slice", "Split", roles=(POSITIONS,))
def lifted_gather(node: Any, ctx: Any) -> None:
    """Gather/GatherND of a constant table at positions (table lookups), or Gather/Slice/Split of positions along an
    axis other than time (:func:`_along_other_axis`).

    Raises:
        Blocker: a table that is not a constant, GatherND with batch_dims, or any other form.
    """
    ins = node.inputs
    lift = _lift(node, ctx)
    base = f"{node.name}/position"
    op = node.op
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
    return no_position_rule(node, ctx)


@register("Einsum", roles=(POSITIONS,))
def lifted_einsum(node: Any, ctx: Any) -> None:
    """Einsum with positions (:func:`_einsum`)."""
    return _einsum(node, ctx, _lift(node, ctx))


@register("Transpose", roles=(POSITIONS,))
def lifted_transpose(node: Any, ctx: Any) -> None:
    """Transpose of positions: the lifted axis stays first, the full graph's axes move by one."""
    ins = node.inputs
    perm = node.attrs.get("perm")
    perm = list(range(_rank(ctx, ins[0]) - 1, -1, -1)) if perm is None else [int(p) for p in perm]
    node.attrs["perm"] = [0] + [p + 1 for p in perm]
    return _lift_outputs(node, ctx)


@register("Expand", roles=(POSITIONS,))
def lifted_expand(node: Any, ctx: Any) -> None:
    """Expand of positions (:func:`_expand`)."""
    if _lift(node, ctx) == [0]:
        return _expand(node, ctx, f"{node.name}/position")
    return no_position_rule(node, ctx)


@register(ANY, roles=(POSITIONS,))
def no_position_rule(node: Any, ctx: Any) -> None:
    """Every other op on positions.

    Raises:
        Blocker: always (no position rule for it).
    """
    raise Blocker(f"{node.op} on positions counted from the sequence start (no position rule for it)")


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
    out = node.outputs[0]
    shp = node.inputs[1]
    if out.name in ctx.batch_axes:
        _join(node, 0, ctx, len(ctx.fact(out).shape1), ctx.batch_axes[out.name], base)
        return lookup(STREAM, "Expand")(node, ctx)
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
            ctx.positions.lifted.add(o.name)
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
