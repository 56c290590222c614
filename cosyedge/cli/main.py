"""``cosyedge`` command line: a lazy click group; each command lives in its own ``cosyedge.cli.<module>``.

Errors: :class:`~cosyedge.errors.CosyEdgeError` becomes one line ``[!] message`` on stderr and exit
code ``err.exit_code`` (no traceback); so does a click usage error (unknown option, bad choice, missing
argument: exit 2), with a pointer to the command's ``--help``. Source: Polygraphy ``tools/_main.py``.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys

import click

from cosyedge import __version__
from cosyedge.errors import CosyEdgeError, first_line

# command name -> (module, attribute); modules are imported only when the command runs or --help lists it.
COMMANDS = {
    "export": ("cosyedge.cli.export", "export"),
    "streamify": ("cosyedge.cli.export", "streamify"),
    "adopt": ("cosyedge.cli.adopt", "adopt"),
    "build": ("cosyedge.cli.build", "build"),
    "run": ("cosyedge.cli.run", "run"),
    "sparsify": ("cosyedge.cli.sparsify", "sparsify"),
    "calib": ("cosyedge.cli.calib", "calib"),
    "eval": ("cosyedge.cli.eval", "eval_cmd"),
    "compare": ("cosyedge.cli.compare", "compare"),
    "check": ("cosyedge.cli.compare", "check"),
    "devices": ("cosyedge.cli.devices", "devices"),
    "serve": ("cosyedge.cli.serve", "serve"),
    "doctor": ("cosyedge.cli.doctor", "doctor"),
}


class LazyGroup(click.Group):
    """click group that imports command modules on demand."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        mod, attr = COMMANDS[name]
        return getattr(importlib.import_module(mod), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cosyedge")
def cli():
    """cosyedge: stream speech models (convs, recurrent layers, attention, positions) on TensorRT and ONNX Runtime.

    Pipeline: export -> streamify (or adopt, for a graph that already streams) -> build -> run. Run 'cosyedge COMMAND --help' for details.

    Errors are one '[!] ...' line on stderr. Exit codes: 1 accuracy regression (compare, check); 2 bad
    arguments or bad samples; 3 missing, corrupt, empty or stale file (or out of memory); 4 missing optional
    dependency or device; 5 a stream graph that fails its proof or a build that fails its accuracy scan; 6 a
    Triton server that cannot be reached, lacks the model or fails mid-stream (run --server, serve); 130
    Ctrl-C, 143 SIGTERM (both: half-written output removed, earlier files kept). Add -v or -q after the command for
    debug or warnings-only logs. Examples: scripts/examples/.
    """


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` runs: temp files and folders of atomic
    writes are removed and finished outputs are kept, as on Ctrl-C. A BaseException, so no ``except
    Exception`` swallows it."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def _interrupted(err: BaseException) -> int | None:
    """The exit code of the signal that made ``err``: 143 when :class:`Terminated` (SIGTERM), 130 when
    ``KeyboardInterrupt`` (Ctrl-C) interrupted the code that raised it, else None.

    A signal that lands while a C extension initialises comes back as ``ImportError: initialization failed``
    caused by the signal's exception, and cosyedge may wrap that in a one-line error (``raise ... from None``
    keeps it as ``__context__``); so ``__cause__`` and ``__context__`` are followed."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, Terminated):
            return 143
        if isinstance(err, KeyboardInterrupt):
            return 130
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


_PATH_ERRNOS = {errno.ENAMETOOLONG: "a file or folder name is at most 255 bytes, a whole path 4096: give a shorter one",
                errno.ELOOP: "a symbolic link loop, or too many links in a row: fix the link or give the real path",
                errno.EACCES: "no permission: change the file's or its folder's permissions, or give another path"}
"""dict[int, str]: errno of an ``OSError`` that a bad path (not a bug) raises from a path check anywhere in a
command (``Path.is_dir``, ``open``, ``os.stat``...) -> the fix :func:`main` prints after it."""


def _path_error(err: OSError) -> str | None:
    """The one-line message (str, without ``[!]``) for an ``OSError`` a bad path raised (errno in
    :data:`_PATH_ERRNOS`: a name over 255 bytes, a symlink loop, no permission), else None (keep the traceback:
    any other OSError may be a bug). A folder or file name over 60 characters is shortened in the middle,
    its length in bytes added."""
    if err.errno not in _PATH_ERRNOS:
        return None
    name = os.fsdecode(err.filename) if err.filename is not None else ""
    name = "/".join(f"{part[:24]}...{part[-12:]} ({len(os.fsencode(part))} bytes)" if len(part) > 60 else part
                    for part in name.split("/"))
    what = f"cannot use {name}" if name else "cannot use a path"
    return f"{what}: {err.strerror or err} ({_PATH_ERRNOS[err.errno]})"


def _output_error(err: OSError) -> str | None:
    """The one-line message (str, without ``[!]``) for an ``OSError`` of a full disk or a closed pipe (ENOSPC,
    EDQUOT, EPIPE) without a file name: a print to stdout (``cosyedge run ... > /dev/full``); files that cosyedge
    writes have their own messages. Standard output is then pointed at /dev/null so that Python's flush at exit
    prints no second error. Returns None for any other OSError."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EPIPE) or err.filename is not None:
        return None
    streams = {id(s) for s in (sys.stdout, sys.__stdout__, getattr(sys.stdout, "buffer", None)) if s is not None}
    tb, stdout = err.__traceback__, False
    while tb is not None:
        stdout = stdout or any(id(v) in streams for v in tb.tb_frame.f_locals.values())
        tb = tb.tb_next
    if stdout:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's captured stdout)
            pass
    return f"cannot write {'standard output' if stdout else 'output'}: {err.strerror or err}"


def _memory_error(err: MemoryError) -> str:
    """The one-line message (str, without ``[!]``) for a ``MemoryError`` (numpy's ``ArrayMemoryError`` names the
    size and shape it could not allocate): sizes come from files and arguments (a state, chunk or model larger than
    this machine's memory), so it is exit 3, not a traceback."""
    what = first_line(err, with_type=False)
    return (f"out of memory{': ' + what if what else ''} (a model, state or chunk larger than this machine's memory: "
            f"check the file's shapes and the chunk length)")


_NoArgsIsHelp = getattr(click.exceptions, "NoArgsIsHelpError", ())
"""click >= 8.2 raises it for a bare ``cosyedge`` (older click prints the help and exits 0 itself)."""

_INTERRUPTED = {143: "[!] terminated (SIGTERM): unfinished outputs removed, earlier files kept",
                130: "[!] interrupted (Ctrl-C, SIGINT): unfinished outputs removed, earlier files kept"}
"""dict[int, str]: the one line of an interrupted command by exit code; both signals run every ``finally`` (temp files
and the folders a command made for them are removed: :func:`cosyedge.artifacts.files.atomic_folder`)."""


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Returns the exit code (0 ok, CosyEdgeError.exit_code on failure, 130 on Ctrl-C,
    143 on SIGTERM)."""
    from cosyedge.log import LOG

    LOG.configure(0)
    try:
        old = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a thread): leave signals alone
        old = None
    try:
        cli.main(args=argv, prog_name="cosyedge", standalone_mode=False)
    except Terminated:
        click.echo(_INTERRUPTED[143], err=True)
        return 143
    except CosyEdgeError as err:
        code = _interrupted(err)
        click.echo(_INTERRUPTED[code] if code else f"[!] {err}", err=True)
        return code or err.exit_code
    except click.exceptions.Abort:
        click.echo(_INTERRUPTED[130], err=True)
        return 130
    except _NoArgsIsHelp as err:  # bare 'cosyedge': the help as click prints it (stderr, exit 2), not one line
        click.echo(err.format_message(), err=True)
        return err.exit_code
    except click.ClickException as err:  # bad arguments (click's own usage errors): one line too
        hint = ""
        if isinstance(err, click.UsageError) and err.ctx is not None:
            hint = f" (see '{err.ctx.command_path} --help')"
        click.echo(f"[!] {' '.join(err.format_message().split())}{hint}", err=True)
        return err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    except MemoryError as err:  # numpy's ArrayMemoryError too: a size read from a file or argument, not a bug here
        click.echo(f"[!] {_memory_error(err)}", err=True)
        return 3
    except Exception as err:
        line = (_path_error(err) or _output_error(err)) if isinstance(err, OSError) else None
        if line is not None:  # a bad path, a full disk or closed pipe on stdout: one line, exit 3
            click.echo(f"[!] {line}", err=True)
            return 3
        code = _interrupted(err)
        if code is None:
            raise
        click.echo(_INTERRUPTED[code], err=True)
        return code
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
