"""Shared click option sets (decorators) for cosyedge commands."""

from __future__ import annotations

import click


def log_opts(fn):
    """Add ``-v/--verbose`` (count) and ``-q/--quiet``; configure :data:`cosyedge.log.LOG` before the command."""
    import functools

    from cosyedge.log import LOG

    @click.option("-v", "--verbose", count=True, help="More log output (repeat for debug).")
    @click.option("-q", "--quiet", is_flag=True, help="Warnings and errors only.")
    @functools.wraps(fn)
    def wrapper(*args, verbose: int = 0, quiet: bool = False, **kwargs):
        LOG.configure(-1 if quiet else verbose)
        return fn(*args, **kwargs)

    return wrapper
