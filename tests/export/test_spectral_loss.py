"""The compressed spectral training loss of ``scripts/train_reference.py`` (Braun & Tashev 2021).

Checks that it ranks estimates as a listener would (the clean target best, a trace of residual noise next,
the noisy input worst), that it does not depend on the level, that it is added to the SNR loss with
``--spectral-weight`` and that bad settings are refused.
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
