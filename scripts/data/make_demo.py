#!/usr/bin/env python3
"""Build the bundled demo recording: ``cosyedge/assets/demo/{noisy,clean}.wav``.

Real read speech (pocketsphinx-testdata LibriVox readings 0870, 0880, 0890, joined with 0.4 s gaps, after a
0.6 s noise-only lead-in) plus the held-out REAL engine noise (stormbaancoureur-data, never used in
training) at 5 dB active-speech SNR. Both files are 16 kHz mono PCM16, same length, sample-aligned; the
noisy peak is -3 dBFS and the clean file has the same gain. Deterministic: the same packages give
byte-identical files.

Run::

    python scripts/data/make_demo.py                       # writes cosyedge/assets/demo/{noisy,clean}.wav
    python scripts/data/make_demo.py --snr-db 0 --out-dir /tmp/demo
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from cosyedge.data.corpus import SAMPLE_RATE_HZ
from cosyedge.data.noise import heldout_noise
from cosyedge.data.registry import load_corpus
from cosyedge.log import LOG
from cosyedge.signal import mix_at_snr, si_snr

REPO = Path(__file__).resolve().parents[2]

READINGS = ("0870", "0880", "0890")
GAP_S = 0.4
LEAD_S = 0.6
TAIL_S = 0.5
XFADE_S = 0.5


def loop_with_crossfade(x: np.ndarray, n: int, xfade: int) -> np.ndarray:
    """Repeat ``x`` (float32, (samples,)) to ``n`` samples with equal-power crossfades of ``xfade`` samples."""
    if x.size >= n:
        return x[:n].copy()
    t = np.linspace(0, np.pi / 2, xfade, dtype=np.float64)
    fade_in, fade_out = np.sin(t), np.cos(t)
    out = x.astype(np.float64)
    while out.size < n:
        head = x.astype(np.float64)
        joint = out[-xfade:] * fade_out + head[:xfade] * fade_in
        out = np.concatenate([out[:-xfade], joint, head[xfade:]])
    return out[:n].astype(np.float32)


def build(snr_db: float = 5.0, peak_dbfs: float = -3.0, cache_dir=None) -> tuple[np.ndarray, np.ndarray, dict]:
    """Return ``(noisy, clean, info)``: float32 (samples,) at 16 kHz, quantised to the PCM16 grid."""
    c = load_corpus("librivox", cache_dir)
    parts = [np.zeros(int(LEAD_S * SAMPLE_RATE_HZ), np.float32)]
    used = []
    for i, name in enumerate(c.names):
        if any(name.endswith(f"-{r}.wav") for r in READINGS):
            parts += [c.utterance(i), np.zeros(int(GAP_S * SAMPLE_RATE_HZ), np.float32)]
            used.append(name)
    parts[-1] = np.zeros(int(TAIL_S * SAMPLE_RATE_HZ), np.float32)
    clean = np.concatenate(parts)
    nz, ninfo = heldout_noise(cache_dir)
    nz = loop_with_crossfade(nz, clean.size, int(XFADE_S * SAMPLE_RATE_HZ))
    noisy = mix_at_snr(clean, nz, snr_db)
    g = 10 ** (peak_dbfs / 20) / float(np.abs(noisy).max())
    q = lambda x: np.round(x * g * 32767).astype(np.int16)  # noqa: E731
    noisy_i, clean_i = q(noisy), q(clean)
    info = {"readings": used, "noise": ninfo, "snr_db": snr_db, "seconds": clean.size / SAMPLE_RATE_HZ,
            "si_snr_noisy_db": float(si_snr(noisy_i / 32768.0, clean_i / 32768.0))}
    return noisy_i, clean_i, info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=REPO / "cosyedge" / "assets" / "demo")
    ap.add_argument("--snr-db", type=float, default=5.0, help="active-speech SNR in dB")
    ap.add_argument("--peak-dbfs", type=float, default=-3.0, help="peak of noisy.wav in dBFS")
    ap.add_argument("--cache-dir", default=None, help="data cache (default $COSYEDGE_DATA_DIR or ~/.cache/cosyedge/data)")
    args = ap.parse_args()
    LOG.configure(0)
    import soundfile as sf

    with LOG.stage("make demo"):
        noisy, clean, info = build(args.snr_db, args.peak_dbfs, args.cache_dir)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        sf.write(args.out_dir / "noisy.wav", noisy, SAMPLE_RATE_HZ, subtype="PCM_16")
        sf.write(args.out_dir / "clean.wav", clean, SAMPLE_RATE_HZ, subtype="PCM_16")
    LOG.info("demo: %.2f s, readings %s, noise %s (%s), SNR %.1f dB, SI-SNR(noisy) %.2f dB -> %s",
             info["seconds"], ", ".join(info["readings"]), info["noise"]["name"], info["noise"]["package"],
             info["snr_db"], info["si_snr_noisy_db"], args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
