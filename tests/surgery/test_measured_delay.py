"""Streamify's delay is the true look-ahead, measured by future perturbation on every proof.

* A faithful GTCRN rebuild (strictly causal; ``nn.Unfold`` over frequency) streams with delay 0 (it was 10 frames,
  2560 samples: the decoder's causal transposed convs, a left pad then a begin crop, counted their crop as delay),
  also with two streams in a batch (the intra-frame RNN's zero initial state over batch x time was baked at batch 1);
* a CosyVoice3 CausalHiFT trunk gets 1027 samples, its look-ahead measured on the torch model (it was 1280: the
  delay rounded up to whole mel frames, and the iSTFT's zero first window tap counted);
* :func:`cosyedge.surgery.proof.measure_lookahead` on small graphs whose look-ahead is known by construction;
* a Gather along time whose indices are each frame's own (an Unfold over frequency) streams; an Unfold over time is
  refused by name.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from cosyedge.errors import UsageError
from cosyedge.surgery import proof, streamify
from cosyedge.surgery.walker import common_delay_ticks
from tests.helpers.streaming import stream_frames

HIFT_BEFORE = 1280
"""int: the CausalHiFT trunk's contract delay before the look-ahead was measured (samples): 1027 rounded up to 5 mel frames of 256."""
GTCRN_BEFORE = 2560
"""int: the GTCRN rebuild's contract delay before the look-ahead was measured (samples): 10 frames of 256."""


def _sess(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- GTCRN rebuild
def test_gtcrn_rebuild_streams_with_delay_0(tmp_path):
    from tests.helpers.gtcrn_hift import export_gtcrn, stft_frames

    model = export_gtcrn(tmp_path / "gtcrn.onnx")
    x = torch.randn(1, 257, 80, 2)
    x2 = x.clone()
    x2[:, :, 60:] = torch.randn(1, 257, 20, 2)
    with torch.no_grad():
        assert torch.equal(model(x)[:, :, :60], model(x2)[:, :, :60])  # strictly causal
    c = streamify(tmp_path / "gtcrn.onnx", tmp_path / "gtcrn.stream.onnx", sample_rate_hz=16000, hop_samples=256)
    assert c.delay_samples == 0 and c.outputs[0].delay_frames == 0  # was GTCRN_BEFORE
    la = c.proof["lookahead"]
    assert la["measured_samples"] == 0 and la["graph_delay_samples"] == 0 and la["equal"]
    assert la["outputs"]["enh"]["lookahead_frames"] <= 0
    spec = stft_frames(proof.demo_audio(16000, 83 * 256))[:, :, :84]  # real speech, 84 frames
    full = _sess(tmp_path / "gtcrn.onnx").run(None, {"spec": spec})[0]
    peak = float(np.abs(full).max())
    for chunk in (1, 4, 7):
        y = stream_frames(tmp_path / "gtcrn.stream.onnx", c, spec, 2, chunk)
        assert y.shape == full.shape
        assert float(np.abs(y - full).max()) <= 1e-5 * peak, chunk


# ---------------------------------------------------------------- CausalHiFT trunk
def test_hift_trunk_delay_is_its_measured_look_ahead(tmp_path):
    from tests.helpers.gtcrn_hift import HIFT_SAMPLES_PER_FRAME, export_hift

    model = export_hift(tmp_path / "hift.onnx")
    # the look-ahead from the torch model itself: change mel frames from k on, first changed sample
    mel = torch.randn(1, 80, 24)
    firsts = []
    for k in (10, 15, 20):
        m2 = mel.clone()
        m2[:, :, k:] = torch.randn(1, 80, 24 - k)
        with torch.no_grad():
            d = (model(mel) != model(m2)).reshape(-1)
        firsts.append(HIFT_SAMPLES_PER_FRAME * k - int(torch.nonzero(d)[0]))
    assert firsts == [1027] * 3
    c = streamify(tmp_path / "hift.onnx", tmp_path / "hift.stream.onnx", sample_rate_hz=22050,
                  hop_samples=HIFT_SAMPLES_PER_FRAME)
    la = c.proof["lookahead"]
    assert c.delay_samples == 1027 < HIFT_BEFORE
    assert la["measured_samples"] == la["graph_delay_samples"] == 1027 and la["equal"]
    assert c.outputs[0].delay_frames == 1027
    assert c.proof["max_abs"] <= 1e-6 and c.proof["chunks_ticks"] == [1, 3]


# ---------------------------------------------------------------- the measurement on known look-aheads
def _graph(path, nodes, inits, out_shape=("N", 1, "T")):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _conv(path, pads, kernel=3):
    w = np.random.default_rng(0).standard_normal((1, 1, kernel)).astype(np.float32) + 0.5
    return _graph(path, [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel], pads=list(pads))],
                  [numpy_helper.from_array(w, "w")])


