"""Calibration sets for INT8: ``calib/manifest.json`` + ``calib/audio/NNNNN.wav`` (16-bit PCM, mono).

Two ways to make one (:func:`make_calibration_set`, CLI ``cosyedge calib make``):

* **generated** (default): ``count`` (2048) utterances of noisy speech drawn, seeded, from the same
  offline sources and the same mixing as training (:class:`cosyedge.data.calib.TrainingMixClips` over
  :class:`cosyedge.data.training_data.TrainingData`: its
  training speech corpora and training noise bank, active-speech SNR uniform in [-5, 20] dB, peak -30..-1
  dBFS, 5 % noise-only and 5 % speech-only rows). The test set (pocketsphinx LibriVox speech and the
  held-out real noises) is never touched: ``TrainingData`` refuses test corpora and its bank holds no
  held-out noise. Utterance lengths are uniform in [1, 4] s. The first run downloads Debian packages
  into the data cache (minutes); later runs reuse it.
* **from a folder** (``--from DIR``): the user's own recordings, every readable mono/multichannel file
  at the set rate (16 kHz) is downmixed and copied in; unreadable, empty, non-finite and wrong-rate
  files are skipped and counted; fewer than :data:`MIN_FROM_FILES` usable files is an error.

The manifest lists every file with its SHA-256 (of the file bytes), duration (s) and SNR (dB; null for
noise-only, speech-only and user recordings). Files are written one at a time (memory stays at one
utterance plus the training data), the manifest last and atomically; the audio is regenerated, not
committed (the set folder gets a ``.gitignore`` for ``audio/``). The same seed gives byte-identical
files and manifest, so the manifest SHA-256 (:attr:`CalibrationSet.sha256`) identifies the set.

Source: TensorRT developer guide, "INT8 calibration" (a representative set of about 500-2000 inputs
drawn from the training distribution).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (SCHEMA_VERSION, WriteError, atomic_output, is_write_error, sha256_file, signals_held,
                               write_error, write_json)
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG

sf = lazy_import("soundfile")

SAMPLE_RATE_HZ = 16000
"""int: sample rate of calibration sets (the rate of the training data and the reference model)."""

DEFAULT_COUNT = 2048
"""int: utterances in a generated set (the issue's figure)."""

MIN_FROM_FILES = 16
"""int: fewest usable recordings ``--from DIR`` accepts."""

MANIFEST = "manifest.json"
AUDIO_DIR = "audio"
CALIB_ENV = "COSYEDGE_CALIB_DIR"
DURATION_RANGE_S = (1.0, 4.0)
"""tuple[float, float]: length range of generated utterances, seconds (uniform)."""

RELEASE_EVERY = 32
"""int: utterances between :meth:`TrainingData.release_pages` calls while a set is generated."""

_AUDIO_EXT = {".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif", ".au"}


def default_calib_dir() -> Path:
    """Return the default calibration folder (Path): ``$COSYEDGE_CALIB_DIR`` or ``./calib``."""
    return Path(os.environ.get(CALIB_ENV) or "calib")


@dataclasses.dataclass
class CalibrationSet:
    """A calibration set on disk, validated.

    Attributes:
        folder (Path): Set folder holding ``manifest.json`` and ``audio/``.
        files (list[dict]): Manifest entries ``{"file", "sha256", "duration_s", "snr_db"}``; ``file`` is
            relative to ``folder``.
        sample_rate_hz (int): Rate of every file (Hz).
        sha256 (str): SHA-256 of ``manifest.json`` (the key of amax caches).
        manifest (dict): The whole manifest.
    """

    folder: Path
    files: list
    sample_rate_hz: int
    sha256: str
    manifest: dict

    def __len__(self) -> int:
        return len(self.files)

    @property
    def duration_s(self) -> float:
        """float: total audio duration, seconds."""
        return float(sum(f["duration_s"] for f in self.files))

    def read(self, i: int) -> np.ndarray:
        """Read utterance ``i`` and verify it against the manifest.

        Returns:
            np.ndarray: float32 (T,), range [-1, 1], at :attr:`sample_rate_hz`.
        Raises:
            ArtifactError: the file is missing, or its SHA-256 differs from the manifest (the set was
                edited; regenerate it with ``cosyedge calib make``).
        """
        entry = self.files[i]
        path = self.folder / entry["file"]
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ArtifactError(f"calibration file {path} unreadable ({err.strerror or err}); "
                                f"regenerate the set with 'cosyedge calib make'") from None
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ArtifactError(f"calibration file {path} does not match its manifest sha256 (edited?); "
                                f"regenerate the set with 'cosyedge calib make'")
        x, _ = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        return x[:, 0]


def load_calibration_set(folder: str | Path) -> CalibrationSet:
    """Load and validate ``folder/manifest.json``.

    Args:
        folder (str | Path): A set folder made by :func:`make_calibration_set`.
    Returns:
        CalibrationSet: the set (files are checked when read).
    Raises:
        ArtifactError: no manifest, bad JSON, a missing key, no files, or a listed audio file missing.
    """
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{path} not found: make a calibration set first ('cosyedge calib make --out {folder}')")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{path} is not valid JSON ({err}); regenerate it with 'cosyedge calib make'") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} is not a calibration manifest; regenerate it with 'cosyedge calib make'")
    for key in ("stage", "sample_rate_hz", "files"):
        if key not in data:
            raise ArtifactError(f"{path} missing '{key}' (not a calibration manifest); regenerate it with "
                                f"'cosyedge calib make'")
    if data["stage"] != "calib":
        raise ArtifactError(f"{path} is a '{data['stage']}' manifest, not a calibration set manifest")
    files = data["files"]
    if not isinstance(files, list) or not files:
        raise ArtifactError(f"{path} lists no audio files; regenerate it with 'cosyedge calib make'")
    for f in files:
        if not isinstance(f, dict) or not {"file", "sha256", "duration_s"} <= set(f):
            raise ArtifactError(f"{path} has a malformed file entry {f!r}")
        if not (folder / f["file"]).is_file():
            raise ArtifactError(f"calibration audio {folder / f['file']} missing (the audio is not committed): "
                                f"regenerate it with 'cosyedge calib make --out {folder}' (same --seed/--count)")
    return CalibrationSet(folder=folder, files=files, sample_rate_hz=int(data["sample_rate_hz"]),
                          sha256=sha256_file(path), manifest=data)


