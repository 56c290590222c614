"""Stream audio through a voice-activity model and turn its probabilities into speech segments.

A VAD stream model (``cosyedge export silero-vad``, :mod:`cosyedge.recipes.silero_vad`) takes a waveform
(N, 1, T) and gives one speech probability per hop (output (N, 1, T / hop), not audio). Its task (contract
``task`` ``"vad"``, or guessed for an older model) comes from :func:`cosyedge.artifacts.task.resolve`;
:func:`vad_output` names its probability output; :class:`SegmentSink` is the VAD's sink of the file driver
(:mod:`cosyedge.drivers.file`: it keeps one probability per hop); :class:`ProbabilityRecorder` streams model-rate audio
through a session chunk by chunk into one (state carried, the last chunk zero-padded as Silero's own loop does);
:func:`detect_file` streams an audio file through the file driver, block by block (memory: the probabilities, one
float per hop), and returns the segments of :func:`cosyedge.vad.segments.speech_timestamps_from_probs`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cosyedge.artifacts.task import RECIPE_META_KEY, VAD, model_metadata, resolve, task_of  # noqa: F401 - re-exported
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG

VAD_TASK = VAD
"""str: the task of a VAD (:data:`cosyedge.artifacts.task.VAD`)."""


def vad_output(contract, meta: dict | None = None) -> str | None:
    """The speech-probability output of a VAD stream model, or None for a model ``--vad`` cannot run.

    The model's task is :func:`cosyedge.artifacts.task.resolve`'s (the contract's ``task``; for an older model
    without one, the guess from its outputs and recipe provenance).

    Args:
        contract (StreamContract): The model's contract.
        meta (dict | None): Its ONNX metadata (:func:`model_metadata`); None: provenance not looked at.
    Returns:
        str | None: the output name (float32 (N, 1, T / hop)).
    """
    return resolve(contract, meta).speech_output


def describe(where: str, meta: dict) -> str:
    """str: "<where> is <title>, a voice activity detector" for the messages."""
    try:
        title = json.loads(meta.get(RECIPE_META_KEY) or "{}").get("title")
    except ValueError:
        title = None
    return f"{where} is {'a voice activity detector' if not title else title + ', a voice activity detector'}"


def _served(engine) -> bool:
    """bool: ``engine`` is a model on a Triton server (:class:`cosyedge.serve.client.ServedModel`), where the
    messages' advice is ``--server-model``, not ``--engine``/``--model``."""
    return str(getattr(engine, "model_path", "")).startswith("grpc://") and hasattr(engine, "url")


def refuse_vad_as_enhancer(engine, where: str, mic: bool = False) -> None:
    """Refuse to enhance with a VAD model, saying what it is and how to use it.

    Args:
        engine (Engine): The loaded engine.
        where (str): The model as the message names it.
        mic (bool): The microphone command (the hint says ``cosyedge run mic --vad``).
    Raises:
        UsageError: the model is a VAD (one line: what it gives and the ``--vad`` command).
    """
    task = task_of(engine)
    if task.task != VAD:
        return
    meta = model_metadata(engine)
    c = engine.contract
    out = task.speech_output or c.output
    hop_ms = 1000.0 * c.hop_samples / c.sample_rate_hz
    model = (f"--server {engine.url} --server-model {engine.name}" if _served(engine) else "--engine MODEL")
    use = (f"cosyedge run mic --vad {model} [-o segments.json] (speech shown live)" if mic else
           f"cosyedge run FILE --vad {model} [-o segments.json]")
    raise UsageError(f"{describe(where, meta)}: it gives a speech probability per {hop_ms:g} ms hop ('{out}'), not "
                     f"audio, so it cannot enhance; get speech segments (start/end seconds, JSON) with {use}")


