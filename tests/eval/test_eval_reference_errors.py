"""scripts/eval/eval_reference.py: a missing or unreadable engine is a one-line error with a non-zero exit, not a
traceback, and no JSON report is written; ``--narrowband``'s band limit (an 8 kHz recording resampled)."""

from __future__ import annotations

import pytest

from tests.scripts import load_script


@pytest.mark.parametrize("engine, message", [
    ("{tmp}/missing.onnx", "ONNX model not found: {tmp}/missing.onnx"),
    ("{tmp}/not-an-onnx.onnx", "not-an-onnx.onnx"),
])
def test_bad_engine_is_one_line_and_nonzero(engine, message, tmp_path, capsys):
    (tmp_path / "not-an-onnx.onnx").write_bytes(b"this is not a protobuf")
    out = tmp_path / "eval.json"
    rc = load_script("eval/eval_reference").main(["--engine", engine.format(tmp=tmp_path), "--no-rnnoise", "--json", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert err.startswith("[!] ") and "\n" not in err and "Traceback" not in err
    assert message.format(tmp=tmp_path) in err
    assert not out.exists()


def test_narrowband_leaves_nothing_above_4khz_and_keeps_length():
    import numpy as np

    x = np.random.default_rng(0).standard_normal(16003).astype(np.float32) * 0.1
    y = load_script("eval/eval_reference").narrowband(x)
    assert y.shape == x.shape and y.dtype == np.float32
    p = np.abs(np.fft.rfft(y.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(len(y), 1 / 16000)
    assert p[f > 4100].sum() < 1e-4 * p.sum()  # soxr's transition band ends at the 8 kHz rate's Nyquist
    assert p[f < 3500].sum() > 0.95 * (np.abs(np.fft.rfft(x.astype(np.float64))) ** 2)[f < 3500].sum()
