"""Spectrogram PNGs for ``cosyedge eval --plot DIR``: noisy, enhanced (cosyedge, RNNoise) and clean,
stacked on one shared time axis and colour scale. matplotlib is imported lazily with the Agg backend
(no display needed)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from cosyedge._lazy import require
from cosyedge.artifacts import atomic_output

NFFT = 512
"""int: STFT size of the spectrograms, samples (32 ms at 16 kHz)."""
HOP = 128
"""int: STFT hop, samples (8 ms at 16 kHz)."""
DYNAMIC_RANGE_DB = 80.0
"""float: colour range below the loudest bin of all panels, dB."""


def png_name(name: str) -> str:
    """Return a file name (str) for item ``name``: path separators and odd characters become ``_``."""
    return re.sub(r"[^A-Za-z0-9@+.=-]+", "_", name).strip("_") + ".png"


def log_spectrogram(x: np.ndarray, sample_rate_hz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hann-window STFT power in dB.

    Args:
        x (np.ndarray): float PCM, shape (T,).
        sample_rate_hz (int): Rate, Hz.
    Returns:
        tuple: ``f`` (Hz, shape (NFFT//2+1,)), ``t`` (s, frame centres, shape (F,)), ``db`` (float64,
        shape (NFFT//2+1, F), ``10 log10(|X|^2 + 1e-12)``).
    """
    x = np.asarray(x, np.float64)
    x = np.concatenate([np.zeros(NFFT // 2), x, np.zeros(NFFT // 2 + HOP)])
    n_frames = max(1, (x.size - NFFT) // HOP + 1)
    idx = np.arange(NFFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    z = np.fft.rfft(x[idx] * np.hanning(NFFT)[None, :], axis=1).T
    f = np.fft.rfftfreq(NFFT, 1.0 / sample_rate_hz)
    t = np.arange(n_frames) * HOP / sample_rate_hz
    return f, t, 10 * np.log10(np.abs(z) ** 2 + 1e-12)


def plot_spectrograms(path: str | Path, signals: dict[str, np.ndarray], sample_rate_hz: int, title: str = "") -> Path:
    """Write one PNG with a log-power spectrogram per signal, stacked top to bottom.

    Args:
        path (str | Path): Output ``.png`` (written atomically; parent folders created).
        signals (dict[str, np.ndarray]): Panel label -> float PCM, shape (T,), in display order
            (e.g. ``noisy``, ``cosyedge``, ``rnnoise``, ``clean``); lengths may differ slightly.
        sample_rate_hz (int): Rate of every signal, Hz.
        title (str): Figure title.
    Returns:
        Path: ``path``.
    Raises:
        DependencyError: matplotlib is not installed.
        ArtifactError: the file cannot be written.
    """
    matplotlib = require("matplotlib")
    matplotlib.use("Agg", force=True)
    plt = require("matplotlib.pyplot")
    specs = {label: log_spectrogram(x, sample_rate_hz) for label, x in signals.items()}
    top = max(s[2].max() for s in specs.values())
    fig, axes = plt.subplots(len(specs), 1, figsize=(10, 2.2 * len(specs)), sharex=True, squeeze=False)
    try:
        im = None
        for ax, (label, (f, t, db)) in zip(axes[:, 0], specs.items()):
            im = ax.pcolormesh(t, f / 1000.0, db, shading="auto", cmap="magma", vmin=top - DYNAMIC_RANGE_DB, vmax=top)
            ax.set_ylabel("kHz")
            ax.set_title(label, loc="left", fontsize=9)
        axes[-1, 0].set_xlabel("time (s)")
        if title:
            fig.suptitle(title, fontsize=10)
        fig.colorbar(im, ax=axes[:, 0].tolist(), label="dB", shrink=0.9)
        path = Path(path)
        with atomic_output(path) as tmp:
            fig.savefig(tmp, format="png", dpi=90)
    finally:
        plt.close(fig)
    return path
