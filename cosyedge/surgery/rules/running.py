"""CumSum over time: a running-sum state (a cumulative layer norm streams exactly with it).

``y = CumSum(x, axis=time)`` runs on the chunk as ``CumSum(x) + state`` with ``state`` the last frame of
the previous chunk's ``y`` (one frame, zeros at the start). Exclusive and reverse sums are refused (an
exclusive one would need the state without the chunk's last frame; a reverse one reads from the end).
CumSum over another axis passes through. The sum runs in the tensor's dtype (float32): over hours it
accumulates rounding like the full-sequence graph does.

Sources: ONNX CumSum (attributes ``exclusive``, ``reverse``; ``axis`` an input); sonos/tract keeps a
running state for such scans.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.surgery.rules import INT64_MAX, Blocker, register
from cosyedge.surgery.rules.perframe import pass_through

@register("CumSum")
def cumsum(node: Any, ctx: Any) -> None:
    """CumSum (module doc)."""
    if ctx.stream_inputs(node) != [0]:
        raise Blocker("its axis runs over time")
    x = node.inputs[0]
    f = ctx.fact(x)
    axis = ctx.value(node.inputs[1])
    if axis is None:
        raise Blocker("its axis is computed at run time")
    axis = int(np.asarray(axis).reshape(-1)[0]) % len(f.shape1)
    if axis != f.axis:
        return pass_through(node, ctx, [0])
    if int(node.attrs.get("exclusive", 0)) or int(node.attrs.get("reverse", 0)):
        raise Blocker("an exclusive or reverse running sum over time")
    d = ctx.delay_of(x)
    if d is not None and d < 0:
        x, d = ctx.delay_line(x, -d, node.name), 0
    if d:
        x = ctx.mask_preroll(x, node.name)
    node.inputs[0] = x
    y = node.outputs[0]
    import onnx_graphsurgeon as gs

    raw = gs.Variable(ctx.name(f"{node.name}/chunk_sum"), dtype=y.dtype)
    node.outputs[0] = raw
    shape = list(ctx.fact(y).shape1)
    b = ctx.batch_axis(y)
    if b != 0:
        raise Blocker("running-sum state with the batch axis not first")
    if ctx.batch_fold(y) > 1:
        raise Blocker("its batch folds several sequences per stream (not supported for this state)")
    shape[f.axis], shape[b] = 1, "N"
    s_in, s_out = ctx.new_state(shape, y.dtype or np.float32, "running", node.name)
    ctx.graph.layer(op="Add", name=ctx.name(f"{node.name}/running"), inputs=[raw, s_in], outputs=[y])
    ctx.time_slice(y, -1, INT64_MAX, f.axis, f"{node.name}/running_out", out=s_out)
    ctx.set_delay(y, None if d is None else d)
