"""scripts/eval_reference.py: a missing or unreadable engine is a one-line error with a non-zero exit, not a
traceback, and no JSON report is written."""

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
    rc = load_script("eval_reference").main(["--engine", engine.format(tmp=tmp_path), "--no-rnnoise", "--json", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert err.startswith("[!] ") and "\n" not in err and "Traceback" not in err
    assert message.format(tmp=tmp_path) in err
    assert not out.exists()
