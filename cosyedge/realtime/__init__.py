"""Real-time audio: microphone in, enhanced audio out, with xruns counted and never fatal.

* :mod:`cosyedge.realtime.ring`: :class:`RingBuffer`, the bounded buffer an audio callback copies into.
* :mod:`cosyedge.realtime.enhancer`: :class:`RealtimeEnhancer` (callbacks, worker thread, resampling,
  xrun accounting, rate-change detection), :class:`RealtimeStats`, :class:`RateMonitor`.
* :mod:`cosyedge.realtime.writer`: :class:`IncrementalAudioWriter` (file valid after Ctrl-C).
* :mod:`cosyedge.realtime.live`: :func:`run_live` (start, wait, stop, keep the recording).
* :mod:`cosyedge.realtime.devices`: sounddevice/PortAudio layer (:func:`list_devices`, :func:`run_mic`).

Nothing here imports sounddevice at import time: only :mod:`cosyedge.realtime.devices` uses it, lazily.
"""

from cosyedge.realtime.enhancer import RateMonitor, RealtimeEnhancer, RealtimeStats
from cosyedge.realtime.live import run_live
from cosyedge.realtime.ring import RingBuffer
from cosyedge.realtime.writer import IncrementalAudioWriter

__all__ = ["IncrementalAudioWriter", "RateMonitor", "RealtimeEnhancer", "RealtimeStats", "RingBuffer", "run_live"]
