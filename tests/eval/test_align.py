"""Delay estimation by cross-correlation: injected shifts are found exactly; RNNoise is about 20 ms late."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge._lazy import has_module
from cosyedge.eval.align import align_to, estimate_delay
from tests.eval.conftest import DEMO_CLEAN, DEMO_NOISY, SPEECH, read


def _shift(x: np.ndarray, d: int) -> np.ndarray:
    """x delayed by d samples (d < 0: advanced), same length, zero-filled."""
    y = np.zeros_like(x)
    if d >= 0:
        y[d:] = x[: x.size - d]
    else:
        y[:d] = x[-d:]
    return y


@pytest.mark.parametrize("delay_ms", [20.0, -10.0, 0.0, 49.0])
def test_estimate_delay_finds_injected_shift_in_noise(delay_ms):
    x, sr = read(SPEECH)
    ref = x[: 3 * sr]
    d = round(delay_ms * sr / 1000)
    rng = np.random.default_rng(1)
    est = 0.8 * _shift(ref, d) + 0.05 * rng.standard_normal(ref.size).astype(np.float32)  # about 5 dB SNR
    assert estimate_delay(est, ref, sr) == d
    if d > 0:
        assert estimate_delay(est, ref, sr, max_delay_ms=5.0) != d  # outside the search range


def test_align_to_undoes_the_shift():
    x, sr = read(SPEECH)
    ref = x[: 2 * sr]
    late = np.concatenate([np.zeros(320, np.float32), ref])  # 20 ms late, longer than ref
    d = estimate_delay(late, ref, sr)
    assert d == 320
    np.testing.assert_array_equal(align_to(late, d, ref.size), ref)
    early = align_to(ref, -160, ref.size)
    np.testing.assert_array_equal(early[:160], 0)
    np.testing.assert_array_equal(early[160:], ref[:-160])


@pytest.mark.skipif(not has_module("pyrnnoise"), reason="pyrnnoise not installed (pip install 'cosyedge[eval]')")
def test_rnnoise_baseline_is_20ms_late_and_improves_si_snr():
    from cosyedge.eval.baseline import rnnoise_enhance
    from cosyedge.signal import si_snr_db

    x, sr = read(DEMO_NOISY)
    c, _ = read(DEMO_CLEAN)
    x, c = x[: 8 * sr], c[: 8 * sr]
    y = rnnoise_enhance(x, sr)
    assert y.size > x.size and np.isfinite(y).all()
    d = estimate_delay(y, c, sr)
    assert 1000 * d / sr == pytest.approx(20.0, abs=1.0)
    assert si_snr_db(align_to(y, d, c.size), c) > si_snr_db(x, c) + 1.0
