"""Metric values on real speech: SI-SNR from its formula, PESQ-WB/STOI ordering, DNSMOS clean vs noisy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosyedge._lazy import has_module
from cosyedge.eval import metrics as M
from cosyedge.signal import si_snr_db
from tests.eval.conftest import DEMO_CLEAN, DEMO_NOISY, SPEECH, read


def _speech(seconds: float = 3.0) -> np.ndarray:
    x, sr = read(SPEECH)
    assert sr == 16000
    return x[sr: sr + int(seconds * sr)].astype(np.float64)


def test_si_snr_of_a_known_mix_equals_the_formula():
    ref = _speech()
    ref = ref - ref.mean()
    rng = np.random.default_rng(0)
    e = rng.standard_normal(ref.size)
    e -= e.mean()
    e -= (e @ ref) / (ref @ ref) * ref  # orthogonal to ref: est = a*ref + e splits exactly into target + error
    e *= 0.3 * np.linalg.norm(ref) / np.linalg.norm(e)
    est = 0.7 * ref + e
    expected = 10 * math.log10(np.sum((0.7 * ref) ** 2) / np.sum(e ** 2))  # 10 log10(0.49 / 0.09) = 7.36 dB
    assert expected == pytest.approx(10 * math.log10(0.49 / 0.09), abs=1e-9)
    assert si_snr_db(est, ref) == pytest.approx(expected, abs=1e-6)
    assert si_snr_db(-2.5 * est + 0.01, ref) == pytest.approx(expected, abs=1e-6)  # scale, sign and offset invariant


def test_si_snr_rejects_different_lengths():
    from cosyedge.errors import UsageError

    with pytest.raises(UsageError, match="shape"):
        si_snr_db(np.zeros(10), np.zeros(11))


@pytest.mark.skipif(not has_module("pesq") or not has_module("pystoi"), reason="pesq/pystoi not installed "
                    "(pip install 'cosyedge[eval]')")
def test_pesq_and_stoi_order_clean_over_noisy():
    c, sr = read(DEMO_CLEAN)
    x, _ = read(DEMO_NOISY)
    c, x = c[: 6 * sr], x[: 6 * sr]
    p_clean, p_noisy = M.pesq_wb(c, c, sr), M.pesq_wb(x, c, sr)
    assert p_clean > 4.5  # identical signals: the top of the P.862.2 scale (4.64)
    assert 1.0 < p_noisy < 2.0  # 5 dB engine noise
    s_clean, s_noisy = M.stoi(c, c, sr), M.stoi(x, c, sr)
    assert s_clean == pytest.approx(1.0, abs=1e-6)
    assert 0.5 < s_noisy < 0.95


@pytest.mark.skipif(not has_module("pesq"), reason="pesq not installed (pip install 'cosyedge[eval]')")
def test_pesq_of_silence_is_nan_not_an_exception():
    z = np.zeros(16000 * 2, np.float32)
    assert math.isnan(M.pesq_wb(z, z))


@pytest.mark.skipif(not has_module("speechmos") or not has_module("librosa"),
                    reason="speechmos/librosa not installed (pip install 'cosyedge[eval]')")
def test_dnsmos_rates_clean_speech_above_noisy():
    c, sr = read(DEMO_CLEAN)
    x, _ = read(DEMO_NOISY)
    a, b = M.dnsmos(c[: 10 * sr], sr), M.dnsmos(x[: 10 * sr], sr)
    assert set(a) == {"dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808"}
    assert all(1.0 <= v <= 5.0 for v in (*a.values(), *b.values()))
    assert a["dnsmos_ovrl"] > b["dnsmos_ovrl"] + 0.5
    assert a["dnsmos_bak"] > b["dnsmos_bak"] + 1.0  # background noise is what differs
    assert all(math.isnan(v) for v in M.dnsmos(np.zeros(16000, np.float32)).values())
