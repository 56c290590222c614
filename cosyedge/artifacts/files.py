"""Files: ONNX loading, hashes, atomic writes of files and folders, destination checks, JSON (the IR-version logic
is in :mod:`cosyedge.artifacts.onnx_ir`, re-exported here).

Every file is written through :func:`atomic_output` (temp file in the destination folder, then
``os.replace``) so a failure never leaves a partial file or destroys the previous one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from cosyedge.artifacts.onnx_ir import TYPE_MIN_IR, portable_ir_version, with_portable_ir  # noqa: F401 - re-exported
from cosyedge.errors import ArtifactError, UsageError, first_line


def load_onnx(path: str | Path, load_external_data: bool = True) -> Any:
    """Load an ONNX file as ``onnx.ModelProto``.

    Raises:
        ArtifactError: the file is missing, is a folder (``... is a folder, expected an .onnx file``), is empty
            (0 bytes) or is not a valid ONNX protobuf.
    """
    import onnx

    path = Path(path)
    if path.is_dir():
        made = " (an engine folder from 'cosyedge build')" if (path / "manifest.json").is_file() else ""
        raise ArtifactError(f"{path} is a folder{made}, expected an .onnx file")
    if not path.is_file():
        raise ArtifactError(f"ONNX file not found: {path}")
    if path.stat().st_size == 0:  # onnx.load reads 0 bytes as an empty, "valid" ModelProto
        raise ArtifactError(f"ONNX file {path} is empty (0 bytes)")
    try:
        return onnx.load(str(path), load_external_data=load_external_data)
    except Exception as err:  # protobuf DecodeError and friends
        raise ArtifactError(f"cannot read ONNX file {path}: {first_line(err)}") from None


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Return the hex SHA-256 (str) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_bytes), b""):
            h.update(block)
    return h.hexdigest()


#: Metadata keys left out of :func:`model_content_sha256`: figures *measured* on the machine that wrote the file.
MACHINE_MEASURED_KEYS = ("cosyedge.proof",)
DERIVED_KEYS = ("cosyedge.state_bytes",)
"""tuple[str, ...]: metadata computed from other keys (the state bytes from ``cosyedge.state``): left out of
:func:`model_content_sha256` so that a baseline made before such a key was written still recognises its model."""


def model_content_sha256(path: str | Path) -> str:
    """Return the hex SHA-256 (str) of an ONNX model without its machine-measured metadata.

    The stream model records its proof's measured error (``cosyedge.proof``: max abs error, SNR). That figure depends on
    the CPU kernels ONNX Runtime picks (measured: the DeepFilterNet3 export differs only in that key between AVX-512
    and AVX2, under ``qemu-x86_64 -cpu Haswell``), so two machines exporting the same model write files with
    different :func:`sha256_file`. This hash covers everything else (graph, weights, the other metadata), in the
    model's own serialization (external data files are not read). Committed baselines use it to recognise their model
    on any CPU.

    Raises:
        ArtifactError: the file is missing or not an ONNX model.
    """
    import onnx

    from cosyedge.errors import ArtifactError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except OSError as err:
        raise ArtifactError(f"{path} is not readable ({err.strerror or err})") from None
    except Exception as err:  # protobuf's DecodeError and onnx's own errors
        raise ArtifactError(f"{path} is not a readable ONNX model ({type(err).__name__})") from None
    keep = [p for p in model.metadata_props if p.key not in MACHINE_MEASURED_KEYS + DERIVED_KEYS]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})
"""frozenset[int]: errnos that only a write raises (disk full, quota, file too large, read-only file system, I/O
error): inside :func:`atomic_output` / :func:`atomic_folder` they become :func:`write_error`'s one line, whatever
library (onnx, soundfile, json) did the writing."""

_WRITE_HINTS = {
    errno.ENOSPC: "free space there or write elsewhere",
    errno.EDQUOT: "free space in your quota or write elsewhere",
    errno.EROFS: "write elsewhere",
    errno.EACCES: "check its permissions or write elsewhere",
    errno.EPERM: "check its permissions or write elsewhere",
}


def os_error_cause(err: BaseException) -> str:
    """The cause of an ``OSError`` in words (str), lower-case first letter: ``"no space left on device"``.

    Args:
        err (BaseException): The error; its ``errno`` is spelled with ``os.strerror`` (the errno's own text,
            not the raising library's), else its ``strerror`` or ``str(err)``.
    Returns:
        str: e.g. ``"no space left on device"``, ``"read-only file system"``, ``"permission denied"``.
    """
    code = getattr(err, "errno", None)
    text = os.strerror(code) if isinstance(code, int) and code > 0 else (getattr(err, "strerror", None) or str(err))
    text = " ".join(str(text).split()).rstrip(".")
    return text[:1].lower() + text[1:]


class WriteError(ArtifactError):
    """An ``OSError`` while writing an artifact, as one line (exit 3, an :class:`~cosyedge.errors.ArtifactError`).

    Made by :func:`write_error`. Keeps the ``OSError`` (``os_error``) so that an enclosing
    :func:`atomic_folder` can name the folder being written instead of a temp file inside it.

    Attributes:
        os_error (OSError): The original error.
        dest (Path): The artifact named in the message.
    """

    def __init__(self, msg: str, os_error: BaseException, dest: Path):
        super().__init__(msg)
        self.os_error = os_error
        self.dest = dest


def write_error(err: BaseException, dest: str | Path, what: str = "",
                left: str = "nothing half-written is left") -> WriteError:
    """The one-line error (:class:`WriteError`, an ``ArtifactError``: exit 3) for an ``OSError`` raised while
    writing an artifact: every writer (build, run, streamify, export, calibration sets and caches) reports a full
    disk, a quota, a read-only file system the same way, naming the cause and the path.

    Args:
        err (BaseException): The ``OSError`` (its ``errno`` names the cause, :func:`os_error_cause`).
        dest (str | Path): The artifact being written (its final path, not the temp file).
        what (str): What it is, for the message (``"engine folder"``); empty for a plain file.
        left (str): What became of the partial output, for the message; empty: not said (a writer that keeps
            what it wrote so far).
    Returns:
        WriteError: ``writing <what> <dest> failed: no space left on device in <folder> (free space there or
        write elsewhere; nothing half-written is left)``. Raise it ``from None``.
    """
    dest = Path(dest)
    hint = _WRITE_HINTS.get(getattr(err, "errno", None), "write elsewhere")
    return WriteError(f"writing {what + ' ' if what else ''}{dest} failed: {os_error_cause(err)} in {dest.parent} "
                      f"({hint}{'; ' + left if left else ''})", err, dest)


def _inside(path: str | Path, folder: str | Path) -> bool:
    path, folder = os.path.abspath(os.fsdecode(path)), os.path.abspath(os.fsdecode(folder))
    return path == folder or path.startswith(folder + os.sep)


def is_write_error(err: BaseException, tmp: str | Path | None = None) -> bool:
    """True when ``err`` is an ``OSError`` that writing raised: its errno is in :data:`WRITE_ERRNOS`, or it
    names a file under ``tmp`` (the temp file or folder being written).

    Args:
        err (BaseException): Any exception.
        tmp (str | Path | None): The temp path being written, if any.
    Returns:
        bool: whether :func:`write_error` describes it.
    """
    if not isinstance(err, OSError):
        return False
    if err.errno in WRITE_ERRNOS:
        return True
    return tmp is not None and bool(err.filename) and _inside(err.filename, tmp)


@contextlib.contextmanager
def writing(dest: str | Path, what: str = "") -> Iterator[None]:
    """Turn any ``OSError`` raised in the block into :func:`write_error`'s one-line ``ArtifactError``.

    For writes outside :func:`atomic_output` / :func:`atomic_folder` (which convert write errors themselves), e.g.
    a folder of calibration files or an audio file written block by block.

    Args:
        dest (str | Path): The artifact being written (named in the message).
        what (str): What it is (``"calibration set"``).
    Raises:
        ArtifactError: the block raised an ``OSError``.
    """
    try:
        yield
    except OSError as err:
        raise write_error(err, dest, what) from None


def check_folder_path(path: str | Path, what: str = "output folder", why: str = "") -> Path:
    """Fail early when ``path`` cannot become a folder because it, or one of its parents, is a file.

    Args:
        path (str | Path): A folder to write into (need not exist).
        what (str): Its name in the message (``"-o"``).
        why (str): What the folder is for, in the message (``"the engines root"``); optional.
    Returns:
        Path: ``path`` as a Path.
    Raises:
        ArtifactError: ``path`` or a parent exists and is not a folder: ``-o out.wav must be a folder (the engines
            root), but it is a file: give a folder path``.
    """
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                found = "it is a file" if p == path else f"{p} is a file"
                raise ArtifactError(f"{what} {path} must be a folder{f' ({why})' if why else ''}, but {found}: "
                                    f"give a folder path")
            break
    return path


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs: the cleanup of a temp file or folder (thousands of files of a
    half-written calibration set) is never cut short by a second Ctrl-C or a SIGTERM, which left the temp folder
    half removed. The previous handlers are restored after; a signal that arrived meanwhile is then delivered again,
    unless the block ran while an interrupt (Ctrl-C, SIGTERM: a ``BaseException`` that is no ``Exception``) was
    already ending the command, which the held one would only repeat. Outside the main thread (where handlers cannot
    be set) the block runs as is."""
    held: list[int] = []
    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        ending = sys.exc_info()[1]
        if held and (ending is None or isinstance(ending, Exception)):
            signal.raise_signal(held[0])


@contextlib.contextmanager
def atomic_output(dest: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; on success rename it onto ``dest``, on error delete it.

    The previous ``dest`` (if any) survives any failure. The parent folder must exist or be creatable.

    Args:
        dest (str | Path): Final path.
        suffix (str | None): Temp file suffix (defaults to ``dest``'s, so format sniffing by extension works).
    Raises:
        ArtifactError: the destination folder cannot be created or written.
    """
    dest = Path(dest)
    tmp: Path | None = None
    try:
        with signals_held():  # a signal while the temp file is made comes once it is known (and removed below)
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(prefix=f".{dest.name}.",
                                            suffix=suffix if suffix is not None else dest.suffix, dir=dest.parent)
                tmp = Path(name)
                os.close(fd)
            except OSError as err:
                check_folder_path(dest.parent, "output folder", f"it receives {dest.name}")
                if err.errno in WRITE_ERRNOS:
                    raise write_error(err, dest) from None
                raise ArtifactError(f"cannot write {dest}: {err.strerror or err}") from None
    except BaseException:
        if tmp is not None:
            with signals_held():
                tmp.unlink(missing_ok=True)
        raise
    try:
        yield tmp
        if tmp.exists():  # mkstemp makes 0600 files: give the mode a plain open() would
            os.chmod(tmp, default_file_mode())
        os.replace(tmp, dest)
    except OSError as err:
        if not is_write_error(err, tmp):
            raise
        raise write_error(err, dest) from None
    finally:
        with signals_held():
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_folder(dest: str | Path, what: str = "folder") -> Iterator[Path]:
    """Yield an empty temporary folder next to ``dest``; on success it replaces ``dest`` (see
    :func:`replace_dir`), on any error (or interrupt) it is deleted and a previous ``dest`` is kept.

    Args:
        dest (str | Path): Final folder; its parent is created if needed.
        what (str): Name of the folder in error messages (e.g. ``"engine folder"``).
    Raises:
        ArtifactError: the parent cannot be created or written, or the rename fails.
    """
    dest = Path(dest)
    root = dest.parent
    made: list[Path] = []  # folders above dest this call creates (./engines on a first build): removed on failure
    tmp: Path | None = None
    try:
        with signals_held():  # a signal while the temp folder is made comes once it is known (and removed below)
            try:
                made = made_folders(root)
                remove_stale_temp_folders(dest)
                tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
                (tmp / OWNER_FILE).write_text(f"{os.getpid()}\n")
            except OSError as err:
                check_folder_path(root, "output folder", f"it receives the {what}")
                if err.errno in WRITE_ERRNOS:
                    raise write_error(err, dest, what) from None
                raise ArtifactError(f"cannot write {what} in {root}: {err.strerror or err}") from None
    except BaseException:
        with signals_held():
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            remove_empty_folders(made)
        raise
    try:
        yield tmp
        (tmp / OWNER_FILE).unlink(missing_ok=True)
        os.chmod(tmp, default_file_mode(0o777))  # mkdtemp creates 0700
        replace_dir(tmp, dest, what)
    except OSError as err:
        with signals_held():
            shutil.rmtree(tmp, ignore_errors=True)
            remove_empty_folders(made)
        if not is_write_error(err, tmp):
            raise
        raise write_error(err, dest, what) from None
    except WriteError as err:  # a file inside the temp folder: name the folder, not the temp file
        with signals_held():
            shutil.rmtree(tmp, ignore_errors=True)
            remove_empty_folders(made)
        if not _inside(err.dest, tmp):
            raise
        raise write_error(err.os_error, dest, what) from None
    except BaseException:  # an error, Ctrl-C or SIGTERM: no temp folder, and no empty folder this call made
        with signals_held():
            shutil.rmtree(tmp, ignore_errors=True)
            remove_empty_folders(made)
        raise


def made_folders(folder: str | Path) -> list[Path]:
    """Create ``folder`` and its missing parents (``mkdir -p``); returns the folders this call created, deepest first
    (list[Path], empty when ``folder`` existed), for :func:`remove_empty_folders` after a failure.

    Raises:
        OSError: as ``Path.mkdir``.
    """
    folder = Path(folder)
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first, as :func:`made_folders` returns them) that is empty now; one that
    holds anything (another writer's output) is kept, and so are the folders above it."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            return


OWNER_FILE = ".cosyedge-owner"
"""str: file in an :func:`atomic_folder` temp folder holding the writing process's pid (removed before the rename)."""


def remove_stale_temp_folders(dest: str | Path) -> list[Path]:
    """Remove temp folders that a killed writer of ``dest`` left (``.<name>.XXXX`` beside it, whose owner
    pid is no longer running; a SIGKILL or power loss skips every cleanup). A folder of a live writer (a
    concurrent build) is kept.

    Args:
        dest (str | Path): The final folder.
    Returns:
        list[Path]: the folders removed.
    """
    dest = Path(dest)
    removed = []
    for cand in dest.parent.glob(f".{dest.name}.*"):
        owner = cand / OWNER_FILE
        if not cand.is_dir() or cand.is_symlink() or not owner.is_file():
            continue
        try:
            pid = int(owner.read_text().strip())
            os.kill(pid, 0)
            if pid != os.getpid():
                continue  # a live writer
        except ProcessLookupError:
            pass  # its writer is gone
        except (ValueError, OSError):
            continue
        shutil.rmtree(cand, ignore_errors=True)
        removed.append(cand)
    return removed


def replace_dir(tmp: Path, dest: Path, what: str = "folder") -> None:
    """Rename folder ``tmp`` onto ``dest``; an existing ``dest`` is moved aside first and removed after
    (restored if the rename fails).

    Raises:
        ArtifactError: a rename fails (the message names ``what`` and ``dest``).
    """
    old = None
    try:
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.rmdir(old)
            os.rename(dest, old)
        os.rename(tmp, dest)
    except OSError as err:
        if old is not None and not dest.exists():
            os.rename(old, dest)
            old = None
        raise ArtifactError(f"cannot write {what} {dest}: {err.strerror or err}") from None
    finally:
        if old is not None:
            with signals_held():  # dest is in place: the previous folder goes whole
                if old.is_dir() and not old.is_symlink():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)


def check_not_input(src: str | Path, dest: str | Path) -> None:
    """Refuse an output path that is the input file (any spelling: ``./x``, ``a/../x``, a symlink to it),
    so a stage never replaces what it reads.

    Args:
        src (str | Path): Input file.
        dest (str | Path): Output file (need not exist).
    Raises:
        UsageError: ``dest`` is ``src`` (the input is kept).
    """
    src, dest = Path(src), Path(dest)
    if src.exists() and dest.exists() and src.resolve() == dest.resolve():
        raise UsageError(f"output {dest} is the input file: give another output path (the input is kept)")


def check_not_inputs(dest: str | Path, inputs, option: str) -> None:
    """Refuse a report path (``--json``, ``--junit``) that is one of the command's inputs, so writing the report
    never replaces a model, a baseline or an engine's file.

    Args:
        dest (str | Path): The report path (need not exist).
        inputs (Iterable[str | Path | None]): Input files and folders; None entries are skipped. A file is
            matched as by :func:`check_not_input` (any spelling, a symlink to it); a folder (an engine folder,
            a calibration set) protects every existing file under it.
        option (str): The option that gave ``dest``, as the message names it (e.g. ``"--json"``).
    Raises:
        UsageError: ``dest`` is an input file or an existing file inside an input folder (exit 2; nothing
            is written).
    """
    dest = Path(dest)
    if not dest.exists():
        return
    real = dest.resolve()
    for src in inputs:
        if src is None:
            continue
        src = Path(src)
        if not src.exists():
            continue
        top = src.resolve()
        if real == top:
            raise UsageError(f"{option} {dest} is the input {src}: give another path for the report (the input "
                             f"is kept)")
        if src.is_dir() and real.is_relative_to(top):
            raise UsageError(f"{option} {dest} is a file of the input folder {src}: give another path for the "
                             f"report (the input is kept)")


def check_writable(dest: str | Path) -> Path:
    """Fail early, before any work, when ``dest`` cannot be written as a file.

    Args:
        dest (str | Path): Output file path; missing parent folders are allowed (they are created later).
    Returns:
        Path: ``dest`` as a Path.
    Raises:
        ArtifactError: ``dest`` is a folder, an existing read-only file (no write bit: it is kept, not
            replaced by the rename of a new file), an ancestor is a file, or the nearest existing folder is not
            writable.
    """
    dest = Path(dest)
    if dest.is_dir():
        raise ArtifactError(f"cannot write {dest}: it is a folder (give a file path)")
    if dest.is_file() and not dest.stat().st_mode & 0o222:  # refused as cp and a shell's '>' do (root too)
        raise ArtifactError(f"cannot write {dest}: the file is read-only (mode {dest.stat().st_mode & 0o777:04o}), "
                            f"kept as it is; make it writable (chmod u+w) or give another path")
    parent = dest.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ArtifactError(f"cannot write {dest}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ArtifactError(f"cannot write {dest}: no write permission in {parent}")
    # Permission bits do not show everything (root on a read-only or virtual file system such as /proc):
    # create and delete a probe file.
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{dest.name}.probe.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ArtifactError(f"cannot write {dest}: cannot create files in {parent} ({err.strerror or err})") from None
    return dest


def default_file_mode(mode: int = 0o666) -> int:
    """Return ``mode`` (int) masked by the process umask: what ``open()``/``mkdir()`` would give.

    Temp files from :func:`tempfile.mkstemp` are 0600 and folders from ``mkdtemp`` 0700; artifacts get
    this mode before their rename.
    """
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_json(path: str | Path, data: dict) -> None:
    """Atomically write ``data`` (JSON-serialisable dict) to ``path``, pretty-printed."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
