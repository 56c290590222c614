"""run_live with threaded fake streams, and `cosyedge run mic` / `cosyedge devices` with a fake sounddevice:
duration, Ctrl-C, a dying stream and a rate change all leave a complete, valid recording; bad devices
give one-line errors."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.audio import IncrementalAudioWriter
from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.realtime import devices as devmod
from cosyedge.realtime.enhancer import RateMonitor, RealtimeEnhancer
from cosyedge.realtime.live import run_live
from cosyedge.runtime import OrtStreamSession, stream_array
from tests.helpers import models
from tests.realtime.fakes import ThreadedStream, fake_sounddevice

SR = 16000
HOP = 160


@pytest.fixture(scope="module")
def fir(tmp_path_factory) -> Path:
    return models.make_fir_model(tmp_path_factory.mktemp("live") / "fir.onnx", hop=HOP)


def _noise(seconds: float, rate: int = SR, seed: int = 0) -> np.ndarray:
    return (0.05 * np.random.default_rng(seed).standard_normal(int(seconds * rate))).astype(np.float32)


def _setup(fir, path, rate=SR, rate_monitor=False, **stream_kw):
    session = OrtStreamSession(fir)
    writer = IncrementalAudioWriter(path, SR)
    enh = RealtimeEnhancer(session, rate, writer=writer, rate_monitor=rate_monitor)

    def cb(indata, frames, t, status):
        enh.input_callback(indata, status.input_overflow)

    return session, writer, enh, cb


def test_duration_stops_and_the_file_equals_the_offline_stream(fir, tmp_path):
    x = _noise(1.0)
    session, writer, enh, cb = _setup(fir, tmp_path / "out.wav")
    stream = ThreadedStream(cb, x, SR, HOP, speed=4.0)
    with session:
        r = run_live(enh, stream, writer=writer, duration_s=0.5)
    assert stream.closed and not stream.active
    assert r["output"] == str(tmp_path / "out.wav") and not r["interrupted"] and r["xruns"] == 0
    assert r["captured_s"] >= 0.5
    y, sr = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    assert sr == SR and y.size == r["output_s"] * SR >= 0.5 * SR
    with OrtStreamSession(fir) as s:
        want = stream_array(s, x[: y.size])
    assert np.abs(y - want).max() <= 1.5 / 32768  # PCM_16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]


class InterruptingStream(ThreadedStream):
    """Ctrl-C arrives in the main thread while it polls the stream (after ``after`` polls)."""

    def __init__(self, *a, after: int = 10, **kw):
        super().__init__(*a, **kw)
        self.polls, self.after = 0, after

    @property
    def active(self):
        self.polls += 1
        if self.polls > self.after:
            raise KeyboardInterrupt
        return super().active


def test_ctrl_c_keeps_a_complete_valid_file(fir, tmp_path):
    (tmp_path / "out.wav").write_bytes(b"previous")
    session, writer, enh, cb = _setup(fir, tmp_path / "out.wav")
    stream = InterruptingStream(cb, _noise(5.0), SR, HOP, after=10)
    with session:
        r = run_live(enh, stream, writer=writer, poll_s=0.02)
    assert r["interrupted"] and stream.closed
    info = sf.info(str(tmp_path / "out.wav"))  # a valid WAV: header rewritten on close
    assert info.frames == round(r["output_s"] * SR) > 0 and info.samplerate == SR
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]


def test_stream_dying_is_an_error_and_keeps_the_partial_file(fir, tmp_path):
    session, writer, enh, cb = _setup(fir, tmp_path / "out.wav")
    stream = ThreadedStream(cb, _noise(5.0), SR, HOP, speed=2.0, fail_after_s=0.2)
    with session, pytest.raises(ArtifactError, match="stopped by itself .* the recording so far is kept"):
        run_live(enh, stream, writer=writer)
    assert sf.info(str(tmp_path / "out.wav")).frames > 0


def test_rate_change_stops_with_usage_error_and_keeps_the_partial_file(fir, tmp_path):
    """The stream says 48 kHz; the (threaded, real-time) device delivers 44.1 kHz."""
    session, writer, enh, cb = _setup(fir, tmp_path / "out.wav", rate=48000,
                                      rate_monitor=RateMonitor(48000, window_s=0.25))
    stream = ThreadedStream(cb, np.zeros(0, np.float32), 44100, 441)
    with session, pytest.raises(UsageError, match="input sample rate changed mid-stream"):
        run_live(enh, stream, writer=writer, duration_s=10.0)
    assert stream.closed
    assert sf.info(str(tmp_path / "out.wav")).frames > 0


def test_run_live_bad_duration(fir, tmp_path):
    _session, writer, enh, cb = _setup(fir, tmp_path / "out.wav")
    with pytest.raises(UsageError, match="--duration must be a positive"):
        run_live(enh, ThreadedStream(cb, _noise(1), SR, HOP), writer=writer, duration_s=0)
    writer.close()
    assert not (tmp_path / "out.wav").exists()  # nothing recorded, nothing written


@pytest.mark.parametrize("ext, exact, subtype, tol", [
    (".wav", False, "PCM_16", 1.0 / 32768), (".wav", True, "FLOAT", 0.0), (".flac", True, "PCM_24", 1.0 / 2 ** 23),
])
def test_writer_exact_keeps_the_samples(tmp_path, ext, exact, subtype, tol):
    """16-bit PCM rounds and clips to [-1, 1]; exact=True keeps float samples in a .wav bit for bit
    (out-of-range ones too) and 24 bits in a .flac; NaN/Inf are 0 in every case."""
    x = _noise(0.1)
    x[:3] = [1.25, -1.5, np.nan]
    w = IncrementalAudioWriter(tmp_path / f"h{ext}", SR, exact=exact)
    w.write(x[:700])
    w.write(x[700:])
    assert w.close() == tmp_path / f"h{ext}"
    info = sf.info(str(tmp_path / f"h{ext}"))
    assert info.subtype == subtype and info.frames == x.size
    y, _ = sf.read(str(tmp_path / f"h{ext}"), dtype="float32")
    want = np.nan_to_num(x if subtype == "FLOAT" else np.clip(x, -1.0, 1.0), nan=0.0)
    assert np.abs(y - want).max() <= tol


def test_writer_exact_refuses_a_lossy_format(tmp_path):
    with pytest.raises(UsageError, match=r"h\.ogg: use a \.wav or \.flac file, not '\.ogg'"):
        IncrementalAudioWriter(tmp_path / "h.ogg", SR, exact=True)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- device layer
DEVICES = [
    {"name": "Built-in Mic", "max_input_channels": 2, "max_output_channels": 0, "default_samplerate": 44100.0},
    {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 48000.0},
    {"name": "USB Headset Mic", "max_input_channels": 1, "max_output_channels": 2, "default_samplerate": 48000.0},
    {"name": "USB Camera Mic", "max_input_channels": 1, "max_output_channels": 0, "default_samplerate": 16000.0},
]


def test_resolve_device_by_index_name_substring():
    sd = fake_sounddevice(DEVICES)
    assert devmod.resolve_device(None, "input", sd).name == "Built-in Mic"
    assert devmod.resolve_device("2", "input", sd).name == "USB Headset Mic"
    assert devmod.resolve_device(3, "input", sd).name == "USB Camera Mic"
    assert devmod.resolve_device("built-in mic", "input", sd).index == 0
    assert devmod.resolve_device("headset", "input", sd).index == 2
    assert devmod.resolve_device(None, "output", sd).name == "Speakers"
    with pytest.raises(UsageError, match="device 'USB' is ambiguous: it matches 2 'USB Headset Mic', 3 'USB Camera"):
        devmod.resolve_device("USB", "input", sd)
    with pytest.raises(UsageError, match=r"unknown input device 'Zoom H4' \(available input devices: 0 'Built-in "
                                         r"Mic', 2 'USB Headset Mic', 3 'USB Camera Mic'"):
        devmod.resolve_device("Zoom H4", "input", sd)
    with pytest.raises(UsageError, match="unknown input device '9'"):
        devmod.resolve_device(9, "input", sd)
    with pytest.raises(UsageError, match="device 1 'Speakers' has no input channels"):
        devmod.resolve_device("Speakers", "input", sd)
    with pytest.raises(DependencyError, match="no audio devices found: no audio server running"):
        devmod.resolve_device(None, "input", fake_sounddevice([]))


def test_pick_sample_rate_falls_back_and_fails_clearly():
    sd = fake_sounddevice(DEVICES, rates={0: {48000, 16000}, 1: {48000}, 2: set()})
    mic = devmod.resolve_device(0, "input", sd)
    assert devmod.pick_sample_rate(mic, sd=sd) == 48000  # 44100 (its default) refused
    out = devmod.resolve_device(1, "output", sd)
    assert devmod.pick_sample_rate(mic, out, sd=sd) == 48000
    with pytest.raises(UsageError, match=r"device input 'USB Headset Mic' cannot open at any supported rate "
                                         r"\(tried 48000, 44100, 32000, 16000, 22050, 96000, 8000 Hz\): Invalid"):
        devmod.pick_sample_rate(devmod.resolve_device(2, "input", sd), sd=sd)


def test_format_devices_marks_defaults():
    table = devmod.format_devices(devmod.list_devices(fake_sounddevice(DEVICES)))
    lines = table.splitlines()
    assert len(lines) == 5 and "host API" in lines[0]
    assert lines[1].startswith(">") and "Built-in Mic" in lines[1] and "44100" in lines[1]
    assert lines[2][1] == "<" and "Speakers" in lines[2]
    assert "no audio devices" in devmod.format_devices([])


def test_load_sounddevice_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import raises ImportError
    with pytest.raises(DependencyError, match=r"pip install 'cosyedge\[audio\]'"):
        devmod.load_sounddevice()


def test_load_sounddevice_without_portaudio(monkeypatch):
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "sounddevice":
                raise OSError("PortAudio library not found")

    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    with pytest.raises(DependencyError, match="PortAudio library not found: install PortAudio .*libportaudio2"):
        devmod.load_sounddevice()


@pytest.fixture
def cli(cli, monkeypatch):
    """The CLI runner of tests/conftest.py with a fake sounddevice (``cli.state.sd``)."""
    state = types.SimpleNamespace(sd=fake_sounddevice(DEVICES, signal=_noise(3.0, rate=48000)))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: state.sd)
    cli.state = state
    return cli


def _one_line_error(rc, err, code):
    assert rc == code, err
    assert "Traceback" not in err
    bang = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert len(bang) == 1 and err.rstrip().splitlines()[-1] == bang[0]
    return bang[0]


def test_cli_run_mic_records_at_model_rate(cli, fir, tmp_path):
    rc, out, err = cli("run", "mic", "--device", "headset", "--output", tmp_path / "live.flac", "--duration", "0.6",
                       "--engine", fir)
    assert rc == 0, err
    opened = cli.state.sd.opened[-1]
    assert opened["device"] == 2 and opened["samplerate"] == 48000 and opened["blocksize"] == 480
    report = out.strip().splitlines()[-1]
    assert report.startswith("mic 2 'USB Headset Mic' at 48000 Hz -> ") and "xruns 0" in report, report
    assert "latency p50" in report and "RTF" in report
    assert "listening on device 2 'USB Headset Mic' at 48000 Hz (model 16000 Hz" in err
    info = sf.info(str(tmp_path / "live.flac"))
    assert info.samplerate == 16000 and info.channels == 1 and info.frames >= 0.55 * 16000


def test_cli_run_mic_save_input_replays_offline_to_the_live_output(cli, fir, tmp_path):
    """--save-input keeps what the model heard (48 kHz capture resampled to 16 kHz) on the live chunk grid:
    `cosyedge run` on that file gives the live output, delay-compensated, to one LSB of the 16-bit files."""
    import soxr

    rc, out, err = cli("run", "mic", "--device", "headset", "--output", tmp_path / "live.wav", "--save-input",
                       tmp_path / "heard.wav", "--duration", "0.6", "--engine", fir)
    assert rc == 0, err
    report = out.strip().splitlines()[-1]
    assert f"input -> {tmp_path / 'heard.wav'}" in report, report
    assert "saving the model-rate input to" in err
    live, sr = sf.read(str(tmp_path / "live.wav"), dtype="float32")
    heard, sr_in = sf.read(str(tmp_path / "heard.wav"), dtype="float32")
    assert sr == sr_in == SR and heard.size == live.size >= 0.55 * SR
    # the heard file is the device signal through the streaming resampler
    signal = cli.state.sd.opened[-1]["stream"].signal
    want = soxr.ResampleStream(48000, SR, 1, dtype="float32", quality="HQ").resample_chunk(signal)
    n = heard.size - 160  # the end: the resampler's flush at the stop
    assert sf.info(str(tmp_path / "heard.wav")).subtype == "FLOAT"  # the samples as the model got them
    assert np.abs(heard[:n] - want[:n]).max() <= 1e-6
    rc, _out, err = cli("run", tmp_path / "heard.wav", "-o", tmp_path / "replay.wav", "--engine", fir)
    assert rc == 0, err
    replay, _ = sf.read(str(tmp_path / "replay.wav"), dtype="float32")
    d = load_contract_delay(fir)
    assert np.abs(replay[: live.size - d] - live[d:]).max() <= 1.0 / 32768  # the same floats, both PCM_16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heard.wav", "live.wav", "replay.wav"]


def load_contract_delay(engine: Path) -> int:
    from cosyedge.runtime.engine import load_engine

    return load_engine(engine).contract.delay_samples


def test_cli_run_mic_monitor_opens_a_duplex_stream(cli, fir, tmp_path):
    rc, out, err = cli("run", "mic", "--device", "0", "--monitor", "--duration", "0.3", "--engine", fir)
    assert rc == 0, err
    assert cli.state.sd.opened[-1]["device"] == (0, 1)  # input 0, default output 1
    assert "monitored" in out.strip().splitlines()[-1]


@pytest.mark.parametrize("args, code, words", [
    (["--device", "Zoom", "--output", "{tmp}/x.wav"], 2, "unknown input device 'Zoom'"),
    (["--device", "USB", "--output", "{tmp}/x.wav"], 2, "is ambiguous"),
    (["--output", "{tmp}/x.wav", "--duration", "-1"], 2, "--duration must be a positive number"),
    ([], 2, "nothing to do: give --output FILE, --save-input FILE and/or --monitor"),
    (["--output", "{tmp}/x.wav", "--save-input", "{tmp}/./x.wav"], 2, "--save-input and --output are the same file"),
    (["--output", "{tmp}/x.wav", "--save-input", "{tmp}/x.mp3"], 2, "--save-input {tmp}/x.mp3: use a .wav"),
    (["--save-input", "{tmp}/x.ogg"], 2, "not '.ogg' (a lossy or unknown format would not replay the live run)"),
    (["--output", "{tmp}/x.mp3"], 2, "unsupported extension"),
    (["--output", "{tmp}/x.wav", "--chunk-ms", "7"], 2, "not a multiple of the model's total stride"),
])
def test_cli_run_mic_bad_input(cli, fir, tmp_path, args, code, words):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    words = words.replace("{tmp}", str(tmp_path))
    rc, _out, err = cli("run", "mic", *args, "--engine", fir)
    assert words in _one_line_error(rc, err, code)
    assert list(tmp_path.iterdir()) == []


def test_native_library_noise_is_held_back_from_a_one_line_error(capfd):
    """ALSA and PortAudio write straight to fd 2 while probing a device that does not open (ALSA lib
    pcm_pulse.c ... Unable to create stream, Expression 'ret' failed ...): none of it reaches the
    terminal, the error stays one line; -v shows it in the debug log."""
    import os

    sd = fake_sounddevice(DEVICES, rates={0: set()})
    check = sd.check_input_settings

    def noisy(**kw):
        os.write(2, b"ALSA lib pcm_pulse.c:758:(pulse_prepare) PulseAudio: Unable to create stream: Timeout\n")
        return check(**kw)

    sd.check_input_settings = noisy
    with pytest.raises(UsageError, match="cannot open at any supported rate"):
        devmod.pick_sample_rate(devmod.resolve_device(0, "input", sd), sd=sd)
    assert "ALSA lib" not in capfd.readouterr().err
    with devmod.quiet_native_stderr():
        os.write(2, b"held\n")
    os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n"


def test_cli_run_mic_no_rate_and_no_server(cli, fir, tmp_path):
    cli.state.sd = fake_sounddevice(DEVICES, rates={0: set()})
    rc, out, err = cli("run", "mic", "--output", tmp_path / "x.wav", "--engine", fir)
    assert "cannot open at any supported rate" in _one_line_error(rc, err, 2)
    cli.state.sd = fake_sounddevice([])
    rc, out, err = cli("run", "mic", "--output", tmp_path / "x.wav", "--engine", fir)
    assert "no audio devices found" in _one_line_error(rc, err, 4)
    rc, _out, err = cli("devices")
    assert "no audio devices found" in _one_line_error(rc, err, 4)
    assert list(tmp_path.iterdir()) == []


def test_cli_devices_and_file_run_rejects_mic_options(cli, tmp_path):
    rc, out, err = cli("devices")
    assert rc == 0 and "USB Camera Mic" in out and out.count("\n") == 5
    rc, out, err = cli("run", "in.wav", "-o", tmp_path / "o.wav", "--monitor")
    assert "--monitor only applies to 'cosyedge run mic'" in _one_line_error(rc, err, 2)
    rc, out, err = cli("run", "in.wav", "-o", tmp_path / "o.wav", "--save-input", tmp_path / "h.wav")
    assert "--save-input only applies to 'cosyedge run mic'" in _one_line_error(rc, err, 2)
    rc, out, err = cli("run", "in.wav", "-o", tmp_path / "o.wav", "--save-input", "", "--duration", "0")
    assert "--duration, --save-input only apply to 'cosyedge run mic'" in _one_line_error(rc, err, 2)
    assert list(tmp_path.iterdir()) == []
