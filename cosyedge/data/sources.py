"""Offline audio sources: Debian packages fetched by name, decoded to 16 kHz mono float32, cached.

Every corpus is built once and cached under :func:`data_dir` as two files:

- ``corpora/<name>.npy``: float32, shape (total_samples,), all utterances concatenated, 16 kHz, [-1, 1].
- ``corpora/<name>.json``: ``{"version", "sample_rate_hz", "names", "offsets", "splits", "speakers",
  "source"}``; utterance ``i`` is ``audio[offsets[i]:offsets[i+1]]``.

File lists are sorted, so a corpus is byte-identical across machines for the same package version.

Corpora (see :data:`cosyedge.data.registry.CORPORA`):

- ``asterisk-{en,fr,es,it,ru}``: ``asterisk-core-sounds-<lang>-g722`` prompt packs, 16 kHz G.722, one
  professional voice each (en/es Allison Smith, fr June Wallack, it Carlo Flora (male), ru IvrvoiceRU;
  CC-BY-SA 3.0 / CC-BY 3.0). About 10 % of the prompts of each pack are held out by a hash of their
  relative path (:func:`heldout_split`): split ``"val"`` (never used for training).
- ``asterisk-prompt-{fr-armelle,es-co,it-menardi}``: community prompt packs, 8 kHz (GSM / WAV) upsampled
  to 16 kHz, so nothing above 4 kHz; same 10 % hold-out.
- ``librivox`` and ``cards``: ``pocketsphinx-testdata`` (BSD-2-Clause CMU; LibriVox readings are public
  domain). TEST ONLY: split ``"test"``; never used for training.
- ``espeak``: espeak-ng (17 languages x 34 variants, random speed and pitch), ``flite``: voices slt, rms,
  awb, kal16; ``festival``: 10 festvox voices (must be installed). Text from ``fortune-mod`` or a built-in
  list. Synthetic utterances are normalised to -20 dBFS RMS.
- ``asterisk-{en,fr,es,it,ru}-male``: the TRAINING prompts of each asterisk pack converted to a male-range
  voice (Praat "Change gender", :mod:`cosyedge.data.voice`; formants x0.80-0.90, median f0 85-135 Hz).
- ``festvox-ru`` (real read sentences of one male speaker), ``festvox-ru-voices`` (those sentences re-voiced
  over the low male range, :data:`cosyedge.data.voice.REVOICE_RANGES`), ``tuxpaint``, ``fillets-male``:
  real read or acted speech added with ``--read-phrases`` (:data:`cosyedge.data.versions.READ_PHRASE_CORPORA`).
- Real TRAINING noise sources: ``sound-icons`` (GPL-2+), ``freedesktop`` (``sound-theme-freedesktop``,
  GPL-2+/CC-BY-SA), ``opensfx`` (``openttd-opensfx``, CC-BY-SA 3.0 collection of freesound recordings),
  ``moh`` (``asterisk-moh-opsound-g722``, CC-BY-SA 3.0 music), ``lmms-samples`` (``lmms-common``, GPL-2+),
  ``lincity-sfx`` (``lincity-ng-data`` city/industry ambiences, GPL-2+), ``etr-sfx`` (``extremetuxracer-data``, GPL-2+);
  used by :mod:`cosyedge.data.noise`.

Errors: a missing ``apt-get``/``dpkg``/``espeak-ng`` or PyAV raises
:class:`~cosyedge.errors.DependencyError`; a package that cannot be downloaded or a file that cannot be
decoded raises :class:`~cosyedge.errors.ArtifactError`.

The :class:`~cosyedge.data.corpus.Corpus` and its cache files are in :mod:`cosyedge.data.corpus`, the
name -> builder table (:data:`~cosyedge.data.registry.CORPORA`, :func:`~cosyedge.data.registry.load_corpus`)
and the corpora derived from other corpora in :mod:`cosyedge.data.registry` (no sources <-> voice
circle). About 580 lines: one builder per package family plus the speech synthesisers, each short.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from cosyedge.data.corpus import SAMPLE_RATE_HZ, Corpus, heldout_split
from cosyedge.errors import ArtifactError, DependencyError
from cosyedge.log import LOG

_APT_UPDATED = False


# --------------------------------------------------------------------------------------------- paths
def data_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Return the data cache folder (created if missing).

    Args:
        cache_dir (str | PathLike | None): Explicit folder. Defaults to ``$COSYEDGE_DATA_DIR`` or
            ``~/.cache/cosyedge/data``.
    Returns:
        Path: the folder.
    """
    if cache_dir is None:
        cache_dir = os.environ.get("COSYEDGE_DATA_DIR") or Path.home() / ".cache" / "cosyedge" / "data"
    p = Path(cache_dir).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p


