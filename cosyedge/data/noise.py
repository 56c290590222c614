"""Training and test noises, 16 kHz mono float32.

TRAINING noise is a deterministic *noise bank*: one float32 array of categories, each a few minutes long
and normalised to unit RMS per 4 s block, from which :class:`~cosyedge.data.training_data.TrainingData` draws
random segments. Categories (:data:`SYNTH_KINDS` plus real sounds):

- ``white``; ``pink`` (1/f); ``brown`` (1/f^2); ``colored`` (1/f^a, a uniform in [0, 2.5] per block);
- ``hum``: 50 or 60 Hz mains with 2..15 random harmonics, slow frequency drift, a weak noise floor;
- ``babble``: 3..8 talkers summed from *training* speech (never the validation/test speech);
- ``clicks``: sparse impulses (crackle/clicks) of random width and amplitude over a faint noise floor;
- ``band``: white noise through a random 4th-order Butterworth band-pass (50 Hz..7.9 kHz edges);
- ``tonal``: a few slowly gliding sine tones (whine, beeps, fan tones) over coloured noise;
- ``machine``: synthetic rotating machinery (motors, engines, fans, compressors): a harmonic series on a
  15..120 Hz fundamental whose speed wanders (run-up, idle, gear changes), pulse-like amplitude
  modulation, over coloured broadband noise;
- ``real-events``: the real sound effects of ``sound-icons`` and ``sound-theme-freedesktop``
  (all of them), back to back with random gaps of 0..0.3 s;
- ``real-env``: real environmental recordings: ``openttd-opensfx`` (71: wind, applause, helicopter,
  machinery, saws, vehicles, animals, horns...; freesound.org, CC0/CC-BY/CC-BY-SA 3.0; one quarter held
  out for testing), ``lincity-ng-data`` (142 city, industry, farm, water, fire, traffic ambiences;
  GPL-2+) and ``extremetuxracer-data`` (slides and impacts; GPL-2+);
- ``music``: 5 music-on-hold tracks of ``asterisk-moh-opsound-g722`` (18 min, CC-BY-SA 3.0) and the
  ``lmms-common`` samples (beats, bass loops, instruments; GPL-2+).

HELD-OUT TEST noise (never in training): :func:`heldout_noise` returns a real recorded noise from a Debian
package (see :data:`HELDOUT_NOISE`). Mixtures of categories are made at batch time by
:mod:`cosyedge.data.training_data`.
"""

from __future__ import annotations

import hashlib

import numpy as np

from cosyedge.data.corpus import SAMPLE_RATE_HZ
from cosyedge.data.registry import load_corpus
from cosyedge.data.sources import data_dir, decode_audio, fetch_package
from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.log import LOG

SYNTH_KINDS = ("white", "pink", "brown", "colored", "hum", "babble", "clicks", "band", "tonal", "machine")
"""Synthetic noise categories of the bank."""

BLOCK_SAMPLES = 4 * SAMPLE_RATE_HZ
"""Noise is generated and normalised in blocks of 4 s (64000 samples)."""


def _unit_rms(x: np.ndarray, axis=-1) -> np.ndarray:
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=axis, keepdims=True) + 1e-12)


