#!/usr/bin/env python3
"""Regenerate the fixed cosyedge test set and check it against the committed manifest.

Speech: the 5 LibriVox readings of ``pocketsphinx-testdata`` (real read speech, never used for training:
corpus ``librivox``, split ``test``). Noise: every held-out real noise of
:func:`cosyedge.data.noise.heldout_noises` (never used for training): ``camaro-engine`` (a real V8
engine recording from ``stormbaancoureur-data``, a package used nowhere else) and ``opensfx-heldout``
(the held-out quarter of the ``openttd-opensfx`` field recordings, back to back). Each reading is mixed
with a segment of each noise at 0, 5 and 10 dB active-speech SNR (:func:`cosyedge.signal.mix_at_snr`);
the segment offset is a hash of the reading's name; if the mixture would peak above 0.95 full scale,
noisy and clean are scaled down together. These are exactly the pairs of
:func:`cosyedge.data.test_pairs` (30 pairs, 2.5 min of noisy audio), written as 16 kHz mono PCM16.

Output folder (default ``~/.cache/cosyedge/testset``)::

    noisy/<name>.wav  clean/<name>.wav  manifest.json

``manifest.json`` is the committed manifest (``cosyedge/assets/testset/manifest.json``: per file the
speech source, noise source and offset, SNR, gain, SHA-256 of noisy and clean) with paths relative to
the folder, so ``cosyedge eval <folder>`` reads it directly. Every regenerated file's SHA-256 is checked
against the committed manifest; the script says how many match and exits 1 on any mismatch.

The Debian packages are fetched into the data cache (``~/.cache/cosyedge/data``) the first time.

Commands::

    python scripts/data/make_testset.py                       # regenerate + verify into ~/.cache/cosyedge/testset
    python scripts/data/make_testset.py --out /tmp/testset
    # regenerate, verify and evaluate the bundled model against RNNoise (what docs/eval/testset.json holds):
    nice -n 10 python scripts/data/make_testset.py --eval-json docs/eval/testset.json
    # after a deliberate change of the test set definition only:
    python scripts/data/make_testset.py --write-manifest
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from cosyedge.artifacts import write_json
from cosyedge.data.corpus import SAMPLE_RATE_HZ
from cosyedge.data.noise import heldout_noises
from cosyedge.data.pairs import _stable_int
from cosyedge.data.registry import load_corpus
from cosyedge.data.sources import data_dir
from cosyedge.log import LOG
from cosyedge.signal import mix_at_snr

REPO = Path(__file__).resolve().parents[2]

MANIFEST = REPO / "cosyedge" / "assets" / "testset" / "manifest.json"
SNRS_DB = (0.0, 5.0, 10.0)
SPEECH_CORPUS = "librivox"
PEAK = 0.95
VERSION = 1


def default_out() -> Path:
    """Default output folder: ``~/.cache/cosyedge/testset`` (Path)."""
    return Path.home() / ".cache" / "cosyedge" / "testset"


def pcm16_wav_bytes(x: np.ndarray) -> bytes:
    """Return a 16 kHz mono PCM16 WAV file's bytes for float ``x`` (T,) in [-1, 1] (libsndfile rounding)."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(x, -1.0, 1.0), SAMPLE_RATE_HZ, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def _deb(package: str, cache_dir=None) -> str | None:
    done = data_dir(cache_dir) / "pkgs" / package / ".done"
    return done.read_text().strip() if done.exists() else None


def build(cache_dir=None) -> tuple[dict, dict[str, tuple[bytes, bytes]]]:
    """Build the test set in memory.

    Returns:
        tuple: the manifest (dict) and ``{name: (noisy_wav_bytes, clean_wav_bytes)}``.
    """
    corpus = load_corpus(SPEECH_CORPUS, cache_dir)
    noises = heldout_noises(cache_dir)
    pairs, audio = [], {}
    for ui in corpus.indices("test"):
        uname = corpus.names[ui]
        clean = corpus.utterance(ui)
        reading = Path(uname).stem.rsplit("-", 1)[-1]
        for nname, (nz, info) in noises.items():
            off = _stable_int(uname) % (nz.size - clean.size)  # as cosyedge.data.test_pairs
            seg = nz[off:off + clean.size]
            for snr in SNRS_DB:
                noisy = mix_at_snr(clean, seg, snr)
                g = min(1.0, PEAK / max(float(np.abs(noisy).max()), 1e-9))
                name = f"librivox-{reading}_{nname}_{snr:02.0f}dB"
                nb, cb = pcm16_wav_bytes(noisy * g), pcm16_wav_bytes(clean * g)
                audio[name] = (nb, cb)
                pairs.append({
                    "name": name,
                    "noisy": f"noisy/{name}.wav",
                    "clean": f"clean/{name}.wav",
                    "snr_db": snr,
                    "condition": nname,
                    "speech": {"corpus": SPEECH_CORPUS, "file": uname, "package": "pocketsphinx-testdata",
                               "deb": _deb("pocketsphinx-testdata", cache_dir)},
                    "noise": {"name": nname, "package": info["package"], "deb": _deb(info["package"], cache_dir),
                              "offset_samples": int(off), "length_samples": int(clean.size)},
                    "gain": g,
                    "duration_s": clean.size / SAMPLE_RATE_HZ,
                    "sha256_noisy": hashlib.sha256(nb).hexdigest(),
                    "sha256_clean": hashlib.sha256(cb).hexdigest(),
                })
    manifest = {
        "version": VERSION,
        "description": "cosyedge fixed test set: pocketsphinx-testdata LibriVox readings (never trained on) x "
                       "held-out real noises (never trained on) at 0/5/10 dB active-speech SNR; regenerate with "
                       "scripts/data/make_testset.py",
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "format": "WAV PCM_16 mono",
        "snrs_db": list(SNRS_DB),
        "snr_definition": "10 log10(active speech power / noise power), cosyedge.signal.active_power",
        "peak": PEAK,
        "licenses": {
            "pocketsphinx-testdata": "BSD-2-Clause (CMU); the LibriVox readings are public domain",
            **{n: i.get("license", "") for n, (_, i) in noises.items()},
        },
        "noises": {n: {k: v for k, v in i.items() if k != "seconds"} | {"seconds": round(i["seconds"], 3)}
                   for n, (_, i) in noises.items()},
        "pairs": pairs,
    }
    return manifest, audio


