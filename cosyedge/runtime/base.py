"""The one streaming interface: :class:`StreamSession` (one chunk in, one chunk out, state carried).

Backends (:class:`~cosyedge.runtime.ort.OrtStreamSession`, later ``TrtStreamSession``) override only
the ``*_impl`` hooks. The base class owns the life cycle (``activate``/``deactivate``/``with``), input
validation and per-chunk latency bookkeeping, so every backend behaves the same on bad input.

Life cycle::

    session = OrtStreamSession("model.stream.onnx")   # stores config, reads metadata only
    with session:                                      # activate(): session, buffers, zero state
        y = session.push(chunk)["enhanced"]            # (N, 1, chunk_samples) float32 -> same, yours to keep
        session.reset()                                # new stream: zero state
    # deactivate(): everything heavy is released

Source: Polygraphy ``polygraphy/backend/base/runner.py`` (activate/infer/deactivate hooks).
"""

from __future__ import annotations

import abc
import time

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.errors import UsageError
from cosyedge.log import plural

DEFAULT_MAX_LATENCY_RECORDS = 1 << 16
"""int: per-chunk latencies kept by default (a ring buffer; 65536 chunks = 11 min at 10 ms)."""


class LatencyLog:
    """The last ``size`` latencies in ms, in a preallocated ring (memory stays bounded however long a
    stream runs).

    Args:
        size (int): K, the number of records kept (>= 1).
    """

    def __init__(self, size: int):
        self._buf = np.zeros(int(size), dtype=np.float64)
        self._n = 0

    def add(self, ms: float) -> None:
        """Record one latency in ms (overwrites the oldest once K are kept)."""
        self._buf[self._n % self._buf.size] = ms
        self._n += 1

    def values(self) -> np.ndarray:
        """np.ndarray: float64 (k,), k <= K, the kept latencies in ms, oldest first (a copy)."""
        n, size = self._n, self._buf.size
        if n <= size:
            return self._buf[:n].copy()
        i = n % size
        return np.concatenate([self._buf[i:], self._buf[:i]])

    def clear(self) -> None:
        """Forget all records."""
        self._n = 0


