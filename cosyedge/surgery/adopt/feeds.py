"""Adopt's streamed tensors and loops: what each streamed input/output looks like per hop, the proof inputs
(real speech for a waveform, speech laid out frame by frame for features unless given), the graph's own state
loop over several inputs, and the proof that the adopted graph equals that loop.

Source: k2-fsa/icefall ``onnx_pretrained-streaming.py`` (the state loop of an already-streaming export);
sonos/tract ``pulse`` tests (pulsed == reference).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cosyedge.errors import AccuracyError, ArtifactError, UsageError, first_line
from cosyedge.runtime import loop
from cosyedge.surgery import proof


@dataclasses.dataclass
class StreamTensor:
    """One streamed (non-state) input or output of the canonical graph.

    Attributes:
        name (str): Tensor name.
        kind (str): ``"audio"`` (a waveform (N, 1, T) at the model rate) or ``"features"``.
        time_axis (int): Axis of time (batch is axis 0).
        frames (int): Frames of the time axis per hop (``hop_samples`` for audio, 1 for one frame per hop).
        shape (list[int]): Shape at batch 1 and one hop (time axis = ``frames``).
        dtype (str): numpy dtype name.
        dynamic_time (bool): The graph takes any number of frames on this axis per call.
    """

    name: str
    kind: str
    time_axis: int
    frames: int
    shape: list
    dtype: str = "float32"
    dynamic_time: bool = False

    def contract_shape(self) -> list:
        """Shape for :class:`~cosyedge.artifacts.StreamIO`: ``"N"`` on axis 0, ``"T"`` on the time axis."""
        return ["N"] + [("T" if k == self.time_axis else int(d)) for k, d in enumerate(self.shape) if k > 0]


def speech_feed(ins: list[StreamTensor], rate: int, hops: int, given: dict | None = None) -> dict[str, np.ndarray]:
    """Proof inputs at batch 1, ``hops`` hops long: real speech (the bundled demo recording) for a waveform, for
    features the given arrays (``given[name]``, cut or repeated to length) else the same speech laid out frame by
    frame (each frame's values are consecutive samples).

    Args:
        ins (list[StreamTensor]): The streamed inputs.
        rate (int): Sample rate (Hz).
        hops (int): Hops of input.
        given (dict[str, np.ndarray] | None): Real inputs by name, batch 1, frames along the time axis.
    Returns:
        dict[str, np.ndarray]: by input name, shape = the input's shape with ``frames * hops`` on its time axis.
    Raises:
        UsageError: a given array of the wrong rank or frame shape.
    """
    out = {}
    for k, t in enumerate(ins):
        n = t.frames * hops
        if given and t.name in given:
            a = np.asarray(given[t.name], dtype=t.dtype)
            want = [d for i, d in enumerate(t.shape) if i != t.time_axis]
            got = [d for i, d in enumerate(a.shape) if i != t.time_axis]
            if a.ndim != len(t.shape) or got != want:
                raise UsageError(f"proof input '{t.name}' has shape {list(a.shape)}; the graph takes {t.shape} per hop "
                                 f"(time axis {t.time_axis})")
            reps = -(-n // a.shape[t.time_axis])
            a = np.concatenate([a] * reps, axis=t.time_axis) if reps > 1 else a
            out[t.name] = np.ascontiguousarray(np.take(a, np.arange(n), axis=t.time_axis))
            continue
        per = int(np.prod([d for i, d in enumerate(t.shape) if i != t.time_axis]))
        x = proof.demo_audio(rate, per * n + 1234 * k)[1234 * k:]
        if t.kind == "audio":
            out[t.name] = x[: n].reshape(1, 1, n).astype(t.dtype)
            continue
        other = [d for i, d in enumerate(t.shape) if i != t.time_axis]
        a = x[: per * n].reshape([n] + other)  # frames first, then moved to the time axis
        out[t.name] = np.ascontiguousarray(np.moveaxis(a, 0, t.time_axis)).astype(t.dtype)
    return out


def run_loop(sess: Any, ins: list[StreamTensor], feed: dict[str, np.ndarray], hops: int,
             states: list[tuple[str, str, np.ndarray]], outs: list[StreamTensor], zero: set | None = None,
             ) -> dict[str, np.ndarray]:
    """Stream ``feed`` through ``sess`` ``hops`` hops per call, each call's state outputs feeding the next.

    Args:
        sess (onnxruntime.InferenceSession): The graph.
        ins (list[StreamTensor]): Its streamed inputs.
        feed (dict[str, np.ndarray]): Full-length inputs by name (batch first, frames on each time axis).
        hops (int): Hops per call.
        states (list[tuple[str, str, np.ndarray]]): (input, output, initial value) per state pair.
        outs (list[StreamTensor]): Outputs collected, concatenated along their time axes.
        zero (set | None): State inputs reset to their initial value before every call.
    Returns:
        dict[str, np.ndarray]: by output name.
    Raises:
        ArtifactError: ONNX Runtime fails on a call (first line of its message).
    """
    names = [o.name for o in sess.get_outputs()]
    first = ins[0]

    def error(err: Exception, _k: int) -> ArtifactError:
        return ArtifactError(f"ONNX Runtime fails on a call of {hops} hop(s) ({first_line(err)})")

    chunks = loop.stream(lambda f: dict(zip(names, sess.run(None, f))), None, dict(feed), hops * first.frames,
                         states={i: v for i, _o, v in states}, pairs=[(i, o) for i, o, _v in states],
                         zero=zero or (), outputs=[o.name for o in outs], on_error=error,
                         axes={t.name: t.time_axis for t in ins}, chunks={t.name: hops * t.frames for t in ins})
    return {o.name: np.concatenate([c[o.name] for c in chunks], axis=o.time_axis) for o in outs}


def _err(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, SNR dB (capped at 200), peak |a|) of b against a (same shape)."""
    if a.shape != b.shape:
        return float("inf"), -200.0, float(np.abs(a).max()) if a.size else 0.0
    a64, e = a.astype(np.float64), b.astype(np.float64) - a.astype(np.float64)
    e2, s2 = float((e ** 2).sum()), float((a64 ** 2).sum())
    snr = 200.0 if e2 == 0 else min(200.0, 10 * np.log10(max(s2, 1e-300) / e2))
    return (float(np.abs(e).max()) if e.size else 0.0), float(snr), (float(np.abs(a64).max()) if a.size else 0.0)


def prove(model: Any, contract: Any, ins: list[StreamTensor], outs: list[StreamTensor], pairs: list[tuple[str, str]],
          ref: dict[str, np.ndarray], feed: dict[str, np.ndarray], atol: float, where: str) -> dict:
    """Adopt's proof: the adopted graph == the canonical graph's own state loop (``ref``) at 1 and 3 hops per call,
    and its states carry information (zeroing all of them, and each alone, every hop changes an output).

    Args:
        model (onnx.ModelProto): The adopted graph (``state_in.NN``/``state_out.NN``).
        contract (StreamContract): Its contract (states in the order of ``pairs``; ``output`` = the main output).
        ins, outs (list[StreamTensor]): Streamed inputs and outputs.
        pairs (list[tuple[str, str]]): Original (state input, state output) names, for messages.
        ref (dict[str, np.ndarray]): Per output, the canonical graph hop by hop with its own state loop.
        feed (dict[str, np.ndarray]): The inputs ``ref`` was computed from (a multiple of 3 hops).
        atol (float): Tolerance relative to max(1, peak |ref|).
        where (str): Name for messages.
    Returns:
        dict: the proof summary (max_abs, snr_db, chunks_ticks, ticks, outputs, reference, state_effect_max_abs).
    Raises:
        ArtifactError: ONNX Runtime cannot load or run the adopted graph.
        AccuracyError: an output differs from the reference beyond ``atol``.
        UsageError: the outputs do not depend on the states, or one state carries nothing.
    """
    try:
        sess = proof.session(model)
    except Exception as err:
        raise ArtifactError(f"{where}: ONNX Runtime cannot load the adopted graph ({first_line(err)})") from None
    svals = [(s.input, s.output, s.zeros(1)) for s in contract.states]
    rows = []
    hop = contract.hop_samples
    for hops in (1, 3):
        got = run_loop(sess, ins, feed, hops, svals, outs)
        for o in outs:
            mx, snr, peak = _err(ref[o.name], got[o.name])
            rows.append({"output": o.name, "chunk_samples": hops * hop, "max_abs": mx, "snr_db": snr, "peak": peak})
            if not mx <= atol * max(1.0, peak):
                raise AccuracyError(f"{where}: the adopted graph differs from the original's own state loop: output "
                                    f"'{o.name}' max abs error {mx:.3g} (SNR {snr:.1f} dB) at chunks of {hops * hop} "
                                    f"samples (tolerance {atol:g}); nothing written")
    # relative to each output's own level (proof.tolerance: an output quieter than 1 is held to its peak, down to
    # LEVEL_FLOOR), 1e-4 of it at least: far above float rounding, so states that do not matter are still refused
    floor = {o.name: proof.tolerance(float(np.abs(ref[o.name]).max()), max(1e-4, 100 * atol)) for o in outs}

    def zeroed(which: set) -> tuple[float, str]:
        """Largest change of an output, relative to its floor, when ``which`` are zeroed every hop: (change, name)."""
        got = run_loop(sess, ins, feed, 1, svals, outs, zero=which)
        return max((float(np.abs(got[o.name] - ref[o.name]).max()) / floor[o.name], o.name) for o in outs)

    r_all, o_all = zeroed({s.input for s in contract.states})
    others = f", the most of {len(outs)} outputs" if len(outs) > 1 else ""
    if r_all <= 1:
        raise UsageError(f"{where}: the outputs do not depend on the states {[p[0] for p in pairs]} (zeroing them "
                         f"every chunk changes '{o_all}' by {r_all * floor[o_all]:.3g} at most{others}): this graph is not a "
                         f"streaming model; nothing written")
    carry = {}
    for (i, o), spec in zip(pairs, contract.states):
        r, name = zeroed({spec.input}) if len(pairs) > 1 else (r_all, o_all)
        carry[i] = r * floor[name]
        if r <= 1:
            raise UsageError(f"{where}: state {i}={o} carries nothing (zeroing it every chunk changes '{name}' by "
                             f"{r * floor[name]:.3g} at most{others}): drop it from the pairs or fix the export; nothing "
                             f"written")
    n = next(iter(feed.values())).shape[ins[0].time_axis] // ins[0].frames
    return {"max_abs": max(r["max_abs"] for r in rows), "snr_db": min(r["snr_db"] for r in rows),
            "chunks_ticks": sorted({r["chunk_samples"] for r in rows}), "ticks": int(n * hop),
            "outputs": sorted(o.name for o in outs), "reference": "the original graph's own state loop, hop by hop",
            "state_effect_max_abs": {k: float(v) for k, v in carry.items()}}