def require_vad(engine, where: str, mic: bool = False) -> str:
    """Return the probability output of a VAD engine, or refuse an enhancer given with ``--vad``.

    Args:
        engine (Engine): The loaded engine.
        where (str): The model as the message names it.
        mic (bool): The microphone command (the hint says ``cosyedge run mic -o OUT.wav``).
    Raises:
        UsageError: ``engine`` is not a VAD model (one line: what it is and the plain ``cosyedge run``).
    """
    out = task_of(engine).speech_output
    if out is None:
        c = engine.contract
        what = ("an enhancer (waveform in, waveform out)" if c.is_audio else
                f"not a voice activity detector (outputs {[o.name for o in c.stream_outputs]})")
        if _served(engine):  # --engine/--model do not apply beside --server
            cmd = f"cosyedge run {'mic' if mic else 'FILE'} -o OUT.wav --server {engine.url} --server-model {engine.name}"
            raise UsageError(f"--vad needs a voice activity detector (one speech probability per hop), but the served "
                             f"{where} is {what}, not a VAD: drop --vad to enhance with it ({cmd}), or serve a VAD "
                             f"model's repository (e.g. Silero VAD, docs/triton.md) and pick it with --server-model "
                             f"NAME")
        raise UsageError(f"--vad needs a voice activity detector (one speech probability per hop), but {where} is "
                         f"{what}: leave out --vad to enhance with it (cosyedge run {'mic' if mic else 'FILE'} "
                         f"--engine MODEL -o OUT.wav), or drop "
                         f"--engine/--model to use Silero VAD")
    return out