def _deconv(path, pads, kernel=4, stride=2, first_tap_zero=False):
    w = np.random.default_rng(1).standard_normal((1, 1, kernel)).astype(np.float32) + 0.5
    if first_tap_zero:
        w[..., 0] = 0.0
    return _graph(path, [helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[kernel],
                                          strides=[stride], pads=list(pads))],
                  [numpy_helper.from_array(w, "w")], out_shape=("N", 1, "T2"))


@pytest.mark.parametrize("build, rate, frames, delay", [
    (lambda p: _conv(p, (0, 2)), 1, 2, 2),  # right pad 2: two frames ahead
    (lambda p: _conv(p, (2, 0)), 1, 0, 0),  # causal
    (lambda p: _conv(p, (3, 0)), 1, -1, 0),  # over-padded: the output lags one frame
    (lambda p: _deconv(p, (0, 0)), 2, 0, 0),  # ConvTranspose stride 2, no crop: causal
    # begin crop 1: one output frame ahead; the contract's delay is whole input samples: 1 sample = 2 frames
    (lambda p: _deconv(p, (1, 1)), 2, 1, 2),
    (lambda p: _deconv(p, (3, 1)), 2, 3, 4),
    (lambda p: _deconv(p, (1, 1), first_tap_zero=True), 2, 0, 0),  # ... unless its first tap is zero
])
def test_measure_lookahead_on_known_graphs(tmp_path, build, rate, frames, delay):
    src = build(tmp_path / "m.onnx")
    model = onnx.load(str(src))
    x = proof.demo_audio(16000, 400).reshape(1, 1, -1)
    full = {"y": _sess(src).run(None, {"x": x})[0]}
    got = proof.measure_lookahead(model, {"x": x}, full, {"x": (2, Fraction(1))}, {"y": (2, Fraction(rate))}, 2)
    assert got["y"].frames == frames and len(got["y"].points) == 4
    # and streamify's contract gives the smallest delay of whole input samples at least that (1000 Hz: a short proof)
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=1000, hop_samples=2)
    assert c.outputs[0].delay_frames == delay and c.delay_samples == delay // rate
    assert c.proof["lookahead"]["equal"] and c.proof["lookahead"]["measured_samples"] == delay // rate
    assert c.proof["lookahead"]["equal"] and c.proof["lookahead"]["outputs"]["y"]["lookahead_frames"] == frames


def test_perturbation_leaves_the_past_bit_identical():
    x = {"x": proof.demo_audio(16000, 1000).reshape(1, 1, -1)}
    ks = proof.perturbation_starts(1000, 160)
    assert ks == [160, 320, 480, 800]  # a fifth .. four fifths of 1000, down to multiples of the stride
    for k in ks:
        p = proof.perturbed(x, {"x": (2, Fraction(1))}, k)["x"]
        assert np.array_equal(p[..., :k], x["x"][..., :k]) and np.all(p[..., k:] != x["x"][..., k:])
        assert proof.first_change(x["x"], p, 2) == k


def test_common_delay_is_whole_samples_not_whole_ticks():
    assert common_delay_ticks([(Fraction(256), 1032)], Fraction(1, 256)) == Fraction(1032, 256)
    assert common_delay_ticks([(Fraction(256), 1032)]) == 5  # whole ticks (a waveform input: 1 sample a tick)
    assert common_delay_ticks([(Fraction(1, 160), 2), (Fraction(1), 3)]) == 320
    assert common_delay_ticks([(Fraction(1), -3)]) == 0


