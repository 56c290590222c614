"""Oracle real-valued masks at the reference model's filterbank: what a perfect gain estimator could reach.

Ideal amplitude / ratio / Wiener masks from the TRUE speech and noise STFTs (floored at the reference model's
gain floor, 0.03), at symmetric windows and at the model's own asymmetric analysis/synthesis pair
(:func:`cosyedge.models.stft.stft_bases`), and the pitch comb pre-filter with true, causal and long-window
pitch periods. ``scripts/eval/oracle_testset.py`` scores them on the fixed test set; ``scripts/eval/diagnose_bands.py``,
``scripts/eval/diagnose_domains.py`` and ``scripts/eval/sweep_gain_shaping.py`` reuse them.

Moved from ``scripts/eval/oracle_testset.py`` so that no script imports another through ``sys.path``.

Sources: ideal ratio/amplitude masks, Wang, Narayanan & Wang, "On training targets for supervised speech
separation", IEEE/ACM TASLP 22(12), 2014 (doi:10.1109/TASLP.2014.2352935); Wiener gain, Loizou,
"Speech Enhancement: Theory and Practice", 2nd ed., ch. 6; pitch filtering, Valin 2018 (arXiv:1709.08243).
"""

from __future__ import annotations

import numpy as np

WINDOWS = (320, 512, 1024)
ASYM_WINDOWS = (512, 768, 1024)
HOP = 160
MASKS = ("iam", "irm", "wiener")
GAIN_FLOOR = 0.03


def oracle_gain(kind: str, s: np.ndarray, n: np.ndarray, x: np.ndarray, floor: float = GAIN_FLOOR) -> np.ndarray:
    """Oracle real gain per bin.

    Args:
        kind (str): ``"iam"``, ``"irm"`` or ``"wiener"``.
        s, n, x (np.ndarray): complex STFTs of speech, noise and mixture, same shape (F, frames).
        floor (float): minimum gain.
    Returns:
        np.ndarray: float64 gains in [floor, 1], shape (F, frames).
    """
    ps, pn = np.abs(s) ** 2, np.abs(n) ** 2
    if kind == "iam":
        g = np.clip(np.abs(s) / (np.abs(x) + 1e-12), 0.0, 1.0)
    elif kind == "irm":
        g = np.sqrt(ps / (ps + pn + 1e-20))
    elif kind == "wiener":
        g = ps / (ps + pn + 1e-20)
    else:
        raise ValueError(f"unknown mask {kind!r}")
    return np.maximum(g, floor)


