"""Input level warnings of ``run``: float samples far above full scale are out of range (with the peak),
genuine clipping is still called clipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.cli.main import main
from tests.helpers import models

HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[W]")]


def test_float_samples_far_above_full_scale_are_out_of_range_with_the_peak(delay_onnx, tmp_path, capsys):
    x = (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    x[100] = 1e6
    x[200:300] = 9e5
    sf.write(tmp_path / "big.wav", x, 16000, subtype="FLOAT")
    assert main(["run", str(tmp_path / "big.wav"), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    warned = [w for w in _warnings(capsys) if w.startswith("[W] input audio")]
    assert len(warned) == 1 and f"{tmp_path / 'big.wav'} is out of range: peak |x| = 1e+06" in warned[0], warned
    assert "101 sample(s)" in warned[0]


def test_genuine_clipping_is_still_called_clipped(delay_onnx, tmp_path, capsys):
    x = (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    x[::5] = 1.0
    sf.write(tmp_path / "clip.wav", x, 16000, subtype="FLOAT")
    assert main(["run", str(tmp_path / "clip.wav"), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    warned = [w for w in _warnings(capsys) if w.startswith("[W] input audio")]
    assert len(warned) == 1 and f"{tmp_path / 'clip.wav'} looks clipped: 20.00% of samples" in warned[0], warned
