"""scripts/eval/oracle_testset.py: the oracle real-mask bounds quoted in docs/model-card.md."""

import numpy as np
import pytest

from cosyedge.signal import si_snr
from cosyedge.train.reference import oracle

pytest.importorskip("scipy")


def _tone_speech(n: int) -> np.ndarray:
    t = np.arange(n) / 16000
    env = np.clip(np.sin(2 * np.pi * 3 * t), 0, None)
    return 0.3 * env * sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 20))


def test_oracle_of_clean_input_is_perfect_reconstruction():
    c = _tone_speech(16000)
    for kind in oracle.MASKS:
        y = oracle.apply_oracle(c, c, kind, 320)
        assert y.shape == c.shape
        assert si_snr(y[320:-320], c[320:-320]) > 60.0  # sqrt-Hann 50 % overlap-add: exact away from the ends


def test_oracle_gain_improves_a_noisy_mixture_and_is_bounded():
    rng = np.random.default_rng(0)
    c = _tone_speech(32000)
    x = c + 0.3 * rng.standard_normal(c.size)
    base = si_snr(x, c)
    gains = {k: si_snr(oracle.apply_oracle(x, c, k, 320), c) - base for k in oracle.MASKS}
    assert all(g > 5.0 for g in gains.values()), gains
    s = np.array([[1 + 1j, 0.0]]); n = np.array([[0.0, 1.0]]); xx = s + n
    for k in oracle.MASKS:
        g = oracle.oracle_gain(k, s, n, xx)
        assert np.all(g >= oracle.GAIN_FLOOR) and np.all(g <= 1.0)
        assert g[0, 0] == pytest.approx(1.0) and g[0, 1] == pytest.approx(oracle.GAIN_FLOOR)
    with pytest.raises(ValueError, match="unknown mask"):
        oracle.oracle_gain("cirm", s, n, xx)


def test_asymmetric_oracle_reconstructs_clean_input_and_resolves_a_low_voice_better():
    """Through the model's asymmetric STFT (20 ms latency) a clean input comes back exactly at any length;
    with harmonics 100 Hz apart in noise, the 768-sample analysis window's oracle beats the 320 one."""
    c = _tone_speech(16005)  # not a multiple of the hop
    for win in (320, 768):
        y = oracle.apply_oracle_asym(c, c, "iam", win)
        assert y.shape == c.shape and np.abs(y - c).max() < 1e-6
    assert np.abs(oracle.apply_oracle_asym(c, c, "iam", 320) - oracle.apply_oracle(c, c, "iam", 320))[320:-320].max() < 1e-6
    rng = np.random.default_rng(1)
    t = np.arange(32000) / 16000
    voice = 0.3 * np.clip(np.sin(2 * np.pi * 2 * t), 0, None) * sum(np.sin(2 * np.pi * 100 * k * t) for k in range(1, 13))
    x = voice + 0.2 * rng.standard_normal(t.size)
    gain = {w: si_snr(oracle.apply_oracle_asym(x, voice, "iam", w), voice) for w in (320, 768)}
    assert gain[768] > gain[320] + 0.2, gain  # measured +0.41 dB (seed 1)


