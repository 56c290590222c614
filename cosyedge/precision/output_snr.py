"""Output SNR against the parent: how far a rebuilt model (FP16, INT8, pruned, another backend) is from its parent.

One formula, :func:`snr_db`: ``SNR = 10 log10(sum y_ref^2 / sum (y - y_ref)^2)`` over float64 sums, for one output or
summed over several clips. It is used by the FP16 stage's gate (:func:`output_snr_db`, both models streamed from zero
state over real speech), the INT8 and pruning cost line (:func:`cosyedge.precision.cost.demo_snr`), the INT8 fallback
search (:class:`cosyedge.precision.fallback.HoldoutSnr`, held-out clips) and ``cosyedge compare``
(:func:`cosyedge.compare.core.snr_db`, capped for its reports).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def snr_db(ref: Any, est: Any, *, cap: float | None = None) -> float:
    """SNR (dB) of ``est`` against ``ref``: ``10 log10(sum ref^2 / sum (est - ref)^2)``, float64 sums.

    Args:
        ref, est (np.ndarray | list[np.ndarray]): The parent's output and the candidate's, any shape (the same); or
            lists of such pairs (clips), summed over all of them.
        cap (float | None): None (a build's gate): ``inf`` when identical, the signal floored at 1e-30, through numpy's
            log10. A number (``cosyedge compare``'s reports): clipped to [-cap, cap] (identical -> cap; a silent
            reference with an error -> -cap), NaN when either holds a non-finite value, through ``math.log10``. (The
            two logarithms can differ in the last bit; each caller keeps the one its figures were always made with.)
    Returns:
        float: dB.
    """
    pairs = list(zip(ref, est)) if isinstance(ref, (list, tuple)) else [(ref, est)]
    pairs = [(np.asarray(r, np.float64), np.asarray(e, np.float64)) for r, e in pairs]
    if cap is not None and not all(np.isfinite(r).all() and np.isfinite(e).all() for r, e in pairs):
        return float("nan")
    noise = sum(float(((e - r) ** 2).sum()) for r, e in pairs)
    sig = sum(float((r ** 2).sum()) for r, _e in pairs)
    if cap is None:
        return float("inf") if noise == 0.0 else 10.0 * np.log10(max(sig, 1e-30) / noise)
    if noise == 0.0:
        return cap
    if sig == 0.0:
        return -cap
    return float(np.clip(10.0 * math.log10(sig / noise), -cap, cap))


def output_snr_db(ref_onnx: str | Path, test_onnx: str | Path, x: np.ndarray, chunk_samples: int | None = None,
                  partners: dict[str, np.ndarray] | None = None) -> float:
    """Output SNR (dB) of ``test_onnx`` vs ``ref_onnx``, both streamed over ``x`` from zero state.

    ``SNR = 10 log10(sum(y_ref^2) / sum((y_test - y_ref)^2))``; ``inf`` when identical.

    Args:
        ref_onnx, test_onnx (str | Path | SourceModel): Streaming ONNX models with the same contract (a
            :class:`~cosyedge.artifacts.SourceModel` reuses its parsed contract).
        x (np.ndarray): float32 (T,) audio at the model rate.
        chunk_samples (int | None): Chunk length (samples); defaults to one hop.
        partners (dict[str, np.ndarray] | None): Models with several waveform inputs: one float32 (T',) signal
            per other input (:func:`cosyedge.runtime.stream.stream_array`); None for a model with one input.
    Returns:
        float: SNR in dB.
    """
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(ref_onnx, chunk_samples=chunk_samples) as s:
        y_ref = _stream_output(s, x, partners).astype(np.float64)
    with OrtStreamSession(test_onnx, chunk_samples=chunk_samples) as s:
        y = _stream_output(s, x, partners).astype(np.float64)
    return snr_db(y_ref, y)


def _stream_output(session: Any, x: np.ndarray, partners: dict[str, np.ndarray] | None) -> np.ndarray:
    """``contract.output`` of ``session`` streamed over ``x`` (float32 (T,)) from zero state, as an array.

    A waveform output is :func:`cosyedge.runtime.stream.stream_array`'s; any other output (e.g. twice the
    input rate, or frames) is every chunk's output concatenated along its time axis, so FP16 is measured on
    the same models INT8 calibrates (re-audit finding 15)."""
    from cosyedge.runtime import feeds
    from cosyedge.runtime.stream import stream_array

    c = session.contract
    out = next(o for o in c.stream_outputs if o.name == c.output)
    if feeds.is_waveform(out, c):
        return stream_array(session, x, partners=partners)
    n = session.chunk_samples
    chunks = -(-x.size // n)
    xp = np.zeros((1, 1, chunks * n), np.float32)
    xp[0, 0, :x.size] = x
    first = feeds.primary_input(c).name
    others = {k: v.reshape(1, 1, -1) for k, v in
              feeds.partner_arrays(c, partners, chunks * n, str(getattr(session, "model_path", "the model"))).items()} \
        if feeds.partner_inputs(c) else {}
    session.reset()
    ys = []
    for i in range(chunks):
        sl = slice(i * n, (i + 1) * n)
        feed = {first: xp[:, :, sl], **{k: v[:, :, sl] for k, v in others.items()}}
        ys.append(session.push(feed)[c.output])  # an array of its own
    return np.concatenate(ys, axis=out.time_axis) if ys else np.zeros(0, np.float32)
