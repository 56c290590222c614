"""``build``'s inputs: a folder given as the ONNX and a calibration set that does not exist, each one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers import models
from tests.helpers.files import tree

HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def test_a_folder_given_as_the_onnx_says_so(delay_onnx, tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    for args in (["streamify", str(folder), "-o", str(tmp_path / "o.onnx")] + sr,
                 ["streamify", str(folder), str(tmp_path / "o.onnx")] + sr,
                 ["build", "--backend", "onnxruntime", "--onnx", str(folder), "-o", str(tmp_path / "e")]):
        assert main(args) == 3
        assert f"{folder} is a folder, expected an .onnx file" in one_error_line(capsys)
    assert main(["build", "-q", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(tmp_path / "e")]) == 0
    engine = tmp_path / "e" / "delay-fp32-onnxruntime"
    capsys.readouterr()
    assert main(["streamify", str(engine), "-o", str(tmp_path / "o.onnx")] + sr) == 3
    line = one_error_line(capsys)
    assert f"{engine} is a folder (an engine folder" in line and "expected an .onnx file" in line
    assert not (tmp_path / "o.onnx").exists()


def test_calib_that_does_not_exist_says_so(delay_onnx, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    args = ["build", "--int8", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(tmp_path / "e")]
    assert main(args + ["--calib", str(missing)]) == 3
    line = one_error_line(capsys)
    assert f"calibration folder {missing} does not exist" in line and "cosyedge calib make" in line
    missing.mkdir()
    assert main(args + ["--calib", str(missing)]) == 3
    line = one_error_line(capsys)
    assert f"calibration folder {missing} has no manifest.json" in line and "cosyedge calib make" in line
    assert tree(tmp_path / "e") == [] if (tmp_path / "e").exists() else True
