"""``cosyedge run mic --vad``: the microphone through a VAD stream model, speech shown live, segments at the end.

The capture side is the mic driver's (:func:`cosyedge.drivers.mic.drive_mic`: device, rate, ring buffer, worker
thread, resampling to the model rate, xrun accounting, Ctrl-C/SIGTERM); :class:`LiveVadSink` is what happens to each
model-rate chunk: its probabilities are kept (as :class:`cosyedge.vad.stream.SegmentSink`) and a live speech/silence
flag follows Silero's hysteresis (speech from ``threshold``, silence once below ``threshold - 0.15`` for
``min_silence_duration_ms``). At the end the probabilities give the segments of
:func:`cosyedge.vad.segments.speech_timestamps_from_probs`, the same as ``cosyedge run`` on the saved input.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.vad.stream import SegmentSink


class LiveVadSink(SegmentSink):
    """The VAD's sink of the mic driver: probabilities kept, a live speech flag; no audio.

    Args:
        contract (StreamContract): The VAD's contract (hop, rate).
        output (str): The probability output (:func:`cosyedge.vad.stream.vad_output`).
        threshold (float): Speech from this probability on (Silero's 0.5).
        min_silence_ms (float): Silence (below ``threshold - 0.15``) that ends live speech, ms (Silero's 100).
    Attributes:
        probs (list[float]): One probability per hop so far.
        speaking (bool): The live flag.
        last_prob (float): The latest probability.
    """

    def __init__(self, contract, output: str, threshold: float = 0.5, min_silence_ms: float = 100.0):
        super().__init__(output, contract.hop_samples)
        self.threshold = float(threshold)
        self.neg_threshold = max(self.threshold - 0.15, 0.01)
        self.min_silence_hops = max(1, int(np.ceil(min_silence_ms * contract.sample_rate_hz / 1000.0 / self.hop)))
        self.speaking = False
        self.last_prob = 0.0
        self._quiet = 0

    def take(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Keep the probabilities ``y`` of one chunk (float32 (1, 1, hops); the mic driver made NaN/Inf 0), update
        the live flag; returns silence of the chunk's shape (nothing is played or written)."""
        for v in np.asarray(y, np.float64).reshape(-1).tolist():
            self.probs.append(v)
            self.last_prob = v
            if v >= self.threshold:
                self.speaking, self._quiet = True, 0
            elif v < self.neg_threshold and self.speaking:
                self._quiet += 1
                if self._quiet >= self.min_silence_hops:
                    self.speaking, self._quiet = False, 0
        return np.zeros_like(x)

    def vad_line(self) -> str:
        """str: ``SPEECH p 0.93`` or ``silence p 0.02``, for the status line."""
        return f"{'SPEECH ' if self.speaking else 'silence'} p {self.last_prob:.2f}"


def run_mic_vad(device: str | int | None = None, engine: str | Path | None = None, duration_s: float | None = None,
                chunk_ms: float | None = None, threads: int = 1, on_status: Callable | None = None,
                on_started: Callable | None = None, sd=None, save_input: str | Path | None = None,
                **seg_kw) -> dict:
    """Run the microphone through a VAD engine until ``duration_s``, Ctrl-C or an error; return the segments.

    Args:
        device (str | int | None): Input device (index or name); None: the default input.
        engine (str | Path | Engine): VAD engine folder or stream ``.onnx`` (loaded here), or an engine already
            loaded (:func:`cosyedge.builders.cache.load_or_rebuild`), used as it is.
        duration_s (float | None): Stop after this many seconds of captured audio; None: until Ctrl-C.
        chunk_ms (float | None): Chunk length, ms (a multiple of the hop); None: one hop.
        threads (int): ONNX Runtime threads.
        on_status (Callable[[RealtimeStats, LiveVadSink], None] | None): Live status callback.
        on_started (Callable[[], None] | None): Called once the audio stream runs.
        sd (module | None): sounddevice module (tests inject one).
        save_input (str | Path | None): Also record the model-rate input (.wav/.flac), as ``run mic``.
        **seg_kw: Options of :func:`cosyedge.vad.segments.speech_timestamps_from_probs`.
    Returns:
        dict: :func:`cosyedge.vad.stream.segments_report` plus
        :func:`~cosyedge.realtime.live.run_live`'s stats, ``device``,
        ``device_index``, ``interrupted``, ``saved_input``.
    Raises:
        UsageError: bad device/duration/chunk, not a VAD model. DependencyError: no sounddevice/PortAudio.
        ArtifactError: engine missing/stale, the stream died.
    """
    from cosyedge.audio import EXACT_FORMATS, IncrementalAudioWriter, check_output_path
    from cosyedge.builders.cache import load_or_rebuild
    from cosyedge.drivers import pick_sink
    from cosyedge.drivers.mic import drive_mic
    from cosyedge.realtime.devices import load_sounddevice, pick_sample_rate, resolve_device
    from cosyedge.vad.stream import segments_report

    if duration_s is not None and not float(duration_s) > 0:
        raise UsageError(f"--duration must be a positive number of seconds, got {duration_s}")
    if save_input is not None:
        if Path(save_input).suffix.lower() not in EXACT_FORMATS:
            raise UsageError(f"--save-input {save_input}: use a .wav (32-bit float, bit-exact) or .flac (24-bit) file")
        check_output_path(save_input)
    eng = load_or_rebuild(engine)
    c = eng.contract
    _kind, out = pick_sink(eng, vad=True, where=str(engine), mic=True)
    chunk = None if chunk_ms is None else c.chunk_samples(chunk_ms)
    sd = sd or load_sounddevice()
    dev = resolve_device(device, "input", sd)
    rate = pick_sample_rate(dev, None, sd)
    session = eng(chunk_samples=chunk, threads=threads)
    in_writer = IncrementalAudioWriter(save_input, c.sample_rate_hz, exact=True) if save_input is not None else None
    sink = LiveVadSink(c, out, threshold=float(seg_kw.get("threshold", 0.5)),
                       min_silence_ms=float(seg_kw.get("min_silence_duration_ms", 100)))
    listening = ("listening for speech on device %d '%s' at %d Hz (model %s, %d Hz, chunk %d samples)", dev.index,
                 dev.name, rate, c.name, c.sample_rate_hz, session.chunk_samples)
    stats, core = drive_mic(sd, dev, rate, session, sink, input_writer=in_writer, duration_s=duration_s,
                            on_status=None if on_status is None else (lambda st: on_status(st, sink)),
                            on_started=on_started, listening=listening)
    probs = sink.hop_probs(core.fed)
    rep = segments_report(probs, core.fed, c, **seg_kw)
    rep.update({k: stats[k] for k in ("chunks", "captured_s", "latency_ms_p50", "latency_ms_p99", "xruns",
                                      "input_overflows", "rtf", "interrupted", "saved_input", "device_rate_hz")})
    rep.update(device=dev.name, device_index=dev.index, probs=probs)
    return rep
