"""Augmentation DSP of the training mixtures: speed perturbation, random EQ, low-band boost, band limit,
room reverb (numpy/scipy).

Moved from ``cosyedge/datasets/mix.py``.
"""

from __future__ import annotations

import numpy as np

from cosyedge.data.corpus import SAMPLE_RATE_HZ
from cosyedge.data.versions import LOW_BOOST_CENTRE_HZ, REVERB_DRR_DB, REVERB_RT60_S
from cosyedge.errors import UsageError

def speed_perturb(x: np.ndarray, factors: np.ndarray, n_samples: int) -> np.ndarray:
    """Play each row of ``x`` at its own speed (resampling by linear interpolation; no anti-alias filter).

    Args:
        x (np.ndarray): float32 (B, L), L >= ceil(n_samples * max(factors)) + 1 samples.
        factors (np.ndarray): (B,) speed factors > 0 (2 = twice as fast: frequencies doubled).
        n_samples (int): output length T.
    Returns:
        np.ndarray: float32 (B, T), row b = ``x[b]`` read at ``t * factors[b]``, t = 0..T-1.
    Raises:
        ValueError: a row would read past the end of ``x``.
    """
    factors = np.asarray(factors, dtype=np.float64)
    pos = np.arange(n_samples)[None, :] * factors[:, None]
    i0 = np.floor(pos).astype(np.int64)
    if i0.size and int(i0.max()) + 1 >= x.shape[1]:
        raise ValueError(f"speed_perturb: {x.shape[1]} input samples are too few for {n_samples} output samples "
                         f"at speed {factors.max():.3f}")
    frac = (pos - i0).astype(np.float32)
    rows = np.arange(x.shape[0])[:, None]
    return x[rows, i0] * (1 - frac) + x[rows, i0 + 1] * frac


