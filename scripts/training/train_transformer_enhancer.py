#!/usr/bin/env python3
"""Train the small streaming transformer enhancer (:mod:`cosyedge.train.transformer_enhancer`) on offline data only.

Issue 38 item 7: a transformer model people can hear once ``cosyedge streamify`` turns its sliding-window attention
into a KV cache. The same data, loss and evaluation as ``scripts/training/train_reference.py`` (short; the reference's
growth
and augmentation options are left out):

- data: :class:`cosyedge.data.training_data.TrainingData` (``--data-version``, SNR -5..20 dB, random gain);
- loss: the weighted speech-distortion SNR loss (Xia et al. 2020, arXiv:2001.10601) on the soft-thresholded SNR
  (:func:`cosyedge.train.reference.losses.thresholded_snr_loss`): the model is a gain on a fixed linear STFT, so the
  clean speech through the noisy input's gains is the speech part ``y_s`` and ``y - y_s`` the noise part; error
  energy ``2 a |y_s - s|^2 + 2 (1 - a) |y - y_s|^2`` (``a`` = ``--speech-weight``; 0.5 = plain SNR loss), plus
  ``--spectral-weight`` times :func:`~cosyedge.train.reference.losses.compressed_spectral_loss`;
- schedule: AdamW, linear warm-up then cosine decay over the wall-clock budget
  (:func:`~cosyedge.train.reference.loop.lr_at`);
- selection: SI-SNR improvement on the validation pairs (held-out asterisk prompts,
  :func:`~cosyedge.train.reference.loop.evaluate`) every ``--eval-every`` steps; the best is written to ``--out``.

Writes ``--out`` (safetensors, config and notes in the header), ``<log-dir>/last.safetensors`` every
``--checkpoint-minutes`` (resume with ``--init``), ``<log-dir>/history.json`` and ``<log-dir>/curves.png``.

Example (stage 1 of the bundled weights, 1 thread; both stages are in cosyedge/assets/transformer/README.md)::

    python scripts/training/train_transformer_enhancer.py --minutes 25 --threads 1 --seed 0 --allow-missing-corpora \\
        --out stage1.safetensors --log-dir docs/training/transformer
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def batch_loss(model, noisy: np.ndarray, clean: np.ndarray, speech_weight: float, spectral_weight: float = 0.0):
    """Training loss (scalar torch.Tensor, dB; lower is better) of a :class:`TransformerEnhancer` on one batch.

    Args:
        model: TransformerEnhancer in train mode.
        noisy, clean (np.ndarray): float32 (B, T) from :meth:`TrainingData.batch`, T a multiple of the hop.
        speech_weight (float): ``a`` in [0, 1] (module docstring).
        spectral_weight (float): weight of the compressed spectral loss (0: none).
    """
    import torch

    from cosyedge.train.reference.losses import compressed_spectral_loss, thresholded_snr_loss

    n = noisy.shape[-1]
    d = model.config.delay_samples
    x, s = torch.from_numpy(noisy)[:, None], torch.from_numpy(clean)[:, None]
    spec = model.encoder(x)
    g = model.gains(spec)
    y = model.synthesis(model.apply_gains(spec, g), n)[:, 0, d:]
    ref, mix = s[:, 0, : n - d], x[:, 0, : n - d]
    if speech_weight == 0.5:
        loss = thresholded_snr_loss(y, ref, mix)
    else:
        y_s = model.synthesis(model.apply_gains(model.encoder(s), g), n)[:, 0, d:]
        a = speech_weight
        err = 2 * a * ((y_s - ref) ** 2).sum(-1) + 2 * (1 - a) * ((y - y_s) ** 2).sum(-1)
        loss = thresholded_snr_loss(y, ref, mix, err_energy=err)
    if spectral_weight:
        loss = loss + spectral_weight * compressed_spectral_loss(y, ref, mix)
    return loss


def main(argv=None) -> int:
    from cosyedge.data.versions import DATA_VERSIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=25.0, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0, help="segment length")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--attention-frames", type=int, default=32, help="frames each query sees (itself included)")
    ap.add_argument("--no-rope", action="store_true", help="no rotary position embeddings")
    ap.add_argument("--speech-weight", type=float, default=0.7,
                    help="a in [0, 1]: weight of speech distortion vs residual noise (0.5 = plain SNR loss)")
    ap.add_argument("--spectral-weight", type=float, default=0.0,
                    help="weight of the compressed spectral loss (Braun & Tashev 2021) added to the SNR loss")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--checkpoint-minutes", type=float, default=4.0,
                    help="write <log-dir>/last.safetensors this often (wall clock)")
    ap.add_argument("--ema", type=float, default=0.0, help="decay of a weight average that is evaluated and saved")
    ap.add_argument("--init", default=None, help="start from these safetensors weights (its config wins)")
    ap.add_argument("--data-version", type=int, default=1, choices=DATA_VERSIONS,
                    help="training data (cosyedge.data.versions.DATA_VERSIONS); 3 adds male-converted prompts")
    ap.add_argument("--male-share", type=float, default=0.3,
                    help="data versions 3 and 4: share of speech draws from the male-converted prompts")
    ap.add_argument("--speech-low-boost", type=float, default=0.0,
                    help="probability in [0, 1] that a training speech segment gets its f0 band (70-140 Hz) boosted "
                         "by 0 to 10 dB (cosyedge.data.augment.low_band_boost)")
    ap.add_argument("--allow-missing-corpora", action="store_true",
                    help="train without the corpora of the data version that cannot be built here (listed)")
    ap.add_argument("--out", default="transformer.safetensors")
    ap.add_argument("--log-dir", default="docs/training/transformer")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1 or args.seconds <= 0 or args.lr <= 0 or args.threads < 1:
        ap.error("--minutes, --batch, --seconds, --lr and --threads must be positive")
    if not 0 <= args.speech_weight <= 1:
        ap.error(f"--speech-weight must be in [0, 1], got {args.speech_weight}")
    if not 0 <= args.speech_low_boost <= 1 or not 0 <= args.male_share <= 1:
        ap.error("--speech-low-boost and --male-share must be in [0, 1]")
    if not 0 <= args.ema < 1:
        ap.error(f"--ema must be in [0, 1), got {args.ema}")

    import torch

    from cosyedge.train.reference.loop import WeightAverage, evaluate, lr_at, plot_curves
    from cosyedge.train.reference.options import training_data_or_exit
    from cosyedge.train.transformer_enhancer import (TransformerEnhancer, TransformerEnhancerConfig, count_parameters,
                                                     load_transformer_enhancer, save_transformer_enhancer)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    try:
        model = load_transformer_enhancer(args.init).train() if args.init else TransformerEnhancer(
            TransformerEnhancerConfig(d_model=args.d_model, heads=args.heads, layers=args.layers, ffn=args.ffn,
                                      attention_frames=args.attention_frames, rope=not args.no_rope))
    except ValueError as err:
        ap.error(str(err))
    t_prep = time.perf_counter()
    data = training_data_or_exit(ap, args, seed=args.seed, data_version=args.data_version, male_share=args.male_share,
                                 speech_low_boost=args.speech_low_boost)
    val_pairs = data.validation_pairs()
    print(f"data ready in {time.perf_counter() - t_prep:.1f} s: {len(val_pairs)} validation pairs", flush=True)
    cfg = model.config
    if not args.init:  # global mean-variance normalisation of the log-power features
        stats = np.concatenate([data.batch(args.batch, 32000, np.random.default_rng(args.seed + 1))[0]
                                for _ in range(16)])
        model.set_feature_stats(torch.from_numpy(stats)[:, None])
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"config {json.dumps(dataclasses.asdict(cfg))}", flush=True)
    print(f"trainable parameters: {count_parameters(model)}", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    ema = WeightAverage(model, args.ema) if args.ema else None
    scored = ema.model if ema else model
    n_samples = int(args.seconds * cfg.sample_rate_hz) // cfg.hop_samples * cfg.hop_samples
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    budget_s = args.minutes * 60
    t0 = t_ckpt = time.perf_counter()
    hist = {"step": [], "loss": [], "val_step": [], "val_sisnri": []}
    best, step = -math.inf, 0

    def notes(v: float) -> dict:
        return {"step": step, "val_sisnri_db": v, "seed": args.seed, "minutes": (time.perf_counter() - t0) / 60,
                "options": vars(args), "missing_corpora": data.missing}

    def validate() -> float:
        nonlocal best
        model.eval()
        v = evaluate(scored, val_pairs, cfg.delay_samples)
        model.train()
        hist["val_step"].append(step)
        hist["val_sisnri"].append(v)
        el = time.perf_counter() - t0
        recent = np.mean(hist["loss"][-args.eval_every:]) if hist["loss"] else float("nan")
        print(f"step {step} t={el / 60:.1f} min lr={lr:.2e} loss={recent:.2f} val SI-SNRi={v:.2f} dB"
              + (" (best)" if v > best else ""), flush=True)
        if v > best:
            best = v
            save_transformer_enhancer(scored, args.out, extra=notes(v))
        plot_curves(hist, log_dir / "curves.png")
        (log_dir / "history.json").write_text(json.dumps(hist))
        return v

    lr = args.lr
    while step < args.max_steps:
        frac = min(1.0, (time.perf_counter() - t0) / budget_s)
        if frac >= 1.0:
            break
        lr = lr_at(args.lr, step, frac, warmup_steps=200)
        for g in opt.param_groups:
            g["lr"] = lr
        noisy, clean = data.batch(args.batch, n_samples, rng)
        loss = batch_loss(model, noisy, clean, args.speech_weight, args.spectral_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        if ema:
            ema.update(model)
        step += 1
        hist["step"].append(step)
        hist["loss"].append(float(loss.detach()))
        if step % args.eval_every == 0:
            validate()
        if time.perf_counter() - t_ckpt >= args.checkpoint_minutes * 60:
            t_ckpt = time.perf_counter()
            save_transformer_enhancer(scored, log_dir / "last.safetensors", extra=notes(float("nan")))
    v = hist["val_sisnri"][-1] if hist["val_step"] and hist["val_step"][-1] == step else validate()
    save_transformer_enhancer(scored, log_dir / "last.safetensors", extra=notes(v))
    print(f"final step {step}: val SI-SNRi={v:.2f} dB, best {best:.2f} dB -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
