"""Per-frame ops: they never mix frames, so the chunk graph runs them unchanged.

The time axis follows the measured facts wherever it moves (Transpose, Reshape, Squeeze, Unsqueeze,
Flatten); inputs of different delay are re-aligned first (:meth:`Walker.align`). Ops with an axis
attribute pass only when that axis is not time (Softmax, Concat, Split, Gather, LayerNormalization,
reductions, ...); MatMul, Gemm and Einsum only when they do not contract time. A rate change (a Reshape
that folds or unfolds time, a nearest Resize by an integer factor) scales the delay; a fold by ``m``
needs a delay that is a multiple of ``m`` (added when it is not).

Sources: ONNX operator docs (axis conventions of Softmax before/after opset 13, MatMul broadcasting,
Gemm transA, Einsum equations, Reshape row-major order); sonos/tract ``pulse/src/ops/`` (pass-through
ops keep the stream fact).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge.surgery.rules import Blocker, attr_str, register

ELEMENTWISE = (
    "Abs Acos Acosh Add And Asin Asinh Atan Atanh BatchNormalization BitShift Cast CastLike Ceil Celu Clip Cos "
    "Cosh DequantizeLinear Div Dropout Elu Equal Erf Exp Floor Gelu Greater GreaterOrEqual HardSigmoid HardSwish "
    "Identity IsInf IsNaN LeakyRelu Less LessOrEqual Log Max Mean Min Mish Mod Mul Neg Not Or PRelu Pow "
    "QuantizeLinear Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan "
    "Tanh ThresholdedRelu Where Xor Shape Size Transpose Squeeze Unsqueeze"
).split()


def pass_through(node: Any, ctx: Any, idxs: list[int] | None = None) -> None:
    """Align the streaming inputs ``idxs`` (default: all) and give every streaming output their delay,
    scaled by the output's rate over the input's (a fold by ``m`` first rounds the delay up to a multiple
    of ``m``)."""
    idxs = ctx.stream_inputs(node) if idxs is None else idxs
    d = ctx.align(node, idxs)
    outs = [o for o in node.outputs if o.name and ctx.fact(o).is_stream]
    if d is None or not idxs:
        for o in outs:
            ctx.set_delay(o, None)
        return
    rate_in = ctx.fact(node.inputs[idxs[0]]).rate
    folds = [ctx.fact(o).rate / rate_in for o in outs]
    m = math.lcm(*(q.denominator for q in folds)) if folds else 1
    if d % m:
        d = ctx.align(node, idxs, minimum=d + (-d) % m)
    for o, q in zip(outs, folds):
        ctx.set_delay(o, int(d * q))


@register(*ELEMENTWISE)
def elementwise(node: Any, ctx: Any) -> None:
    """Per-frame ops (:data:`ELEMENTWISE`): :func:`pass_through`, after checking that no input without a time axis
    is computed from the sequence length (``x / T``; the chunk graph would compute it from the chunk's length:
    :meth:`cosyedge.surgery.walker.Walker.length_dependence`).

    Raises:
        Blocker: such an input, naming it and its values at a chunk's length and on the whole sequence.
    """
    idxs = ctx.stream_inputs(node)
    rate = ctx.fact(node.inputs[idxs[0]]).rate if idxs else Fraction(1)
    for t in node.inputs:
        why = ctx.length_dependence(t, rate) if t.name and not ctx.is_stream(t) else ""
        if why:
            raise Blocker(f"{node.op} of a stream with {why}")
    pass_through(node, ctx)


def _time_axis(ctx: Any, node: Any, i: int = 0) -> tuple[int, int]:
    """(time axis, rank) of streaming input ``i`` of ``node``."""
    f = ctx.fact(node.inputs[i])
    return f.axis, len(f.shape1)


def _axis_attr(node: Any, default: int, rank: int) -> int:
    a = int(node.attrs.get("axis", default))
    return a % rank if rank else a


@register("Gather")
def gather(node: Any, ctx: Any) -> None:
    """Gather off the time axis: a streaming data tensor with constant indices along another axis, or a
    constant table looked up with streaming indices (per-frame lookups)."""
    idxs = ctx.stream_inputs(node)
    if idxs == [1]:
        return pass_through(node, ctx, [1])
    t, rank = _time_axis(ctx, node)
    if 1 in idxs:
        if _axis_attr(node, 0, rank) == t:
            return _gather_own_frames(node, ctx, t)
        raise Blocker("gathers from a streaming tensor with indices that run over time")
    if _axis_attr(node, 0, rank) == t:
        from cosyedge.surgery.rules.start import feeds_only_heads

        o = node.outputs[0]
        if not ctx.fact(o).is_stream and ctx.value(node.inputs[1]) is not None and feeds_only_heads(o, ctx):
            return  # x[:, 0] put back before the stream: the Concat proves it is the stream's start (rules/start.py)
        raise Blocker(f"gathers along the time axis {t} (picks frames by their position in the sequence)")
    pass_through(node, ctx, [0])


def _gather_own_frames(node: Any, ctx: Any, t: int) -> None:
    """Gather along the data's time axis with indices that run over time: ``nn.Unfold`` exports (TorchScript
    ``im2col``) as ``Gather(x, Range(0, T)[:, None] * stride + arange(K) * dilation, axis=time)``, a window of ``K``
    frames per output frame. With a time kernel of one frame (an Unfold over frequency only, GTCRN's subband
    features: kernel ``(1, 3)``) the index of output frame ``i`` is ``i`` in both probe runs: each frame reads
    itself, a per-frame op (the same ``Range`` counts the chunk's frames in the chunk graph, :func:`range_op`). A
    wider window (an Unfold over time) is refused by name."""
    idx = node.inputs[1]
    fi, fd = ctx.fact(idx), ctx.fact(node.inputs[0])
    ta = fi.axis
    for v in (ctx.value(idx), ctx.value2(idx)):
        if v is None or fi.rate != fd.rate:
            raise Blocker(f"gathers along the time axis {t} at positions computed from the data")
        v = np.moveaxis(np.asarray(v), ta, 0)
        pos = np.arange(v.shape[0]).reshape((-1,) + (1,) * (v.ndim - 1))
        if not np.array_equal(v, np.broadcast_to(pos, v.shape)) or v[0].size != 1:
            first = v.reshape(v.shape[0], -1)[:2].tolist()
            raise Blocker(f"gathers a window of frames along the time axis {t} (nn.Unfold / im2col over time: "
                          f"output frames 0 and 1 read input frames {first}): only an unfold over other axes "
                          "(a time kernel of 1 frame) streams; write a time window as a Conv")
    fo = ctx.fact(node.outputs[0])
    if fo.axis != t + ta or fo.rate != fd.rate:
        raise Blocker(f"gathers along the time axis {t} into an output whose time axis is not the indices' own")
    pass_through(node, ctx, [0])


@register("GatherElements", "ScatterElements")
def gather_elements(node: Any, ctx: Any) -> None:
    """GatherElements/ScatterElements along an axis that is not time, with indices (and updates) that run
    over the same time axis as the data: per frame."""
    idxs = ctx.stream_inputs(node)
    if 0 not in idxs:
        raise Blocker("the data does not stream but its indices do")
    t, rank = _time_axis(ctx, node)
    if _axis_attr(node, 0, rank) == t:
        raise Blocker(f"{'gathers' if node.op.startswith('Gather') else 'scatters'} along the time axis {t}")
    for i in range(1, len(node.inputs)):
        if node.inputs[i].name and ctx.fact(node.inputs[i]).axis != t:
            raise Blocker(f"input {i} does not run over the data's time axis {t}")
    pass_through(node, ctx)


_ND_FIX = ("write the assignment as torch.cat of the slices, or index the channels (not time) with constant "
           "indices")


@register("GatherND", "ScatterND")
def gather_scatter_nd(node: Any, ctx: Any) -> None:
    """GatherND/ScatterND (``batch_dims`` 0) that index only axes before the data's time axis, with indices that do
    not change with the sequence length or the data: each index tuple picks or replaces whole slices that run over
    time (``z[:, :2] = sigmoid(z[:, :2])``, an in-place channel-slice assignment, exports as ScatterND), so the op is
    per frame; the updates of a ScatterND must run over the same time axis of those slices at the data's rate.
    Indices that address time (an assignment into time positions) or come from the data are refused."""
    verb = "gathers" if node.op == "GatherND" else "scatters"
    data, idx = node.inputs[0], node.inputs[1]
    if not ctx.is_stream(data):
        raise Blocker(f"{verb} from a tensor that does not stream with indices that do")
    if int(node.attrs.get("batch_dims", 0)):
        raise Blocker(f"{verb} with batch_dims (only batch_dims 0 streams)")
    t, rank = _time_axis(ctx, node)
    fi = ctx.fact(idx)
    if ctx.is_stream(idx):
        return _nd_frame_positions(node, ctx, verb, t)
    v1, v2 = ctx.value(idx), ctx.value2(idx)
    if v1 is None or v2 is None or np.shape(v1) != np.shape(v2) or not np.array_equal(v1, v2):
        raise Blocker(f"{verb} along positions computed from the data or the sequence length; {_ND_FIX}")
    q = int(np.shape(v1)[-1])
    if t < q:
        raise Blocker(f"{verb} along the time axis {t} at fixed frames (positions counted from the sequence start)")
    out_t = (len(fi.shape1) - 1) + (t - q)  # output/updates: indices.shape[:-1] + data.shape[q:]
    rate = ctx.fact(data).rate
    other = node.inputs[2] if node.op == "ScatterND" else node.outputs[0]
    fo = ctx.fact(other)
    if fo.axis != out_t or fo.rate != rate:
        what = "updates" if node.op == "ScatterND" else "output"
        raise Blocker(f"its {what} do not run over axis {out_t} at the data's rate (time axis {fo.axis})")
    pass_through(node, ctx, [0, 2] if node.op == "ScatterND" else [0])


def _nd_frame_positions(node: Any, ctx: Any, verb: str, t: int) -> None:
    """GatherND/ScatterND whose indices run over time (a channel-last assignment ``z[..., :2] = ...`` exports index
    tuples for every frame, built from ``Range`` over the frames): per frame when, in both probe runs, the index
    tuples along the indices' time axis address the data's time axis at exactly their own frame (0, 1, ..., T-1) and
    every other coordinate is the same for every frame and both lengths. In a chunk the same ``Range`` counts the
    chunk's frames, so each frame still reads or writes itself (:func:`range_op` lets such a Range through)."""
    idx = node.inputs[1]
    fi, fd = ctx.fact(idx), ctx.fact(node.inputs[0])
    ta = fi.axis
    q = int(fi.shape1[-1])
    fix = f"{verb} along positions over the time axis {t} it cannot prove are each frame's own; {_ND_FIX}"
    if ta == len(fi.shape1) - 1 or t >= q or fi.rate != fd.rate:
        raise Blocker(fix)
    firsts = []
    for v in (ctx.value(idx), ctx.value2(idx)):
        if v is None:
            raise Blocker(fix)
        v = np.moveaxis(np.asarray(v), ta, 0)  # frames first
        pos = np.arange(v.shape[0]).reshape((-1,) + (1,) * (v.ndim - 2))
        rest = np.delete(v, t, axis=-1)
        if (not np.array_equal(v[..., t], np.broadcast_to(pos, v.shape[:-1]))
                or not np.array_equal(rest, np.broadcast_to(rest[:1], rest.shape))):
            raise Blocker(fix)
        firsts.append(rest[:1])
    if not np.array_equal(firsts[0], firsts[1]):
        raise Blocker(fix)
    other = node.inputs[2] if node.op == "ScatterND" else node.outputs[0]
    if ctx.fact(other).axis != ta or ctx.fact(other).rate != fd.rate:
        raise Blocker(fix)
    pass_through(node, ctx, [0, 2] if node.op == "ScatterND" else [0])


@register("Concat")
def concat(node: Any, ctx: Any) -> None:
    """Concat off the time axis: per frame. On the time axis, one streaming input between blocks of zeros
    of a fixed length is a zero pad written as a concatenation (CosyVoice's ``CausalConv1d``:
    ``concat(zeros(N, C, P), x)``): the zeros before it make the tensor ``P`` frames early (as a left Pad),
    the zeros after it only lengthen the sequence's end; both are dropped from the chunk graph."""
    idxs = ctx.stream_inputs(node)
    t, rank = _time_axis(ctx, node, idxs[0])
    if _axis_attr(node, 0, rank) != t:
        return pass_through(node, ctx)
    if len(idxs) > 1:
        raise Blocker(f"concatenates streaming tensors along the time axis {t} (a chunk holds only part of "
                      "the sequence)")
    i = idxs[0]
    lead = 0
    if i == 1 and len(node.inputs) == 2:  # cat(x[:k], tail): the stream's first frames, then a stream (rules/start.py)
        from cosyedge.surgery.rules.start import head_concat, head_source

        v = ctx.value(node.inputs[0])
        found = head_source(node.inputs[0], t, ctx) if v is not None and np.any(np.asarray(v) != 0) else None
        if found is not None:
            return head_concat(node, ctx, node.inputs[0], found[0], found[1], node.inputs[1])
    for j, tin in enumerate(node.inputs):
        if j == i:
            continue
        v = ctx.value(tin)
        if v is None or np.any(np.asarray(v) != 0):
            raise Blocker(f"concatenates non-zero frames to a stream along the time axis {t} (only zeros before it, "
                          "or a stream's own first frames before a stream, x[:k] then the rest, stream)")
        if j < i:
            lead += int(np.asarray(v).shape[t])
    x = node.inputs[i]
    d = ctx.delay_of(x) or 0
    if lead and d > 0:
        x = ctx.mask_preroll(x, node.name)
    node.op, node.attrs = "Identity", {}
    node.inputs.clear()
    node.inputs.append(x)
    ctx.set_delay(node.outputs[0], d - lead)


@register("Split", "LpNormalization", "ArgMax", "ArgMin", "TopK", "Compress")
def axis_op(node: Any, ctx: Any) -> None:
    """Concat/Split/Gather/... along an axis that is not time: pass through; along time: refused."""
    default = {"Split": 0, "LpNormalization": -1, "ArgMax": 0, "ArgMin": 0,
               "TopK": -1, "Compress": 0}[node.op]
    for i in ctx.stream_inputs(node):
        t, rank = _time_axis(ctx, node, i)
        if node.op == "Compress" and "axis" not in node.attrs:
            raise Blocker("Compress without an axis flattens time")
        if _axis_attr(node, default, rank) == t:
            what = {"Split": "splits"}.get(node.op, "works")
            raise Blocker(f"{what} along the time axis {t} (a chunk holds only part of the sequence)")
    pass_through(node, ctx)


@register("Softmax", "LogSoftmax", "Hardmax")
def softmax(node: Any, ctx: Any) -> None:
    """Softmax over an axis that is not time (opset < 13: over all axes from ``axis`` on)."""
    t, rank = _time_axis(ctx, node)
    if ctx.opset >= 13:
        if _axis_attr(node, -1, rank) == t:
            raise Blocker(f"{node.op} over the time axis {t} (normalises over the whole sequence)")
    elif t >= _axis_attr(node, 1, rank):
        raise Blocker(f"{node.op} (opset {ctx.opset}) flattens axes {_axis_attr(node, 1, rank)}.. including time")
    pass_through(node, ctx)


@register("LayerNormalization", "RMSNormalization")
def layer_norm(node: Any, ctx: Any) -> None:
    """LayerNormalization and RMSNormalization (opset 23: what ``torch.onnx.export(dynamo=True)`` makes of a written-out
    RMSNorm) over axes ``axis``.. that exclude time (per frame: a channel norm)."""
    t, rank = _time_axis(ctx, node)
    if t >= _axis_attr(node, -1, rank):
        raise Blocker(f"normalises over axes {_axis_attr(node, -1, rank)}..{rank - 1}, which include the time "
                      f"axis {t} (statistics of the whole sequence)")
    pass_through(node, ctx, [0])


@register("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def reduce(node: Any, ctx: Any) -> None:
    """Reductions over axes that exclude time pass; over time (or over all axes) refused."""
    t, rank = _time_axis(ctx, node)
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1].name:
        v = ctx.value(node.inputs[1])
        if v is None:
            raise Blocker("reduces over axes computed at run time")
        axes = v.reshape(-1).tolist()
    if not axes:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            return pass_through(node, ctx, [0])
        raise Blocker(f"reduces over all axes, including the time axis {t} (a statistic of the whole sequence)")
    if t in [int(a) % rank for a in axes]:
        raise Blocker(f"reduces over the time axis {t} (a statistic of the whole sequence: a global mean or norm)")
    pass_through(node, ctx, [0])


@register("MatMul", "MatMulInteger")
def matmul(node: Any, ctx: Any) -> None:
    """MatMul that does not contract time: A's time axis is not its last, B's not its second to last."""
    idxs = ctx.stream_inputs(node)
    if len(idxs) == 2:
        raise Blocker("multiplies two tensors that both run over time (attention over the whole sequence)")
    i = idxs[0]
    t, rank = _time_axis(ctx, node, i)
    if (i == 0 and t == rank - 1) or (i == 1 and (rank == 1 or t == rank - 2)):
        raise Blocker(f"contracts the time axis {t} of input {i}")
    pass_through(node, ctx, idxs)


@register("Gemm")
def gemm(node: Any, ctx: Any) -> None:
    """Gemm with time on A's row axis (not contracted); a streaming B is refused."""
    idxs = ctx.stream_inputs(node)
    if idxs != [0]:
        raise Blocker("its B or C input runs over time")
    t, _ = _time_axis(ctx, node)
    if t != (1 if int(node.attrs.get("transA", 0)) else 0):
        raise Blocker("contracts the time axis")
    pass_through(node, ctx, [0])


def _einsum_terms(eq: str, ranks: list[int]) -> tuple[list[str], str]:
    lhs, _, rhs = eq.replace(" ", "").partition("->")
    terms = lhs.split(",")
    ell = "".join(chr(0x100 + k) for k in range(max(ranks) if ranks else 0))
    out = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            term = term.replace("...", ell[len(ell) - n:] if n > 0 else "")
        out.append(term)
    if not rhs and "->" not in eq:
        letters = sorted({c for t in out for c in t if sum(t2.count(c) for t2 in out) == 1})
        rhs = "".join(letters)
    elif "..." in rhs:
        n = max(len(t) for t in out) - max(len(t.replace("...", "")) for t in [rhs])
        rhs = rhs.replace("...", ell[len(ell) - max(n, 0):])
    return out, rhs


@register("Einsum")
def einsum(node: Any, ctx: Any) -> None:
    """Einsum whose time label survives into the output (not summed over); every streaming operand
    carries it on its time axis."""
    eq = attr_str(node, "equation", "")
    ranks = [len(ctx.fact(t).shape1) for t in node.inputs]
    terms, rhs = _einsum_terms(eq, ranks)
    labels = set()
    for i in ctx.stream_inputs(node):
        labels.add(terms[i][ctx.fact(node.inputs[i]).axis])
    if len(labels) != 1:
        raise Blocker(f"'{eq}': streaming operands put time on different labels {sorted(labels)}")
    lab = labels.pop()
    if lab not in rhs:
        raise Blocker(f"'{eq}' sums over the time label '{lab}'")
    for i, term in enumerate(terms):
        if lab in term and i not in ctx.stream_inputs(node):
            raise Blocker(f"'{eq}': operand {i} has the time label '{lab}' but does not stream")
    pass_through(node, ctx)


@register("Tile")
def tile(node: Any, ctx: Any) -> None:
    """Tile with repeat 1 on the time axis."""
    t, _ = _time_axis(ctx, node)
    reps = ctx.value(node.inputs[1])
    if reps is None or int(reps.reshape(-1)[t]) != 1:
        raise Blocker("repeats along the time axis")
    pass_through(node, ctx, [0])


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs)


