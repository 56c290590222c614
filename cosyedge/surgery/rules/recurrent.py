"""GRU, LSTM and RNN over time: the hidden (and cell) state becomes a state pair.

A recurrent op whose batch axis carries time (time folded into the batch: intra-frame RNNs over frequency in
dual-path models such as DPRNN or GTCRN, any direction) is per frame and passes through. Otherwise a forward
recurrent op over time (layout 0: X (T, N, I); layout 1: X (N, T, I)) whose initial state is absent or
zeros (an initializer of zeros, ``ConstantOfShape``, or a Slice/Expand of it: checked by value in the probe
run) gets ``state_in`` (N, 1, H) as ``initial_h`` (and ``initial_c``; transposed to (1, N, H) for layout
0), and ``Y_h`` (``Y_c``) becomes ``state_out``: batch-first, so StreamPool and Triton's sequence batcher
can batch streams. Refused: bidirectional and reverse directions (they read the sequence from its end),
``sequence_lens``, an initial state computed from the data or not zero, a graph that uses ``Y_h``/``Y_c``
(the state after the whole sequence). A late input (a look-ahead before the op: its first stream frames come
before the sequence's start) gets a start gate (:func:`_start_gate`) so the state starts at the real first
frame, as the full graph's does.

Sources: ONNX operator docs GRU/LSTM/RNN (opset 14 ``layout``; inputs X, W, R, B, sequence_lens,
initial_h, initial_c, P; outputs Y, Y_h, Y_c; Y is (T, D, N, H) for layout 0, (N, T, D, H) for 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BOOKKEEPING
from cosyedge.log import plural
from cosyedge.surgery.rules import Blocker, attr_str, register

gs = lazy_import("onnx_graphsurgeon")


def _uses(t: Any, ctx: Any) -> bool:
    return bool(t.name) and (bool(t.outputs) or t in ctx.graph.outputs)


@register("GRU", "LSTM", "RNN")
def recurrent(node: Any, ctx: Any) -> None:
    """GRU / LSTM / RNN (module doc)."""
    layout = int(node.attrs.get("layout", 0))
    x = node.inputs[0]
    f = ctx.fact(x)
    if f.axis == 1 - layout:
        # time folded into the op's batch axis (dual-path / intra-frame RNNs over frequency, as in DPRNN and
        # GTCRN): every frame is its own sequence, any direction; per frame
        for i in ctx.stream_inputs(node):
            fi = ctx.fact(node.inputs[i])
            want = 1 - layout if i == 0 else (1 if layout == 0 else 0)
            if i not in (0, 5, 6) or fi.axis != want:
                raise Blocker(f"input {i} runs over time on another axis than the batch axis of its sequences")
        from cosyedge.surgery.rules.perframe import pass_through

        return pass_through(node, ctx)
    if ctx.stream_inputs(node) != [0]:
        raise Blocker("its weights, sequence_lens or initial state run over time")
    direction = attr_str(node, "direction", "forward")
    if direction != "forward":
        raise Blocker(f"direction '{direction}' reads the sequence from its end (only forward recurrences stream)")
    if f.axis != layout:
        raise Blocker(f"time is axis {f.axis} of X, not the sequence axis {layout} of layout {layout}")
    if len(node.inputs) > 4 and node.inputs[4].name:
        raise Blocker("has sequence_lens (padded batches do not stream)")
    d = ctx.delay_of(x) or 0
    if d < 0:
        x = ctx.delay_line(x, -d, node.name)
        node.inputs[0] = x
        d = 0
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
    dtype = ctx.dtype_of(x)
    y_out = node.outputs[0]
    # the op's batch B: the model's N, or N x k when other axes were folded into it (one sequence per
    # frequency bin in a dual-path model): the state is stored (N, k, H), batch-first
    k = int(f.shape1[1 - layout])
    if k > 1 and d > 0:
        raise Blocker(f"its input is {plural(d, 'frame')} late and its batch folds {k} sequences per stream (a start "
                      "gate "
                      "per folded sequence is not supported)")
    gate = _start_gate(node, ctx, x, d, layout) if d > 0 else None
    for i, o in zip(slots, outs):
        s_in, s_out = ctx.new_state(["N", k, hidden], dtype, "recurrent", node.name)
        h0 = _to_op_state(ctx, s_in, layout, k, hidden, node.name)
        if gate is not None:
            h0 = ctx.op("Mul", [h0, gate["fresh_keep"]], node.name)
        node.inputs[i] = h0
        y = gs.Variable(ctx.name(f"{node.name}/Y_state"), dtype=dtype)
        node.outputs[o] = y
        if gate is not None:
            y = ctx.op("Mul", [y, gate["alive"]], node.name)
        if layout == 0 and k == 1:
            ctx.graph.layer(op="Transpose", name=ctx.name(f"{node.name}/state_out"), inputs=[y], outputs=[s_out],
                            attrs={"perm": [1, 0, 2]})
        elif k == 1:
            ctx.graph.layer(op="Identity", name=ctx.name(f"{node.name}/state_out"), inputs=[y], outputs=[s_out])
        else:
            ctx.graph.layer(op="Reshape", name=ctx.name(f"{node.name}/state_out"),
                            inputs=[y, ctx.const([-1, k, hidden])], outputs=[s_out])
    ctx.set_delay(y_out, d)


def _to_op_state(ctx: Any, s_in: Any, layout: int, k: int, hidden: int, base: str) -> Any:
    """The batch-first state (N, k, H) as the op's initial state: (1, N k, H) for layout 0, (N k, 1, H) for 1."""
    if k == 1:
        return ctx.op("Transpose", [s_in], base, {"perm": [1, 0, 2]}) if layout == 0 else s_in
    shape = [1, -1, hidden] if layout == 0 else [-1, 1, hidden]
    return ctx.op("Reshape", [s_in, ctx.const(shape)], base)


