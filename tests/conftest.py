"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def cli(capsys):
    """Run the CLI in process; ``cli(*args)`` returns (exit code, stdout, stderr). Folders add to it by
    overriding this fixture (e.g. a private engines root, a fake sound device)."""
    from cosyedge.cli.main import main

    def run(*args):
        rc = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return rc, out, err

    yield run