def apply_oracle(noisy: np.ndarray, clean: np.ndarray, kind: str, win: int, floor: float = GAIN_FLOOR) -> np.ndarray:
    """Return the oracle-masked signal: float64 (T,), same length as ``noisy`` (16 kHz, sqrt-Hann STFT with
    50 % overlap, perfect reconstruction with gain 1); the gain of :func:`oracle_gain`, floored at ``floor``."""
    from scipy.signal import istft, stft

    w = np.sqrt(np.hanning(win + 1)[:-1])  # periodic sqrt-Hann, as the reference model's bases
    kw = {"fs": 16000, "window": w, "nperseg": win, "noverlap": win // 2}
    _, _, x = stft(noisy, **kw)
    _, _, s = stft(clean, **kw)
    _, _, n = stft(noisy - clean, **kw)
    _, y = istft(oracle_gain(kind, s, n, x, floor) * x, **kw)
    return y[: noisy.size]


def apply_oracle_asym(noisy: np.ndarray, clean: np.ndarray, kind: str, win: int) -> np.ndarray:
    """Return the oracle-masked signal through the model's asymmetric STFT of ``win`` samples: float64 (T,),
    aligned with ``noisy`` (the one-hop delay removed; the inputs are zero-padded to whole hops plus one, so
    every sample of ``noisy`` is reconstructed)."""
    from cosyedge.models.stft import stft_bases

    ana, syn = stft_bases(win, HOP)
    basis, f = ana[:, 0, :].astype(np.float64), ana.shape[0] // 2

    def spec(x: np.ndarray) -> np.ndarray:  # frame t ends with sample (t + 1) * HOP - 1
        xp = np.concatenate([np.zeros(win - HOP), x])
        frames = (xp.size - win) // HOP + 1
        z = xp[np.arange(win)[None, :] + HOP * np.arange(frames)[:, None]] @ basis.T
        return z[:, :f] + 1j * z[:, f:]

    pad = np.zeros(-noisy.size % HOP + HOP)
    noisy_p, clean_p = np.concatenate([noisy, pad]), np.concatenate([clean, pad])
    x, s, n = spec(noisy_p), spec(clean_p), spec(noisy_p - clean_p)
    y = oracle_gain(kind, s, n, x) * x
    frames = np.concatenate([y.real, y.imag], axis=1) @ syn.astype(np.float64)  # (frames, 2 HOP)
    out = np.zeros((frames.shape[0] + 1) * HOP)
    for t, fr in enumerate(frames):  # frame t's synthesis covers samples (t - 1) * HOP .. (t + 1) * HOP - 1,
        out[t * HOP:(t + 2) * HOP] += fr  # stored one hop later: out[i + HOP] estimates noisy[i]
    return out[HOP: HOP + noisy.size]


PITCH_BAND_BINS = 4
"""Bins (50 Hz each at the 320-sample window) per band of the pitch oracle's choice: 200 Hz bands."""

WRONG_LAG_FACTOR = 1.37
"""Pitch period scale of the control row ``320/iam+pitch-wrong-lag``."""


def true_pitch_periods(clean: np.ndarray, n_frames: int) -> np.ndarray:
    """Pitch period per 10 ms hop of the clean speech (float (T,), 16 kHz): int samples, shape (n_frames,),
    0 where unvoiced. Praat's autocorrelation pitch (Boersma 1993; parselmouth), 60-400 Hz, read at each
    hop's centre. Raises ImportError without praat-parselmouth (the ``data`` extra)."""
    import parselmouth

    snd = parselmouth.Sound(clean.astype(np.float64), 16000)
    pitch = snd.to_pitch(time_step=HOP / 16000, pitch_floor=60.0, pitch_ceiling=400.0)
    f0 = np.nan_to_num(np.array([pitch.get_value_at_time(min((t + 0.5) * HOP / 16000, snd.duration))
                                 for t in range(n_frames)], dtype=np.float64))
    return np.where(f0 > 0, np.round(16000 / np.maximum(f0, 1.0)), 0).astype(np.int64)


def causal_pitch_periods(x: np.ndarray, n_frames: int, window: int = 640, min_lag: int = 40,
                         max_lag: int = 320) -> np.ndarray:
    """Pitch period per 10 ms hop estimated causally from ``x`` (float (T,), 16 kHz; e.g. the noisy input):
    for hop t, the lag in [``min_lag``, ``max_lag``] samples (400-50 Hz) that maximises the normalised
    autocorrelation of the last ``window`` samples up to the end of hop t (as RNNoise's pitch search, Valin
    2018, without its smoothing, octave check or voicing decision: on a clean periodic stretch a multiple of
    the period scores as high, which still combs every harmonic). int (n_frames,), 0 where that stretch is silent."""
    xp = np.concatenate([np.zeros(window + max_lag), np.asarray(x, np.float64)])
    lags = np.arange(min_lag, max_lag + 1)
    out = np.zeros(n_frames, np.int64)
    for t in range(n_frames):
        end = min((t + 1) * HOP + window + max_lag, xp.size)
        seg = xp[end - window:end]
        e0 = seg @ seg
        if e0 <= 1e-9:
            continue
        prev = xp[end - window - lags[:, None] + np.arange(window)[None, :]]  # (lags, window)
        corr = (prev @ seg) / np.sqrt(e0 * np.einsum("ij,ij->i", prev, prev) + 1e-12)
        out[t] = lags[int(np.argmax(corr))]
    return out


def lw_pitch_periods(x: np.ndarray, n_frames: int, window: int = 1024, bins: int = 128, min_lag: int = 40,
                     max_lag: int = 320) -> np.ndarray:
    """Pitch period per 10 ms hop from the power spectrum of the causal long window (the bundled model's
    long-window features: Hann-windowed ``window`` samples ending at each hop's end, lowest ``bins`` bins):
    the lag in [``min_lag``, ``max_lag``] samples maximising the band-limited autocorrelation
    ``r(tau) = sum_k |X_k|^2 cos(2 pi k tau / window)`` (Wiener-Khinchin). ``x``: float (T,), 16 kHz.
    int (n_frames,), 0 where the frame is silent. A multiple of the period may win, as in
    :func:`causal_pitch_periods`."""
    xp = np.concatenate([np.zeros(window), np.asarray(x, np.float64)])
    lags = np.arange(min_lag, max_lag + 1)
    cos = np.cos(2 * np.pi * np.outer(lags, np.arange(bins)) / window)  # (lags, bins)
    hann = np.hanning(window + 1)[:-1]
    out = np.zeros(n_frames, np.int64)
    for t in range(n_frames):
        end = min((t + 1) * HOP + window, xp.size)
        power = np.abs(np.fft.rfft(xp[end - window:end] * hann)[:bins]) ** 2
        if power.sum() > 1e-12:
            out[t] = lags[int(np.argmax(cos @ power))]
    return out


def comb_prefilter(x: np.ndarray, periods: np.ndarray) -> np.ndarray:
    """Causal pitch comb filter: ``(x[n] + x[n - T]) / 2`` for the samples of each hop with period T > 0
    (``periods``: int, one per 160-sample hop), ``x[n]`` elsewhere and before the first period. float64
    (T,), same length as ``x``. A signal that is periodic with T passes unchanged."""
    y = np.array(x, dtype=np.float64)
    for t, per in enumerate(periods):
        a, b = t * HOP, min((t + 1) * HOP, x.size)
        if per <= 0 or a >= x.size:
            continue
        idx = np.arange(a, b)
        ok = idx - per >= 0
        y[idx[ok]] = 0.5 * (x[idx[ok]] + x[idx[ok] - per])
    return y


def apply_oracle_pitch(noisy: np.ndarray, clean: np.ndarray, lag_scale: float = 1.0,
                       band_bins: int = PITCH_BAND_BINS, pitch: str = "true") -> np.ndarray:
    """Return the pitch-oracle signal: float64 (T,), same length as ``noisy``. Per band of ``band_bins`` bins
    and frame (320-sample sqrt-Hann STFT, hop 160), the ideal amplitude mask on the plain or on the
    comb-filtered (:func:`comb_prefilter`) noisy STFT, whichever is closer to the clean STFT. The comb's
    period (x ``lag_scale``) comes from ``pitch``: ``"true"`` (:func:`true_pitch_periods` of the clean speech),
    ``"autocorr"`` (:func:`causal_pitch_periods` of the noisy input) or ``"lw"`` (:func:`lw_pitch_periods` of
    the noisy input). Raises ImportError without praat-parselmouth for ``"true"``; ValueError for another
    ``pitch``."""
    from scipy.signal import istft, stft

    w = np.sqrt(np.hanning(320 + 1)[:-1])
    kw = {"fs": 16000, "window": w, "nperseg": 320, "noverlap": 160}
    n_frames = noisy.size // HOP + 1
    estimators = {"true": lambda: true_pitch_periods(clean, n_frames),
                  "autocorr": lambda: causal_pitch_periods(noisy, n_frames),
                  "lw": lambda: lw_pitch_periods(noisy, n_frames)}
    if pitch not in estimators:
        raise ValueError(f"unknown pitch estimate {pitch!r} (one of {sorted(estimators)})")
    periods = estimators[pitch]()
    periods = np.where(periods > 0, np.round(periods * lag_scale), 0).astype(np.int64)
    _, _, x = stft(noisy, **kw)
    _, _, s = stft(clean, **kw)
    _, _, c = stft(comb_prefilter(noisy, periods), **kw)
    ya, yc = oracle_gain("iam", s, x - s, x) * x, oracle_gain("iam", s, c - s, c) * c
    y = ya.copy()
    for b in range(0, x.shape[0], band_bins):
        ea = np.sum(np.abs(ya[b:b + band_bins] - s[b:b + band_bins]) ** 2, axis=0)
        ec = np.sum(np.abs(yc[b:b + band_bins] - s[b:b + band_bins]) ** 2, axis=0)
        y[b:b + band_bins] = np.where(ec < ea, yc[b:b + band_bins], ya[b:b + band_bins])
    _, out = istft(y, **kw)
    return out[: noisy.size]
