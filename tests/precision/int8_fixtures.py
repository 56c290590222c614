"""Small calibration material from the bundled audio only (no Debian downloads, works offline).

Calibration recordings: 1.5 s segments of ``tests/data/speech_librivox_0890.wav`` and of the first 10 s
of the demo pair (``cosyedge/assets/demo``), each mixed with white or brown noise at 0..20 dB (seeded).
Evaluation audio: the demo recording after 10 s, never used for calibration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
LIBRIVOX = ROOT / "tests" / "data" / "speech_librivox_0890.wav"
DEMO_NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
DEMO_CLEAN = ROOT / "cosyedge" / "assets" / "demo" / "clean.wav"
SR = 16000
SPLIT_S = 10.0
"""Demo audio before this time (s) may be used for calibration, after it only for evaluation."""


def _read(p: Path) -> np.ndarray:
    x, sr = sf.read(str(p), dtype="float32", always_2d=True)
    assert sr == SR
    return x.mean(axis=1)


def speech_pool() -> list[np.ndarray]:
    """Clean-ish speech pieces allowed for calibration (float32, 16 kHz)."""
    cut = int(SPLIT_S * SR)
    return [_read(LIBRIVOX), _read(DEMO_CLEAN)[:cut], _read(DEMO_NOISY)[:cut]]


def eval_pair() -> tuple[np.ndarray, np.ndarray]:
    """(noisy, clean) demo audio after :data:`SPLIT_S`, float32 (T,)."""
    cut = int(SPLIT_S * SR)
    return _read(DEMO_NOISY)[cut:], _read(DEMO_CLEAN)[cut:]


class BundledMixes:
    """A tiny stand-in for ``TrainingData`` (same ``batch`` contract) built from the bundled audio."""

    def __init__(self):
        self.pool = np.concatenate(speech_pool())

    def batch(self, batch_size: int, n_samples: int, rng: np.random.Generator):
        noisy, clean = [], []
        for _ in range(batch_size):
            start = int(rng.integers(0, self.pool.size - n_samples))
            s = self.pool[start:start + n_samples].copy()
            nz = rng.standard_normal(n_samples).astype(np.float32)
            if rng.random() < 0.5:
                nz = np.cumsum(nz).astype(np.float32)
                nz -= nz.mean()
            snr = rng.uniform(0, 20)
            g = np.sqrt(np.mean(s.astype(np.float64) ** 2) / np.mean(nz.astype(np.float64) ** 2) / 10 ** (snr / 10))
            noisy.append(s + np.float32(g) * nz)
            clean.append(s)
        noisy, clean = np.stack(noisy), np.stack(clean)
        peak = np.abs(noisy).max(axis=1, keepdims=True)
        g = (0.5 / peak).astype(np.float32)
        return noisy * g, clean * g


def write_recordings(folder: Path, count: int = 32, seed: int = 0, seconds: float = 1.5) -> Path:
    """Write ``count`` noisy 16 kHz recordings (wav, PCM_16) into ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    src = BundledMixes()
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    for i in range(count):
        noisy, _ = src.batch(1, n, rng)
        sub = folder / ("a" if i % 2 else "b")  # nested folders are searched too
        sub.mkdir(exist_ok=True)
        sf.write(str(sub / f"rec{i:03d}.wav"), noisy[0], SR, subtype="PCM_16")
    return folder


def small_calibration_set(folder: Path) -> Path:
    """A calibration set of 16 one-second recordings (:func:`write_recordings`) under ``folder``: its folder (Path),
    for INT8 builds whose calibrated values a test does not judge."""
    from cosyedge.precision.calibset import make_calibration_set

    return make_calibration_set(folder / "calib", from_dir=write_recordings(folder / "rec", count=16,
                                                                            seconds=1.0)).folder


def write_bad_files(folder: Path) -> dict:
    """Add files calibration must skip; returns the expected skip counts."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "broken.wav").write_bytes(b"RIFF\x00\x00not really a wave file")
    (folder / "notes.txt").write_text("not audio")
    sf.write(str(folder / "phone_8k.wav"), np.zeros(8000, np.float32) + 0.01, 8000)
    sf.write(str(folder / "hifi_48k.flac"), np.zeros(4800, np.float32) + 0.01, 48000)
    bad = np.full(16000, 0.1, np.float32)
    bad[100] = np.nan
    sf.write(str(folder / "nan.wav"), bad, SR, subtype="FLOAT")
    return {"unreadable": 2, "wrong_rate": 2, "non_finite": 1}
