"""cosyedge errors: one line, with an exit code.

The CLI (:func:`cosyedge.cli.main.main`) catches :class:`CosyEdgeError`, prints ``[!] <message>`` to
stderr without a traceback and exits with ``exit_code``. Any other exception is a bug and keeps its
traceback.

Source: Polygraphy ``logger.critical`` / ``tools/_main.py`` (one-line fatal errors).
"""

from __future__ import annotations


def first_line(err: BaseException, with_type: bool = True) -> str:
    """Return the first non-empty line of ``str(err)`` (str), prefixed ``"TypeName: "`` when ``with_type``.

    Third-party exceptions (protobuf, ONNX Runtime, libsndfile) often carry multi-line texts; cosyedge
    errors quote only their first line so the CLI message stays one line.
    """
    text = str(err).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(err).__name__}: {line}" if with_type else line


class CosyEdgeError(Exception):
    """Base class of every expected failure. ``str(err)`` is a single line.

    Args:
        msg (str): What failed, the offending value, and the fix.
    """

    exit_code = 1

    def __init__(self, msg: str):
        super().__init__(" ".join(str(msg).split("\n")).strip())


class UsageError(CosyEdgeError):
    """Bad arguments or bad input data (wrong rate, NaN samples, bad chunk length...). Exit 2."""

    exit_code = 2


class ArtifactError(CosyEdgeError):
    """A model, engine, manifest or audio file is missing, corrupt, stale or inconsistent. Exit 3."""

    exit_code = 3


class DependencyError(CosyEdgeError):
    """An optional dependency (torch, tensorrt, pycuda, sounddevice...) is missing. Exit 4."""

    exit_code = 4


class AccuracyError(CosyEdgeError):
    """A candidate build does not match its reference within tolerance. Exit 5."""

    exit_code = 5


class ServerError(CosyEdgeError):
    """A Triton server that cannot be reached, has no such model, fails a request or stops mid-stream
    (``cosyedge run --server``), or a ``cosyedge serve`` server that exits by itself. Exit 6."""

    exit_code = 6


class RegressionError(AccuracyError):
    """A candidate is worse than its tolerance (``cosyedge compare``) or than the committed baseline
    (``cosyedge check``). Exit 1, the usual "check failed" code of CI tools (pytest, Polygraphy), kept
    apart from bad input (2); :class:`AccuracyError`'s 5 remains for a build's own accuracy scan."""

    exit_code = 1
