"""``cosyedge run mic --vad``: the microphone through a VAD stream model, speech shown live, segments at the end.

The capture side is the enhancer's (:mod:`cosyedge.realtime`: device, rate, ring buffer, worker thread,
resampling to the model rate, xrun accounting, Ctrl-C/SIGTERM, :func:`cosyedge.realtime.live.run_live`);
:class:`RealtimeVad` replaces what happens to each model-rate chunk: its probabilities are kept
(:class:`cosyedge.vad.stream.ProbabilityRecorder`) and a live speech/silence flag follows Silero's hysteresis
(speech from ``threshold``, silence once below ``threshold - 0.15`` for ``min_silence_duration_ms``). At the
end the probabilities give the segments of :func:`cosyedge.vad.segments.speech_timestamps_from_probs`, the
same as ``cosyedge run`` on the saved input.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG
from cosyedge.realtime.enhancer import RealtimeEnhancer


class RealtimeVad(RealtimeEnhancer):
    """A :class:`RealtimeEnhancer` whose chunks go to a VAD model: probabilities kept, live speech flag.

    Args:
        session (StreamSession): VAD session, batch 1.
        device_rate_hz (int): Capture rate, Hz.
        output (str): The probability output (:func:`cosyedge.vad.stream.vad_output`).
        threshold (float): Speech from this probability on (Silero's 0.5).
        min_silence_ms (float): Silence (below ``threshold - 0.15``) that ends live speech, ms (Silero's 100).
        **kw: :class:`RealtimeEnhancer` options (``input_writer``, ``on_status``, ``clock``, ...).
    Attributes:
        probs (list[float]): One probability per hop so far.
        speaking (bool): The live flag.
        last_prob (float): The latest probability.
    """

    def __init__(self, session, device_rate_hz: int, output: str, threshold: float = 0.5,
                 min_silence_ms: float = 100.0, **kw):
        super().__init__(session, device_rate_hz, monitor=False, writer=None, **kw)
        self._out_name = output
        self.probs: list[float] = []
        self.threshold = float(threshold)
        self.neg_threshold = max(self.threshold - 0.15, 0.01)
        c = session.contract
        self.hop = int(c.hop_samples)
        self.min_silence_hops = max(1, int(np.ceil(min_silence_ms * c.sample_rate_hz / 1000.0 / self.hop)))
        self.speaking = False
        self.last_prob = 0.0
        self._quiet = 0

    def _run_chunk(self, x: np.ndarray) -> np.ndarray:
        """Push one chunk (1, 1, chunk) (input writer as the enhancer's), keep its probabilities, update the
        live flag; returns silence of the chunk's shape (nothing is played or written)."""
        p = np.asarray(super()._run_chunk(x), np.float64).reshape(-1)
        for v in p.tolist():
            self.probs.append(v)
            self.last_prob = v
            if v >= self.threshold:
                self.speaking, self._quiet = True, 0
            elif v < self.neg_threshold and self.speaking:
                self._quiet += 1
                if self._quiet >= self.min_silence_hops:
                    self.speaking, self._quiet = False, 0
        return np.zeros_like(x)

    def hop_probs(self) -> list[float]:
        """list[float]: the probabilities of the hops that hold captured audio (the last one zero-padded)."""
        return self.probs[: -(-self._comp.fed // self.hop)]

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
        on_status (Callable[[RealtimeStats, RealtimeVad], None] | None): Live status callback.
        on_started (Callable[[], None] | None): Called once the audio stream runs.
        sd (module | None): sounddevice module (tests inject one).
        save_input (str | Path | None): Also record the model-rate input (.wav/.flac), as ``run mic``.
        **seg_kw: Options of :func:`cosyedge.vad.segments.speech_timestamps_from_probs`.
    Returns:
        dict: :func:`cosyedge.vad.stream.segments_report` plus :func:`run_live`'s stats, ``device``,
        ``device_index``, ``interrupted``, ``saved_input``.
    Raises:
        UsageError: bad device/duration/chunk, not a VAD model. DependencyError: no sounddevice/PortAudio.
        ArtifactError: engine missing/stale, the stream died.
    """
    from cosyedge.audio import EXACT_FORMATS, IncrementalAudioWriter, check_output_path
    from cosyedge.builders.cache import load_or_rebuild
    from cosyedge.errors import first_line
    from cosyedge.realtime.devices import (_open_stream, _sigterm_as_keyboard_interrupt, load_sounddevice,
                                           pick_sample_rate, quiet_native_stderr, resolve_device)
    from cosyedge.realtime.live import run_live
    from cosyedge.vad.stream import require_vad, segments_report

    if duration_s is not None and not float(duration_s) > 0:
        raise UsageError(f"--duration must be a positive number of seconds, got {duration_s}")
    if save_input is not None:
        if Path(save_input).suffix.lower() not in EXACT_FORMATS:
            raise UsageError(f"--save-input {save_input}: use a .wav (32-bit float, bit-exact) or .flac (24-bit) file")
        check_output_path(save_input)
    eng = load_or_rebuild(engine)
    c = eng.contract
    out = require_vad(eng, str(engine), mic=True)
    chunk = None if chunk_ms is None else c.chunk_samples(chunk_ms)
    sd = sd or load_sounddevice()
    dev = resolve_device(device, "input", sd)
    rate = pick_sample_rate(dev, None, sd)
    session = eng(chunk_samples=chunk, threads=threads)
    in_writer = IncrementalAudioWriter(save_input, c.sample_rate_hz, exact=True) if save_input is not None else None
    vad = RealtimeVad(session, rate, out, threshold=float(seg_kw.get("threshold", 0.5)),
                      min_silence_ms=float(seg_kw.get("min_silence_duration_ms", 100)), input_writer=in_writer,
                      on_status=None if on_status is None else (lambda stats: on_status(stats, vad)))
    block = max(1, round(rate * session.chunk_samples / c.sample_rate_hz))

    def in_cb(indata, frames, time_info, status):
        vad.input_callback(indata, bool(status.input_overflow))

    try:
        with quiet_native_stderr():
            stream = _open_stream(sd, False, dev, None, rate, block, in_cb)
    except Exception as err:  # sounddevice.PortAudioError
        if in_writer is not None:
            in_writer.close()
        raise UsageError(f"cannot open device {dev.index} '{dev.name}' at {rate} Hz: "
                         f"{first_line(err, with_type=False)}") from None

    def started():
        LOG.info("listening for speech on device %d '%s' at %d Hz (model %s, %d Hz, chunk %d samples)", dev.index,
                 dev.name, rate, c.name, c.sample_rate_hz, session.chunk_samples)
        if on_started is not None:
            on_started()

    restore = _sigterm_as_keyboard_interrupt()
    try:
        with session, quiet_native_stderr():
            stats = run_live(vad, stream, duration_s=duration_s, on_started=started, input_writer=in_writer)
    except Exception as err:
        if type(err).__module__.startswith("sounddevice"):
            raise ArtifactError(f"audio stream on '{dev.name}' failed: {first_line(err, with_type=False)}") from None
        raise
    finally:
        restore()
    probs = vad.hop_probs()
    rep = segments_report(probs, vad._comp.fed, c, **seg_kw)
    rep.update({k: stats[k] for k in ("chunks", "captured_s", "latency_ms_p50", "latency_ms_p99", "xruns",
                                      "input_overflows", "rtf", "interrupted", "saved_input", "device_rate_hz")})
    rep.update(device=dev.name, device_index=dev.index, probs=probs)
    return rep