def _require_tool(tool: str, hint: str) -> str:
    path = shutil.which(tool) or (f"/usr/games/{tool}" if Path(f"/usr/games/{tool}").exists() else None)
    if path is None:
        raise DependencyError(f"'{tool}' not found on PATH (install it: {hint})")
    return path


# ------------------------------------------------------------------------------------------ packages
def fetch_package(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Download Debian package ``name`` with ``apt-get download`` and extract it with ``dpkg -x``.

    Nothing is installed. A ``.deb`` already in ``<cache>/debs`` or in ``$COSYEDGE_DEB_DIR`` is reused.
    If the download fails, ``apt-get update`` is run once and the download retried.

    Args:
        name (str): Debian package name, e.g. ``"asterisk-core-sounds-en-g722"``.
        cache_dir (str | PathLike | None): See :func:`data_dir`.
    Returns:
        Path: extraction root ``<cache>/pkgs/<name>`` (contains ``usr/...``).
    Raises:
        DependencyError: ``apt-get`` or ``dpkg`` is missing.
        ArtifactError: the package cannot be downloaded or extracted.
    """
    global _APT_UPDATED
    root = data_dir(cache_dir)
    out = root / "pkgs" / name
    if (out / ".done").exists():
        return out
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    deb = _find_deb(name, [debs] + ([Path(os.environ["COSYEDGE_DEB_DIR"])] if os.environ.get("COSYEDGE_DEB_DIR") else []))
    if deb is None:
        apt = _require_tool("apt-get", "this needs a Debian/Ubuntu system")
        for attempt in range(2):
            r = subprocess.run([apt, "download", name], cwd=debs, capture_output=True, text=True)
            deb = _find_deb(name, [debs])
            if r.returncode == 0 and deb is not None:
                break
            if attempt == 0 and not _APT_UPDATED:
                LOG.info("apt-get download %s failed; running apt-get update once", name)
                subprocess.run([apt, "update"], capture_output=True, text=True)
                _APT_UPDATED = True
            else:
                raise ArtifactError(
                    f"cannot download Debian package '{name}': {r.stderr.strip().splitlines()[-1:] or r.returncode}"
                    " (check the name with 'apt-cache policy NAME' and your apt sources)"
                )
    dpkg = _require_tool("dpkg", "this needs a Debian/Ubuntu system")
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".x-{name}-"))
    r = subprocess.run([dpkg, "-x", str(deb), str(tmp)], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"dpkg -x failed for {deb}: {r.stderr.strip()} (delete it and retry)")
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    (out / ".done").write_text(deb.name + "\n")
    LOG.info("fetched %s -> %s", deb.name, out)
    return out


def _find_deb(name: str, folders: list[Path]) -> Path | None:
    for f in folders:
        hits = sorted(f.glob(f"{name}_*.deb"))
        if hits:
            return hits[-1]
    return None


def package_copyright(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """Return the text of ``usr/share/doc/<name>/copyright`` of a fetched package ('' if absent)."""
    p = fetch_package(name, cache_dir) / "usr" / "share" / "doc" / name / "copyright"
    return p.read_text(errors="replace") if p.exists() else ""


# ------------------------------------------------------------------------------------------- decoding
def decode_audio(path: str | os.PathLike, sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Decode an audio file to mono float32 at ``sample_rate_hz``.

    ``.g722`` (raw G.722, 16 kHz) decodes with PyAV (``av.open(path, format="g722")``); other formats try
    soundfile first (wav, flac, ogg/oga Vorbis) and fall back to PyAV. Channels are averaged and the
    result is resampled with soxr (HQ).

    Args:
        path (str | PathLike): Audio file.
        sample_rate_hz (int): Output rate in Hz. Defaults to 16000.
    Returns:
        np.ndarray: float32, shape (samples,), range about [-1, 1].
    Raises:
        DependencyError: PyAV is needed and missing (``pip install av``).
        ArtifactError: the file cannot be decoded.
    """
    path = Path(path)
    x = sr = None
    if path.suffix.lower() not in (".g722", ".gsm", ".ulaw", ".alaw"):
        try:
            import soundfile as sf

            x, sr = sf.read(str(path), dtype="float32", always_2d=True)
            x = x.mean(axis=1)
        except Exception:  # noqa: BLE001 - fall back to PyAV
            x = None
    if x is None:
        x, sr = _decode_av(path)
    if x.size == 0:
        raise ArtifactError(f"{path}: decoded to 0 samples (corrupt file? delete the cache and retry)")
    if sr != sample_rate_hz:
        import soxr

        x = soxr.resample(x, sr, sample_rate_hz, quality="HQ")
    return np.ascontiguousarray(x, dtype=np.float32)


def _decode_av(path: Path) -> tuple[np.ndarray, int]:
    try:
        import av
    except ImportError as e:  # pragma: no cover - depends on environment
        raise DependencyError(f"PyAV is needed to decode {path.suffix} files (pip install av): {e}") from e
    fmt = {".g722": "g722", ".gsm": "gsm", ".ulaw": "mulaw", ".alaw": "alaw"}.get(path.suffix.lower())
    try:
        with av.open(str(path), format=fmt) as c:
            stream = c.streams.audio[0]
            chunks, sr = [], None
            for frame in c.decode(stream):
                a = frame.to_ndarray()
                sr = frame.sample_rate
                if a.dtype.kind == "i":
                    a = a.astype(np.float32) / float(np.iinfo(a.dtype).max + 1)
                a = a.astype(np.float32)
                if frame.format.is_planar:
                    a = a.mean(axis=0)
                else:
                    a = a.reshape(-1, len(frame.layout.channels)).mean(axis=1)
                chunks.append(a)
    except Exception as e:
        raise ArtifactError(f"{path}: cannot decode with PyAV ({type(e).__name__}: {e})") from e
    if not chunks:
        raise ArtifactError(f"{path}: no audio frames (corrupt file?)")
    if fmt in ("mulaw", "alaw", "gsm"):
        sr = 8000 if sr is None else sr
    return np.concatenate(chunks), int(sr)


def _from_files(name: str, files: list[tuple[str, Path, str, str]], source: str, meta: dict | None = None) -> Corpus:
    """Build a corpus from ``(rel_name, path, split, speaker)`` tuples (already sorted)."""
    audios, names, splits, speakers = [], [], [], []
    for rel, path, split, spk in files:
        try:
            x = decode_audio(path)
        except ArtifactError as e:
            LOG.warning("skipping %s", e)
            continue
        audios.append(x)
        names.append(rel)
        splits.append(split)
        speakers.append(spk)
    if not audios:
        raise ArtifactError(f"corpus '{name}': no decodable audio in {source}")
    offsets = np.concatenate([[0], np.cumsum([a.size for a in audios])]).astype(np.int64)
    return Corpus(name, np.concatenate(audios), offsets, names, splits, speakers, source, meta or {})


def _build_asterisk(lang: str, cache_dir) -> Corpus:
    pkg = f"asterisk-core-sounds-{lang}-g722"
    root = fetch_package(pkg, cache_dir) / "usr" / "share" / "asterisk" / "sounds"
    files = sorted(p for p in root.rglob("*.g722") if "silence" not in p.relative_to(root).parts)
    rows = []
    for p in files:
        rel = str(p.relative_to(root))
        rows.append((rel, p, heldout_split(rel), f"asterisk-{lang}:{rel.split('/')[0]}"))
    return _from_files(f"asterisk-{lang}", rows, pkg)


def _build_prompt_pack(pkg: str, ext: str, cache_dir) -> Corpus:
    """Community asterisk prompt packs (8 kHz GSM or WAV; upsampled to 16 kHz, so no energy above 4 kHz)."""
    root = fetch_package(pkg, cache_dir) / "usr" / "share" / "asterisk" / "sounds"
    files = sorted(root.rglob(f"*.{ext}"))
    rows = [(str(p.relative_to(root)), p, heldout_split(str(p.relative_to(root))), pkg) for p in files]
    return _from_files(pkg, rows, pkg, {"bandwidth_hz": 4000})


def _build_pocketsphinx(sub: str, cache_dir) -> Corpus:
    pkg = "pocketsphinx-testdata"
    root = fetch_package(pkg, cache_dir) / "usr" / "share" / "pocketsphinx" / "test" / "data"
    files = sorted((root / sub).glob("*.wav"))
    rows = [(f"{sub}/{p.name}", p, "test", f"{sub}") for p in files]
    return _from_files(sub, rows, pkg)


def _build_sounds(pkg: str, sub: str, pattern: str, cache_dir) -> Corpus:
    root = fetch_package(pkg, cache_dir) / "usr" / "share" / "sounds"
    files = sorted((root / sub).rglob(pattern))
    rows = [(str(p.relative_to(root)), p, "train", pkg) for p in files]
    return _from_files(pkg, rows, pkg)


def _build_glob(pkg: str, sub: str, patterns: tuple[str, ...], cache_dir, split: str = "train",
                exclude: tuple[str, ...] = ()) -> Corpus:
    """Corpus of every file under ``<pkg>/<sub>`` matching ``patterns``, minus paths containing any
    substring of ``exclude`` (relative to ``sub``)."""
    root = fetch_package(pkg, cache_dir)
    files = sorted({p for pat in patterns for p in (root / sub).rglob(pat)
                    if not any(e in str(p.relative_to(root / sub)) for e in exclude)})
    rows = [(str(p.relative_to(root / sub)), p, split, pkg) for p in files]
    return _from_files(pkg, rows, pkg)


TUXPAINT_MALE_LANGS = ("fr", "ru", "ca", "bg", "da", "lt", "nl")
"""Tux Paint stamp-description languages read by a male voice (median f0 about 105-140 Hz per file)."""
CLEAN_FLOOR_DB = 30.0
"""``tuxpaint-male-clean``: least level difference, dB, between a file's loud (95th percentile) and quiet
(5th percentile) 10 ms frames: drops recordings with an audible noise floor."""


def floor_range_db(x: np.ndarray, frame_samples: int = 160) -> float:
    """Level difference between the loud and the quiet frames of a recording: the 95th minus the 5th
    percentile of 10 ms frame energies, dB (a proxy for its speech-to-noise-floor ratio).

    Args:
        x (np.ndarray): float, shape (n_samples,), 16 kHz.
        frame_samples (int): frame length, samples.
    Returns:
        float: dB; 0.0 for a recording shorter than 10 frames.
    """
    n = len(x) // frame_samples
    if n < 10:
        return 0.0
    e = 10 * np.log10((x[: n * frame_samples].astype(np.float64).reshape(n, -1) ** 2).mean(1) + 1e-12)
    return float(np.percentile(e, 95) - np.percentile(e, 5))




FILLETS_LANGS = ("nl", "cs")
"""Languages of Fish Fillets NG's dubbed dialogues packaged for Debian (``fillets-ng-data-<lang>``)."""


def _build_fillets_male(cache_dir) -> Corpus:
    """The big fish's lines of Fish Fillets NG's Dutch and Czech dubbing (files ``*-v-*.ogg``: one male actor per
    language, median f0 about 115-190 Hz; acted dialogue, 22.05/44.1 kHz, GPL-2) whose noise floor is at least
    :data:`CLEAN_FLOOR_DB` below the speech (:func:`floor_range_db`): about 70 min."""
    rows = []
    for lang in FILLETS_LANGS:
        pkg = f"fillets-ng-data-{lang}"
        root = fetch_package(pkg, cache_dir) / "usr/share/games/fillets-ng/sound"
        rows += [(str(p.relative_to(root)), p, "train", f"{pkg}:big-fish")
                 for p in sorted(root.rglob(f"{lang}/*-v-*.ogg"))]
    c = _from_files("fillets-male", rows, ", ".join(f"fillets-ng-data-{lang}" for lang in FILLETS_LANGS))
    keep = [i for i in range(len(c.names)) if floor_range_db(c.utterance(i)) >= CLEAN_FLOOR_DB]
    return c.subset("fillets-male", keep, "noise-floor filter")


def _build_opensfx(cache_dir) -> Corpus:
    """OpenTTD OpenSFX: 71 real recordings (freesound.org; CC0 / CC-BY 3.0 / CC-BY-SA 3.0, collection
    CC-BY-SA 3.0) stored in one ``opensfx.cat`` container: a table of (offset, size) uint32 pairs (high bit
    is a flag), each entry ``<len byte><name><RIFF wav>``."""
    import io
    import struct

    pkg = "openttd-opensfx"
    cat = fetch_package(pkg, cache_dir) / "usr/share/games/openttd/baseset/opensfx/opensfx.cat"
    d = cat.read_bytes()
    n = (struct.unpack("<I", d[:4])[0] & 0x7FFFFFFF) // 8
    audios, names = [], []
    import soundfile as sf

    for i in range(n):
        off, size = struct.unpack("<II", d[i * 8 : i * 8 + 8])
        off &= 0x7FFFFFFF
        nl = d[off]
        title = d[off + 1 : off + 1 + nl].rstrip(b"\0").decode(errors="replace")
        wav = d[off + 1 + nl : off + size]
        if len(wav) < 100:
            continue
        try:
            x, sr = sf.read(io.BytesIO(wav), dtype="float32", always_2d=True)
        except Exception as e:  # noqa: BLE001
            LOG.warning("opensfx entry %d unreadable (%s)", i, e)
            continue
        import soxr

        audios.append(soxr.resample(x.mean(axis=1), sr, SAMPLE_RATE_HZ, quality="HQ").astype(np.float32))
        names.append(f"{i:02d} {title.split('.')[0].strip()}")
    offsets = np.concatenate([[0], np.cumsum([a.size for a in audios])]).astype(np.int64)
    return Corpus("opensfx", np.concatenate(audios), offsets, names, ["train"] * len(names), [pkg] * len(names), pkg)


# ------------------------------------------------------------------------------- synthetic speech
_BUILTIN_SENTENCES = """\
The quick brown fox jumps over the lazy dog.
Please call me back when you get this message.
The weather today will be cloudy with a chance of rain in the afternoon.
I would like to book a table for two at seven o'clock.
Turn left at the next intersection and continue for three hundred meters.
Our meeting has been moved to Thursday morning.
Can you hear me clearly now, or should I move closer to the microphone?
The train to the airport leaves from platform number four.
She sells sea shells by the sea shore.
A journey of a thousand miles begins with a single step.
Remember to save your work before closing the application.
The museum is open every day except Monday.
He bought apples, oranges, bread and a bottle of milk.
Thank you for waiting, your call is important to us.
The children played in the garden until the sun went down.
Let me know if you need anything else from the store.
This is a test of the emergency broadcast system.
The package should arrive within three to five business days.
Music helps me concentrate when I am working late at night.
Every morning he walks the dog along the river.
""".strip().splitlines()


FORTUNES_DIR = Path("/usr/share/games/fortunes")
"""Where Debian's ``fortune-mod`` keeps its cookie files (the text of the synthetic voices)."""


def sentences(n: int, seed: int = 0, require_fortunes: bool = False) -> list[str]:
    """Return ``n`` deterministic sentences (3 to 40 words) from ``fortune`` or a built-in list.

    Fortune cookies are read from the ``fortune-mod`` data files (:data:`FORTUNES_DIR`, plain
    text, ``%``-separated); if absent, the built-in list is used (with repetition), unless ``require_fortunes``.

    Raises:
        DependencyError: ``require_fortunes`` and no fortune-mod data (other texts would make another corpus).
    """
    texts: list[str] = []
    fdir = FORTUNES_DIR
    if fdir.is_dir():
        for f in sorted(fdir.iterdir()):
            if f.suffix or not f.is_file() or f.name.endswith(".dat"):
                continue
            try:
                raw = f.read_text(errors="replace")
            except OSError:
                continue
            for cookie in raw.split("\n%\n"):
                t = " ".join(cookie.split())
                if t and 3 <= len(t.split()) <= 40 and t.isascii():
                    texts.append(t)
    if not texts and require_fortunes:
        raise DependencyError(f"fortune-mod data not found in {fdir} (install it: apt-get install fortune-mod)")
    if not texts:
        LOG.warning_once("fortune-mod data not found; using the built-in sentence list")
        texts = list(_BUILTIN_SENTENCES)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(texts))
    return [texts[idx[i % len(texts)]] for i in range(n)]


