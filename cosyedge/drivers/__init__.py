"""Drivers: move audio from a source (a file, the microphone) through an engine's stream loop into a sink.

* :mod:`cosyedge.drivers.file`: :func:`~cosyedge.drivers.file.stream_file` reads an audio file block by block,
  mixes to mono, resamples to the model rate (soxr's stream resampler), pushes fixed chunks (state carried, the
  model delay compensated, the tail flushed) and hands each chunk's outputs to a sink:
  :class:`~cosyedge.drivers.file.AudioFileSink` (an enhancer: the output resampled back and written at the
  file's rate and length; :func:`cosyedge.enhance.enhance_file`) or :class:`cosyedge.vad.stream.SegmentSink`
  (a VAD: one probability per hop, then speech segments; :func:`cosyedge.vad.stream.detect_file`).
* :mod:`cosyedge.drivers.mic`: :func:`~cosyedge.drivers.mic.drive_mic` opens the device stream, copies its blocks
  into a ring and runs the engine in a worker (:class:`cosyedge.realtime.enhancer.RealtimeEnhancer`), the sink
  taking each chunk's outputs: the enhancer's audio (written and/or played:
  :class:`~cosyedge.realtime.enhancer.AudioSink`; :func:`cosyedge.realtime.devices.run_mic`) or a live VAD
  monitor (:class:`cosyedge.vad.live.LiveVadSink`; :func:`cosyedge.vad.live.run_mic_vad`).

:func:`pick_sink` is the one place where a model's task (the contract's ``task``,
:func:`cosyedge.artifacts.task.resolve`) picks the sink of a run and refuses a model of the other kind.
"""

from __future__ import annotations

AUDIO = "audio"
"""str: the sink of an enhancer (waveform out: written, played)."""
SEGMENTS = "segments"
"""str: the sink of a voice activity detector (one speech probability per hop: segments, a live flag)."""


def pick_sink(engine, vad: bool, where: str | None, mic: bool = False) -> tuple[str, str]:
    """Choose the sink of a run from the model's task, refusing a model that does not fit it.

    Args:
        engine (Engine): The loaded engine (its ``contract``; a served model too).
        vad (bool): The run asks for speech segments (``--vad``); else for audio.
        where (str | None): The model as the messages name it. For an audio run, None skips the one-line refusal
            of a VAD (:func:`cosyedge.vad.stream.refuse_vad_as_enhancer`): the bundled default model, or a caller
            that refused it already (``cosyedge run mic``); the waveform check
            (:func:`cosyedge.runtime.stream.require_waveform_model`) names ``engine.model_path``.
        mic (bool): The microphone (the messages' commands and action say so).
    Returns:
        tuple[str, str]: (:data:`SEGMENTS`, the speech-probability output) or (:data:`AUDIO`, the audio output).
    Raises:
        UsageError: ``vad`` with a model that is not a VAD; an audio run with a VAD or a model that does not map a
            waveform to a waveform (one line each, as before the drivers were shared).
    """
    if vad:
        from cosyedge.vad.stream import require_vad

        return SEGMENTS, require_vad(engine, str(where), mic=mic)
    from cosyedge.runtime.stream import require_waveform_model

    if where is not None:
        from cosyedge.vad.stream import refuse_vad_as_enhancer

        refuse_vad_as_enhancer(engine, where, mic=mic)
    c = engine.contract
    if mic:
        require_waveform_model(c, str(engine.model_path), "run on the microphone")
    else:
        require_waveform_model(c, str(engine.model_path))
    return AUDIO, c.output
