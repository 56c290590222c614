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
