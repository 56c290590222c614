"""Shared assertion for CLI refusals in tests: exactly one ``[!]`` line on stderr and no traceback. Torch-free."""

from __future__ import annotations


def one_error_line(err, last: bool = True) -> str:
    """Return the single ``[!] ...`` line of ``err`` (a command's stderr, str, or pytest's ``capsys``, whose stderr
    is read), asserting that it is the only one, that no traceback came and, with ``last``, that nothing follows
    it."""
    if hasattr(err, "readouterr"):
        err = err.readouterr().err
    assert "Traceback" not in err, err
    bang = [line for line in err.splitlines() if line.startswith("[!]")]
    assert len(bang) == 1, err
    if last:
        assert err.rstrip().splitlines()[-1] == bang[0], err
    return bang[0]


def refused(rc: int, err: str, code: int) -> str:
    """Return the single ``[!] ...`` line of a refusal (:func:`one_error_line`), asserting the exit code ``rc`` is
    ``code``."""
    assert rc == code, err
    return one_error_line(err)
