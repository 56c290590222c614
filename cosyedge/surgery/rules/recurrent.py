"""GRU, LSTM and RNN over time: the hidden (and cell) state becomes a state pair.

A forward recurrent op (layout 0: X (T, N, I); layout 1: X (N, T, I)) whose initial state is absent or
zeros (an initializer of zeros, ``ConstantOfShape``, or a Slice/Expand of it: checked by value in the probe
run) gets ``state_in`` (N, 1, H) as ``initial_h`` (and ``initial_c``; transposed to (1, N, H) for layout
0), and ``Y_h`` (``Y_c``) becomes ``state_out``: batch-first, so StreamPool and Triton's sequence batcher
can batch streams. Refused: bidirectional and reverse directions (they read the sequence from its end),
``sequence_lens``, an initial state computed from the data or not zero, a graph that uses ``Y_h``/``Y_c``
(the state after the whole sequence), and a late input (its frames before the stream's start would advance
the state: not supported yet).

Sources: ONNX operator docs GRU/LSTM/RNN (opset 14 ``layout``; inputs X, W, R, B, sequence_lens,
initial_h, initial_c, P; outputs Y, Y_h, Y_c; Y is (T, D, N, H) for layout 0, (N, T, D, H) for 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.surgery.rules import Blocker, register

gs = lazy_import("onnx_graphsurgeon")


def _uses(t: Any, ctx: Any) -> bool:
    return bool(t.name) and (bool(t.outputs) or t in ctx.graph.outputs)


@register("GRU", "LSTM", "RNN")
def recurrent(node: Any, ctx: Any) -> None:
    """GRU / LSTM / RNN (module doc)."""
    if ctx.stream_inputs(node) != [0]:
        raise Blocker("its weights, sequence_lens or initial state run over time")
    direction = node.attrs.get("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction != "forward":
        raise Blocker(f"direction '{direction}' reads the sequence from its end (only forward recurrences stream)")
    layout = int(node.attrs.get("layout", 0))
    x = node.inputs[0]
    f = ctx.fact(x)
    if f.axis != layout:
        raise Blocker(f"time is axis {f.axis} of X, not the sequence axis {layout} of layout {layout}")
    if len(node.inputs) > 4 and node.inputs[4].name:
        raise Blocker("has sequence_lens (padded batches do not stream)")
    d = ctx.delay_of(x) or 0
    if d < 0:
        x = ctx.delay_line(x, -d, node.name)
        node.inputs[0] = x
        d = 0
    if d > 0:
        raise Blocker(f"its input is {d} frames late (a look-ahead before it): its frames before the stream's start "
                      "would advance the state (not supported yet)")
    hidden = int(node.attrs.get("hidden_size", 0))
    if not hidden:
        raise Blocker("has no hidden_size")
    slots = [5, 6] if node.op == "LSTM" else [5]
    outs = [1, 2] if node.op == "LSTM" else [1]
    for o in outs:
        if len(node.outputs) > o and _uses(node.outputs[o], ctx):
            what = "Y_h" if o == 1 else "Y_c"
            raise Blocker(f"the graph uses {what}, the state after the whole sequence")
    for i in slots:
        if len(node.inputs) > i and node.inputs[i].name:
            v = ctx.value(node.inputs[i])
            if v is None or np.any(np.asarray(v) != 0):
                what = "initial_h" if i == 5 else "initial_c"
                raise Blocker(f"its {what} is not zeros (computed from the data or a constant): only a zero "
                              "initial state can start a stream")
    while len(node.inputs) < max(slots) + 1:
        node.inputs.append(gs.Variable.empty())
    while len(node.outputs) < max(outs) + 1:
        node.outputs.append(gs.Variable.empty())
    dtype = x.dtype if x.dtype is not None else np.float32
    for i, o in zip(slots, outs):
        kind = "recurrent"
        s_in, s_out = ctx.new_state(["N", 1, hidden], dtype, kind, node.name)
        if layout == 0:
            node.inputs[i] = ctx.op("Transpose", [s_in], node.name, {"perm": [1, 0, 2]})
            y = gs.Variable(ctx.name(f"{node.name}/Y_state"), dtype=dtype)
            node.outputs[o] = y
            ctx.graph.layer(op="Transpose", name=ctx.name(f"{node.name}/state_out"), inputs=[y], outputs=[s_out],
                            attrs={"perm": [1, 0, 2]})
        else:
            node.inputs[i] = s_in
            node.outputs[o] = s_out
    ctx.set_delay(node.outputs[0], d)