# ---------------------------------------------------------------- Unfold over frequency / time
class _Unfold(torch.nn.Module):
    """(N, 1, T) -> conv to (N, 4, T, 8) -> nn.Unfold(kernel) -> (N, 1, T') (time: a causal 3-tap conv first)."""

    def __init__(self, kernel):
        super().__init__()
        torch.manual_seed(0)
        self.k = kernel
        self.unfold = torch.nn.Unfold(kernel_size=kernel, padding=(0, 1))
        self.conv = torch.nn.Conv1d(1, 32, 3)
        self.out = torch.nn.Linear(4 * kernel[0] * kernel[1] * 8, 1)

    def forward(self, x):
        h = self.conv(torch.nn.functional.pad(x, (2, 0)))  # (N, 32, T)
        h = h.reshape(h.shape[0], 4, 8, h.shape[2]).transpose(2, 3)  # (N, 4, T, 8)
        u = self.unfold(h)  # (N, 4 k0 k1, T' * 8)
        u = u.reshape(u.shape[0], u.shape[1], -1, 8).permute(0, 2, 1, 3).reshape(u.shape[0], -1, u.shape[1] * 8)
        return self.out(u).transpose(1, 2)


def test_unfold_over_frequency_streams_over_time_refused_by_name(tmp_path):
    from tests.models_torch import export_plain

    export_plain(_Unfold((1, 3)), tmp_path / "f.onnx")
    c = streamify(tmp_path / "f.onnx", tmp_path / "f.stream.onnx", sample_rate_hz=1000, hop_samples=1)
    assert c.delay_samples == 0 and c.proof["max_abs"] <= 1e-5 and c.proof["lookahead"]["equal"]
    export_plain(_Unfold((3, 3)), tmp_path / "t.onnx")
    with pytest.raises(UsageError, match=r"Gather node '[^']*': gathers a window of frames along the time axis 2 "
                                         r"\(nn.Unfold / im2col over time"):
        streamify(tmp_path / "t.onnx", tmp_path / "t.stream.onnx", sample_rate_hz=1000, hop_samples=1)


def test_zero_taps_that_read_the_future_are_no_delay(tmp_path):
    """A symmetric Hann window ends at 0 (a Conv's last tap reads the future for nothing): a 'same' conv of 5 taps
    whose last tap is zero looks 1 frame ahead, not 2; the stream equals the full graph at that delay."""
    w = np.hanning(5).astype(np.float32).reshape(1, 1, 5)
    src = _graph(tmp_path / "m.onnx", [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5], pads=[2, 2])],
                 [numpy_helper.from_array(w, "w")])
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=1000, hop_samples=1)
    assert c.delay_samples == 1 and c.proof["lookahead"]["measured_samples"] == 1 and c.proof["lookahead"]["equal"]
    assert c.proof["max_abs"] <= 1e-6


def test_zero_first_tap_of_an_overlap_add_after_a_late_analysis_is_no_delay(tmp_path):
    """NSNet2 in miniature: an STFT-like strided Conv (8 taps, hop 4, window sqrt-Hann with zero ends) is
    one frame (4 samples) late; the synthesis ConvTranspose with the same window gives a frame's first sample no
    weight, so the output is 3 samples late, not 4 (was 4 with a warning); the stream equals the full graph there."""
    win = np.sqrt(np.hanning(8)).astype(np.float32)
    rng = np.random.default_rng(2)
    wa = (rng.standard_normal((3, 1, 8)) * win).astype(np.float32)
    ws = (rng.standard_normal((3, 1, 8)) * win).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["h"], kernel_shape=[8], strides=[4]),
             helper.make_node("ConvTranspose", ["h", "ws"], ["y"], kernel_shape=[8], strides=[4])]
    src = _graph(tmp_path / "m.onnx", nodes, [numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(ws, "ws")],
                 out_shape=("N", 1, "T2"))
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=1000, hop_samples=4)
    assert c.delay_samples == 3 and c.proof["lookahead"]["measured_samples"] == 3 and c.proof["lookahead"]["equal"]
    assert c.proof["max_abs"] <= 1e-5
