"""ConvTranspose over time: an overlap-add state; over other axes only (time kernel 1): pass through.

A transposed conv with time kernel ``K`` (dilation included) and stride ``S`` spreads every input frame
over ``K`` output frames, ``S`` apart. In the chunk graph it runs without bias and without time pads on the
chunk (``(C - 1) S + K`` frames); the first ``K - S`` frames get the overlap state (the tail of the
previous chunk) added, the first ``C S`` frames are the output (bias added once, after the overlap-add),
the last ``K - S`` the new state. A begin pad ``p_b`` crops the start: the output is ``d S + p_b`` frames
late; end pads and ``output_padding`` only shape the sequence's tail. A late input is zeroed before the
stream's start (its pre-roll would spill into real frames). An early input (``d < 0``: a left zero pad not yet
absorbed) stays early when the pad's frames are zeros: they add nothing to the overlap, so a left pad followed by
a begin crop of the same length (a causal transposed conv) is delay 0, not ``p_b`` (GTCRN's decoder
was 10 frames late for nothing). Leading time taps of the kernel that are zero for every channel add nothing: they
are dropped, taking back frames of the begin crop and then, for a late input, of the output's lateness (the
output of frame ``i`` starts ``z0`` frames later; NSNet2's synthesis window starts at 0, its stream was
160 samples late, its look-ahead is 159). ``K < S`` is refused (gaps between chunks).

Sources: ONNX ConvTranspose (output shape ``S (T - 1) + output_padding + K - pads``); sonos/tract
``pulse/src/ops/cnn/deconv.rs`` (pulsed deconv with a zero bias, overlap-add, bias added once).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.surgery.rules import INT64_MAX, Blocker, attr_str, register
from cosyedge.surgery.rules.perframe import pass_through

gs = lazy_import("onnx_graphsurgeon")

def _leading_zero_taps(w: np.ndarray, axis: int, limit: int) -> int:
    """How many of the first time taps of weight ``w`` (along ``axis``) are zero for every channel, at most
    ``limit`` (int). A periodic Hann window starts at 0: an iSTFT written as a ConvTranspose with windowed bases
    gives frame ``i`` no weight at its first sample, so the output reaches one sample less far ahead than the kernel
    says (the CausalHiFT trunk's stream was 1028 samples late, its look-ahead measured 1027)."""
    n = 0
    while n < limit and not np.any(np.take(w, n, axis=axis)):
        n += 1
    return n


def _lead_nonzero(ctx: Any, x: Any, frames: int, axis: int) -> bool:
    """Whether the ``frames`` frames a left pad put before early ``x`` (delay ``-frames``) are not all zeros in the
    full graph, or cannot be traced (bool). When they are zeros their overlap-adds are zeros too: the stream's overlap
    state starts at zeros and the output is ``d S + p_b`` frames late with ``d`` negative (GTCRN's causal decoder: a
    left pad of ``2 dil`` then a begin crop of ``2 dil`` is delay 0), where the crop absorbs the pad (``d S + p_b
    >= 0``). Otherwise (or for an output that would stay early) a delay line on the input computes them, its state
    starting with their values (:meth:`Walker.add_state`)."""
    try:
        return ctx.lead_values(x, frames, axis) is not None
    except Blocker:
        return True


@register("ConvTranspose")
def conv_transpose(node: Any, ctx: Any) -> None:
    """ConvTranspose (module doc)."""
    if ctx.stream_inputs(node) != [0]:
        raise Blocker("its weights or bias run over time")
    x = node.inputs[0]
    f = ctx.fact(x)
    rank = len(f.shape1)
    if f.axis < 2:
        raise Blocker(f"time is axis {f.axis} (batch or channels), not a spatial axis")
    w = ctx.value(node.inputs[1])
    if w is None:
        raise Blocker("its weight is computed at run time")
    n_sp, t_sp = rank - 2, f.axis - 2
    kernel = [int(k) for k in node.attrs.get("kernel_shape", w.shape[2:])]
    dil = list(node.attrs.get("dilations", [1] * n_sp))
    strides = list(node.attrs.get("strides", [1] * n_sp))
    auto = attr_str(node, "auto_pad", "NOTSET")
    if auto != "NOTSET":
        raise Blocker(f"auto_pad={auto} (export with explicit pads)")
    if "output_shape" in node.attrs:
        raise Blocker("output_shape fixes the sequence length")
    pads = list(node.attrs.get("pads", [0] * 2 * n_sp))
    s = int(strides[t_sp])
    p_b = int(pads[t_sp])
    d = ctx.delay_of(x) or 0
    dl = int(dil[t_sp])
    # zero leading taps the begin crop absorbs, and past it those a late input's lateness absorbs (the output is
    # then less late; the kernel keeps at least max(S, 2) frames: no gaps, no 1-frame kernel with a crop)
    limit = p_b // dl
    if d > 0:
        limit = max(limit, min((p_b + d * s) // dl, (kernel[t_sp] - 1) - (max(s, 2) - 1 + dl - 1) // dl))
    z0 = _leading_zero_taps(w, 2 + t_sp, min(kernel[t_sp] - 1, limit))
    if z0:  # those taps add nothing: drop them, the begin crop (or the output's lateness) shrinks by as many frames
        w = np.take(w, np.arange(z0, kernel[t_sp]), axis=2 + t_sp)
        node.inputs[1] = ctx.const(w, f"{node.name}/weight", dtype=w.dtype)
        kernel[t_sp] -= z0
        if "kernel_shape" in node.attrs:
            node.attrs["kernel_shape"] = kernel
        p_b -= z0 * dl
    k_eff = (kernel[t_sp] - 1) * int(dil[t_sp]) + 1
    if k_eff == 1 and s == 1:
        if p_b or pads[n_sp + t_sp]:
            raise Blocker("crops time with a kernel of 1 frame")
        return pass_through(node, ctx, [0])
    if k_eff < s:
        raise Blocker(f"time kernel {k_eff} shorter than its stride {s} leaves gaps between chunks")
    if d < 0 and (d * s + p_b < 0 or _lead_nonzero(ctx, x, -d, f.axis)):
        x, d = ctx.delay_line(x, -d, node.name), 0
    if d > 0:
        x = ctx.mask_preroll(x, node.name)
    node.inputs[0] = x
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2].name else None
    while len(node.inputs) > 2:
        node.inputs.pop()
    pads[t_sp] = pads[n_sp + t_sp] = 0
    node.attrs["pads"] = pads
    if "output_padding" in node.attrs:
        op = list(node.attrs["output_padding"])
        op[t_sp] = 0
        node.attrs["output_padding"] = op
    y_final = node.outputs[0]
    y_raw = gs.Variable(ctx.name(f"{node.name}/raw"), dtype=y_final.dtype)
    node.outputs[0] = y_raw
    ctx.facts[y_raw.name] = ctx.facts[y_final.name]
    t = f.axis
    o = k_eff - s
    if o > 0:
        head = ctx.time_slice(y_raw, 0, o, t, node.name)
        rest = ctx.time_slice(y_raw, o, INT64_MAX, t, node.name)
        shape = list(ctx.fact(y_final).shape1)
        b = ctx.batch_axis(y_final)
        shape[t], shape[b] = o, "N"
        if b != 0:
            raise Blocker("overlap state with the batch axis not first")
        if ctx.batch_fold(y_final) > 1:
            raise Blocker("its batch folds several sequences per stream (not supported for this state)")
        s_in, s_out = ctx.new_state(shape, y_final.dtype or np.float32, "overlap", node.name)
        head = ctx.op("Add", [head, s_in], node.name)
        full = ctx.op("Concat", [head, rest], node.name, {"axis": t})
        out = ctx.time_slice(full, 0, -o, t, node.name)
        ctx.time_slice(full, -o, INT64_MAX, t, f"{node.name}/overlap_out", out=s_out)
    else:
        out = y_raw
    if bias is not None:
        bshape = [1] * rank
        bshape[1] = -1
        b4 = ctx.op("Reshape", [bias, ctx.const(bshape)], node.name)
        ctx.graph.layer(op="Add", name=ctx.name(f"{node.name}/bias"), inputs=[out, b4], outputs=[y_final])
    else:
        ctx.graph.layer(op="Identity", name=ctx.name(f"{node.name}/out"), inputs=[out], outputs=[y_final])
    ctx.set_delay(y_final, d * s + p_b)
