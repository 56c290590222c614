"""The reference enhancer's optional pitch comb (``EnhancerConfig.pitch_comb``, RNNoise-style pitch filter).

Checks the pitch search on a voice of known period, that the comb passes a periodic signal unchanged and
averages a signal with itself one period earlier, that ``train_reference.add_pitch_comb`` resumes from nearly
the same function (mix 0.0003), that a bad config and mismatched inputs are refused, and that export ->
streamify streams exactly (1e-5; the framing of the last 640 samples becomes one more state), that the framing
(:class:`cosyedge.train.nn.CausalFraming`) equals the dense identity framing conv it replaced, bit for bit, and that a
checkpoint saved with that dense conv still loads (and a corrupt one is refused).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import assert_streams_exactly, noise_input  # noqa: E402

from cosyedge.export import onnx_from_torch  # noqa: E402
from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer  # noqa: E402
from cosyedge.surgery import streamify  # noqa: E402
from cosyedge.train.reference import grow  # noqa: E402

W, BINS = 1024, 128


def _voice(seconds: float = 1.0, f0: float = 125.0) -> torch.Tensor:
    t = torch.arange(int(16000 * seconds)) / 16000
    return (0.3 * sum(torch.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 15)))[None, None].float()


def _pc_model(seed: int = 0) -> ReferenceEnhancer:
    """A small pitch-comb model whose comb feature conv and mix head are random (non-trivial), eval mode."""
    torch.manual_seed(seed)
    model = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), lw_window=W, lw_bins=BINS,
                                             pitch_comb=True)).eval()
    model.set_feature_stats(torch.from_numpy(noise_input(8000, seed=5)))
    with torch.no_grad():
        model.pc_inp.weight.normal_(0.0, 0.3)
        model.pc_out.weight.normal_(0.0, 0.3)
        model.pc_out.bias.zero_()
        model.out.bias.normal_(0.0, 1.0)
    return model


def test_pitch_search_finds_the_period_and_the_comb_passes_a_periodic_voice():
    model = _pc_model()
    v = _voice()
    with torch.no_grad():
        lags = model.pitch_lags(model.long_spec(v))[0]
        comb, plain = model.comb_spec(v, lags[None]), model.analysis(v)
    assert torch.all(lags[7:] == 128)  # 16000 / 125 Hz, once the 1024-sample window is full
    assert float((comb - plain)[..., 4:].abs().max() / plain.abs().max()) < 1e-4


def test_comb_spectrum_is_the_analysis_of_the_signal_averaged_with_itself_one_period_earlier():
    model = _pc_model()
    x = torch.from_numpy(noise_input(3200))
    lags = torch.full((1, 20), 200, dtype=torch.int64)
    want = x.clone()
    want[..., 200:] = 0.5 * (x[..., 200:] + x[..., :-200])
    with torch.no_grad():
        got, ref = model.comb_spec(x, lags), model.analysis(want)
    # frames from the third on see only samples >= 200 (frame t covers (t - 1) * 160 .. (t + 1) * 160)
    assert float((got - ref)[..., 3:].abs().max()) <= 1e-5 * float(ref.abs().max())


def test_bad_config_and_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="pitch_comb needs the long-window features"):
        ReferenceEnhancer(EnhancerConfig(pitch_comb=True))
    with pytest.raises(ValueError, match="symmetric window"):
        ReferenceEnhancer(EnhancerConfig(win_samples=768, lw_window=W, lw_bins=BINS, pitch_comb=True))
    model = _pc_model()
    x = torch.from_numpy(noise_input(1600))
    with torch.no_grad():
        spec, lw = model.analysis(x), model.long_spec(x)
        comb = model.comb_input(x, lw)
        with pytest.raises(ValueError, match="comb spectrum missing for a model with pitch_comb True"):
            model.estimate(spec, lw)
        g, c, m = model.estimate(spec, lw, comb)
        with pytest.raises(ValueError, match="comb mix and spectrum missing for a model with pitch_comb True"):
            model.apply_filter(spec, g, c)
    with pytest.raises(ValueError, match="pitch_comb_only=True\\) needs a pitch-comb model"):
        ReferenceEnhancer(EnhancerConfig(lw_window=W, lw_bins=BINS)).set_feature_stats(x, pitch_comb_only=True)


def test_add_pitch_comb_resumes_from_nearly_the_same_function():
    torch.manual_seed(0)
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), lw_window=W, lw_bins=BINS)).eval()
    plain.set_feature_stats(torch.from_numpy(noise_input(8000, seed=5)))
    with torch.no_grad():
        plain.out.bias.normal_(0.0, 1.0)
        plain.lw_inp.weight.normal_(0.0, 0.3)
    ext = grow.add_pitch_comb(plain).eval()
    assert dataclasses.asdict(ext.config) == {**dataclasses.asdict(plain.config), "pitch_comb": True}
    x = torch.from_numpy(noise_input())
    before = (ext.feat_mean.clone(), ext.lw_mean.clone())
    ext.set_feature_stats(x, pitch_comb_only=True)
    assert torch.equal(ext.feat_mean, before[0]) and torch.equal(ext.lw_mean, before[1])  # trained ones kept
    assert ext.pc_scale.min() > 0 and ext.pc_mean.abs().sum() > 0
    with torch.no_grad():
        a, b = plain(x), ext(x)
        assert float((a - b).abs().max()) <= 1e-3 * float(a.abs().max())  # mix sigmoid(-8) = 0.0003
        ext.pc_out.bias.zero_()
        assert float((plain(x) - ext(x)).abs().max()) > 1e-2 * float(a.abs().max())  # the comb acts once trained
    with pytest.raises(ValueError, match="already has the pitch comb"):
        grow.add_pitch_comb(ext)
    with pytest.raises(ValueError, match="pitch_comb needs the long-window features"):
        grow.add_pitch_comb(ReferenceEnhancer(EnhancerConfig(channels=8, dilations=(1,))))


def test_pitch_comb_streams_exactly(tmp_path):
    model = _pc_model()
    full = onnx_from_torch(model, tmp_path / "pc.onnx", dynamo=False)
    contract = streamify(full, tmp_path / "pc.stream.onnx")
    shapes = [tuple(s.shape[1:]) for s in contract.states]
    hop = model.config.hop_samples
    assert (hop, 2 * model.config.win_samples // hop - 1) in shapes  # the comb's framing history: 3 frames of 160
    assert len(shapes) == len(model.config.dilations) + 4  # analysis, long analysis, framing, blocks, synthesis
    # tests/reference_structure.py (which the bundled-model tests follow) describes this export, and INT8 keeps
    # the framing in float (the polyphase conv reads the audio input, the tap conv is a copy)
    import onnx
    from tests.reference_structure import PC_FRAMES_CONV, PC_POLY_CONV, ReferenceStructure

    from cosyedge.precision.qdq import float_nodes

    want = ReferenceStructure.from_config(dataclasses.asdict(model.config))
    assert want.pitch_comb and want.n_states == len(shapes)
    want.assert_matches(contract, tmp_path / "pc.stream.onnx")
    kept = float_nodes(onnx.load(str(tmp_path / "pc.stream.onnx")), "audio", "enhanced")
    assert kept[PC_POLY_CONV] == "first conv (reads the audio input)" and kept[PC_FRAMES_CONV] == "copy (one-hot weights)"
    assert not set(want.int8_convs) & set(kept)
    x = (_voice(0.3).numpy() + 0.3 * noise_input(4800)).astype(np.float32)
    assert_streams_exactly(model, tmp_path / "pc.stream.onnx", contract, x)


@pytest.mark.parametrize("hop,frames", [(160, 4), (3, 1), (5, 3)])
def test_causal_framing_equals_the_dense_identity_framing_conv(hop, frames):
    """CausalFraming gives exactly what CausalConv1dDownsample(1, K hop, hop, K hop) with an identity kernel gave
    (the pitch comb's framing before it), with samples picked by frame index through take()."""
    from cosyedge.train.nn import CausalConv1dDownsample, CausalFraming

    w2 = hop * frames
    dense = CausalConv1dDownsample(1, w2, hop, w2, bias=False)
    framing = CausalFraming(hop, frames)
    with torch.no_grad():
        dense.conv.weight.copy_(torch.eye(w2)[:, None, :])
        x = torch.randn(2, 1, hop * 11)
        want = dense(x)  # (N, K hop, T / hop), oldest sample first
        got = framing(x)
        assert got.shape == want.shape
        assert torch.equal(framing.take(got, torch.arange(w2)), want)
        idx = torch.randint(0, w2, (2, 5, 11))
        assert torch.equal(framing.take(got, idx), torch.gather(want, 1, idx))
    assert framing.state_frames == frames - 1 and framing.receptive_field == w2
    assert not any(p.requires_grad for p in framing.parameters())  # fixed bases
    with pytest.raises(ValueError, match="both must be >= 1"):
        CausalFraming(160, 0)


def test_a_checkpoint_with_the_dense_framing_conv_loads_and_a_corrupt_one_is_refused(tmp_path):
    """Weights saved before CausalFraming (key pc_frames.conv.weight, a (2W, 1, 2W) identity) load into the same
    function; any other tensor under that key is not a cosyedge checkpoint: a one-line ArtifactError."""
    from safetensors.torch import save_file

    from cosyedge.errors import ArtifactError
    from cosyedge.train.reference.model import LEGACY_FRAMING_KEY, load_reference, save_reference

    model = _pc_model()
    save_reference(model, tmp_path / "new.safetensors")
    meta = {"config": json.dumps(dataclasses.asdict(model.config))}
    legacy = {k: v for k, v in model.state_dict().items() if not k.startswith("pc_frames.")}
    w2 = 2 * model.config.win_samples
    legacy[LEGACY_FRAMING_KEY] = torch.eye(w2)[:, None, :].contiguous()
    save_file(legacy, str(tmp_path / "legacy.safetensors"), metadata=meta)
    x = torch.from_numpy(noise_input(3200, seed=2))
    with torch.no_grad():
        want = load_reference(tmp_path / "new.safetensors")(x)
        assert torch.equal(load_reference(tmp_path / "legacy.safetensors")(x), want)
    legacy[LEGACY_FRAMING_KEY] = 2.0 * legacy[LEGACY_FRAMING_KEY]
    save_file(legacy, str(tmp_path / "bad.safetensors"), metadata=meta)
    with pytest.raises(ArtifactError, match=r"pc_frames.conv.weight of shape \(640, 1, 640\) is not the identity"):
        load_reference(tmp_path / "bad.safetensors")
