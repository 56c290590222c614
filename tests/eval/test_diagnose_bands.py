"""scripts/eval/diagnose_bands.py: the per-band error budget and speech band shares quoted in docs/model-card.md."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("scipy")
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "eval"
_spec = importlib.util.spec_from_file_location("diagnose_bands", SCRIPTS / "diagnose_bands.py")
bands = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bands)

from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer  # noqa: E402


def _model(gain_bias: float, **cfg) -> ReferenceEnhancer:
    torch.manual_seed(0)
    m = ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1,), **cfg)).eval()
    with torch.no_grad():
        m.out.weight.zero_()
        m.out.bias.fill_(gain_bias)  # sigmoid(+30) = 1: pass-through; sigmoid(-30) = 0: gain floor
    return m


def _pair(n=8000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    clean = (0.2 * np.sin(2 * np.pi * 220 * t) * (t > 0.1)).astype(np.float32)
    return clean + (0.05 * rng.standard_normal(n)).astype(np.float32), clean


def test_pass_through_model_keeps_speech_and_all_noise():
    noisy, clean = _pair()
    b = bands.band_budget(_model(30.0), noisy, clean)
    assert b["distortion"].sum() < 1e-9  # gains of 1: no speech removed
    np.testing.assert_allclose(b["residual"], b["noise"], rtol=1e-5)  # and every bit of noise let through
    assert b["gain"].min() > 0.999
    assert b["speech"].sum() == pytest.approx(1.0)  # energies are relative to the clean speech


def test_floor_model_removes_speech_and_oracle_beats_it():
    noisy, clean = _pair()
    b = bands.band_budget(_model(-30.0), noisy, clean)
    floor = 0.03
    assert b["distortion"].sum() == pytest.approx((1 - floor) ** 2, rel=1e-4)  # (1 - g)^2 of all speech
    np.testing.assert_allclose(b["residual"], floor ** 2 * b["noise"], rtol=1e-4)
    assert b["oracle_distortion"].sum() + b["oracle_residual"].sum() < b["distortion"].sum() + b["residual"].sum()


def test_deep_filter_counts_in_the_budget():
    noisy, clean = _pair()
    m = _model(30.0, df_order=2, df_bins=20)
    with torch.no_grad():
        m.df_out.bias.fill_(0.5)  # filter taps now add past frames: speech is changed, not just passed
    b = bands.band_budget(m, noisy, clean)
    assert b["distortion"][:20].sum() > 1e-3 and b["distortion"][20:].sum() < 1e-9


def test_band_shares_of_a_tone():
    t = np.arange(16000) / 16000
    shares = bands.band_shares_db(np.sin(2 * np.pi * 80 * t))  # 80 Hz: the 60-100 Hz band
    assert shares[2] == pytest.approx(0.0, abs=0.01) and max(shares[:2] + shares[3:]) < -40
