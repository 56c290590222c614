"""Windowed ops over time (Conv 1-D/2-D/3-D, MaxPool, AveragePool, LpPool) and Pad: context becomes state,
look-ahead becomes delay.

A window op with time kernel ``K`` (dilation included), stride ``S`` and time pads ``(P_l, P_r)`` in the
full graph, whose input is ``d`` frames late, runs in the chunk graph on ``Concat(state, x)`` with a state
of ``P_s`` frames and no time pads, where ``P_s`` is the one value in ``[max(0, K - S), K - 1]`` (exactly
``C / S`` outputs for a chunk of ``C`` frames) with ``(P_s + d - P_l) % S == 0``. Its output is then
``(P_s + d - P_l) / S`` frames late: 0 for a causal conv (``P_l = K - 1``, stride 1; or ``K - S`` strided),
``K - 1`` for a look-ahead conv (``causal_type='right'``, a right pad), the un-chomped half of a symmetric
pad. A Conv's last time taps that are zero for every channel are dropped first (they read the future for
nothing). It is negative when the left pad is longer than the kernel needs (a 1x1 conv after a pad, as in the
Conformer convolution module): the output's first frames only saw padding, the stream starts after them
(early), and the next window op's state starts with their values (:meth:`Walker.add_state`). When the
input is late and the full graph zero-pads on the left, the frames before the stream's start are zeroed
(:meth:`Walker.mask_preroll`), as the full graph sees zeros there. Pads on other axes are kept.

``Pad`` on time: a left pad ``P`` makes the tensor ``P`` frames *early* (delay ``d - P``; a following
window op absorbs it into its state, anything else gets a delay line whose zeros are the pad); a right pad
(constant, or computed from the input length, as Demucs's valid-length pad) only appends frames at the
sequence's end and is dropped from the chunk graph; a negative left pad (a crop, DeepFilterNet's
``pad_feat``) makes the tensor later. A left edge (replicate) pad is early the same way; the state that absorbs it
starts with copies of the first chunk's first frame (:mod:`cosyedge.surgery.rules.start`). Right pads of any mode
only append frames at the end and are dropped. Left reflect and wrap pads over time copy frames from later in the
sequence and are refused, as is an edge pad after a look-ahead.

Sources: ONNX operator docs (Conv/ConvTranspose ``pads`` = all begins then all ends, ``auto_pad``; Pad
opset 2/11/18 forms); sonos/tract ``pulse/src/ops/cnn/conv.rs`` and ``pad.rs`` (pulsified windows, delay);
docs/design.md (``dynamo=True`` folds left pads into Conv pads).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.log import plural
from cosyedge.surgery.rules import Blocker, attr_str, register


def window_geometry(node: Any, ctx: Any, n_sp: int, t_sp: int, kernel: list[int]) -> tuple[int, int, int, int]:
    """(K_eff, S, P_l, P_r) of ``node`` on spatial axis ``t_sp`` (0-based) of ``n_sp``."""
    dil = list(node.attrs.get("dilations", [1] * n_sp))
    strides = list(node.attrs.get("strides", [1] * n_sp))
    k_eff = (int(kernel[t_sp]) - 1) * int(dil[t_sp]) + 1
    s = int(strides[t_sp])
    auto = attr_str(node, "auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = list(node.attrs.get("pads", [0] * 2 * n_sp)) if auto == "NOTSET" else [0] * 2 * n_sp
        return k_eff, s, int(pads[t_sp]), int(pads[n_sp + t_sp])
    if s != 1:
        raise Blocker(f"auto_pad={auto} with time stride {s}: the pad depends on the sequence length")
    total = k_eff - 1
    lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
    return k_eff, s, lo, total - lo


def choose_state(k_eff: int, s: int, p_l: int, d: int) -> tuple[int, int, int]:
    """(P_s state frames, extra input delay e, output delay) for a window (see module doc)."""
    best = None
    for p_s in range(max(0, k_eff - s), k_eff):
        e = (p_l - p_s - d) % s  # (p_s + d + e - p_l) divisible by s; the output may come out early (< 0)
        cand = (e, (p_s + d + e - p_l) // s, p_s)
        best = cand if best is None or cand < best else best
    e, d_out, p_s = best
    return p_s, e, d_out


def _set_time_pads(node: Any, n_sp: int, t_sp: int) -> None:
    auto = attr_str(node, "auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID"):  # SAME_*: make explicit (stride 1, checked)
        node.attrs["auto_pad"] = "NOTSET"
        pads = [0] * 2 * n_sp
        for i in range(n_sp):  # SAME on every spatial axis
            kk = (int(_kernel(node, None)[i]) - 1) * int(node.attrs.get("dilations", [1] * n_sp)[i]) + 1
            tot = kk - 1
            pads[i] = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            pads[n_sp + i] = tot - pads[i]
        node.attrs["pads"] = pads
    pads = list(node.attrs.get("pads", [0] * 2 * n_sp))
    if pads:
        pads[t_sp] = 0
        pads[n_sp + t_sp] = 0
        node.attrs["pads"] = pads


def _kernel(node: Any, ctx: Any) -> list[int]:
    if "kernel_shape" in node.attrs:
        return [int(k) for k in node.attrs["kernel_shape"]]
    w = node.inputs[1]
    shape = getattr(w, "shape", None) or (np.asarray(w.values).shape if hasattr(w, "values") else None)
    if not shape:
        raise Blocker("unknown kernel shape")
    return [int(k) for k in shape[2:]]


def _drop_trailing_zero_taps(node: Any, ctx: Any, kernel: list[int], t_sp: int) -> list[int]:
    """Drop the last time taps of a Conv weight that are zero for every channel (they read the future and add
    nothing: a symmetric Hann window ends at 0, so an STFT written as a strided Conv looks one sample less far ahead
    than its kernel says); returns the kernel shape (list[int]). The weight becomes a new constant; pads are left as
    they are (the chunk graph drops the time pads). The delay is the measured look-ahead."""
    w = np.asarray(ctx.value(node.inputs[1]))
    axis = 2 + t_sp
    n = 0
    while n < kernel[t_sp] - 1 and not np.any(np.take(w, kernel[t_sp] - 1 - n, axis=axis)):
        n += 1
    if not n:
        return kernel
    w = np.take(w, np.arange(kernel[t_sp] - n), axis=axis)
    node.inputs[1] = ctx.const(w, f"{node.name}/weight", dtype=w.dtype)
    kernel = list(kernel)
    kernel[t_sp] -= n
    if "kernel_shape" in node.attrs:
        node.attrs["kernel_shape"] = kernel
    return kernel


@register("Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool")
def window(node: Any, ctx: Any) -> None:
    """Conv / pooling over time: state of ``P_s`` past frames, delay from the look-ahead (module doc)."""
    idxs = ctx.stream_inputs(node)
    if idxs != [0]:
        raise Blocker("its weights or bias run over time")
    x = node.inputs[0]
    f = ctx.fact(x)
    rank = len(f.shape1)
    if f.axis < 2:
        raise Blocker(f"time is axis {f.axis} (batch or channels), not a spatial axis")
    n_sp, t_sp = rank - 2, f.axis - 2
    kernel = _kernel(node, ctx)
    if node.op.startswith("Conv") and ctx.value(node.inputs[1]) is None:
        raise Blocker("its weight is computed at run time (streaming needs constant weights)")
    if node.op == "Conv" and attr_str(node, "auto_pad", "NOTSET") in ("NOTSET", "VALID"):
        kernel = _drop_trailing_zero_taps(node, ctx, kernel, t_sp)
    k_eff, s, p_l, _p_r = window_geometry(node, ctx, n_sp, t_sp, kernel)
    if node.op == "AveragePool" and p_l and not int(node.attrs.get("count_include_pad", 0)):
        raise Blocker("AveragePool with a left time pad and count_include_pad=0 averages fewer frames at the "
                      "sequence start")
    if node.op == "MaxPool" and p_l:
        raise Blocker("MaxPool pads with -inf, a state starts at zeros")
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise Blocker("MaxPool indices count positions from the sequence start")
    d = ctx.delay_of(x) or 0
    p_s, e, d_out = choose_state(k_eff, s, p_l, d)
    if d + e > 0 and p_l > 0:
        if e:
            x = ctx.delay_line(x, e, node.name)
            e = 0
        x = ctx.mask_preroll(x, node.name)
    elif e:
        x = ctx.delay_line(x, e, node.name)
    if p_s > 0:
        x = ctx.add_state(x, p_s, f.axis, "context", node.name)
    node.inputs[0] = x
    _set_time_pads(node, n_sp, t_sp)
    ctx.set_delay(node.outputs[0], d_out)


def _pad_values(node: Any, ctx: Any, rank: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """(pads at probe 1, pads at probe 2 (None when constant), value known 0) as full 2*rank arrays."""
    if "pads" in node.attrs:  # opset < 11
        p = np.asarray(node.attrs["pads"], dtype=np.int64)
        return p, p, float(node.attrs.get("value", 0.0)) == 0.0
    t = node.inputs[1]
    f = ctx.fact(t)
    v1 = ctx.value(t)
    v2 = f.values2 if f.sizes else v1
    if v1 is None:
        raise Blocker("its pads are computed from data")
    value_ok = True
    if len(node.inputs) > 2 and node.inputs[2].name:
        v = ctx.value(node.inputs[2])
        value_ok = v is not None and (np.asarray(v).size == 0 or float(np.asarray(v).reshape(-1)[0]) == 0.0)
    v1, v2 = np.asarray(v1, dtype=np.int64).reshape(-1), np.asarray(v2, dtype=np.int64).reshape(-1)
    if len(node.inputs) > 3 and node.inputs[3].name:  # opset 18 axes
        axes = ctx.value(node.inputs[3])
        if axes is None:
            raise Blocker("its axes are computed at run time")
        axes = [int(a) % rank for a in np.asarray(axes).reshape(-1)]
        full1, full2 = np.zeros(2 * rank, np.int64), np.zeros(2 * rank, np.int64)
        for i, a in enumerate(axes):
            full1[a], full1[rank + a] = v1[i], v1[len(axes) + i]
            full2[a], full2[rank + a] = v2[i], v2[len(axes) + i]
        node.inputs[3] = ctx.const(list(range(rank)))
        return full1, full2, value_ok
    return v1, v2, value_ok


@register("Pad")
def pad(node: Any, ctx: Any) -> None:
    """Pad: other axes kept; on time a left pad is an early tensor, a right pad is dropped (module doc)."""
    if ctx.stream_inputs(node) != [0]:
        raise Blocker("its pads or value run over time")
    x = node.inputs[0]
    f = ctx.fact(x)
    rank, t = len(f.shape1), f.axis
    p1, p2, value_ok = _pad_values(node, ctx, rank)
    mode = attr_str(node, "mode", "constant")
    if len(p1) != 2 * rank:
        raise Blocker(f"has {len(p1)} pads for a rank-{rank} input")
    others = [i for i in range(2 * rank) if i not in (t, rank + t)]
    if any(p1[i] != p2[i] for i in others):
        raise Blocker("pads another axis by an amount computed from the sequence length")
    left, right1 = int(p1[t]), int(p1[rank + t])
    if p1[t] != p2[t]:
        raise Blocker("left-pads time by an amount computed from the sequence length")
    d = ctx.delay_of(x) or 0
    if left > 0 and mode == "edge" and d != 0:
        raise Blocker(f"pads time in 'edge' (replicate) mode on the left after {plural(d, 'frame')} of look-ahead "
                      "(the copies "
                      "of the first frame are taken at the stream's start, before any delay: put the pad first)")
    if left > 0 and mode not in ("constant", "edge"):
        copied = f"frames {left}..1 of the sequence" if mode == "reflect" else f"its last {plural(left, 'frame')}"
        raise Blocker(f"pads time in '{mode}' mode on the left: its first {plural(left, 'frame')} copy {copied}, "
                      "which a "
                      "stream has not seen at its start (use 'replicate' or a zero pad)")
    if left > 0 and mode == "constant" and not value_ok:
        raise Blocker("left-pads time with a value other than 0 (a state starts at zeros)")
    new = p1.copy()
    new[t] = new[rank + t] = 0
    if left > 0 and d > 0:
        x = ctx.mask_preroll(x, node.name)
    if not new.any():
        node.op, node.attrs = "Identity", {}
        node.inputs.clear()
        node.inputs.extend([x])
    else:
        node.inputs[0] = x
        if "pads" in node.attrs:
            node.attrs["pads"] = new.tolist()
        else:
            node.inputs[1] = ctx.const(new.tolist())
    ctx.set_delay(node.outputs[0], d - left)
