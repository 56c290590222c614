"""Stream whole arrays through a :class:`~cosyedge.runtime.base.StreamSession`, chunk by chunk.

* :func:`stream_array` is the raw streaming output: fixed chunks, the last one zero-padded, output
  trimmed to the input length, **no delay compensation** (sample t of the output depends on input
  samples <= t and is ``delay_samples`` late).
* :func:`enhance_array` is for files: it appends ``delay_samples`` zeros to flush the tail and drops the
  first ``delay_samples`` output samples, so the result is aligned with the input sample for sample.
* :class:`DelayCompensator` is that compensation as a stream (``feed``/``finish`` at the model rate), the
  one used by :func:`enhance_array`, ``cosyedge run`` (:func:`cosyedge.enhance.enhance_file`) and the live
  path (:class:`cosyedge.realtime.enhancer.RealtimeEnhancer`, with no delay to drop); resampling stays
  with each caller.

Both report duration, elapsed time, real-time factor (RTF = processing time / audio duration) and the
per-chunk latency percentiles when ``return_stats=True``.

Source: k2-fsa/sherpa-onnx ``python-api-examples/online-decode-files.py`` (fixed chunks, tail padding,
final report with RTF).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.runtime.base import StreamSession


@dataclasses.dataclass
class StreamStats:
    """Timing of one streamed array.

    Attributes:
        duration_s (float): Audio duration streamed, seconds (input length / model sample rate).
        elapsed_s (float): Wall time of the streaming loop, seconds (perf_counter, Python overhead included).
        rtf (float): Real-time factor = elapsed_s / duration_s (< 1 is faster than real time).
        latency_ms_p50 (float): Median per-chunk ``push`` time, ms.
        latency_ms_p99 (float): 99th percentile per-chunk ``push`` time, ms.
        chunks (int): Chunks pushed.
        chunk_samples (int): Samples per chunk.
        delay_samples (int): Model delay (samples at the model rate); compensated by :func:`enhance_array`.
        sample_rate_hz (int): Model sample rate, Hz.
    """

    duration_s: float
    elapsed_s: float
    rtf: float
    latency_ms_p50: float
    latency_ms_p99: float
    chunks: int
    chunk_samples: int
    delay_samples: int
    sample_rate_hz: int

    def as_dict(self) -> dict:
        """Return the fields as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)


def require_waveform_model(contract, where: str, action: str = "run on an audio file") -> None:
    """Refuse a model that does not map one waveform to one waveform (``contract.is_audio``).

    Args:
        contract (StreamContract): The model's contract.
        where (str): The model as the message names it (its path).
        action (str): What cannot be done, for the message (``"run on an audio file"``: ``cosyedge run``).
    Raises:
        UsageError: the model streams other inputs or outputs (features, several inputs). One line: the inputs
            and outputs with their shapes, why (an audio file is one waveform; a feature input is not audio)
            and the exact Python call that streams it (:func:`cosyedge.runtime.feeds.python_api_call`).
    """
    if not contract.is_audio:
        from cosyedge.runtime import feeds

        hop = contract.hop_samples
        ins = [feeds.describe_input(i, contract) for i in contract.stream_inputs]
        outs = [f"{o.name}{o.shape} ({o.frames_per_hop} frames per {hop}-sample hop)" for o in contract.stream_outputs]
        bad_in = feeds.feature_inputs(contract)
        first = feeds.primary_input(contract).name
        parts = ", ".join(f"'{i.name}': {i.name}" for i in feeds.partner_inputs(contract))
        if len(ins) > 1:
            why = f"it takes {len(ins)} inputs and an audio file is one waveform"
        elif bad_in:
            why = f"its input '{bad_in[0].name}' is not a waveform"
        else:
            why = "its output is not a waveform"
        raise UsageError(f"{where} cannot {action}: it streams inputs {', '.join(ins)} to outputs {', '.join(outs)}, "
                         f"not one waveform (N, 1, T) to another ({why}); stream it from Python with "
                         f"{feeds.python_api_call(contract, where)}"
                         + (f" or, for whole arrays, cosyedge.runtime.stream_array(session, {first}, partners="
                            f"{{{parts}}})" if parts and not bad_in else "")
                         + " (cosyedge.runtime.StreamPool for many streams)"
                         + (", or wrap its features in a recipe that takes and gives audio" if bad_in else ""))