def random_eq(x: np.ndarray, rng: np.random.Generator, p: float, max_db: float,
              sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Random zero-phase equalisation of each row with probability ``p`` (data augmentation).

    The gain curve over log-frequency is a tilt (uniform +-``max_db`` / 8 dB per octave around 1 kHz)
    plus two Gaussian bumps (centres 60 Hz-7 kHz log-uniform, widths 0.3-1.5 octaves, gains uniform
    +-``max_db``), clipped to +-1.5 ``max_db``, applied in the DFT domain of the whole row (the spectral
    augmentation of e.g. the DNS challenge recipes; a smooth magnitude curve, so the circular
    convolution it implies is short).

    Args:
        x (np.ndarray): float32 (B, T).
        rng (np.random.Generator): random source (the result is a pure function of its state).
        p (float): probability per row in [0, 1].
        max_db (float): bump gain range in dB.
        sample_rate_hz (int): sample rate, Hz.
    Returns:
        np.ndarray: float32 (B, T), a new array (rows not drawn are copied unchanged).
    """
    def gain_db(k: int, lf: np.ndarray) -> np.ndarray:
        tilt = rng.uniform(-max_db / 8, max_db / 8, (k, 1))
        centre = rng.uniform(np.log2(60.0), np.log2(7000.0), (k, 2, 1))
        width = rng.uniform(0.3, 1.5, (k, 2, 1))
        gain = rng.uniform(-max_db, max_db, (k, 2, 1))
        g_db = tilt * (lf - np.log2(1000.0)) + (gain * np.exp(-0.5 * ((lf[:, None] - centre) / width) ** 2)).sum(1)
        return np.clip(g_db, -1.5 * max_db, 1.5 * max_db)

    return _filter_random_rows(x, rng, p, gain_db, sample_rate_hz)


def _filter_random_rows(x: np.ndarray, rng: np.random.Generator, p: float, gain_db, sample_rate_hz: int) -> np.ndarray:
    """Zero-phase filter each row of ``x`` (B, T) float32 with probability ``p``, in the DFT domain of the
    whole row, by ``gain_db(k, lf)``: a (k, T // 2 + 1) dB curve for the k drawn rows over ``lf`` (1, T // 2 + 1),
    log2 of the bin frequency in Hz (floored at 20 Hz). Shared by :func:`random_eq` and :func:`low_band_boost`;
    the rows are drawn from ``rng`` before ``gain_db`` draws its parameters. Returns a new float32 (B, T) array."""
    out = np.array(x, dtype=np.float32, copy=True)
    sel = np.flatnonzero(rng.random(x.shape[0]) < p)
    if not sel.size:
        return out
    lf = np.log2(np.maximum(np.fft.rfftfreq(x.shape[1], 1.0 / sample_rate_hz), 20.0))[None, :]
    g = 10 ** (gain_db(sel.size, lf) / 20)
    out[sel] = np.fft.irfft(np.fft.rfft(out[sel], axis=1) * g, n=x.shape[1], axis=1).astype(np.float32)
    return out


def low_band_boost(x: np.ndarray, rng: np.random.Generator, p: float, max_db: float = 10.0,
                   sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Boost the fundamental-frequency band of each row with probability ``p`` (speech augmentation).

    A zero-phase Gaussian bump over log-frequency: centre log-uniform in :data:`LOW_BOOST_CENTRE_HZ`, width
    0.4-0.8 octave (standard deviation), gain uniform in [0, ``max_db``] dB, applied in the DFT domain of
    the whole row as :func:`random_eq`. Why: real male voices carry much of their energy at the fundamental
    (80-150 Hz). In the long-term spectrum (``scripts/eval/diagnose_bands.py --speech-bands``) the 60-100 Hz band
    holds -25..-38 dB of the total energy in the asterisk prompts, -13..-17 dB in their male conversions
    (data version 3) and -7..-12 dB in the test set's LibriVox reader, so a model trained on the prompts
    meets strong low-frequency speech energy mostly in noise. (Designed after comparing those long-term
    spectra, including the test reader's; not tuned on test scores.)

    Args:
        x (np.ndarray): float32 (B, T) speech.
        rng (np.random.Generator): random source (the result is a pure function of its state).
        p (float): probability per row in [0, 1].
        max_db (float): largest boost, dB (>= 0).
        sample_rate_hz (int): sample rate, Hz.
    Returns:
        np.ndarray: float32 (B, T), a new array (rows not drawn are copied unchanged).
    Raises:
        UsageError: ``max_db`` negative.
    """
    if not max_db >= 0:
        raise UsageError(f"low_band_boost: max_db must be >= 0 dB, got {max_db}")

    def gain_db(k: int, lf: np.ndarray) -> np.ndarray:
        lo, hi = LOW_BOOST_CENTRE_HZ
        centre = rng.uniform(np.log2(lo), np.log2(hi), (k, 1))
        width = rng.uniform(0.4, 0.8, (k, 1))
        gain = rng.uniform(0.0, max_db, (k, 1))
        return gain * np.exp(-0.5 * ((lf - centre) / width) ** 2)

    return _filter_random_rows(x, rng, p, gain_db, sample_rate_hz)


def band_limit(x: np.ndarray, cutoff_hz: float = 4000.0, sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Zero-phase low-pass of each row: every DFT bin above ``cutoff_hz`` set to zero.

    What an 8 kHz recording (telephone, narrowband codecs) holds once resampled to 16 kHz: nothing above 4 kHz.
    Used on whole training mixtures (speech and noise alike, so the clean target is band-limited too):
    :meth:`TrainingData.batch` with ``mixture_lowpass``.

    Args:
        x (np.ndarray): float32 (B, T) rows.
        cutoff_hz (float): highest frequency kept, Hz, in (0, sample_rate_hz / 2).
        sample_rate_hz (int): sample rate, Hz.
    Returns:
        np.ndarray: float32 (B, T), a new array.
    Raises:
        UsageError: ``cutoff_hz`` outside (0, sample_rate_hz / 2).
    """
    if not 0.0 < cutoff_hz < sample_rate_hz / 2:
        raise UsageError(f"band_limit: cutoff_hz must be in (0, {sample_rate_hz / 2:g}) Hz, got {cutoff_hz}")
    spec = np.fft.rfft(np.asarray(x, dtype=np.float32), axis=-1)
    spec[..., np.fft.rfftfreq(np.shape(x)[-1], 1.0 / sample_rate_hz) > cutoff_hz] = 0.0
    return np.fft.irfft(spec, n=np.shape(x)[-1], axis=-1).astype(np.float32)


def room_reverb(x: np.ndarray, rng: np.random.Generator, p: float,
                sample_rate_hz: int = SAMPLE_RATE_HZ) -> np.ndarray:
    """Add synthetic room reverberation to each row with probability ``p`` (speech augmentation).

    Each drawn row is convolved with a synthetic room impulse response: a unit direct path at lag 0 (so the
    reverberant speech stays aligned with the dry one) plus a diffuse tail of Gaussian noise from a 2-10 ms
    pre-delay on, decaying by 60 dB over RT60 (uniform in :data:`REVERB_RT60_S`), low-passed by a first-order
    Butterworth filter (-3 dB corner uniform in 2-6 kHz: walls absorb highs), scaled to a direct-to-reverberant
    energy ratio uniform in
    :data:`REVERB_DRR_DB`; the row is then rescaled to its dry RMS. This is the exponentially decaying
    noise model of late reverberation (Polack 1988; e.g. Lehmann & Johansson, JASA 124(1), 2008). Why: the
    training voices are dry studio prompts and synthetic voices, while real read speech (the LibriVox test
    readings) is recorded in rooms; the clean target is the reverberant speech (the model denoises, it does
    not dereverberate).

    Args:
        x (np.ndarray): float32 (B, T) speech.
        rng (np.random.Generator): random source (the result is a pure function of its state).
        p (float): probability per row in [0, 1].
        sample_rate_hz (int): sample rate, Hz.
    Returns:
        np.ndarray: float32 (B, T), a new array (rows not drawn are copied unchanged), the same length
        (the tail past T is cut).
    Raises:
        UsageError: ``x`` not 2-D, or ``p`` outside [0, 1].
    """
    from scipy.signal import butter, fftconvolve, lfilter  # scipy: already needed by the training noise (noise.py)

    if np.ndim(x) != 2:
        raise UsageError(f"room_reverb: x must be (B, T), got shape {np.shape(x)}")
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"room_reverb: p must be a probability in [0, 1], got {p}")
    out = np.array(x, dtype=np.float32, copy=True)
    sel = np.flatnonzero(rng.random(x.shape[0]) < p)
    n_t = x.shape[1]
    for i in sel:
        rt60 = rng.uniform(*REVERB_RT60_S)
        drr_db = rng.uniform(*REVERB_DRR_DB)
        pre = int(rng.uniform(0.002, 0.010) * sample_rate_hz)
        n_h = min(int(rt60 * sample_rate_hz), n_t)
        t = np.arange(n_h) / sample_rate_hz
        tail = rng.standard_normal(n_h) * np.exp(-3.0 * np.log(10.0) * t / rt60)  # -60 dB at t = RT60
        b, a = butter(1, rng.uniform(2000.0, 6000.0), fs=sample_rate_hz)  # first-order low-pass
        tail = lfilter(b, a, tail)
        h = np.zeros(pre + n_h)
        h[pre:] = tail * np.sqrt(10 ** (-drr_db / 10) / max(float(np.sum(tail ** 2)), 1e-12))
        h[0] = 1.0
        dry = x[i].astype(np.float64)
        y = fftconvolve(dry, h)[:n_t]
        wet_rms = float(np.sqrt(np.mean(y ** 2)))
        out[i] = (y * (float(np.sqrt(np.mean(dry ** 2))) / wet_rms if wet_rms > 0 else 1.0)).astype(np.float32)
    return out

