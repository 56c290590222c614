"""Delay estimation and alignment of an enhanced signal to its clean reference.

Intrusive metrics (SI-SNR, PESQ, STOI) compare sample by sample, so a late output (RNNoise is about 20
ms late; a model may learn a delay) must be shifted back first. :func:`estimate_delay` takes the lag of
the cross-correlation maximum within +-``max_delay_ms``; :func:`align_to` shifts by that lag and keeps
the reference's length, so every system is scored against the same reference samples.

Source: the classic cross-correlation delay estimator (Knapp & Carter, "The generalized correlation
method for estimation of time delay", IEEE TASSP 1976), here unweighted, computed with an FFT.
"""

from __future__ import annotations

import numpy as np

from cosyedge.errors import UsageError

MAX_DELAY_MS = 50.0
"""float: default search range of :func:`estimate_delay`, +-ms."""


def estimate_delay(est: np.ndarray, ref: np.ndarray, sample_rate_hz: int, max_delay_ms: float = MAX_DELAY_MS) -> int:
    """Return the delay of ``est`` relative to ``ref`` in samples (positive: ``est`` is late).

    The lag ``k`` in ``[-K, K]`` (``K = max_delay_ms * rate / 1000``) maximising
    ``c[k] = sum_t est[t + k] * ref[t]`` (both zero-mean). Ties go to the smallest ``|k|``; an all-zero
    input gives 0.

    Args:
        est (np.ndarray): float, shape (T1,), estimate (any length).
        ref (np.ndarray): float, shape (T2,), clean reference.
        sample_rate_hz (int): Rate of both, Hz.
        max_delay_ms (float): Search range, +-ms (> 0).
    Returns:
        int: delay in samples (``1000 * delay / sample_rate_hz`` ms).
    Raises:
        UsageError: not 1-D, or ``max_delay_ms`` not positive and finite.
    """
    est = np.asarray(est, np.float64)
    ref = np.asarray(ref, np.float64)
    if est.ndim != 1 or ref.ndim != 1:
        raise UsageError(f"estimate_delay: expected 1-D signals, got {est.shape} and {ref.shape}")
    if not (np.isfinite(max_delay_ms) and max_delay_ms > 0):
        raise UsageError(f"max_delay_ms must be positive, got {max_delay_ms}")
    if est.size == 0 or ref.size == 0:
        return 0
    k_max = round(max_delay_ms * sample_rate_hz / 1000.0)
    est = est - est.mean()
    ref = ref - ref.mean()
    n = est.size + ref.size
    nfft = 1 << int(np.ceil(np.log2(n)))
    c = np.fft.irfft(np.fft.rfft(est, nfft) * np.conj(np.fft.rfft(ref, nfft)), nfft)
    lags = np.arange(-k_max, k_max + 1)
    vals = c[lags % nfft]  # negative lags wrap to the end of the circular correlation
    if not np.any(vals):
        return 0
    best = np.flatnonzero(vals == vals.max())
    return int(lags[best[np.argmin(np.abs(lags[best]))]])


def align_to(est: np.ndarray, delay_samples: int, length: int) -> np.ndarray:
    """Shift ``est`` earlier by ``delay_samples`` and cut or zero-pad it to ``length`` samples.

    ``out[t] = est[t + delay_samples]`` where that index exists, else 0.

    Args:
        est (np.ndarray): float, shape (T,).
        delay_samples (int): Delay of ``est`` (from :func:`estimate_delay`); negative shifts later.
        length (int): Output length, samples (the reference's).
    Returns:
        np.ndarray: float32, shape (length,).
    """
    est = np.asarray(est, np.float32)
    out = np.zeros(int(length), np.float32)
    d = int(delay_samples)
    src_lo, dst_lo = (d, 0) if d >= 0 else (0, -d)
    n = min(est.size - src_lo, length - dst_lo)
    if n > 0:
        out[dst_lo:dst_lo + n] = est[src_lo:src_lo + n]
    return out
