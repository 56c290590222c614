#!/usr/bin/env python3
"""Where in frequency the reference model loses its test figure: per-band error budget on the test set.

For the fixed test pairs (pocketsphinx LibriVox readings x each held-out real noise, at ``--snr``), in the
model's own 20 ms STFT (161 bins, 50 Hz apart), with ``S``, ``N`` the clean-speech and noise spectra and ``g``
the model's gains computed from the noisy input, per band and per noise:

- ``speech_db`` / ``noise_db``: band energy of ``S`` / ``N``;
- ``distortion_db``: ``sum |F(S) - S|^2``, with ``F`` the model's filter (``(1 - g)^2 |S|^2`` for the
  gains-only model): speech removed or changed;
- ``residual_db``: ``sum |F(N)|^2`` (``g^2 |N|^2``): noise let through;
- ``oracle_distortion_db`` / ``oracle_residual_db``: the same for the ideal amplitude mask
  ``min(1, |S| / |X|)`` (floored at the model's gain floor, 0.03; ``scripts/eval/oracle_testset.py``);
- ``mean_gain``.

All energies are in dB relative to the total clean-speech energy of the file, averaged over the files of
each noise. The two error terms add up to the error of the output (cross terms aside), so the band with
the largest terms bounds the SI-SNR. With ``--speech-bands`` it also compares the long-term spectrum
(DC, 1-60, 60-100, 100-150, 150-300, 300-8000 Hz) of every training speech corpus with the test readings.
As a check of one suspect, it also scores the model with each file's
DC offset removed before and added back after the model (``sisnri_dc_bypass_db``; the LibriVox readings
carry a DC offset of 0.09-0.17 of their RMS).

Commands::

    python scripts/eval/diagnose_bands.py                     # the bundled model, 5 dB
    python scripts/eval/diagnose_bands.py --weights /tmp/run/model.safetensors --json /tmp/bands.json
    python scripts/eval/diagnose_bands.py --speech-bands --json docs/eval/bands-stage4.json
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

    The model's filter ``F`` (gains, and the deep filter when the model has one) is estimated from the
    noisy input and is linear in the spectrum it is applied to, so ``F(X) = F(S) + F(N)``: speech
    distortion ``|F(S) - S|^2``, residual noise ``|F(N)|^2``.

    Args:
        model: ReferenceEnhancer (eval mode).
        noisy, clean (np.ndarray): (T,) float32, 16 kHz, T a multiple of the hop.
    Returns:
        dict of (F,) float64 arrays: ``speech``, ``noise``, ``distortion``, ``residual``,
        ``oracle_distortion``, ``oracle_residual`` (ideal amplitude mask, ``cosyedge.train.reference.oracle.oracle_gain``,
        floor = the model's gain floor), ``gain`` (mean over frames).
    """
    import torch
    from cosyedge.train.reference.oracle import oracle_gain

    f = model.config.n_bins
    x = torch.from_numpy(noisy.astype(np.float32))[None, None]
    s = torch.from_numpy(clean.astype(np.float32))[None, None]
    with torch.no_grad():
        spec_x, spec_s = model.analysis(x), model.analysis(s)
        lw_spec = model.long_spec(x)
        lags = model.pitch_lags(lw_spec) if model.config.pitch_comb else None  # the noisy input's
        comb_x = None if lags is None else model.comb_spec(x, lags)
        filt = model.estimate(spec_x, lw_spec, comb_x)
        comb_s = None if lags is None else model.comb_spec(s, lags)
        out_s = model.apply_filter(spec_s, *filt, comb=comb_s)
        out_n = model.apply_filter(spec_x - spec_s, *filt, comb=None if comb_x is None else comb_x - comb_s)

    def power(spec):  # (1, 2F, T) -> (F, T) float64
        return (spec[0, :f] ** 2 + spec[0, f:] ** 2).double().numpy()

    def cplx(spec):  # (1, 2F, T) -> (F, T) complex128
        return spec[0, :f].double().numpy() + 1j * spec[0, f:].double().numpy()

    sp, np_ = power(spec_s), power(spec_x - spec_s)
    cs, cx = cplx(spec_s), cplx(spec_x)
    iam = oracle_gain("iam", cs, cx - cs, cx, floor=model.config.gain_floor)
    tot = sp.sum()
    return {"speech": sp.sum(1) / tot, "noise": np_.sum(1) / tot,
            "distortion": power(out_s - spec_s).sum(1) / tot, "residual": power(out_n).sum(1) / tot,
            "oracle_distortion": ((1 - iam) ** 2 * sp).sum(1) / tot, "oracle_residual": (iam ** 2 * np_).sum(1) / tot,
            "gain": filt[0][0].double().numpy().mean(1)}


