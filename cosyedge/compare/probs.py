"""``compare`` of a model whose output is one value per hop (a VAD's speech probability), not audio.

SI-SNR and PESQ need a waveform; a probability track is compared by what it decides: the max abs
difference, the hops whose side of the 0.5 threshold differs (``flips``) and, for a voice activity
detector (:func:`cosyedge.artifacts.task.resolve`) streaming Silero's hop, whether the speech segments of
:func:`cosyedge.vad.stream.segments_report` change. Rule (:func:`probability_failures`): a VAD passes when its
segments are unchanged; another one-value-per-hop output passes when no hop flips.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 0.5
"""float: the decision threshold (Silero's default speech threshold)."""


def one_value_per_hop(contract) -> bool:
    """bool: the contract's primary output is not audio and gives one value (one channel) per hop."""
    o = next((o for o in contract.stream_outputs if o.name == contract.output), None)
    return (o is not None and o.kind != "audio" and o.frames_per_hop == 1 and len(o.shape) == 3
            and o.shape[1] == 1)


def is_vad(model) -> bool:
    """bool: ``model`` (:class:`~cosyedge.compare.models.CompareModel`) is a voice activity detector."""
    from cosyedge.artifacts.task import model_metadata, resolve

    c = model.contract
    return resolve(c, None if c.task else model_metadata(model.model_path)).speech_output == c.output


def probability_stats(n_samples: int, y_ref: np.ndarray, y_cand: np.ndarray, contract, vad: bool) -> dict:
    """Compare two probability tracks of one utterance.

    Args:
        n_samples (int): Utterance length at the model rate (samples): the first ``ceil(n / hop)`` hops count
            (the rest is chunk padding).
        y_ref (np.ndarray): float32 (hops,) reference output, one value per hop.
        y_cand (np.ndarray): float32 (hops,) candidate output.
        contract (StreamContract): The reference's contract (rate, hop).
        vad (bool): Also compare the speech segments (Silero's rule; only at 512-sample hops at 16 kHz or 256 at
            8 kHz, else left out).
    Returns:
        dict: ``hops``, ``max_abs``, ``flips`` (hops on different sides of :data:`THRESHOLD`), ``threshold``, and
        for a VAD ``segments_ref``/``segments_cand`` ([start_s, end_s] pairs) and ``segments_equal`` (bool).
    """
    from cosyedge.errors import UsageError

    hops = -(-int(n_samples) // int(contract.hop_samples))
    r = np.asarray(y_ref, np.float64).reshape(-1)[:hops]
    c = np.asarray(y_cand, np.float64).reshape(-1)[:hops]
    res = {"hops": int(r.size), "max_abs": float(np.abs(r - c).max()) if r.size else 0.0,
           "flips": int(((r >= THRESHOLD) != (c >= THRESHOLD)).sum()), "threshold": THRESHOLD}
    if vad:
        from cosyedge.vad.stream import segments_report

        try:
            seg = [[[s["start"], s["end"]] for s in segments_report(p.tolist(), n_samples, contract)["segments"]]
                   for p in (r, c)]
        except UsageError:  # not Silero's hop: the segment rule does not apply
            return res
        res.update(segments_ref=seg[0], segments_cand=seg[1], segments_equal=seg[0] == seg[1])
    return res


def probability_failures(where: str, output: str, p: dict) -> list[str]:
    """list[str]: the failures of one :func:`probability_stats` entry (a VAD: changed segments; another
    one-value-per-hop output: any hop across the threshold)."""
    if "segments_equal" in p:
        if p["segments_equal"]:
            return []
        return [f"{where} {output}: speech segments changed ({len(p['segments_cand'])} vs reference "
                f"{len(p['segments_ref'])}; {p['flips']}/{p['hops']} hops cross {p['threshold']:g}, max abs "
                f"{p['max_abs']:.3g})"]
    if p["flips"]:
        return [f"{where} {output}: {p['flips']}/{p['hops']} hops cross {p['threshold']:g} (max abs {p['max_abs']:.3g})"]
    return []
