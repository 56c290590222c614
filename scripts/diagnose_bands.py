#!/usr/bin/env python3
"""Where in frequency the reference model loses its test figure: per-band error budget on the test set.

For the fixed test pairs (pocketsphinx LibriVox readings x each held-out real noise, at ``--snr``), in the
model's own 20 ms STFT (161 bins, 50 Hz apart), with ``S``, ``N`` the clean-speech and noise spectra and ``g``
the model's gains computed from the noisy input, per band and per noise:

- ``speech_db`` / ``noise_db``: band energy of ``S`` / ``N``;
- ``distortion_db``: ``sum (1 - g)^2 |S|^2`` (speech removed by the gains);
- ``residual_db``: ``sum g^2 |N|^2`` (noise let through);
- ``oracle_distortion_db`` / ``oracle_residual_db``: the same for the ideal amplitude mask
  ``min(1, |S| / |X|)`` (floor 0.03; ``scripts/oracle_testset.py``);
- ``mean_gain``.

All energies are in dB relative to the total clean-speech energy of the file, averaged over the files of
each noise. The two error terms add up to the error of the output (cross terms aside), so the band with
the largest terms bounds the SI-SNR. As a check of one suspect, it also scores the model with each file's
DC offset removed before and added back after the model (``sisnri_dc_bypass_db``; the LibriVox readings
carry a DC offset of about 0.12 of their RMS).

Commands::

    python scripts/diagnose_bands.py                     # the bundled model, 5 dB
    python scripts/diagnose_bands.py --weights /tmp/run/model.safetensors --json /tmp/bands.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

BANDS_HZ = ((0, 100), (100, 200), (200, 300), (300, 500), (500, 1000), (1000, 2000), (2000, 4000), (4000, 8001))
"""tuple[tuple[int, int], ...]: band edges (Hz), lower inclusive; bin k is at ``50 k`` Hz."""


def band_budget(model, noisy: np.ndarray, clean: np.ndarray) -> dict:
    """Per-bin energies of one pair, relative to the total clean-speech energy (linear).

    Args:
        model: ReferenceEnhancer (eval mode).
        noisy, clean (np.ndarray): (T,) float32, 16 kHz, T a multiple of the hop.
    Returns:
        dict of (F,) float64 arrays: ``speech``, ``noise``, ``distortion``, ``residual``,
        ``oracle_distortion``, ``oracle_residual``, ``gain`` (mean over frames).
    """
    import torch

    f = model.config.n_bins
    x = torch.from_numpy(noisy.astype(np.float32))[None, None]
    s = torch.from_numpy(clean.astype(np.float32))[None, None]
    with torch.no_grad():
        spec_x, spec_s = model.analysis(x), model.analysis(s)
        g = model.gains(spec_x, model.long_spec(x))[0].double().numpy()

    def power(spec):  # (1, 2F, T) -> (F, T) float64
        return (spec[0, :f] ** 2 + spec[0, f:] ** 2).double().numpy()

    sp, xp, np_ = power(spec_s), power(spec_x), power(spec_x - spec_s)
    iam = np.clip(np.sqrt(sp / (xp + 1e-12)), model.config.gain_floor, 1.0)
    tot = sp.sum()
    return {"speech": sp.sum(1) / tot, "noise": np_.sum(1) / tot,
            "distortion": ((1 - g) ** 2 * sp).sum(1) / tot, "residual": (g ** 2 * np_).sum(1) / tot,
            "oracle_distortion": ((1 - iam) ** 2 * sp).sum(1) / tot, "oracle_residual": (iam ** 2 * np_).sum(1) / tot,
            "gain": g.mean(1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--weights", default=None, help="safetensors weights (default: the bundled model)")
    ap.add_argument("--snr", type=float, default=5.0, help="active-speech SNR of the test pairs, dB")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from cosyedge.datasets.mix import si_snr, test_pairs
    from cosyedge.errors import CosyEdgeError
    from cosyedge.models.reference import load_reference

    torch.set_num_threads(1)
    try:
        model = load_reference(args.weights).eval()
        pairs = test_pairs((args.snr,))
    except CosyEdgeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    hop, delay = model.config.hop_samples, model.config.delay_samples
    freqs = np.arange(model.config.n_bins) * model.config.sample_rate_hz / model.config.win_samples

    def enhance(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(x.astype(np.float32))[None, None])[0, 0].double().numpy()

    groups: dict = {}
    for name, noisy, clean in pairs:
        n = len(noisy) - len(noisy) % hop
        noisy, clean = noisy[:n], clean[:n]
        g = groups.setdefault(name.split("+")[-1].split("@")[0], {"budgets": [], "sisnri": [], "dc": []})
        g["budgets"].append(band_budget(model, noisy, clean))
        base = float(si_snr(noisy[: n - delay], clean[: n - delay]))
        g["sisnri"].append(float(si_snr(enhance(noisy)[delay:], clean[: n - delay])) - base)
        mu = float(noisy.mean())
        g["dc"].append(float(si_snr(enhance(noisy - mu)[delay:] + mu, clean[: n - delay])) - base)

    def db(v: float) -> float:
        return round(float(10 * np.log10(v + 1e-12)), 2)

    report: dict = {"weights": args.weights or "bundled", "snr_db": args.snr, "bands_hz": BANDS_HZ, "noises": {}}
    keys = ("speech", "noise", "distortion", "residual", "oracle_distortion", "oracle_residual")
    for noise, g in groups.items():
        mean = {k: np.mean([b[k] for b in g["budgets"]], axis=0) for k in (*keys, "gain")}
        rows = []
        for lo, hi in BANDS_HZ:
            sel = (freqs >= lo) & (freqs < hi)
            rows.append({"band_hz": [lo, hi], **{f"{k}_db": db(mean[k][sel].sum()) for k in keys},
                         "mean_gain": round(float(mean["gain"][sel].mean()), 3)})
        report["noises"][noise] = {
            "files": len(g["sisnri"]), "sisnri_db": round(float(np.mean(g["sisnri"])), 3),
            "sisnri_dc_bypass_db": round(float(np.mean(g["dc"])), 3),
            "total": {f"{k}_db": db(mean[k].sum()) for k in keys}, "bands": rows}
        print(f"{noise}: SI-SNRi {np.mean(g['sisnri']):.2f} dB (DC bypass {np.mean(g['dc']):.2f} dB), "
              f"{len(g['sisnri'])} files; energies in dB re clean speech")
        print(f"  {'band (Hz)':>11s} {'speech':>7s} {'noise':>7s} {'distort':>8s} {'resid':>7s} "
              f"{'or.dist':>8s} {'or.res':>7s} {'gain':>5s}")
        for r in [*rows, {"band_hz": ["all", ""], **report["noises"][noise]["total"], "mean_gain": float("nan")}]:
            lo, hi = r["band_hz"]
            print(f"  {f'{lo}-{hi}':>11s} " + " ".join(f"{r[f'{k}_db']:7.1f}" for k in keys) + f" {r['mean_gain']:5.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