def _write_wav(path: Path, x: np.ndarray, sample_rate_hz: int) -> dict:
    """Write mono 16-bit PCM (clipped to [-1, 1]) and return its manifest entry fields."""
    x = np.clip(np.asarray(x, np.float32), -1.0, 1.0)
    buf = io.BytesIO()
    sf.write(buf, x, sample_rate_hz, format="WAV", subtype="PCM_16")
    data = buf.getvalue()
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "duration_s": round(x.size / sample_rate_hz, 6)}


def _snr_db(noisy: np.ndarray, clean: np.ndarray) -> float | None:
    """Active-speech SNR (dB) of a mixture, as :mod:`cosyedge.signal` defines it; None when
    there is no speech or no noise."""
    from cosyedge.signal import active_power

    noise = noisy.astype(np.float64) - clean
    ps = float(active_power(clean))
    pn = float(np.mean(noise * noise))
    if ps <= 1e-12 or pn <= 1e-14:
        return None
    return round(10.0 * np.log10(ps / pn), 3)


def _prepare_folder(out: Path) -> Path:
    """Create ``out`` and a fresh temp audio folder inside it (renamed to ``audio/`` on success)."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{AUDIO_DIR}.", dir=out))
    except OSError as err:
        if is_write_error(err):
            raise write_error(err, out, "calibration set") from None
        raise ArtifactError(f"cannot write calibration set in {out}: {err.strerror or err}") from None


def _commit_folder(out: Path, tmp_audio: Path, manifest: dict) -> None:
    """Swap ``tmp_audio`` in as ``out/audio`` and write the manifest; the old set is removed last."""
    audio = out / AUDIO_DIR
    old = out / f".{AUDIO_DIR}.old"
    try:
        if old.exists():
            shutil.rmtree(old)
        if audio.exists():
            audio.rename(old)
        os.chmod(tmp_audio, 0o777 & ~_umask())
        tmp_audio.rename(audio)
        write_json(out / MANIFEST, manifest)
        (out / ".gitignore").write_text(f"# regenerated by 'cosyedge calib make'; never committed\n{AUDIO_DIR}/\n")
        if old.exists():
            with signals_held():  # the new set is in place: the previous one goes whole
                shutil.rmtree(old)
    except OSError as err:
        if is_write_error(err):
            raise write_error(err, out, "calibration set", left="") from None
        raise ArtifactError(f"cannot write calibration set in {out}: {err.strerror or err}") from None


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _generated(count: int, clips, audio: Path):
    """Yield manifest entries of the first ``count`` clips of ``clips`` (an iterable of ``(noisy, clean)``
    float32 (n_samples,) arrays at :data:`SAMPLE_RATE_HZ`), written one by one into ``audio``."""
    from tqdm import tqdm

    # zip draws from ``range`` first, so no clip past ``count`` is drawn
    for i, (noisy, clean) in tqdm(zip(range(count), clips), total=count, desc="calibration set", unit="utt",
                                  disable=None):
        name = f"{AUDIO_DIR}/{i:05d}.wav"
        entry = _write_wav(audio / f"{i:05d}.wav", noisy, SAMPLE_RATE_HZ)
        yield {"file": name, **entry, "snr_db": _snr_db(noisy, clean)}


def _from_folder(src: Path, count: int | None, seed: int, audio: Path, skipped: dict, out: Path | None = None):
    """Yield manifest entries for the usable recordings of ``src``; count skipped ones in ``skipped``.

    Hidden files and folders are skipped, and so are a calibration set's own ``audio/``, manifest and
    amax/calibration caches when the set folder ``out`` lies inside ``src`` (``--from D --out D`` must
    neither feed the previous set back in nor count its files as unreadable)."""
    from cosyedge.audio import load_audio

    if not src.is_dir():
        raise UsageError(f"--from {src}: not a folder of recordings")
    own = (Path(out) / AUDIO_DIR).resolve() if out is not None else None
    set_dir = Path(out).resolve() if out is not None else None

    def usable(p: Path) -> bool:
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(src).parts):
            return False
        if set_dir is not None and p.resolve().parent == set_dir and (
                p.name == MANIFEST or p.name.endswith((".amax.json", ".calibration.cache"))):
            return False  # the set's own manifest and amax/calibration caches, not recordings
        return own is None or not p.resolve().is_relative_to(own)

    files = sorted(p for p in src.rglob("*") if usable(p))
    if count is not None and len(files) > count:
        # a seeded subset keeps the result reproducible while sampling the whole folder
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(files))
    else:
        order = np.arange(len(files))
    written = 0
    for k in order:
        if count is not None and written >= count:
            break
        p = files[int(k)]
        try:
            x, sr = load_audio(p)
        except CosyEdgeError as err:
            reason = "non_finite" if isinstance(err, UsageError) else "unreadable"
            skipped[reason] += 1
            LOG.debug("calibration: skip %s (%s)", p, err)
            continue
        if sr != SAMPLE_RATE_HZ:
            skipped["wrong_rate"] += 1
            LOG.debug("calibration: skip %s (%d Hz, need %d Hz)", p, sr, SAMPLE_RATE_HZ)
            continue
        x = x.mean(axis=1)
        if x.size < SAMPLE_RATE_HZ // 10:
            skipped["too_short"] += 1
            continue
        name = f"{AUDIO_DIR}/{written:05d}.wav"
        entry = _write_wav(audio / f"{written:05d}.wav", x, SAMPLE_RATE_HZ)
        written += 1
        yield {"file": name, **entry, "snr_db": None, "source": str(p.relative_to(src))}
    if count is not None and written < count:
        LOG.warning("calibration: --count %d asked, %s holds %d usable recording%s: the set has %d", count, src,
                    written, "" if written == 1 else "s", written)


class DemoMix:
    """Seeded noisy speech cut from one recording plus white noise, no downloads: a ``training_data`` for
    :func:`make_calibration_set` in tests, benchmarks and examples (a small set on a machine without the corpora).

    Args:
        path (str | Path | None): A mono-or-more recording at 16 kHz; default the bundled clean demo speech
            (``cosyedge/assets/demo/clean.wav``).
        noise_rms (float): RMS of the white noise added (full scale 1.0). Defaults to 0.01 (-40 dBFS).
    Raises:
        ArtifactError: the recording cannot be read.
    """

    def __init__(self, path: str | Path | None = None, noise_rms: float = 0.01):
        from cosyedge.audio import load_audio

        x, _ = load_audio(Path(path) if path is not None
                          else Path(__file__).resolve().parents[1] / "assets" / "demo" / "clean.wav")
        self.x = x[:, 0]
        self.noise_rms = float(noise_rms)

    def batch(self, n: int, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(noisy, clean): float32 (1, t) each: a seeded cut of the recording (``rng``'s first draw) and the cut plus
        white noise (its next draws); ``n`` is ignored (one clip per call)."""
        start = int(rng.integers(0, self.x.size - t))
        clean = self.x[None, start:start + t].astype(np.float32)
        return clean + self.noise_rms * rng.standard_normal(clean.shape).astype(np.float32), clean


