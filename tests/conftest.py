"""Shared fixtures."""

from __future__ import annotations

import logging

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


@pytest.fixture
def warnings_seen():
    """Collect cosyedge warning records (LOG does not propagate to the root logger once configured)."""
    records: list[logging.LogRecord] = []

    class _H(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("cosyedge")
    h, old = _H(level=logging.WARNING), logger.level
    logger.addHandler(h)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(h)
    logger.setLevel(old)
