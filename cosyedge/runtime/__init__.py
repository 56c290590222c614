"""Streaming runtimes: one :class:`StreamSession` interface, one backend per module.

* :mod:`cosyedge.runtime.base`: :class:`StreamSession` (activate/deactivate/with, reset, push).
* :mod:`cosyedge.runtime.ort`: :class:`OrtStreamSession` (ONNX Runtime, CPU; imported lazily).
* :mod:`cosyedge.runtime.stream`: :func:`stream_array`, :func:`enhance_array`, :class:`StreamStats`.
* :mod:`cosyedge.runtime.pool`: :class:`StreamPool` (many streams batched into one run per tick).
* :mod:`cosyedge.runtime.feeds`: the feeds of every streaming input made from audio (calibration, scans, compare):
  the utterance on the primary input, partner utterances on other waveform inputs, feature inputs refused by name.

Importing this package imports no heavy dependency (onnxruntime loads on first ``activate()``).
"""

from cosyedge.runtime.base import StreamSession
from cosyedge.runtime.ort import OrtStreamSession
from cosyedge.runtime.pool import StreamPool
from cosyedge.runtime.stream import StreamStats, enhance_array, stream_array

__all__ = ["StreamSession", "OrtStreamSession", "StreamPool", "StreamStats", "stream_array", "enhance_array"]
