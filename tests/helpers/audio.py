"""The bundled recordings as test input (no downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"
SR = 16000


def demo_speech(seconds: float | None = None, offset_s: float = 0.0, which: str = "noisy") -> np.ndarray:
    """The bundled demo recording ``cosyedge/assets/demo/<which>.wav`` as the models take it: float32 (T,) mono at
    16 kHz, from ``offset_s`` seconds on, ``seconds`` long (None: to the end)."""
    from cosyedge.audio import load_audio, to_model_input

    x, sr = load_audio(DEMO / f"{which}.wav")
    x = np.asarray(to_model_input(x, sr, SR), np.float32).reshape(-1)
    a = int(offset_s * SR)
    return np.ascontiguousarray(x[a:] if seconds is None else x[a:a + int(seconds * SR)])


def noise_wav(path: Path, channels: int = 1, seconds: float = 0.5, antiphase: bool = False) -> Path:
    """Write seeded white noise (0.1 rms, float32 samples) at 16 kHz to ``path`` with ``channels`` channels; with
    ``antiphase`` the second channel is minus the first (the mono mix is silent). Returns ``path``."""
    import soundfile as sf

    rng = np.random.default_rng(1)
    x = (0.1 * rng.standard_normal((int(SR * seconds), channels))).astype(np.float32)
    if antiphase:
        x[:, 1] = -x[:, 0]
    sf.write(path, x, SR, subtype="FLOAT")
    return path