@register("Reshape", "Flatten")
def reshape(node: Any, ctx: Any) -> None:
    """Reshape/Flatten that keeps time the outer axis of whatever it merges or splits (row-major: every
    axis before time keeps its product), so a chunk maps to a contiguous block; the rate may change
    (a time pixel shuffle)."""
    fi, fo = ctx.fact(node.inputs[0]), ctx.fact(node.outputs[0])
    if not fo.is_stream:
        raise Blocker("merges the time axis away (its output does not grow with the input)")
    if _prod(fi.shape1[:fi.axis]) != _prod(fo.shape1[:fo.axis]):
        raise Blocker(f"mixes time with the axes before it ({list(fi.shape1)} -> {list(fo.shape1)}, time axis "
                      f"{fi.axis} -> {fo.axis}): time must stay the outer axis of what it is merged with")
    if node.op == "Reshape" and ctx.fact(node.inputs[1]).sizes:
        node.inputs[1] = ctx.stream_sizes(node.inputs[1], node.outputs[0], node.name)
    pass_through(node, ctx, [0])


@register("Expand")
def expand(node: Any, ctx: Any) -> None:
    """Expand: per frame; a target shape computed from the sequence length gets the chunk's frames on time."""
    if node.outputs[0].name and ctx.fact(node.outputs[0]).is_stream and ctx.fact(node.inputs[1]).sizes:
        node.inputs[1] = ctx.stream_sizes(node.inputs[1], node.outputs[0], node.name)
    pass_through(node, ctx, [0] if ctx.is_stream(node.inputs[0]) else [])


