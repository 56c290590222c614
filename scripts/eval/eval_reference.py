#!/usr/bin/env python3
"""Quality of the deployed reference model: SI-SNR improvement on the fixed test set, through the
streaming ONNX Runtime engine (exactly what ``cosyedge run`` executes), with RNNoise in the same run.

Test set (:func:`cosyedge.data.test_pairs`): the 5 pocketsphinx LibriVox readings (never used for
training) x each held-out real noise (never used for training: a real engine recording from
``stormbaancoureur-data``; the held-out quarter of the ``openttd-opensfx`` recordings) at each SNR.
SI-SNR follows Le Roux et al. 2019 (arXiv:1811.02508). cosyedge's output is aligned by the model's
stated delay; RNNoise's delay is searched (0..50 ms) and reported.

``--narrowband`` scores the same pairs as 8 kHz recordings: noisy and clean both resampled to 8 kHz and back
(soxr), so nothing above 4 kHz is left, which is what ``cosyedge run`` makes of a telephone-band file.

Command (downloads the Debian test packages into the data cache on first use)::

    python scripts/eval/eval_reference.py --snr 0 5 10 --json eval.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from cosyedge.signal import si_snr_db


def rnnoise_16k(x: np.ndarray) -> np.ndarray:
    """Run RNNoise (pyrnnoise; 48 kHz, 480-sample int16 frames) on 16 kHz float32 x (T,); returns 16 kHz."""
    import soxr
    from pyrnnoise.rnnoise import FRAME_SIZE, create, destroy, process_mono_frame

    x48 = soxr.resample(x, 16000, 48000)
    n = -(-len(x48) // FRAME_SIZE) * FRAME_SIZE
    x48 = np.concatenate([x48, np.zeros(n - len(x48), np.float32)])
    st = create()
    try:
        out = []
        for i in range(0, n, FRAME_SIZE):
            fr = (np.clip(x48[i:i + FRAME_SIZE], -1, 1) * 32767).astype(np.int16)
            r = process_mono_frame(st, fr)
            out.append(np.asarray(r[0] if isinstance(r, tuple) else r, dtype=np.float32) / 32767.0)
    finally:
        destroy(st)
    return soxr.resample(np.concatenate(out), 48000, 16000).astype(np.float32)


def narrowband(x: np.ndarray) -> np.ndarray:
    """x (T,) float32 at 16 kHz -> (T,) float32 at 16 kHz as if recorded at 8 kHz: resampled to 8 kHz and back
    (soxr), so it holds nothing above 4 kHz."""
    import soxr

    y = soxr.resample(soxr.resample(x, 16000, 8000), 8000, 16000).astype(np.float32)
    return np.pad(y, (0, max(0, len(x) - len(y))))[: len(x)]


def best_delay(y: np.ndarray, ref: np.ndarray, max_delay: int = 800, step: int = 16) -> tuple[float, int]:
    """Return (SI-SNR dB, delay samples) of y vs ref over delays 0..max_delay (y is late by the delay)."""
    n = len(ref) - max_delay
    return max((si_snr_db(y[d:d + n], ref[:n]), d) for d in range(0, max_delay + 1, step))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--engine", default=None, help="engine folder or streaming ONNX (default: bundled model)")
    ap.add_argument("--snr", type=float, nargs="+", default=[5.0])
    ap.add_argument("--no-rnnoise", action="store_true")
    ap.add_argument("--narrowband", action="store_true",
                    help="score the pairs as 8 kHz recordings (noisy and clean band-limited to 4 kHz)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from cosyedge.errors import CosyEdgeError

    try:
        return _evaluate(args)
    except CosyEdgeError as err:  # a missing or wrong engine, a test package that cannot be fetched: one line
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code


def _evaluate(args) -> int:
    from cosyedge.builders.cache import default_engine
    from cosyedge.builders.cache import load_or_rebuild as load_engine
    from cosyedge.data.pairs import test_pairs
    from cosyedge.runtime import enhance_array

    engine = load_engine(args.engine or default_engine())
    rows = []
    for name, noisy, clean in test_pairs(tuple(args.snr)):
        if args.narrowband:
            noisy, clean = narrowband(noisy), narrowband(clean)
        with engine() as sess:
            y = enhance_array(sess, noisy)
        base = si_snr_db(noisy, clean)
        row = {"pair": name, "noise": name.split("+")[-1].split("@")[0], "snr_db": float(name.rsplit("@", 1)[1][:-2]),
               "noisy_si_snr_db": base, "cosyedge_si_snri_db": si_snr_db(y, clean) - base}
        if not args.no_rnnoise:
            s, d = best_delay(rnnoise_16k(noisy), clean)
            row.update(rnnoise_si_snri_db=s - best_delay(noisy, clean, 0)[0], rnnoise_delay_samples=d)
        rows.append(row)
    summary = {}
    for r in rows:
        key = f"{r['noise']}@{r['snr_db']:g}dB"
        summary.setdefault(key, []).append(r)
    table = {k: {m: float(np.mean([r[m] for r in v])) for m in ("cosyedge_si_snri_db", "rnnoise_si_snri_db")
                 if m in v[0]} for k, v in summary.items()}
    for snr in args.snr:
        sel = [r for r in rows if r["snr_db"] == snr]
        table[f"all@{snr:g}dB"] = {m: float(np.mean([r[m] for r in sel]))
                                   for m in ("cosyedge_si_snri_db", "rnnoise_si_snri_db") if m in sel[0]}
    print(f"{'test subset':32s} {'cosyedge SI-SNRi':>17s} {'RNNoise SI-SNRi':>16s}")
    for k, v in table.items():
        rn = v.get("rnnoise_si_snri_db", float("nan"))
        print(f"{k:32s} {v['cosyedge_si_snri_db']:14.2f} dB {rn:13.2f} dB")
    if args.json:
        Path(args.json).write_text(json.dumps({"engine": str(engine.model_path), "narrowband": args.narrowband,
                                               "summary": table, "pairs": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
