"""What the benchmark scripts beside this file share: the repository paths and the machine block of their JSON.

Not a script. ``python scripts/benchmarks/NAME.py`` puts this folder first on ``sys.path``, so a script imports it as
``from _common import ROOT, machine``; ``tests/scripts.py`` does the same when a test loads a script. Torch-free;
NumPy and ONNX Runtime are imported only when :func:`machine` is called.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""Path: the repository root (this file is ``ROOT/scripts/benchmarks/_common.py``)."""

BENCHMARKS = Path(__file__).resolve().parent
"""Path: ``ROOT/scripts/benchmarks``, where the benchmark scripts are (``bench_targets.py`` runs others from here)."""


def wait_turn(t_next: float, period_s: float) -> tuple[float, bool]:
    """Pace one call: with ``period_s`` > 0, sleep until the next deadline ``t_next + period_s`` (``time.perf_counter``
    seconds), as a live stream's worker waits for its next hop of audio; with 0, return at once (back to back).

    Returns:
        tuple[float, bool]: the deadline just waited for (the next call's ``t_next``), and whether it had already
        passed (the call is late).
    """
    if period_s <= 0:
        return t_next, False
    t_next += period_s
    wait = t_next - time.perf_counter()
    if wait > 0:
        time.sleep(wait)
    return t_next, wait <= 0


def _version(module: str) -> str | None:
    """``module.__version__`` (str), or None when it cannot be imported."""
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def machine(**extra) -> dict:
    """Return the machine block every benchmark writes into its JSON report (key ``"machine"``).

    Args:
        **extra: more keys for this benchmark (e.g. ``torch=torch.__version__``, ``loadavg_1min_start=...``),
            appended after the common ones in the order given (a common key given here replaces its value).
    Returns:
        dict: ``platform`` (``platform.platform()``), ``processor`` (``platform.processor()``, else the architecture),
        ``cpu_count`` (int, logical CPUs), ``loadavg_1min`` (float, the 1-minute load average when called: another
        job on the CPU inflates every timing), ``python``, ``numpy`` and ``onnxruntime`` (version strings; None when
        the package is missing), then ``extra``.
    """
    block = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
             "cpu_count": os.cpu_count(), "loadavg_1min": os.getloadavg()[0],
             "python": platform.python_version(), "numpy": _version("numpy"), "onnxruntime": _version("onnxruntime")}
    block.update(extra)
    return block
