"""Adopt's proof: the adopted graph == the original graph's own state loop, and every state carries something.

A graph that already streams has no full-sequence twin, so the reference is the original (canonical) graph run hop by
hop with its own state loop (:func:`run_loop`, over :func:`cosyedge.surgery.proof.run_state_loop`). :func:`prove`
streams the adopted graph at 1 and 3 hops per call against it and zeroes the states (all, then each alone) to show
that the outputs depend on them.

Source: k2-fsa/icefall ``onnx_pretrained-streaming.py`` (the state loop of an already-streaming export);
sonos/tract ``pulse`` tests (pulsed == reference).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cosyedge.errors import AccuracyError, ArtifactError, UsageError, first_line
from cosyedge.surgery import proof

if TYPE_CHECKING:
    from cosyedge.surgery.adopt.feeds import StreamTensor


def run_loop(sess: Any, ins: list[StreamTensor], feed: dict[str, np.ndarray], hops: int,
             states: list[tuple[str, str, np.ndarray]], outs: list[StreamTensor], zero: set | None = None,
             ) -> dict[str, np.ndarray]:
    """Stream ``feed`` through ``sess`` ``hops`` hops per call, each call's state outputs feeding the next
    (:func:`cosyedge.surgery.proof.run_state_loop` over adopt's streamed tensors).

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
    return proof.run_state_loop(sess, feed, hops * ins[0].frames, states, {o.name: o.time_axis for o in outs},
                                zero, axes={t.name: t.time_axis for t in ins},
                                chunks={t.name: hops * t.frames for t in ins}, call=f"a call of {hops} hop(s)")


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
            mx, snr, peak = proof.max_err(ref[o.name], got[o.name], same_shape=True)
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
