"""The progress bar follows the log level: none under ``-q``."""

from __future__ import annotations

import sys


def test_run_shows_no_progress_bar_under_quiet(monkeypatch):
    import logging

    from cosyedge.log import LOG

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    lg = logging.getLogger("cosyedge")
    old = lg.level
    try:
        lg.setLevel(logging.INFO)
        assert LOG.progress_wanted()
        lg.setLevel(logging.WARNING)  # -q
        assert not LOG.progress_wanted()
    finally:
        lg.setLevel(old)
