#!/usr/bin/env python3
"""Train the bundled reference speech enhancer on offline data only (2 CPU cores).

Loss: weighted speech-distortion SNR loss (Xia et al. 2020, arXiv:2001.10601): the output of a gain
model splits into a speech part ``y_s`` (clean speech through the gains computed from the noisy input)
and a noise part ``y_n``; the loss is the negative soft-thresholded SNR (Wisdom et al. 2020,
arXiv:2011.02329) with the error energy ``2 a |y_s - s|^2 + 2 (1 - a) |y_n|^2``. ``a = 0.5`` is the plain
SNR loss; ``a > 0.5`` (``--speech-weight``) penalises speech distortion more, which counters the
over-suppression of speech on noises the model never saw. ``--spectral-weight W`` adds W times a compressed
complex + magnitude spectral loss (Braun & Tashev 2021, arXiv:2009.12286; :func:`compressed_spectral_loss`),
which weighs quiet bins, such as residual noise in speech pauses, more than a waveform loss does.
``--stoi-weight W`` adds W times a differentiable STOI loss (:func:`stoi_loss`; Taal et al. 2011, trained on
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
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def thresholded_snr_loss(est, ref, mix, tau_db: float = -30.0, err_energy=None):
    """Negative soft-thresholded SNR in dB, mean over the batch.

    Args:
        est, ref, mix (torch.Tensor): (B, T) float32: estimate, clean target, noisy input.
        tau_db (float): SNR cap (dB) expressed as the error floor ``10^(tau/10) * |ref|^2``.
        err_energy (torch.Tensor | None): (B,) error energy to use instead of ``|ref - est|^2``.
    Returns:
        torch.Tensor: scalar loss (dB; lower is better). Noise-only items (ref == 0) are bounded by a
        floor of 1e-4 of the mixture energy.
    """
    import torch

    tau = 10.0 ** (tau_db / 10.0)
    e_ref = (ref * ref).sum(-1)
    e_err = ((ref - est) ** 2).sum(-1) if err_energy is None else err_energy
    floor = 1e-4 * (mix * mix).sum(-1) + 1e-8
    return (10 * torch.log10(e_err + tau * e_ref + floor) - 10 * torch.log10(e_ref + floor)).mean()


def compressed_spectral_loss(est, ref, mix, compress: float = 0.3, alpha: float = 0.3, n_fft: int = 512,
                             hop: int = 128):
    """Compressed complex + magnitude spectral loss (Braun & Tashev 2021, arXiv:2009.12286) in dB.

    Every item is first divided by its mixture's RMS (the loss does not depend on the level), then
    ``E = STFT(est)``, ``S = STFT(ref)`` (Hann window ``n_fft`` samples, hop ``hop``) are compressed to
    ``|E|^c e^{j angle E}`` and the error is ``alpha |E_c - S_c|^2 + (1 - alpha) (|E|^c - |S|^c)^2`` summed
    over bins and frames. The loss is ``10 log10((err + floor) / (|S_c|^2 + floor))`` per item, averaged
    over the batch: a compressed-spectrum SNR, so it adds to the waveform SNR loss on the same dB scale.
    Compression weights quiet bins (residual noise in speech pauses, high frequencies) far more than a
    waveform loss does, which is what perceptual measures (PESQ, DNSMOS BAK) hear.

    Args:
        est, ref, mix (torch.Tensor): (B, T) float32: estimate, clean target, noisy input (samples).
        compress (float): ``c`` in (0, 1]; 0.3 as in the paper.
        alpha (float): weight of the complex term (the paper's 0.3); ``1 - alpha`` weighs the magnitude.
        n_fft, hop (int): STFT window and hop (samples; 32 / 8 ms at 16 kHz).
    Returns:
        torch.Tensor: scalar loss (dB; lower is better). Noise-only items (ref == 0) are bounded by a
        floor of 1e-3 of the compressed mixture energy.
    Raises:
        ValueError: ``compress`` outside (0, 1] or ``alpha`` outside [0, 1].
    """
    import torch

    if not 0 < compress <= 1 or not 0 <= alpha <= 1:
        raise ValueError(f"compress must be in (0, 1] and alpha in [0, 1], got {compress}, {alpha}")
    scale = 1.0 / (mix.pow(2).mean(-1, keepdim=True).sqrt() + 1e-8)
    window = torch.hann_window(n_fft, device=est.device)

    def compressed(sig):
        z = torch.stft(sig * scale, n_fft, hop, window=window, return_complex=True, center=False)
        power = z.real ** 2 + z.imag ** 2 + 1e-8
        return z * power ** ((compress - 1) / 2), power ** (compress / 2)

    (ec, em), (sc, sm), (xc, _) = compressed(est), compressed(ref), compressed(mix)
    err = alpha * (ec - sc).abs().pow(2).sum((-2, -1)) + (1 - alpha) * (em - sm).pow(2).sum((-2, -1))
    e_ref = sc.abs().pow(2).sum((-2, -1))
    floor = 1e-3 * xc.abs().pow(2).sum((-2, -1)) + 1e-8
    return (10 * torch.log10(err + floor) - 10 * torch.log10(e_ref + floor)).mean()


# shortest training segment the STOI loss can score: one 30-frame segment (410 + 29 x 205 samples, 384 ms at
# 16 kHz) after the model's one-hop (160-sample) delay is dropped, rounded up to 10 ms
STOI_MIN_SECONDS = math.ceil((410 + 29 * 205 + 160) / 160) / 100


@functools.lru_cache(maxsize=None)
def _third_octave_matrix(sample_rate: int, n_fft: int) -> np.ndarray:
    """STOI's 15 one-third-octave bands from 150 Hz as a (15, n_fft // 2 + 1) float32 0/1 matrix over the rfft
    bins, band edges moved to the nearest bin (``pystoi.utils.thirdoct``, Taal et al. 2011); built once per
    (rate, FFT size), not on every training step."""
    f = np.linspace(0, sample_rate, n_fft + 1)[: n_fft // 2 + 1]
    obm = np.zeros((15, len(f)), np.float32)
    for i in range(15):
        lo = int(np.argmin((f - 150.0 * 2.0 ** ((2 * i - 1) / 6)) ** 2))
        hi = int(np.argmin((f - 150.0 * 2.0 ** ((2 * i + 1) / 6)) ** 2))
        obm[i, lo:hi] = 1.0
    obm.setflags(write=False)
    return obm


def stoi_loss(est, ref, frame: int = 410, n_fft: int = 1024, segment: int = 30, beta_db: float = -15.0,
              dyn_range_db: float = 40.0, sample_rate: int = 16000):
    """Differentiable short-time objective intelligibility (STOI) loss in dB: ``10 log10(1 - d + 1e-3)``.

    ``d`` follows STOI (Taal et al. 2011, IEEE TASLP 19(7), doi:10.1109/TASL.2011.2114881; as trained on
    by Kolbaek, Tan & Jensen 2018, arXiv:1802.00604, and as computed by ``pystoi``): Hann-windowed frames of
    ``frame`` samples (25.6 ms) at half overlap, 15 one-third-octave band envelopes from 150 Hz (the
    ``pystoi`` band matrix at this rate), segments of ``segment`` frames (384 ms); in each segment and band the
    estimate's envelope is scaled to the clean one's norm, clipped at ``(1 + 10^(-beta/20))`` times the clean
    envelope, and correlated with it; ``d`` is the mean correlation. Two changes make it trainable at 16 kHz
    on a batch: no resampling to 10 kHz (the bands stop at 4.3 kHz anyway), and the silent frames (clean
    energy more than ``dyn_range_db`` below the item's loudest frame) are dropped from the band envelopes
    rather than from the waveform before the STFT. Items with fewer than ``segment`` non-silent frames (e.g.
    noise-only items, ref == 0) are left out of the batch mean (0 if none is left).
    On a dB scale like the other losses: STOI 0.87 -> 0.89 is -0.7 dB.

    Args:
        est, ref (torch.Tensor): (B, T) float32 estimate and clean target (samples at ``sample_rate`` Hz),
            T >= ``frame * (segment + 1) / 2``.
        frame, n_fft (int): frame length and FFT size (samples).
        segment (int): frames per intermediate-intelligibility segment.
        beta_db (float): lower signal-to-distortion bound of the clipping (dB).
        dyn_range_db (float): frames this far below an item's loudest clean frame are silent (dB).
        sample_rate (int): Hz; sets the band matrix.
    Returns:
        torch.Tensor: scalar loss (dB; lower is better; -30 dB for d = 1).
    Raises:
        ValueError: T too short for one segment, or ``est`` and ``ref`` of different shapes.
    """
    import torch

    if est.shape != ref.shape:
        raise ValueError(f"STOI loss needs estimate and reference of one shape, got {tuple(est.shape)} and "
                         f"{tuple(ref.shape)}")
    hop = frame // 2
    n_frames = (est.shape[-1] - frame) // hop + 1
    if n_frames < segment:
        raise ValueError(f"STOI loss needs at least {frame + (segment - 1) * hop} samples, got {est.shape[-1]}")
    window = torch.hann_window(frame + 2, periodic=False, device=est.device)[1:-1]
    obm = torch.tensor(_third_octave_matrix(sample_rate, n_fft), device=est.device)  # a copy: the cache is read-only

    def bands(sig):
        frames = sig.unfold(-1, frame, hop) * window  # (B, M, frame)
        power = torch.fft.rfft(frames, n_fft).abs().pow(2)  # (B, M, F)
        # the floor keeps sqrt differentiable at 0 and is taken off again: a silent band is 0, not flat
        return frames.pow(2).sum(-1), ((power @ obm.T + 1e-10).sqrt() - 1e-5).transpose(1, 2)  # (B, M), (B, 15, M)

    e_ref, x = bands(ref)
    _, y = bands(est)
    db = 10 * torch.log10(e_ref + 1e-10)
    active = (db > db.amax(-1, keepdim=True) - dyn_range_db) & (e_ref.sum(-1, keepdim=True) > 0)
    losses = []
    for b in range(est.shape[0]):  # each item keeps its own non-silent frames, as pystoi cuts the silent ones
        keep = active[b].nonzero()[:, 0]
        if len(keep) < segment:
            continue
        xs, ys = x[b][:, keep].unfold(-1, segment, 1), y[b][:, keep].unfold(-1, segment, 1)  # (15, J, N)
        ys = ys * xs.norm(dim=-1, keepdim=True) / (ys.norm(dim=-1, keepdim=True) + 1e-8)
        ys = torch.minimum(ys, xs * (1 + 10 ** (-beta_db / 20)))
        xs, ys = xs - xs.mean(-1, keepdim=True), ys - ys.mean(-1, keepdim=True)
        d = ((xs * ys).sum(-1) / (xs.norm(dim=-1) * ys.norm(dim=-1) + 1e-8)).mean()
        losses.append(10 * torch.log10(1 - d + 1e-3))
    return torch.stack(losses).mean() if losses else est.sum() * 0.0


def check_loss_weights(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (``ap.error``: one line, exit 2) for ``--spectral-weight`` and ``--stoi-weight`` outside
    [0, 10] and for ``--stoi-weight`` with segments (``--seconds``) shorter than :data:`STOI_MIN_SECONDS`;
    shared by this script and ``scripts/finetune_sparse.py``."""
    for name in ("spectral_weight", "stoi_weight", "dnsmos_weight"):
        if not 0 <= getattr(args, name, 0.0) <= 10:
            ap.error(f"--{name.replace('_', '-')} must be in [0, 10], got {getattr(args, name)}")
    if getattr(args, "dnsmos_items", 1) < 1:
        ap.error(f"--dnsmos-items must be at least 1, got {args.dnsmos_items}")
    if args.stoi_weight and args.seconds < STOI_MIN_SECONDS:
        ap.error(f"--stoi-weight needs segments of at least {STOI_MIN_SECONDS:.2f} s (--seconds), got {args.seconds}")


ALLOW_MISSING_HELP = ("train even when a speech or real-noise corpus of the data version cannot be loaded (a tool "
                      "such as espeak-ng, flite or festival, or a Debian package missing): it is skipped and listed "
                      "in the training notes, and the run is not reproducible on a machine that has it")


def training_data_or_exit(ap: argparse.ArgumentParser, args: argparse.Namespace, **options):
    """Build ``TrainingData(**options)``, requiring every source of the data version unless
    ``args.allow_missing_corpora``; shared by this script and ``scripts/finetune_sparse.py``.

    Returns:
        TrainingData: the data; its ``missing`` lists what was skipped (only with ``--allow-missing-corpora``).
    Raises:
        SystemExit: 2 (``ap.error``) for bad data options; the error's exit code (4 for a missing tool, 3 for a
            corpus that cannot be built) with a one-line ``[!]`` message when a source is missing.
    """
    from cosyedge.data.training_data import TrainingData
    from cosyedge.errors import CosyEdgeError, UsageError

    print("preparing the training data (the first run on a machine fetches Debian packages, synthesises and "
          "converts voices: several minutes; later runs load the cache)", flush=True)
    try:  # TrainingData checks its options (e.g. the speech shares adding up to <= 1) before loading anything
        data = TrainingData(require_all=not args.allow_missing_corpora, **options)
    except UsageError as err:
        ap.error(str(err))
    except CosyEdgeError as err:
        print(f"[!] {err} (or pass --allow-missing-corpora)", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    for reason in data.missing.values():
        print(f"[!] {reason} (--allow-missing-corpora: trained without it)", file=sys.stderr, flush=True)
    return data


def lr_at(base_lr: float, step: int, frac: float, warmup_steps: int) -> float:
    """Learning rate: linear warm-up over ``warmup_steps``, then cosine decay to 5 % of ``base_lr`` over
    the fraction ``frac`` in [0, 1] of the wall-clock budget."""
    return base_lr * min(1.0, (step + 1) / warmup_steps) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))


@functools.lru_cache(maxsize=1)
def _dnsmos_model():
    from cosyedge.eval.dnsmos_torch import build_dnsmos

    return build_dnsmos()


def dnsmos_loss(est, ref, items: int):
    """Negative DNSMOS P.835 OVRL (MOS points; lower is better) of the first ``items`` items of ``est`` whose
    clean target holds speech, from the differentiable port :func:`cosyedge.eval.dnsmos_torch.build_dnsmos`
    (the scorer of ``cosyedge eval``, scored here on the training segment itself rather than 9.01 s windows).

    Noise-only items are skipped (DNSMOS rates speech; an empty output is not a speech sample). Clipped to
    [-1, 1] as the scorer does.

    Args:
        est, ref (torch.Tensor): (B, T) float32 aligned estimate and clean target at 16 kHz.
        items (int): at most this many items are scored (the scorer costs about 4 G MAC per 2 s item).
    Returns:
        torch.Tensor: scalar, ``-mean(OVRL)`` (0 if no item holds speech).
    """
    keep = (ref.pow(2).sum(-1) > 0).nonzero()[:, 0][:items]
    if len(keep) == 0:
        return est.sum() * 0.0
    return -_dnsmos_model()(est[keep].clamp(-1.0, 1.0))[:, 2].mean()


def batch_loss(model, noisy: np.ndarray, clean: np.ndarray, delay: int, speech_weight: float,
               spectral_weight: float = 0.0, stoi_weight: float = 0.0, dnsmos_weight: float = 0.0,
               dnsmos_items: int = 4):
    """Training loss (scalar torch.Tensor, dB) of ``model`` on one batch.

    Args:
        model: ReferenceEnhancer in train mode.
        noisy, clean (np.ndarray): float32 (B, T) batch from :meth:`TrainingData.batch`.
        delay (int): model delay in samples (output aligned by dropping the first ``delay`` samples).
        speech_weight (float): ``a`` of the weighted speech-distortion loss (0.5 = plain thresholded SNR).
        spectral_weight (float): weight of :func:`compressed_spectral_loss` added to the SNR loss (0: none).
        stoi_weight (float): weight of :func:`stoi_loss` added to the SNR loss (0: none).
        dnsmos_weight (float): weight of :func:`dnsmos_loss` (per OVRL point) added (0: none).
        dnsmos_items (int): items of the batch the DNSMOS loss scores.
    """
    loss, y, ref, mix = _snr_loss(model, noisy, clean, delay, speech_weight)
    if dnsmos_weight:
        loss = loss + dnsmos_weight * dnsmos_loss(y, ref, dnsmos_items)
    if spectral_weight:
        loss = loss + spectral_weight * compressed_spectral_loss(y, ref, mix)
    if stoi_weight:
        loss = loss + stoi_weight * stoi_loss(y, ref)
    return loss


def _snr_loss(model, noisy: np.ndarray, clean: np.ndarray, delay: int, speech_weight: float):
    """(SNR loss, aligned output (B, T'), clean target (B, T'), noisy input (B, T')) of one batch."""
    import torch

    n_samples = noisy.shape[-1]
    x = torch.from_numpy(noisy)[:, None]
    s = torch.from_numpy(clean)
    spec, lw_spec = model.analysis(x), model.long_spec(x)
    lags = model.pitch_lags(lw_spec) if model.config.pitch_comb else None  # the noisy input's, for both paths
    comb = None if lags is None else model.comb_spec(x, lags)
    filt = model.estimate(spec, lw_spec, comb)
    y = model.synthesis(model.apply_filter(spec, *filt, comb=comb))[:, 0]
    ref, mix = s[:, : n_samples - delay], x[:, 0, : n_samples - delay]
    a = speech_weight
    if a == 0.5:
        return thresholded_snr_loss(y[:, delay:], ref, mix), y[:, delay:], ref, mix
    # the filter is linear in its input: the clean speech through it (the comb with the noisy input's lags)
    comb_s = None if lags is None else model.comb_spec(s[:, None], lags)
    y_s = model.synthesis(model.apply_filter(model.analysis(s[:, None]), *filt, comb=comb_s))[:, 0, delay:]
    y_n = y[:, delay:] - y_s
    err = 2 * a * ((y_s - ref) ** 2).sum(-1) + 2 * (1 - a) * (y_n ** 2).sum(-1)
    return thresholded_snr_loss(y[:, delay:], ref, mix, err_energy=err), y[:, delay:], ref, mix


def si_snr_db(est: np.ndarray, ref: np.ndarray) -> float:
    """Scale-invariant SNR (dB) of est vs ref, both (T,) float: :func:`cosyedge.signal.si_snr`."""
    from cosyedge.signal import si_snr

    return float(si_snr(est, ref))


def evaluate(model, pairs, delay: int, by_noise: bool = False):
    """Mean SI-SNR improvement (dB) of ``model`` over ``pairs`` [(name, noisy (T,), clean (T,))].

    With ``by_noise`` returns ``{noise: mean}`` grouped by the ``+<noise>@`` part of the names, plus
    ``"all"``."""
    import torch

    gains = []
    with torch.no_grad():
        for _, noisy, clean in pairs:
            n = len(noisy) - len(noisy) % model.config.hop_samples
            x = torch.from_numpy(np.ascontiguousarray(noisy[:n], dtype=np.float32))[None, None]
            y = model(x)[0, 0].numpy()
            est, ref, mix = y[delay:], clean[: n - delay], noisy[: n - delay]
            gains.append(si_snr_db(est, ref) - si_snr_db(mix, ref))
    if not by_noise:
        return float(np.mean(gains))
    groups: dict = {}
    for (name, _, _), g in zip(pairs, gains):
        groups.setdefault(name.split("+")[-1].split("@")[0], []).append(g)
    return {"all": float(np.mean(gains)), **{k: float(np.mean(v)) for k, v in groups.items()}}


def mean_dnsmos_ovrl(model, pairs, delay: int) -> float:
    """Mean DNSMOS P.835 OVRL of ``model``'s output over ``pairs`` [(name, noisy (T,), clean (T,))], scored as
    ``cosyedge eval`` scores it (:func:`cosyedge.eval.metrics.dnsmos`, 9.01 s windows, ONNX Runtime)."""
    import torch

    from cosyedge.eval.metrics import dnsmos

    scores = []
    with torch.no_grad():
        for _, noisy, _ in pairs:
            n = len(noisy) - len(noisy) % model.config.hop_samples
            y = model(torch.from_numpy(np.ascontiguousarray(noisy[:n], dtype=np.float32))[None, None])[0, 0].numpy()
            scores.append(dnsmos(y[delay:])["dnsmos_ovrl"])
    return float(np.mean(scores))


def _grown_copy(model, new_keys: tuple, **changes):
    """Return a ReferenceEnhancer with ``model``'s config updated by ``changes`` and ``model``'s weights
    loaded; only parameters whose names start with one of ``new_keys`` may be new (they keep their fresh
    initialisation for the caller to set).

    Raises:
        SystemExit: the weights do not fit (keys other than ``new_keys`` missing or unexpected).
    """
    import dataclasses

    from cosyedge.train.reference.model import ReferenceEnhancer

    new = ReferenceEnhancer(dataclasses.replace(model.config, **changes))
    missing, unexpected = new.load_state_dict(model.state_dict(), strict=False)
    if unexpected or not all(k.startswith(new_keys) for k in missing):
        raise SystemExit(f"cannot grow the model ({changes}): unexpected keys {unexpected}, missing {missing}")
    return new


def extend_blocks(model, dilations: tuple):
    """Return a copy of ``model`` (ReferenceEnhancer) with gated blocks of ``dilations`` appended.

    The new blocks' output projections are zero, so each is the identity (residual ``x + 0``) and the
    extended model computes exactly the same function; training then uses the added capacity.
    """
    import torch

    new = _grown_copy(model, ("blocks.",), dilations=tuple(model.config.dilations) + tuple(dilations))
    with torch.no_grad():
        for blk in new.blocks[len(model.config.dilations):]:
            blk.proj.weight.zero_()
            blk.proj.bias.zero_()
    return new


def add_deep_filter(model, order: int, bins: int):
    """Return a copy of ``model`` (ReferenceEnhancer without a deep filter) with a deep filter of
    ``order`` taps on the lowest ``bins`` bins whose coefficient head is zero (as
    :class:`~cosyedge.train.reference.model.ReferenceEnhancer` initialises it), so the extended model computes
    exactly the same function and training then learns the filter.

    Raises:
        ValueError: ``model`` already has a deep filter.
        ValueError: ``order``/``bins`` out of range (from :class:`~cosyedge.train.reference.model.EnhancerConfig`).
    """
    if model.config.df_order:
        raise ValueError(f"the --init model already has a deep filter (order {model.config.df_order})")
    return _grown_copy(model, ("df_out.", "df_taps."), df_order=order, df_bins=bins)


def add_long_window(model, window: int, bins: int):
    """Return a copy of ``model`` (ReferenceEnhancer without long-window features) with long-window
    features of ``window`` samples on the lowest ``bins`` bins whose 1x1 conv is zero (as
    :class:`~cosyedge.train.reference.model.ReferenceEnhancer` initialises it), so the extended model computes
    exactly the same function; the caller sets their normalisation with
    ``set_feature_stats(x, long_window_only=True)``.

    Raises:
        ValueError: ``model`` already has long-window features.
        ValueError: ``window``/``bins`` out of range (from :class:`~cosyedge.train.reference.model.ReferenceEnhancer`).
    """
    if model.config.lw_window:
        raise ValueError(f"the --init model already has long-window features (window {model.config.lw_window})")
    return _grown_copy(model, ("lw_",), lw_window=window, lw_bins=bins)


def add_pitch_comb(model):
    """Return a copy of ``model`` (ReferenceEnhancer with long-window features, no pitch comb) with the pitch
    comb path (``EnhancerConfig.pitch_comb``): its feature conv is zero and its mix head starts at
    m = 0.0003, so the extended model computes nearly the same function; the caller sets the comb features'
    normalisation with ``set_feature_stats(x, pitch_comb_only=True)``.

    Raises:
        ValueError: ``model`` already has the pitch comb, or has no long-window features.
    """
    if model.config.pitch_comb:
        raise ValueError("the --init model already has the pitch comb")
    return _grown_copy(model, ("pc_",), pitch_comb=True)


def regrid_window(model, win: int):
    """Return a copy of ``model`` (ReferenceEnhancer, no deep filter) whose STFT uses a ``win``-sample analysis
    window (:func:`cosyedge.train.reference.model.stft_bases`: asymmetric when ``win`` > 2 * hop; same one-hop
    delay), with F' = win/2 + 1 bins instead of F.

    The estimator blocks (and long-window branch) are copied; the per-bin convs are resampled to the new
    bins by nearest frequency: new bin k (``k * fs / win`` Hz) takes old bin ``j = round(k * W / win)``
    (``W`` = the old window): the gain head's row and bias are copied, the feature conv's column is divided
    by the number of new bins sharing ``j`` (so a flat spectrum gives the same first-layer activations).
    The function is then close to, not equal to, the old one; the caller measures the new feature
    normalisation with ``set_feature_stats(x, main_only=True)``.

    Raises:
        ValueError: ``model`` has a deep filter, ``win`` equals its window, ``win`` is odd or below 2 * hop, or
            its long feature window is not longer than ``win`` (from ReferenceEnhancer).
    """
    import dataclasses

    import numpy as np
    import torch

    from cosyedge.train.reference.model import ReferenceEnhancer

    old = model.config
    if old.df_order:
        raise ValueError("--add-window: the model has a deep filter (not supported)")
    if win == old.win_samples:
        raise ValueError(f"--add-window {win}: the --init model already uses a {win}-sample window")
    new = ReferenceEnhancer(dataclasses.replace(old, win_samples=win))
    state = {k: v for k, v in model.state_dict().items()
             if not k.startswith(("analysis.", "synthesis.", "inp.", "out.", "feat_"))}
    _, unexpected = new.load_state_dict(state, strict=False)  # the per-bin convs are set below
    if unexpected:
        raise ValueError(f"--add-window: unexpected weights {unexpected}")
    j = np.minimum(np.rint(np.arange(new.config.n_bins) * old.win_samples / win).astype(int), old.n_bins - 1)
    share = np.bincount(j, minlength=old.n_bins)[j].astype(np.float32)
    jt = torch.from_numpy(j)
    with torch.no_grad():
        new.inp.weight.copy_(model.inp.weight[:, jt] / torch.from_numpy(share)[None, :, None])
        new.inp.bias.copy_(model.inp.bias)
        new.out.weight.copy_(model.out.weight[jt])
        new.out.bias.copy_(model.out.bias[jt])
    return new


class WeightAverage:
    """Exponential moving average of a model's trainable parameters (fixed weights and buffers are copied once).

    ``avg = decay * avg + (1 - decay) * current`` after every optimiser step (Polyak averaging; e.g.
    Izmailov et al. 2018, arXiv:1803.05407, for why averaged weights generalise better).

    There is no warm-up: the average starts at the initial weights, which suits fine-tunes from a trained
    checkpoint (``--init``); from scratch, early evaluations still carry most of the random initialisation
    (after ``t`` steps its weight is ``decay ** t``, 0.74 at step 300 with 0.999).

    Args:
        model (torch.nn.Module): the trained model.
        decay (float): in (0, 1); 0.999 averages over about the last 1000 steps.
    """

    def __init__(self, model, decay: float):
        import copy

        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    def update(self, model) -> None:
        """Blend ``model``'s current state into the average (call after each optimiser step).

        Args:
            model (torch.nn.Module): the model being trained, of the same architecture as the average.
        """
        import torch

        with torch.no_grad():
            for avg, cur in zip(self.model.parameters(), model.parameters(), strict=True):
                if cur.requires_grad:  # the fixed STFT bases and feature statistics stay bit-exact
                    avg.mul_(self.decay).add_(cur, alpha=1.0 - self.decay)


def plot_curves(history: dict, path: Path) -> None:
    """Save training loss and validation SI-SNRi curves to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    steps, loss = history["step"], history["loss"]
    ax[0].plot(steps, loss, lw=0.6)
    ax[0].set(xlabel="step", ylabel="loss (neg. thresholded SNR [+ W x spectral] [+ W x STOI], dB)", title="training loss")
    ax[1].plot(history["val_step"], history["val_sisnri"], "o-", label="validation (held-out asterisk)")
    if history.get("test_sisnri"):
        ax[1].plot(history["val_step"], history["test_sisnri"], "s--", label="test (LibriVox x held-out real noises, 5 dB)")
    ax[1].set(xlabel="step", ylabel="SI-SNR improvement (dB)", title="evaluation")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pair_spec(text: str, what: str, example: str) -> tuple[int, int]:
    """Parse ``"A,B"`` into two positive ints or raise argparse.ArgumentTypeError naming ``what``."""
    try:
        a, b = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} (two positive integers, e.g. {example}), got {text!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"need {what.replace(',', ' >= 1 and ')} >= 1, got {text!r}")
    return a, b


def _df_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--df`` / ``--add-df``: ``"K,BINS"`` -> (K, BINS), both positive ints (the upper
    bound of BINS, the model's bin count, is checked by :class:`EnhancerConfig` when the model is built)."""
    return _pair_spec(text, "K,BINS", "3,64")


def _lw_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--lw`` / ``--add-lw``: ``"W,BINS"`` -> (W, BINS), both positive ints (their
    range is checked by :class:`ReferenceEnhancer` when the model is built)."""
    return _pair_spec(text, "W,BINS", "1024,128")


def _gru_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--gru``: ``"H,LAYERS"`` -> (H, LAYERS), both positive ints."""
    return _pair_spec(text, "H,LAYERS", "192,2")


def _snr_range_spec(text: str) -> tuple[float, float]:
    """``LO,HI`` (dB, -20 <= LO < HI <= 40) -> (LO, HI); argparse type of ``--snr-range``."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI in dB, e.g. -5,15, got {text!r}") from None
    if not -20 <= lo < hi <= 40:
        raise argparse.ArgumentTypeError(f"need -20 <= LO < HI <= 40 dB, got {text!r}")
    return lo, hi


def _read_speech_spec(text: str) -> str:
    """argparse type of ``--read-phrases``: one or more comma-separated names of
    :data:`cosyedge.data.versions.READ_PHRASE_CORPORA`, returned unchanged.

    Raises:
        argparse.ArgumentTypeError: an unknown or repeated name (``invalid choice: 'NAME'``).
    """
    from cosyedge.data.versions import READ_PHRASE_CORPORA

    names = text.split(",")
    for name in names:
        if name not in READ_PHRASE_CORPORA or names.count(name) > 1:
            raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (one or more of {', '.join(READ_PHRASE_CORPORA)}, "
                                             f"comma-separated, each once)")
    return text


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
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
