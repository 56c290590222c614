"""RealtimeEnhancer with fake devices: exact streaming output, resampling, xruns that are counted and
recovered from, rate changes detected. Time is simulated (a fake clock), so the tests are fast and
deterministic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soxr

from cosyedge.errors import ArtifactError, UsageError
from cosyedge.realtime.enhancer import RateMonitor, RealtimeEnhancer
from cosyedge.runtime import OrtStreamSession, stream_array
from tests.helpers import models
from tests.realtime.fakes import FakeClock, SimDevice, SlowSession, simulate

SR = 16000
HOP = 160
DELAY = 160


class ListWriter:
    """Collects what the enhancer writes (model-rate blocks)."""

    def __init__(self):
        self.blocks = []

    def write(self, y):
        self.blocks.append(np.array(y, np.float32))

    @property
    def audio(self) -> np.ndarray:
        return np.concatenate(self.blocks) if self.blocks else np.zeros(0, np.float32)


@pytest.fixture(scope="module")
def fir(tmp_path_factory) -> Path:
    return models.make_fir_model(tmp_path_factory.mktemp("rt") / "fir.onnx", hop=HOP)


@pytest.fixture(scope="module")
def delay(tmp_path_factory) -> Path:
    """Pure delay of 160 samples: output = input 10 ms later, so continuity is visible sample by sample."""
    return models.make_delay_model(tmp_path_factory.mktemp("rt") / "delay.onnx", delay_samples=DELAY, hop=HOP)


def _speech(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2
            + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def _offline(model: Path, x: np.ndarray) -> np.ndarray:
    with OrtStreamSession(model) as s:
        return stream_array(s, x)


@pytest.mark.parametrize("block", [HOP, 97, 1000])
def test_callback_path_equals_offline_stream_at_model_rate(fir, block):
    """Device rate == model rate: blocks of any size are re-chunked; the file is the exact stream output."""
    x = _speech(1.0)
    clock, w = FakeClock(), ListWriter()
    enh = RealtimeEnhancer(OrtStreamSession(fir), SR, writer=w, clock=clock)
    enh.session.activate()
    dev = SimDevice(enh, clock, x, SR, block)
    simulate(enh, dev)
    enh.finish()
    st = enh.stats()
    assert st.xruns == 0 and st.input_dropped_samples == 0
    assert w.audio.size == x.size  # the last partial chunk is flushed, only its real samples written
    np.testing.assert_allclose(w.audio, _offline(fir, x), atol=1e-6)
    assert st.chunks == -(-x.size // HOP)


def test_device_at_48k_is_resampled_with_the_streaming_resampler(fir):
    """Device at 48 kHz: the soxr streaming resampler gives what a one-shot soxr resampling gives."""
    x16 = _speech(0.8, seed=1)
    x48 = soxr.resample(x16, SR, 48000, quality="HQ").astype(np.float32)
    clock, w = FakeClock(), ListWriter()
    enh = RealtimeEnhancer(OrtStreamSession(fir), 48000, writer=w, clock=clock)
    enh.session.activate()
    simulate(enh, SimDevice(enh, clock, x48, 48000, 441))
    enh.finish()
    want = _offline(fir, soxr.resample(x48, 48000, SR, quality="HQ").astype(np.float32))
    assert w.audio.size == want.size
    np.testing.assert_allclose(w.audio, want, atol=1e-5)
    assert enh.stats().device_rate_hz == 48000 and enh.stats().captured_s == pytest.approx(x48.size / 48000)


def test_slow_step_counts_xruns_and_the_stream_recovers(delay):
    """Chunks 100..199 take 25 ms each (2.5x slower than real time), the rest 0.2 ms. The input ring
    (200 ms) overflows and the output runs dry: both counted, nothing raised; afterwards the worker
    catches up, the backlog drains, no new xrun happens and the output is the input, 10 ms late, again."""
    x = _speech(6.0, seed=2)
    clock, w = FakeClock(), ListWriter()
    session = SlowSession(delay, cost_s=lambda i: 0.025 if 100 <= i < 200 else 0.0002)
    enh = RealtimeEnhancer(session, SR, writer=w, monitor=True, ring_ms=200.0, clock=clock)
    session.activate()
    dev = SimDevice(enh, clock, x, SR, HOP, monitor=True)
    session.device = dev

    marks = {}
    orig = enh.process_available

    def tracked():
        n = orig()
        if session.pushed >= 200 and "end_slow" not in marks:
            marks["end_slow"] = (clock.t, enh.stats())
        if "end_slow" in marks and "caught_up" not in marks and len(enh.in_ring) < HOP:
            marks["caught_up"] = (clock.t, enh.stats())
        return n

    enh.process_available = tracked
    simulate(enh, dev)
    enh.finish()
    final = enh.stats()

    t_slow, at_slow = marks["end_slow"]
    t_ok, at_ok = marks["caught_up"]
    assert at_slow.input_overflows > 0 and at_slow.input_dropped_samples > 0
    assert at_slow.output_underflows > 0 and at_slow.output_missing_samples > 0
    assert t_ok - t_slow < 0.5  # the backlog (<= 200 ms) drains in well under half a second
    # after catching up: no new xrun of either kind until the end (about 3 s later)
    assert final.input_overflows == at_ok.input_overflows
    assert final.output_underflows == at_ok.output_underflows
    assert final.buffered_ms < 10.0
    # accounting: every captured sample was either processed or dropped
    assert enh.in_ring.written == x.size == enh.in_ring.read_total + enh.in_ring.dropped
    assert final.chunks * HOP >= enh.in_ring.read_total
    # after recovery the output is again the input delayed by 160 samples, sample for sample:
    # the last 2 s of the file equal the input's last 2 s shifted by the model delay
    n = 2 * SR
    np.testing.assert_array_equal(w.audio[-n:], x[-n - DELAY:-DELAY])
    # what the speakers got: the input delayed by the model (160), the priming margin (60 ms = 960) and
    # one block (160) at first; after the slow stretch the late backlog is skipped (counted), so in the
    # last 2 s the speakers are again at most monitor_max_ms (150 ms) later than that, sample for sample
    played = np.concatenate(dev.played)
    assert not np.isnan(played).any()  # every output sample was written (zeros when short)
    first = int(np.flatnonzero(played)[0])
    l0 = _lag_at(played, x, start=first + HOP, n=SR // 2)
    assert l0 == DELAY + 960 + HOP
    late = _lag_at(played, x, start=played.size - 2 * SR, n=2 * SR)
    assert late is not None and l0 <= late <= l0 + 150 * SR // 1000
    assert final.output_skipped_samples > 0 and "output_skipped_samples" in final.as_dict()


def _lag_at(played: np.ndarray, x: np.ndarray, start: int, n: int, max_lag: int = 8000) -> int | None:
    """Smallest d with played[start:start+n] == x[start-d:start-d+n] (same timeline: one output block per
    input block), or None when no delay up to ``max_lag`` samples makes them equal."""
    seg = played[start:start + n]
    for d in range(min(max_lag, start) + 1):
        if np.allclose(seg, x[start - d:start - d + n], atol=1e-6):
            return d
    return None


def test_fast_stream_has_no_xruns_and_no_priming_underflow(delay):
    x = _speech(2.0, seed=3)
    clock = FakeClock()
    enh = RealtimeEnhancer(OrtStreamSession(delay), SR, monitor=True, clock=clock)
    enh.session.activate()
    dev = SimDevice(enh, clock, x, SR, HOP, monitor=True)
    simulate(enh, dev)
    st = enh.stats()
    assert st.xruns == 0 and st.output_missing_samples == 0
    played = np.concatenate(dev.played)
    first = int(np.flatnonzero(played)[0])
    assert DELAY <= first <= DELAY + 960 + 2 * HOP  # leading silence is priming, not an underflow
    assert "xruns 0 (in 0, out 0)" in st.status_line() and "RTF" in st.status_line()


@pytest.mark.parametrize("true_rate, raises", [(44100, True), (48000, False), (48500, False)])
def test_rate_change_mid_stream_is_detected(fir, true_rate, raises):
    """The stream was opened at 48 kHz; the device really delivers ``true_rate`` samples per second."""
    clock = FakeClock()
    w = ListWriter()
    enh = RealtimeEnhancer(OrtStreamSession(fir), 48000, writer=w, clock=clock,
                           rate_monitor=RateMonitor(48000, clock=clock, window_s=1.0))
    enh.session.activate()
    x = np.zeros(int(true_rate * 5.0), np.float32)
    dev = SimDevice(enh, clock, x, true_rate, 480)
    if raises:
        with pytest.raises(UsageError, match=r"input sample rate changed mid-stream: the device delivers about "
                                             r"44[01]\d\d Hz but the stream was opened at 48000 Hz"):
            simulate(enh, dev)
        assert 2.9 <= clock.t <= 3.2  # warm-up window + two bad windows
        assert w.audio.size > 0  # what was processed before is still there for the writer to keep
    else:
        simulate(enh, dev)
        assert enh.rate_monitor.measured_hz == pytest.approx(true_rate, rel=0.01)


def test_rate_monitor_ignores_windows_with_device_overflow():
    clock = FakeClock()
    mon = RateMonitor(48000, clock=clock, window_s=1.0)
    frames = 0
    for step in range(1, 60):  # 44.1 kHz delivered, but PortAudio flags an overflow in every window
        clock.t = step * 0.1
        frames += 4410
        mon.update(frames, xruns=step)
    assert mon.measured_hz is None


def _feed(mon, rates_hz, xruns_per_window=0, window_s=1.0, step_s=0.1):
    """Feed ``mon`` windows delivering ``rates_hz[k]`` frames per second each (in 0.1 s steps)."""
    t = frames = xruns = 0.0
    for rate in rates_hz:
        xruns += xruns_per_window
        for _ in range(round(window_s / step_s)):
            t += step_s
            frames += rate * step_s
            mon.clock = lambda t=t: t
            mon.update(int(frames), xruns=int(xruns))


def test_rate_monitor_skips_windows_with_any_xrun():
    """In a duplex stream an output underflow restarts both directions and input frames go missing without
    an input flag (CI once stopped a monitored stream with 'delivers about 6271 Hz'): such windows are not
    judged, whatever their rate."""
    mon = RateMonitor(44100, window_s=1.0)
    _feed(mon, [44100] + [6271] * 6, xruns_per_window=1)
    assert mon.measured_hz is None


def test_enhancer_gives_the_rate_monitor_every_kind_of_xrun(fir):
    class Spy:
        calls = []

        def update(self, frames_total, xruns):
            self.calls.append((frames_total, xruns))

    enh = RealtimeEnhancer(OrtStreamSession(fir), SR, monitor=True, rate_monitor=Spy())
    enh.session.activate()
    enh.input_callback(np.zeros((HOP, 1), np.float32), overflow=True)
    enh.output_callback(np.zeros((HOP, 1), np.float32), underflow=True)  # PortAudio's flag
    enh.device_output_underflows, enh.output_underflows = 1, 2
    enh.process_available()
    assert enh.rate_monitor.calls[-1] == (HOP, 1 + 1 + 2)


def test_rate_monitor_tells_a_stall_from_a_rate():
    """Bad windows that disagree are a stall (no error); a steady other rate raises; no audio at all is a
    stalled device (ArtifactError, not a rate)."""
    mon = RateMonitor(44100, window_s=1.0)
    _feed(mon, [44100, 6271, 20000, 9000, 30000, 44100, 12000, 25000])
    assert mon.measured_hz is not None and abs(mon.measured_hz / 44100 - 1) > 0.05  # judged, bad, no error
    mon = RateMonitor(44100, window_s=1.0)
    with pytest.raises(UsageError, match="delivers about 4800[0-9] Hz but the stream was opened at 44100 Hz"):
        _feed(mon, [44100, 44100, 48000, 48000, 48000, 48000])
    mon = RateMonitor(44100, window_s=1.0)
    with pytest.raises(ArtifactError, match="delivered no audio for 2 s .stalled"):
        _feed(mon, [44100, 44100, 0, 0, 0, 0])


def test_bad_arguments(fir, tmp_path):
    with pytest.raises(UsageError, match="batch 1"):
        RealtimeEnhancer(OrtStreamSession(fir, batch=2), SR)
    with pytest.raises(UsageError, match="sample rate must be positive"):
        RealtimeEnhancer(OrtStreamSession(fir), 0)
    with pytest.raises(UsageError, match="ring buffer length must be positive"):
        RealtimeEnhancer(OrtStreamSession(fir), SR, ring_ms=0)