@register("Resize", "Upsample")
def resize(node: Any, ctx: Any) -> None:
    """Nearest Resize by an integer factor on time (frame repetition) passes; linear or cubic over time
    (mixes neighbouring frames across chunks) and downscaling over time are refused."""
    fi, fo = ctx.fact(node.inputs[0]), ctx.fact(node.outputs[0])
    q = fo.rate / fi.rate
    mode = attr_str(node, "mode", "nearest")
    if q != 1 and (q.denominator != 1):
        raise Blocker(f"resizes time by {q} (only integer upsampling streams)")
    if q != 1 and mode != "nearest":
        raise Blocker(f"'{mode}' Resize over time interpolates between frames across chunk boundaries "
                      "(use nearest, then a causal conv)")
    if len(node.inputs) > 3 and node.inputs[3].name and ctx.fact(node.inputs[3]).sizes:
        node.inputs[3] = ctx.stream_sizes(node.inputs[3], node.outputs[0], node.name)
    pass_through(node, ctx, [0])


@register("DepthToSpace", "SpaceToDepth")
def depth_space(node: Any, ctx: Any) -> None:
    """DepthToSpace/SpaceToDepth when time is not one of the rearranged spatial axes."""
    t, _ = _time_axis(ctx, node)
    if t >= 2:
        raise Blocker(f"rearranges the time axis {t} in blocks")
    pass_through(node, ctx)


