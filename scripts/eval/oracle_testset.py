#!/usr/bin/env python3
"""Upper bounds of real-valued masks on the fixed test set: what a perfect gain estimator could reach.

For every (noisy, clean) pair of the test set (``scripts/data/make_testset.py``; noise = noisy - clean), an
oracle gain is computed from the TRUE speech and noise STFTs and applied to the noisy STFT, then
SI-SNR improvement is scored exactly as ``cosyedge eval`` does (``cosyedge.signal.si_snr``). Masks
(all floored at the reference model's gain floor, 0.03 = -30 dB):

- ``iam``: ideal amplitude mask ``min(1, |S| / |X|)`` (the best a real gain <= 1 can do per bin);
- ``irm``: ideal ratio mask ``sqrt(|S|^2 / (|S|^2 + |N|^2))``;
- ``wiener``: ideal Wiener gain ``|S|^2 / (|S|^2 + |N|^2)``.

Windows: 320 samples (20 ms: the reference model's STFT, sqrt-Hann analysis and synthesis, hop 160) and
longer symmetric ones (512, 1024 samples: more latency than issue 3 allows, shown for scale); and
**asymmetric** ones (rows ``512a``, ``768a``, ``1024a``): the model's own low-latency analysis/synthesis
pair (:func:`cosyedge.models.stft.stft_bases`, ``EnhancerConfig(win_samples=N)``): an N-sample analysis
window at N/2 + 1 bins, a synthesis window on the last 320 samples, so the latency stays 20 ms. A real gain cannot
change the noisy phase, so where speech and noise overlap in a bin the residual stays; this bounds every
gain/mask model with this filterbank, including the bundled one (see docs/model-card.md).

**Pitch comb pre-filter** (row ``320/iam+pitch``): the headroom of RNNoise's pitch filtering (Valin 2018,
arXiv:1709.08243) at this filterbank. In voiced frames the noisy input is averaged with itself one TRUE pitch
period earlier (Praat's pitch of the clean speech; causal, :func:`comb_prefilter`): harmonics add up, noise
that is not periodic at that lag does not. Then, per 200 Hz band and frame, the oracle keeps the ideal amplitude
mask applied to the plain or to the comb-filtered STFT, whichever is closer to the clean speech. Picking the
better of two versions gains something by chance alone, so the row ``320/iam+pitch-wrong-lag`` repeats it with
the period x1.37 (a comb that does not fit the voice) as the control, and the row ``320/iam+pitch-causal``
with the period a streaming model could know: estimated from the NOISY input's last 40 ms only
(:func:`causal_pitch_periods`, normalised autocorrelation, 50-400 Hz), and the row ``320/iam+pitch-lw`` with
the period the bundled model could read off its own long-window features (:func:`lw_pitch_periods`: the
power of the Hann-windowed 1024-sample frame's lowest 128 bins, 0-2 kHz, cosine-transformed into a
band-limited autocorrelation; about 36 k MAC per hop).

Sources: ideal ratio/amplitude masks, Wang, Narayanan & Wang, "On training targets for supervised speech
separation", IEEE/ACM TASLP 22(12), 2014 (doi:10.1109/TASLP.2014.2352935); Wiener gain, Loizou,
"Speech Enhancement: Theory and Practice", 2nd ed., ch. 6.

Commands::

    python scripts/data/make_testset.py                                 # the test set, once
    python scripts/eval/oracle_testset.py --json docs/eval/oracle.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from cosyedge.train.reference.oracle import (ASYM_WINDOWS, GAIN_FLOOR, MASKS, WINDOWS, WRONG_LAG_FACTOR, apply_oracle,
                                             apply_oracle_asym, apply_oracle_pitch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--testset", type=Path, default=Path("~/.cache/cosyedge/testset").expanduser(),
                    help="folder written by scripts/data/make_testset.py")
    ap.add_argument("--json", type=Path, default=None, help="write the table here")
    args = ap.parse_args(argv)

    from cosyedge.audio import load_audio
    from cosyedge.signal import si_snr

    manifest = args.testset / "manifest.json"
    if not manifest.is_file():
        print(f"no test set at {args.testset}: run scripts/data/make_testset.py first", file=sys.stderr)
        return 2
    from cosyedge.errors import CosyEdgeError

    rows: dict = {}
    try:
        import parselmouth  # noqa: F401 (the pitch rows need Praat's pitch tracker)
        pitch_rows = (("320/iam+pitch", {}), ("320/iam+pitch-wrong-lag", {"lag_scale": WRONG_LAG_FACTOR}),
                      ("320/iam+pitch-causal", {"pitch": "autocorr"}), ("320/iam+pitch-lw", {"pitch": "lw"}))
    except ImportError:
        print("praat-parselmouth is not installed (the 'data' extra): only the causal pitch row is scored",
              file=sys.stderr)
        pitch_rows = (("320/iam+pitch-causal", {"pitch": "autocorr"}), ("320/iam+pitch-lw", {"pitch": "lw"}))
    try:
        pairs = json.loads(manifest.read_text())["pairs"]
        if not pairs:
            raise ValueError("no pairs")
        for p in pairs:
            noisy = load_audio(args.testset / p["noisy"])[0][:, 0].astype(np.float64)
            clean = load_audio(args.testset / p["clean"])[0][:, 0].astype(np.float64)
            base = float(si_snr(noisy, clean))
            for apply, windows, tag in ((apply_oracle, WINDOWS, ""), (apply_oracle_asym, ASYM_WINDOWS, "a")):
                for win in windows:
                    for kind in MASKS:
                        gain = float(si_snr(apply(noisy, clean, kind, win), clean)) - base
                        for group in (f"{p['condition']}@{p['snr_db']:g}dB", f"all@{p['snr_db']:g}dB"):
                            rows.setdefault(f"{win}{tag}/{kind}", {}).setdefault(group, []).append(gain)
            for label, options in pitch_rows:
                gain = float(si_snr(apply_oracle_pitch(noisy, clean, **options), clean)) - base
                for group in (f"{p['condition']}@{p['snr_db']:g}dB", f"all@{p['snr_db']:g}dB"):
                    rows.setdefault(label, {}).setdefault(group, []).append(gain)
    except (OSError, ValueError, KeyError, TypeError, CosyEdgeError) as err:  # JSONDecodeError is a ValueError
        print(f"test set {args.testset} unusable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
              f"regenerate it: python scripts/data/make_testset.py --out {args.testset}", file=sys.stderr)
        return 2
    table = {k: {g: round(float(np.mean(v)), 2) for g, v in sorted(groups.items())} for k, groups in rows.items()}
    groups = sorted(next(iter(table.values())))
    print(f"{'window/mask':14s} " + " ".join(f"{g:>24s}" for g in groups))
    for k, v in table.items():
        print(f"{k:14s} " + " ".join(f"{v[g]:24.2f}" for g in groups))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"what": "oracle real-mask SI-SNR improvement (dB), mean per group",
                                         "gain_floor": GAIN_FLOOR, "pairs": len(pairs), "table": table},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