def _sentences_for_synth(n: int, seed: int) -> list[str]:
    """``n`` texts of at least 8 words (short sentences are joined), for synthesis: from fortune-mod only, so a
    synthetic corpus is the same on every machine that can build it.

    Raises:
        DependencyError: fortune-mod is not installed.
    """
    pool = sentences(4 * n + 40, seed, require_fortunes=True)
    out, cur = [], ""
    for t in pool:
        t = t.replace('"', "").replace("`", "'").replace("\\", " ")
        cur = f"{cur} {t}".strip()
        if len(cur.split()) >= 8:
            out.append(cur)
            cur = ""
        if len(out) == n:
            break
    while len(out) < n:
        out.append(_BUILTIN_SENTENCES[len(out) % len(_BUILTIN_SENTENCES)])
    return out


ESPEAK_LANGS = ("en-us", "en", "en-gb-scotland", "en-029", "de", "fr", "es", "it", "pt", "nl", "pl", "sv", "ru",
                "cs", "fi", "tr", "hi")
"""espeak-ng languages used (the text is English; other languages read it with their own phonetics)."""

ESPEAK_VARIANTS = ("", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2",
                   "klatt4", "Andy", "Annie", "Denis", "Gene", "Lee", "linda", "max", "Michael", "edward", "john",
                   "belinda", "david", "steph", "paul", "robert", "aunty", "grandpa", "croak")