@register("ConstantOfShape")
def constant_of_shape(node: Any, ctx: Any) -> None:
    """A constant over a computed shape: the same value in every frame (delay-free), as many frames as the
    chunk has."""
    if ctx.fact(node.inputs[0]).sizes:
        node.inputs[0] = ctx.stream_sizes(node.inputs[0], node.outputs[0], node.name)
    for o in node.outputs:
        ctx.set_delay(o, None)


_INDEX_PATH = {"Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,), "Expand": (0,), "Add": (0, 1), "Concat": None,
               "Cast": (0,), "Transpose": (0,), "Identity": (0,)}


def _only_nd_positions(t: Any, graph_outputs: set, seen: set | None = None, ctx: Any = None) -> bool:
    """True when every use of tensor ``t`` (through reshapes, broadcasts, adds and concats) is the indices of a
    GatherND/ScatterND into a streaming tensor (``ctx.is_stream``, when ``ctx`` is given) or a Shape (which reads no
    values), and none is a graph output (names in ``graph_outputs``); the GatherND/ScatterND rule then proves the
    positions are each frame's own."""
    seen = set() if seen is None else seen
    if t.name in seen:
        return True
    seen.add(t.name)
    if not t.outputs or t.name in graph_outputs:
        return False
    for c in t.outputs:
        slots = [i for i, x in enumerate(c.inputs) if x is t]
        if c.op in ("GatherND", "ScatterND") and slots == [1] and (ctx is None or ctx.is_stream(c.inputs[0])):
            continue
        if c.op == "Gather" and slots == [1] and ctx is not None and ctx.is_stream(c.inputs[0]):
            f = ctx.fact(c.inputs[0])
            if _axis_attr(c, 0, len(f.shape1)) == f.axis:  # an im2col frame index (:func:`_gather_own_frames`)
                continue
        if c.op == "Shape":
            continue
        if c.op not in _INDEX_PATH or (_INDEX_PATH[c.op] is not None and any(i not in _INDEX_PATH[c.op]
                                                                             for i in slots)):
            return False
        if not all(_only_nd_positions(o, graph_outputs, seen, ctx) for o in c.outputs if o.name):
            return False
    return True


@register("Range")
def range_op(node: Any, ctx: Any) -> None:
    """Range whose length is the sequence length: frame positions that only build the indices of a GatherND/ScatterND
    into a streaming tensor (an exported channel-last slice assignment), whose rule proves each frame addresses
    itself, count the chunk's frames; any other positions from the sequence start become a position counter state
    (:func:`cosyedge.surgery.rules.positions.range_positions`, which refuses positions that need the sequence's
    end)."""
    from cosyedge.surgery.rules.positions import range_positions

    out = node.outputs[0]
    if _only_nd_positions(out, {o.name for o in ctx.graph.outputs}, ctx=ctx):
        ctx.set_delay(out, None)
        return
    range_positions(node, ctx)
