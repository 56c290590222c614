"""scripts/training/finetune_sparse.py refuses bad options with a one-line usage error (exit 2) before any data is
prepared or any training starts: read-speech options, the dense parent it will record (--dense-onnx)."""

from __future__ import annotations

import shutil

import pytest

from cosyedge.models import REFERENCE_STREAM_ONNX, REFERENCE_WEIGHTS
from tests.scripts import load_script


@pytest.mark.parametrize("argv, message", [
    (["--read-phrases", "festvox-ru"], "--read-phrases needs --read-phrase-share > 0"),
    (["--read-phrase-share", "0.2", "--read-phrases", "librivox"], "invalid choice: 'librivox'"),
    (["--male-share", "0.2"], "--male-share needs --data-version 3 or 4 (data version 2 has"),
    (["--dense-onnx", str(REFERENCE_WEIGHTS)], "--dense-onnx: cannot read ONNX file"),
    (["--dense-onnx", "{tmp}/missing.onnx"], "--dense-onnx: dense parent {tmp}/missing.onnx not found"),
    (["--dense-onnx", "{tmp}/same.onnx", "--onnx-out", "{tmp}/same.onnx"], "is the sparse model itself"),
    (["--init", "{tmp}/copy.safetensors", "--dense-onnx", "{tmp}/pruned.onnx"], "is a 2:4-pruned model"),
    (["--data-version", "3", "--read-phrase-share", "0.5"], "speech shares add up to 1.22 > 1"),
    (["--stoi-weight", "11"], "--stoi-weight must be in [0, 10], got 11.0"),
    (["--spectral-weight", "-1"], "--spectral-weight must be in [0, 10], got -1.0"),
    (["--stoi-weight", "1", "--seconds", "0.4"], "--stoi-weight needs segments of at least 0.41 s"),
    (["--snr-range=0,50"], "need -20 <= LO < HI <= 40 dB"),
])
def test_bad_options_exit_2_before_training(argv, message, tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")  # noqa: F841 (the script imports it after the option checks)
    from cosyedge.precision.sparsity import sparsify_onnx

    shutil.copy(REFERENCE_STREAM_ONNX, tmp_path / "same.onnx")
    shutil.copy(REFERENCE_WEIGHTS, tmp_path / "copy.safetensors")
    if "{tmp}/pruned.onnx" in argv:
        sparsify_onnx(REFERENCE_STREAM_ONNX, tmp_path / "pruned.onnx")
    argv = [a.format(tmp=tmp_path) for a in argv]
    fs = load_script("training/finetune_sparse")

    def no_load(*a, **k):
        raise AssertionError("weights loaded before the options were checked")

    monkeypatch.setattr("cosyedge.train.reference.model.load_reference", no_load)
    monkeypatch.setattr("cosyedge.data.training_data.TrainingData.validation_pairs", no_load)
    with pytest.raises(SystemExit) as exc:
        fs.main([*argv, "--out", str(tmp_path / "w.safetensors")])
    assert exc.value.code == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err.strip().splitlines()[-1]