def make_calibration_set(out: str | Path | None = None, *, count: int | None = None, seed: int = 0,
                         from_dir: str | Path | None = None, clips=None, training_data=None) -> CalibrationSet:
    """Write a calibration set (audio + manifest) into ``out``.

    Args:
        out (str | Path | None): Set folder; defaults to :func:`default_calib_dir` (``./calib``). An
            existing ``audio/`` there is replaced; amax caches next to it are kept (they are keyed by the
            manifest hash and recomputed when it changes).
        count (int | None): Utterances; defaults to 2048 when generating, all usable files with
            ``from_dir`` (a seeded subset when the folder holds more).
        seed (int): Seed of the draws (generated) or of the subset (folder). Defaults to 0.
        from_dir (str | Path | None): Folder of the user's recordings (searched recursively; 16 kHz;
            any channel count, downmixed) instead of generated mixtures.
        clips (Iterable[tuple[np.ndarray, np.ndarray]] | None): The clips to write when generating:
            ``(noisy, clean)`` float32 (n_samples,) at 16 kHz, at least ``count`` of them; an optional
            ``source`` attribute (dict) becomes the manifest's ``source``. Defaults to
            :class:`cosyedge.data.calib.TrainingMixClips` (training speech x training noise bank, seeded by ``seed``).
        training_data (TrainingData | None): Mixer the default clips draw from (tests, scripts); defaults to
            ``TrainingData(seed=0)``. Ignored when ``clips`` is given.
    Returns:
        CalibrationSet: the new set (its :attr:`~CalibrationSet.sha256` keys the amax cache).
    Raises:
        UsageError: ``count`` < 1; ``seed`` < 0; ``from_dir`` not a folder or fewer than :data:`MIN_FROM_FILES` usable
            recordings (the message counts each kind of skipped file).
        ArtifactError: the folder cannot be written; the training data cannot be prepared.
    """
    out = Path(out) if out is not None else default_calib_dir()
    if count is not None and int(count) < 1:
        raise UsageError(f"--count must be >= 1, got {count}")
    if from_dir is not None and not Path(from_dir).is_dir():
        raise UsageError(f"--from {from_dir}: not a folder of recordings")
    if int(seed) < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}")
    skipped = {"unreadable": 0, "wrong_rate": 0, "non_finite": 0, "too_short": 0}
    created = not out.exists()
    audio: Path | None = None
    done = False
    try:
        with signals_held():  # a signal while the temp audio folder is made comes once it is known (removed below)
            audio = _prepare_folder(out)
        with LOG.stage(f"calibration set {out}"):
            if from_dir is None:
                n = DEFAULT_COUNT if count is None else int(count)
                if clips is None:  # the default set: training speech x training noise bank
                    from cosyedge.data.calib import TrainingMixClips

                    clips = TrainingMixClips(n, seed, training_data, duration_range_s=DURATION_RANGE_S,
                                             release_every=RELEASE_EVERY)
                entries = list(_generated(n, clips, audio))
                source = dict(getattr(clips, "source", None) or {"kind": "clips", "seed": seed})
            else:
                src = Path(from_dir)
                entries = list(_from_folder(src, count, seed, audio, skipped, out))
                n_skip = sum(skipped.values())
                if len(entries) < MIN_FROM_FILES:
                    raise UsageError(
                        f"--from {src}: only {len(entries)} usable recording(s), need at least {MIN_FROM_FILES} "
                        f"({skipped['unreadable']} unreadable, {skipped['wrong_rate']} not {SAMPLE_RATE_HZ} Hz, "
                        f"{skipped['non_finite']} with NaN/Inf, {skipped['too_short']} shorter than 0.1 s)"
                    )
                if n_skip:
                    LOG.warning("calibration: %d file(s) of %s skipped (%d unreadable, %d not %d Hz, %d NaN/Inf, "
                                "%d too short)", n_skip, src, skipped["unreadable"], skipped["wrong_rate"],
                                SAMPLE_RATE_HZ, skipped["non_finite"], skipped["too_short"])
                source = {"kind": "folder", "dir": str(src.resolve()), "seed": seed}
            from cosyedge import __version__

            manifest = {
                "schema_version": SCHEMA_VERSION,
                "stage": "calib",
                "cosyedge_version": __version__,
                "sample_rate_hz": SAMPLE_RATE_HZ,
                "count": len(entries),
                "duration_s": round(sum(e["duration_s"] for e in entries), 3),
                "source": source,
                "skipped": skipped,
                "files": entries,
            }
            _commit_folder(out, audio, manifest)
            done = True
    except WriteError as err:  # a file of the temp audio folder: name the set, the temp folder is removed below
        if err.dest == out:
            raise
        raise write_error(err.os_error, out, "calibration set") from None
    finally:
        with signals_held():  # a second Ctrl-C or a SIGTERM cannot leave the temp audio folder half removed
            if audio is not None and audio.exists():
                shutil.rmtree(audio, ignore_errors=True)
            if not done and created and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # a failed first set leaves no empty folder behind
    LOG.info("calibration set: %d utterances, %.1f min, manifest %s", len(entries),
             manifest["duration_s"] / 60, out / MANIFEST)
    return load_calibration_set(out)
