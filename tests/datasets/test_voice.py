"""Voice conversion used by training data version 3 (Praat "Change gender" through parselmouth)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from cosyedge.data import corpus, registry, sources, voice
from cosyedge.errors import DependencyError, UsageError

pytest.importorskip("parselmouth", reason="praat-parselmouth (the [data]/[dev] extra) is not installed")
librosa = pytest.importorskip("librosa", reason="librosa (the [eval]/[dev] extra) is not installed")

SR = 16000


def _female_vowels(seconds: float, f0_hz: float = 210.0) -> np.ndarray:
    """A glottal-pulse-like harmonic source at ``f0_hz`` through two formant resonances, with
    syllable envelope: float32 (n,)."""
    from scipy.signal import lfilter

    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = f0_hz * (1 + 0.05 * np.sin(2 * np.pi * 0.5 * t))
    ph = 2 * np.pi * np.cumsum(f0) / SR
    x = sum(np.sin(k * ph) / k for k in range(1, 30))
    for fc, bw in ((800.0, 90.0), (1600.0, 120.0)):
        r = np.exp(-np.pi * bw / SR)
        x = lfilter([1 - r], [1, -2 * r * np.cos(2 * np.pi * fc / SR), r * r], x)
    env = 0.5 + 0.5 * np.clip(np.sin(2 * np.pi * 2 * t), 0, None)
    x = x * env
    return (0.3 * x / np.abs(x).max()).astype(np.float32)


def _median_f0(x: np.ndarray) -> float:
    return float(np.median(librosa.yin(x, fmin=60, fmax=400, sr=SR)))


def test_change_gender_lowers_pitch_and_keeps_length():
    x = _female_vowels(2.0)
    assert 195 < _median_f0(x) < 225
    y = voice.change_gender(x, formant_ratio=0.85, pitch_median_hz=110.0)
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.isfinite(y).all() and np.abs(y).max() <= 0.99 + 1e-6
    assert 95 < _median_f0(y) < 125
    # still speech-level signal, not silence
    assert 0.1 < np.sqrt(np.mean(y**2)) / np.sqrt(np.mean(x**2)) < 10


def test_conversion_params_are_deterministic_and_in_range():
    a = voice.conversion_params("asterisk-en/digits/1.g722")
    assert a == voice.conversion_params("asterisk-en/digits/1.g722")
    assert a != voice.conversion_params("asterisk-en/digits/2.g722")
    for name in (f"u{i}" for i in range(50)):
        fr, f0, pr = voice.conversion_params(name)
        assert voice.FORMANT_RATIO_RANGE[0] <= fr <= voice.FORMANT_RATIO_RANGE[1]
        assert voice.PITCH_MEDIAN_RANGE_HZ[0] <= f0 <= voice.PITCH_MEDIAN_RANGE_HZ[1]
        assert voice.PITCH_RANGE_FACTOR_RANGE[0] <= pr <= voice.PITCH_RANGE_FACTOR_RANGE[1]


def test_build_male_corpus_converts_only_training_prompts():
    utts = [_female_vowels(s) for s in (1.0, 0.1, 1.5, 1.2)]
    off = np.concatenate([[0], np.cumsum([u.size for u in utts])]).astype(np.int64)
    src = corpus.Corpus("asterisk-en", np.concatenate(utts), off, ["a", "short", "b", "held"],
                         ["train", "train", "train", "val"], ["spk"] * 4, "fake-pkg")
    c = voice.build_male_corpus(src, "asterisk-en-male")
    assert c.names == ["a", "b"]  # the 0.1 s prompt is too short to convert; the val prompt is never used
    assert c.splits == ["train", "train"] and c.speakers == ["spk~male", "spk~male"]
    assert [c.utterance(i).size for i in range(2)] == [utts[0].size, utts[2].size]
    assert _median_f0(c.utterance(1)) < 140
    assert c.meta["converted_from"] == "asterisk-en"


def test_missing_parselmouth_is_a_dependency_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "parselmouth", None)
    with pytest.raises(DependencyError, match="praat-parselmouth"):
        voice.change_gender(np.zeros(SR, np.float32), 0.85, 110.0)


def test_male_corpora_are_registered_and_never_test_corpora():
    assert set(registry.MALE_CONVERTED_CORPORA) <= set(registry.CORPORA)
    assert all(n.startswith("asterisk-") and n.endswith("-male") for n in registry.MALE_CONVERTED_CORPORA)


@pytest.mark.parametrize("bad, why", [
    (np.zeros((SR, 2), np.float32), "shape"),
    (np.zeros(0, np.float32), "shape"),
    (np.zeros(SR, np.int16), "float samples"),
    (np.r_[np.zeros(SR, np.float32), np.float32("nan")], "NaN or Inf"),
])
def test_bad_audio_is_a_one_line_usage_error(bad, why):
    with pytest.raises(UsageError, match=why):
        voice.change_gender(bad, 0.85, 110.0)
    with pytest.raises(UsageError, match="sample rate"):
        voice.change_gender(np.zeros(SR, np.float32), 0.85, 110.0, sample_rate_hz=0)


def test_build_male_corpus_skips_broken_prompts():
    good, broken = _female_vowels(1.0), _female_vowels(1.0)
    broken[100] = np.nan
    off = np.array([0, good.size, good.size + broken.size], np.int64)
    src = corpus.Corpus("asterisk-en", np.concatenate([good, broken]), off, ["ok", "nan"], ["train", "train"],
                         ["spk", "spk"], "fake")
    assert voice.build_male_corpus(src, "m").names == ["ok"]


def test_conversion_is_reproducible():
    """Praat's resynthesis draws random pulses in unvoiced stretches: the seed makes it repeatable."""
    rng = np.random.default_rng(0)
    x = _female_vowels(1.0)
    x[: SR // 4] = 0.05 * rng.standard_normal(SR // 4).astype(np.float32)  # an unvoiced (noise) stretch
    a, b = voice.convert_to_male(x, "u1"), voice.convert_to_male(x, "u1")
    assert np.array_equal(a, b)
    assert np.array_equal(voice.change_gender(x, 0.85, 110.0, seed=3), voice.change_gender(x, 0.85, 110.0, seed=3))


def test_ranges_default_to_male_and_revoice_draws_in_its_own_ranges():
    assert voice.conversion_params("u1") == voice.conversion_params("u1", voice.MALE_RANGES)
    lows = []
    for name in (f"ru_{i:04d}.wav" for i in range(200)):
        fr, f0, pr = voice.conversion_params(name, voice.REVOICE_RANGES)
        assert 0.90 <= fr <= 1.05 and 75.0 <= f0 <= 125.0 and 0.8 <= pr <= 1.2
        lows.append(f0)
    assert min(lows) < 80 and max(lows) > 120  # spread over the whole range, not one voice


def test_festvox_ru_voices_revoices_each_sentence_to_its_own_low_male_pitch(tmp_path, monkeypatch):
    """festvox-ru-voices: every sentence of festvox-ru (a male speaker, f0 ~140 Hz here) converted with its
    own parameters from REVOICE_RANGES; lengths and names kept, speakers marked."""
    names = [f"ru_{i:04d}.wav" for i in (1, 2, 3)]
    utts = [_female_vowels(1.5, f0_hz=140.0) for _ in names]
    off = np.concatenate([[0], np.cumsum([u.size for u in utts])]).astype(np.int64)
    fake = corpus.Corpus("festvox-ru", np.concatenate(utts), off, names, ["train"] * 3, ["msu_ru_nsh"] * 3, "festvox-ru")
    monkeypatch.setattr(registry, "load_corpus", lambda name, cache_dir=None: {"festvox-ru": fake}[name])
    c = registry.CORPORA["festvox-ru-voices"](tmp_path)
    assert c.name == "festvox-ru-voices" and c.names == names
    assert c.speakers == ["msu_ru_nsh~revoiced"] * 3 and c.splits == ["train"] * 3
    assert c.meta["converted_from"] == "festvox-ru" and tuple(c.meta["pitch_median_hz"]) == (75.0, 125.0)
    for i, n in enumerate(names):
        y = c.utterance(i)
        assert y.size == utts[i].size
        target = voice.conversion_params(n, voice.REVOICE_RANGES)[1]
        assert abs(_median_f0(y) - target) < 0.12 * target, (n, _median_f0(y), target)
