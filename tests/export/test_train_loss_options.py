"""Training options of ``scripts/training/train_reference.py``: the compressed spectral and STOI losses, the SNR range.

Checks that the compressed spectral loss (Braun & Tashev 2021) ranks estimates as a listener would (the
clean target best, a trace of residual noise next, the noisy input worst), that it does not depend on the
level, that ``--spectral-weight`` adds it to the SNR loss; that the differentiable STOI loss gives pystoi's
figure on the bundled real recording and passes gradients, that ``--stoi-weight`` adds it; that
``--snr-range`` parses, and that bad settings of all three are refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import train_reference_module  # noqa: E402

from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer  # noqa: E402
from cosyedge.train.reference import losses, options  # noqa: E402


def _signals(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(16000) / 16000
    speech = 0.3 * torch.sin(2 * np.pi * 150 * t) * torch.sin(2 * np.pi * 2 * t).clamp(min=0)  # voiced bursts
    speech = speech[None].repeat(2, 1) + 0.01 * torch.randn(2, 16000, generator=g)
    noise = 0.1 * torch.randn(2, 16000, generator=g)
    return speech, noise, speech + noise


def test_loss_ranks_clean_then_residual_noise_then_noisy_and_is_level_free():
    loss = losses.compressed_spectral_loss
    s, n, x = _signals()
    clean, residual, noisy = (float(loss(e, s, x)) for e in (s, s + 0.03 * n, x))
    assert clean < -20.0  # the floor (1e-3 of the compressed mixture energy) caps it, like the SNR loss's tau
    assert clean < residual - 10.0 and residual < noisy - 5.0
    assert float(loss(10 * x, 10 * s, 10 * x)) == pytest.approx(noisy, abs=1e-3)
    # compression: the residual noise is 30 dB below the input noise, which a waveform SNR credits in full;
    # the compressed spectrum credits 16.7 dB of it, so quiet residual noise keeps costing
    assert 10.0 < noisy - residual < 20.0


def test_loss_refuses_bad_settings():
    loss = losses.compressed_spectral_loss
    s, _, x = _signals()
    for kw in ({"compress": 0.0}, {"compress": 1.5}, {"alpha": -0.1}):
        with pytest.raises(ValueError, match="compress must be in"):
            loss(x, s, x, **kw)


@pytest.mark.parametrize("option, weight", [("spectral_weight", 0.5), ("stoi_weight", 2.0)])
def test_loss_weight_adds_its_loss_to_the_snr_loss(option, weight):
    torch.manual_seed(0)
    model = ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1, 2))).train()
    s, _, x = _signals(1)
    noisy, clean = x.numpy().astype(np.float32), s.numpy().astype(np.float32)
    delay = model.config.delay_samples
    with torch.no_grad():
        base = float(losses.batch_loss(model, noisy, clean, delay, 0.7))
        both = float(losses.batch_loss(model, noisy, clean, delay, 0.7, **{option: weight}))
        y = model(torch.from_numpy(noisy)[:, None])[:, 0, delay:]
        n = noisy.shape[-1] - delay
        ref, mix = torch.from_numpy(clean)[:, :n], torch.from_numpy(noisy)[:, :n]
        part = float(losses.compressed_spectral_loss(y, ref, mix) if option == "spectral_weight" else losses.stoi_loss(y, ref))
    if option == "stoi_weight":
        assert part < -0.5  # a real figure (an untrained model: STOI about 0.2), not the zero of an unused term
    assert both == pytest.approx(base + weight * part, abs=1e-3)


@pytest.mark.parametrize("option", ["--spectral-weight", "--stoi-weight"])
@pytest.mark.parametrize("value", ["-1", "11"])
def test_loss_weight_out_of_range_is_a_usage_error(option, value, capsys):
    tr = train_reference_module()
    with pytest.raises(SystemExit) as exc:
        tr.main([option, value])
    assert exc.value.code == 2
    assert f"{option} must be in [0, 10]" in capsys.readouterr().err


def test_stoi_weight_needs_segments_long_enough_for_one_stoi_segment(capsys):
    tr = train_reference_module()
    with pytest.raises(SystemExit) as exc:
        tr.main(["--stoi-weight", "1", "--seconds", "0.4"])
    assert exc.value.code == 2
    assert "--stoi-weight needs segments of at least 0.41 s" in capsys.readouterr().err
    # 0.41 s is enough: one STOI segment after the model's delay
    n = int(losses.STOI_MIN_SECONDS * 16000) - 160
    _, clean, _ = _demo()
    s = torch.from_numpy(clean[None, 16000:16000 + n])
    assert float(losses.stoi_loss(s, s)) == pytest.approx(-30.0, abs=0.01)
    with pytest.raises(ValueError, match="STOI loss needs at least"):
        losses.stoi_loss(s[:, :6354], s[:, :6354])


def _demo():
    sf = pytest.importorskip("soundfile")
    demo = Path(__file__).resolve().parents[2] / "cosyedge" / "assets" / "demo"
    noisy, rate = sf.read(demo / "noisy.wav", dtype="float32")
    clean, _ = sf.read(demo / "clean.wav", dtype="float32")
    return noisy, clean, rate


def _d(loss_db: float) -> float:  # stoi_loss = 10 log10(1 - d + 1e-3)
    return 1 + 1e-3 - 10 ** (loss_db / 10)


def test_stoi_loss_gives_pystois_figure_on_the_real_demo_recording():
    pystoi = pytest.importorskip("pystoi")
    noisy, clean, rate = _demo()
    assert rate == 16000
    for est in (noisy, 0.5 * noisy + 0.5 * clean, clean + 0.1 * (noisy - clean)):
        ours = _d(float(losses.stoi_loss(torch.from_numpy(est)[None], torch.from_numpy(clean)[None])))
        ref = pystoi.stoi(clean, est, rate)
        assert ours == pytest.approx(ref, abs=0.005), (ours, ref)  # 16 kHz bands instead of 10 kHz resampling
    assert float(losses.stoi_loss(torch.from_numpy(clean)[None], torch.from_numpy(clean)[None])) == pytest.approx(-30.0, abs=0.01)


def test_stoi_loss_passes_gradients_ignores_speechless_items_and_refuses_short_input():
    noisy, clean, _ = _demo()
    x = torch.from_numpy(noisy[None, :32000]).clone().requires_grad_(True)
    s = torch.from_numpy(clean[None, :32000])
    one = losses.stoi_loss(x, s)
    one.backward()
    assert torch.isfinite(x.grad).all() and float(x.grad.abs().sum()) > 0
    # a noise-only item (ref == 0) has no STOI: it adds nothing to the batch mean
    both = losses.stoi_loss(torch.cat([x.detach(), x.detach()]), torch.cat([s, torch.zeros_like(s)]))
    assert float(both) == pytest.approx(float(one.detach()), abs=1e-4)
    with pytest.raises(ValueError, match="STOI loss needs at least 6355 samples"):
        losses.stoi_loss(x[:, :6000], s[:, :6000])
    with pytest.raises(ValueError, match="of one shape"):
        losses.stoi_loss(x[:, :16000], s)
    # a batch of noise-only items has no STOI: 0, and no gradient
    none = losses.stoi_loss(x, torch.zeros_like(s))
    assert float(none.detach()) == 0.0


def test_stoi_loss_gives_a_silent_estimate_no_credit():
    """Silence correlates with nothing (pystoi: 0): the sqrt floor of the band envelopes must not leave a flat
    envelope that the clipping then shapes like the clean one."""
    pystoi = pytest.importorskip("pystoi")
    noisy, clean, rate = _demo()
    zero = torch.zeros(1, len(clean), requires_grad=True)
    loss = losses.stoi_loss(zero, torch.from_numpy(clean)[None])
    assert abs(_d(float(loss.detach()))) < 0.01 and abs(pystoi.stoi(clean, 0 * clean, rate)) < 0.01
    # the fix zeroes only true silence: a copy 80 dB down keeps its envelopes (STOI is level-free)
    quiet = clean * 1e-4
    assert _d(float(losses.stoi_loss(torch.from_numpy(quiet)[None], torch.from_numpy(clean)[None]))) > 0.99


def test_snr_range_parses_and_refuses_bad_ranges():
    assert options._snr_range_spec("-5,15") == (-5.0, 15.0)
    for bad, why in (("5", "expected LO,HI"), ("10,0", "need -20 <= LO < HI <= 40"), ("-30,0", "need -20")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            options._snr_range_spec(bad)


def test_snr_range_out_of_bounds_is_a_usage_error(capsys):
    tr = train_reference_module()
    with pytest.raises(SystemExit) as exc:
        tr.main(["--snr-range=0,50"])
    assert exc.value.code == 2
    assert "need -20 <= LO < HI <= 40 dB" in capsys.readouterr().err


def test_dnsmos_loss_rates_clean_above_noisy_skips_speechless_items_and_passes_gradients(capsys):
    """--dnsmos-weight: -OVRL of the output through the differentiable DNSMOS port; the clean demo speech scores
    better (lower loss) than the noisy one, noise-only items are left out, gradients reach the waveform, and a
    weight outside [0, 10] or --dnsmos-items 0 is a usage error."""
    pytest.importorskip("speechmos")
    tr = train_reference_module()
    noisy, clean, _ = _demo()
    x = torch.from_numpy(noisy[None, 16000:48000]).clone().requires_grad_(True)
    s = torch.from_numpy(clean[None, 16000:48000])
    loss_noisy = losses.dnsmos_loss(x, s, 4)
    loss_clean = losses.dnsmos_loss(s, s, 4)
    assert -5.0 < float(loss_clean) < float(loss_noisy.detach()) - 0.3 < -1.0
    loss_noisy.backward()
    assert torch.isfinite(x.grad).all() and float(x.grad.abs().sum()) > 0
    both = losses.dnsmos_loss(torch.cat([x.detach(), x.detach()]), torch.cat([s, torch.zeros_like(s)]), 4)
    assert float(both) == pytest.approx(float(loss_noisy.detach()), abs=1e-5)
    assert float(losses.dnsmos_loss(x.detach(), torch.zeros_like(s), 4)) == 0.0
    for argv, words in ((["--dnsmos-weight", "11"], "--dnsmos-weight must be in [0, 10]"),
                        (["--dnsmos-weight", "1", "--dnsmos-items", "0"], "--dnsmos-items must be at least 1")):
        with pytest.raises(SystemExit) as exc:
            tr.main(argv)
        assert exc.value.code == 2 and words in capsys.readouterr().err
