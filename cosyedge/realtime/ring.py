"""Bounded single-producer/single-consumer float32 ring buffer for audio callbacks.

The audio callback (PortAudio's thread) only copies into the ring with :meth:`RingBuffer.write`; the
worker thread reads fixed amounts with :meth:`RingBuffer.read`. Capacity is fixed at construction, so
memory never grows. When the producer outruns the consumer the **oldest** samples are dropped (the
worker catches up with live audio instead of falling further behind) and the loss is counted as an
overflow; reading more than is buffered is refused (the caller decides whether that is an underflow).

A ``threading.Condition`` guards the indices; a write holds it for one or two ``memcpy``s of one
device block (a few microseconds), which is what a real-time callback may afford in CPython.

Source: the classic SPSC ring (e.g. PortAudio ``pa_ringbuffer.c``), with drop-oldest overflow.
"""

from __future__ import annotations

import threading

import numpy as np

from cosyedge.errors import UsageError


class RingBuffer:
    """Fixed-capacity FIFO of float32 samples (mono), drop-oldest on overflow.

    Args:
        capacity (int): Samples held at most, >= 1 (e.g. 0.5 s at the device rate).
    Raises:
        UsageError: ``capacity`` < 1.

    Attributes:
        written (int): Samples offered to :meth:`write` since creation (kept or dropped).
        read_total (int): Samples returned by :meth:`read`.
        dropped (int): Samples lost to overflow (the oldest ones were overwritten).
        overflows (int): Writes that had to drop samples (one xrun each).
    """

    def __init__(self, capacity: int):
        if int(capacity) < 1:
            raise UsageError(f"ring buffer capacity must be >= 1 sample, got {capacity}")
        self.capacity = int(capacity)
        self._buf = np.zeros(self.capacity, dtype=np.float32)
        self._head = 0  # absolute index of the oldest buffered sample
        self._tail = 0  # absolute index one past the newest buffered sample
        self.cond = threading.Condition(threading.Lock())
        self.written = 0
        self.read_total = 0
        self.dropped = 0
        self.overflows = 0

    def __len__(self) -> int:
        return self._tail - self._head

    @property
    def free(self) -> int:
        """int: samples that can be written without dropping any."""
        return self.capacity - len(self)

    def write(self, x: np.ndarray) -> int:
        """Append samples; drop the oldest buffered ones when they do not fit. Never blocks for long.

        Args:
            x (np.ndarray): float32 (or castable) mono samples, shape (n,).
        Returns:
            int: samples dropped by this write (0 normally; > 0 is an overflow xrun).
        """
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        n = x.shape[0]
        if n == 0:
            return 0
        with self.cond:
            self.written += n
            lost = 0
            if n >= self.capacity:  # keep only the newest `capacity` samples
                lost = len(self) + n - self.capacity
                x = x[n - self.capacity:]
                n = self.capacity
                self._head = self._tail
            elif n > self.free:
                lost = n - self.free
                self._head += lost
            if lost:
                self.dropped += lost
                self.overflows += 1
            start = self._tail % self.capacity
            first = min(n, self.capacity - start)
            self._buf[start:start + first] = x[:first]
            if first < n:
                self._buf[: n - first] = x[first:]
            self._tail += n
            self.cond.notify()
            return lost

    def read(self, n: int, out: np.ndarray | None = None) -> np.ndarray | None:
        """Remove and return the ``n`` oldest samples, or None (nothing removed) when fewer are buffered.

        Args:
            n (int): Samples wanted, 0 <= n <= capacity.
            out (np.ndarray | None): float32 (n,) destination; a new array when None.
        Returns:
            np.ndarray | None: float32 (n,), oldest first; None if ``len(self) < n``.
        """
        with self.cond:
            if len(self) < n:
                return None
            out = np.empty(n, dtype=np.float32) if out is None else out
            start = self._head % self.capacity
            first = min(n, self.capacity - start)
            out[:first] = self._buf[start:start + first]
            if first < n:
                out[first:n] = self._buf[: n - first]
            self._head += n
            self.read_total += n
            return out

    def read_all(self, max_samples: int | None = None) -> np.ndarray:
        """Remove and return everything buffered (at most ``max_samples``), float32 (k,), maybe empty."""
        with self.cond:
            k = len(self) if max_samples is None else min(len(self), int(max_samples))
        return self.read(k)

    def wait(self, n: int, timeout_s: float) -> bool:
        """Block until at least ``n`` samples are buffered or ``timeout_s`` (seconds) passed.

        Returns:
            bool: True when ``n`` samples are available.
        """
        with self.cond:
            return self.cond.wait_for(lambda: len(self) >= n, timeout=timeout_s)

    def clear(self) -> None:
        """Drop everything buffered (not counted as overflow)."""
        with self.cond:
            self._head = self._tail
