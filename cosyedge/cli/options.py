"""Shared click option sets (decorators) for cosyedge commands."""

from __future__ import annotations

import math
import os

import click


class FiniteFloat(click.ParamType):
    """A finite float (NaN and Inf refused), optionally bounded: ``FiniteFloat(min=0, min_open=True)``
    takes only positive numbers. Bad values are click usage errors (one ``[!]`` line, exit 2).

    Args:
        min (float | None): Lower bound; None: any finite number.
        min_open (bool): The bound itself is refused (``> min`` instead of ``>= min``).
        max (float | None): Upper bound (inclusive); None: none.
    """

    name = "float"

    def __init__(self, min: float | None = None, min_open: bool = False, max: float | None = None):
        self.min = min
        self.min_open = min_open
        self.max = max

    def convert(self, value, param, ctx) -> float:
        v = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.min is not None and (v <= self.min if self.min_open else v < self.min):
            self.fail(f"{v:g} is not {'>' if self.min_open else '>='} {self.min:g}", param, ctx)
        if self.max is not None and v > self.max:
            self.fail(f"{v:g} is not <= {self.max:g}", param, ctx)
        return v


def log_opts(fn):
    """Add ``-v/--verbose`` (count) and ``-q/--quiet``; configure :data:`cosyedge.log.LOG` before the command."""
    import functools

    from cosyedge.log import LOG

    @click.option("-v", "--verbose", count=True, help="Debug log output.")
    @click.option("-q", "--quiet", is_flag=True, help="Warnings and errors only.")
    @functools.wraps(fn)
    def wrapper(*args, verbose: int = 0, quiet: bool = False, **kwargs):
        LOG.configure(-1 if quiet else verbose)
        return fn(*args, **kwargs)

    return wrapper


def available_cpus() -> int:
    """CPU cores this process may run on (int, >= 1): its affinity mask (a container's or ``taskset``'s limit),
    else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


MAX_THREADS = 256
"""int: the most ``--threads`` any command takes (as :data:`cosyedge.runtime.ort.MAX_THREADS`)."""


def warn_threads_above_cpus(ctx, param, value):
    """click callback of every ``--threads`` option: refuse a value outside 1..:data:`MAX_THREADS` (a click usage
    error naming the option: one ``[!]`` line, exit 2); one warning line when ``value`` (int) exceeds
    :func:`available_cpus` (the value is kept), except beside ``run --server`` (eager, so processed first), where
    the server runs the model and ``run`` refuses ``--threads``.

    ONNX Runtime's threads then wait on each other: measured, ``cosyedge run --threads 64`` on 2 cores ran at
    RTF 1.21 (slower than real time) against 0.045 with one thread.

    Returns:
        int: ``value`` unchanged.
    """
    from cosyedge.log import LOG

    if value is not None and not 1 <= value <= MAX_THREADS:
        raise click.BadParameter(f"{value} is not in 1..{MAX_THREADS}", ctx=ctx, param=param)
    if ctx is not None and ctx.params.get("server"):  # 'run --server' (an eager option): no ONNX Runtime here
        return value
    cpus = available_cpus()
    if value is not None and cpus < value <= MAX_THREADS:
        LOG.warning("--threads %d is more than the %d CPU core%s this process can use: ONNX Runtime's threads then "
                    "wait on each other (64 on 2 cores ran 25x slower than 1 thread); give --threads %d or less",
                    value, cpus, "" if cpus == 1 else "s", cpus)
    return value