class SegmentSink:
    """The VAD's sink (:mod:`cosyedge.drivers.file`): keep one speech probability per hop; no audio.

    Args:
        output (str): The probability output (:func:`vad_output`), float32 (1, 1, hops) per chunk.
        hop_samples (int): Samples per hop at the model rate.
    Attributes:
        probs (list[float]): Probabilities so far, one per hop pushed (the flush's padding hops included; see
            :meth:`hop_probs`).
        delay_samples (int): 0: nothing to drop (the chunks are padded at the end only, as Silero's own loop).
    """

    delay_samples = 0

    def __init__(self, output: str, hop_samples: int):
        self.output_name = output
        self.hop = int(hop_samples)
        self.probs: list[float] = []

    def chunk(self, outputs, x: np.ndarray) -> np.ndarray:
        """Keep the probabilities of one pushed chunk (``outputs``: the session's outputs, read at once); returns
        silence of the chunk's shape."""
        self.record(outputs[self.output_name])
        return np.zeros_like(x)

    def record(self, p: np.ndarray) -> None:
        """Keep the probabilities ``p`` (float32 (1, 1, hops)) of one chunk.

        Raises:
            ArtifactError: a probability is NaN/Inf.
        """
        v = np.asarray(p, np.float64).reshape(-1)
        if not np.isfinite(v).all():
            raise ArtifactError(f"the VAD model gave a NaN/Inf probability at hop {len(self.probs)}")
        self.probs.extend(v.tolist())

    def output(self, y: np.ndarray, start: int, final: bool) -> None:
        """No audio to keep."""

    def advance(self, frames_read: int, final: bool) -> None:
        """Nothing waits on the input read."""

    def hop_probs(self, fed: int) -> list[float]:
        """list[float]: the probabilities of the ``ceil(fed / hop)`` hops that hold input (``fed``: model-rate samples
        streamed), the padding hops of the flush left out."""
        return self.probs[: -(-int(fed) // self.hop)]


class ProbabilityRecorder(SegmentSink):
    """Push model-rate audio through a VAD session in fixed chunks and keep one probability per hop.

    Args:
        session (StreamSession): Active-able session of a VAD model, batch 1.
        output (str): Its probability output (:func:`vad_output`).
    Attributes:
        probs (list[float]): Probabilities so far, one per hop pushed (the flush's padding hops included until
            :meth:`finish` trims them).
        comp (DelayCompensator): The chunker (``fed``: model-rate samples fed).
    """

    def __init__(self, session, output: str):
        from cosyedge.runtime.stream import DelayCompensator

        super().__init__(output, session.contract.hop_samples)
        self.session = session
        self.comp = DelayCompensator(lambda x: self.chunk(session.push(x, copy=False), x), session.chunk_samples, 0)

    def feed(self, x: np.ndarray) -> None:
        """Stream float32 (t,) model-rate samples."""
        self.comp.feed(np.ascontiguousarray(x, np.float32))

    def finish(self) -> list[float]:
        """Flush the last partial chunk (zero-padded) and return the probabilities of the ``ceil(fed / hop)``
        hops that hold input (list[float])."""
        self.comp.finish(ndim=1)
        self.probs = self.hop_probs(self.comp.fed)
        return self.probs


def segments_report(probs: list[float], samples: int, contract, **seg_kw) -> dict:
    """dict: the JSON of a VAD run: ``segments`` (start/end seconds and samples at the model rate),
    ``sample_rate_hz``, ``hop_samples``, ``hops``, ``speech_hops`` (probability >= threshold), ``duration_s``,
    ``threshold``, ``speech_s``."""
    from cosyedge.vad.segments import in_seconds, speech_timestamps_from_probs

    sr = int(contract.sample_rate_hz)
    if sr not in (8000, 16000) or contract.hop_samples != (512 if sr == 16000 else 256):
        raise UsageError(f"speech segments follow Silero's rule, made for 512-sample hops at 16 kHz (256 at 8 kHz); "
                         f"this model streams {contract.hop_samples}-sample hops at {sr} Hz")
    thr = float(seg_kw.get("threshold", 0.5))
    segs = in_seconds(speech_timestamps_from_probs(probs, sampling_rate=sr, audio_length_samples=int(samples),
                                                   **seg_kw), sr)
    return {"segments": segs, "sample_rate_hz": sr, "hop_samples": int(contract.hop_samples), "hops": len(probs),
            "speech_hops": int(sum(p >= thr for p in probs)), "threshold": thr, "duration_s": samples / sr,
            "speech_s": round(sum(s["end"] - s["start"] for s in segs), 3), "model": contract.name}


def detect_file(input: str | Path, engine, chunk_ms: float | None = None, threads: int = 1,
                **seg_kw) -> dict:
    """Stream an audio file through a VAD engine and return its speech segments.

    The file is read block by block (:class:`cosyedge.audio.AudioReader`), mixed to mono, resampled to the model
    rate with soxr's stream resampler (HQ) when needed, and pushed in chunks (state carried; the last chunk
    zero-padded, as Silero's ``get_speech_timestamps`` pads its last window). The probabilities go through
    :func:`cosyedge.vad.segments.speech_timestamps_from_probs` (Silero's defaults unless ``seg_kw`` says).

    Args:
        input (str | Path): Audio file (wav/flac/ogg), any rate and channel count.
        engine (str | Path | Engine): VAD engine folder or stream ``.onnx`` (loaded here), or an engine already
            loaded (:func:`cosyedge.builders.cache.load_or_rebuild`), used as it is.
        chunk_ms (float | None): Chunk length, ms (a multiple of the 32 ms hop); None: one hop.
        threads (int): ONNX Runtime threads.
        **seg_kw: Options of :func:`speech_timestamps_from_probs` (threshold, min_speech_duration_ms, ...).
    Returns:
        dict: :func:`segments_report` plus ``input`` (str), ``engine`` (str), ``probs`` (list[float], one per
        hop), ``elapsed_s`` (float), ``rtf`` (float), ``chunk_samples`` (int: samples per chunk pushed; the
        count is ``hops``, not repeated as chunks).
    Raises:
        UsageError: not a VAD model, bad chunk. ArtifactError: input missing/corrupt, engine missing/stale,
        a NaN probability.
    """
    from cosyedge.audio import AudioReader
    from cosyedge.builders.cache import load_or_rebuild
    from cosyedge.drivers import pick_sink
    from cosyedge.drivers.file import stream_file

    eng = load_or_rebuild(engine)
    c = eng.contract
    _kind, out = pick_sink(eng, vad=True, where=str(engine))
    chunk = c.hop_samples if chunk_ms is None else c.chunk_samples(chunk_ms)
    c.check_chunk(chunk)
    with AudioReader(input) as reader:
        session = eng(chunk_samples=chunk, threads=threads)
        with LOG.stage(f"vad {input}"), session:
            sink = SegmentSink(out, c.hop_samples)
            streamer, elapsed = stream_file(reader, session, sink)
            probs = sink.hop_probs(streamer.fed)
    rep = segments_report(probs, streamer.fed, c, **seg_kw)
    rep.update(input=str(input), engine=str(eng.folder or eng.model_path), probs=probs, elapsed_s=elapsed,
               rtf=elapsed / rep["duration_s"] if rep["duration_s"] else 0.0, chunk_samples=int(chunk))
    return rep
