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
]


@pytest.mark.parametrize("argv,text,hint", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_click_usage_error_is_one_line_exit_2(argv, text, hint, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert rc == 2 and cap.out == ""
    assert len(lines) == 1, cap.err
    assert lines[0].startswith("[!] ") and text in lines[0] and f"(see '{hint}')" in lines[0]
