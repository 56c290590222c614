"""RingBuffer: FIFO order across wrap-around, drop-oldest overflow accounting, bounded memory."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.realtime.ring import RingBuffer


def test_fifo_order_with_wraparound_matches_a_deque():
    rng = np.random.default_rng(0)
    ring, ref = RingBuffer(37), collections.deque()
    counter = 0
    for _ in range(500):
        if rng.random() < 0.55:
            n = int(rng.integers(0, 12))
            x = np.arange(counter, counter + n, dtype=np.float32)
            counter += n
            if n <= ring.free:
                assert ring.write(x) == 0
                ref.extend(x.tolist())
        else:
            n = int(rng.integers(0, 12))
            got = ring.read(n)
            if n > len(ref):
                assert got is None
            else:
                want = [ref.popleft() for _ in range(n)]
                np.testing.assert_array_equal(got, np.array(want, np.float32))
        assert len(ring) == len(ref)
    assert ring.overflows == 0 and ring.dropped == 0


def test_overflow_drops_oldest_and_counts():
    ring = RingBuffer(10)
    ring.write(np.arange(8, dtype=np.float32))
    assert ring.write(np.arange(8, 13, dtype=np.float32)) == 3  # 13 samples offered, 10 fit
    assert (ring.overflows, ring.dropped, ring.written, len(ring)) == (1, 3, 13, 10)
    np.testing.assert_array_equal(ring.read(10), np.arange(3, 13, dtype=np.float32))
    # one write longer than the whole ring keeps its newest `capacity` samples
    ring.write(np.arange(4, dtype=np.float32))
    assert ring.write(np.arange(100, 125, dtype=np.float32)) == 4 + 15
    np.testing.assert_array_equal(ring.read_all(), np.arange(115, 125, dtype=np.float32))
    assert (ring.overflows, ring.dropped, ring.read_total) == (2, 22, 20)


def test_read_all_limit_wait_and_clear():
    ring = RingBuffer(16)
    assert ring.read_all().size == 0
    assert ring.wait(1, timeout_s=0.01) is False
    ring.write(np.ones(6, np.float32))
    assert ring.read_all(max_samples=4).size == 4 and len(ring) == 2
    ring.clear()
    assert len(ring) == 0 and ring.overflows == 0
    threading.Timer(0.05, lambda: ring.write(np.ones(3, np.float32))).start()
    assert ring.wait(3, timeout_s=5.0) is True


def test_bad_capacity():
    with pytest.raises(UsageError, match="capacity must be >= 1"):
        RingBuffer(0)
