#!/usr/bin/env python3
"""SI-SNR improvement of the transformer enhancer next to the bundled reference enhancer, both in PyTorch (full
sequence), on the validation pairs of :class:`cosyedge.data.training_data.TrainingData` (held-out asterisk prompts,
data version and seed as given) and on the bundled demo (``cosyedge/assets/demo``: LibriVox speech + a held-out real
engine noise at 5 dB, never used for training). Scored with :func:`cosyedge.train.reference.loop.evaluate` (output
aligned by the model's delay, SI-SNR as :func:`cosyedge.signal.si_snr_db`).

    python scripts/training/eval_transformer_enhancer.py --weights cosyedge/assets/transformer/weights.safetensors \\
        --data-version 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True, help="transformer enhancer safetensors")
    ap.add_argument("--reference", default=None, help="reference weights (default: the bundled ones)")
    ap.add_argument("--data-version", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="TrainingData seed (the validation noise bank)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import soundfile as sf
    import torch

    from cosyedge.data.training_data import TrainingData
    from cosyedge.models import MODELS_DIR
    from cosyedge.signal import si_snr_db
    from cosyedge.train.reference.loop import evaluate
    from cosyedge.train.reference.model import load_reference
    from cosyedge.train.transformer_enhancer import count_parameters, load_transformer_enhancer

    torch.set_num_threads(args.threads)
    demo_dir = MODELS_DIR.parent / "assets" / "demo"
    noisy, sr = sf.read(str(demo_dir / "noisy.wav"), dtype="float32")
    clean, _ = sf.read(str(demo_dir / "clean.wav"), dtype="float32")
    demo = [("demo", noisy, clean)]
    val = TrainingData(seed=args.seed, data_version=args.data_version).validation_pairs()
    noisy_val = float(np.mean([si_snr_db(x, c) for _, x, c in val]))
    out = {"validation_pairs": len(val),
           "noisy": {"val_si_snr_db": noisy_val, "demo_si_snr_db": si_snr_db(noisy, clean)}}
    for name, model in (("transformer", load_transformer_enhancer(args.weights)),
                        ("reference", load_reference(args.reference))):
        d = model.config.delay_samples
        out[name] = {"parameters": count_parameters(model), "val_si_snri_db": evaluate(model, val, d),
                     "demo_si_snri_db": evaluate(model, demo, d)}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
