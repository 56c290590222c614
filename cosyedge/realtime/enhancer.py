"""Real-time streaming core, independent of any audio library (testable with a fake stream).

Data path (one input device at ``device_rate_hz``, one model at ``model_rate_hz``)::

    audio callback --copy--> input RingBuffer (device rate)            [PortAudio thread: copy only]
    worker thread: ring -> soxr.ResampleStream -> DelayCompensator (delay 0: chunking, tail padding) -> session.push
                   -> file writer (model rate)
                   (the chunks themselves, before the model -> input writer: what the model heard)
                   -> soxr.ResampleStream -> output RingBuffer (device rate)   (monitor only)
    audio callback <--copy-- output RingBuffer, zeros when short          [output underflow]

Xruns are counted, never fatal:

* **input overflow**: the worker fell behind and the input ring dropped its oldest samples, or
  PortAudio flagged ``input_overflow`` (the device dropped samples before the callback).
* **output underflow**: the output callback found fewer samples than it needed (it plays zeros for the
  missing part), or PortAudio flagged ``output_underflow``.

After a slow stretch the worker drains the ring faster than real time and the stream catches up; the
ring's capacity bounds both memory and the worst-case added latency.

A :class:`RateMonitor` compares the frames the device actually delivers against the wall clock: a
sample-rate change mid-stream (the device now runs at another rate than the stream was opened at)
stops the stream with a one-line :class:`~cosyedge.errors.UsageError`.

Source: PortAudio callback rules ("do not allocate, lock for long or do I/O in the callback",
portaudio.com/docs/v19-doxydocs/writing_a_callback.html); python-soxr ``ResampleStream``
(python-soxr.readthedocs.io); k2-fsa/sherpa-onnx ``speech-recognition-from-microphone.py``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG
from cosyedge.realtime.ring import RingBuffer
from cosyedge.runtime.base import StreamSession
from cosyedge.runtime.stream import DelayCompensator

soxr = lazy_import("soxr")

DEFAULT_RING_MS = 500.0
"""float: input/output ring capacity, ms of audio (bounds memory and the latency after a stall)."""
MONITOR_PRIME_MS = 60.0
"""float: output buffered before playback starts (and restarts after an underflow), ms: a jitter margin
for the resampler's bursts (soxr HQ emits about 30 ms at a time) and the worker's scheduling."""
MONITOR_MAX_MS = 150.0
"""float: most audio the monitor output may hold back, ms; after a slow stretch the excess (oldest) is
skipped so the speakers come back to low latency instead of staying late by the whole backlog."""
RESAMPLE_QUALITY = "HQ"
"""str: soxr quality of the streaming resamplers (device rate <-> model rate)."""
RATE_TOLERANCE = 0.05
"""float: relative deviation of the measured input rate that counts as a rate change (5%)."""
RATE_WINDOW_S = 2.0
"""float: length of one rate-measurement window, s; two bad windows in a row stop the stream."""
RATE_STEADY = 0.02
"""float: relative spread allowed between the rates of the bad windows that stop the stream (2%): a
device at another rate is steady, a stalling one is not."""


@dataclasses.dataclass
class RealtimeStats:
    """Counters of a live stream (a snapshot; see :meth:`RealtimeEnhancer.stats`).

    Attributes:
        chunks (int): Chunks pushed through the model.
        audio_s (float): Model-rate audio processed, s (chunks x chunk length).
        captured_s (float): Audio the device delivered, s (samples offered to the input ring / rate).
        compute_s (float): Wall time spent in ``session.push``, s.
        rtf (float): compute_s / audio_s (< 1 keeps real time; 0 before the first chunk).
        latency_ms_p50 (float): Median per-chunk ``push`` time, ms.
        latency_ms_p99 (float): 99th percentile per-chunk ``push`` time, ms.
        buffered_ms (float): Audio waiting in the input ring now, ms (queueing delay).
        input_overflows (int): Input xruns: ring overflows + PortAudio ``input_overflow`` flags.
        input_dropped_samples (int): Device-rate samples the ring dropped (PortAudio's own losses are
            not counted in samples: it does not report them).
        output_underflows (int): Output xruns: short output callbacks + PortAudio ``output_underflow`` flags.
        output_missing_samples (int): Device-rate samples played as zeros because none were ready.
        output_skipped_samples (int): Device-rate samples of late output skipped to bring the monitor
            back to at most :data:`MONITOR_MAX_MS` of latency (after a slow stretch).
        device_rate_hz (int): Stream rate, Hz.
        model_rate_hz (int): Model rate, Hz.
        chunk_samples (int): Samples per chunk at the model rate.
    """

    chunks: int
    audio_s: float
    captured_s: float
    compute_s: float
    rtf: float
    latency_ms_p50: float
    latency_ms_p99: float
    buffered_ms: float
    input_overflows: int
    input_dropped_samples: int
    output_underflows: int
    output_missing_samples: int
    output_skipped_samples: int
    device_rate_hz: int
    model_rate_hz: int
    chunk_samples: int

    @property
    def xruns(self) -> int:
        """int: input overflows + output underflows."""
        return self.input_overflows + self.output_underflows

    def status_line(self) -> str:
        """One-line live status (str), e.g. ``chunks 512 | 5.12 s | latency p50 0.21 p99 0.40 ms | ...``."""
        return (f"chunks {self.chunks} | {self.audio_s:.2f} s | latency p50 {self.latency_ms_p50:.2f} "
                f"p99 {self.latency_ms_p99:.2f} ms | buffered {self.buffered_ms:.0f} ms | xruns {self.xruns} "
                f"(in {self.input_overflows}, out {self.output_underflows}) | RTF {self.rtf:.3f}")

    def as_dict(self) -> dict:
        """Return the fields plus ``xruns`` as a plain JSON-serialisable dict."""
        d = dataclasses.asdict(self)
        d["xruns"] = self.xruns
        return d


class RateMonitor:
    """Detect a device whose real sample rate differs from the rate its stream was opened at.

    Frames delivered (counted by the input ring) are compared with the clock over windows of
    ``window_s``. The first window after the first frames is a warm-up (stream start-up bursts); a
    window with an xrun (PortAudio's input overflow or output underflow flag, or the monitor's own
    underflow: in a duplex stream PortAudio restarts both directions after one and input frames go
    missing unflagged) is not judged: lost or late frames are not a rate change. ``bad_windows``
    consecutive windows off by more than ``tolerance`` raise, but only when their rates agree within
    ``steady`` of each other: a device at another rate delivers that rate steadily, a stalled one
    (scheduling, a server busy or starting up) does not.

    Args:
        nominal_hz (int): Rate the stream was opened at, Hz.
        clock (Callable[[], float]): Monotonic clock, s.
        tolerance (float): Relative deviation allowed (0.05 = 5%).
        window_s (float): Window length, s.
        bad_windows (int): Consecutive bad windows before raising.
        steady (float): Relative spread allowed between the bad windows' rates (0.02 = 2%).
    """

    def __init__(self, nominal_hz: int, clock: Callable[[], float] = time.monotonic,
                 tolerance: float = RATE_TOLERANCE, window_s: float = RATE_WINDOW_S, bad_windows: int = 2,
                 steady: float = RATE_STEADY):
        self.nominal_hz = int(nominal_hz)
        self.clock = clock
        self.tolerance = float(tolerance)
        self.window_s = float(window_s)
        self.bad_windows = int(bad_windows)
        self.steady = float(steady)
        self._bad_rates: list[float] = []
        self._t0 = None
        self._f0 = 0
        self._xruns0 = 0
        self._warm = False
        self.measured_hz: float | None = None

    def update(self, frames_total: int, xruns: int) -> None:
        """Feed the running frame count and xrun count; called by the worker.

        Args:
            frames_total (int): Frames the device delivered so far.
            xruns (int): Xruns so far (any kind: see the class docstring); a window in which it grew is
                not judged.
        Raises:
            UsageError: the measured rate stayed off by more than ``tolerance``, steadily, for
                ``bad_windows`` windows.
            ArtifactError: those windows delivered (almost) nothing: a stalled device, not a rate.
        """
        now = self.clock()
        if self._t0 is None:
            if frames_total > 0:
                self._t0, self._f0, self._xruns0 = now, frames_total, xruns
            return
        dt = now - self._t0
        if dt < self.window_s:
            return
        rate = (frames_total - self._f0) / dt
        judged = self._warm and xruns == self._xruns0
        self._t0, self._f0, self._xruns0, self._warm = now, frames_total, xruns, True
        if not judged:
            return
        self.measured_hz = rate
        if abs(rate / self.nominal_hz - 1.0) > self.tolerance:
            self._bad_rates = [*self._bad_rates, rate][-self.bad_windows:]
            if len(self._bad_rates) < self.bad_windows:
                return
            if max(self._bad_rates) < 0.01 * self.nominal_hz:
                raise ArtifactError(
                    f"the input device delivered no audio for {self.bad_windows * self.window_s:g} s (stalled: "
                    f"device unplugged, muted at the driver or audio server hung); the recording so far is kept"
                )
            if min(self._bad_rates) > 0 and max(self._bad_rates) / min(self._bad_rates) - 1.0 <= self.steady:
                raise UsageError(
                    f"input sample rate changed mid-stream: the device delivers about {rate:.0f} Hz but the "
                    f"stream was opened at {self.nominal_hz} Hz; restart 'cosyedge run mic' (the recording "
                    f"so far is kept)"
                )
        else:
            self._bad_rates = []


class AudioSink:
    """The enhancer's sink of the mic driver: each chunk's audio output goes on as it is (to the writer and/or the
    monitor of :class:`RealtimeEnhancer`).

    Args:
        output (str): The audio output (the contract's ``output``).
    """

    def __init__(self, output: str):
        self.output_name = output

    def take(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """np.ndarray: ``y``, the chunk's audio (float32 (1, 1, chunk), finite)."""
        return y


class RealtimeEnhancer:
    """Glue between an audio device's callbacks and a :class:`StreamSession` (batch 1), with xrun accounting.

    The device layer (sounddevice, or a fake stream in tests) calls :meth:`input_callback` and, with
    ``monitor=True``, :meth:`output_callback` from its audio thread; both only copy. The model runs
    in a worker thread (:meth:`start`/:meth:`stop`) or synchronously via :meth:`process_available`.

    Args:
        session (StreamSession): Streaming session with ``batch == 1``; activated by :meth:`start`
            if inactive. Its ``chunk_samples`` sets the chunk.
        device_rate_hz (int): Capture (and playback) rate of the device stream, Hz.
        monitor (bool): Also produce output at the device rate for :meth:`output_callback`.
        writer (object | None): Receives model-rate float32 (n,) blocks via ``writer.write(y)``
            (e.g. :class:`~cosyedge.audio.IncrementalAudioWriter`); None: no file.
        input_writer (object | None): Receives the model-rate input chunks as they are pushed (float32
            (n,) blocks, the same ``write`` interface): exactly the samples the model heard, on the
            chunk grid of the live run, so an offline run on that file reproduces ``writer``'s audio
            (shifted by the model delay). None: not kept.
        ring_ms (float): Capacity of the input and output rings, ms of audio (> 0).
        clock (Callable[[], float]): Monotonic clock in s (status interval, rate monitor); injectable.
        rate_monitor (RateMonitor | None | bool): True (default) builds one at ``device_rate_hz``;
            False disables the check.
        on_status (Callable[[RealtimeStats], None] | None): Called from the worker every
            ``status_interval_s`` with a snapshot (the CLI prints its status line).
        status_interval_s (float): Seconds between ``on_status`` calls.
        resample_quality (str): soxr quality (``"HQ"``; ``"QQ"`` has no block delay but aliases).
        monitor_max_ms (float): Output backlog kept at most, ms (older output is skipped, counted).
        monitor_prime_ms (float): Output buffered before playback (re)starts, ms.
        sink (object | None): What each chunk's output goes to (the mic driver's sink, :mod:`cosyedge.drivers.mic`):
            ``output_name`` (str, the output read) and ``take(y, x) -> y_audio`` (the chunk's output, finite, and
            the chunk pushed, both float32 (1, 1, chunk) -> the audio sent on to ``writer`` and the monitor).
            None: :class:`AudioSink` of the contract's output (an enhancer).
    Raises:
        UsageError: batch != 1, rates not positive, ``ring_ms`` not positive.
    """

    def __init__(self, session: StreamSession, device_rate_hz: int, *, monitor: bool = False, writer=None,
                 input_writer=None, ring_ms: float = DEFAULT_RING_MS, clock: Callable[[], float] = time.monotonic,
                 rate_monitor: RateMonitor | bool | None = True,
                 on_status: Callable[[RealtimeStats], None] | None = None, status_interval_s: float = 0.5,
                 resample_quality: str = RESAMPLE_QUALITY, monitor_max_ms: float = MONITOR_MAX_MS,
                 monitor_prime_ms: float = MONITOR_PRIME_MS, sink=None):
        if session.batch != 1:
            raise UsageError(f"a live stream needs a session with batch 1, got batch {session.batch}")
        if int(device_rate_hz) <= 0:
            raise UsageError(f"device sample rate must be positive, got {device_rate_hz} Hz")
        if not float(ring_ms) > 0:
            raise UsageError(f"ring buffer length must be positive, got {ring_ms} ms")
        self.session = session
        self.device_rate_hz = int(device_rate_hz)
        self.model_rate_hz = int(session.contract.sample_rate_hz)
        self.chunk_samples = session.chunk_samples
        self.monitor = bool(monitor)
        self.writer = writer
        self.input_writer = input_writer
        self.clock = clock
        ring = max(1, round(float(ring_ms) * self.device_rate_hz / 1000.0))
        self.in_ring = RingBuffer(ring)
        self.out_ring = RingBuffer(ring)
        if rate_monitor is True:
            rate_monitor = RateMonitor(self.device_rate_hz, clock=clock)
        self.rate_monitor = rate_monitor or None
        self.on_status = on_status
        self.status_interval_s = float(status_interval_s)
        self.resample_quality = resample_quality
        self._rs_in = self._rs_out = None
        # model-rate samples short of a chunk wait in the compensator; live output is not shifted back
        # (it is heard as it comes, ``delay_samples`` late), so it drops nothing: delay 0
        self._comp = DelayCompensator(self._run_chunk, self.chunk_samples, 0)
        self._in_written = 0  # model-rate input samples given to input_writer
        self.sink = sink if sink is not None else AudioSink(session.contract.output)
        self.chunks = 0
        self.compute_s = 0.0
        self.device_input_overflows = 0
        self.device_output_underflows = 0
        self.output_underflows = 0
        self.output_missing_samples = 0
        self.output_skipped_samples = 0
        self._monitor_max = max(1, round(float(monitor_max_ms) * self.device_rate_hz / 1000.0))
        self._monitor_prime = max(0, round(float(monitor_prime_ms) * self.device_rate_hz / 1000.0))
        self._output_started = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._last_status = None

    # ------------------------------------------------------------------ audio-thread side (copy only)
    def input_callback(self, indata: np.ndarray, overflow: bool = False) -> None:
        """Copy one captured block into the input ring (called from the audio thread).

        Args:
            indata (np.ndarray): float32 (frames, channels) or (frames,) at ``device_rate_hz``;
                channel 0 is taken (streams are opened mono).
            overflow (bool): PortAudio's ``status.input_overflow`` for this block.
        """
        if overflow:
            self.device_input_overflows += 1
        self.in_ring.write(indata[:, 0] if indata.ndim == 2 else indata)

    def output_callback(self, outdata: np.ndarray, underflow: bool = False) -> None:
        """Fill one playback block from the output ring; missing samples are zeros (an underflow).

        Playback starts once ``frames + monitor_prime_ms`` of output is buffered (a jitter margin; the
        silence before is priming, not an xrun) and restarts the same way after an underflow.

        Args:
            outdata (np.ndarray): float32 (frames, channels) buffer to fill at ``device_rate_hz``
                (every channel gets the mono signal).
            underflow (bool): PortAudio's ``status.output_underflow`` for this block.
        """
        if underflow:
            self.device_output_underflows += 1
        frames = outdata.shape[0]
        buffered = len(self.out_ring)
        if not self._output_started:
            if buffered < frames + self._monitor_prime:
                outdata[:] = 0.0
                return
            self._output_started = True
        late = buffered - frames - self._monitor_max
        if late > 0:  # a backlog from a slow stretch: skip it rather than stay late for good
            self.out_ring.read(late)
            self.output_skipped_samples += late
        have = min(frames, len(self.out_ring))
        y = self.out_ring.read(have) if have else None
        if y is not None:
            outdata[:have] = y[:, None] if outdata.ndim == 2 else y
        if have < frames:
            outdata[have:] = 0.0
            self.output_underflows += 1
            self.output_missing_samples += frames - have
            self._output_started = False  # re-prime

    # ------------------------------------------------------------------ worker side
    def _resample(self, which: str, x: np.ndarray, last: bool = False) -> np.ndarray:
        src, dst = (self.device_rate_hz, self.model_rate_hz) if which == "in" else (self.model_rate_hz,
                                                                                     self.device_rate_hz)
        if src == dst:
            return x
        attr = "_rs_in" if which == "in" else "_rs_out"
        rs = getattr(self, attr)
        if rs is None:
            rs = soxr.ResampleStream(src, dst, 1, dtype="float32", quality=self.resample_quality)
            setattr(self, attr, rs)
        return rs.resample_chunk(np.ascontiguousarray(x, np.float32), last=last)

    def _run_chunk(self, x: np.ndarray) -> np.ndarray:
        """Run one model-rate chunk, float32 (1, 1, chunk_samples) (the compensator's buffer); give its real
        samples (not the last chunk's zero padding) to the input writer. Returns what the sink makes of the output
        (``sink.output_name``, NaN/Inf as 0): the audio (1, 1, chunk_samples) sent on."""
        if self.input_writer is not None:
            real = min(self.chunk_samples, self._comp.fed - self._in_written)
            self.input_writer.write(x[0, 0, :real].copy())
            self._in_written += real
        t0 = time.perf_counter()
        y = self.session.push(x, copy=False)[self.sink.output_name]  # the compensator copies it at once
        self.compute_s += time.perf_counter() - t0
        self.chunks += 1
        if not np.isfinite(y).all():
            LOG.warning_once("the model produced NaN/Inf samples; they are written as silence")
            y = np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)
        return self.sink.take(y, x)

    def _emit(self, y: np.ndarray) -> None:
        """Send model-rate output samples float32 (n,) to the writer and the monitor."""
        if not y.shape[0]:
            return
        if self.writer is not None:
            self.writer.write(y)
        if self.monitor:
            self.out_ring.write(self._resample("out", y))

    def _feed(self, x: np.ndarray) -> None:
        """Stream model-rate samples float32 (t,); each chunk's output is sent on as soon as it is pushed."""
        while x.shape[0]:
            take = self.chunk_samples - self._comp.pending
            self._emit(self._comp.feed(x[:take]))
            x = x[take:]

    @property
    def fed(self) -> int:
        """int: model-rate samples streamed so far (captured and resampled; not the flush's padding)."""
        return self._comp.fed

    def process_available(self) -> int:
        """Run every full chunk that the input ring can make now (worker thread, or tests).

        Returns:
            int: chunks pushed by this call.
        Raises:
            UsageError: the input sample rate changed mid-stream (see :class:`RateMonitor`).
            ArtifactError: the input stalled (no audio for two rate windows).
            CosyEdgeError: from the session or the writer.
        """
        before = self._comp.chunks
        x = self.in_ring.read_all()
        if x is not None and x.size:
            self._feed(self._resample("in", x))
        n = self._comp.chunks - before
        if self.rate_monitor is not None:
            xruns = self.device_input_overflows + self.device_output_underflows + self.output_underflows
            self.rate_monitor.update(self.in_ring.written, xruns)
        if self.on_status is not None:
            now = self.clock()
            if self._last_status is None or now - self._last_status >= self.status_interval_s:
                self._last_status = now
                self.on_status(self.stats())
        return n

    def finish(self) -> int:
        """Flush the tail after the device stopped: what is left in the ring, the resampler's delay line
        and the last partial chunk (zero-padded; only its real samples are written).

        Returns:
            int: chunks pushed.
        """
        n = self.process_available()
        before = self._comp.chunks
        if self.device_rate_hz != self.model_rate_hz and self._rs_in is not None:
            self._feed(self._resample("in", np.zeros(0, np.float32), last=True))
        self._emit(self._comp.finish(ndim=1))
        return n + self._comp.chunks - before

    def _worker(self) -> None:
        try:
            while not self._stop.is_set():
                self.in_ring.wait(1, timeout_s=0.05)
                self.process_available()
        except BaseException as err:  # handed to the thread that called stop()/check()
            self.error = err
            self._stop.set()

    def start(self) -> RealtimeEnhancer:
        """Activate the session (zero state) if needed, forget its old latencies, start the worker thread."""
        if not self.session.is_active:
            self.session.activate()
        self.session.clear_latencies()
        self._stop.clear()
        self._thread = threading.Thread(target=self._worker, name="cosyedge-realtime-worker", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """bool: the worker thread is alive and no error stopped it."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def check(self) -> None:
        """Re-raise in the calling thread an error that stopped the worker (e.g. a rate change)."""
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def stop(self, drain: bool = True) -> None:
        """Stop the worker thread; with ``drain``, process what is left (:meth:`finish`).

        Raises:
            CosyEdgeError: an error that stopped the worker earlier (raised after the drain).
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if drain and (self.error is None or isinstance(self.error, CosyEdgeError)):
            self.finish()
        self.check()

    def stats(self) -> RealtimeStats:
        """Return a :class:`RealtimeStats` snapshot (safe to call from any thread)."""
        lat = self.session.latencies_ms if self.session.is_active else np.zeros(0)
        recent = lat[lat.size - min(lat.size, self.chunks):]
        audio_s = self.chunks * self.chunk_samples / self.model_rate_hz
        return RealtimeStats(
            chunks=self.chunks,
            audio_s=audio_s,
            captured_s=self.in_ring.written / self.device_rate_hz,
            compute_s=self.compute_s,
            rtf=self.compute_s / audio_s if audio_s > 0 else 0.0,
            latency_ms_p50=float(np.percentile(recent, 50)) if recent.size else 0.0,
            latency_ms_p99=float(np.percentile(recent, 99)) if recent.size else 0.0,
            buffered_ms=1000.0 * len(self.in_ring) / self.device_rate_hz,
            input_overflows=self.in_ring.overflows + self.device_input_overflows,
            input_dropped_samples=self.in_ring.dropped,
            output_underflows=self.output_underflows + self.device_output_underflows,
            output_missing_samples=self.output_missing_samples,
            output_skipped_samples=self.output_skipped_samples,
            device_rate_hz=self.device_rate_hz,
            model_rate_hz=self.model_rate_hz,
            chunk_samples=self.chunk_samples,
        )
