"""Fake audio devices for the real-time tests: a discrete-event simulation with a fake clock, a threaded
stream paced by the real clock, and a fake ``sounddevice`` module."""

from __future__ import annotations

import threading
import time
import types

import numpy as np

from cosyedge.runtime.ort import OrtStreamSession


class FakeClock:
    """Monotonic clock that only moves when told (seconds)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class SimDevice:
    """A device driven by a fake clock: every ``block`` samples of ``signal`` (at ``rate_hz`` of *fake*
    time) it calls the enhancer's input callback and, if ``monitor``, its output callback."""

    def __init__(self, enhancer, clock: FakeClock, signal: np.ndarray, rate_hz: float, block: int,
                 monitor: bool = False):
        self.enh, self.clock, self.signal, self.rate_hz, self.block = enhancer, clock, signal, rate_hz, block
        self.monitor = monitor
        self.next_block_t = 0.0
        self.pos = 0
        self.played = []

    @property
    def done(self) -> bool:
        return self.pos >= self.signal.size

    def advance(self, dt: float) -> None:
        """Move fake time by ``dt`` seconds, delivering every block that falls due."""
        end = self.clock.t + dt
        while self.next_block_t <= end and not self.done:
            self.clock.t = self.next_block_t
            x = self.signal[self.pos:self.pos + self.block]
            self.pos += x.size
            self.enh.input_callback(x.reshape(-1, 1))
            if self.monitor:
                out = np.full((self.block, 1), np.nan, np.float32)
                self.enh.output_callback(out)
                self.played.append(out[:, 0].copy())
            self.next_block_t += self.block / self.rate_hz
        self.clock.t = max(self.clock.t, end)


class SlowSession(OrtStreamSession):
    """OrtStreamSession whose every push costs ``cost_s(i)`` seconds of *fake* time (i = chunk index):
    the device keeps delivering blocks meanwhile, as a real device would while the worker is busy."""

    def __init__(self, *args, cost_s=lambda i: 0.0, device: SimDevice | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cost_s = cost_s
        self.device = device
        self.pushed = 0

    def push_impl(self, chunk):
        out = super().push_impl(chunk)
        if self.device is not None:
            self.device.advance(self.cost_s(self.pushed))
        self.pushed += 1
        return out


def simulate(enhancer, device: SimDevice, idle_step_s: float = 0.001, tail_s: float = 0.0) -> None:
    """Worker loop in fake time: process what is there; when idle, let 1 ms pass."""
    end_t = None
    while True:
        n = enhancer.process_available()
        if device.done:
            end_t = device.clock.t if end_t is None else end_t
            if device.clock.t >= end_t + tail_s and n == 0:
                return
        if n == 0:
            device.advance(idle_step_s)


class ThreadedStream:
    """A fake PortAudio stream: a thread calls ``callback(indata, frames, time, status)`` (or the duplex
    form) with blocks of ``signal`` paced by the real clock at ``rate_hz`` x ``speed``; silence after
    the signal ends. ``fail_after_s`` makes the stream die by itself (device unplugged)."""

    def __init__(self, callback, signal: np.ndarray, rate_hz: float, block: int, duplex: bool = False,
                 speed: float = 1.0, fail_after_s: float | None = None):
        self.callback, self.signal, self.rate_hz, self.block = callback, signal, rate_hz, block
        self.duplex, self.speed, self.fail_after_s = duplex, speed, fail_after_s
        self._stop = threading.Event()
        self._thread = None
        self.closed = False
        self.delivered = 0

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        t0 = time.monotonic()
        i = 0
        status = types.SimpleNamespace(input_overflow=False, output_underflow=False)
        while not self._stop.is_set():
            due = t0 + i * self.block / (self.rate_hz * self.speed)
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.005))
                continue
            if self.fail_after_s is not None and now - t0 > self.fail_after_s:
                return  # the stream dies: active becomes False
            x = self.signal[i * self.block:(i + 1) * self.block]
            x = np.concatenate([x, np.zeros(self.block - x.size, np.float32)]).reshape(-1, 1)
            if self.duplex:
                out = np.zeros((self.block, 1), np.float32)
                self.callback(x, out, self.block, None, status)
            else:
                self.callback(x, self.block, None, status)
            self.delivered += self.block
            i += 1

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def close(self):
        self.closed = True


class PortAudioError(Exception):
    """Stands in for sounddevice.PortAudioError."""


def fake_sounddevice(devices: list[dict], rates: dict[int, set[int]] | None = None, signal=None,
                     default=(0, 1)) -> types.ModuleType:
    """A module with the parts of the sounddevice API that cosyedge uses.

    Args:
        devices: dicts with name, max_input_channels, max_output_channels, default_samplerate.
        rates: device index -> rates it opens at (default: every rate).
        signal: float32 samples the fake InputStream delivers (silence after).
    """
    sd = types.ModuleType("sounddevice")
    sd.__name__ = "sounddevice"
    sd.PortAudioError = PortAudioError
    devs = [dict(d, index=i, hostapi=0) for i, d in enumerate(devices)]
    sd.query_devices = lambda: list(devs)
    sd.query_hostapis = lambda: ({"name": "FakeAPI"},)
    sd.default = types.SimpleNamespace(device=default)
    sd.opened = []

    def check(kind):
        def f(device, channels, dtype, samplerate):
            ok = rates is None or samplerate in rates.get(device, set())
            if not ok:
                raise PortAudioError(f"Invalid sample rate [PaErrorCode -9997] ({kind} {device} @ {samplerate})")
        return f

    sd.check_input_settings = check("input")
    sd.check_output_settings = check("output")

    def input_stream(device, samplerate, blocksize, channels, dtype, latency, callback):
        s = ThreadedStream(callback, signal if signal is not None else np.zeros(0, np.float32), samplerate,
                           blocksize, speed=4.0)
        sd.opened.append({"device": device, "samplerate": samplerate, "blocksize": blocksize, "stream": s})
        return s

    def duplex_stream(device, samplerate, blocksize, channels, dtype, latency, callback):
        s = ThreadedStream(callback, signal if signal is not None else np.zeros(0, np.float32), samplerate,
                           blocksize, duplex=True, speed=4.0)
        sd.opened.append({"device": device, "samplerate": samplerate, "blocksize": blocksize, "stream": s})
        return s

    sd.InputStream = input_stream
    sd.Stream = duplex_stream
    return sd
