"""Signal metrics and mixing shared by evaluation, calibration and training (numpy only).

SNR convention: ``SNR = 10 log10(P_speech / P_noise)`` where ``P_noise`` is the mean power of the noise over
the whole segment and ``P_speech`` is the mean power of the speech over its ACTIVE 20 ms frames (frames
within 40 dB of the loudest frame and above -100 dBFS), so pauses do not lower the speech level (as in
ITU-T P.56 active speech level, simplified). See :func:`active_power`.

Moved from ``cosyedge/datasets/mix.py`` so that deployment code (``eval``, ``precision``) does not
import training data.
"""

from __future__ import annotations

import numpy as np

from cosyedge.errors import UsageError

FRAME_SAMPLES = 320
"""Frame length (20 ms at 16 kHz) of the active-speech detector."""

ACTIVE_RANGE_DB = 40.0
"""Frames more than this many dB below the loudest frame count as pauses."""


# ------------------------------------------------------------------------------------------ metrics
def active_power(x: np.ndarray, frame_samples: int = FRAME_SAMPLES, range_db: float = ACTIVE_RANGE_DB) -> np.ndarray:
    """Mean power of the active frames of ``x``.

    Args:
        x (np.ndarray): float, shape (..., n_samples).
        frame_samples (int): Frame length in samples (20 ms at 16 kHz). A tail shorter than a frame is
            ignored for the activity decision; ``x`` shorter than one frame uses the whole signal.
        range_db (float): Frames below (loudest frame - range_db) are pauses.
    Returns:
        np.ndarray: float64, shape (...,), mean power (linear, full scale = 1) over active frames; 0 for an
        all-zero signal.
    """
    x = np.asarray(x)
    n = x.shape[-1]
    nf = n // frame_samples
    if nf == 0:
        return np.mean(np.square(x, dtype=np.float64), axis=-1)
    fr = x[..., : nf * frame_samples].reshape(*x.shape[:-1], nf, frame_samples)
    pw = np.mean(np.square(fr, dtype=np.float64), axis=-1)
    thr = np.maximum(pw.max(axis=-1, keepdims=True) * 10 ** (-range_db / 10), 1e-10)
    act = pw >= thr
    cnt = act.sum(axis=-1)
    return np.where(cnt > 0, (pw * act).sum(axis=-1) / np.maximum(cnt, 1), 0.0)


def mix_at_snr(speech: np.ndarray, noise: np.ndarray, snr_db, active: bool = True) -> np.ndarray:
    """Return ``speech + g * noise`` with ``g`` chosen so the mixture has ``snr_db``.

    Args:
        speech (np.ndarray): float32, shape (n_samples,) or (B, n_samples).
        noise (np.ndarray): float32, same shape as ``speech``.
        snr_db (float | np.ndarray): Target SNR in dB, scalar or shape (B,).
        active (bool): If True (default) the speech power is over its active frames
            (:func:`active_power`); if False over the whole segment. Noise power is always over the whole
            segment.
    Returns:
        np.ndarray: float32, shape of ``speech``. Not normalised: may exceed [-1, 1] at low SNR. An
        all-zero noise gives back ``speech``.
    Raises:
        UsageError: shapes differ.
    """
    return (speech + scale_noise(speech, noise, snr_db, active)).astype(np.float32)


def scale_noise(speech: np.ndarray, noise: np.ndarray, snr_db, active: bool = True) -> np.ndarray:
    """Return ``g * noise`` such that ``speech`` over it has ``snr_db`` (see :func:`mix_at_snr`)."""
    speech = np.asarray(speech, np.float32)
    noise = np.asarray(noise, np.float32)
    if speech.shape != noise.shape:
        raise UsageError(f"speech shape {speech.shape} != noise shape {noise.shape} (cut both to one length)")
    ps = active_power(speech) if active else np.mean(np.square(speech, dtype=np.float64), axis=-1)
    pn = np.mean(np.square(noise, dtype=np.float64), axis=-1)
    snr = np.asarray(snr_db, np.float64)
    g = np.sqrt(ps / np.maximum(pn, 1e-20) * 10 ** (-snr / 10))
    g = np.where(pn > 1e-20, g, 0.0)
    return (noise * np.asarray(g, np.float32)[..., None]) if noise.ndim > 1 else (noise * np.float32(g))


def si_snr(est: np.ndarray, ref: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """Scale-invariant signal-to-noise ratio in dB.

    Both signals are made zero-mean; ``s = <est, ref> ref / ||ref||^2``, ``e = est - s``,
    ``SI-SNR = 10 log10(||s||^2 / ||e||^2)``. Not delay-aware: align ``est`` to ``ref`` first.

    Args:
        est (np.ndarray): float, shape (..., n_samples), estimate.
        ref (np.ndarray): float, same shape, clean reference.
        eps (float): Stabiliser.
    Returns:
        np.ndarray: float64, shape (...,) (a 0-d array for 1-D inputs), dB.
    Source: Le Roux et al., "SDR - half-baked or well done?", ICASSP 2019 (arXiv:1811.02508).
    """
    est = np.asarray(est, np.float64)
    ref = np.asarray(ref, np.float64)
    if est.shape != ref.shape:
        raise UsageError(f"si_snr: est shape {est.shape} != ref shape {ref.shape} (align and cut first)")
    est = est - est.mean(axis=-1, keepdims=True)
    ref = ref - ref.mean(axis=-1, keepdims=True)
    a = np.sum(est * ref, axis=-1, keepdims=True) / (np.sum(ref * ref, axis=-1, keepdims=True) + eps)
    s = a * ref
    e = est - s
    return 10 * np.log10((np.sum(s * s, axis=-1) + eps) / (np.sum(e * e, axis=-1) + eps))


def si_snr_db(est: np.ndarray, ref: np.ndarray) -> float:
    """Scale-invariant SNR of ``est`` against ``ref``, dB.

    ``s = <est, ref> ref / ||ref||^2`` (both zero-mean), ``SI-SNR = 10 log10(||s||^2 / ||est - s||^2)``.
    The one scalar SI-SNR of the package (evaluation, training, scripts); :func:`si_snr` on 1-D signals.
    Not delay-aware: align first. Moved from ``cosyedge/eval/metrics.py``.

    Args:
        est (np.ndarray): float, shape (T,), estimate.
        ref (np.ndarray): float, shape (T,), clean reference.
    Returns:
        float: dB.
    Raises:
        UsageError: shapes differ or are not 1-D.
    Source: Le Roux et al., "SDR - half-baked or well done?", ICASSP 2019 (arXiv:1811.02508).
    """
    est, ref = np.asarray(est), np.asarray(ref)
    for x, what in ((est, "si_snr est"), (ref, "si_snr ref")):
        if x.ndim != 1:
            raise UsageError(f"{what}: expected a 1-D signal, got shape {x.shape}")
    return float(si_snr(est, ref))