def colored_noise(rng: np.random.Generator, n_blocks: int, exponent, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return 1/f^a noise blocks made by shaping white Gaussian noise in the frequency domain.

    Args:
        rng (np.random.Generator): Random source.
        n_blocks (int): Number of blocks B.
        exponent (float | np.ndarray): Power-spectrum exponent a (0 white, 1 pink, 2 brown), scalar or
            shape (B,).
        n_samples (int): Block length in samples.
    Returns:
        np.ndarray: float32, shape (B, n_samples), unit RMS per block.
    """
    spec = np.fft.rfft(rng.standard_normal((n_blocks, n_samples)), axis=-1)
    f = np.fft.rfftfreq(n_samples, 1.0 / SAMPLE_RATE_HZ)
    f[0] = f[1]
    a = np.broadcast_to(np.asarray(exponent, np.float64), (n_blocks,))[:, None]
    spec *= (f[None, :] / 1000.0) ** (-a / 2.0)  # amplitude ~ f^(-a/2) -> power ~ f^-a
    spec[:, 0] = 0.0
    x = np.fft.irfft(spec, n=n_samples, axis=-1)
    return _unit_rms(x).astype(np.float32)


def hum_noise(rng: np.random.Generator, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return mains hum blocks: 50/60 Hz and random harmonics, drifting +-0.5 %, plus a -30 dB floor.

    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    t = np.arange(n_samples) / SAMPLE_RATE_HZ
    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        f0 = rng.choice([50.0, 60.0]) * (1 + rng.uniform(-0.005, 0.005))
        drift = 1 + 0.002 * np.sin(2 * np.pi * rng.uniform(0.05, 0.5) * t + rng.uniform(0, 2 * np.pi))
        phase = 2 * np.pi * f0 * np.cumsum(drift) / SAMPLE_RATE_HZ
        n_h = int(rng.integers(2, 16))
        tilt = rng.uniform(0.0, 1.5)
        x = np.zeros(n_samples)
        for h in range(1, n_h + 1):
            if f0 * h > 7800:
                break
            amp = h ** (-tilt) * rng.uniform(0.2, 1.0) * (rng.uniform(1, 3) if h % 2 == 1 else 1)
            x += amp * np.sin(h * phase + rng.uniform(0, 2 * np.pi))
        if rng.random() < 0.3:  # buzz: clipped hum
            x = np.clip(x, -0.6 * np.abs(x).max(), 0.6 * np.abs(x).max())
        x = _unit_rms(x) + 0.03 * rng.standard_normal(n_samples)
        out[b] = _unit_rms(x)
    return out


def click_noise(rng: np.random.Generator, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return click/crackle blocks: Poisson impulses (1..200 per s), decaying, over a faint floor.

    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        rate = np.exp(rng.uniform(np.log(1.0), np.log(200.0)))
        k = max(1, rng.poisson(rate * n_samples / SAMPLE_RATE_HZ))
        x = np.zeros(n_samples)
        pos = rng.integers(0, n_samples, k)
        np.add.at(x, pos, rng.standard_normal(k) * rng.pareto(2.0, k))
        decay = int(rng.integers(2, 80))
        kern = np.exp(-np.arange(decay) / max(1.0, decay / 4)) * rng.choice([-1, 1], decay) ** int(rng.integers(0, 2))
        x = np.convolve(x, kern, mode="full")[:n_samples]
        x = _unit_rms(x) + rng.uniform(0.0, 0.1) * colored_noise(rng, 1, rng.uniform(0, 2), n_samples)[0]
        out[b] = _unit_rms(x)
    return out


def band_noise(rng: np.random.Generator, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return white noise through random Butterworth band-passes (log-uniform edges, 50..7900 Hz).

    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    from scipy.signal import butter, sosfilt

    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        lo = np.exp(rng.uniform(np.log(50), np.log(4000)))
        hi = min(7900.0, lo * np.exp(rng.uniform(np.log(1.3), np.log(20))))
        sos = butter(int(rng.integers(2, 5)), [lo, hi], btype="bandpass", fs=SAMPLE_RATE_HZ, output="sos")
        x = sosfilt(sos, rng.standard_normal(n_samples + 2000))[2000:]
        out[b] = _unit_rms(x)
    return out


def tonal_noise(rng: np.random.Generator, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return 1..4 slowly gliding sine tones (100..6000 Hz), some gated, over weak coloured noise.

    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    t = np.arange(n_samples) / SAMPLE_RATE_HZ
    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        x = np.zeros(n_samples)
        for _ in range(int(rng.integers(1, 5))):
            f = np.exp(rng.uniform(np.log(100), np.log(6000)))
            glide = f * (1 + rng.uniform(-0.1, 0.1) * np.sin(2 * np.pi * rng.uniform(0.02, 1.0) * t))
            s = np.sin(2 * np.pi * np.cumsum(glide) / SAMPLE_RATE_HZ) * rng.uniform(0.2, 1)
            if rng.random() < 0.4:  # beeping
                period = rng.uniform(0.1, 1.0)
                s *= (t % period) < period * rng.uniform(0.2, 0.8)
            x += s
        x = _unit_rms(x) + rng.uniform(0.01, 0.3) * colored_noise(rng, 1, rng.uniform(0, 2), n_samples)[0]
        out[b] = _unit_rms(x)
    return out


def machine_noise(rng: np.random.Generator, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return synthetic rotating-machine noise blocks (motor/engine/fan/compressor-like).

    Fundamental f0 drawn log-uniform in [15, 120] Hz; its speed follows a smoothed random walk of up to
    +-60 % (run-ups, idle, gear changes); 5..40 harmonics with amplitude ~ k^-a (a in [0.3, 1.5]) and
    random jitter; 30 % of blocks add pulse-like amplitude modulation at f0 (firing strokes); plus
    coloured broadband noise at -15..0 dB relative to the harmonics.

    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    t = np.arange(n_samples) / SAMPLE_RATE_HZ
    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        f0 = np.exp(rng.uniform(np.log(15), np.log(120)))
        n_knots = int(rng.integers(2, 12))
        knots = np.exp(np.cumsum(rng.normal(0, rng.uniform(0.05, 0.35), n_knots)))
        speed = np.interp(t, np.linspace(0, t[-1], n_knots), knots / knots[0])
        speed = np.clip(speed, 0.4, 1.6)
        phase = 2 * np.pi * np.cumsum(f0 * speed) / SAMPLE_RATE_HZ
        x = np.zeros(n_samples)
        a = rng.uniform(0.3, 1.5)
        for k in range(1, int(rng.integers(5, 41)) + 1):
            if k * f0 * 1.6 >= SAMPLE_RATE_HZ / 2:
                break
            x += k ** -a * rng.uniform(0.3, 1.0) * np.sin(k * phase + rng.uniform(0, 2 * np.pi))
        if rng.random() < 0.3:  # firing pulses
            x *= 1 + rng.uniform(0.2, 0.8) * np.maximum(0, np.sin(phase)) ** 4
        x = _unit_rms(x) + 10 ** (rng.uniform(-15, 0) / 20) * colored_noise(rng, 1, rng.uniform(0.5, 2.0), n_samples)[0]
        out[b] = _unit_rms(x)
    return out


def babble_noise(rng: np.random.Generator, speech: np.ndarray, n_blocks: int, n_samples: int = BLOCK_SAMPLES) -> np.ndarray:
    """Return babble blocks: sums of 3..8 random segments of ``speech`` at random levels (+-6 dB).

    Args:
        rng (np.random.Generator): Random source.
        speech (np.ndarray): float32, shape (samples,), training speech pool (must not contain
            validation or test speech).
        n_blocks (int): Number of blocks.
        n_samples (int): Block length in samples.
    Returns:
        np.ndarray: float32, shape (n_blocks, n_samples), unit RMS per block.
    """
    out = np.empty((n_blocks, n_samples), np.float32)
    for b in range(n_blocks):
        k = int(rng.integers(3, 9))
        starts = rng.integers(0, speech.size - n_samples, k)
        segs = speech[starts[:, None] + np.arange(n_samples)[None, :]]
        segs = _unit_rms(segs) * (10 ** (rng.uniform(-6, 6, k) / 20))[:, None]
        out[b] = _unit_rms(segs.sum(0))
    return out


def real_sounds(rng: np.random.Generator, corpora: tuple[str, ...], cache_dir=None, passes: int = 4,
                max_gap_s: float = 0.3) -> np.ndarray:
    """Return real training sounds back to back (random gaps of 0..``max_gap_s``), each at unit RMS
    times a random -6..+3 dB level, in ``passes`` shuffled passes (so the pool is long enough).

    Args:
        rng (np.random.Generator): Random source.
        corpora (tuple[str, ...]): Corpus names (see :data:`cosyedge.data.registry.CORPORA`); missing
            ones are skipped with a warning.
        cache_dir (str | PathLike | None): Data cache.
        passes (int): Number of shuffled passes over all sounds.
        max_gap_s (float): Maximum silence between sounds, seconds.
    Returns:
        np.ndarray: float32, shape (samples,), 16 kHz (empty if nothing is available).
    """
    pieces = []
    for name in corpora:
        try:
            c = load_corpus(name, cache_dir)
        except (ArtifactError, DependencyError) as e:
            LOG.warning("real training noise %s unavailable: %s", name, e)
            continue
        if c.source == HELDOUT_NOISE["package"]:
            raise UsageError(f"{c.source} holds the held-out test noise; it must never be used for training")
        for i in range(len(c)):
            if is_heldout_sound(name, c.names[i]):
                continue
            u = c.utterance(i)
            if u.size >= SAMPLE_RATE_HZ // 20 and np.any(u):
                pieces.append(_unit_rms(u).astype(np.float32))
    if not pieces:
        return np.zeros(0, np.float32)
    out = []
    for _ in range(passes):
        for i in rng.permutation(len(pieces)):
            out.append(pieces[i] * np.float32(10 ** (rng.uniform(-6, 3) / 20)))
            out.append(np.zeros(int(rng.uniform(0, max_gap_s) * SAMPLE_RATE_HZ), np.float32))
    return np.concatenate(out)


REAL_NOISE_CORPORA = {
    "real-events": ("sound-icons", "freedesktop"),
    "real-env": ("opensfx", "lincity-sfx", "etr-sfx"),
    "music": ("moh", "lmms-samples"),
}
"""Real TRAINING noise categories and their corpora of data version 1 (all files of each, except the
held-out ``opensfx`` recordings, see :func:`is_heldout_sound`)."""

REAL_NOISE_CORPORA_V2 = {
    **REAL_NOISE_CORPORA,
    "music": REAL_NOISE_CORPORA["music"] + ("stk-music",),
    "real-games": ("scorched3d-sfx", "torcs-sfx", "stk-sfx", "hedgewars-sfx"),
}
"""Data version 2 adds about 30 min of real game effects and ambiences (``real-games``: rain, thunder,
waves, birds, jets, car engines, crowds...) and 59 min of SuperTuxKart music."""

HELDOUT_SOUND_CORPUS = "opensfx"
HELDOUT_SOUND_MODULUS = 4
"""One in :data:`HELDOUT_SOUND_MODULUS` recordings of :data:`HELDOUT_SOUND_CORPUS`, chosen by a hash of
its name before any model was scored on it, is a held-out TEST noise and never used for training."""


def is_heldout_sound(corpus: str, name: str) -> bool:
    """Return True when recording ``name`` (str) of ``corpus`` (str) is a held-out test noise.

    The rule is fixed: ``sha1(name) % 4 == 0`` for the ``opensfx`` corpus (about 25 % of its real
    environmental recordings: vehicles, machinery, wind, animals...).
    """
    if corpus != HELDOUT_SOUND_CORPUS:
        return False
    return int(hashlib.sha1(name.encode()).hexdigest()[:12], 16) % HELDOUT_SOUND_MODULUS == 0


def build_noise_bank(speech: np.ndarray, seed: int = 0, minutes_per_kind: float = 2.0, cache_dir=None,
                     real_corpora: dict | None = None) -> tuple[np.ndarray, dict]:
    """Build the deterministic training noise bank.

    Args:
        real_corpora (dict | None): ``{category: corpora}`` of real sounds; defaults to
            :data:`REAL_NOISE_CORPORA` (data version 1).
        speech (np.ndarray): float32, shape (samples,), TRAINING speech only (for babble).
        seed (int): Random seed; the same seed and speech give the same bank.
        minutes_per_kind (float): Length of each synthetic category in minutes.
        cache_dir (str | PathLike | None): Data cache (for the real sound effects).
    Returns:
        tuple[np.ndarray, dict]: bank float32 shape (samples,), and ranges ``{kind: (start, stop)}`` in
        samples.
    """
    rng = np.random.default_rng(seed)
    n_blocks = max(1, int(round(minutes_per_kind * 60 * SAMPLE_RATE_HZ / BLOCK_SAMPLES)))
    parts: dict[str, np.ndarray] = {}
    parts["white"] = rng.standard_normal((n_blocks, BLOCK_SAMPLES)).astype(np.float32)
    parts["pink"] = colored_noise(rng, n_blocks, 1.0)
    parts["brown"] = colored_noise(rng, n_blocks, 2.0)
    parts["colored"] = colored_noise(rng, n_blocks, rng.uniform(0.0, 2.5, n_blocks))
    parts["hum"] = hum_noise(rng, n_blocks)
    parts["babble"] = babble_noise(rng, speech, n_blocks)
    parts["clicks"] = click_noise(rng, n_blocks)
    parts["band"] = band_noise(rng, n_blocks)
    parts["tonal"] = tonal_noise(rng, n_blocks)
    parts["machine"] = machine_noise(rng, n_blocks)
    for kind, corpora in (REAL_NOISE_CORPORA if real_corpora is None else real_corpora).items():
        ev = real_sounds(rng, corpora, cache_dir, passes={"music": 1, "real-games": 2}.get(kind, 4),
                         max_gap_s=0.0 if kind == "music" else 0.3)
        if ev.size > BLOCK_SAMPLES:
            parts[kind] = ev
    # one float32 array filled part by part, each part freed once copied: memory peaks at the parts plus the
    # bank's pages filled so far, not at three copies (parts, concatenation, cast)
    ranges, pos = {}, 0
    bank = np.empty(sum(v.size for v in parts.values()), np.float32)
    for k in list(parts):
        v = parts.pop(k).reshape(-1)
        bank[pos:pos + v.size] = v
        ranges[k] = (pos, pos + v.size)
        pos += v.size
        del v
    return bank, ranges


# -------------------------------------------------------------------------------- held-out test noise
HELDOUT_NOISE: dict = {
    "name": "camaro-engine",
    "package": "stormbaancoureur-data",
    "files": ["usr/share/games/stormbaancoureur/sounds/camaro_s16_le.wav"],
    "description": "real recording of a Chevrolet Camaro V8 engine revving with gear changes (stereo 44.1 kHz,"
                   " 15.6 s; the last 0.55 s fade-out is dropped), from the game Stormbaan Coureur",
    "license": "GPL-3 (Copyright (C) 2006-2008 Bram Stolk; /usr/share/doc/stormbaancoureur-data/copyright)",
    "stop_s": 15.0,
}
"""The held-out REAL test noise: never in any training category (the package is used nowhere else)."""


def heldout_noise(cache_dir=None) -> tuple[np.ndarray, dict]:
    """Return the held-out REAL test noise (never used for training) and its description.

    Returns:
        tuple[np.ndarray, dict]: noise float32 shape (samples,), 16 kHz, unit RMS; and
        ``{"name", "package", "files", "description", "license", "seconds"}``.
    Raises:
        DependencyError: apt-get/dpkg missing.
        ArtifactError: the package cannot be fetched or decoded.
    """
    info = dict(HELDOUT_NOISE)
    cache = data_dir(cache_dir) / "corpora" / f"heldout-{info['name']}-{info['stop_s']:g}s.npy"
    if cache.exists():
        x = np.load(cache)
    else:
        root = fetch_package(info["package"], cache_dir)
        xs = [decode_audio(root / f) for f in info["files"]]
        xs = [_unit_rms(x[: int(info["stop_s"] * SAMPLE_RATE_HZ)]) for x in xs]
        x = np.concatenate(xs).astype(np.float32)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, x)
    info["seconds"] = x.size / SAMPLE_RATE_HZ
    return x, info


def heldout_sounds(cache_dir=None) -> tuple[np.ndarray, dict]:
    """Return the held-out ``opensfx`` recordings (see :func:`is_heldout_sound`) back to back, each at
    unit RMS, in name order, and a description.

    Returns:
        tuple[np.ndarray, dict]: noise float32 shape (samples,), 16 kHz; ``{"name", "package", "files",
        "license", "seconds"}``.
    Raises:
        ArtifactError, DependencyError: the corpus cannot be fetched or decoded.
    """
    c = load_corpus(HELDOUT_SOUND_CORPUS, cache_dir)
    idx = sorted((c.names[i], i) for i in range(len(c)) if is_heldout_sound(HELDOUT_SOUND_CORPUS, c.names[i]))
    parts = [_unit_rms(c.utterance(i)).astype(np.float32) for _, i in idx if np.any(c.utterance(i))]
    x = np.concatenate(parts).astype(np.float32)
    info = {"name": "opensfx-heldout", "package": "openttd-opensfx", "files": [n for n, _ in idx],
            "license": "CC0 / CC-BY 3.0 / CC-BY-SA 3.0 (freesound.org; /usr/share/doc/openttd-opensfx/copyright)",
            "seconds": x.size / SAMPLE_RATE_HZ}
    return x, info


def heldout_noises(cache_dir=None) -> dict[str, tuple[np.ndarray, dict]]:
    """Return every held-out real test noise by name: ``camaro-engine`` (:func:`heldout_noise`) and
    ``opensfx-heldout`` (:func:`heldout_sounds`). Arrays float32 (samples,), 16 kHz."""
    out = {}
    x, info = heldout_noise(cache_dir)
    out[info["name"]] = (x, info)
    x, info = heldout_sounds(cache_dir)
    out[info["name"]] = (x, info)
    return out
