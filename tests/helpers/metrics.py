"""Signal-to-noise ratio of an estimate against a reference, in dB."""

from __future__ import annotations

import numpy as np


def snr_db(ref: np.ndarray, est: np.ndarray) -> float:
    """SNR of ``est`` against ``ref`` (any shapes of equal size, or 1-D signals cut to the shorter one), in dB,
    computed in float64; an exact match gives about 300 dB instead of a division by zero."""
    ref, est = np.asarray(ref, np.float64), np.asarray(est, np.float64)
    if ref.shape != est.shape:
        n = min(ref.size, est.size)
        ref, est = ref.reshape(-1)[:n], est.reshape(-1)[:n]
    return float(10 * np.log10(np.sum(ref ** 2) / max(float(np.sum((ref - est) ** 2)), 1e-30)))
