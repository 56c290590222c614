"""Stream whole arrays through a :class:`~cosyedge.runtime.base.StreamSession`, chunk by chunk.

* :func:`stream_array` is the raw streaming output: fixed chunks, the last one zero-padded, output
  trimmed to the input length, **no delay compensation** (sample t of the output depends on input
  samples <= t and is ``delay_samples`` late).
* :func:`enhance_array` is for files: it appends ``delay_samples`` zeros to flush the tail and drops the
  first ``delay_samples`` output samples, so the result is aligned with the input sample for sample.

Both report duration, elapsed time, real-time factor (RTF = processing time / audio duration) and the
per-chunk latency percentiles when ``return_stats=True``.

Source: k2-fsa/sherpa-onnx ``python-api-examples/online-decode-files.py`` (fixed chunks, tail padding,
final report with RTF).
"""

from __future__ import annotations

import dataclasses
import time

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


def require_waveform_model(contract, where: str) -> None:
    """Refuse a model that does not map one waveform to one waveform (``contract.is_audio``).

    Raises:
        UsageError: the model streams other inputs or outputs (features, several inputs): the message
            names them.
    """
    if not contract.is_audio:
        hop = contract.hop_samples
        ins = [f"{i.name}{i.shape} ({i.frames_per_hop} frames per {hop}-sample hop)" for i in contract.stream_inputs]
        outs = [f"{o.name}{o.shape} ({o.frames_per_hop} frames per hop)" for o in contract.stream_outputs]
        raise UsageError(f"{where} streams inputs {', '.join(ins)} to outputs {', '.join(outs)}, not one waveform "
                         f"(N, 1, T) to another: stream it with OrtStreamSession.push(dict), or wrap its features "
                         f"in a recipe that takes and gives audio")


def _as_batch(session: StreamSession, x: np.ndarray) -> np.ndarray:
    require_waveform_model(session.contract, str(getattr(session, "model_path", "the model")))
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[0] != session.batch:
        raise UsageError(f"expected audio of shape (T,) or (batch={session.batch}, T), got {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise UsageError(f"audio dtype is {x.dtype}, expected float32 in [-1, 1]")
    return x.astype(np.float32, copy=False)


def stream_array(session: StreamSession, x: np.ndarray, return_stats: bool = False):
    """Stream ``x`` through ``session`` from zero state and return the raw model output.

    The session is reset first (a new stream). An inactive session is activated for the call and
    deactivated afterwards.

    Args:
        session (StreamSession): Session (its ``batch`` must match ``x``).
        x (np.ndarray): float32 PCM at the model sample rate, shape (T,) or (batch, T), any T >= 0.
        return_stats (bool): Also return a :class:`StreamStats`.
    Returns:
        np.ndarray | tuple[np.ndarray, StreamStats]: float32 output with the shape of ``x``, delayed
        by ``session.contract.delay_samples`` (not compensated).
    Raises:
        UsageError: bad shape/dtype, NaN/Inf samples (from :meth:`StreamSession.push`).
    """
    xb = _as_batch(session, x)
    n, t = xb.shape
    c = session.chunk_samples
    chunks = -(-t // c)
    xp = np.zeros((n, 1, chunks * c), dtype=np.float32)
    xp[:, 0, :t] = xb
    yp = np.empty_like(xp)
    out_name = session.contract.output
    owns = not session.is_active
    if owns:
        session.activate()
    try:
        session.reset()
        t0 = time.perf_counter()
        for i in range(chunks):
            sl = slice(i * c, (i + 1) * c)
            yp[:, :, sl] = session.push(xp[:, :, sl])[out_name]
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
    samples are dropped: for a model that is a pure delay, the output equals the input.

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
    d = session.contract.delay_samples
    xpad = np.concatenate([xb, np.zeros((xb.shape[0], d), np.float32)], axis=1)
    y, stats = stream_array(session, xpad, return_stats=True)
    y = y[:, d:]
    y = y[0] if np.ndim(x) == 1 else y
    if not return_stats:
        return y
    duration = xb.shape[1] / stats.sample_rate_hz
    stats.duration_s = duration
    stats.rtf = stats.elapsed_s / duration if duration > 0 else 0.0
    return y, stats
