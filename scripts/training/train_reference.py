#!/usr/bin/env python3
"""Train the bundled reference speech enhancer on offline data only (2 CPU cores).

Loss: weighted speech-distortion SNR loss (Xia et al. 2020, arXiv:2001.10601): the output of a gain
model splits into a speech part ``y_s`` (clean speech through the gains computed from the noisy input)
and a noise part ``y_n``; the loss is the negative soft-thresholded SNR (Wisdom et al. 2020,
arXiv:2011.02329) with the error energy ``2 a |y_s - s|^2 + 2 (1 - a) |y_n|^2``. ``a = 0.5`` is the plain
SNR loss; ``a > 0.5`` (``--speech-weight``) penalises speech distortion more, which counters the
over-suppression of speech on noises the model never saw. ``--spectral-weight W`` adds W times a compressed
complex + magnitude spectral loss (Braun & Tashev 2021, arXiv:2009.12286; :func:`cosyedge.train.reference.losses.compressed_spectral_loss`),
which weighs quiet bins, such as residual noise in speech pauses, more than a waveform loss does.
``--stoi-weight W`` adds W times a differentiable STOI loss (:func:`cosyedge.train.reference.losses.stoi_loss`; Taal et al. 2011, trained on
as in Kolbaek, Tan & Jensen 2018, arXiv:1802.00604): the envelope correlation that STOI scores.

Data: :class:`cosyedge.data.training_data.TrainingData` (real speech from Debian packages, espeak-ng/flite
variety, synthetic and packaged noises, SNR -5..20 dB (``--snr-range``), random gain; the pocketsphinx
recordings and the held-out real noise are never used here). Loss: thresholded negative SNR on the waveform, output
aligned by the model's delay (Wisdom et al. 2020, arXiv:2011.02329, "soft-thresholded SNR").
Model selection by SI-SNR improvement on the validation pairs (held-out asterisk prompts).

The bundled weights were made in eight stages (``--init`` chains them); the commands, and the runs tried
since and not kept, are in docs/model-card.md ("Recipe of the bundled weights", "Tried after stage 4").
Model growth from a checkpoint keeps its function: ``--add-dilations`` (identity blocks), ``--add-df``
(zero deep-filter head), ``--add-lw`` (zero long-window feature conv), ``--add-pitch-comb`` (zero comb
feature conv, comb mix 0.0003: nearly the same function). ``--ema`` evaluates and saves an
exponential moving average of the weights; ``--select last`` keeps the end of the schedule instead of
the best validation checkpoint.

Writes the weights (safetensors, config + training notes in the header), ``<log-dir>/curves.png`` and
``<log-dir>/history.json``.

This file holds the flags and the loop only; the losses, growth steps, evaluation, EMA, plot and option checks
are :mod:`cosyedge.train.reference` (``losses``, ``grow``, ``loop``, ``options``; the ``train`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from cosyedge.train.reference.grow import add_deep_filter, add_long_window, add_pitch_comb, extend_blocks, regrid_window
from cosyedge.train.reference.loop import WeightAverage, evaluate, lr_at, mean_dnsmos_ovrl, plot_curves
from cosyedge.train.reference.losses import batch_loss
from cosyedge.train.reference.options import (ALLOW_MISSING_HELP, _df_spec, _gru_spec, _lw_spec, _read_speech_spec,
                                              _snr_range_spec, check_loss_weights, training_data_or_exit)


def main(argv=None) -> int:
    from cosyedge.data.versions import DATA_VERSIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=25.0, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=2.0, help="segment length")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--channels", type=int, default=96)
    ap.add_argument("--dilations", default="1,2,4,8,16,32", help="one gated block per dilation")
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--out", default="cosyedge/models/reference.safetensors")
    ap.add_argument("--log-dir", default="docs/training")
    ap.add_argument("--speech-weight", type=float, default=0.7,
                    help="a in [0, 1]: weight of speech distortion vs residual noise (0.5 = plain SNR loss)")
    ap.add_argument("--snr-range", default="-5,20", metavar="LO,HI", type=_snr_range_spec,
                    help="active-speech SNR range of the training mixtures in dB, drawn uniformly (default -5,20); "
                         "write it with = (--snr-range=-5,15): a value starting with - is otherwise read as an option")
    ap.add_argument("--spectral-weight", type=float, default=0.0,
                    help="weight of a compressed spectral loss (Braun & Tashev 2021) added to the SNR loss "
                         "(0: none); it weighs quiet bins, i.e. residual noise, as listeners do")
    ap.add_argument("--stoi-weight", type=float, default=0.0,
                    help="weight of a differentiable STOI loss (Taal et al. 2011; 10 log10(1 - d + 0.001), dB) added to "
                         "the SNR loss (0: none)")
    ap.add_argument("--dnsmos-weight", type=float, default=0.0,
                    help="weight (dB of loss per MOS point) of the negative DNSMOS P.835 OVRL of the output, scored by "
                         "a differentiable port of the scorer of cosyedge eval (0: none)")
    ap.add_argument("--dnsmos-items", type=int, default=4,
                    help="with --dnsmos-weight: items per batch the DNSMOS loss scores (each 2 s item costs about "
                         "4 G MAC forward)")
    ap.add_argument("--init", default=None, help="start from these safetensors weights")
    ap.add_argument("--add-dilations", default=None,
                    help="with --init: append gated blocks with these dilations (e.g. 1,2,4,8), initialised as the "
                         "identity (zero output projection), so training resumes from the same function")
    ap.add_argument("--add-df", default=None, metavar="K,BINS", type=_df_spec,
                    help="with --init: add a deep filter of K taps on the lowest BINS bins (e.g. 3,64), its "
                         "coefficients initialised to zero, so training resumes from the same function")
    ap.add_argument("--df", default=None, metavar="K,BINS", type=_df_spec,
                    help="from scratch: model with a deep filter of K taps on the lowest BINS bins")
    ap.add_argument("--add-lw", default=None, metavar="W,BINS", type=_lw_spec,
                    help="with --init: add long-window features (a W-sample causal window, its lowest BINS bins, "
                         "e.g. 1024,128 = 64 ms, 0-2 kHz) through a zero-initialised 1x1 conv, so training resumes "
                         "from the same function")
    ap.add_argument("--lw", default=None, metavar="W,BINS", type=_lw_spec,
                    help="from scratch: model with long-window features of W samples on the lowest BINS bins")
    ap.add_argument("--pitch-comb", action="store_true",
                    help="from scratch: build the model with the pitch comb (needs --lw; with --init use --add-pitch-comb)")
    ap.add_argument("--gru", default=None, metavar="H,LAYERS", type=_gru_spec,
                    help="from scratch: a recurrent block (GRU of H units, LAYERS layers) after the gated conv blocks "
                         "(EnhancerConfig.gru_hidden / gru_layers), e.g. 192,2")
    ap.add_argument("--add-pitch-comb", action="store_true",
                    help="with --init: add the pitch comb path (RNNoise-style pitch filter, "
                         "cosyedge.train.reference.model; needs long-window features), its feature conv zero and its "
                         "mix near 0, so training resumes from nearly the same function")
    ap.add_argument("--add-window", type=int, default=None, metavar="N",
                    help="with --init: move the model to an N-sample STFT analysis window (asymmetric low-latency "
                         "window when N > 320, e.g. 768 = 48 ms, 20.8 Hz bins; same 20 ms latency), its per-bin convs "
                         "resampled to the new bins (regrid_window)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="decay in (0, 1) of an exponential moving average of the weights, which is then what is "
                         "evaluated and saved (e.g. 0.999); 0 = off")
    ap.add_argument("--select", choices=("val", "last"), default="val",
                    help="which weights --out keeps: the best validation SI-SNRi, or the last (end of the schedule; "
                         "for losses that trade in-domain validation for robustness, e.g. a higher --speech-weight)")
    ap.add_argument("--allow-missing-corpora", action="store_true", help=ALLOW_MISSING_HELP)
    ap.add_argument("--data-version", type=int, default=3, choices=DATA_VERSIONS,
                    help="training data (cosyedge.data.versions.DATA_VERSIONS): 1 = the first data, 2 = plus more "
                         "real voices and noises, 3 = plus male-converted prompts, 4 = 3 with noise speed and EQ "
                         "augmentation of every batch")
    ap.add_argument("--speech-low-boost", type=float, default=0.0,
                    help="probability in [0, 1] that a training speech segment gets its f0 band (70-140 Hz) boosted "
                         "by 0 to --speech-low-boost-db dB (cosyedge.data.augment.low_band_boost)")
    ap.add_argument("--speech-low-boost-db", type=float, default=10.0,
                    help="largest f0-band boost of --speech-low-boost, dB in [0, 30]")
    ap.add_argument("--speech-reverb", type=float, default=0.0,
                    help="probability in [0, 1] that a training speech segment gets synthetic room reverberation "
                         "(RT60 0.15-0.6 s, clean target reverberant too; cosyedge.data.augment.room_reverb)")
    ap.add_argument("--mixture-lowpass", type=float, default=0.0,
                    help="probability in [0, 1] that a whole training mixture (noisy and clean) is band-limited to "
                         "4 kHz, as an 8 kHz recording resampled to 16 kHz (cosyedge.data.augment.band_limit)")
    ap.add_argument("--read-phrase-share", type=float, default=0.0,
                    help="share in [0, 1) of speech draws from real read speech, mostly male voices (Tux Paint's "
                         "spoken stamp descriptions or festvox-ru's recordings, "
                         "cosyedge.data.versions.READ_PHRASE_CORPORA); 0 = off")
    ap.add_argument("--read-phrases", default="tuxpaint", metavar="NAME[,NAME...]", type=_read_speech_spec,
                    help="which real speech --read-phrase-share adds, one or more (comma-separated) of tuxpaint (all "
                         "Tux Paint voices), tuxpaint-male-clean (its male voices without an audible noise floor), "
                         "festvox-ru (a male speaker's 620 read sentences), fillets-male (two male actors' "
                         "dubbed dialogue) and festvox-ru-voices (festvox-ru's sentences re-voiced over the low male "
                         "range, median f0 75-125 Hz)")
    ap.add_argument("--male-share", type=float, default=0.3,
                    help="data versions 3 and 4: share of speech draws from the male-converted prompts")
    args = ap.parse_args(argv)
    if args.add_dilations and not args.init:
        ap.error("--add-dilations needs --init")
    if args.add_df and not args.init:
        ap.error("--add-df needs --init (use --df from scratch)")
    if args.df and args.init:
        ap.error("--df builds a model from scratch; with --init use --add-df")
    if args.add_lw and not args.init:
        ap.error("--add-lw needs --init (use --lw from scratch)")
    if args.add_pitch_comb and not args.init:
        ap.error("--add-pitch-comb needs --init (a trained model with long-window features)")
    if (args.pitch_comb or args.gru) and args.init:
        ap.error("--pitch-comb and --gru build a model from scratch; with --init, --add-pitch-comb grows the comb "
                 "(a GRU block cannot be grown onto a trained model)")
    if args.pitch_comb and not args.lw:
        ap.error("--pitch-comb needs --lw (the pitch is read off the long window)")
    if args.lw and args.init:
        ap.error("--lw builds a model from scratch; with --init use --add-lw")
    if args.add_window is not None and not args.init:
        ap.error("--add-window needs --init")
    if not 0 <= args.speech_low_boost <= 1:
        ap.error(f"--speech-low-boost must be in [0, 1], got {args.speech_low_boost}")
    if not 0 <= args.read_phrase_share < 1:
        ap.error(f"--read-phrase-share must be in [0, 1), got {args.read_phrase_share}")
    if not 0 <= args.speech_reverb <= 1:
        ap.error(f"--speech-reverb must be in [0, 1], got {args.speech_reverb}")
    if not 0 <= args.mixture_lowpass <= 1:
        ap.error(f"--mixture-lowpass must be in [0, 1], got {args.mixture_lowpass}")
    if not 0 <= args.speech_low_boost_db <= 30:
        ap.error(f"--speech-low-boost-db must be in [0, 30], got {args.speech_low_boost_db}")
    check_loss_weights(ap, args)
    if not 0 <= args.ema < 1:
        ap.error(f"--ema must be in [0, 1), got {args.ema}")

    if args.minutes <= 0 or args.batch < 1 or args.seconds <= 0 or args.lr <= 0 or args.threads < 1:
        ap.error("--minutes, --batch, --seconds, --lr and --threads must be positive")
    try:
        dilations = tuple(int(d) for d in args.dilations.split(","))
        added = tuple(int(d) for d in args.add_dilations.split(",")) if args.add_dilations else ()
    except ValueError:
        ap.error("--dilations/--add-dilations: comma-separated integers, e.g. 1,2,4,8")

    import torch

    from cosyedge.errors import CosyEdgeError
    from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer, load_reference, save_reference

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    # the model first: a bad --init or model option fails here, before minutes of data preparation
    df, lw, gru = args.df or (0, 0), args.lw or (0, 0), args.gru or (0, 1)
    try:
        model = load_reference(args.init).train() if args.init else ReferenceEnhancer(
            EnhancerConfig(channels=args.channels, dilations=dilations, df_order=df[0], df_bins=df[1],
                           lw_window=lw[0], lw_bins=lw[1], pitch_comb=args.pitch_comb, gru_hidden=gru[0],
                           gru_layers=gru[1]))
        if added:
            model = extend_blocks(model, added).train()
        if args.add_df:
            model = add_deep_filter(model, *args.add_df).train()
        if args.add_lw:
            model = add_long_window(model, *args.add_lw).train()
        if args.add_window is not None:
            model = regrid_window(model, args.add_window).train()
        if args.add_pitch_comb:
            model = add_pitch_comb(model).train()
    except (CosyEdgeError, ValueError) as err:
        ap.error(str(err))
    t_prep = time.perf_counter()
    data = training_data_or_exit(ap, args, seed=args.seed, data_version=args.data_version, male_share=args.male_share,
                                 speech_low_boost=args.speech_low_boost, speech_low_boost_db=args.speech_low_boost_db,
                                 speech_reverb=args.speech_reverb, mixture_lowpass=args.mixture_lowpass,
                                 read_phrase_share=args.read_phrase_share, read_phrase_corpus=args.read_phrases)
    val_pairs = data.validation_pairs()
    try:
        test_pairs = data.test_pairs((5,))
    except Exception as err:  # held-out noise not prepared: train anyway, report validation only
        print(f"no test pairs ({err})", flush=True)
        test_pairs = []
    print(f"data ready in {time.perf_counter() - t_prep:.1f} s: {len(val_pairs)} validation, "
          f"{len(test_pairs)} test pairs", flush=True)

    delay = model.config.delay_samples
    new_main = not args.init or args.add_window is not None  # the main STFT's features are new
    if new_main or args.add_lw:  # global mean-variance normalisation of the (new) log-power features
        stats = np.concatenate([data.batch(args.batch, 32000, np.random.default_rng(args.seed + 1))[0]
                                for _ in range(16)])
        model.set_feature_stats(torch.from_numpy(stats)[:, None], long_window_only=not new_main,
                                main_only=new_main and bool(args.init) and not args.add_lw)
    if args.add_pitch_comb:  # the comb features are new; every other normalisation stays
        stats = np.concatenate([data.batch(args.batch, 32000, np.random.default_rng(args.seed + 1))[0]
                                for _ in range(16)])
        model.set_feature_stats(torch.from_numpy(stats)[:, None], pitch_comb_only=True)
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable parameters: {sum(p.numel() for p in params)}", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    ema = WeightAverage(model, args.ema) if args.ema else None
    scored = ema.model if ema else model  # what is evaluated and saved

    def keep(step: int, v: float, tn: dict, elapsed_s: float) -> None:  # write the scored weights to --out
        save_reference(scored, args.out, extra={"step": step, "val_sisnri_db": v, "test_sisnri_db_5db": tn,
                                                "seed": args.seed, "minutes": elapsed_s / 60, "ema": args.ema,
                                                "options": vars(args), "missing_corpora": data.missing})

    n_samples = int(args.seconds * model.config.sample_rate_hz) // model.config.hop_samples * model.config.hop_samples

    budget_s = args.minutes * 60
    t0 = time.perf_counter()
    hist = {"step": [], "loss": [], "val_step": [], "val_sisnri": [], "test_sisnri": []}
    best = -math.inf
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    step = 0
    while step < args.max_steps:
        frac = min(1.0, (time.perf_counter() - t0) / budget_s)
        if frac >= 1.0:
            break
        lr = lr_at(args.lr, step, frac, warmup_steps=200)
        for g in opt.param_groups:
            g["lr"] = lr
        noisy, clean = data.batch(args.batch, n_samples, rng, snr_db_range=args.snr_range)
        loss = batch_loss(model, noisy, clean, delay, args.speech_weight, args.spectral_weight, args.stoi_weight,
                          args.dnsmos_weight, args.dnsmos_items)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 5.0)
        opt.step()
        if ema:
            ema.update(model)
        step += 1
        hist["step"].append(step)
        hist["loss"].append(float(loss.detach()))
        if step % args.eval_every == 0:
            model.eval()
            v = evaluate(scored, val_pairs, delay)
            tn = evaluate(scored, test_pairs, delay, by_noise=True) if test_pairs else {"all": float("nan")}
            t = tn["all"]
            if args.dnsmos_weight and test_pairs:
                tn["ovrl"] = mean_dnsmos_ovrl(scored, test_pairs, delay)
            model.train()
            hist["val_step"].append(step)
            hist["val_sisnri"].append(v)
            hist["test_sisnri"].append(t)
            el = time.perf_counter() - t0
            print(f"step {step} t={el/60:.1f} min lr={lr:.2e} loss={np.mean(hist['loss'][-args.eval_every:]):.2f} "
                  f"val SI-SNRi={v:.2f} dB test SI-SNRi={t:.2f} dB "
                  + " ".join(f"{k}={x:.2f}" for k, x in tn.items() if k != "all"), flush=True)
            if v > best or args.select == "last":
                best = max(best, v)
                keep(step, v, tn, el)
            plot_curves(hist, log_dir / "curves.png")
            (log_dir / "history.json").write_text(json.dumps(hist))
    model.eval()
    v = evaluate(scored, val_pairs, delay)
    tn = evaluate(scored, test_pairs, delay, by_noise=True) if test_pairs else {"all": float("nan")}
    t = tn["all"]
    hist["val_step"].append(step)
    hist["val_sisnri"].append(v)
    hist["test_sisnri"].append(t)
    print(f"final step {step}: val SI-SNRi={v:.2f} dB test SI-SNRi={t:.2f} dB "
          + " ".join(f"{k}={x:.2f}" for k, x in tn.items() if k != "all"), flush=True)
    if v > best or args.select == "last":
        keep(step, v, tn, time.perf_counter() - t0)
    plot_curves(hist, log_dir / "curves.png")
    (log_dir / "history.json").write_text(json.dumps(hist))
    return 0




if __name__ == "__main__":
    sys.exit(main())
