"""Training losses of the reference enhancer: thresholded SNR, compressed spectral, STOI, DNSMOS, and their sum
per batch (:func:`batch_loss`). PyTorch (imported inside each function).

Moved from ``scripts/training/train_reference.py``.
"""

from __future__ import annotations

import functools
import math

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


