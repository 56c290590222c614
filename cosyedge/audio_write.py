"""Writing audio files for ``cosyedge run``: :func:`check_output_path` validates an output path before any processing,
:func:`write_audio` writes a whole signal atomically (temp file + rename), and :class:`IncrementalAudioWriter` writes
blocks as they come into a hidden part file beside the destination, renamed onto it on close; part files left by
killed processes are removed by the next writer of the same destination (:func:`remove_stale_parts`). A failed write
names its cause (disk full...) in one line. Re-exported by :mod:`cosyedge.audio`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from cosyedge.artifacts import atomic_output, check_writable, default_file_mode, write_error
from cosyedge.audio_read import CLIP_LEVEL, CLIP_WARN_FRACTION, sf
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG

OUTPUT_FORMATS = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS")}
"""dict[str, tuple[str, str]]: output extension -> (soundfile format, subtype)."""
EXACT_FORMATS = {".wav": ("WAV", "FLOAT"), ".flac": ("FLAC", "PCM_24")}
"""dict[str, tuple[str, str]]: output extension -> (format, subtype) for recordings that must keep the
samples as computed (``cosyedge run mic --save-input``): .wav is 32-bit float (bit-exact, not clipped),
.flac 24-bit; a lossy .ogg has no entry."""


def check_output_path(path: str | Path) -> Path:
    """Check that ``path`` can be written as audio, before any processing.

    The extension must be one of :data:`OUTPUT_FORMATS`; then :func:`cosyedge.artifacts.check_writable`
    (not a folder, no file among the parents, write permission, a probe file created and deleted).

    Args:
        path (str | Path): Output audio path; missing parent folders are created when writing.
    Returns:
        Path: ``path`` as a Path.
    Raises:
        UsageError: unsupported extension.
        ArtifactError: ``path`` is a folder, a parent is a file, or nothing can be written there.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in OUTPUT_FORMATS:
        raise UsageError(
            f"output {path}: unsupported extension '{path.suffix}' (use one of {', '.join(OUTPUT_FORMATS)})"
        )
    check_writable(path)
    return path


SFE_SYSTEM = 2
"""int: libsndfile's error code for a failed system call (``SF_ERR_SYSTEM``: its text is only "System error.")."""


def _libsndfile_os_error(err: BaseException, handle=None) -> OSError | None:
    """The ``OSError`` behind a libsndfile "System error." (a write onto a full disk...), or None.

    python-soundfile reports every failed system call as ``LibsndfileError`` code 2 with the text "System error.";
    the cause is C's ``errno`` right after the failing call (cffi keeps it per thread), else libsndfile's own
    ``sf_strerror`` of the open file ("System error : No space left on device.").

    Args:
        err (BaseException): What soundfile raised.
        handle: The ``SNDFILE*`` of the open file (``SoundFile._file``), when there is one.
    Returns:
        OSError | None: the cause, or None when ``err`` is not a system error or the cause is unknown.
    """
    if isinstance(err, OSError):
        return err
    if getattr(err, "code", None) != SFE_SYSTEM:
        return None
    try:
        code = int(sf._ffi.errno)
    except Exception:  # pragma: no cover - soundfile without cffi internals
        code = 0
    if code > 0:
        return OSError(code, os.strerror(code))
    try:
        text = sf._ffi.string(sf._snd.sf_strerror(handle)).decode(errors="replace") if handle is not None else ""
    except Exception:  # pragma: no cover
        text = ""
    cause = text.partition(":")[2].strip().rstrip(".")
    return OSError(0, cause) if cause else None


def _write_failed(err: BaseException, path: Path, handle=None, left: str = "nothing half-written is left",
                  doing: str = "writing") -> ArtifactError:
    """The one-line ``ArtifactError`` for a failed audio write: the cause named (no space left on device...)
    through :func:`cosyedge.artifacts.write_error` when there is one, else libsndfile's first line."""
    cause = _libsndfile_os_error(err, handle)
    if cause is not None:
        return write_error(cause, path, left=left)
    return ArtifactError(f"{doing} {path} failed ({first_line(err, with_type=False)})")


