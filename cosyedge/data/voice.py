"""Voice conversion for training-data augmentation: female prompt voices -> male-range voices, and one real
male speaker -> many (re-voicing).

Why: the real connected speech in the training data (the asterisk prompt packs) is almost all female
(median f0 180-225 Hz per pack), while read male speech (f0 80-130 Hz) is what users and the LibriVox
test readings have. Measured on the bundled model (5 dB SNR, held-out real noises): 4.8 dB SI-SNRi on
held-out asterisk prompts but 1.9 dB on male LibriVox readings, and 4.6 dB on those readings with the
training noises: low-pitched speech in low-frequency real noise is the weak spot.

The conversion is Praat's "Change gender" (PSOLA pitch manipulation plus a formant shift by resampling;
Boersma & Weenink, Praat, https://www.fon.hum.uva.nl/praat/manual/Sound__Change_gender___.html), run
through the ``praat-parselmouth`` bindings (Jadoul et al. 2018, doi:10.1016/j.wocn.2018.07.001). Duration
is kept, so utterance boundaries and levels stay those of the source prompt.

Only TRAINING utterances of a source corpus are converted: its held-out ``"val"`` prompts are skipped,
so the validation set never hears a converted copy of itself.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from cosyedge.errors import ArtifactError, DependencyError, UsageError

SAMPLE_RATE_HZ = 16000

FORMANT_RATIO_RANGE = (0.80, 0.90)
"""Formant shift ratio drawn per utterance (< 1 lowers formants: a longer vocal tract)."""

PITCH_MEDIAN_RANGE_HZ = (85.0, 135.0)
"""New median f0 drawn per utterance, Hz (adult male range)."""

PITCH_RANGE_FACTOR_RANGE = (0.8, 1.2)
"""Intonation range scale drawn per utterance (1 = keep the source's pitch excursions)."""


class VoiceRanges(NamedTuple):
    """Ranges the per-utterance conversion parameters are drawn from (uniformly, by a hash of the name).

    Attributes:
        formant_ratio (tuple[float, float]): formant shift ratio (< 1 lowers formants: a longer vocal tract).
        pitch_median_hz (tuple[float, float]): new median f0, Hz.
        pitch_range_factor (tuple[float, float]): scale of the pitch excursions around the median.
    """

    formant_ratio: tuple[float, float]
    pitch_median_hz: tuple[float, float]
    pitch_range_factor: tuple[float, float]


MALE_RANGES = VoiceRanges(FORMANT_RATIO_RANGE, PITCH_MEDIAN_RANGE_HZ, PITCH_RANGE_FACTOR_RANGE)
"""Female prompt voices -> male-range voices (data version 3's ``asterisk-*-male`` corpora)."""

REVOICE_RANGES = VoiceRanges((0.90, 1.05), (75.0, 125.0), (0.8, 1.2))
"""One real male speaker -> other male voices (``festvox-ru-voices``): festvox-ru's speaker (median f0 about
115-150 Hz) moved over the low male range, where real readers such as the LibriVox test reader (80-100 Hz) sit
and where the model is weakest, and to slightly longer and shorter vocal tracts. Shifts this small keep PSOLA
resynthesis close to natural speech."""


def _parselmouth():
    try:
        import parselmouth
        from parselmouth.praat import call
    except ImportError as e:
        raise DependencyError("voice conversion needs praat-parselmouth: pip install 'cosyedge[data]'") from e
    return parselmouth, call


def change_gender(x: np.ndarray, formant_ratio: float, pitch_median_hz: float, pitch_range_factor: float = 1.0,
                  sample_rate_hz: int = SAMPLE_RATE_HZ, seed: int = 0) -> np.ndarray:
    """Convert one utterance with Praat's "Change gender" (PSOLA), duration unchanged.

    Praat's resynthesis places pseudo-random pulses in unvoiced stretches, so the result depends on Praat's
    random generator: it is seeded with ``seed`` first (the same input and seed give the same samples),
    then set back to unpredictable seeding.

    Args:
        x (np.ndarray): float32/float64, shape (T,), mono speech at ``sample_rate_hz``, [-1, 1].
        formant_ratio (float): Formant shift ratio, e.g. 0.85 (female -> male), 1.0 = unchanged.
        pitch_median_hz (float): New median f0 in Hz (0 = keep the source's).
        pitch_range_factor (float): Scale of the pitch excursions around the median.
        sample_rate_hz (int): Sample rate of ``x`` and of the result.
        seed (int): Seed of Praat's random generator for this conversion (>= 0).
    Returns:
        np.ndarray: float32, shape (T,), peak <= 0.99 (scaled down only if the conversion overshoots;
        all zeros if Praat returned non-finite samples).
    Raises:
        DependencyError: praat-parselmouth is not installed.
        UsageError: ``x`` is not a non-empty 1-D float array of finite samples, or ``sample_rate_hz`` <= 0.
        ArtifactError: Praat failed on this utterance (e.g. too short to analyse pitch).
    """
    x = np.asarray(x)
    if x.ndim != 1 or x.size == 0:
        raise UsageError(f"change_gender needs mono samples, shape (T,) with T > 0; got shape {x.shape}")
    if x.dtype.kind != "f":
        raise UsageError(f"change_gender needs float samples in [-1, 1]; got {x.dtype} (convert PCM first)")
    if not np.isfinite(x).all():
        raise UsageError("change_gender: the audio holds NaN or Inf samples")
    if not sample_rate_hz or sample_rate_hz <= 0:
        raise UsageError(f"change_gender: sample rate must be > 0 Hz, got {sample_rate_hz}")
    parselmouth, call = _parselmouth()
    s = parselmouth.Sound(x.astype(np.float64), sampling_frequency=float(sample_rate_hz))
    try:
        parselmouth.praat.run(f"random_initializeWithSeedUnsafelyButPredictably ({int(seed)})\n")
        # arguments: pitch floor, pitch ceiling (analysis, Hz), formant shift ratio, new pitch median,
        # pitch range factor, duration factor
        y = call(s, "Change gender", 75.0, 600.0, float(formant_ratio), float(pitch_median_hz),
                 float(pitch_range_factor), 1.0).values[0]
    except parselmouth.PraatError as e:
        raise ArtifactError(f"Praat 'Change gender' failed: {str(e).strip().splitlines()[0]}") from e
    finally:
        parselmouth.praat.run("random_initializeSafelyAndUnpredictably ()\n")
    y = np.asarray(y[: x.size], np.float32)
    if y.size < x.size:
        y = np.pad(y, (0, x.size - y.size))
    peak = float(np.abs(y).max()) if y.size else 0.0
    return y / max(1.0, peak / 0.99) if np.isfinite(peak) else np.zeros_like(y)


def conversion_params(name: str, ranges: VoiceRanges = MALE_RANGES) -> tuple[float, float, float]:
    """Deterministic per-utterance (formant ratio, new pitch median Hz, pitch range factor) from a hash of
    the utterance name (str): each uniform in its range of ``ranges`` (:class:`VoiceRanges`; default
    :data:`MALE_RANGES`)."""
    h = hashlib.sha1(name.encode()).digest()
    u = [int.from_bytes(h[4 * i : 4 * i + 4], "little") / 2**32 for i in range(3)]
    return tuple(float(lo + (hi - lo) * v) for (lo, hi), v in zip(ranges, u))


def convert_voice(x: np.ndarray, name: str, ranges: VoiceRanges = MALE_RANGES) -> np.ndarray:
    """Convert utterance ``x`` (float (T,), 16 kHz) with the parameters (:func:`conversion_params` over
    ``ranges``) and Praat seed derived from its ``name``: the same utterance always converts the same way.

    Returns:
        np.ndarray: float32, shape (T,). Raises as :func:`change_gender`.
    """
    seed = int.from_bytes(hashlib.sha1(name.encode()).digest()[12:16], "little") & 0x7FFFFFFF
    return change_gender(x, *conversion_params(name, ranges), seed=seed)


def convert_to_male(x: np.ndarray, name: str) -> np.ndarray:
    """:func:`convert_voice` with :data:`MALE_RANGES`: utterance ``x`` (float (T,), 16 kHz) to a male-range
    voice. Returns float32, shape (T,); raises as :func:`change_gender`."""
    return convert_voice(x, name, MALE_RANGES)


def build_converted_corpus(source, name: str, ranges: VoiceRanges = MALE_RANGES, speaker_suffix: str = "~male"):
    """Return a new corpus: every TRAINING utterance of ``source`` converted with :func:`convert_voice`.

    Args:
        source (cosyedge.data.corpus.Corpus): Source corpus (16 kHz); its ``"val"``/``"test"``
            utterances are skipped, and so are utterances under 0.25 s, with non-finite samples, or that
            Praat cannot convert or turns to silence.
        name (str): Name of the new corpus.
        ranges (VoiceRanges): Ranges of the per-utterance parameters.
        speaker_suffix (str): Appended to each speaker id.
    Returns:
        cosyedge.data.corpus.Corpus: all utterances split ``"train"``, ``meta`` recording the ranges.
    Raises:
        DependencyError: praat-parselmouth is missing.
        ArtifactError: no utterance could be converted.
    """
    from cosyedge.data.corpus import Corpus

    _parselmouth()
    audios, names, speakers = [], [], []
    for i in source.indices("train"):
        x = source.utterance(i)
        if x.size < SAMPLE_RATE_HZ // 4 or not np.isfinite(x).all():  # too short for a pitch analysis, or broken
            continue
        try:
            y = convert_voice(x, source.names[i], ranges)
        except ArtifactError:
            continue
        if not np.any(y):  # Praat gave silence: not speech
            continue
        audios.append(y)
        names.append(source.names[i])
        speakers.append(f"{source.speakers[i]}{speaker_suffix}")
    if not audios:
        raise ArtifactError(f"corpus '{name}': no utterance of {source.name} could be converted")
    offsets = np.concatenate([[0], np.cumsum([a.size for a in audios])]).astype(np.int64)
    meta = {"converted_from": source.name, "method": "Praat Change gender (parselmouth)",
            "formant_ratio": ranges.formant_ratio, "pitch_median_hz": ranges.pitch_median_hz,
            "pitch_range_factor": ranges.pitch_range_factor}
    return Corpus(name, np.concatenate(audios), offsets, names, ["train"] * len(audios), speakers,
                  f"{source.source} (voice-converted)", meta)


def build_male_corpus(source, name: str):
    """Return a new corpus: every TRAINING utterance of ``source`` converted to a male-range voice
    (:func:`build_converted_corpus` with :data:`MALE_RANGES`, speaker ids suffixed ``~male``).

    Raises:
        DependencyError: praat-parselmouth is missing.
        ArtifactError: no utterance could be converted.
    """
    return build_converted_corpus(source, name, MALE_RANGES, "~male")
