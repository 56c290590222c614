"""Where outputs go: ``build -o`` must be a folder, ``export`` without ``-o`` writes into the current folder,
never into the package."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers import models
from tests.helpers.files import tree

ROOT = Path(__file__).resolve().parents[2]
HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def test_build_o_a_file_says_o_must_be_a_folder(delay_onnx, tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for target, found in ((f, "it is a file"), (f / "sub", f"{f} is a file")):
        rc = main(["build", "--onnx", str(delay_onnx), "--backend", "onnxruntime", "-o", str(target)])
        line = one_error_line(capsys)
        assert rc == 3 and f"-o {target} must be a folder" in line and found in line, line
    assert f.read_text() == "mine" and tree(tmp_path) == ["notes.txt"]


def _package_models() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((ROOT / "cosyedge" / "models").iterdir()) if p.is_file()}


def test_export_without_o_writes_into_the_current_folder_not_the_package(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from cosyedge.artifacts import StreamContract

    before = _package_models()
    monkeypatch.chdir(tmp_path)
    assert main(["export", "-q"]) == 0
    assert _package_models() == before  # the bundled reference.stream.onnx keeps its bytes
    out = tmp_path / "reference.stream.onnx"
    assert tree(tmp_path) == ["reference.stream.onnx"]
    c = StreamContract.from_onnx(out)
    assert c.is_streaming and c.sample_rate_hz == 16000 and c.hop_samples == 160
    assert main(["export", "--help"]) == 0
    assert "Default: ./reference.stream.onnx for the reference" in " ".join(capsys.readouterr().out.split())
