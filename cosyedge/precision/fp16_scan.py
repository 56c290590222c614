"""The FP16 stage's non-finite scan: every output and state of a converted model, streamed at several chunk sizes over
real speech, silence and a full-scale signal, must stay finite (:func:`scan_nonfinite`, on the signals of
:func:`default_scan_signals`; other waveform inputs get :func:`scan_partners`). Used by
:func:`cosyedge.precision.fp16.fp16_onnx`, which refuses a model that overflows.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from cosyedge.artifacts import StreamContract

CHUNK_MULTIPLES = (1, 3, 10)
"""tuple[int]: chunk sizes scanned, in hops."""

FP16_HINT = ("convert it without the scan from Python: cosyedge.precision.fp16.fp16_onnx(MODEL, OUT, check=False) "
             "(then check its outputs on your own features), or build it in FP32")
"""str: what to do when the FP16 scan cannot feed a model (a feature input): the end of that one-line error."""


def default_scan_signals(sample_rate_hz: int, seconds: float = 1.5, speech: np.ndarray | None = None
                         ) -> dict[str, np.ndarray]:
    """Return the scan signals, float32 (T,) at ``sample_rate_hz``, T = ``seconds`` of audio.

    * ``speech``: real speech (``speech`` if given, else the bundled demo recording
      ``cosyedge/assets/demo/clean.wav``, peak-normalised to 0.9);
    * ``silence``: all zeros (log of the eps floor; FP16 underflow);
    * ``full_scale``: a full-scale signal: +-1 square wave at 1 kHz with white noise, clipped to [-1, 1]
      (bin powers near the FP16 maximum 65504).
    """
    n = int(round(seconds * sample_rate_hz))
    if speech is None:
        from cosyedge.audio import load_audio, to_model_input

        demo = Path(__file__).resolve().parents[1] / "assets" / "demo" / "clean.wav"
        x, sr = load_audio(demo)
        speech = to_model_input(x, sr, sample_rate_hz)
        speech = speech[int(0.5 * sample_rate_hz):]  # skip leading silence
        speech = 0.9 * speech / max(float(np.abs(speech).max()), 1e-9)
    speech = np.resize(np.asarray(speech, np.float32), n)
    t = np.arange(n) / sample_rate_hz
    rng = np.random.default_rng(0)
    full = np.sign(np.sin(2 * np.pi * 1000.0 * t)) + 0.5 * rng.standard_normal(n)
    return {"speech": speech.astype(np.float32), "silence": np.zeros(n, np.float32),
            "full_scale": np.clip(full, -1.0, 1.0).astype(np.float32)}


def scan_partners(contract: StreamContract, signals: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Partner signals of the scan (dict: signal name -> {partner input name: float32 (T,)}) for a model with
    several waveform inputs (:func:`cosyedge.runtime.feeds.partner_inputs`), empty dicts for one input.

    Each partner input gets the *same kind* of signal, time-reversed (so it is another signal, not a copy):
    silence beside silence and full scale beside full scale are the extremes the scan is for (FP16 underflow
    and overflow), which pairing each signal with the next one would never feed.
    """
    from cosyedge.runtime.feeds import partner_inputs

    others = partner_inputs(contract)
    return {name: {io.name: np.ascontiguousarray(x[::-1]) for io in others} for name, x in signals.items()}


def scan_nonfinite(onnx_path: str | Path, signals: dict[str, np.ndarray],
                   chunk_multiples: Iterable[int] = CHUNK_MULTIPLES,
                   partners: dict[str, dict[str, np.ndarray]] | None = None) -> list[dict]:
    """Stream each signal at each chunk size and check every output (audio and states) is finite.

    Args:
        onnx_path (str | Path): Streaming ONNX.
        signals (dict[str, np.ndarray]): name -> float32 (T,) audio at the model rate, range [-1, 1].
        chunk_multiples (Iterable[int]): Chunk sizes in hops (default 1, 3, 10).
        partners (dict[str, dict[str, np.ndarray]] | None): Models with several waveform inputs: per signal name,
            one float32 (T',) signal per other input (cut or zero-padded to T); default :func:`scan_partners`.
    Returns:
        list[dict]: one row per (signal, chunk): ``signal``, ``chunk_samples``, ``chunks``,
        ``finite`` (bool), ``bad_outputs`` (names with NaN/Inf, first chunk index), ``peak`` (max |y|).
    Raises:
        ArtifactError: the model cannot be loaded by ONNX Runtime.
        UsageError: an input is not a waveform (the scan feeds audio only; the message names it).
    """
    from cosyedge.runtime import feeds
    from cosyedge.runtime.ort import OrtStreamSession

    rows = []
    contract = StreamContract.from_onnx(onnx_path)
    hop = contract.hop_samples
    feeds.require_waveform_inputs(contract, str(onnx_path), "the FP16 scan", FP16_HINT)
    if partners is None:
        partners = scan_partners(contract, signals)
    first = feeds.primary_input(contract).name
    for mult in chunk_multiples:
        c = hop * int(mult)
        session = OrtStreamSession(onnx_path, chunk_samples=c)
        out = session.contract.output
        with session:
            for name, x in signals.items():
                session.reset()
                n = -(-x.size // c)
                xp = np.zeros(n * c, np.float32)
                xp[:x.size] = x
                others = {k: np.where(np.arange(n * c) < x.size, v, 0).astype(np.float32) for k, v in
                          feeds.partner_arrays(contract, partners.get(name), n * c, str(onnx_path)).items()}
                bad: dict[str, int] = {}
                peak = 0.0
                for i in range(n):
                    sl = slice(i * c, (i + 1) * c)
                    if others:
                        ys = session.push({first: xp[sl].reshape(1, 1, c),
                                           **{k: v[sl].reshape(1, 1, c) for k, v in others.items()}}, copy=False)
                    else:
                        ys = session.push(xp[sl].reshape(1, 1, c), copy=False)  # read before the next push
                    for k, v in ys.items():
                        if not np.isfinite(v).all():
                            bad.setdefault(k, i)
                    y = ys[out]
                    if np.isfinite(y).all():
                        peak = max(peak, float(np.abs(y).max()))
                    for k, v in session.state().items():
                        if not np.isfinite(v).all():
                            bad.setdefault(k.replace("state_in", "state_out"), i)
                rows.append({"signal": name, "chunk_samples": c, "chunks": n, "finite": not bad,
                             "bad_outputs": bad, "peak": peak})
    return rows
