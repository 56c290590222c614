"""``cosyedge`` with no command prints the help (exit 0)."""

from __future__ import annotations

from cosyedge.cli.main import main


def test_bare_cosyedge_prints_the_help(capsys):
    """A bare 'cosyedge' crammed the whole help into one '[!]' line; it is click's help now (stderr, exit 2)."""
    assert main([]) == 2
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert not any(line.startswith("[!]") for line in lines), cap.err
    assert lines[0] == "Usage: cosyedge [OPTIONS] COMMAND [ARGS]..."
    assert "Commands:" in lines and any(line.split()[:1] == ["streamify"] for line in lines)