class StreamSession(abc.ABC):
    """Abstract streaming session over a model that follows the cosyedge stream contract.

    Args:
        contract (StreamContract): The model's stream contract (names, sample rate, hop, states).
        chunk_samples (int | None): Samples per pushed chunk; a positive multiple of
            ``contract.total_stride``. Defaults to ``contract.hop_samples`` (10 ms for the reference).
        batch (int): Number of independent streams pushed together (axis ``N``), >= 1. Defaults to 1.
        max_latency_records (int): Size of the per-chunk latency ring buffer (chunks), >= 1.
    Raises:
        UsageError: ``chunk_samples`` is not a positive multiple of the total stride, or ``batch`` < 1.
    """

    def __init__(self, contract: StreamContract, chunk_samples: int | None = None, batch: int = 1,
                 max_latency_records: int = DEFAULT_MAX_LATENCY_RECORDS):
        self.contract = contract
        self.chunk_samples = int(contract.hop_samples if chunk_samples is None else chunk_samples)
        contract.check_chunk(self.chunk_samples)
        if int(batch) < 1:
            raise UsageError(f"batch must be >= 1, got {batch}")
        if int(max_latency_records) < 1:
            raise UsageError(f"max_latency_records must be >= 1, got {max_latency_records}")
        self.batch = int(batch)
        self.is_active = False
        self.chunks_pushed = 0
        self._stream_samples = 0  # samples pushed since the stream started (activate / reset)
        self._lat = LatencyLog(max_latency_records)

    # ------------------------------------------------------------------ hooks for backends
    @abc.abstractmethod
    def activate_impl(self) -> None:
        """Create the backend session and buffers and zero the state (called by :meth:`activate`)."""

    @abc.abstractmethod
    def deactivate_impl(self) -> None:
        """Release the backend session and buffers (called by :meth:`deactivate`)."""

    @abc.abstractmethod
    def reset_impl(self) -> None:
        """Set every state to its initial value (called by :meth:`reset` on an active session)."""

    @abc.abstractmethod
    def push_impl(self, chunk: np.ndarray) -> dict[str, np.ndarray]:
        """Run one validated chunk, float32 (batch, 1, chunk_samples); return outputs by ONNX name.

        The arrays may be the session's own buffers, overwritten by the next chunk: :meth:`push` copies them
        unless its caller opted in with ``copy=False``. Return a new dict on every call (callers may change it).
        """

    def state_impl(self) -> dict[str, np.ndarray]:
        """Return copies of the current states by state input name (override; default: none)."""
        return {}

    # ------------------------------------------------------------------ life cycle
    def activate(self) -> "StreamSession":
        """Create the backend session and buffers; the state starts at its initial value (zeros).

        Returns:
            StreamSession: self. A second call on an active session does nothing.
        """
        if not self.is_active:
            self.activate_impl()
            self.is_active = True
            self._stream_samples = 0
        return self

    def deactivate(self) -> None:
        """Release the backend session and buffers; a no-op when inactive."""
        if self.is_active:
            try:
                self.deactivate_impl()
            finally:
                self.is_active = False

    def __enter__(self) -> "StreamSession":
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    def reset(self) -> None:
        """Start a new stream: every state back to its initial value (zeros). No-op when inactive
        (:meth:`activate` starts from zero state anyway). Latency records are kept."""
        if self.is_active:
            self.reset_impl()
            self._stream_samples = 0

    # ------------------------------------------------------------------ streaming
    def push(self, chunk: np.ndarray | dict, copy: bool = True) -> dict[str, np.ndarray]:
        """Process one chunk of audio (or of every streaming input) and advance the state.

        Args:
            chunk (np.ndarray | dict[str, np.ndarray]): float32 PCM, shape (batch, 1, chunk_samples), range
                [-1, 1], finite; for a model whose inputs are not one waveform (``contract.is_audio`` False,
                e.g. features), a dict with one array per ``contract.stream_inputs`` entry, each of its shape
                with ``N`` = batch and ``T`` = its frames per chunk (:meth:`StreamIO.frames`). Then every
                streaming output is returned.
            copy (bool): ``True`` (default): every returned array is a new array the caller owns; keeping it
                (``outs.append(session.push(x)["enhanced"])``) is safe. ``False``: opt in to the session's
                preallocated output buffers (no copy: on the reference model, one (1, 1, 160) float32 output, the
                median push is 2.0 us (0.9 %) faster than 281 us, ``docs/bench/push_copy.json``): they are
                overwritten by the next push of this session (and released by :meth:`deactivate`), so use or
                copy the values before pushing again.
        Returns:
            dict[str, np.ndarray]: model outputs by ONNX name (without states), e.g.
            ``{contract.output: (batch, 1, chunk_samples) float32}``; for a model that does not map one
            waveform to one waveform, every streaming output of its shape (``N`` = batch, ``T`` = its frames
            per chunk) and dtype. Owned arrays (C-contiguous copies) unless ``copy=False``. The dict is new on
            every call.
        Raises:
            UsageError: the session is inactive; ``chunk`` is not a float32 ndarray of that shape, its
                length is not a multiple of the total stride or not ``chunk_samples``, or it holds
                NaN/Inf (for a dict: a missing or unknown input, or one of another shape or dtype).
        """
        if not self.is_active:
            raise UsageError("push() on an inactive session: call activate() first or use 'with session:'")
        if isinstance(chunk, dict) or not self.contract.audio_in:
            self._check_inputs(chunk)
        else:
            self._check_chunk(chunk)
        self.contract.check_stream_length(self._stream_samples + self.chunk_samples, "the stream",
                                          "start a new stream (reset()) or cut the input")
        self._stream_samples += self.chunk_samples
        t0 = time.perf_counter()
        out = self.push_impl(chunk)
        if copy:
            out = {name: a.copy() for name, a in out.items()}
        ms = (time.perf_counter() - t0) * 1000.0
        self._lat.add(ms)
        self.chunks_pushed += 1
        return out

    def state(self) -> dict[str, np.ndarray]:
        """Return copies of the current states by state input name, e.g. ``{"state_in.00": (N, C, K)}``.

        Raises:
            UsageError: the session is inactive.
        """
        if not self.is_active:
            raise UsageError("state() on an inactive session: call activate() first")
        return self.state_impl()

    @property
    def latencies_ms(self) -> np.ndarray:
        """np.ndarray: float64 (K,), wall time of the last K pushes in ms (perf_counter around
        ``push_impl`` and the copy of its outputs, none with ``push(..., copy=False)``), oldest first;
        K <= ``max_latency_records`` so memory stays bounded."""
        return self._lat.values()

    def clear_latencies(self) -> None:
        """Forget the recorded per-chunk latencies."""
        self._lat.clear()

    # ------------------------------------------------------------------ helpers
    def input_shape(self, io) -> tuple[int, ...]:
        """Shape (tuple[int]) a pushed array for stream input ``io`` (StreamIO) must have."""
        return io.concrete_shape(self.batch, io.frames(self.chunk_samples, self.contract.hop_samples))

    def _check_inputs(self, feeds) -> None:
        if not isinstance(feeds, dict):
            names = [i.name for i in self.contract.stream_inputs]
            raise UsageError(f"this model streams inputs {names} (not one waveform): push a dict of arrays by name")
        want = {i.name: i for i in self.contract.stream_inputs}
        missing = sorted(set(want) - set(feeds))
        extra = sorted(set(feeds) - set(want))
        if missing or extra:
            raise UsageError(f"push() needs exactly the inputs {sorted(want)}: missing {missing}, unknown {extra}")
        for name, io in want.items():
            a = feeds[name]
            shape = self.input_shape(io)
            if not isinstance(a, np.ndarray) or a.shape != shape:
                got = a.shape if isinstance(a, np.ndarray) else type(a).__name__
                raise UsageError(f"input '{name}' has shape {got}, expected {shape} (shape {io.shape}, "
                                 f"{io.frames(self.chunk_samples, self.contract.hop_samples)} frames per chunk of "
                                 f"{self.chunk_samples} samples)")
            if a.dtype != np.dtype(io.dtype):
                raise UsageError(f"input '{name}' dtype is {a.dtype}, expected {io.dtype}")
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise UsageError(f"input '{name}' holds {int((~np.isfinite(a)).sum())} NaN/Inf value(s)")

    def _check_chunk(self, chunk: np.ndarray) -> None:
        if not isinstance(chunk, np.ndarray):
            raise UsageError(f"chunk must be a numpy array, got {type(chunk).__name__}")
        want = (self.batch, 1, self.chunk_samples)
        if chunk.dtype != np.float32:
            raise UsageError(f"chunk dtype is {chunk.dtype}, expected float32 (use x.astype(np.float32))")
        if chunk.ndim != 3 or chunk.shape[:2] != want[:2]:
            raise UsageError(f"chunk shape is {chunk.shape}, expected (batch, 1, samples) = {want}")
        if chunk.shape[2] != self.chunk_samples:
            self.contract.check_chunk(chunk.shape[2])
            raise UsageError(
                f"chunk has {plural(chunk.shape[2], 'sample')} but this session streams chunks of {self.chunk_samples} "
                f"(create the session with chunk_samples={chunk.shape[2]})"
            )
        if not np.isfinite(chunk).all():
            bad = np.flatnonzero(~np.isfinite(chunk))
            raise UsageError(f"chunk holds {bad.size} NaN/Inf sample(s) (first at flat index {bad[0]})")
