"""The Python backend's shared-memory regions of ``cosyedge serve`` runs: each run claims its own region prefix in
``/dev/shm`` with a lock file held while its server lives (:class:`ShmRegions`, mixed into
:class:`~cosyedge.serve.server.TritonServer`), removes its regions when it stops, and removes those of runs that are
over (a server killed with SIGKILL leaves them: :func:`clean_stale_shm`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from cosyedge.log import LOG

SHM_DIR = Path("/dev/shm")
"""Path: where the Python backend's shared-memory regions live (POSIX shm on Linux)."""
SHM_PREFIX = "cosyedge_triton_"
"""str: start of the Python backend's shm region prefix of every ``cosyedge serve`` run
(``cosyedge_triton_<token>_``, a ``<token>.lock`` beside it held while the run's server lives)."""


def _flock(fd: int, blocking: bool) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except OSError:
        return False


def clean_stale_shm(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove the Python-backend shm regions of ``cosyedge serve`` runs that are over (a server killed with
    SIGKILL leaves ``/dev/shm/<prefix>*``): a run's regions are known by its prefix, and the run is over when
    nobody holds its ``<prefix>lock`` (the serving process and its tritonserver hold it while they live).

    Returns:
        list[str]: the names removed.
    """
    removed: list[str] = []
    if not shm_dir.is_dir():
        return removed
    for lock in shm_dir.glob(f"{SHM_PREFIX}*_lock"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            if not _flock(fd, blocking=False):
                continue  # a live run
            prefix = lock.name[:-len("lock")]
            for f in shm_dir.glob(f"{glob_escape(prefix)}*"):
                if f != lock:
                    with contextlib.suppress(OSError):
                        f.unlink()
                        removed.append(f.name)
            with contextlib.suppress(OSError):
                lock.unlink()
                removed.append(lock.name)
        finally:
            os.close(fd)
    return removed


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped (str)."""
    import glob

    return glob.escape(text)


class ShmRegions:
    """The shm regions of one :class:`~cosyedge.serve.server.TritonServer` run (a mixin: it sets the server's
    ``shm_prefix`` and ``_lock_fd``)."""

    def _claim_shm(self) -> list[str]:
        """Clean the shm regions of ``cosyedge serve`` runs that are over, then claim this run's prefix: a lock
        file ``/dev/shm/<prefix>lock`` held (flock) by this process and the server. Returns the tritonserver flags
        (``--backend-config=python,shm-region-prefix-name=<prefix>``), none where there is no ``/dev/shm``."""
        if not SHM_DIR.is_dir() or not os.access(SHM_DIR, os.W_OK):
            return []
        stale = clean_stale_shm()
        if stale:
            LOG.info("removed %d shared-memory files (regions and locks) of Triton servers that are gone: %s", len(stale),
                     ", ".join(stale[:4]) + (" ..." if len(stale) > 4 else ""))
        import secrets

        prefix = f"{SHM_PREFIX}{os.getpid()}{secrets.token_hex(4)}_"
        tmp_lock = SHM_DIR / f".{prefix}lock.tmp"
        try:
            fd = os.open(tmp_lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            _flock(fd, blocking=True)
            os.rename(tmp_lock, SHM_DIR / f"{prefix}lock")  # appears already locked: never taken for stale
        except OSError as err:
            LOG.debug("no shm lock (%s): Triton's default shm prefix", err)
            return []
        self._lock_fd, self.shm_prefix = fd, prefix
        return [f"--backend-config=python,shm-region-prefix-name={prefix}"]

    def _release_shm(self) -> None:
        """Remove this run's shm regions (after the server and its stubs are gone) and its lock."""
        if self.shm_prefix is None or self._lock_fd is None:
            return
        for f in SHM_DIR.glob(f"{glob_escape(self.shm_prefix)}*"):
            with contextlib.suppress(OSError):
                f.unlink()
        os.close(self._lock_fd)
        self._lock_fd = None

    def shm_regions(self) -> list[Path]:
        """list[Path]: this run's shm files now (its regions and its lock)."""
        if self.shm_prefix is None:
            return []
        return sorted(SHM_DIR.glob(f"{glob_escape(self.shm_prefix)}*"))
