"""Logging for cosyedge: ``from cosyedge.log import LOG``; never ``print`` in library code.

``LOG.stage(name)`` is a context manager that logs START/FINISH with the elapsed time (seconds).
``LOG.warning_once(msg)`` logs a repeated warning only the first time.

Source: Polygraphy ``polygraphy/logger/logger.py`` (stage logging, log-once).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time

_logger = logging.getLogger("cosyedge")


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stderr`` is when a record is emitted, not the object it was when the
    handler was made: stderr redirected later (``contextlib.redirect_stderr``, pytest's capture, a CLI run
    in process) still gets the log, and a closed earlier stream is never written."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__/setStream assign it; the live sys.stderr wins
        pass


class _Log:
    def __init__(self) -> None:
        self._once: set[str] = set()

    def configure(self, verbosity: int = 0) -> None:
        """Attach a stderr handler. ``verbosity`` (int): -1 warnings only, 0 info, >=1 debug."""
        level = logging.WARNING if verbosity < 0 else (logging.INFO if verbosity == 0 else logging.DEBUG)
        _logger.setLevel(level)
        if not _logger.handlers:
            h = _StderrHandler()
            h.setFormatter(logging.Formatter("[%(levelname).1s] %(message)s"))
            _logger.addHandler(h)
        _logger.propagate = False

    def debug(self, msg, *args) -> None:
        """Log at debug level; ``msg % args`` is formatted only if emitted (cheap in per-chunk loops)."""
        _logger.debug(msg, *args)

    def info(self, msg, *args) -> None:
        """Log at info level (lazy ``msg % args``)."""
        _logger.info(msg, *args)

    def warning(self, msg, *args) -> None:
        """Log at warning level (lazy ``msg % args``)."""
        _logger.warning(msg, *args)

    def warning_once(self, msg: str) -> None:
        """Log ``msg`` (str) as a warning the first time only (repeated per-chunk warnings)."""
        if msg not in self._once:
            self._once.add(msg)
            _logger.warning(msg)

    @contextlib.contextmanager
    def stage(self, name: str):
        """Log ``START name`` and ``FINISH name (x.xx s)`` around a block."""
        t0 = time.perf_counter()
        _logger.info("START %s", name)
        yield
        _logger.info("FINISH %s (%.2f s)", name, time.perf_counter() - t0)


LOG = _Log()