SPEECH_BANDS_HZ = ((0, 1), (1, 60), (60, 100), (100, 150), (150, 300), (300, 8000))
"""tuple[tuple[int, int], ...]: bands (Hz) of the long-term speech spectrum comparison (``--speech-bands``)."""


def band_shares_db(x: np.ndarray, bands=SPEECH_BANDS_HZ, sample_rate_hz: int = 16000) -> list[float]:
    """Long-term energy share of each band in ``x`` (T,) float, dB relative to the total energy (one DFT
    of the whole signal; band 0-1 Hz is the DC offset)."""
    p = np.abs(np.fft.rfft(np.asarray(x, np.float64))) ** 2
    fr = np.fft.rfftfreq(x.size, 1.0 / sample_rate_hz)
    return [round(float(10 * np.log10(p[(fr >= lo) & (fr < hi)].sum() / p.sum() + 1e-12)), 1) for lo, hi in bands]


def speech_band_report(pieces: int = 20, seconds: float = 4.0) -> dict:
    """Long-term band shares (:data:`SPEECH_BANDS_HZ`) of every training speech corpus (data version 3,
    seed 2: the mean over ``pieces`` random ``seconds``-long pieces, rng seed 0) and of each clean test
    reading, plus the DC offset of the readings relative to their RMS. Returns ``{"bands_hz", "train":
    {corpus: [dB...]}, "test": {file: [dB...]}, "test_dc_over_rms": {file: float}}``."""
    from cosyedge.data.training_data import TrainingData
    from cosyedge.data.pairs import test_pairs

    data = TrainingData(seed=2, data_version=3)
    rng = np.random.default_rng(0)
    n = int(seconds * 16000)
    train = {}
    for name, (a, b) in data.speech_ranges.items():
        starts = rng.integers(a, max(a + 1, b - n), pieces)
        train[name] = [round(float(v), 1) for v in np.mean([band_shares_db(data.speech[s:s + n]) for s in starts], axis=0)]
    test, dc = {}, {}
    for name, _, clean in test_pairs((5,)):
        reading = name.split("+")[0]
        if reading not in test:
            test[reading] = band_shares_db(clean)
            dc[reading] = round(float(abs(clean.mean()) / clean.std()), 3)
    return {"bands_hz": SPEECH_BANDS_HZ, "train": train, "test": test, "test_dc_over_rms": dc}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--weights", default=None, help="safetensors weights (default: the bundled model)")
    ap.add_argument("--snr", type=float, default=5.0, help="active-speech SNR of the test pairs, dB")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--speech-bands", action="store_true",
                    help="also compare the long-term spectrum of the training speech corpora (data version 3) with "
                         "the test readings (about 20 s more for loading the training data)")
    args = ap.parse_args(argv)

    import torch

    from cosyedge.signal import si_snr

    from cosyedge.data.pairs import test_pairs
    from cosyedge.errors import CosyEdgeError
    from cosyedge.train.reference.model import load_reference

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
    if args.speech_bands:
        report["speech_bands"] = sb = speech_band_report()
        print("long-term speech spectrum, band energy in dB re total:",
              " ".join(f"{lo}-{hi}Hz" for lo, hi in SPEECH_BANDS_HZ))
        for group in ("train", "test"):
            for name, row in sb[group].items():
                print(f"  {group:5s} {name[-28:]:28s} " + " ".join(f"{v:7.1f}" for v in row))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
