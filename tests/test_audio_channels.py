"""Stereo input whose channels cancel (antiphase) warns in one line when mixed to mono."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cosyedge.cli.main import main


def _wav(path: Path, channels: int = 1, seconds: float = 0.5, antiphase: bool = False) -> Path:
    import soundfile as sf

    rng = np.random.default_rng(1)
    x = (0.1 * rng.standard_normal((int(16000 * seconds), channels))).astype(np.float32)
    if antiphase:
        x[:, 1] = -x[:, 0]
    sf.write(path, x, 16000, subtype="FLOAT")
    return path


def test_antiphase_stereo_warns_one_line(tmp_path, delay_onnx, capsys):
    """Stereo whose channels cancel in the mono mix was enhanced to silence without a word."""
    ap = _wav(tmp_path / "ap.wav", channels=2, antiphase=True)
    assert main(["run", str(ap), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    warns = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[W]")]
    assert len(warns) == 1 and f"input audio {ap}: its 2 channels cancel when mixed to mono" in warns[0], warns
    plain = _wav(tmp_path / "st.wav", channels=2)  # uncorrelated channels: the mix is 3 dB down, no warning
    assert main(["run", str(plain), "-o", str(tmp_path / "o2.wav"), "--engine", str(delay_onnx)]) == 0
    assert "[W]" not in capsys.readouterr().err
