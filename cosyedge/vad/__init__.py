"""Voice activity detection with a VAD stream model (Silero VAD: ``cosyedge export silero-vad``).

* :mod:`cosyedge.vad.segments`: speech segments from per-hop probabilities (Silero's own rule, ported to plain
  Python; MIT, Silero Team).
* :mod:`cosyedge.vad.stream`: tell a VAD model from an enhancer, stream a file through it (the file driver,
  :mod:`cosyedge.drivers.file`, with :class:`~cosyedge.vad.stream.SegmentSink`;
  :func:`~cosyedge.vad.stream.detect_file`, what ``cosyedge run FILE --vad`` calls).
* :mod:`cosyedge.vad.live`: the microphone (``cosyedge run mic --vad``: the mic driver, :mod:`cosyedge.drivers.mic`,
  with :class:`~cosyedge.vad.live.LiveVadSink`).

No torch anywhere: the model runs in ONNX Runtime (or TensorRT) like every cosyedge stream model.
"""

from cosyedge.vad.segments import in_seconds, speech_timestamps_from_probs

__all__ = ["in_seconds", "speech_timestamps_from_probs"]
