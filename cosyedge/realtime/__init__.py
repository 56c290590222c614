"""Real-time audio: microphone in, enhanced audio out, with xruns counted and never fatal.

* :mod:`cosyedge.realtime.ring`: :class:`RingBuffer`, the bounded buffer an audio callback copies into.
* :mod:`cosyedge.realtime.enhancer`: :class:`RealtimeEnhancer` (callbacks, worker thread, resampling,
  xrun accounting, rate-change detection), :class:`RealtimeStats`, :class:`RateMonitor`.
* :mod:`cosyedge.realtime.live`: :func:`run_live` (start, wait, stop, keep the recording; the file writer is
  :class:`cosyedge.audio.IncrementalAudioWriter`).
* :mod:`cosyedge.realtime.devices`: sounddevice/PortAudio layer (:func:`list_devices`, :func:`run_mic`).
* The device stream itself (open, callbacks, SIGTERM) is the mic driver's, :mod:`cosyedge.drivers.mic`; the
  sink of each chunk's output is :class:`~cosyedge.realtime.enhancer.AudioSink` for an enhancer.

Nothing here imports sounddevice at import time: only :mod:`cosyedge.realtime.devices` uses it, lazily.
"""

from cosyedge.realtime.enhancer import RateMonitor, RealtimeEnhancer, RealtimeStats
from cosyedge.realtime.live import run_live
from cosyedge.realtime.ring import RingBuffer

__all__ = ["RateMonitor", "RealtimeEnhancer", "RealtimeStats", "RingBuffer", "run_live"]
