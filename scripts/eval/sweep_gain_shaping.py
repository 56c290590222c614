#!/usr/bin/env python3
"""What limits STOI and DNSMOS OVRL at 20 ms: oracle masks and inference-time gain shaping, all four measures.

Issue 26 asks the bundled reference model to beat RNNoise and NSNet2 on SI-SNRi, PESQ-WB, STOI and DNSMOS
OVRL at once. ``scripts/eval/oracle_testset.py`` bounds SI-SNRi only; this script scores, on the fixed test set
(``scripts/data/make_testset.py``) and with exactly the scorer of ``cosyedge eval``
(:func:`cosyedge.eval.evaluate.score_item`: delay search, SI-SNRi, PESQ-WB, STOI, DNSMOS P.835), in one run:

- ``oracle-iam`` / ``oracle-wiener``: ideal amplitude mask and ideal Wiener gain from the TRUE speech and
  noise at the reference model's own 20 ms filterbank (320-sample sqrt-Hann STFT, hop 160), floored at the
  model's gain floor 0.03 (:func:`cosyedge.train.reference.oracle.apply_oracle`): what a perfect gain estimator with this
  filterbank reaches on each measure, and ``oracle-iam-floor0.001`` with a -60 dB floor;
- ``model``: the model as given (``--weights``, default the bundled one), PyTorch full sequence (equal to the
  stream graph, which ``cosyedge export`` proves on every run);
- gain-shaping variants of the same model, no retraining: with ``u = (g - 0.03) / 0.97`` the model's
  sigmoid output per bin and frame, ``g' = f + (1 - f) u^gamma`` (``floor=f``, ``gamma``), and a frame gate
  ``g'' = g' * min(1, mean_bins(u) / tau)^beta`` (``gate<tau>b<beta>``) that deepens the suppression in
  frames the model itself holds to be noise (pauses), as RNNoise's near-zero band gains do;
- with ``--pitch-oracles``: ``oracle-iam+pitch`` / ``oracle-iam+pitch-causal``, the ideal amplitude mask
  after RNNoise's pitch comb (per 200 Hz band and frame the better of plain and comb-filtered,
  :func:`cosyedge.train.reference.oracle.apply_oracle_pitch`; period from the clean speech's Praat pitch, or estimated causally
  from the noisy input): the bound for a real-gain model with the reference model's pitch comb front end;
- ``rnnoise``: the RNNoise baseline of ``cosyedge eval`` (pyrnnoise), scored in the same run as the anchor.

Sources: ideal masks, Wang, Narayanan & Wang, IEEE/ACM TASLP 22(12), 2014 (doi:10.1109/TASLP.2014.2352935);
DNSMOS P.835, Reddy et al., ICASSP 2022 (arXiv:2110.01763); RNNoise, Valin 2018 (arXiv:1709.08243).

Command::

    python scripts/data/make_testset.py        # the test set, once
    python scripts/eval/sweep_gain_shaping.py --json docs/eval/gain-shaping.json
    python scripts/eval/sweep_gain_shaping.py --variants model --pitch-oracles --json docs/eval/pitch-oracle.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


VARIANTS = {  # name -> (floor, gamma, gate)
    "model": (None, 1.0, None),
    "floor0.01": (0.01, 1.0, None),
    "floor0.003": (0.003, 1.0, None),
    "gamma1.5": (0.03, 1.5, None),
    "floor0.01-gamma1.5": (0.01, 1.5, None),
    "gate0.2b1": (0.03, 1.0, (0.2, 1.0)),
    "gate0.3b2": (0.03, 1.0, (0.3, 2.0)),
    "floor0.01-gate0.3b2": (0.01, 1.0, (0.3, 2.0)),
}
METRICS = ("si_snri_db", "pesq_wb", "stoi", "dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl")


def shaped_model(model, floor: float | None, gamma: float, gate: tuple[float, float] | None):
    """Return a callable x (N, 1, T) float32 tensor -> enhanced (N, 1, T), the model with its gains reshaped.

    Args:
        model (ReferenceEnhancer): the model (its gain floor ``fl`` is read from its config).
        floor (float | None): new gain floor in [0, 1), or None to keep the model's.
        gamma (float): exponent on the model's sigmoid output ``u`` (> 0; 1 keeps it).
        gate (tuple[float, float] | None): ``(tau, beta)`` of the frame gate, or None.
    """
    import torch

    fl = model.config.gain_floor
    f = fl if floor is None else floor

    def estimate(spec, lw_spec=None, comb=None, _orig=type(model).estimate):
        g, coefs, mix = _orig(model, spec, lw_spec, comb)
        u = ((g - fl) / (1.0 - fl)).clamp(0.0, 1.0) ** gamma
        g2 = f + (1.0 - f) * u
        if gate is not None:
            tau, beta = gate
            g2 = g2 * (u.mean(dim=1, keepdim=True) / tau).clamp(max=1.0) ** beta
        return g2, coefs, mix

    def run(x):
        model.estimate = estimate
        try:
            with torch.no_grad():
                return model(x)
        finally:
            del model.estimate

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--testset", type=Path, default=Path("~/.cache/cosyedge/testset").expanduser())
    ap.add_argument("--weights", type=Path, default=None, help="reference weights (default: the bundled ones)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    ap.add_argument("--pitch-oracles", action="store_true",
                    help="also score the ideal amplitude mask after the pitch comb (true and causal period)")
    ap.add_argument("--json", type=Path, default=None, help="write the table here")
    args = ap.parse_args(argv)

    import torch

    from cosyedge.audio import load_audio
    from cosyedge.eval.baseline import rnnoise_enhance
    from cosyedge.eval.evaluate import score_item
    from cosyedge.eval.report import write_report
    from cosyedge.train.reference.model import load_reference
    from cosyedge.train.reference.oracle import apply_oracle, apply_oracle_pitch

    torch.set_num_threads(1)
    manifest = args.testset / "manifest.json"
    if not manifest.is_file():
        print(f"no test set at {args.testset}: run scripts/data/make_testset.py first", file=sys.stderr)
        return 2
    names = [v for v in args.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        print(f"unknown variant(s) {bad}; known: {list(VARIANTS)}", file=sys.stderr)
        return 2
    model = load_reference(args.weights).eval()
    runs = {v: shaped_model(model, *VARIANTS[v]) for v in names}
    pairs = json.loads(manifest.read_text())["pairs"]
    rows: dict = {}
    for i, p in enumerate(pairs):
        noisy = load_audio(args.testset / p["noisy"])[0][:, 0].astype(np.float32)
        clean = load_audio(args.testset / p["clean"])[0][:, 0].astype(np.float32)
        n64, c64 = noisy.astype(np.float64), clean.astype(np.float64)
        outs = {name: apply_oracle(n64, c64, kind, 320, floor).astype(np.float32) for name, kind, floor in
                (("oracle-iam", "iam", 0.03), ("oracle-wiener", "wiener", 0.03),
                 ("oracle-iam-floor0.001", "iam", 0.001))}
        if args.pitch_oracles:
            for name, pitch in (("oracle-iam+pitch", "true"), ("oracle-iam+pitch-causal", "autocorr")):
                outs[name] = apply_oracle_pitch(n64, c64, pitch=pitch).astype(np.float32)
        x = torch.from_numpy(np.concatenate([noisy, np.zeros(320, np.float32)]))[None, None]
        for v, run in runs.items():
            outs[v] = run(x)[0, 0].numpy()
        outs["rnnoise"] = rnnoise_enhance(noisy, 16000)
        res = score_item(noisy, clean, outs)
        for system, r in res.items():
            for group in (f"all@{p['snr_db']:g}dB", "overall"):
                for k in METRICS:
                    if k in r:
                        rows.setdefault(system, {}).setdefault(group, {}).setdefault(k, []).append(r[k])
        print(f"[{i + 1}/{len(pairs)}] {p['noisy']}", file=sys.stderr, flush=True)
    table = {s: {g: {k: round(float(np.nanmean(v)), 3) for k, v in ms.items()} for g, ms in sorted(gs.items())}
             for s, gs in rows.items()}
    print(f"{'system':24s} {'group':10s} " + " ".join(f"{k:>11s}" for k in METRICS))
    for s, gs in table.items():
        for gname, ms in gs.items():
            print(f"{s:24s} {gname:10s} " + " ".join(f"{ms.get(k, float('nan')):11.3f}" for k in METRICS))
    if args.json:
        meta = {"command": "python scripts/eval/sweep_gain_shaping.py " + " ".join(argv or sys.argv[1:]),
                "weights": str(args.weights or "bundled"), "pairs": len(pairs), "variants": VARIANTS,
                "pitch_oracles": bool(args.pitch_oracles)}
        write_report(args.json, {"meta": meta, "table": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
