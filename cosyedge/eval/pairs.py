"""Find and validate the (noisy, clean) files of an evaluation set.

``cosyedge eval INPUT`` accepts, in this order of precedence:

1. **A manifest file** ``*.json`` or ``*.csv``. JSON: ``{"pairs": [ROW, ...]}`` or a bare list of rows;
   CSV: a header line with the same column names. A row has ``noisy`` (required), ``clean`` (optional:
   rows without it are scored with DNSMOS only), and optionally ``name``, ``snr_db`` (number) and
   ``condition`` (e.g. the noise type; a JSON ``noise`` object with a ``name`` also works). Relative paths
   are relative to the manifest's folder. The test set of ``scripts/data/make_testset.py`` is such a manifest.
2. **A folder holding** ``manifest.json`` or ``manifest.csv``: that manifest.
3. **A folder with** ``noisy/`` **and** ``clean/``: every audio file under ``noisy/`` (recursively) is
   paired with the file of the same relative path under ``clean/``; a missing clean file is an error.
   The first sub-folder of the relative path, if any, is the condition (``noisy/babble/a.wav``); an
   ``<N>dB`` in the name gives the SNR (``a_5dB.wav``, ``b@-5dB.wav``).
4. **A folder with** ``noisy/`` **only, or with audio files only**: noisy-only mode (DNSMOS only).

Audio files are the extensions of :data:`AUDIO_EXTENSIONS`; other files in folders are skipped with a
warning. Before anything is processed, every file is opened (header only) and each pair checked for
equal sample rate and length, so a bad set fails in seconds with a one-line error naming the file.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG

sf = lazy_import("soundfile")

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga")
"""tuple[str, ...]: file extensions treated as audio when scanning folders."""

MANIFEST_NAMES = ("manifest.json", "manifest.csv")
"""tuple[str, ...]: manifest file names looked for in an INPUT folder."""

_SNR_RE = re.compile(r"(?:^|[^0-9a-z.]|snr)(-?\d+(?:\.\d+)?)\s*dB(?![a-z])", re.IGNORECASE)


@dataclasses.dataclass
class EvalItem:
    """One file to evaluate.

    Attributes:
        name (str): Unique name (relative path without extension, or the manifest's ``name``).
        noisy (Path): Noisy input audio.
        clean (Path | None): Clean reference (same rate and length), or None (DNSMOS only).
        condition (str | None): Condition label (noise type...), or None.
        snr_db (float | None): Input SNR in dB, or None if unknown.
        sample_rate_hz (int): Sample rate of the files, Hz (filled by :func:`validate_items`).
        frames (int): Length in samples (filled by :func:`validate_items`).
    """

    name: str
    noisy: Path
    clean: Path | None = None
    condition: str | None = None
    snr_db: float | None = None
    sample_rate_hz: int = 0
    frames: int = 0

    @property
    def group(self) -> str:
        """str: table group: ``"<condition>@<snr>dB"``, ``"<condition>"``, ``"<snr>dB"`` or ``"all"``."""
        snr = None if self.snr_db is None else f"{self.snr_db:g}dB"
        if self.condition and snr:
            return f"{self.condition}@{snr}"
        return self.condition or snr or "all"


def snr_from_name(name: str) -> float | None:
    """Return the SNR in dB written in a file name, or None.

    ``"a_5dB"`` -> 5, ``"b@-5dB"`` / ``"b_-5dB"`` -> -5, ``"c_snr10dB"`` -> 10, ``"d 2.5 dB"`` -> 2.5; a
    hyphen directly before the digits after a letter is a separator (``"noise-5dB"`` -> 5).
    """
    m = _SNR_RE.search(name)
    return float(m.group(1)) if m else None


def find_items(input: str | Path) -> list[EvalItem]:
    """Return the evaluation items of ``input`` (a manifest or a folder; see the module docstring).

    Args:
        input (str | Path): Manifest ``.json``/``.csv`` or folder.
    Returns:
        list[EvalItem]: items in a stable order (manifest order, or sorted relative paths); not yet
        validated (see :func:`validate_items`).
    Raises:
        ArtifactError: ``input`` missing, unreadable or malformed manifest, a folder without audio, a noisy
            file without its clean file.
        UsageError: ``input`` is a file that is not a ``.json``/``.csv`` manifest.
    """
    p = Path(input).expanduser()
    if not p.exists():
        raise ArtifactError(f"evaluation input not found: {p}")
    if p.is_file():
        if p.suffix.lower() not in (".json", ".csv"):
            raise UsageError(f"evaluation input {p} must be a folder or a .json/.csv manifest "
                             "(see 'cosyedge eval --help')")
        return _from_manifest(p)
    for m in MANIFEST_NAMES:
        if (p / m).is_file():
            return _from_manifest(p / m)
    noisy_dir, clean_dir = p / "noisy", p / "clean"
    if noisy_dir.is_dir():
        noisy = _audio_files(noisy_dir)
        if not noisy:
            raise ArtifactError(f"no audio files ({', '.join(AUDIO_EXTENSIONS)}) under {noisy_dir}")
        items = []
        for f in noisy:
            rel = f.relative_to(noisy_dir)
            clean = None
            if clean_dir.is_dir():
                clean = clean_dir / rel
                if not clean.is_file():
                    raise ArtifactError(f"clean reference missing for {f}: expected {clean}")
            stem = str(rel.with_suffix(""))
            cond = rel.parts[0] if len(rel.parts) > 1 else None
            items.append(EvalItem(stem, f, clean, cond, snr_from_name(rel.stem)))
        return items
    files = _audio_files(p, recursive=False)
    if not files:
        raise ArtifactError(f"{p} holds no manifest.json/manifest.csv, no noisy/ folder and no audio files")
    return [EvalItem(f.stem, f, None, None, snr_from_name(f.stem)) for f in files]


def _audio_files(folder: Path, recursive: bool = True) -> list[Path]:
    it = folder.rglob("*") if recursive else folder.iterdir()
    files, skipped = [], []
    for f in sorted(it):
        if not f.is_file() or f.name.startswith("."):
            continue
        (files if f.suffix.lower() in AUDIO_EXTENSIONS else skipped).append(f)
    if skipped:
        LOG.warning("skipping %d non-audio file(s) in %s (e.g. %s)", len(skipped), folder, skipped[0].name)
    return files


def _from_manifest(path: Path) -> list[EvalItem]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ArtifactError(f"cannot read manifest {path}: {first_line(err, with_type=False)}") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ArtifactError(f"manifest {path} is not valid JSON ({err.msg} at line {err.lineno})") from None
        rows = data.get("pairs") if isinstance(data, dict) else data
        if not isinstance(rows, list):
            raise ArtifactError(f"manifest {path}: expected a list of rows or {{\"pairs\": [...]}}")
    else:
        rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise ArtifactError(f"manifest {path} lists no files")
    items, names = [], set()
    for i, row in enumerate(rows):
        where = f"manifest {path} row {i + 1}"
        if not isinstance(row, dict) or not row.get("noisy"):
            raise ArtifactError(f"{where}: no 'noisy' path")
        noisy = _resolve(path.parent, row["noisy"])
        clean = _resolve(path.parent, row["clean"]) if row.get("clean") else None
        if not noisy.is_file():
            raise ArtifactError(f"noisy file missing: {noisy} ({where})")
        if clean is not None and not clean.is_file():
            raise ArtifactError(f"clean reference missing for {noisy}: {clean} not found ({where})")
        name = str(row.get("name") or Path(str(row["noisy"])).with_suffix(""))
        if name in names:
            raise ArtifactError(f"{where}: name '{name}' appears twice")
        names.add(name)
        cond = row.get("condition")
        noise = row.get("noise")
        if not cond and isinstance(noise, dict):
            cond = noise.get("name")
        elif not cond and isinstance(noise, str):
            cond = noise
        snr = row.get("snr_db")
        try:
            snr = float(snr) if snr not in (None, "") else snr_from_name(name)
        except (TypeError, ValueError):
            raise ArtifactError(f"{where}: snr_db {snr!r} is not a number") from None
        items.append(EvalItem(name, noisy, clean, str(cond) if cond else None, snr))
    return items


def _resolve(base: Path, p) -> Path:
    q = Path(str(p)).expanduser()
    return q if q.is_absolute() else base / q


def _info(path: Path):
    try:
        return sf.info(str(path))
    except Exception as err:  # noqa: BLE001  (soundfile.LibsndfileError, RuntimeError, TypeError)
        raise ArtifactError(f"cannot decode {path} as audio ({first_line(err, with_type=False)}); "
                            "is it a valid wav/flac/ogg file?") from None


def check_pair(noisy: Path, clean: Path | None) -> tuple[int, int]:
    """Open the headers of a noisy file and its clean reference and check that they pair up.

    The one pair check of cosyedge: :func:`validate_items` (``cosyedge eval``) and
    :func:`cosyedge.compare.utterances.utterances_from` (``cosyedge compare/check --utterances``) both call it, so a
    pair one refuses the other refuses with the same line.

    Args:
        noisy (Path): Noisy input audio (wav/flac/ogg).
        clean (Path | None): Its clean reference, or None (noisy only: only ``noisy`` is checked).
    Returns:
        tuple[int, int]: ``(sample_rate_hz, frames)`` of ``noisy`` (Hz, samples per channel).
    Raises:
        ArtifactError: a file is missing, not audio, or empty.
        UsageError: the two files differ in sample rate (names both files and both rates) or in length (frames).
    """
    noisy = Path(noisy)
    if not noisy.is_file():
        raise ArtifactError(f"noisy file missing: {noisy}")
    a = _info(noisy)
    if a.frames <= 0:
        raise ArtifactError(f"{noisy} holds no samples")
    rate, frames = int(a.samplerate), int(a.frames)
    if clean is None:
        return rate, frames
    clean = Path(clean)
    if not clean.is_file():
        raise ArtifactError(f"clean reference missing for {noisy}: {clean} not found")
    b = _info(clean)
    if int(b.samplerate) != rate:
        raise UsageError(f"{clean} is at {b.samplerate} Hz but {noisy} at {rate} Hz: a pair must share one "
                         "sample rate")
    if int(b.frames) != frames:
        raise UsageError(f"{clean} has {b.frames} samples but {noisy} has {frames}: a pair must have the same "
                         "length (and be aligned)")
    return rate, frames


def validate_items(items: list[EvalItem]) -> list[EvalItem]:
    """Open every file's header and check each pair (:func:`check_pair`); fill ``sample_rate_hz`` and ``frames``.

    Args:
        items (list[EvalItem]): From :func:`find_items`.
    Returns:
        list[EvalItem]: the same items (modified in place).
    Raises:
        ArtifactError: a file is missing, not audio, or empty.
        UsageError: a noisy file and its clean file differ in sample rate or length (frames).
    """
    for it in items:
        it.sample_rate_hz, it.frames = check_pair(it.noisy, it.clean)
    return items
