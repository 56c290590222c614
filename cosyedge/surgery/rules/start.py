"""The stream's start: frames a full-sequence graph treats specially at ``t = 0``, found from values.

Two forms stream exactly with the tick counter (:meth:`Walker.before_frame`):

* **A head**: ``Concat([x[:k], tail], time)``, where ``x[:k]`` (a Slice that keeps the first ``k`` frames, or a
  Gather of frame 0 then an Unsqueeze, possibly through other ops that keep the values) equals the first ``k`` frames
  of a streaming tensor ``x`` in both probe runs, and ``tail`` streams. NeMo's pre-emphasis
  ``cat(x[:, :1], x[:, 1:] - a * x[:, :-1])`` is one: the output's frame 0 is ``x[0]``, not ``x[0] - a * 0``. The
  chunk graph takes ``Where(frame < delay + k, x, tail)`` on the output's stream frames, ``x`` and ``tail`` aligned
  to the output's delay; the head ops become dead. ``tail`` needs no rule of its own: ``x[1:]`` is one frame late
  (:mod:`.timeslice`), ``x[:-1]`` ends early, and the Sub aligns them with a one-frame delay line (the previous
  sample as state).
* **An edge (replicate) pad on the left** (:func:`cosyedge.surgery.rules.context.pad`): the ``k`` frames before the
  sequence are copies of its first frame; the tensor is ``k`` frames early and the state that absorbs it starts,
  at the first chunk, with copies of that chunk's first frame (:meth:`Walker._lead_start`).

Only these are accepted: the head's values are checked against the source's first frames in both probe runs
(other inputs, other lengths), so a head that is not the stream's own start is refused by the Concat.

Source: sonos/tract ``pulse/src/ops/array/pad.rs`` (PulsePad overwrites the stream's first frames with the pad
value, ``Edge`` with the first frame, using the stream's position counter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.log import plural
from cosyedge.surgery.rules import Blocker

_MAX_HEAD_OPS = 8
"""int: most ops between a stream and a head of it that a Concat traces back (Gather, Unsqueeze, Cast, ...)."""


def feeds_only_heads(t: Any, ctx: Any, seen: set | None = None) -> bool:
    """bool: every use of ``t`` (a tensor cut from the first frames of a stream, which does not stream itself), through
    ops whose outputs do not stream either, ends in a Concat on time next to a streaming tensor: the Concat then checks
    that it is the stream's start (:func:`head_source`). False when some use is a graph output or anything else."""
    seen = set() if seen is None else seen
    if t.name in seen:
        return True
    seen.add(t.name)
    if not t.outputs or t.name in {o.name for o in ctx.graph.outputs}:
        return False
    for c in t.outputs:
        outs = [o for o in c.outputs if o.name]
        if c.op == "Concat" and any(ctx.is_stream(o) for o in outs):
            continue
        if any(ctx.is_stream(o) or ctx.fact(o).axes2 is not None for o in outs) or len(seen) > _MAX_HEAD_OPS:
            return False
        if not all(feeds_only_heads(o, ctx, seen) for o in outs):
            return False
    return True


def head_source(t: Any, axis: int, ctx: Any) -> tuple[Any, int] | None:
    """The streaming tensor whose first frames ``t`` holds, and how many: (tensor, k) or None.

    ``t`` (no time axis of its own, ``k`` frames on ``axis`` of a Concat) is traced back through the ops that made it
    to the first tensor that streams; it is its head when, in both probe runs, ``t`` equals that tensor's frames
    ``0 .. k - 1`` on its time axis ``axis`` (same shape: a Gather of frame 0 followed by an Unsqueeze matches).
    """
    src, seen = None, 0
    cur = t
    while src is None and seen <= _MAX_HEAD_OPS and len(cur.inputs) == 1:
        node = cur.inputs[0]
        seen += 1
        streams = [x for x in node.inputs if x.name and ctx.is_stream(x)]
        if len(streams) > 1:
            return None
        if streams:
            src = streams[0]
            break
        data = [x for x in node.inputs if x.name and ctx.value(x) is not None and not _constant(x)]
        if len(data) != 1:
            return None
        cur = data[0]
    if src is None or ctx.fact(src).axis != axis:
        return None
    shape = np.shape(ctx.value(t))
    if len(shape) != len(ctx.fact(src).shape1):
        return None
    k = int(shape[axis])
    for hv, sv in ((ctx.value(t), ctx.value(src)), (ctx.value2(t), ctx.value2(src))):
        if hv is None or sv is None or k < 1 or np.shape(sv)[axis] < k:
            return None
        first = np.take(np.asarray(sv), np.arange(k), axis=axis)
        if first.shape != np.shape(hv) or not np.array_equal(first, np.asarray(hv)):
            return None
    return src, k


def _constant(t: Any) -> bool:
    return not t.inputs or (len(t.inputs) == 1 and t.inputs[0].op == "Constant")


def head_concat(node: Any, ctx: Any, head: Any, src: Any, k: int, tail: Any) -> None:
    """Rewrite ``Concat([head, tail], time)``, ``head`` = the first ``k`` frames of stream ``src`` (module doc), into
    ``Where(stream frame < delay + k, src, tail)``; the output is ``delay = max(delay(tail) - k, delay(src))`` frames
    late (``src`` or ``tail`` get a delay line for the difference).

    Raises:
        Blocker: ``src`` and ``tail`` run at different rates or one is constant along time.
    """
    fs, ft = ctx.fact(src), ctx.fact(tail)
    if fs.rate != ft.rate:
        raise Blocker(f"puts the first {plural(k, 'frame')} of '{src.name}' before '{tail.name}', at another frame "
                      "rate")
    ds, dt = ctx.delay_of(src), ctx.delay_of(tail)
    if ds is None or dt is None:
        raise Blocker(f"puts the first {plural(k, 'frame')} of '{src.name}' before a tensor that is constant along "
                      "time")
    d = max(dt - k, ds)
    if ds < d:
        src = ctx.delay_line(src, d - ds, node.name)
    if dt - k < d:
        tail = ctx.delay_line(tail, d + k - dt, node.name)
    flag = ctx.before_frame(tail, d + k, node.name)
    out = node.outputs[0]
    node.op, node.attrs = "Identity", {}
    node.inputs.clear()
    node.inputs.append(ctx.select(flag, src, tail, f"{node.name}/stream_start", like=tail))
    ctx.set_delay(out, d)
