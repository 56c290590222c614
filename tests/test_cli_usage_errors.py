"""click's own usage errors (bad choice, unknown option or command, missing argument, bad number) follow the
CLI's error contract: one line ``[!] ...`` on stderr naming the bad value, a pointer to ``--help``, exit 2."""

from __future__ import annotations

import pytest

from cosyedge.cli.main import main

CASES = [
    (["build", "--backend", "foo"], "'foo' is not one of 'auto', 'onnxruntime', 'tensorrt'", "cosyedge build --help"),
    (["build", "--no-such-flag"], "--no-such-flag", "cosyedge build --help"),
    (["compare"], "Missing argument 'REF'", "cosyedge compare --help"),
    (["calib", "make", "--count", "abc"], "'abc' is not a valid integer", "cosyedge calib make --help"),
    (["nosuchcmd"], "No such command 'nosuchcmd'", "cosyedge --help"),
    # numbers that parse but mean nothing: refused before any work (a NaN once crashed compare's bisection)
    (["compare", "a.onnx", "b.onnx", "--mark-all", "--seconds", "nan"], "'nan' is not a finite number",
     "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--seconds", "0"], "0 is not > 0", "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--snr-db", "nan"], "'nan' is not a finite number", "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--snr-db", "inf"], "'inf' is not a finite number", "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--jump-db", "-1"], "-1 is not > 0", "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--max-utterances", "-1"], "-1 is not in the range x>=1",
     "cosyedge compare --help"),
    (["compare", "a.onnx", "b.onnx", "--chunk-ms", "nan"], "'nan' is not a finite number", "cosyedge compare --help"),
    (["check", "--chunk-ms", "-10"], "-10 is not > 0", "cosyedge check --help"),
    (["eval", "pairs", "--max-delay-ms", "nan"], "'nan' is not a finite number", "cosyedge eval --help"),
]


@pytest.mark.parametrize("argv,text,hint", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_click_usage_error_is_one_line_exit_2(argv, text, hint, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert rc == 2 and cap.out == ""
    assert len(lines) == 1, cap.err
    assert lines[0].startswith("[!] ") and text in lines[0] and f"(see '{hint}')" in lines[0]


def test_export_of_the_reference_without_the_training_package_is_one_line(monkeypatch, capsys, tmp_path):
    """The wheel leaves cosyedge/train out: ``cosyedge export`` (the reference model) then says so in one line,
    exit 4 (DependencyError), instead of a ModuleNotFoundError traceback (found by the newcomer check)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cosyedge.train" else real(name, *a))
    assert main(["export", "-o", str(tmp_path / "x.onnx")]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("[!] exporting the reference model needs cosyedge's training package")
    assert "pip install -e '.[export]'" in err and "\n" not in err
    assert not (tmp_path / "x.onnx").exists()
