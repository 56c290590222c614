"""Fixed filterbank bases of the reference enhancer (NumPy only, no PyTorch: scripts and tools that only
need the windows, e.g. ``scripts/eval/oracle_testset.py``, import them without torch).

Sources: sqrt-Hann STFT with 50 % overlap-add (perfect reconstruction, Griffin & Lim 1984); asymmetric
low-latency analysis/synthesis windows, Mauler & Martin, EUSIPCO 2007, and Wang, Wichern & Le Roux,
arXiv:2204.09911 (2022).
"""

from __future__ import annotations

import numpy as np


def analysis_window(win: int, hop: int) -> np.ndarray:
    """Return the analysis window (win,) float64 of :func:`stft_bases`.

    ``win == 2 * hop``: the periodic sqrt-Hann. ``win > 2 * hop``: asymmetric, a sqrt-Hann rise over the
    first ``win - hop`` samples (peak 1 at sample ``win - hop``) and a sqrt-Hann fall over the last ``hop``
    samples (sample ``win - 1`` is the newest), as in Mauler & Martin, "A low delay, variable resolution,
    perfect reconstruction spectral analysis-synthesis system for speech enhancement", EUSIPCO 2007, and
    Wang, Wichern & Le Roux, "STFT-domain neural speech enhancement with very low algorithmic latency",
    arXiv:2204.09911 (2022).

    Raises:
        ValueError: ``win`` odd or below ``2 * hop``.
    """
    if win < 2 * hop or win % 2:
        raise ValueError(f"win_samples {win} must be even and >= 2 * hop_samples ({2 * hop})")
    n = np.arange(win, dtype=np.float64)
    if win == 2 * hop:
        return np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * n / win))  # sqrt periodic Hann
    rise = win - hop
    w = np.empty(win)
    w[:rise] = np.sqrt(0.5 - 0.5 * np.cos(np.pi * n[:rise] / rise))
    w[rise:] = np.sqrt(0.5 + 0.5 * np.cos(np.pi * (n[rise:] - rise) / hop))
    return w


def stft_bases(win: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (analysis, synthesis) weight arrays of the model's STFT.

    ``win == 2 * hop``: sqrt-periodic-Hann analysis and synthesis windows (perfect reconstruction,
    Griffin & Lim 1984). ``win > 2 * hop``: the asymmetric analysis window of :func:`analysis_window`
    and a synthesis window non-zero only on the last ``2 * hop`` samples, ``Hann_2hop / analysis`` there,
    so analysis x synthesis is a periodic Hann of ``2 * hop`` samples that overlap-adds to 1 at hop
    ``hop``: perfect reconstruction with the same one-hop delay, at the long window's frequency resolution
    (Mauler & Martin 2007; Wang, Wichern & Le Roux 2022, arXiv:2204.09911).

    Returns:
        analysis (np.ndarray): (2F, 1, win) float32, F = win/2 + 1: rows 0..F-1 = ``w[n] cos(2 pi k n / win)``,
            rows F..2F-1 = ``-w[n] sin(2 pi k n / win)`` (so conv output = Re, Im of the DFT).
        synthesis (np.ndarray): (2F, 2 * hop) float32: the windowed inverse real DFT over the last 2 * hop
            samples of the frame, such that ``frame[n] = sum_c spec[c] * synthesis[c, n]`` and overlap-adding
            frames at ``hop`` reconstructs the input exactly.
    Raises:
        ValueError: ``win`` odd or below ``2 * hop``.
    """
    w = analysis_window(win, hop)
    n = np.arange(win)
    k = np.arange(win // 2 + 1)[:, None]
    cos, sin = np.cos(2 * np.pi * k * n / win), np.sin(2 * np.pi * k * n / win)
    analysis = np.concatenate([w * cos, -w * sin])[:, None, :]
    tail = slice(win - 2 * hop, win)
    if win == 2 * hop:
        ws = w  # sqrt-Hann x sqrt-Hann = Hann
    else:
        hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(2 * hop) / (2 * hop))
        ws = np.where(w[tail] > 1e-12, hann / np.maximum(w[tail], 1e-12), 0.0)
    a = np.full((win // 2 + 1, 1), 2.0 / win)
    a[0, 0] = a[-1, 0] = 1.0 / win
    synthesis = np.concatenate([a * cos[:, tail] * ws, -a * sin[:, tail] * ws])
    return analysis.astype(np.float32), synthesis.astype(np.float32)


def long_window_basis(window: int, bins: int) -> np.ndarray:
    """Analysis weights of the long feature window: (2 * bins, 1, window) float32.

    Args:
        window (int): W, window length in samples (e.g. 1024 = 64 ms at 16 kHz).
        bins (int): number of lowest DFT bins kept (bin spacing 16000 / W Hz).

    Rows 0..bins-1 = ``h[n] cos(2 pi k n / W)``, rows bins..2*bins-1 = ``-h[n] sin(2 pi k n / W)`` for the
    lowest ``bins`` DFT bins k, with ``h`` the periodic Hann window (peak 1, unnormalised like the 20 ms
    analysis, so white noise gives a per-bin power 3W/8 times its variance, well above ``log_eps``).
    Sample n = W - 1 is the newest.
    """
    n = np.arange(window)
    k = np.arange(bins)[:, None]
    h = 0.5 - 0.5 * np.cos(2 * np.pi * n / window)
    ang = 2 * np.pi * k * n / window
    return np.concatenate([h * np.cos(ang), -h * np.sin(ang)])[:, None, :].astype(np.float32)
