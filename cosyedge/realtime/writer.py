"""Incremental audio file output for live streams: valid on a clean stop, on Ctrl-C and on errors.

:class:`IncrementalAudioWriter` writes blocks as they come into a hidden temp file next to the
destination (``.<name>.<random>.part<ext>``) and renames it onto the destination in :meth:`close`
(libsndfile rewrites the WAV/FLAC header on close, so the renamed file is complete and valid). A
recording with no frames leaves no file and keeps any existing one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import default_file_mode
from cosyedge.errors import ArtifactError, UsageError, first_line

sf = lazy_import("soundfile")


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
    """

    def __init__(self, path: str | Path, sample_rate_hz: int, exact: bool = False):
        from cosyedge.audio import EXACT_FORMATS, OUTPUT_FORMATS, check_output_path

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
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part" + self.path.suffix,
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
            raise ArtifactError(f"cannot write {self.path} ({first_line(err, with_type=False)})") from None
        self.frames = 0
        self.closed = False

    def write(self, y: np.ndarray) -> None:
        """Append samples.

        Args:
            y (np.ndarray): float32 mono, shape (n,), clipped to [-1, 1] here unless written as float;
                NaN/Inf written as 0.
        Raises:
            ArtifactError: the disk write failed (the file so far is kept by :meth:`close`).
        """
        y = np.asarray(y, np.float32).reshape(-1)
        if self._clip:
            y = np.clip(y, -1.0, 1.0)
        y = np.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)
        try:
            self._file.write(y)
        except Exception as err:
            raise ArtifactError(f"writing {self.path} failed ({first_line(err, with_type=False)})") from None
        self.frames += y.shape[0]

    def close(self) -> Path | None:
        """Finish the file and rename it onto the destination; idempotent.

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
            raise ArtifactError(f"finishing {self.path} failed ({first_line(err, with_type=False)})") from None
        if not self.frames:
            self.tmp_path.unlink(missing_ok=True)
            return None
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