def test_comb_prefilter_passes_a_periodic_signal_and_halves_white_noise():
    """(x[n] + x[n-T]) / 2: a signal periodic with T comes through unchanged (after the first period);
    white noise loses half its power (3 dB); unvoiced hops (T = 0) are untouched."""
    t = np.arange(8000)
    period = 160  # 100 Hz
    voice = np.sin(2 * np.pi * t / period) + 0.5 * np.sin(2 * np.pi * 3 * t / period)
    periods = np.full(8000 // oracle.HOP, period)
    y = oracle.comb_prefilter(voice, periods)
    assert y.shape == voice.shape and np.abs(y[period:] - voice[period:]).max() < 1e-12
    noise = np.random.default_rng(0).standard_normal(t.size)
    yn = oracle.comb_prefilter(noise, periods)
    assert np.mean(yn[period:] ** 2) / np.mean(noise[period:] ** 2) == pytest.approx(0.5, abs=0.03)
    assert np.array_equal(oracle.comb_prefilter(noise, np.zeros_like(periods)), noise)


def test_pitch_oracle_beats_the_plain_mask_and_its_wrong_lag_control_on_a_voice_in_noise():
    """A 100 Hz harmonic voice in white noise: the comb at the true period (Praat finds it) raises the oracle;
    the same choice with a wrong period (the control row) gains much less."""
    pytest.importorskip("parselmouth", reason="praat-parselmouth (the data extra) is not installed")
    rng = np.random.default_rng(2)
    t = np.arange(32000) / 16000
    voice = 0.3 * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) * sum(np.sin(2 * np.pi * 100 * k * t) / k for k in range(1, 30))
    periods = oracle.true_pitch_periods(voice, t.size // oracle.HOP + 1)
    assert np.median(periods[periods > 0]) == pytest.approx(160, abs=2) and (periods > 0).mean() > 0.9
    x = voice + 0.1 * rng.standard_normal(t.size)
    base = si_snr(x, voice)
    plain = si_snr(oracle.apply_oracle(x, voice, "iam", 320), voice) - base
    pitch = si_snr(oracle.apply_oracle_pitch(x, voice), voice) - base
    wrong = si_snr(oracle.apply_oracle_pitch(x, voice, oracle.WRONG_LAG_FACTOR), voice) - base
    assert pitch > plain + 1.0 and pitch > wrong + 1.0, (plain, pitch, wrong)


def test_causal_pitch_finds_the_period_of_a_voice_in_noise_from_the_past_only():
    """The causal estimate uses only samples up to the end of each hop: changing the future leaves the past
    periods unchanged; on a 125 Hz voice in noise it finds 128 samples or a multiple (an octave error still
    combs every harmonic: the voice is periodic at 256 samples too) on every hop after the first 40 ms, mostly 128."""
    rng = np.random.default_rng(3)
    t = np.arange(16000) / 16000
    voice = 0.3 * sum(np.sin(2 * np.pi * 125 * k * t) / k for k in range(1, 20))
    x = voice + 0.05 * rng.standard_normal(t.size)
    n = t.size // oracle.HOP
    per = oracle.causal_pitch_periods(x, n)
    assert per.shape == (n,)
    k = np.round(per[4:] / 128)
    assert np.all(k >= 1) and np.all(np.abs(per[4:] - 128 * k) <= 2) and np.mean(k == 1) > 0.5
    y = x.copy()
    y[8000:] = rng.standard_normal(8000)  # another future
    assert np.array_equal(oracle.causal_pitch_periods(y, n)[:8000 // oracle.HOP], per[:8000 // oracle.HOP])
    assert not np.any(oracle.causal_pitch_periods(np.zeros(3200), 20))  # silence: no period


def test_long_window_pitch_agrees_with_the_time_domain_estimate_and_unknown_estimate_is_refused():
    """The band-limited autocorrelation of the 1024-sample window's 0-2 kHz power finds the 125 Hz voice's
    period (or a multiple) like the time-domain search; an unknown estimator name is a ValueError."""
    rng = np.random.default_rng(4)
    t = np.arange(16000) / 16000
    voice = 0.3 * sum(np.sin(2 * np.pi * 125 * k * t) / k for k in range(1, 20))
    x = voice + 0.05 * rng.standard_normal(t.size)
    per = oracle.lw_pitch_periods(x, 100)[7:]  # after the first 1024 samples
    k = np.round(per / 128)
    assert np.all(k >= 1) and np.all(np.abs(per - 128 * k) <= 2) and np.mean(k == 1) > 0.5
    assert not np.any(oracle.lw_pitch_periods(np.zeros(3200), 20))
    with pytest.raises(ValueError, match="unknown pitch estimate 'yin'"):
        oracle.apply_oracle_pitch(x, voice, pitch="yin")
