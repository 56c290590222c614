"""Training options of ``scripts/train_reference.py``: the compressed spectral loss and the SNR range.

Checks that the compressed spectral loss (Braun & Tashev 2021) ranks estimates as a listener would (the
clean target best, a trace of residual noise next, the noisy input worst), that it does not depend on the
level, that ``--spectral-weight`` adds it to the SNR loss, that ``--snr-range`` parses, and that bad
settings of both are refused.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models_torch import train_reference_module  # noqa: E402

from cosyedge.models.reference import EnhancerConfig, ReferenceEnhancer  # noqa: E402


def _signals(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(16000) / 16000
    speech = 0.3 * torch.sin(2 * np.pi * 150 * t) * torch.sin(2 * np.pi * 2 * t).clamp(min=0)  # voiced bursts
    speech = speech[None].repeat(2, 1) + 0.01 * torch.randn(2, 16000, generator=g)
    noise = 0.1 * torch.randn(2, 16000, generator=g)
    return speech, noise, speech + noise


def test_loss_ranks_clean_then_residual_noise_then_noisy_and_is_level_free():
    loss = train_reference_module().compressed_spectral_loss
    s, n, x = _signals()
    clean, residual, noisy = (float(loss(e, s, x)) for e in (s, s + 0.03 * n, x))
    assert clean < -20.0  # the floor (1e-3 of the compressed mixture energy) caps it, like the SNR loss's tau
    assert clean < residual - 10.0 and residual < noisy - 5.0
    assert float(loss(10 * x, 10 * s, 10 * x)) == pytest.approx(noisy, abs=1e-3)
    # compression: the residual noise is 30 dB below the input noise, which a waveform SNR credits in full;
    # the compressed spectrum credits 16.7 dB of it, so quiet residual noise keeps costing
    assert 10.0 < noisy - residual < 20.0


def test_loss_refuses_bad_settings():
    loss = train_reference_module().compressed_spectral_loss
    s, _, x = _signals()
    for kw in ({"compress": 0.0}, {"compress": 1.5}, {"alpha": -0.1}):
        with pytest.raises(ValueError, match="compress must be in"):
            loss(x, s, x, **kw)


def test_spectral_weight_adds_the_spectral_loss_to_the_snr_loss():
    tr = train_reference_module()
    torch.manual_seed(0)
    model = ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1, 2))).train()
    s, _, x = _signals(1)
    noisy, clean = x.numpy().astype(np.float32), s.numpy().astype(np.float32)
    delay = model.config.delay_samples
    with torch.no_grad():
        base = float(tr.batch_loss(model, noisy, clean, delay, 0.7))
        both = float(tr.batch_loss(model, noisy, clean, delay, 0.7, spectral_weight=0.5))
        y = model(torch.from_numpy(noisy)[:, None])[:, 0, delay:]
        n = noisy.shape[-1] - delay
        spec = float(tr.compressed_spectral_loss(y, torch.from_numpy(clean)[:, :n], torch.from_numpy(noisy)[:, :n]))
    assert both == pytest.approx(base + 0.5 * spec, abs=1e-3)


@pytest.mark.parametrize("value", ["-1", "11"])
def test_spectral_weight_out_of_range_is_a_usage_error(value, capsys):
    tr = train_reference_module()
    with pytest.raises(SystemExit) as exc:
        tr.main(["--spectral-weight", value])
    assert exc.value.code == 2
    assert "--spectral-weight must be in [0, 10]" in capsys.readouterr().err


def test_snr_range_parses_and_refuses_bad_ranges():
    tr = train_reference_module()
    assert tr._snr_range_spec("-5,15") == (-5.0, 15.0)
    for bad, why in (("5", "expected LO,HI"), ("10,0", "need -20 <= LO < HI <= 40"), ("-30,0", "need -20")):
        with pytest.raises(tr.argparse.ArgumentTypeError, match=why):
            tr._snr_range_spec(bad)


def test_snr_range_out_of_bounds_is_a_usage_error(capsys):
    tr = train_reference_module()
    with pytest.raises(SystemExit) as exc:
        tr.main(["--snr-range=0,50"])
    assert exc.value.code == 2
    assert "need -20 <= LO < HI <= 40 dB" in capsys.readouterr().err
