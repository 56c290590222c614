"""INT8 float fallback driven by measured sensitivity: keep in float the layers that cannot pay, and say so.

``int8_onnx(..., min_snr_db=42)`` / ``cosyedge build --int8 --int8-min-snr 42``: after calibration (the
amax cache is reused for every candidate, nothing is recalibrated), the output of the INT8 model is compared with the
FP32 model's on **held-out speech** (:func:`holdout_audio`: by default the bundled demo recording
``cosyedge/assets/demo/noisy.wav``, 17.3 s of real noisy speech that no calibration set holds: generated sets mix
training corpora, :mod:`cosyedge.precision.calibset`). While the SNR is below the target:

1. **Sensitivity, measured once** (:func:`search`): each quantized layer is quantized *alone* (every other layer
   float) and its output SNR vs FP32 on the held-out speech is its sensitivity (dB; lower hurts more). Errors of
   separate layers add up roughly as powers, so the layer with the lowest SNR alone is the one whose quantization
   costs most.
2. **Greedy**: keep the most sensitive layer in float, re-measure the whole model, repeat until the target is met.
   Then a backward pass puts each layer taken out (except the last one) back into INT8, least sensitive first,
   where the model still meets the target without it in float (the layers' errors are not independent: measured on
   the reference, taking out a fourth depthwise conv gained nothing once the first three were float).
   An INT8 build keeps at least one layer in INT8: when the target is not met with only the least sensitive layer
   left, the search stops, logs a warning naming the target, the SNR reached and the share of MACs that stays INT8,
   and the model is still written.

Each candidate is streamed from zero state in chunks of about :data:`EVAL_CHUNK_S` (a multiple of the hop; one hop
for a model that takes no other chunk length): Q/DQ scales are static, so a chunk of several hops gives the same
output as one hop per call to float rounding, at a fraction of the calls.

Source: per-layer sensitivity analysis and mixed-precision fallback, NVIDIA TensorRT "Working with Quantized Types"
(layer-wise precision, keep sensitive layers in higher precision),
https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/work-quantized-types.html; Wu et al.,
"Integer Quantization for Deep Learning Inference: Principles and Empirical Evaluation" (2020), section 5
(partial quantization: skip the layers with the largest accuracy drop, one at a time), https://arxiv.org/abs/2004.09602.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.log import LOG

EVAL_CHUNK_S = 1.0
"""float: seconds per chunk when a candidate is streamed over the held-out speech (rounded to whole hops)."""

DEMO_NOISY = Path(__file__).resolve().parents[1] / "assets" / "demo" / "noisy.wav"
"""Path: the default held-out speech (the bundled noisy demo recording, 16 kHz, 17.29 s)."""


MAX_MIN_SNR_DB = 200.0
"""float: the highest ``--int8-min-snr`` taken, dB: the SNR cosyedge reports for identical outputs (200 dB keeps every
layer in float); anything above names no reachable target."""


def check_min_snr(value: Any, flag: str = "--int8-min-snr") -> float | None:
    """Return the target output SNR (float, dB) or None when ``value`` is None.

    Raises:
        UsageError: ``value`` is not a number, is NaN or infinite, or is outside 0..:data:`MAX_MIN_SNR_DB` (one line
            naming ``flag``).
    """
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a number of dB, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise UsageError(f"{flag} must be a finite SNR >= 0 dB (e.g. 42), got {value!r}")
    if v > MAX_MIN_SNR_DB:
        raise UsageError(f"{flag} {value} is above {MAX_MIN_SNR_DB:g} dB, the SNR of identical outputs: give a "
                         "target such as 42 (200 keeps every layer in float)")
    return v


def holdout_audio(contract: Any, holdout: Iterable[Any] | None = None) -> list[np.ndarray]:
    """The held-out speech the fallback measures on, at the model rate.

    Args:
        contract (StreamContract): The model's contract (its rate).
        holdout (Iterable[str | Path | np.ndarray] | None): Audio files and/or float32 (T,) arrays already at the
            model rate; None: the bundled demo recording (:data:`DEMO_NOISY`).
    Returns:
        list[np.ndarray]: float32 (T,) clips, each at least one hop long.
    Raises:
        UsageError: no clip is at least one hop long.
        ArtifactError: a file cannot be read.
    """
    from cosyedge.audio import load_audio, to_model_input

    clips = []
    for item in ([DEMO_NOISY] if holdout is None else list(holdout)):
        if isinstance(item, np.ndarray):
            x = np.asarray(item, np.float32).reshape(-1)
        else:
            a, sr = load_audio(item)
            x = to_model_input(a, sr, contract.sample_rate_hz)
        if x.size >= contract.hop_samples:
            clips.append(x)
    if not clips:
        raise UsageError("the held-out speech for --int8-min-snr holds no clip of at least one hop")
    return clips


class HoldoutSnr:
    """Output SNR of candidate models vs the FP32 model on held-out speech (the FP32 output is streamed once).

    Args:
        source (SourceModel): The FP32 streaming model.
        clips (list[np.ndarray]): float32 (T,) held-out clips at the model rate (:func:`holdout_audio`).
    Raises:
        UsageError: the model does not stream one audio input to audio (the fallback measures waveform SNR).
    """

    def __init__(self, source: Any, clips: list[np.ndarray]):
        c = source.contract
        if not c.is_audio or len(c.stream_inputs) != 1:
            raise UsageError("--int8-min-snr measures the output SNR of a model that streams one audio input to "
                             "audio; this model does not (use --exclude to keep layers float)")
        self.clips = clips
        self.chunk = c.hop_samples * max(1, round(EVAL_CHUNK_S * c.sample_rate_hz / c.hop_samples))
        self.tmp = tempfile.TemporaryDirectory(prefix="cosyedge-fallback-")
        self.refs = self._stream(source)
        self.calls = 0

    def _stream(self, path: Any) -> list[np.ndarray]:
        from cosyedge.artifacts import SourceModel
        from cosyedge.runtime.ort import OrtStreamSession
        from cosyedge.runtime.stream import stream_array

        src = SourceModel.of(path)
        # EVAL_CHUNK_S chunks (an ort_matmul model too: a Scan over hops), or the one length a graph with a fixed time
        # axis takes (an ort_matmul model written before the Scan over hops: one hop)
        chunk = src.contract.fixed_chunk_samples or self.chunk
        with OrtStreamSession(src, chunk_samples=chunk) as s:
            return [stream_array(s, x).astype(np.float64) for x in self.clips]

    def __call__(self, model: Any) -> float:
        """SNR (dB, float; ``inf`` when identical) of ``model`` (onnx.ModelProto, same contract) over all clips:
        ``10 log10(sum y_ref^2 / sum (y - y_ref)^2)`` (:func:`cosyedge.precision.output_snr.snr_db`)."""
        from cosyedge.surgery import io

        path = Path(self.tmp.name) / f"candidate{self.calls}.onnx"
        self.calls += 1
        io.save_model(model, path)
        try:
            ys = self._stream(path)
        finally:
            path.unlink(missing_ok=True)
        from cosyedge.precision.output_snr import snr_db

        return float(snr_db(self.refs, ys))

    def close(self) -> None:
        """Remove the temporary folder."""
        self.tmp.cleanup()


def search(candidates: list[str], build: Callable[[set[str]], Any], measure: Callable[[Any], float],
           target_db: float) -> dict:
    """Greedy sensitivity-driven fallback (see the module docstring).

    Args:
        candidates (list[str]): Names of the layers the INT8 model quantizes (before any fallback).
        build (Callable[[set[str]], onnx.ModelProto]): The Q/DQ model quantizing exactly the given layers.
        measure (Callable[[onnx.ModelProto], float]): Its output SNR (dB) vs FP32 on held-out speech.
        target_db (float): Target SNR (dB).
    Returns:
        dict: ``target_db``, ``initial_snr_db`` (all candidates INT8), ``final_snr_db``, ``met`` (bool),
        ``kept_float`` (list of ``{"name", "alone_snr_db", "snr_after_db"}`` in the order they were taken out:
        the layer's SNR when quantized alone and the whole model's SNR once it is float), ``requantized`` (list of
        ``{"name", "snr_after_db"}``: layers the backward pass put back into INT8), ``sensitivity``
        ({name: alone_snr_db} of every candidate; empty when the target was met at once), ``quantize``
        (the names left INT8), ``evaluations`` (models measured).
    """
    quantize = list(candidates)
    initial = measure(build(set(quantize)))
    res = {"target_db": float(target_db), "initial_snr_db": initial, "final_snr_db": initial, "met": initial >= target_db,
           "kept_float": [], "requantized": [], "sensitivity": {}, "quantize": quantize,
           "evaluations": 1}
    LOG.info("int8 fallback: %.1f dB vs FP32 on held-out speech with %d layers INT8 (target %.1f dB)", initial,
             len(quantize), target_db)
    if res["met"] or len(quantize) <= 1:
        return res
    sens = {}
    for name in quantize:
        sens[name] = measure(build({name}))
        LOG.debug("int8 fallback: %s alone %.1f dB", name, sens[name])
    res["sensitivity"] = sens
    res["evaluations"] += len(quantize)
    order = sorted(quantize, key=lambda n: (sens[n], n))
    snr = initial
    for name in order[:-1]:  # the least sensitive layer always stays INT8
        quantize.remove(name)
        snr = measure(build(set(quantize)))
        res["evaluations"] += 1
        res["kept_float"].append({"name": name, "alone_snr_db": sens[name], "snr_after_db": snr})
        LOG.info("int8 fallback: %s kept float (%.1f dB when quantized alone): %.1f dB", name, sens[name], snr)
        if snr >= target_db:
            break
    if snr >= target_db and len(res["kept_float"]) > 1:
        # backward pass: a layer taken out early may not be needed once later ones are float (errors correlate)
        for entry in list(reversed(res["kept_float"]))[1:]:
            trial = quantize + [entry["name"]]
            got = measure(build(set(trial)))
            res["evaluations"] += 1
            if got >= target_db:
                quantize, snr = trial, got
                res["kept_float"].remove(entry)
                res["requantized"].append({"name": entry["name"], "snr_after_db": got})
                LOG.info("int8 fallback: %s back to INT8: %.1f dB still meets the target", entry["name"], got)
    res.update(final_snr_db=snr, met=snr >= target_db, quantize=[n for n in candidates if n in set(quantize)])
    return res

__all__ = ["DEMO_NOISY", "EVAL_CHUNK_S", "HoldoutSnr", "check_min_snr", "holdout_audio", "search"]
