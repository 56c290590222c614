"""Ops that see the whole sequence at once: refused with the reason (a rule that always blocks).

Norms over time (InstanceNormalization and GroupNormalization normalise over every spatial axis, so over
time when time is spatial), global pools, ops that index or reorder the whole sequence, and control flow
that carries a streaming tensor. Each gets a reason a user can act on. (Reductions, LayerNormalization and
Softmax over time are refused by their own rules in :mod:`.perframe`, which let them pass over other axes.)

Source: ONNX operator docs (InstanceNormalization: mean/variance per instance and channel over all
spatial axes; GroupNormalization likewise per group; Global*Pool over all spatial axes).
"""

from __future__ import annotations

from typing import Any

from cosyedge.surgery.rules import Blocker, register
from cosyedge.surgery.rules.perframe import pass_through


@register("InstanceNormalization", "GroupNormalization", "MeanVarianceNormalization")
def norm_over_time(node: Any, ctx: Any) -> None:
    """Refused when time is one of the normalised axes (a spatial axis; for MVN its ``axes``)."""
    t = ctx.fact(node.inputs[0]).axis
    if node.op == "MeanVarianceNormalization":
        rank = len(ctx.fact(node.inputs[0]).shape1)
        axes = [int(a) % rank for a in node.attrs.get("axes", [0, 2, 3])]
        if t not in axes:
            return pass_through(node, ctx, [0])
    elif t < 2:
        return pass_through(node, ctx, [0])
    raise Blocker(f"normalises over the time axis {t} (mean and variance of the whole sequence; use a causal "
                  "or per-frame norm such as LayerNorm over channels)")


_WHY = {
    "GlobalAveragePool": "averages over every spatial axis, time included (a global mean over the sequence)",
    "GlobalMaxPool": "takes the maximum over the whole sequence",
    "GlobalLpPool": "pools over the whole sequence",
    "NonZero": "indexes the whole sequence",
    "Unique": "looks at the whole sequence",
    "ReverseSequence": "reverses the sequence",
    "Scatter": "scatters along data-dependent positions",
    "Loop": "a loop over a streaming tensor (control flow is not streamed)",
    "Scan": "a scan over a streaming tensor (control flow is not streamed)",
    "If": "a branch on a streaming tensor (control flow is not streamed)",
    "MultiHeadAttention": "attention over the whole sequence",
    "STFT": "an STFT op over the whole signal (express it as a strided Conv with the STFT basis)",
    "DFT": "a DFT over the whole axis",
}


@register(*_WHY)
def refused(node: Any, ctx: Any) -> None:
    """Always blocks, with the op's reason."""
    raise Blocker(_WHY[node.op])