def verify(manifest: dict, reference: dict) -> list[str]:
    """Return the names whose noisy or clean SHA-256 differs from ``reference`` (or that are missing/extra)."""
    ref = {p["name"]: p for p in reference.get("pairs", [])}
    new = {p["name"]: p for p in manifest["pairs"]}
    bad = sorted(set(ref) ^ set(new))
    for name in sorted(set(ref) & set(new)):
        a, b = ref[name], new[name]
        if a["sha256_noisy"] != b["sha256_noisy"] or a["sha256_clean"] != b["sha256_clean"]:
            bad.append(name)
    return bad


def write_folder(out: Path, manifest: dict, audio: dict[str, tuple[bytes, bytes]]) -> None:
    """Write ``noisy/``, ``clean/`` and ``manifest.json`` under ``out`` (each file atomically)."""
    from cosyedge.artifacts import atomic_output

    for name, (nb, cb) in audio.items():
        for sub, data in (("noisy", nb), ("clean", cb)):
            with atomic_output(out / sub / f"{name}.wav") as tmp:
                tmp.write_bytes(data)
    write_json(out / "manifest.json", manifest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", type=Path, default=default_out(), help="output folder")
    ap.add_argument("--cache-dir", default=None,
                    help="data cache (default $COSYEDGE_DATA_DIR or ~/.cache/cosyedge/data)")
    ap.add_argument("--write-manifest", action="store_true",
                    help=f"(re)write the committed manifest {MANIFEST.relative_to(REPO)} instead of verifying")
    ap.add_argument("--eval-json", type=Path, default=None,
                    help="then run 'cosyedge eval' on the set (RNNoise baseline included) and save the JSON here")
    ap.add_argument("--engine", default=None, help="engine for --eval-json (default: bundled reference)")
    ap.add_argument("--plot", type=Path, default=None, help="spectrogram folder for --eval-json")
    args = ap.parse_args(argv)
    LOG.configure(0)

    manifest, audio = build(args.cache_dir)
    if args.write_manifest:
        write_json(MANIFEST, manifest)
        LOG.info("wrote %s (%d pairs)", MANIFEST, len(manifest["pairs"]))
        ok = True
    else:
        if not MANIFEST.is_file():
            LOG.warning("no committed manifest %s; run with --write-manifest to create it", MANIFEST)
            return 1
        bad = verify(manifest, json.loads(MANIFEST.read_text()))
        ok = not bad
        n = len(manifest["pairs"])
        if ok:
            LOG.info("sha256 verified: %d/%d pairs (noisy and clean) match %s", n, n, MANIFEST.relative_to(REPO))
        else:
            LOG.warning("sha256 MISMATCH for %d of %d pairs vs %s: %s", len(bad), n, MANIFEST.relative_to(REPO),
                        ", ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""))
    write_folder(args.out, manifest, audio)
    secs = sum(p["duration_s"] for p in manifest["pairs"])
    LOG.info("test set: %d pairs, %.1f min of noisy audio in %s", len(manifest["pairs"]), secs / 60, args.out)
    if args.eval_json is not None:
        from cosyedge.eval import evaluate, format_table, write_report

        report = evaluate(args.out, engine=args.engine, plot_dir=args.plot)
        report["input"] = "scripts/data/make_testset.py (manifest cosyedge/assets/testset/manifest.json)"
        for row in report["items"]:  # machine-independent paths in the committed report
            for key in ("noisy_file", "clean_file"):
                row[key] = str(Path(row[key]).relative_to(args.out.resolve())) if row[key] else None
        report["testset_verified"] = ok
        print(format_table(report))
        write_report(args.eval_json, report)
        LOG.info("report: %s", args.eval_json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
