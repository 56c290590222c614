"""The mic driver: an audio device, captured into a ring, through an engine's stream loop into a sink.

:func:`drive_mic` opens the device stream (input only, or duplex to play the output), copies each captured block
into the input ring of a :class:`~cosyedge.realtime.enhancer.RealtimeEnhancer` (its worker resamples to the model
rate and pushes fixed chunks, state carried) and runs it with :func:`~cosyedge.realtime.live.run_live` until the
duration, Ctrl-C, SIGTERM or an error; the files are closed (renamed into place) whatever ends it. Each chunk's
output goes to the sink: :class:`~cosyedge.realtime.enhancer.AudioSink` (an enhancer: written and/or played,
:func:`cosyedge.realtime.devices.run_mic`) or :class:`cosyedge.vad.live.LiveVadSink` (a VAD: probabilities kept, a
live speech flag, :func:`cosyedge.vad.live.run_mic_vad`). Which one is :func:`cosyedge.drivers.pick_sink`'s choice.

Source: python-sounddevice docs (``InputStream``, ``Stream``, ``CallbackFlags``); PortAudio's callback rules (the
callback only copies).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG


def drive_mic(sd, dev, rate: int, session, sink=None, *, out_dev=None, monitor: bool = False, writer=None,
              input_writer=None, duration_s: float | None = None, on_status: Callable | None = None,
              on_started: Callable | None = None, listening: tuple = ("listening",),
              kept_note: str = "") -> tuple[dict, object]:
    """Run the device through ``session`` into ``sink`` until ``duration_s``, Ctrl-C, SIGTERM or an error.

    Args:
        sd (module): sounddevice (or a fake one).
        dev (DeviceInfo): Input device (:func:`cosyedge.realtime.devices.resolve_device`).
        rate (int): Stream rate, Hz (:func:`cosyedge.realtime.devices.pick_sample_rate`).
        session (StreamSession): Batch-1 session (its ``chunk_samples`` sets the block: one chunk at the device
            rate); activated and closed here.
        sink (object | None): The chunks' sink (:class:`~cosyedge.realtime.enhancer.RealtimeEnhancer`'s ``sink``);
            None: the enhancer's audio.
        out_dev (DeviceInfo | None): Output device, with ``monitor``.
        monitor (bool): Play the output (a duplex stream, low latency); else an input stream (high latency).
        writer (IncrementalAudioWriter | None): Receives the model-rate output; closed at the end.
        input_writer (IncrementalAudioWriter | None): Receives the model-rate input; closed at the end.
        duration_s (float | None): Stop after this much captured audio, s; None: until Ctrl-C.
        on_status (Callable[[RealtimeStats], None] | None): Live status callback (worker thread).
        on_started (Callable[[], None] | None): Called once the stream runs (after the ``listening`` log line).
        listening (tuple): ``LOG.info`` arguments (format, *args) of the line said once the stream runs.
        kept_note (str): Appended to the message of a stream that fails mid-run.
    Returns:
        tuple[dict, RealtimeEnhancer]: :func:`~cosyedge.realtime.live.run_live`'s result plus ``device`` (str) and
        ``device_index`` (int); the core (``fed``: model-rate samples streamed).
    Raises:
        UsageError: the device does not open (the writers are closed first); a rate change mid-stream.
        ArtifactError: the stream failed or stopped mid-run (``audio stream on 'NAME' failed: ...``).
        CosyEdgeError: from the session, the sink or the writers (the files so far are kept).
    """
    from cosyedge.realtime.devices import quiet_native_stderr
    from cosyedge.realtime.enhancer import RealtimeEnhancer
    from cosyedge.realtime.live import run_live

    c = session.contract
    core = RealtimeEnhancer(session, rate, monitor=monitor, writer=writer, input_writer=input_writer,
                            on_status=on_status, sink=sink)
    block = max(1, round(rate * session.chunk_samples / c.sample_rate_hz))

    def in_cb(indata, frames, time_info, status):
        core.input_callback(indata, bool(status.input_overflow))

    def duplex_cb(indata, outdata, frames, time_info, status):
        core.input_callback(indata, bool(status.input_overflow))
        core.output_callback(outdata, bool(status.output_underflow))

    try:
        with quiet_native_stderr():
            stream = open_stream(sd, monitor, dev, out_dev, rate, block, duplex_cb if monitor else in_cb)
    except Exception as err:  # sounddevice.PortAudioError
        for w in (input_writer, writer):
            if w is not None:
                w.close()
        raise UsageError(f"cannot open device {dev.index} '{dev.name}' at {rate} Hz: "
                         f"{first_line(err, with_type=False)}") from None

    def started():
        LOG.info(*listening)
        if on_started is not None:
            on_started()

    restore = sigterm_as_keyboard_interrupt()
    try:
        with session, quiet_native_stderr():  # PortAudio's thread prints when the server goes away
            result = run_live(core, stream, writer=writer, duration_s=duration_s, on_started=started,
                              input_writer=input_writer)
    except Exception as err:
        if type(err).__module__.startswith("sounddevice"):
            raise ArtifactError(f"audio stream on '{dev.name}' failed: {first_line(err, with_type=False)}"
                                f"{kept_note}") from None
        raise
    finally:
        restore()
    result.update(device=dev.name, device_index=dev.index)
    return result, core


def open_stream(sd, monitor: bool, dev, out_dev, rate: int, block: int, callback):
    """Open (not start) the mono float32 stream: duplex ``sd.Stream`` (low latency) with ``monitor``,
    else ``sd.InputStream`` (high latency: fewer xruns, the file is written anyway)."""
    if monitor:
        return sd.Stream(device=(dev.index, out_dev.index), samplerate=rate, blocksize=block, channels=1,
                         dtype="float32", latency="low", callback=callback)
    return sd.InputStream(device=dev.index, samplerate=rate, blocksize=block, channels=1, dtype="float32",
                          latency="high", callback=callback)


def sigterm_as_keyboard_interrupt() -> Callable[[], None]:
    """Make SIGTERM stop the stream like Ctrl-C (main thread only); return a function restoring the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old)
