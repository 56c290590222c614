"""The reference enhancer's optional deep filter (``EnhancerConfig.df_order``, ``df_bins``).

Checks the filter against a direct NumPy evaluation of ``g X_t + sum_j c_j X_{t-j}`` on the STFT, that a
zero coefficient head is exactly the gain model (so ``train_reference.py --add-df`` resumes from the same
function), and that export -> streamify turns its tap buffer into one more state and streams exactly
(1e-5) with both exporters.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import assert_streams_exactly, noise_input  # noqa: E402

from cosyedge.export import onnx_from_torch  # noqa: E402
from cosyedge.train.reference.model import EnhancerConfig, ReferenceEnhancer  # noqa: E402
from cosyedge.surgery import streamify  # noqa: E402
from cosyedge.train.reference import grow  # noqa: E402

K, BINS = 3, 40


def _df_model(seed: int = 0) -> ReferenceEnhancer:
    """A small DF model whose coefficient head is random (non-zero), eval mode."""
    torch.manual_seed(seed)
    model = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), df_order=K, df_bins=BINS)).eval()
    with torch.no_grad():
        model.df_out.weight.normal_(0.0, 0.2)
        model.df_out.bias.normal_(0.0, 0.5)
    return model


def test_filter_equals_numpy_definition():
    model = _df_model()
    x = torch.from_numpy(noise_input(3200))
    with torch.no_grad():
        spec = model.analysis(x)
        g, c, _ = model.estimate(spec)
        out = model.apply_filter(spec, g, c).numpy()[0]
    f = model.config.n_bins
    s, g, c = spec.numpy()[0], g.numpy()[0], c.numpy()[0]
    xc = s[:f] + 1j * s[f:]  # (F, T) complex
    coef = c.reshape(2, BINS, K, -1)
    coef = coef[0] + 1j * coef[1]  # (BINS, K, T)
    want = g * xc
    t_len = xc.shape[-1]
    for j in range(K):
        past = np.concatenate([np.zeros((BINS, j)), xc[:BINS, : t_len - j]], axis=1)  # X_{t-j}, zero before 0
        want[:BINS] += coef[:, j] * past
    got = out[:f] + 1j * out[f:]
    assert np.abs(coef).max() > 0.1  # the filter really acts
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(got[BINS:] - g[BINS:] * xc[BINS:]).max() <= 1e-6  # bins above df_bins: gains only


def test_apply_filter_refuses_mismatched_coefficients():
    model = _df_model()
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2))).eval()
    with torch.no_grad():
        spec = model.analysis(torch.from_numpy(noise_input(1600)))
        g, c, _ = model.estimate(spec)
        with pytest.raises(ValueError, match="coefficients missing for a model with df_order 3"):
            model.apply_filter(spec, g, None)
        with pytest.raises(ValueError, match="coefficients given for a model with df_order 0"):
            plain.apply_filter(spec, g, c)


def test_bad_df_config_is_refused():
    with pytest.raises(ValueError, match="0 < df_bins <= 161"):
        ReferenceEnhancer(EnhancerConfig(df_order=3, df_bins=0))
    with pytest.raises(ValueError, match="need df_order >= 0"):
        ReferenceEnhancer(EnhancerConfig(df_order=-1))
    with pytest.raises(ValueError, match="df_bins = 0 when df_order = 0"):
        ReferenceEnhancer(EnhancerConfig(df_order=0, df_bins=64))


def test_add_deep_filter_keeps_the_function():
    torch.manual_seed(0)
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2))).eval()
    with torch.no_grad():
        plain.out.bias.normal_(0.0, 1.0)  # gains away from 0.5 everywhere
    ext = grow.add_deep_filter(plain, K, BINS).eval()
    assert dataclasses.asdict(ext.config) == {**dataclasses.asdict(plain.config), "df_order": K, "df_bins": BINS}
    x = torch.from_numpy(noise_input())
    with torch.no_grad():
        assert torch.equal(plain(x), ext(x))
        ext.df_out.bias.fill_(0.3)
        assert (plain(x) - ext(x)).abs().max() > 1e-3  # and the new head changes the output once trained
    with pytest.raises(ValueError, match="already has a deep filter"):
        grow.add_deep_filter(ext, K, BINS)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_deep_filter_streams_exactly(tmp_path, dynamo):
    model = _df_model()
    full = onnx_from_torch(model, tmp_path / "df.onnx", dynamo=dynamo)
    contract = streamify(full, tmp_path / "df.stream.onnx")
    shapes = [tuple(s.shape[1:]) for s in contract.states]
    assert (2 * BINS, K - 1) in shapes  # the tap buffer: K - 1 past frames of Re and Im of the DF bins
    assert len(shapes) == len(model.config.dilations) + 3  # analysis, blocks, taps, synthesis
    if not dynamo:  # tests/reference_structure.py describes the torchscript export (the bundled path)
        from tests.reference_structure import ReferenceStructure

        want = ReferenceStructure.from_config(dataclasses.asdict(model.config))
        assert (want.df_order, want.df_bins) == (K, BINS)
        want.assert_matches(contract, tmp_path / "df.stream.onnx")
    x = noise_input(4800)
    assert_streams_exactly(model, tmp_path / "df.stream.onnx", contract, x)
