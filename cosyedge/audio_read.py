"""Reading audio files for ``cosyedge run``: :class:`AudioReader` opens wav/flac/ogg (anything libsndfile decodes) and
yields validated float32 (t, C) blocks (missing, corrupt, empty and non-finite files get a one-line error; clipping,
out-of-range samples and channels that cancel in the mono mix only warn), :func:`load_audio` reads a whole file the
same way, and :func:`to_model_input` / :func:`from_model_output` downmix and resample to the model rate and back
(soxr, HQ). Re-exported by :mod:`cosyedge.audio`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG

sf = lazy_import("soundfile")
soxr = lazy_import("soxr")

MIN_SAMPLE_RATE_HZ = 4000
"""int: lowest input sample rate taken, Hz (below it a file holds no speech band worth enhancing: most
likely a wrong header)."""
CLIP_LEVEL = 0.999
"""float: |x| at or above this counts as clipped."""
CLIP_WARN_FRACTION = 1e-4
"""float: warn when more than this fraction of samples is clipped (1 in 10,000)."""
OUT_OF_RANGE_LEVEL = 2.0
"""float: |x| above this (6 dB over full scale) is out of range, not clipping: a float file on another scale
(integer-scaled samples, 1e6...); any such sample is warned about with the peak."""
CANCEL_WARN_DB = 30.0
"""float: warn when the mono mix (mean over channels) of a multichannel input is this many dB below its
channels (mean power): antiphase stereo that mixes to near silence. Uncorrelated channels mix about 3 dB down."""
SILENT_POWER = 1e-10
"""float: mean power (of samples in [-1, 1]) at or below which channels count as silent (-100 dBFS): no warning."""


BLOCK_FRAMES = 1 << 16
"""int: frames per block of :meth:`AudioReader.blocks` (65536: 1.4 s at 48 kHz; a few MB however long the file)."""


class AudioReader:
    """An audio file opened for reading block by block, validated as it is read.

    Opening checks what the header tells (the file exists, decodes, holds frames, has a usable rate);
    :meth:`blocks` checks every sample it yields (NaN/Inf refused, clipped and out-of-range samples counted and
    warned about once the file is read). Memory stays at one block however long the file is.

    Args:
        path (str | Path): wav, flac or ogg file (any format libsndfile can decode).
    Attributes:
        path (Path): The file.
        sample_rate_hz (int): Its sample rate, Hz.
        channels (int): Its channel count.
        frames (int): Frames the header announces (``frames_read`` is what was really read).
        frames_read (int): Frames yielded so far.
    Raises:
        ArtifactError: the file is missing, is not a file, cannot be read (permission denied), cannot be
            decoded (corrupt or not audio), or holds no samples.
        UsageError: its sample rate is below :data:`MIN_SAMPLE_RATE_HZ`.
    Source: python-soundfile ``SoundFile.blocks`` (python-soundfile.readthedocs.io).
    """

    def __init__(self, path: str | Path):
        path = Path(path)
        if not path.exists():
            raise ArtifactError(f"input audio not found: {path}")
        if not path.is_file():
            raise ArtifactError(f"input audio {path} is not a file")
        try:
            with open(path, "rb"):  # libsndfile reports an unreadable file as "System error."
                pass
        except PermissionError:
            raise ArtifactError(f"cannot read input audio {path}: permission denied (mode "
                                f"{path.stat().st_mode & 0o777:04o}); make it readable (chmod u+r)") from None
        try:
            self._file = sf.SoundFile(str(path))
        except Exception as err:  # soundfile.LibsndfileError, RuntimeError, TypeError on odd headers
            raise ArtifactError(
                f"cannot decode {path} as audio ({first_line(err, with_type=False)}); is it a valid wav/flac/ogg "
                f"file?") from None
        self.path = path
        self.sample_rate_hz = int(self._file.samplerate)
        self.channels = int(self._file.channels)
        self.frames = max(int(self._file.frames), 0)
        declared = _wav_declared_frames(path) if self._file.format == "WAV" else None
        if declared is not None and declared > self.frames:  # libsndfile counts what is there; the header knows
            self.frames = declared
        self.frames_read = 0
        self._clipped = self._out_of_range = 0
        self._peak = self._chan_energy = self._mix_energy = 0.0
        if self.frames == 0:
            self.close()
            raise ArtifactError(f"input audio {path} holds no samples (0 frames at {self.sample_rate_hz} Hz)")
        if self.sample_rate_hz < MIN_SAMPLE_RATE_HZ:
            self.close()
            raise UsageError(f"input audio {path} has a sample rate of {self.sample_rate_hz} Hz, below "
                             f"{MIN_SAMPLE_RATE_HZ} Hz: no speech band to enhance (a wrong header? resample it "
                             f"or fix the rate)")

    @property
    def duration_s(self) -> float:
        """float: duration the header announces, seconds."""
        return self.frames / self.sample_rate_hz

    def _read(self, n: int) -> np.ndarray:
        try:
            return self._file.read(n, dtype="float32", always_2d=True)
        except Exception as err:  # a truncated or damaged stream inside a valid header
            raise ArtifactError(f"cannot decode {self.path} after {self.frames_read} frames "
                                f"({first_line(err, with_type=False)}); is the file complete?") from None

    def _check(self, x: np.ndarray) -> None:
        """Refuse NaN/Inf in block ``x`` (counting them over the rest of the file); count clipped samples
        (``CLIP_LEVEL <= |x| <= OUT_OF_RANGE_LEVEL``) and out-of-range ones (above), and track the peak."""
        finite = np.isfinite(x)
        if not finite.all():
            bad = np.argwhere(~finite)
            t, ch = self.frames_read + int(bad[0][0]), int(bad[0][1])
            count, total = len(bad), self.frames_read + x.shape[0]
            while True:  # the count covers the whole file, as the user will want to know how bad it is
                rest = self._read(BLOCK_FRAMES)
                if not rest.shape[0]:
                    break
                count += int(np.count_nonzero(~np.isfinite(rest)))
                total += rest.shape[0]
            raise UsageError(
                f"input audio {self.path} holds {count} NaN/Inf sample(s) of {total * self.channels} (first at "
                f"sample {t} = {t / self.sample_rate_hz:.3f} s, channel {ch}); fix or re-export the file")
        a = np.abs(x)
        over = int(np.count_nonzero(a > OUT_OF_RANGE_LEVEL))
        self._out_of_range += over
        self._clipped += int(np.count_nonzero(a >= CLIP_LEVEL)) - over
        if a.size:
            self._peak = max(self._peak, float(a.max()))
        if x.shape[1] > 1:  # what the mono mix keeps of the channels (antiphase stereo mixes to silence)
            x64 = x.astype(np.float64)
            self._chan_energy += float(np.square(x64).sum()) / x.shape[1]
            self._mix_energy += float(np.square(x64.mean(axis=1)).sum())

    def blocks(self, block_frames: int = BLOCK_FRAMES) -> Iterator[np.ndarray]:
        """Yield the file's samples in order, from the start, one validated block at a time.

        Args:
            block_frames (int): Frames per block (the last block is shorter).
        Yields:
            np.ndarray: float32 (t, C), t <= ``block_frames``, range [-1, 1] for integer formats.
        Raises:
            UsageError: a block holds NaN/Inf samples (the message counts them over the whole file and
                gives the first one).
            ArtifactError: the file holds no samples after all, fewer frames than its header says (truncated),
                or its data is damaged.
        Warns:
            via ``LOG.warning`` after the last block when more than :data:`CLIP_WARN_FRACTION` of the
            samples have ``CLIP_LEVEL <= |x| <= OUT_OF_RANGE_LEVEL`` (clipped input), when any sample has
            ``|x| > OUT_OF_RANGE_LEVEL`` (out of range: the peak and the count are given), and when the channels
            of a multichannel file cancel in the mono mix (:data:`CANCEL_WARN_DB`); processing continues.
        """
        self._file.seek(0)
        self.frames_read, self._clipped, self._out_of_range, self._peak = 0, 0, 0, 0.0
        self._chan_energy = self._mix_energy = 0.0
        while True:
            x = self._read(int(block_frames))
            if not x.shape[0]:
                break
            self._check(x)
            self.frames_read += x.shape[0]
            yield x
        if self.frames_read == 0:
            raise ArtifactError(f"input audio {self.path} holds no samples (0 frames at {self.sample_rate_hz} Hz)")
        if self.frames_read < self.frames:  # a WAV cut short keeps its header's data size
            raise ArtifactError(
                f"input audio {self.path} is truncated: its header says {self.frames} frames "
                f"({self.frames / self.sample_rate_hz:.2f} s), the file holds {self.frames_read} "
                f"({self.frames_read / self.sample_rate_hz:.2f} s); is the file complete?")
        total = self.frames_read * self.channels
        if self._out_of_range:
            LOG.warning("input audio %s is out of range: peak |x| = %.4g, %d sample(s) (%.2f%%) above %g, full scale "
                        "being 1.0 (float samples on another scale? e.g. integer values: divide by 32768); processing "
                        "anyway", self.path, self._peak, self._out_of_range, 100.0 * self._out_of_range / total,
                        OUT_OF_RANGE_LEVEL)
        clipped = self._clipped / total
        if clipped > CLIP_WARN_FRACTION:
            LOG.warning("input audio %s looks clipped: %.2f%% of samples at |x| >= %g (processing anyway)",
                        self.path, 100.0 * clipped, CLIP_LEVEL)
        chan = self._chan_energy / self.frames_read
        if chan > SILENT_POWER and self._mix_energy / self.frames_read < chan * 10 ** (-CANCEL_WARN_DB / 10):
            down = 10 * np.log10(chan / max(self._mix_energy / self.frames_read, 1e-30))
            LOG.warning("input audio %s: its %d channels cancel when mixed to mono (the mix is %s: antiphase "
                        "stereo?), so the model hears near silence; give one channel instead (e.g. 'sox in.wav "
                        "left.wav remix 1') (processing anyway)", self.path, self.channels,
                        "silent" if down > 100 else f"{down:.0f} dB below them")

    def close(self) -> None:
        """Close the file; idempotent."""
        self._file.close()

    def __enter__(self) -> "AudioReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _wav_declared_frames(path: Path) -> int | None:
    """Frames a RIFF WAV's ``data`` chunk header announces (None: not found, or a streaming writer's 0 /
    0xFFFFFFFF placeholder). libsndfile reports the frames actually present, so a file cut short would
    otherwise pass as a shorter recording.

    Source: Microsoft/IBM RIFF WAVE format (``fmt `` chunk ``nBlockAlign``, ``data`` chunk size).
    """
    import struct

    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            block_align = None
            for _ in range(64):  # chunk list; data is usually the 2nd-4th chunk
                hdr = f.read(8)
                if len(hdr) < 8:
                    return None
                cid, size = hdr[:4], struct.unpack("<I", hdr[4:])[0]
                if cid == b"fmt ":
                    fmt = f.read(size + (size & 1))
                    if len(fmt) >= 14:
                        block_align = struct.unpack("<H", fmt[12:14])[0]
                    continue
                if cid == b"data":
                    if not block_align or size in (0, 0xFFFFFFFF):
                        return None
                    return size // block_align
                f.seek(size + (size & 1), 1)
    except OSError:
        return None
    return None


def load_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a whole audio file and validate its samples (:class:`AudioReader`, all blocks at once).

    Args:
        path (str | Path): wav, flac or ogg file (any format libsndfile can decode).
    Returns:
        tuple[np.ndarray, int]: samples float32, shape (T, C) (T frames, C channels), range [-1, 1] for
        integer formats; and the sample rate in Hz.
    Raises:
        ArtifactError: the file is missing, is not a file, cannot be decoded (corrupt or not audio), or
            holds no samples.
        UsageError: the file holds NaN/Inf samples (the message gives the count and the first one), or
            its sample rate is below :data:`MIN_SAMPLE_RATE_HZ`.
    Warns:
        via ``LOG.warning`` when more than :data:`CLIP_WARN_FRACTION` of the samples have
        ``CLIP_LEVEL <= |x| <= OUT_OF_RANGE_LEVEL`` (clipped input), or any has ``|x| > OUT_OF_RANGE_LEVEL``
        (out of range, with the peak); processing continues.
    """
    with AudioReader(path) as reader:
        blocks = list(reader.blocks(max(reader.frames, 1)))
        x = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        LOG.debug("loaded %s: %d frames x %d channel(s) at %d Hz", reader.path, x.shape[0], x.shape[1],
                  reader.sample_rate_hz)
        return x, reader.sample_rate_hz