def write_audio(path: str | Path, y: np.ndarray, sample_rate_hz: int) -> Path:
    """Write audio atomically; the format follows the extension (wav/flac: PCM_16, ogg: Vorbis).

    Samples are clipped to [-1, 1] first. A failure leaves no partial file and keeps any existing one.

    Args:
        path (str | Path): Output file (``.wav``, ``.flac`` or ``.ogg``).
        y (np.ndarray): float32 PCM, shape (T,) (mono) or (T, C).
        sample_rate_hz (int): Sample rate, Hz.
    Returns:
        Path: ``path``.
    Raises:
        UsageError: unsupported extension.
        ArtifactError: unwritable path (see :func:`check_output_path`), ``y`` holds NaN/Inf, or writing failed.
    """
    path = check_output_path(path)
    y = np.asarray(y, dtype=np.float32)
    if not np.isfinite(y).all():
        raise ArtifactError(f"refusing to write {path}: {np.count_nonzero(~np.isfinite(y))} NaN/Inf output samples")
    fmt, subtype = OUTPUT_FORMATS[path.suffix.lower()]
    with atomic_output(path) as tmp:
        try:
            sf.write(str(tmp), np.clip(y, -1.0, 1.0), int(sample_rate_hz), subtype=subtype, format=fmt)
        except Exception as err:  # libsndfile errors (e.g. unsupported rate for the format, a full disk)
            if _libsndfile_os_error(err) is not None:
                raise _write_failed(err, path) from None
            raise ArtifactError(f"cannot write {path} ({first_line(err, with_type=False)})") from None
    return path


def _host_tag() -> str:
    """str: 6 hex digits of this machine's host name (a part file in a shared folder names its machine)."""
    import hashlib
    import socket

    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def _part_owner() -> str:
    """str: ``<pid>-<host tag>``, the owner an :class:`IncrementalAudioWriter` writes into its part file's name."""
    return f"{os.getpid()}-{_host_tag()}"


def _pid_alive(pid: int) -> bool:
    """bool: a process ``pid`` runs on this machine (another user's counts: signal 0 is then refused)."""
    if pid <= 0:
        return True  # never a writer's: leave such a file alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def remove_stale_parts(path: str | Path) -> list[Path]:
    """Delete the part files an :class:`IncrementalAudioWriter` of ``path`` left when its process was killed
    (SIGKILL, a crash, power loss: no chance to discard it), so a later run of the same output cleans up.

    A part file is ``.<name>.<pid>-<host tag>-<random>.part<ext>`` beside ``path``; one is stale when ``<host tag>`` is
    this machine's and no process ``<pid>`` runs. Part files of live processes, of other machines (a shared folder)
    and of unknown form are kept; a file that cannot be deleted is left as it is.

    Args:
        path (str | Path): The destination audio file.
    Returns:
        list[Path]: the part files deleted.
    """
    import glob
    import re

    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)-([0-9a-f]{{6}})-[^/]*\.part{re.escape(path.suffix)}")
    host, removed = _host_tag(), []
    try:
        candidates = list(path.parent.glob(f".{glob.escape(path.name)}.*.part{glob.escape(path.suffix)}"))
    except OSError:
        return removed
    for part in candidates:
        m = pattern.fullmatch(part.name)
        if m is None or m.group(2) != host or _pid_alive(int(m.group(1))):
            continue
        try:
            part.unlink()
        except OSError:
            continue
        removed.append(part)
        LOG.info("removed %s, the unfinished output of process %s (no longer running)", part, m.group(1))
    return removed


