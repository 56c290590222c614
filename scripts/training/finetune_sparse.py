#!/usr/bin/env python3
"""Prune the reference enhancer's estimator convs to 2:4 and fine-tune with fixed masks to recover.

Steps: load the dense weights (``--init``, default the bundled ``cosyedge/models/reference.safetensors``),
compute 2:4 magnitude masks on the trainable convs whose input channels are a multiple of 4 (the gated
blocks' dilated convs and 1x1 projections, the output conv and, in a deep-filter model, its coefficient head
``df_out``; the fixed STFT analysis/synthesis convs, the fixed deep-filter taps and the 161-bin input conv
stay dense), fine-tune with the masks re-applied after every optimizer step, keep the
checkpoint with the best validation SI-SNR improvement, then export it to a streaming ONNX
(``cosyedge.export`` + ``streamify``) and verify the 2:4 pattern in the ONNX
(:func:`cosyedge.precision.sparsity.sparsify_onnx` on the exported model finds the pattern already there
and reports it; the file written is the verified one).

Loss, data and evaluation are those of ``scripts/training/train_reference.py`` (:mod:`cosyedge.train.reference`,
shared): the
weighted speech-distortion thresholded SNR loss, plus its compressed spectral (``--spectral-weight``) and
STOI (``--stoi-weight``) losses when the dense parent was trained with them, on
:class:`cosyedge.data.training_data.TrainingData` batches at ``--snr-range`` SNRs, and SI-SNR improvement on the
held-out validation pairs.

Commands::

    # the fine-tune (2 cores; run it when the machine is otherwise idle)
    python scripts/training/finetune_sparse.py --minutes 20 --out reference.sparse.safetensors \
        --onnx-out reference.sparse.stream.onnx
    # smoke run (a few steps, a few validation pairs)
    python scripts/training/finetune_sparse.py --max-steps 3 --batch 2 --seconds 0.5 --val-limit 4 \
        --out /tmp/s.safetensors --onnx-out /tmp/s.stream.onnx

Writes the weights (safetensors; config, masks summary and training notes in the header), the streaming
ONNX and ``<out>.report.json`` (per-layer 2:4 report, validation SI-SNRi before pruning, right after
pruning and after fine-tuning).

Sources: Mishra et al., arXiv:2104.08378 (2:4 one-shot magnitude pruning + fine-tuning with fixed masks);
NVIDIA apex ASP (masks re-applied after ``optimizer.step``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    from cosyedge.data.versions import DATA_VERSIONS

    from cosyedge.train.reference import loop, options  # loss, evaluation and the option checks
    from cosyedge.train.reference.losses import batch_loss

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--init", default=None, help="dense weights (default: bundled reference.safetensors)")
    ap.add_argument("--minutes", type=float, default=20.0, help="wall-clock fine-tuning budget")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0, help="segment length")
    ap.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (cosine decay, 100-step warm-up)")
    ap.add_argument("--speech-weight", type=float, default=0.7, help="as in train_reference.py")
    ap.add_argument("--spectral-weight", type=float, default=0.0, help="as in train_reference.py (0: none)")
    ap.add_argument("--stoi-weight", type=float, default=0.0, help="as in train_reference.py (0: none)")
    ap.add_argument("--snr-range", default="-5,20", metavar="LO,HI", type=options._snr_range_spec,
                    help="as in train_reference.py; write it with = (--snr-range=-5,12)")
    ap.add_argument("--allow-missing-corpora", action="store_true", help=options.ALLOW_MISSING_HELP)
    ap.add_argument("--data-version", type=int, default=2, choices=DATA_VERSIONS,
                    help="training data version (see cosyedge.data.versions.DATA_VERSIONS)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--read-phrase-share", type=float, default=0.0,
                    help="as in train_reference.py: share of speech draws from real read speech (0 = off)")
    ap.add_argument("--read-phrases", default=None, type=options._read_speech_spec, metavar="NAME[,NAME...]",
                    help="as in train_reference.py: which read-speech corpora --read-phrase-share adds "
                         "(default tuxpaint)")
    ap.add_argument("--male-share", type=float, default=None,
                    help="as in train_reference.py (data versions 3 and 4; default 0.3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--val-limit", type=int, default=120, help="validation pairs used")
    ap.add_argument("--out", default="reference.sparse.safetensors", help="fine-tuned sparse weights")
    ap.add_argument("--onnx-out", default="reference.sparse.stream.onnx", help="streaming ONNX of the result")
    ap.add_argument("--dense-onnx", default=None,
                    help="dense FP32 streaming ONNX of the --init weights, whose SHA-256 is recorded in --onnx-out "
                         "(cosyedge check refuses a sparse model fine-tuned from another dense one); default: the "
                         "bundled reference.stream.onnx when --init is the bundled weights, else none recorded")
    args = ap.parse_args(argv)
    from cosyedge.errors import CosyEdgeError
    from cosyedge.models import REFERENCE_STREAM_ONNX, REFERENCE_WEIGHTS
    from cosyedge.precision.sparsity import check_dense_parent

    options.check_loss_weights(ap, args)
    if args.read_phrases is not None and not args.read_phrase_share:
        ap.error("--read-phrases needs --read-phrase-share > 0")
    if args.male_share is not None and args.data_version < 3:
        ap.error(f"--male-share needs --data-version 3 or 4 (data version {args.data_version} has no "
                 f"male-converted prompts)")
    dense_onnx = args.dense_onnx
    if dense_onnx is None and (args.init is None or Path(args.init).resolve() == REFERENCE_WEIGHTS.resolve()):
        dense_onnx = REFERENCE_STREAM_ONNX
    dense_sha = None
    if dense_onnx is not None:  # checked and hashed now: the file stamped at the end must be this one
        try:
            dense_sha = check_dense_parent(args.onnx_out, dense_onnx)
        except CosyEdgeError as err:
            ap.error(f"--dense-onnx: {err}")

    import torch

    from cosyedge.train.reference.export import export_reference
    from cosyedge.train.reference.model import load_reference, save_reference
    from cosyedge.precision.sparse_torch import apply_2to4, masks_hold, reapply_masks
    from cosyedge.precision.sparsity import check_2to4, format_report, sparsify_onnx, stamp_dense_parent

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t_prep = time.perf_counter()
    male = {} if args.male_share is None else {"male_share": args.male_share}
    data = options.training_data_or_exit(ap, args, seed=args.seed, data_version=args.data_version,
                                    read_phrase_share=args.read_phrase_share,
                                    read_phrase_corpus=args.read_phrases or "tuxpaint", **male)
    val = data.validation_pairs(limit=args.val_limit)
    print(f"data ready in {time.perf_counter() - t_prep:.1f} s: {len(val)} validation pairs", flush=True)

    model = load_reference(args.init)
    delay = model.config.delay_samples
    dense_v = loop.evaluate(model, val, delay)
    masks = apply_2to4(model)
    pruned_v = loop.evaluate(model, val, delay)
    n_masked = sum(int(m.numel()) for m in masks.values())
    print(f"pruned {len(masks)} convs 2:4 ({n_masked} weights, {n_masked // 2} zeroed): val SI-SNRi "
          f"{dense_v:.2f} dB dense -> {pruned_v:.2f} dB pruned", flush=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    n_samples = int(args.seconds * model.config.sample_rate_hz) // model.config.hop_samples * model.config.hop_samples
    budget_s = args.minutes * 60
    t0 = time.perf_counter()
    best, best_step, step, losses = pruned_v, 0, 0, []
    notes = {"dense_val_sisnri_db": dense_v, "pruned_val_sisnri_db": pruned_v, "masked_layers": sorted(masks),
             "options": vars(args), "missing_corpora": data.missing,
             "dense_parent": None if dense_onnx is None else {"path": str(dense_onnx), "sha256": dense_sha}}
    save_reference(model.eval(), args.out, extra={**notes, "step": 0, "val_sisnri_db": pruned_v})
    model.train()
    while step < args.max_steps:
        frac = min(1.0, (time.perf_counter() - t0) / budget_s)
        if frac >= 1.0:
            break
        lr = loop.lr_at(args.lr, step, frac, warmup_steps=100)
        for g in opt.param_groups:
            g["lr"] = lr
        noisy, clean = data.batch(args.batch, n_samples, rng, snr_db_range=args.snr_range)
        loss = batch_loss(model, noisy, clean, delay, args.speech_weight, args.spectral_weight, args.stoi_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        reapply_masks(model, masks)
        step += 1
        losses.append(float(loss.detach()))
        last = step >= args.max_steps or (time.perf_counter() - t0) >= budget_s
        if step % args.eval_every == 0 or last:
            model.eval()
            v = loop.evaluate(model, val, delay)
            print(f"step {step} t={(time.perf_counter() - t0) / 60:.1f} min lr={lr:.2e} "
                  f"loss={np.mean(losses[-args.eval_every:]):.2f} val SI-SNRi={v:.2f} dB", flush=True)
            if v > best:
                best, best_step = v, step
                save_reference(model, args.out, extra={**notes, "step": step, "val_sisnri_db": v})
            model.train()
    model.eval()
    if not masks_hold(model, masks):
        print("[!] 2:4 masks were violated during fine-tuning", file=sys.stderr)
        return 1
    print(f"best val SI-SNRi {best:.2f} dB at step {best_step} (dense {dense_v:.2f}, pruned {pruned_v:.2f}); "
          f"weights: {args.out}", flush=True)

    # export the best checkpoint and verify the pattern in the ONNX
    onnx_out = Path(args.onnx_out)
    export_reference(args.out, onnx_out)
    tmp = onnx_out.with_name(onnx_out.name + ".verify.onnx")
    try:
        report = sparsify_onnx(onnx_out, tmp)  # re-pruning a 2:4 model changes nothing; it verifies
        import onnx
        from onnx import numpy_helper

        a = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(onnx_out)).graph.initializer}
        b = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp)).graph.initializer}
        unchanged = all(np.array_equal(a[k], b[k]) for k in a)
        pattern_ok = all(check_2to4(a[r["weight"]], 1) for r in report["layers"] if r["eligible"])
    finally:
        tmp.unlink(missing_ok=True)
    print(format_report(report))
    print(f"exported ONNX holds the 2:4 pattern: {pattern_ok and unchanged}; {onnx_out}")
    if dense_onnx is not None:
        stamp_dense_parent(onnx_out, dense_onnx, expect_sha256=dense_sha)
    print(f"dense parent recorded: {dense_onnx} (SHA-256 {dense_sha})" if dense_sha else
          "dense parent not recorded (pass --dense-onnx)", flush=True)
    out_json = Path(str(args.out) + ".report.json")
    out_json.write_text(json.dumps({**notes, "best_val_sisnri_db": best, "best_step": best_step, "steps": step,
                                    "minutes": (time.perf_counter() - t0) / 60, "onnx": str(onnx_out),
                                    "onnx_pattern_ok": pattern_ok and unchanged, "sparsity": report}, indent=2))
    return 0 if pattern_ok and unchanged else 1


if __name__ == "__main__":
    sys.exit(main())
