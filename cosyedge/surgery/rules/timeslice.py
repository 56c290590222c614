"""Slice on the time axis: a crop at the start becomes delay, a crop at the end is dropped, a step decimates.

For ``y = x[s:e:k]`` on time with ``x`` ``d`` frames late, the chunk graph takes ``x[r::k]`` with
``r = (s + d) mod k`` and ``y`` is ``(s + d - r) / k`` frames late; chunks must hold a multiple of ``k``
frames (the total stride accounts for it). The end only trims the sequence's tail (``x[:-P]``, a chomp;
``skip[..., :x.shape[-1]]``; Demucs's final crop to the input length) and is dropped. Refused: a start
that depends on the sequence length (``x[-N:]``: the last frames), an end that does not (``x[:N]``: the
first frames only), a negative step. A constant table sliced to the length (``pe[:, :T]``) is a lookup at positions
from the sequence start (:func:`cosyedge.surgery.rules.positions.table_slice`).

Sources: ONNX Slice (opset 1 attributes; opset 10+ inputs, negative indices count from the end, ends
clamp); sonos/tract ``pulse/src/ops/array/slice.rs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.log import plural
from cosyedge.surgery.rules import INT64_MAX, Blocker, register
from cosyedge.surgery.rules.perframe import pass_through

def _norm(i: int, n: int) -> int:
    return max(0, min(n, i + n if i < 0 else i))


@register("Slice")
def slice_op(node: Any, ctx: Any) -> None:
    """Slice (module doc)."""
    table = not ctx.stream_inputs(node) and ctx.is_stream(node.outputs[0])
    if ctx.stream_inputs(node) != [0] and not table:
        raise Blocker("its starts/ends run over time")
    x = node.inputs[0]
    f = ctx.fact(x)
    rank, t = len(f.shape1), f.axis
    attr_form = "starts" in node.attrs
    names = ["starts", "ends", "axes", "steps"]
    v1, v2 = {}, {}
    for j, key in enumerate(names):
        if attr_form:
            val = node.attrs.get(key)
            v1[key] = v2[key] = None if val is None else np.asarray(val, dtype=np.int64)
            continue
        tin = node.inputs[j + 1] if len(node.inputs) > j + 1 and node.inputs[j + 1].name else None
        if tin is None:
            v1[key] = v2[key] = None
            continue
        a = ctx.value(tin)
        if a is None:
            raise Blocker(f"its {key} are computed from data")
        tf = ctx.fact(tin)
        v1[key] = np.asarray(a, dtype=np.int64).reshape(-1)
        v2[key] = np.asarray(tf.values2 if tf.sizes else a, dtype=np.int64).reshape(-1)
    n = len(v1["starts"])
    for v in (v1, v2):
        if v["axes"] is None:
            v["axes"] = np.arange(n)
        if v["steps"] is None:
            v["steps"] = np.ones(n, dtype=np.int64)
    if table:  # pe[:, :T]: an encoding table sliced to the length
        from cosyedge.surgery.rules.positions import table_slice

        return table_slice(node, ctx, v1, v2)
    axes = [int(a) % rank for a in v1["axes"]]
    if t not in axes:
        for key in names:
            if not np.array_equal(v1[key], v2[key]):
                raise Blocker(f"slices an axis other than time by a {key} computed from the sequence length")
        return pass_through(node, ctx, [0])
    j = axes.index(t)
    k = int(v1["steps"][j])
    if k <= 0:
        raise Blocker("steps backwards over time (reverses the sequence)")
    n1, n2 = int(f.shape1[t]), int(f.shape2[t])
    s1, s2 = _norm(int(v1["starts"][j]), n1), _norm(int(v2["starts"][j]), n2)
    e1, e2 = _norm(int(v1["ends"][j]), n1), _norm(int(v2["ends"][j]), n2)
    if s1 != s2:
        raise Blocker("starts at a frame counted from the sequence's end (keeps its last frames)")
    if e1 == e2 and e1 < n1:
        from cosyedge.surgery.rules.start import feeds_only_heads

        if feeds_only_heads(node.outputs[0], ctx):
            return  # x[:k] put back before the stream: the Concat proves it is the stream's start (rules/start.py)
        raise Blocker(f"keeps only the first {plural(e1, 'frame')} of the sequence")
    for key in names:
        for i in range(n):
            if i != j and v1[key][i] != v2[key][i]:
                raise Blocker(f"slices another axis by a {key} computed from the sequence length")
    d = ctx.delay_of(x) or 0
    r = (s1 + d) % k
    d_out = (s1 + d - r) // k
    keep = [i for i in range(n) if i != j]
    starts = [int(v1["starts"][i]) for i in keep]
    ends = [int(v1["ends"][i]) for i in keep]
    ax = [axes[i] for i in keep]
    steps = [int(v1["steps"][i]) for i in keep]
    if r or k != 1:
        starts, ends, ax, steps = starts + [r], ends + [INT64_MAX], ax + [t], steps + [k]
    if not ax:
        node.op, node.attrs = "Identity", {}
        node.inputs.clear()
        node.inputs.extend([x])
    elif attr_form:
        node.attrs.update(starts=starts, ends=ends, axes=ax)
        if any(s != 1 for s in steps):
            raise Blocker("opset-1 Slice cannot step")
    else:
        node.inputs.clear()
        node.inputs.extend([x, ctx.const(starts), ctx.const(ends), ctx.const(ax), ctx.const(steps)])
    ctx.set_delay(node.outputs[0], d_out)
