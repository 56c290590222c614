"""The stream's delay equals the full graph's measured look-ahead for conv encoders with look-ahead: symmetric pads,
strided convs (pads that round), transposed convs, explicit ``F.pad`` before a strided conv, both exporters.

Where changed input values cannot reach the first frames they truly reach (15 stacked 3-tap convs: the product of
their last taps is about 1e-8 of the output, below float32 resolution; the value test measures 11 samples), the
delay is checked against the **reach** of NaN inputs (:func:`cosyedge.surgery.proof.measure_lookahead` with
``nan=True``): 15, the delay the rules give. No conv encoder tried here gets more delay than that.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest

from cosyedge.surgery import proof, streamify
from tests.surgery.test_stream_start import _export

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

ENCODERS = {
    # name: ([(kind, kernel, stride, padding)], look-ahead in output frames)
    "sym_k5_x2": ([("c", 5, 1, 2), ("c", 5, 1, 2)], 4),
    "strided_k4s2p1": ([("c", 4, 2, 1)], 1),
    "strided_k3s2p1_then_k3p1": ([("c", 3, 2, 1), ("c", 3, 1, 1)], 1),
    "strided_x2_then_transposed": ([("c", 5, 2, 2), ("c", 4, 2, 1), ("t", 4, 2, 1), ("c", 3, 1, 1)], None),
    "k8s4p2_then_k3p1": ([("c", 8, 4, 2), ("c", 3, 1, 1)], 2),
}


class ConvEncoder(nn.Module):
    """(N, 4, T) -> for each layer Conv1d or ConvTranspose1d (4 -> 4 channels, kernel, stride, symmetric padding) ->
    tanh."""

    def __init__(self, layers):
        super().__init__()
        torch.manual_seed(0)
        self.m = nn.ModuleList((nn.Conv1d if kind == "c" else nn.ConvTranspose1d)(4, 4, k, stride=s, padding=p)
                               for kind, k, s, p in layers)

    def forward(self, x):
        for m in self.m:
            x = torch.tanh(m(x))
        return x


class PaddedStrided(nn.Module):
    """(N, 4, T) -> ``F.pad(x, (1, 3))`` -> Conv1d(4, stride 2) -> ``F.pad(h, (2, 1))`` -> Conv1d(3, stride 3) -> tanh:
    explicit pads (a Pad node from TorchScript) whose right side rounds up at each stride."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Conv1d(4, 4, 4, stride=2), nn.Conv1d(4, 4, 3, stride=3)

    def forward(self, x):
        return torch.tanh(self.b(F.pad(torch.tanh(self.a(F.pad(x, (1, 3)))), (2, 1))))


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("name", list(ENCODERS))
def test_conv_encoder_delay_is_its_measured_look_ahead(tmp_path, name, dynamo):
    layers, frames = ENCODERS[name]
    src = _export(ConvEncoder(layers).eval(), tmp_path / "e.onnx", (1, 4, 64), 2, dynamo, "N")
    c = streamify(src, tmp_path / "e.stream.onnx", sample_rate_hz=16000, hop_samples=1280, frames_per_hop=8)
    la = c.proof["lookahead"]
    assert la["measured_samples"] == la["graph_delay_samples"] == c.delay_samples, la
    if frames is not None:
        assert la["outputs"]["y"]["lookahead_frames"] == c.outputs[0].delay_frames == frames


@pytest.mark.parametrize("dynamo", [False, True])
def test_explicit_pads_before_strided_convs_delay_is_the_look_ahead(tmp_path, dynamo):
    src = _export(PaddedStrided().eval(), tmp_path / "p.onnx", (1, 4, 96), 2, dynamo, "N")
    c = streamify(src, tmp_path / "p.stream.onnx", sample_rate_hz=16000, hop_samples=960, frames_per_hop=6)
    la = c.proof["lookahead"]
    assert la["measured_samples"] == la["graph_delay_samples"] == c.delay_samples, la


class DeepStack(nn.Module):
    """(N, 1, T) waveform -> 15 x (Conv1d(3, padding 1), 8 channels, GELU): 15 samples of look-ahead, the last taps'
    product too small for a changed value to reach the first of them in float32."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.m = nn.ModuleList(nn.Conv1d(1 if i == 0 else 8, 8, 3, padding=1) for i in range(15))

    def forward(self, x):
        for m in self.m:
            x = F.gelu(m(x))
        return x


@pytest.mark.slow
def test_deep_stack_delay_is_the_nan_reach_where_values_fade(tmp_path):
    src = _export(DeepStack().eval(), tmp_path / "d.onnx", (1, 1, 3200), 2, False, "N")
    c = streamify(src, tmp_path / "d.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    la = c.proof["lookahead"]
    assert c.delay_samples == la["graph_delay_samples"] == 15 == la["reach_samples"]
    assert la["measured_samples"] < 15 and la["equal"]
    x = proof.demo_audio(16000, 4000).reshape(1, 1, -1).astype(np.float32)
    m = onnx.load(src)
    full = {"y": proof.session(m).run(None, {"x": x})[0]}
    axes = ({"x": (2, Fraction(1))}, {"y": (2, Fraction(1))})
    assert proof.measure_lookahead(m, {"x": x}, full, *axes, 1, nan=True)["y"].frames == 15