"""espeak-ng voice variants used (``-v LANG+VARIANT``)."""


def _run_synth(cmd: list[str], out_wav: Path, what: str, stdin: str | None = None) -> np.ndarray | None:
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not out_wav.exists():
        LOG.warning_once(f"{what} failed ({r.stderr.strip()[:120]}); skipping such utterances")
        return None
    x = decode_audio(out_wav)
    out_wav.unlink()
    return x if x.size > SAMPLE_RATE_HZ // 4 and np.abs(x).max() > 1e-3 else None


def _build_espeak(cache_dir, n: int = 400, seed: int = 11) -> Corpus:
    """espeak-ng: ``n`` texts, each with a random language, variant, speed (130..210 wpm) and pitch (20..80)."""
    exe = _require_tool("espeak-ng", "apt-get install espeak-ng")
    rng = np.random.default_rng(seed)
    texts = _sentences_for_synth(n, seed)
    tmp = Path(tempfile.mkdtemp(dir=data_dir(cache_dir), prefix=".espeak-"))
    audios, names, spk = [], [], []
    try:
        for i, t in enumerate(texts):
            lang = ESPEAK_LANGS[int(rng.integers(len(ESPEAK_LANGS)))] if rng.random() < 0.5 else "en-us"
            var = ESPEAK_VARIANTS[int(rng.integers(len(ESPEAK_VARIANTS)))]
            voice = f"{lang}+{var}" if var else lang
            s, p = int(rng.integers(130, 211)), int(rng.integers(20, 81))
            w = tmp / "o.wav"
            x = _run_synth([exe, "-v", voice, "-s", str(s), "-p", str(p), "-w", str(w), "--stdin"], w, "espeak-ng", t)
            if x is not None:
                audios.append(x)
                names.append(f"{i:04d}|{voice}|s{s}|p{p}")
                spk.append(f"espeak:{voice}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _corpus_from_arrays("espeak", audios, names, spk, f"espeak-ng ({_tool_version(exe)}) + fortune-mod text")


FLITE_VOICES = ("slt", "rms", "awb", "kal16")
"""flite voices: slt (US female), rms (US male), awb (Scottish male) are CMU ARCTIC clustergen voices;
kal16 is a 16 kHz diphone voice (US male)."""


def _build_flite(cache_dir, n_per_voice: int = 80, seed: int = 12) -> Corpus:
    """flite: ``n_per_voice`` different texts per voice of :data:`FLITE_VOICES` (16 kHz output)."""
    exe = _require_tool("flite", "apt-get install flite")
    texts = _sentences_for_synth(n_per_voice * len(FLITE_VOICES), seed)
    tmp = Path(tempfile.mkdtemp(dir=data_dir(cache_dir), prefix=".flite-"))
    audios, names, spk = [], [], []
    try:
        for i, t in enumerate(texts):
            v = FLITE_VOICES[i % len(FLITE_VOICES)]
            w = tmp / "o.wav"
            x = _run_synth([exe, "-voice", v, "-t", t, "-o", str(w)], w, f"flite -voice {v}")
            if x is not None:
                audios.append(x)
                names.append(f"{i:04d}|{v}")
                spk.append(f"flite:{v}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _corpus_from_arrays("flite", audios, names, spk, "flite (CMU) + fortune-mod text")


FESTIVAL_VOICES = {
    "kal_diphone": "festvox-kallpc16k", "ked_diphone": "festvox-kdlpc16k",
    "cmu_us_slt_arctic_hts": "festvox-us-slt-hts", "lp_diphone": "festvox-italp16k",
    "pc_diphone": "festvox-itapc16k", "czech_dita": "festvox-czech-dita", "czech_machac": "festvox-czech-machac",
    "suo_fi_lj_diphone": "festvox-suopuhe-lj", "hy_fi_mv_diphone": "festvox-suopuhe-mv",
    "upc_ca_ona_hts": "festvox-ca-ona-hts",
}
"""Festival voices (voice name -> Debian package). They must be INSTALLED (apt-get install PKG); missing
ones are skipped. Non-English voices read the English text with their own letter-to-sound rules."""


def _build_festival(cache_dir, n_per_voice: int = 40, seed: int = 13) -> Corpus:
    """Festival: ``n_per_voice`` texts per installed voice of :data:`FESTIVAL_VOICES`, one batch run per voice."""
    exe = _require_tool("festival", "apt-get install festival festvox-kallpc16k")
    r = subprocess.run([exe, "-b", "(print (voice.list))"], capture_output=True, text=True, timeout=120)
    have = set(r.stdout.replace("(", " ").replace(")", " ").split())
    voices = [v for v in FESTIVAL_VOICES if v in have]
    missing = [FESTIVAL_VOICES[v] for v in FESTIVAL_VOICES if v not in have]
    if missing:
        LOG.warning("festival voices not installed (skipped): %s", " ".join(missing))
    if not voices:
        raise DependencyError("no festival voice installed (apt-get install festvox-kallpc16k)")
    texts = _sentences_for_synth(n_per_voice * len(voices), seed)
    tmp = Path(tempfile.mkdtemp(dir=data_dir(cache_dir), prefix=".festival-"))
    audios, names, spk = [], [], []
    try:
        for vi, v in enumerate(voices):
            mine = [(i, t) for i, t in enumerate(texts) if i % len(voices) == vi]
            lines = [f"(voice_{v})"]
            for i, t in mine:
                esc = t.replace("\\", " ").replace('"', "")
                lines.append(f'(unwind-protect (utt.save.wave (utt.synth (Utterance Text "{esc}")) "{tmp}/{i:04d}.wav"'
                             f" 'riff) nil)")  # an error in one text must not abort the run
            (tmp / "run.scm").write_text("\n".join(lines) + "\n")
            subprocess.run([exe, "-b", str(tmp / "run.scm")], capture_output=True, text=True, timeout=1200)
            for i, _t in mine:
                w = tmp / f"{i:04d}.wav"
                if not w.exists():
                    continue
                x = decode_audio(w)
                w.unlink()
                if x.size > SAMPLE_RATE_HZ // 4 and np.abs(x).max() > 1e-3:
                    audios.append(x)
                    names.append(f"{i:04d}|{v}")
                    spk.append(f"festival:{v}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _corpus_from_arrays("festival", audios, names, spk, "festival + festvox voices + fortune-mod text")


def _tool_version(exe: str) -> str:
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()[:60]
    except Exception:  # noqa: BLE001
        return "?"


def _corpus_from_arrays(name: str, audios, names, spk, source: str) -> Corpus:
    if not audios:
        raise ArtifactError(f"corpus '{name}': synthesis produced no audio")
    # normalise each utterance to -20 dBFS RMS (synthesizers differ by 20+ dB), peak <= 0.99
    out = []
    for a in audios:
        a = a * np.float32(0.1 / (np.sqrt(np.mean(a.astype(np.float64) ** 2)) + 1e-9))
        out.append((a / max(1.0, float(np.abs(a).max()) / 0.99)).astype(np.float32))
    offsets = np.concatenate([[0], np.cumsum([a.size for a in out])]).astype(np.int64)
    return Corpus(name, np.concatenate(out), offsets, list(names), ["train"] * len(out), list(spk), source)