def _start_gate(node: Any, ctx: Any, x: Any, d: int, layout: int) -> dict:
    """Start a recurrence on a late input at the stream's real start, even inside a chunk.

    The input's first ``d`` stream frames come before the start (pre-roll: the full graph has no such frames).
    Per stream, ``b`` = pre-roll frames in this chunk (from the tick counter). The chunk's frames are rotated
    left by ``b`` (GatherElements), the op runs with ``sequence_lens = max(frames - b, 1)`` from the initial
    state multiplied by ``b == 0`` (a fresh stream starts from zeros), its ``Y`` is rotated back (frames ``< b``
    are pre-roll and ignored downstream) and its final state is kept only when ``b < frames``. In the steady
    state (``b = 0``) this is the plain op. Returns the gate tensors ``fresh_keep`` and ``alive``, shaped to
    multiply the (layout's) initial state and ``Y_h``.
    """
    f = ctx.fact(x)
    base = f"{node.name}/{BOOKKEEPING}_gate"
    counter = ctx.counter(d, f.rate)
    shape = ctx.op("Shape", [x], base)
    n_i = ctx.op("Gather", [shape, ctx.const([layout])], base, {"axis": 0})  # (1,) int64 frames
    n_f = ctx.op("Cast", [n_i], base, {"to": 1}, dtype=np.float32)
    before = ctx.op("Mul", [counter, ctx.const([[float(f.rate)]], dtype=np.float32)], base)  # (N, 1)
    b = ctx.op("Clip", [ctx.op("Sub", [ctx.const([[float(d)]], dtype=np.float32), before], base),
                        ctx.const(0.0, dtype=np.float32), ctx.unsqueeze(n_f, [0], base, squeeze=True)], base)
    b_i = ctx.op("Cast", [b], base, {"to": 7}, dtype=np.int64)  # (N, 1)
    ar = ctx.op("Range", [ctx.const(0), ctx.unsqueeze(n_i, [0], base, squeeze=True), ctx.const(1)], base,
                dtype=np.int64)  # (frames,)

    def rotate(t: Any, sign: str, y_rank: int) -> Any:
        idx = ctx.op("Mod", [ctx.op(sign, [ar, b_i], base), n_i], base)  # (N, frames)
        if layout == 0:
            idx = ctx.op("Transpose", [idx], base, {"perm": [1, 0]})  # (frames, N)
            extra = [2] if y_rank == 3 else [1, 3]
        else:
            extra = [2] if y_rank == 3 else [2, 3]
        idx = ctx.unsqueeze(idx, extra, base)
        idx = ctx.op("Expand", [idx, ctx.op("Shape", [t], base)], base)
        return ctx.op("GatherElements", [t, idx], base, {"axis": layout})

    node.inputs[0] = rotate(x, "Add", 3)
    seq = ctx.op("Max", [ctx.op("Sub", [n_f, b], base), ctx.const([[1.0]], dtype=np.float32)], base)
    seq = ctx.op("Cast", [ctx.op("Reshape", [seq, ctx.const([-1])], base)], base, {"to": 6}, dtype=np.int32)
    node.inputs[4] = seq
    y_full = node.outputs[0]
    y_raw = gs.Variable(ctx.name(f"{node.name}/Y_rotated"), dtype=y_full.dtype)
    node.outputs[0] = y_raw
    ctx.graph.layer(op="Identity", name=ctx.name(f"{node.name}/Y"), inputs=[rotate(y_raw, "Sub", 4)],
                    outputs=[y_full])
    perm_shape = [1, -1, 1] if layout == 0 else [-1, 1, 1]

    def as_state(cond: Any) -> Any:
        return ctx.op("Reshape", [ctx.op("Cast", [cond], base, {"to": 1}, dtype=np.float32),
                                  ctx.const(perm_shape)], base)

    # b <= 0 as Not(b > 0): Greater and Not exist in every opset (LessOrEqual only from 12, e.g. NSNet2 is opset 11)
    fresh = as_state(ctx.op("Not", [ctx.op("Greater", [b, ctx.const([[0.0]], dtype=np.float32)], base)], base))
    alive = as_state(ctx.op("Less", [b, n_f], base))
    return {"fresh_keep": fresh, "alive": alive}
