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


def plural(n, word: str, many: str | None = None) -> str:
    """``n`` with ``word`` in the number it needs (str): ``plural(1, "frame")`` is ``"1 frame"``, ``plural(3, "frame")``
    ``"3 frames"``, ``plural(2, "key/value cache", "key/value caches")``; ``many`` defaults to ``word + "s"``. The one
    place cosyedge's messages count things (no "1 frames").

    Args:
        n (int | float | str): The count (printed as given; only exactly 1 takes the singular, as does -1).
        word (str): The singular.
        many (str | None): The plural, when not ``word + "s"``.
    """
    try:
        one = abs(float(n)) == 1
    except (TypeError, ValueError):
        one = False
    return f"{n} {word if one else (many or word + 's')}"


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
        if not any(isinstance(h, _StderrHandler) for h in _logger.handlers):  # others (a test's) may sit there
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

    def progress_wanted(self) -> bool:
        """bool: progress bars are wanted: stderr is a terminal and the log is not quieted below info (``-q``)."""
        return sys.stderr.isatty() and _logger.getEffectiveLevel() <= logging.INFO

    def progress(self, iterable, desc: str, unit: str, show: bool | None = None, total: int | None = None):
        """Yield the items of ``iterable`` with a tqdm progress bar on stderr; log lines print above the bar.

        Args:
            iterable: Items to yield.
            desc (str): Bar label.
            unit (str): Unit of one item (e.g. ``"utt"``).
            show (bool | None): True/False forces the bar on/off; None (default): only when stderr is a
                terminal and the log is not quieted below info (``-q``).
            total (int | None): Item count when ``iterable`` has no ``len``.
        """
        if show is None:
            show = self.progress_wanted()
        if not show:
            yield from iterable
            return
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm(loggers=[_logger]):
            yield from tqdm(iterable, desc=desc, unit=unit, total=total, leave=False, disable=False)

    @contextlib.contextmanager
    def stage(self, name: str):
        """Log ``START name`` and ``FINISH name (x.xx s)`` around a block."""
        t0 = time.perf_counter()
        _logger.info("START %s", name)
        yield
        _logger.info("FINISH %s (%.2f s)", name, time.perf_counter() - t0)


LOG = _Log()
