"""Audio devices through sounddevice (PortAudio): list them, resolve ``--device``, pick a rate, run the mic
(:func:`run_mic`: the enhancer's checks and files around the mic driver, :func:`cosyedge.drivers.mic.drive_mic`).

``sounddevice`` (the ``audio`` extra) is imported on first use only; a missing package or a missing
PortAudio library is a one-line :class:`~cosyedge.errors.DependencyError`. On Linux, PortAudio's ALSA
host API reaches PulseAudio and PipeWire through ALSA's ``pulse`` plugin (Debian:
``libasound2-plugins``), so their devices appear as ``pulse``/``default`` and as any PCM defined in
``~/.asoundrc`` (e.g. ``pcm.mysrc { type pulse; device "some_source" }``).

Source: python-sounddevice docs (``query_devices``, ``check_input_settings``, ``InputStream``,
``Stream``, ``CallbackFlags``; python-sounddevice.readthedocs.io); k2-fsa/sherpa-onnx
``speech-recognition-from-microphone.py`` (guarded import, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from cosyedge.errors import DependencyError, UsageError, first_line
from cosyedge.log import LOG

FALLBACK_RATES_HZ = (48000, 44100, 32000, 16000, 22050, 96000, 8000)
"""tuple[int]: rates tried, in order, after the device's default rate."""
NO_SERVER_HINT = ("no audio server running (start PulseAudio or PipeWire) or no sound card; "
                  "'cosyedge devices' lists what PortAudio sees")


