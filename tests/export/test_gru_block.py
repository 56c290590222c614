"""The reference enhancer's optional recurrent block (``EnhancerConfig.gru_hidden`` / ``gru_layers``).

Checks that a bad config is refused, that the block is a residual on the conv features (the model with its
projection zeroed equals the model without the block, weights shared), its MAC count, that
``train_reference.py --gru`` builds it and refuses bad combinations in one line, that a checkpoint with it
round-trips through safetensors, and that export -> streamify streams exactly (1e-5; one hidden state per
GRU layer becomes one more streaming state) over real-length input in two chunk sizes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.models_torch import assert_streams_exactly, noise_input  # noqa: E402

from cosyedge.export import onnx_from_torch  # noqa: E402
from cosyedge.train.reference.model import (EnhancerConfig, ReferenceEnhancer, count_macs_per_second,  # noqa: E402
                                       load_reference, save_reference)
from cosyedge.surgery import streamify  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _gru_model(layers: int = 2, seed: int = 0) -> ReferenceEnhancer:
    torch.manual_seed(seed)
    model = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2), gru_hidden=24, gru_layers=layers)).eval()
    model.set_feature_stats(torch.from_numpy(noise_input(8000, seed=5)))
    return model


def test_bad_gru_config_is_refused():
    with pytest.raises(ValueError, match="need gru_hidden >= 0 and gru_layers >= 1"):
        ReferenceEnhancer(EnhancerConfig(gru_hidden=-1))
    with pytest.raises(ValueError, match="need gru_hidden >= 0 and gru_layers >= 1"):
        ReferenceEnhancer(EnhancerConfig(gru_hidden=8, gru_layers=0))


def test_gru_block_is_a_residual_on_the_conv_features():
    model = _gru_model()
    plain = ReferenceEnhancer(EnhancerConfig(channels=16, dilations=(1, 2))).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("gru")})
    x = torch.from_numpy(noise_input(4800))
    with torch.no_grad():
        a, b = plain(x), model(x)
        assert float((a - b).abs().max()) > 1e-3 * float(a.abs().max())  # the random block acts
        model.gru_out.weight.zero_()
        model.gru_out.bias.zero_()
        assert torch.equal(plain(x), model(x))


def test_gru_macs_and_checkpoint_round_trip(tmp_path):
    base = EnhancerConfig(channels=16, dilations=(1, 2))
    cfg = EnhancerConfig(channels=16, dilations=(1, 2), gru_hidden=24, gru_layers=2)
    c, h = 16, 24
    per_frame = 3 * (c * h + h * h) + 3 * (2 * h * h) + h * c  # layer 1, layer 2, projection back to C
    assert count_macs_per_second(cfg) - count_macs_per_second(base) == pytest.approx(per_frame * 100)
    model = _gru_model()
    save_reference(model, tmp_path / "g.safetensors")
    back = load_reference(tmp_path / "g.safetensors")
    assert back.config == model.config
    x = torch.from_numpy(noise_input(3200))
    with torch.no_grad():
        assert torch.equal(back(x), model(x))


@pytest.mark.parametrize("layers", [1, 2])
def test_gru_block_streams_exactly(tmp_path, layers):
    model = _gru_model(layers)
    full = onnx_from_torch(model, tmp_path / "g.onnx", dynamo=False)
    contract = streamify(full, tmp_path / "g.stream.onnx")
    shapes = [tuple(s.shape[1:]) for s in contract.states]
    assert shapes.count((1, 24)) == layers  # one hidden state per layer (the block's only memory)
    assert len(shapes) == len(model.config.dilations) + 2 + layers  # analysis, blocks, GRU layers, synthesis
    x = noise_input(16000, seed=3)  # 1 s: 100 frames, the GRU state carried across every chunk boundary
    assert_streams_exactly(model, tmp_path / "g.stream.onnx", contract, x, chunks=(160, 480))


@pytest.mark.parametrize("extra, message", [
    (["--gru", "128"], "expected H,LAYERS"),
    (["--gru", "128,0"], "need H >= 1 and LAYERS >= 1"),
    (["--gru", "64,1", "--init", "x.safetensors"], "--pitch-comb and --gru build a model from scratch"),
    (["--pitch-comb"], "--pitch-comb needs --lw"),
])
def test_train_reference_gru_and_pitch_comb_flags_are_checked(extra, message):
    script = ROOT / "scripts" / "training" / "train_reference.py"
    r = subprocess.run([sys.executable, str(script), "--minutes", "1", *extra], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