class IncrementalAudioWriter:
    """Mono audio file written block by block, renamed into place on :meth:`close`.

    Args:
        path (str | Path): Destination ``.wav``/``.flac`` (PCM 16-bit) or ``.ogg`` (Vorbis); checked by
            :func:`cosyedge.audio.check_output_path` before anything is opened.
        sample_rate_hz (int): Sample rate of the written samples, Hz.
        exact (bool): Keep the samples as given: :data:`cosyedge.audio.EXACT_FORMATS` (.wav 32-bit
            float, bit-exact and not clipped; .flac 24-bit) instead of 16-bit PCM.
    Raises:
        UsageError: unsupported extension (with ``exact``, one not in ``EXACT_FORMATS``: .ogg is lossy).
        ArtifactError: the path or its folder cannot be written.

    Attributes:
        frames (int): Samples written so far.
        clipped (int): Samples written so far at ``|y| >= CLIP_LEVEL`` (16-bit formats; cut at full scale). When
            more than :data:`CLIP_WARN_FRACTION` of the file clips, :meth:`close` warns once with the share.
    """

    def __init__(self, path: str | Path, sample_rate_hz: int, exact: bool = False):
        self.path = check_output_path(path)
        self.sample_rate_hz = int(sample_rate_hz)
        formats = EXACT_FORMATS if exact else OUTPUT_FORMATS
        if self.path.suffix.lower() not in formats:
            raise UsageError(f"{self.path}: use a {' or '.join(formats)} file, not '{self.path.suffix}' (a lossy "
                             f"or unknown format would not keep the samples)")
        fmt, subtype = formats[self.path.suffix.lower()]
        self._clip = subtype != "FLOAT"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_parts(self.path)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.{_part_owner()}-", suffix=".part" + self.path.suffix,
                                       dir=self.path.parent)
            os.close(fd)
        except OSError as err:
            raise ArtifactError(f"cannot write {self.path}: {err.strerror or err}") from None
        self.tmp_path = Path(tmp)
        try:
            self._file = sf.SoundFile(str(self.tmp_path), "w", samplerate=self.sample_rate_hz, channels=1,
                                      format=fmt, subtype=subtype)
        except Exception as err:  # libsndfile: unsupported rate for the format, disk errors
            self.tmp_path.unlink(missing_ok=True)
            if _libsndfile_os_error(err) is not None:
                raise _write_failed(err, self.path) from None
            raise ArtifactError(f"cannot write {self.path} ({first_line(err, with_type=False)})") from None
        self.frames = 0
        self.clipped = 0
        self.closed = False

    def write(self, y: np.ndarray) -> None:
        """Append samples.

        Args:
            y (np.ndarray): float32 mono, shape (n,), clipped to [-1, 1] here unless written as float;
                NaN/Inf written as 0.
        Raises:
            ArtifactError: the disk write failed, the cause named ("no space left on device"); the file so far
                is kept by :meth:`close`, deleted by :meth:`discard`.
        """
        y = np.asarray(y, np.float32).reshape(-1)
        if self._clip:
            with np.errstate(invalid="ignore"):
                self.clipped += int(np.count_nonzero(np.abs(y) >= CLIP_LEVEL))
            y = np.clip(y, -1.0, 1.0)
        y = np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)
        try:
            self._file.write(y)
        except Exception as err:
            raise _write_failed(err, self.path, getattr(self._file, "_file", None), left="") from None
        self.frames += y.shape[0]

    def close(self) -> Path | None:
        """Finish the file and rename it onto the destination; idempotent.

        Warns (one line) when more than :data:`CLIP_WARN_FRACTION` of the samples clipped.

        Returns:
            Path | None: the destination, or None when no frame was written (no file is left, an
            existing destination is kept).
        Raises:
            ArtifactError: the rename failed (the temp file is left in place and named in the message).
        """
        if self.closed:
            return self.path if self.frames else None
        self.closed = True
        try:
            self._file.close()
        except Exception as err:  # pragma: no cover - disk full at header rewrite
            raise _write_failed(err, self.path, left="", doing="finishing") from None
        if not self.frames:
            self.tmp_path.unlink(missing_ok=True)
            return None
        if self.clipped > CLIP_WARN_FRACTION * self.frames:
            LOG.warning("output audio %s clips: %.2f%% of samples at |y| >= %g, cut at full scale in the 16-bit "
                        "file (the model's output is too loud)", self.path, 100.0 * self.clipped / self.frames,
                        CLIP_LEVEL)
        try:
            os.chmod(self.tmp_path, default_file_mode())
            os.replace(self.tmp_path, self.path)
        except OSError as err:
            raise ArtifactError(f"cannot rename the recording {self.tmp_path} onto {self.path}: "
                                f"{err.strerror or err} (the recording is kept at {self.tmp_path})") from None
        return self.path

    def discard(self) -> None:
        """Close and delete the temp file without touching the destination (an existing file is kept);
        idempotent, and a no-op after :meth:`close`."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
        except Exception:  # pragma: no cover - the file is deleted anyway
            pass
        self.tmp_path.unlink(missing_ok=True)

    @property
    def duration_s(self) -> float:
        """float: seconds written so far."""
        return self.frames / self.sample_rate_hz

    def __enter__(self) -> IncrementalAudioWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
