"""Stereo input whose channels cancel (antiphase) warns in one line when mixed to mono."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyedge.cli.main import main
from tests.helpers import models
from tests.helpers.audio import noise_wav

HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def test_antiphase_stereo_warns_one_line(tmp_path, delay_onnx, capsys):
    """Stereo whose channels cancel in the mono mix was enhanced to silence without a word."""
    ap = noise_wav(tmp_path / "ap.wav", channels=2, antiphase=True)
    assert main(["run", str(ap), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    warns = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[W]")]
    assert len(warns) == 1 and f"input audio {ap}: its 2 channels cancel when mixed to mono" in warns[0], warns
    plain = noise_wav(tmp_path / "st.wav", channels=2)  # uncorrelated channels: the mix is 3 dB down, no warning
    assert main(["run", str(plain), "-o", str(tmp_path / "o2.wav"), "--engine", str(delay_onnx)]) == 0
    assert "[W]" not in capsys.readouterr().err