def to_model_input(x: np.ndarray, sample_rate_hz: int, model_sample_rate_hz: int) -> np.ndarray:
    """Downmix to mono (mean over channels) and resample to the model rate.

    Args:
        x (np.ndarray): float PCM, shape (T,) or (T, C).
        sample_rate_hz (int): Rate of ``x``, Hz.
        model_sample_rate_hz (int): Model rate, Hz (e.g. 16000).
    Returns:
        np.ndarray: float32 mono, shape (T',) with T' ~= T * model_rate / rate.
    Source: soxr ``soxr.resample`` (python-soxr), quality "HQ".
    """
    x = np.asarray(x, dtype=np.float32)
    mono = x.mean(axis=1) if x.ndim == 2 else x
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if int(sample_rate_hz) != int(model_sample_rate_hz):
        mono = soxr.resample(mono, int(sample_rate_hz), int(model_sample_rate_hz), quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def from_model_output(y: np.ndarray, model_sample_rate_hz: int, sample_rate_hz: int, length: int) -> np.ndarray:
    """Resample model output back to ``sample_rate_hz`` and make it exactly ``length`` samples.

    Args:
        y (np.ndarray): float32 mono at the model rate, shape (T',).
        model_sample_rate_hz (int): Rate of ``y``, Hz.
        sample_rate_hz (int): Target rate, Hz (the input file's).
        length (int): Target length in samples (the input file's frame count); trimmed or zero-padded.
    Returns:
        np.ndarray: float32, shape (length,).
    """
    y = np.ascontiguousarray(y, dtype=np.float32)
    if int(sample_rate_hz) != int(model_sample_rate_hz):
        y = soxr.resample(y, int(model_sample_rate_hz), int(sample_rate_hz), quality="HQ")
    if y.shape[0] >= length:
        return np.ascontiguousarray(y[:length], dtype=np.float32)
    return np.concatenate([y, np.zeros(length - y.shape[0], np.float32)])