HELD_STDERR_LOG_BYTES = 8192
"""int: most bytes of held-back library output that go to the debug log (the last ones)."""


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Hold back what C libraries write to file descriptor 2: ALSA's ``ALSA lib pcm_...`` lines and
    PortAudio's ``Expression ... failed in pa_linux_alsa.c`` while a device is probed or opened, or from
    PortAudio's audio thread when the server goes away mid-stream; a failure stays a one-line error.

    Python's own ``sys.stderr`` output (log, status line) still reaches the terminal: when
    ``sys.stderr`` is file descriptor 2, it is pointed at a duplicate of the original descriptor for
    the duration. What the libraries wrote goes to the debug log (``-v``; its last
    :data:`HELD_STDERR_LOG_BYTES`). Nests. Main thread only (elsewhere, and where fd 2 cannot be
    duplicated, it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        swap = sys.stderr is not None and sys.stderr.fileno() == 2
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        swap = False  # pytest's capsys, click's CliRunner: not fd 2, nothing to reroute
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    old = sys.stderr
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        if swap:
            sys.stderr = open(saved, "w", buffering=1, closefd=False, encoding=old.encoding,  # noqa: SIM115
                              errors=old.errors)
        try:
            yield
        finally:
            if swap:
                try:
                    sys.stderr.flush()
                finally:
                    sys.stderr = old
            os.dup2(saved, 2)
            os.close(saved)
            size = sink.seek(0, os.SEEK_END)
            sink.seek(max(0, size - HELD_STDERR_LOG_BYTES))
            held = sink.read().decode(errors="replace").strip()
            if held:
                LOG.debug("audio library messages (%d bytes held back from stderr):\n%s", size, held)


def load_sounddevice():
    """Import and return the ``sounddevice`` module.

    Raises:
        DependencyError: sounddevice is not installed, or the PortAudio library is missing.
    """
    try:
        with quiet_native_stderr():  # PortAudio's initialisation lists ALSA's PCMs, some noisily
            import sounddevice
    except ImportError:
        raise DependencyError("microphone input needs sounddevice: pip install 'cosyedge[audio]'") from None
    except OSError as err:  # sounddevice raises OSError('PortAudio library not found')
        raise DependencyError(f"{first_line(err, with_type=False)}: install PortAudio (Debian/Ubuntu/Jetson: "
                              f"apt-get install libportaudio2)") from None
    return sounddevice


@dataclasses.dataclass
class DeviceInfo:
    """One PortAudio device.

    Attributes:
        index (int): PortAudio device index (what ``--device INDEX`` takes).
        name (str): Device name (what ``--device NAME`` matches).
        hostapi (str): Host API name (ALSA, OSS, CoreAudio, WASAPI...).
        max_input_channels (int): 0 for output-only devices.
        max_output_channels (int): 0 for input-only devices.
        default_samplerate_hz (int): The device's default rate, Hz.
        default_input (bool): The default input device.
        default_output (bool): The default output device.
    """

    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate_hz: int
    default_input: bool = False
    default_output: bool = False


def list_devices(sd=None) -> list[DeviceInfo]:
    """Return every PortAudio device (list[DeviceInfo]); empty when there is no audio server/card.

    Raises:
        DependencyError: sounddevice or PortAudio missing.
    """
    sd = sd or load_sounddevice()
    apis = [a["name"] for a in sd.query_hostapis()]
    try:
        din, dout = sd.default.device
    except Exception:  # pragma: no cover - sounddevice versions without a pair
        din = dout = -1
    out = []
    with quiet_native_stderr():
        found = sd.query_devices()
    for d in found:
        idx = int(d["index"])
        out.append(DeviceInfo(idx, str(d["name"]), apis[d["hostapi"]] if d["hostapi"] < len(apis) else "?",
                              int(d["max_input_channels"]), int(d["max_output_channels"]),
                              round(d["default_samplerate"]), idx == din, idx == dout))
    return out


def format_devices(devices: list[DeviceInfo]) -> str:
    """Return a table of ``devices`` (str): index, in/out channels, default rate (Hz), host API, name;
    ``>`` marks the default input, ``<`` the default output."""
    if not devices:
        return f"no audio devices: {NO_SERVER_HINT}"
    lines = [f"{'':2}{'index':>5}  {'in':>3} {'out':>3}  {'rate Hz':>7}  {'host API':<10} name"]
    for d in devices:
        mark = (">" if d.default_input else " ") + ("<" if d.default_output else " ")
        lines.append(f"{mark}{d.index:>5}  {d.max_input_channels:>3} {d.max_output_channels:>3}  "
                     f"{d.default_samplerate_hz:>7}  {d.hostapi:<10} {d.name}")
    return "\n".join(lines)


def resolve_device(spec: str | int | None, kind: str = "input", sd=None) -> DeviceInfo:
    """Find the device named by ``--device``.

    Args:
        spec (str | int | None): Index (int or digits), exact name (case-insensitive), or a substring
            matching exactly one name; None: the default device of ``kind``.
        kind (str): ``"input"`` or ``"output"``: the device must have channels of that kind.
    Returns:
        DeviceInfo: the device.
    Raises:
        DependencyError: no device at all (no audio server or sound card); sounddevice/PortAudio missing.
        UsageError: unknown index or name, an ambiguous name, or a device without ``kind`` channels.
    """
    devices = list_devices(sd)
    if not devices:
        raise DependencyError(f"no audio devices found: {NO_SERVER_HINT}")
    chans = (lambda d: d.max_input_channels) if kind == "input" else (lambda d: d.max_output_channels)
    usable = [d for d in devices if chans(d) > 0]
    names = ", ".join(f"{d.index} '{d.name}'" for d in usable) or "none"
    if spec is None:
        dflt = [d for d in usable if (d.default_input if kind == "input" else d.default_output)]
        if not dflt:
            raise UsageError(f"no default {kind} device; pass --device (available {kind} devices: {names})")
        return dflt[0]
    s = str(spec).strip()
    if s.lstrip("-").isdigit():
        match = [d for d in devices if d.index == int(s)]
    else:
        match = [d for d in devices if d.name.lower() == s.lower()]
        if not match:
            match = [d for d in devices if s.lower() in d.name.lower()]
            if len(match) > 1:
                both = ", ".join(f"{d.index} '{d.name}'" for d in match)
                raise UsageError(f"device '{s}' is ambiguous: it matches {both}; give the index or the full name")
    if not match:
        raise UsageError(f"unknown {kind} device '{s}' (available {kind} devices: {names}; "
                         f"see 'cosyedge devices')")
    if chans(match[0]) <= 0:
        raise UsageError(f"device {match[0].index} '{match[0].name}' has no {kind} channels "
                         f"(available {kind} devices: {names})")
    return match[0]


def pick_sample_rate(device: DeviceInfo, output: DeviceInfo | None = None, sd=None,
                     candidates_hz: tuple[int, ...] = FALLBACK_RATES_HZ) -> int:
    """Return the first rate (Hz) the device opens at, mono float32: its default rate first, then
    ``candidates_hz``; with ``output``, the rate must also open for playback there (duplex).

    Raises:
        UsageError: no rate works (the message lists the rates tried and the last PortAudio error).
    """
    sd = sd or load_sounddevice()
    tried, last = [], ""
    with quiet_native_stderr():  # every refused rate makes ALSA and PortAudio print
        for rate in dict.fromkeys([device.default_samplerate_hz, *candidates_hz]):
            if rate <= 0:
                continue
            tried.append(rate)
            try:
                sd.check_input_settings(device=device.index, channels=1, dtype="float32", samplerate=rate)
                if output is not None:
                    sd.check_output_settings(device=output.index, channels=1, dtype="float32", samplerate=rate)
                return int(rate)
            except Exception as err:  # sounddevice.PortAudioError, ValueError
                last = first_line(err, with_type=False)
    pair = f"input '{device.name}'" + ("" if output is None else f" with output '{output.name}'")
    raise UsageError(f"device {pair} cannot open at any supported rate (tried {', '.join(map(str, tried))} Hz): "
                     f"{last}")


def run_mic(device: str | int | None = None, output: str | Path | None = None, monitor: bool = False,
            engine: str | Path | None = None, duration_s: float | None = None, chunk_ms: float | None = None,
            threads: int = 1, on_status: Callable | None = None, on_started: Callable | None = None,
            sd=None, save_input: str | Path | None = None) -> dict:
    """Enhance the microphone live: capture, resample, stream through the model, play and/or record.

    The capture runs at the device's rate (its default, else the first of :data:`FALLBACK_RATES_HZ`
    that opens) and is resampled to the model rate; the file (``output``) is written at the **model**
    rate, mono, incrementally, and renamed into place when the stream ends for any reason (duration,
    Ctrl-C, SIGTERM, error), so a partial recording is kept. ``monitor`` plays the enhanced audio on the
    default output device through one duplex stream. Xruns are counted, never fatal.

    Args:
        device (str | int | None): Input device index or name (see :func:`resolve_device`); None: default.
        output (str | Path | None): Output audio file (.wav/.flac/.ogg); None: no file.
        monitor (bool): Play the enhanced audio on the default output device.
        engine (str | Path | Engine | None): Engine folder or streaming .onnx (loaded here), or an engine already
            loaded (:func:`cosyedge.builders.cache.load_or_rebuild`), used as it is; None: the bundled reference.
        duration_s (float | None): Stop after this many seconds of captured audio; None: until Ctrl-C.
        chunk_ms (float | None): Chunk length, ms (a multiple of the model hop); None: one hop.
        threads (int): ONNX Runtime threads.
        on_status (Callable[[RealtimeStats], None] | None): Live status callback (about 2 per second).
        on_started (Callable[[], None] | None): Called once the audio stream runs.
        sd (module | None): sounddevice module (tests may inject one).
        save_input (str | Path | None): Also record what the model heard: the captured audio after
            resampling, at the model rate, mono, chunk by chunk (kept like ``output``); a .wav is
            32-bit float, bit-exact (:data:`cosyedge.audio.EXACT_FORMATS`). ``cosyedge run`` on that
            .wav with the same engine and chunk reproduces ``output`` (aligned by the model delay):
            the way to check a live run offline, or to replay a session. None: not kept.
    Returns:
        dict: see :func:`cosyedge.realtime.live.run_live`, plus ``device`` (str), ``device_index`` (int),
        ``monitor`` (bool).
    Raises:
        UsageError: nothing to do (none of ``output``, ``save_input``, ``monitor``), ``save_input`` is
            ``output`` or not a .wav/.flac (:data:`cosyedge.audio.EXACT_FORMATS`), unknown/ambiguous
            device, no rate opens, bad chunk/duration, rate change mid-stream.
        DependencyError: sounddevice/PortAudio missing, no audio server or device.
        ArtifactError: engine missing/stale, output unwritable, the stream died (device gone).
    """
    from cosyedge.audio import EXACT_FORMATS, IncrementalAudioWriter, check_output_path
    from cosyedge.builders.cache import default_engine, load_or_rebuild
    from cosyedge.drivers import pick_sink
    from cosyedge.drivers.mic import drive_mic

    if output is None and save_input is None and not monitor:
        raise UsageError("nothing to do: give --output FILE, --save-input FILE and/or --monitor")
    if duration_s is not None and not float(duration_s) > 0:
        raise UsageError(f"--duration must be a positive number of seconds, got {duration_s}")
    if save_input is not None and Path(save_input).suffix.lower() not in EXACT_FORMATS:
        raise UsageError(f"--save-input {save_input}: use a .wav (32-bit float, bit-exact) or .flac (24-bit) file, "
                         f"not '{Path(save_input).suffix}' (a lossy or unknown format would not replay the live run)")
    paths = [check_output_path(p) for p in (output, save_input) if p is not None]
    if len(paths) == 2 and paths[0].resolve() == paths[1].resolve():
        raise UsageError(f"--save-input and --output are the same file ({paths[0]}): give two names")
    sd = sd or load_sounddevice()
    dev = resolve_device(device, "input", sd)
    out_dev = resolve_device(None, "output", sd) if monitor else None
    rate = pick_sample_rate(dev, out_dev, sd)
    eng = load_or_rebuild(engine if engine is not None else default_engine())
    c = eng.contract
    pick_sink(eng, vad=False, where=None, mic=True)  # a VAD given by name is refused by the CLI, before the device
    chunk = None if chunk_ms is None else c.chunk_samples(chunk_ms)
    session = eng(chunk_samples=chunk, threads=threads)
    writer = IncrementalAudioWriter(output, c.sample_rate_hz) if output is not None else None
    try:
        in_writer = (IncrementalAudioWriter(save_input, c.sample_rate_hz, exact=True) if save_input is not None
                     else None)
    except BaseException:
        if writer is not None:
            writer.close()
        raise
    listening = ("listening on device %d '%s' at %d Hz (model %d Hz, chunk %d samples)%s%s%s", dev.index, dev.name,
                 rate, c.sample_rate_hz, session.chunk_samples, f", recording to {output}" if output else "",
                 f", saving the model-rate input to {save_input}" if save_input is not None else "",
                 f", playing on '{out_dev.name}'" if monitor else "")
    result, _core = drive_mic(sd, dev, rate, session, out_dev=out_dev, monitor=monitor, writer=writer,
                              input_writer=in_writer, duration_s=duration_s, on_status=on_status,
                              on_started=on_started, listening=listening,
                              kept_note=" (the recording so far is kept)")
    result.update(monitor=bool(monitor))
    return result
