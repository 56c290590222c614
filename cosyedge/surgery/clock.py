"""The walker's stream clock: the chunk's length, the stream's start and per-stream positions.

:class:`StreamClock` is the part of :class:`cosyedge.surgery.walker.Walker` that reads the chunk's shape (ticks,
batch, frames at a rate) and carries the counters a chunk graph needs to know where it is in the stream:

* :meth:`StreamClock.counter`: the tick counter state (float32 (N, 1)), saturating once past every user's delay;
* :meth:`StreamClock.position_counter`: a position counter per rate (int64 (N, 1), kind ``"position"``);
* :meth:`StreamClock.mask_preroll`: zero the frames of ``x`` that come before the stream's start (frames ``< delay``:
  a full-sequence graph sees zeros or nothing there);
* :meth:`StreamClock.before_frame` / :meth:`StreamClock.select`: the same counter as a bool flag (stream frames before
  a given frame) and a Where for any dtype (the stream's first frames of :mod:`cosyedge.surgery.rules.start`).

Source: sonos/tract ``pulse/src/ops/array/pad.rs`` (PulsePad: the stream's start is overwritten with the pad value).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge.artifacts import BATCH_DIM, BOOKKEEPING
from cosyedge.surgery.rules import Blocker

COUNTER = "counter"
"""str: :class:`~cosyedge.artifacts.StateSpec` kind of the tick counter."""


class StreamClock:
    """Chunk sizes, the tick and position counters and the stream-start masks for
    :class:`cosyedge.surgery.walker.Walker` (a mixin: it uses the walker's facts, delays and graph-building
    methods)."""

    def _init_clock(self) -> None:
        self._counter_in = None
        self._counter_max = 0
        self._masked: dict[str, Any] = {}  # mask_preroll() by tensor name
        self._ticks = None
        self._source_shape = None
        self._source_dims: dict[int, Any] = {}

    def source_shape(self) -> Any:
        """int64 (rank,): Shape of the tick source input in this chunk (built once, shared)."""
        if self._source_shape is None:
            name, _ = self.tick_source
            src = next(t for t in self.graph.inputs if t.name == name)
            self._source_shape = self.op("Shape", [src], f"{BOOKKEEPING}_source")
        return self._source_shape

    def _source_dim(self, axis: int) -> Any:
        """int64 (1,): axis ``axis`` of the tick source's shape in this chunk (built once per axis)."""
        if axis not in self._source_dims:
            self._source_dims[axis] = self.op("Gather", [self.source_shape(), self.const([axis])],
                                              f"{BOOKKEEPING}_source", {"axis": 0})
        return self._source_dims[axis]

    def ticks(self) -> Any:
        """Float32 scalar-like tensor (1,): input ticks in this chunk (time length of the tick source)."""
        if self._ticks is None:
            self._ticks = self.op("Cast", [self._source_dim(self.tick_source[1])], f"{BOOKKEEPING}_ticks",
                                  {"to": 1}, dtype=np.float32)
        return self._ticks

    def counter(self, delay: int, rate: Fraction) -> Any:
        """The tick counter state_in (float32 (N, 1): input ticks streamed so far), created on first use; it
        saturates once past ``delay`` frames at ``rate`` frames per tick (and every other user's)."""
        if self._counter_in is None:
            self._counter_in, _ = self.new_state([BATCH_DIM, 1], np.float32, COUNTER, "stream start")
        self._counter_max = max(self._counter_max, math.ceil(Fraction(delay) / rate))
        return self._counter_in

    def position_counter(self, rate: Fraction) -> Any:
        """The position counter state_in of time axes at ``rate`` frames per tick (int64 (N, 1): frames streamed so
        far by each stream, zeros at its start, kind ``"position"``), created on first use with its update
        ``state_out = state_in + this chunk's frames`` (it does not saturate)."""
        from cosyedge.surgery.rules.positions import POSITION

        if rate not in self.positions.counters:
            s_in, s_out = self.new_state([BATCH_DIM, 1], np.int64, POSITION, f"positions at {rate} frames per tick")
            base = f"{BOOKKEEPING}_positions"
            self.graph.layer(op="Add", name=self.name(f"{base}/Add"),
                             inputs=[s_in, self.frames_tensor(rate, base)], outputs=[s_out])
            self.positions.counters[rate] = s_in
        return self.positions.counters[rate]

    def stream_sizes(self, sizes: Any, out: Any, base: str) -> Any:
        """A shape vector for the chunk graph in place of ``sizes`` (a shape computed from the sequence length,
        e.g. ``view(-1, 1, time)``): every entry as in the full graph except the entry of ``out``'s time axis,
        which becomes this chunk's frames of ``out`` (ticks x frames per tick). The full graph's value there
        counts the sequence's frames, edge frames included, which a chunk does not have.

        Raises:
            Blocker: ``sizes`` is not a 1-D shape, or an entry other than time also changes with the length.
        """
        fs, fo = self.fact(sizes), self.fact(out)
        v1, v2 = fs.values1, fs.values2
        if v1 is None or v1.ndim != 1 or len(v1) != len(fo.shape1):
            raise Blocker("its shape is computed from the sequence length in a form streamify cannot follow")
        t = fo.axis
        if any(v1[i] != v2[i] for i in range(len(v1)) if i != t):
            raise Blocker("its shape changes with the sequence length on an axis other than time")
        b = self.batch_axis(out) if out.name in self.batch_axes or v1[0] == 1 else None
        parts = []
        for i, v in enumerate(v1.tolist()):
            if i == t:
                frames = self.frames_tensor(fo.rate, base)
                if out.name in self.batch_axes and b == t:  # batch folded into time (N x frames: per-frame RNNs)
                    frames = self.op("Mul", [frames, self.batch_tensor(base)], base)
                parts.append(frames)
            elif i == b and v != -1:  # the batch: this chunk's streams (the probes ran batch 1) x what it folds
                n = self.batch_tensor(base)
                parts.append(n if v == 1 else self.op("Mul", [n, self.const([v])], base))
            else:
                parts.append(self.const([v]))
        return self.op("Concat", parts, f"{base}/{BOOKKEEPING}_shape", {"axis": 0}, dtype=np.int64)

    def batch_tensor(self, base: str) -> Any:
        """int64 (1,): the batch size of this chunk (axis 0 of the tick source)."""
        return self._source_dim(0)

    def frames_tensor(self, rate: Fraction, base: str) -> Any:
        """int64 (1,): frames at ``rate`` frames per tick in this chunk (ticks x rate)."""
        n = self._source_dim(self.tick_source[1])
        b = f"{base}/{BOOKKEEPING}_frames"
        if rate.numerator != 1:
            n = self.op("Mul", [n, self.const([rate.numerator])], b)
        if rate.denominator != 1:
            n = self.op("Div", [n, self.const([rate.denominator])], b)
        return n

    def before_frame(self, x: Any, frames: int, base: str, keep: bool = False) -> Any:
        """bool, broadcastable to ``x``: True at the stream frames of ``x`` numbered ``< frames`` from the stream's
        start (``counter * rate + arange(chunk frames) < frames``; (N, frames) laid out on ``x``'s batch and time axes,
        size 1 elsewhere). The counter state holds the ticks streamed so far (float32 (N, 1)) and saturates past
        ``frames`` (and every other user's). ``keep``: float32 1.0 at the other frames and 0.0 there instead (a
        factor that zeroes the early frames: :meth:`mask_preroll` of a float tensor)."""
        f = self.fact(x)
        axis, b, rank = f.axis, self.batch_axis(x), len(f.shape1)
        counter = self.counter(frames, f.rate)
        base = f"{base}/{BOOKKEEPING}_mask"
        shape = self.op("Shape", [x], base)
        n = self.op("Gather", [shape, self.const([axis])], base, {"axis": 0})
        nf = self.op("Cast", [self.unsqueeze(n, [0], base, squeeze=True)], base, {"to": 1}, dtype=np.float32)
        rng = self.op("Range", [self.const(0.0, dtype=np.float32), nf, self.const(1.0, dtype=np.float32)], base,
                      dtype=np.float32)
        start = self.op("Mul", [counter, self.const([[float(f.rate)]], dtype=np.float32)], base)
        idx = self.op("Add", [start, rng], base)  # (N, frames)
        # Less exists in every opset (GreaterOrEqual only from 12)
        flag = self.op("Less", [idx, self.const([[float(frames)]], dtype=np.float32)], base,
                       dtype=None if keep else bool)
        if keep:
            flag = self.op("Cast", [self.op("Not", [flag], base)], base, {"to": 1}, dtype=np.float32)
        if b > axis:
            flag = self.op("Transpose", [flag], base, {"perm": [1, 0]}, dtype=None if keep else bool)
        others = [i for i in range(rank) if i not in (axis, b)]
        if others:
            flag = self.unsqueeze(flag, others, base)
        return flag

    def select(self, cond: Any, a: Any, b: Any, base: str, like: Any = None) -> Any:
        """``Where(cond, a, b)`` for any dtype of ``a`` and ``b`` (``like``: the tensor whose fact the result takes):
        ONNX Runtime has no bool Where, so a bool one is ``Or(And(cond, a), And(Not(cond), b))``."""
        dt = np.dtype(self.dtype_of(like if like is not None else a))
        if dt == bool:
            keep = self.op("And", [cond, a], base, dtype=bool)
            other = self.op("And", [self.op("Not", [cond], base, dtype=bool), b], base, dtype=bool)
            return self.op("Or", [keep, other], base, like=like, dtype=bool)
        return self.op("Where", [cond, a, b], base, like=like, dtype=dt)

    def mask_preroll(self, x: Any, base: str) -> Any:
        """Return ``x`` with its frames before the stream's start set to zero (False for a bool ``x``; stream frames
        ``< delay``): a float ``x`` times ``counter * rate + arange(frames) >= delay`` (as 0/1), any other dtype
        ``Where(... < delay, 0, x)`` (:meth:`before_frame`; a bool one as And/Or, :meth:`select`). No-op for
        delay <= 0."""
        d = self.delay_of(x)
        if d is None or d <= 0:
            return x
        if x.name in self._masked:
            return self._masked[x.name]
        dt = np.dtype(self.dtype_of(x))
        if dt.kind == "f":  # a float tensor times the kept frames (0/1): the graphs earlier releases wrote
            out = self.op("Mul", [x, self.before_frame(x, d, base, keep=True)], f"{base}/{BOOKKEEPING}_mask", like=x)
        else:
            early = self.before_frame(x, d, base)
            out = self.select(early, self.const(np.zeros((), dtype=dt), base, dtype=dt), x,
                              f"{base}/{BOOKKEEPING}_mask", like=x)
        self.set_delay(out, d)
        self._masked[x.name] = out
        return out

    def ticks_for_frames(self, rate: Fraction, frames: int) -> int:
        """The input length (ticks, int) that gives at least ``frames`` frames at ``rate`` frames per tick and a whole
        number of frames on every measured time axis (a multiple of every rate's denominator)."""
        q = math.lcm(1, *[f.rate.denominator for f in self.facts.values() if f.is_stream or f.axes2])
        t = math.ceil(Fraction(frames) / rate)
        return -(-t // q) * q