def _as_batch(session: StreamSession, x: np.ndarray, multi: bool = False) -> np.ndarray:
    if not multi:
        require_waveform_model(session.contract, str(getattr(session, "model_path", "the model")),
                               "be streamed from one audio array")
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] != session.batch:
        raise UsageError(f"expected audio of shape (T,) or (batch={session.batch}, T), got {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise UsageError(f"audio dtype is {x.dtype}, expected float32 in [-1, 1]")
    return x.astype(np.float32, copy=False)


def _multi_waveform(session: StreamSession) -> bool:
    """bool: the session's model streams several waveform inputs (the primary plus partners) to a waveform
    ``contract.output``; raises UsageError (naming them) when one of its inputs is a feature input."""
    from cosyedge.runtime import feeds

    c = session.contract
    if not feeds.partner_inputs(c):
        return False
    where = str(getattr(session, "model_path", "the model"))
    feeds.require_waveform_inputs(c, where, "stream_array", "stream it with " + feeds.python_api_call(c, where))
    out = next((o for o in c.stream_outputs if o.name == c.output), None)
    if out is None or not feeds.is_waveform(out, c):
        require_waveform_model(c, where, "be streamed from audio arrays")
    return True


def stream_array(session: StreamSession, x: np.ndarray, return_stats: bool = False,
                 partners: dict[str, np.ndarray] | None = None):
    """Stream ``x`` through ``session`` from zero state and return the raw model output.

    The session is reset first (a new stream). An inactive session is activated for the call and
    deactivated afterwards. A model with several waveform inputs (e.g. ``audio`` and ``ref``, each (N, 1, T))
    takes ``x`` on its primary input (:func:`cosyedge.runtime.feeds.primary_input`) and one signal per other
    input in ``partners``.

    Args:
        session (StreamSession): Session (its ``batch`` must match ``x``).
        x (np.ndarray): float32 PCM at the model sample rate, shape (T,) or (batch, T), any T >= 0.
        return_stats (bool): Also return a :class:`StreamStats`.
        partners (dict[str, np.ndarray] | None): Multi-input models only: input name -> float32 (T',) or
            (batch, T') waveform, cut or zero-padded to T (:func:`cosyedge.runtime.feeds.partner_arrays`).
    Returns:
        np.ndarray | tuple[np.ndarray, StreamStats]: float32 output ``contract.output`` with the shape of
        ``x``, delayed by ``session.contract.delay_samples`` (not compensated).
    Raises:
        UsageError: bad shape/dtype, NaN/Inf samples (from :meth:`StreamSession.push`); a model that does not
            give a waveform, or has a feature input; a partner input without a signal, or ``partners`` for
            an input that is not one.
    """
    from cosyedge.runtime import feeds

    multi = _multi_waveform(session)
    if partners and not multi:
        raise UsageError(f"partners {sorted(partners)} given, but {getattr(session, 'model_path', 'the model')} "
                         f"streams one waveform input")
    xb = _as_batch(session, x, multi)
    n, t = xb.shape
    c = session.chunk_samples
    chunks = -(-t // c)
    xp = np.zeros((n, 1, chunks * c), dtype=np.float32)
    xp[:, 0, :t] = xb
    yp = np.empty_like(xp)
    out_name = session.contract.output
    others = {}
    if multi:
        where = str(getattr(session, "model_path", "the model"))
        for name, p in feeds.partner_arrays(session.contract, partners, chunks * c, where).items():
            others[name] = np.zeros_like(xp)
            others[name][...] = p.reshape(-1, 1, chunks * c)
            others[name][:, :, t:] = 0.0
        first = feeds.primary_input(session.contract).name
    owns = not session.is_active
    if owns:
        session.activate()
    try:
        session.reset()
        t0 = time.perf_counter()
        for i in range(chunks):
            sl = slice(i * c, (i + 1) * c)
            if others:
                feed = {first: xp[:, :, sl], **{k: v[:, :, sl] for k, v in others.items()}}
                yp[:, :, sl] = session.push(feed, copy=False)[out_name]
            else:
                yp[:, :, sl] = session.push(xp[:, :, sl], copy=False)[out_name]
        elapsed = time.perf_counter() - t0
        lat = session.latencies_ms[-chunks:] if chunks else np.zeros(0)
    finally:
        if owns:
            session.deactivate()
    y = yp[:, 0, :t]
    y = y[0] if np.ndim(x) == 1 else y
    if not return_stats:
        return y
    sr = session.contract.sample_rate_hz
    duration = t / sr
    stats = StreamStats(
        duration_s=duration,
        elapsed_s=elapsed,
        rtf=elapsed / duration if duration > 0 else 0.0,
        latency_ms_p50=float(np.percentile(lat, 50)) if lat.size else 0.0,
        latency_ms_p99=float(np.percentile(lat, 99)) if lat.size else 0.0,
        chunks=chunks,
        chunk_samples=c,
        delay_samples=session.contract.delay_samples,
        sample_rate_hz=sr,
    )
    return y, stats


def enhance_array(session: StreamSession, x: np.ndarray, return_stats: bool = False):
    """Stream ``x`` and compensate the model delay, so the output is aligned with the input.

    ``delay_samples`` zeros are appended to flush the tail and the first ``delay_samples`` output
    samples are dropped (:class:`DelayCompensator`): for a model that is a pure delay, the output equals
    the input.

    Args:
        session (StreamSession): Session (``batch`` must match ``x``).
        x (np.ndarray): float32 PCM at the model sample rate, shape (T,) or (batch, T).
        return_stats (bool): Also return a :class:`StreamStats` (duration is that of ``x``).
    Returns:
        np.ndarray | tuple[np.ndarray, StreamStats]: float32, same shape as ``x``.
    Raises:
        UsageError: bad shape/dtype or NaN/Inf samples.
    """
    xb = _as_batch(session, x)
    out_name = session.contract.output
    comp = DelayCompensator(lambda xc: session.push(xc, copy=False)[out_name], session.chunk_samples,
                            session.contract.delay_samples, batch=xb.shape[0])
    owns = not session.is_active
    if owns:
        session.activate()
    try:
        session.reset()
        t0 = time.perf_counter()
        head = comp.feed(xb)
        y = np.concatenate([head, comp.finish()], axis=1)
        elapsed = time.perf_counter() - t0
        chunks = comp.chunks
        lat = session.latencies_ms[-chunks:] if chunks else np.zeros(0)
    finally:
        if owns:
            session.deactivate()
    y = y[0] if np.ndim(x) == 1 else y
    if not return_stats:
        return y
    sr = session.contract.sample_rate_hz
    duration = xb.shape[1] / sr
    return y, StreamStats(
        duration_s=duration,
        elapsed_s=elapsed,
        rtf=elapsed / duration if duration > 0 else 0.0,
        latency_ms_p50=float(np.percentile(lat, 50)) if lat.size else 0.0,
        latency_ms_p99=float(np.percentile(lat, 99)) if lat.size else 0.0,
        chunks=chunks,
        chunk_samples=session.chunk_samples,
        delay_samples=session.contract.delay_samples,
        sample_rate_hz=sr,
    )


class DelayCompensator:
    """Stream model-rate audio through fixed chunks and compensate the model delay.

    :meth:`feed` pushes every whole chunk it can make (the rest waits for the next call), drops the first
    ``delay_samples`` outputs and returns the others; :meth:`finish` pushes ``delay_samples`` zeros plus the
    last chunk's zero padding and returns the outputs up to the input's length. The outputs of all calls,
    concatenated, are the model output aligned with the input, sample for sample, with the input's length
    (for a model that is a pure delay, the input itself). What the model sees does not depend on how the
    input is split between calls. Resampling stays with the caller.

    Args:
        push (Callable[[np.ndarray], np.ndarray]): Runs one chunk: float32 (batch, 1, chunk_samples) in (a
            buffer reused between calls), the model output float32 (batch, 1, chunk_samples) out, e.g.
            ``lambda x: session.push(x, copy=False)[contract.output]`` (it may return a buffer the next call
            reuses: it is copied at once).
        chunk_samples (int): Samples per chunk at the model rate.
        delay_samples (int): Leading outputs to drop, the contract's ``delay_samples``; 0 drops none (the
            live path, whose output is heard as it comes, ``delay_samples`` late).
        batch (int): Streams in parallel (rows of the arrays fed).
    Attributes:
        fed (int): Input samples fed per row (not counting the flush zeros).
        kept (int): Output samples returned per row.
        dropped (int): Leading output samples dropped per row (at most ``delay_samples``).
        chunks (int): Chunks pushed.
    Raises:
        UsageError: ``chunk_samples`` < 1 or ``delay_samples`` < 0.

    Source: k2-fsa/sherpa-onnx ``python-api-examples/online-decode-files.py`` (tail padding; here the
    padding also flushes the model's look-ahead).
    """

    def __init__(self, push: Callable[[np.ndarray], np.ndarray], chunk_samples: int, delay_samples: int,
                 batch: int = 1):
        if int(chunk_samples) < 1 or int(delay_samples) < 0:
            raise UsageError(f"delay compensation needs chunk_samples >= 1 and delay_samples >= 0, got "
                             f"{chunk_samples} and {delay_samples}")
        self.push, self.chunk, self.delay, self.batch = push, int(chunk_samples), int(delay_samples), int(batch)
        self.buf = np.zeros((self.batch, 0), np.float32)  # input not yet pushed (< one chunk)
        self.x = np.zeros((self.batch, 1, self.chunk), np.float32)
        self.fed = self.kept = self.dropped = self.chunks = 0

    @property
    def pending(self) -> int:
        """int: input samples per row waiting for a whole chunk (< ``chunk_samples``)."""
        return self.buf.shape[1]

    def feed(self, x: np.ndarray) -> np.ndarray:
        """Stream ``x``: float32 (t,) (batch 1) or (batch, t), model rate, any t >= 0.

        Returns:
            np.ndarray: float32 outputs now known, after the dropped delay, (n,) or (batch, n) like ``x``.
        """
        x2 = x[None, :] if x.ndim == 1 else x
        self.fed += x2.shape[1]
        y = self._run(x2, limit=None)
        return y[0] if x.ndim == 1 else y

    def finish(self, ndim: int = 2) -> np.ndarray:
        """Flush the tail: push ``delay_samples`` zeros and the last chunk's padding.

        Args:
            ndim (int): 1 to return (n,) (batch 1), 2 for (batch, n).
        Returns:
            np.ndarray: float32, the last outputs, so that ``kept == fed`` afterwards.
        """
        pad = (-(self.pending + self.delay)) % self.chunk
        y = self._run(np.zeros((self.batch, self.delay + pad), np.float32), limit=self.fed)
        return y[0] if ndim == 1 else y

    def _run(self, xm: np.ndarray, limit: int | None) -> np.ndarray:
        """Push every whole chunk of buffer + ``xm``; keep outputs after the delay, at most ``limit`` in all."""
        xs = np.concatenate([self.buf, xm], axis=1) if self.buf.shape[1] else xm
        n = xs.shape[1] - xs.shape[1] % self.chunk
        self.buf = xs[:, n:].copy()
        y = np.empty((self.batch, n), np.float32)
        x, c = self.x, self.chunk
        for i in range(0, n, c):
            x[:, 0, :] = xs[:, i:i + c]
            y[:, i:i + c] = self.push(x)[:, 0]
        self.chunks += n // c
        drop = min(self.delay - self.dropped, n)
        self.dropped += drop
        y = y[:, drop:]
        if limit is not None:
            y = y[:, :max(limit - self.kept, 0)]
        self.kept += y.shape[1]
        return y
