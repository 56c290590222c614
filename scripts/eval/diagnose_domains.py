#!/usr/bin/env python3
"""Which domain gap costs the reference model its test figure: the speech, the noise, or both?

Crosses three speech sets with two noise sets at 5 dB active-speech SNR and reports, per cell, the
model's SI-SNR improvement next to the oracle ideal amplitude mask's (same 20 ms STFT; see
``scripts/eval/oracle_testset.py``), plus the SI-SNR of the output for CLEAN speech in (speech distortion):

- speech: ``librivox`` (the test readings: one male reader, f0 about 80-100 Hz; each reading 6 times with
  other noise segments), ``asterisk`` (held-out validation prompts, mostly female voices, f0 about
  180-220 Hz), ``asterisk-male`` (the same held-out prompts converted to male-range voices with
  :func:`cosyedge.data.voice.convert_to_male`; never trained on, as only training prompts are converted);
- noise: ``train`` (a fresh realisation of the training noise categories, seed 1) and ``test`` (random
  segments of the held-out real noises of the test set).

The run that motivated training data version 3 (docs/model-card.md): with the stage-3 model, female
prompts kept 4.80 dB in the test noises, male-converted prompts 0.97 dB and the male test readings 1.89 dB
(`docs/eval/domains-stage3.json`).

Commands::

    python scripts/eval/diagnose_domains.py                                   # the bundled model
    python scripts/eval/diagnose_domains.py --weights /tmp/run/model.safetensors --json /tmp/domains.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--weights", default=None, help="safetensors weights (default: the bundled model)")
    ap.add_argument("--prompts", type=int, default=30, help="held-out asterisk prompts per speech set")
    ap.add_argument("--snr", type=float, default=5.0, help="active-speech SNR, dB")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.prompts < 1:
        ap.error("--prompts must be >= 1")

    import torch

    from cosyedge.data import noise as noise_mod
    from cosyedge.data.training_data import TrainingData
    from cosyedge.data.registry import load_corpus
    from cosyedge.signal import mix_at_snr, si_snr
    from cosyedge.data.voice import convert_to_male
    from cosyedge.train.reference.model import load_reference

    from cosyedge.train.reference.oracle import apply_oracle

    torch.set_num_threads(1)
    model = load_reference(args.weights).eval()
    delay = model.config.delay_samples

    def enhance(x: np.ndarray) -> tuple[np.ndarray, int]:
        n = x.size - x.size % model.config.hop_samples
        with torch.no_grad():
            y = model(torch.from_numpy(np.array(x[:n], np.float32))[None, None])[0, 0].numpy()
        return y[delay:], n - delay

    data = TrainingData(seed=1, data_version=2)
    rng = np.random.default_rng(0)
    val = data.validation_pairs(limit=2 * args.prompts)[: args.prompts]
    lib = load_corpus("librivox")
    speech = {
        "librivox": [lib.utterance(i) for i in range(len(lib))] * 6,
        "asterisk": [c for _, _, c in val],
        "asterisk-male": [convert_to_male(c, n.split("|")[0]) for n, _, c in val],
    }
    held = noise_mod.heldout_noises()

    def train_noise(n: int) -> np.ndarray:
        return data.validation_noise(n, rng)[1]

    def test_noise(n: int) -> np.ndarray:
        z = held[list(held)[rng.integers(len(held))]][0]
        o = int(rng.integers(0, z.size - n))
        return z[o : o + n]

    table: dict = {}
    for sname, utts in speech.items():
        clean_out = []
        for c in utts[:10]:
            y, n = enhance(c)
            clean_out.append(float(si_snr(y, c[:n])))
        row = {"clean_in_sisnr_db": round(float(np.mean(clean_out)), 2)}
        for nname, draw in (("train", train_noise), ("test", test_noise)):
            gains, oracle = [], []
            for c in utts:
                x = mix_at_snr(c, draw(c.size), args.snr)
                g = min(1.0, 0.95 / max(float(np.abs(x).max()), 1e-9))
                x, c2 = (x * g).astype(np.float32), (c * g).astype(np.float32)
                y, n = enhance(x)
                base = float(si_snr(x[:n], c2[:n]))
                gains.append(float(si_snr(y, c2[:n])) - base)
                oracle.append(float(si_snr(apply_oracle(x.astype(np.float64), c2.astype(np.float64), "iam", 320), c2))
                              - float(si_snr(x, c2)))
            row[f"{nname}_noise"] = {"model_sisnri_db": round(float(np.mean(gains)), 2),
                                     "oracle_iam_sisnri_db": round(float(np.mean(oracle)), 2)}
        table[sname] = row
        print(f"{sname:14s} clean in -> {row['clean_in_sisnr_db']:5.1f} dB out | "
              + " | ".join(f"{k}: model {v['model_sisnri_db']:+.2f} dB, oracle {v['oracle_iam_sisnri_db']:+.2f} dB"
                           for k, v in row.items() if k.endswith("_noise")), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"weights": args.weights or "bundled", "snr_db": args.snr,
                                         "table": table}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
