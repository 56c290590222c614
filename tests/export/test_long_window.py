"""The reference enhancer's optional long-window features (``EnhancerConfig.lw_window``, ``lw_bins``).

Checks the long analysis against a direct NumPy DFT of the last W samples (zeros before the start), that a
zero feature conv is exactly the plain model (so ``train_reference.py --add-lw`` resumes from the same
function), that a bad config is refused, that ``--ema`` averages the weights, and that export -> streamify
turns the long window's input history into one more state and streams exactly (1e-5) with both exporters.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import assert_streams_exactly, noise_input, train_reference_module  # noqa: E402

from cosyedge.export import onnx_from_torch  # noqa: E402
from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer  # noqa: E402
from cosyedge.surgery import streamify  # noqa: E402
from cosyedge.train.reference import grow, loop  # noqa: E402

W, BINS = 1024, 48
ROOT = Path(__file__).resolve().parents[2]


def _lw_model(seed: int = 0) -> ReferenceEnhancer:
    """A small model with long-window features whose feature conv is random (non-zero), eval mode."""
    torch.manual_seed(seed)
    model = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), lw_window=W, lw_bins=BINS)).eval()
    model.set_feature_stats(torch.from_numpy(noise_input(8000, seed=5)))
    with torch.no_grad():
        model.lw_inp.weight.normal_(0.0, 0.5)
        model.out.bias.normal_(0.0, 1.0)
    return model


def test_long_window_is_a_causal_dft_of_the_last_w_samples():
    model = _lw_model()
    x = noise_input(3200)
    with torch.no_grad():
        got = model.long_spec(torch.from_numpy(x)).numpy()[0]  # (2 BINS, 20)
    hop = model.config.hop_samples
    padded = np.concatenate([np.zeros(W - hop), x[0, 0]])
    h = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(W) / W)
    assert model.feat_mean.abs().sum() > 0 and model.lw_mean.abs().sum() > 0  # stats set for both windows
    for t in (0, 7, 19):  # frame t ends with input sample (t + 1) * hop - 1
        seg = padded[t * hop: t * hop + W]
        want = np.fft.rfft(h * seg)[:BINS]
        assert np.abs(got[:BINS, t] + 1j * got[BINS:, t] - want).max() <= 1e-4 * np.abs(want).max()


def test_estimate_refuses_mismatched_long_spectrum():
    model = _lw_model()
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2))).eval()
    x = torch.from_numpy(noise_input(1600))
    with torch.no_grad():
        spec, lw = model.analysis(x), model.long_spec(x)
        with pytest.raises(ValueError, match="long-window spectrum missing for a model with lw_window 1024"):
            model.estimate(spec)
        with pytest.raises(ValueError, match="long-window spectrum given for a model with lw_window 0"):
            plain.estimate(spec, lw)


@pytest.mark.parametrize("window, bins", [(320, 10), (1024, 0), (1024, 514), (0, 10), (-160, 0)])
def test_bad_long_window_config_is_refused(window, bins):
    with pytest.raises(ValueError, match=f"lw_window {window} and lw_bins {bins}: need"):
        ReferenceEnhancer(EnhancerConfig(lw_window=window, lw_bins=bins))


def test_add_long_window_keeps_the_function():
    torch.manual_seed(0)
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2))).eval()
    with torch.no_grad():
        plain.out.bias.normal_(0.0, 1.0)
    ext = grow.add_long_window(plain, W, BINS).eval()
    assert dataclasses.asdict(ext.config) == {**dataclasses.asdict(plain.config), "lw_window": W, "lw_bins": BINS}
    x = torch.from_numpy(noise_input())
    mean_before = ext.feat_mean.clone()
    ext.set_feature_stats(x, long_window_only=True)
    assert torch.equal(ext.feat_mean, mean_before)  # the trained model's normalisation is kept
    assert ext.lw_scale.min() > 0 and ext.lw_mean.abs().sum() > 0
    with torch.no_grad():
        assert torch.equal(plain(x), ext(x))
        ext.lw_inp.weight.normal_(0.0, 0.3)
        assert (plain(x) - ext(x)).abs().max() > 1e-3  # and the new features change the output once trained
    with pytest.raises(ValueError, match="without long-window features"):
        plain.set_feature_stats(x, long_window_only=True)
    with pytest.raises(ValueError, match="already has long-window features"):
        grow.add_long_window(ext, W, BINS)


def test_weight_average_blends_parameters_not_fixed_bases():
    model = ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1,)))
    ema = loop.WeightAverage(model, 0.9)
    before = model.inp.weight.detach().clone()
    basis, mean = model.analysis.conv.weight.detach().clone(), model.feat_mean.clone()
    with torch.no_grad():
        model.inp.weight.add_(1.0)
        model.analysis.conv.weight.add_(1.0)  # a frozen parameter and a buffer change in the trained model:
        model.feat_mean.add_(1.0)  # the average keeps its own copies
    ema.update(model)
    assert torch.allclose(ema.model.inp.weight, before + 0.1, atol=1e-6)  # 0.9 * old + 0.1 * (old + 1)
    assert torch.equal(ema.model.analysis.conv.weight, basis) and torch.equal(ema.model.feat_mean, mean)
    assert not ema.model.training and not any(p.requires_grad for p in ema.model.parameters())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_long_window_streams_exactly(tmp_path, dynamo):
    model = _lw_model()
    full = onnx_from_torch(model, tmp_path / "lw.onnx", dynamo=dynamo)
    contract = streamify(full, tmp_path / "lw.stream.onnx")
    shapes = [tuple(s.shape[1:]) for s in contract.states]
    assert (1, W - model.config.hop_samples) in shapes  # the long window's input history
    assert len(shapes) == len(model.config.dilations) + 3  # analysis, long analysis, blocks, synthesis
    if not dynamo:  # tests/reference_structure.py describes the torchscript export (the bundled path)
        import onnx

        from tests.reference_structure import ReferenceStructure

        from cosyedge.precision.qdq import float_nodes

        want = ReferenceStructure.from_config(dataclasses.asdict(model.config))
        assert (want.lw_window, want.lw_bins) == (W, BINS)
        want.assert_matches(contract, tmp_path / "lw.stream.onnx")
        kept_float = float_nodes(onnx.load(str(tmp_path / "lw.stream.onnx")), "audio", "enhanced")
        assert "/lw_analysis/conv/Conv" in kept_float
        assert not set(want.int8_convs) & set(kept_float)
    x = noise_input(4800)
    assert_streams_exactly(model, tmp_path / "lw.stream.onnx", contract, x)


@pytest.mark.parametrize("argv, message", [
    (["--add-lw", "1024"], "expected W,BINS"),
    (["--add-lw", "1024,128"], "--add-lw needs --init"),
    (["--add-pitch-comb"], "--add-pitch-comb needs --init"),
    (["--lw", "1024,128", "--init", "x.safetensors"], "--lw builds a model from scratch"),
    (["--ema", "1.0"], "--ema must be in [0, 1)"),
    (["--select", "best"], "invalid choice"),
    (["--speech-low-boost", "0.5", "--speech-low-boost-db", "40"], "--speech-low-boost-db must be in [0, 30]"),
    (["--speech-reverb", "1.5"], "--speech-reverb must be in [0, 1]"),
    (["--read-phrase-share", "1"], "--read-phrase-share must be in [0, 1)"),
    (["--read-phrase-share", "0.1", "--read-phrases", "librivox"], "invalid choice: 'librivox'"),
    (["--read-phrase-share", "0.1", "--read-phrases", "festvox-ru,pocketsphinx"], "invalid choice: 'pocketsphinx'"),
    (["--read-phrase-share", "0.1", "--read-phrases", "festvox-ru,festvox-ru"], "invalid choice: 'festvox-ru'"),
    (["--init", "{plain}", "--add-lw", "320,10"], "lw_window 320 and lw_bins 10: need"),
    (["--init", "{lw}", "--add-lw", "1024,128"], "the --init model already has long-window features (window 1024)"),
    (["--init", "{lw}", "--add-df", "3,64", "--add-lw", "512,64"], "already has long-window features (window 1024)"),
    (["--add-window", "768"], "--add-window needs --init"),
    (["--init", "{plain}", "--add-window", "321"], "win_samples 321 must be even"),
    (["--init", "{plain}", "--add-window", "320"], "already uses a 320-sample window"),
])
def test_training_options_are_checked_before_data_preparation(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    tr = train_reference_module()
    from cosyedge.train.reference.model import save_reference
    inits = {"plain": EnhancerConfig(), "lw": EnhancerConfig(lw_window=1024, lw_bins=128)}
    for name, cfg in inits.items():  # small weights files of a known structure, whatever is bundled
        save_reference(ReferenceEnhancer(cfg), tmp_path / f"{name}.safetensors")
    argv = [a.format(**{k: str(tmp_path / f"{k}.safetensors") for k in inits}) for a in argv]

    def no_data(*a, **k):
        raise AssertionError("data preparation started before the options were checked")

    monkeypatch.setattr("cosyedge.data.training_data.TrainingData", no_data)
    with pytest.raises(SystemExit) as exc:
        tr.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


def test_speech_shares_over_one_exit_2_before_loading_data(capsys, monkeypatch):
    """TrainingData refuses shares adding up to more than 1 before it loads any corpus; the script turns that
    into a one-line usage error (exit 2)."""
    monkeypatch.chdir(ROOT)
    tr = train_reference_module()

    def no_corpus(*a, **k):
        raise AssertionError("a corpus was loaded before the shares were checked")

    monkeypatch.setattr("cosyedge.data.training_data.load_corpus", no_corpus)
    with pytest.raises(SystemExit) as exc:
        tr.main(["--male-share", "0.5", "--read-phrase-share", "0.3"])
    assert exc.value.code == 2
    assert "speech shares add up to 1.22 > 1" in capsys.readouterr().err.strip().splitlines()[-1]


def test_long_window_with_deep_filter_structure(tmp_path):
    from tests.reference_structure import ReferenceStructure

    torch.manual_seed(0)
    cfg = EnhancerConfig(channels=16, dilations=(1, 2), lw_window=W, lw_bins=BINS, df_order=3, df_bins=20)
    model = ReferenceEnhancer(cfg).eval()
    contract = streamify(onnx_from_torch(model, tmp_path / "b.onnx", dynamo=False), tmp_path / "b.stream.onnx")
    want = ReferenceStructure.from_config(dataclasses.asdict(cfg))
    assert (want.df_order, want.df_bins, want.lw_window, want.lw_bins) == (3, 20, W, BINS)
    want.assert_matches(contract, tmp_path / "b.stream.onnx")
