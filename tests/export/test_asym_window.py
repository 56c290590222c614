"""The reference enhancer's asymmetric low-latency STFT (``EnhancerConfig.win_samples`` > 2 * hop).

Checks that the long analysis window is a DFT of the last N samples with the documented window, that analysis
then synthesis reconstructs the input exactly with the same one-hop delay as the 20 ms window, that the
symmetric case keeps the bundled bases, that export -> streamify turns the window's input history into a
state and streams exactly (1e-5), and ``train_reference.py --add-window`` (regrid_window; its option checks
are cases of tests/export/test_long_window.py::test_training_options_are_checked_before_data_preparation).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import assert_streams_exactly, noise_input  # noqa: E402

from cosyedge.export import onnx_from_torch
from cosyedge.train.reference.model import (
    EnhancerConfig,
    ReferenceEnhancer,
    analysis_window,
    stft_bases,
)
from cosyedge.surgery import streamify
from cosyedge.train.reference import grow  # noqa: E402

HOP = 160


def _passthrough(win: int) -> ReferenceEnhancer:
    """A model whose gains are all 1 (gain head zero, bias +30)."""
    model = ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1,), win_samples=win)).eval()
    with torch.no_grad():
        model.out.weight.zero_()
        model.out.bias.fill_(30.0)
    return model


@pytest.mark.parametrize("win", [320, 512, 768])
def test_gain_one_reconstructs_the_input_one_hop_late(win):
    model = _passthrough(win)
    assert model.config.delay_samples == HOP and model.stream_metadata()["delay_samples"] == HOP
    assert model.config.n_bins == win // 2 + 1
    x = noise_input(8000)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy()
    assert np.abs(y[0, 0, HOP:] - x[0, 0, :-HOP]).max() <= 1e-6


def test_asymmetric_analysis_is_a_dft_of_the_last_n_samples():
    win = 768
    model = _passthrough(win)
    w = analysis_window(win, HOP)
    assert w.argmax() == win - HOP and abs(w.max() - 1.0) < 1e-12 and w[0] == 0.0  # peak one hop before the end
    x = noise_input(3200)
    with torch.no_grad():
        got = model.analysis(torch.from_numpy(x)).numpy()[0]  # (2F, 20)
    f = win // 2 + 1
    padded = np.concatenate([np.zeros(win - HOP), x[0, 0]])
    for t in (0, 5, 19):  # frame t ends with input sample (t + 1) * hop - 1
        want = np.fft.rfft(w * padded[t * HOP: t * HOP + win])
        assert np.abs(got[:f, t] + 1j * got[f:, t] - want).max() <= 1e-4 * np.abs(want).max()
    _, syn = stft_bases(win, HOP)
    assert syn.shape == (2 * f, 2 * HOP)  # synthesis covers only the last two hops: same delay as 20 ms


def test_symmetric_window_keeps_the_sqrt_hann_bases():
    ana, syn = stft_bases(2 * HOP, HOP)
    n = np.arange(2 * HOP)
    w = np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * n / (2 * HOP)))
    assert np.abs(ana[0, 0] - w).max() < 1e-7 and np.abs(syn[0] - w / (2 * HOP)).max() < 1e-9


@pytest.mark.parametrize("win", [319, 318, 240, 0])
def test_bad_window_is_refused(win):
    with pytest.raises(ValueError, match=f"win_samples {win} must be even and >= 2 \\* hop_samples"):
        ReferenceEnhancer(EnhancerConfig(win_samples=win))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_asymmetric_window_streams_exactly(tmp_path, dynamo):
    torch.manual_seed(0)
    model = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), win_samples=768)).eval()
    model.set_feature_stats(torch.from_numpy(noise_input(8000, seed=5)))
    with torch.no_grad():
        model.out.bias.normal_(0.0, 1.0)
    contract = streamify(onnx_from_torch(model, tmp_path / "a.onnx", dynamo=dynamo), tmp_path / "a.stream.onnx")
    shapes = [tuple(s.shape[1:]) for s in contract.states]
    assert (1, 768 - HOP) in shapes  # the analysis window's input history
    x = noise_input(4800)
    assert_streams_exactly(model, tmp_path / "a.stream.onnx", contract, x)


def test_regrid_window_resamples_the_per_bin_convs():
    torch.manual_seed(0)
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), lw_window=1024, lw_bins=32)).eval()
    with torch.no_grad():
        plain.out.bias.normal_(0.0, 1.0)
        plain.lw_inp.weight.normal_(0.0, 0.3)
    new = grow.regrid_window(plain, 768).eval()
    assert dataclasses.asdict(new.config) == {**dataclasses.asdict(plain.config), "win_samples": 768}
    j = np.minimum(np.rint(np.arange(385) * 320 / 768).astype(int), 160)
    assert torch.equal(new.out.bias, plain.out.bias[torch.from_numpy(j)])
    assert torch.equal(new.out.weight, plain.out.weight[torch.from_numpy(j)])
    # each old bin's feature weight is shared among the new bins that map to it: the column sums are kept
    assert torch.allclose(new.inp.weight.sum(dim=1), plain.inp.weight.sum(dim=1), atol=1e-5)
    for a, b in zip(new.blocks.parameters(), plain.blocks.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(new.lw_inp.weight, plain.lw_inp.weight) and torch.equal(new.lw_mean, plain.lw_mean)
    lw_mean = new.lw_mean.clone()
    new.set_feature_stats(torch.from_numpy(noise_input()), main_only=True)
    assert torch.equal(new.lw_mean, lw_mean) and new.feat_mean.shape == (385,) and new.feat_mean.abs().sum() > 0
    with pytest.raises(ValueError, match="already uses a 768-sample window"):
        grow.regrid_window(new, 768)
    with pytest.raises(ValueError, match="has a deep filter"):
        grow.regrid_window(ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1,), df_order=2, df_bins=8)), 768)
