"""The stream's start: NeMo's pre-emphasis (the first sample kept as it is) and left edge (replicate) pads stream
exactly, with both exporters, symbolic and fixed batch; left reflect pads are refused by name.

Each model is exported like a user would (TorchScript ``dynamo=False`` with ``dynamic_axes``, ``dynamo=True`` with
``dynamic_shapes``; batch symbolic or fixed at 1), streamified (its own proof runs), and streamed again independently
with :class:`~cosyedge.runtime.ort.OrtStreamSession` at several chunk lengths, one frame included
(:func:`tests.helpers.streams.chunked_equals_full`).
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify
from tests.helpers.streams import chunked_equals_full

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

PREEMPH = 0.97
EXPORTS = [(False, "N"), (False, 1), (True, "N"), (True, 1)]
"""(dynamo, batch): every exporter with a symbolic batch and a batch fixed at 1."""
FIXED_2 = [(False, 2), (True, 2)]
"""(dynamo, batch): every exporter with a batch fixed at 2 (streamify frees it, :mod:`cosyedge.surgery.batch`)."""


class PreEmphasis2(nn.Module):
    """NeMo ``AudioToMelSpectrogramPreprocessor`` pre-emphasis on (N, T) float32 samples, written as NeMo writes it
    (``nemo/collections/asr/parts/preprocessing/features.py``): ``x[:, 0]`` kept, then ``x[t] - a x[t - 1]``."""

    def forward(self, x):
        return torch.cat((x[:, 0].unsqueeze(1), x[:, 1:] - PREEMPH * x[:, :-1]), dim=1)


class PreEmphasis3(nn.Module):
    """The same on (N, 1, T) float32, the first sample kept by a slice ``x[..., :1]``; then a causal conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(1, 2, 5)

    def forward(self, x):
        y = torch.cat((x[:, :, :1], x[:, :, 1:] - PREEMPH * x[:, :, :-1]), dim=2)
        return self.conv(F.pad(y, (4, 0)))


class EdgePadConv(nn.Module):
    """(N, 2, T) -> ``F.pad(x, (k, 0), mode)`` (left only) -> optional per-frame ops -> Conv1d(k + 1) -> ReLU ->
    Conv1d(3, padding 1: one frame of look-ahead)."""

    def __init__(self, mode: str = "replicate", k: int = 3, post: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.mode, self.k, self.post = mode, k, post
        self.c = nn.Conv1d(2, 3, k + 1)
        self.c2 = nn.Conv1d(3, 2, 3, padding=1)

    def forward(self, x):
        h = F.pad(x, (self.k, 0), mode=self.mode)
        if self.post:
            h = torch.tanh(h) * 2.0
        return self.c2(torch.relu(self.c(h)))


class EdgePadNtc(nn.Module):
    """(N, T, 2) channels last: transposed to (N, 2, T), replicate-padded by 2 on the left, Conv1d(3), transposed
    back."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(2, 2, 3)

    def forward(self, x):
        return self.c(F.pad(x.transpose(1, 2), (2, 0), mode="replicate")).transpose(1, 2)


class EdgeHold(nn.Module):
    """(N, 2, T) -> ``F.pad(x, (2, 0), mode='replicate')[..., :-2]``: the input 2 frames late, its first frame held
    (no conv absorbs the pad: the output's delay line starts with copies of the first frame)."""

    def forward(self, x):
        return F.pad(x, (2, 0), mode="replicate")[..., :-2]


def _export(model: nn.Module, path, shape: tuple, time_axis: int, dynamo: bool, batch) -> str:
    """Export ``model`` with input ``x`` of ``shape`` (batch first), output ``y``; time dynamic, batch symbolic
    (``batch='N'``) or fixed at 1 or 2."""
    x = torch.randn(*shape)
    if (dynamo and batch == "N") or batch == 2:
        x = torch.cat([x, x])  # torch.export specializes an example batch of 1
    with torch.no_grad():
        if dynamo:
            dims = {time_axis: torch.export.Dim("T", min=8, max=100000)}
            if batch == "N":
                dims[0] = torch.export.Dim("N", max=64)
            torch.onnx.export(model.eval(), (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                              dynamic_shapes=(dims,), verbose=False)
        else:
            axes = {time_axis: "T", **({0: "N"} if batch == "N" else {})}
            torch.onnx.export(model.eval(), (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                              opset_version=17, dynamic_axes={"x": axes, "y": axes})
    return str(path)


def _check(model, tmp_path, shape, time_axis, dynamo, batch, chunks=(1, 7, 160), frames=1120, hop=160):
    """Export, streamify, stream at ``chunks`` ticks; returns (contract, max abs error vs the full graph, peak)."""
    src = _export(model, tmp_path / "m.onnx", shape, time_axis, dynamo, batch)
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=16000, hop_samples=hop)
    n = 1 if batch == 1 else 2
    full_shape = list(shape)
    full_shape[0], full_shape[time_axis] = n, frames
    x = (0.3 * np.random.default_rng(3).standard_normal(full_shape)).astype(np.float32)
    err = chunked_equals_full(src, tmp_path / "m.stream.onnx", x, list(chunks))
    return c, err


@pytest.mark.parametrize("dynamo,batch", EXPORTS + FIXED_2)
def test_pre_emphasis_n_t_streams_exactly(tmp_path, dynamo, batch):
    c, err = _check(PreEmphasis2(), tmp_path, (1, 64), 1, dynamo, batch)
    assert c.delay_samples == 0
    assert err <= 1e-6, err


@pytest.mark.parametrize("dynamo,batch", EXPORTS + FIXED_2)
def test_pre_emphasis_n_1_t_then_conv_streams_exactly(tmp_path, dynamo, batch):
    c, err = _check(PreEmphasis3(), tmp_path, (1, 1, 64), 2, dynamo, batch, chunks=(1, 7, 64, 160), frames=2240)
    assert c.delay_samples == 0
    assert err <= 1e-5, err


def test_first_frames_not_before_their_own_stream_are_refused(tmp_path):
    class Other(nn.Module):  # x[:, :1] of one input before a stream of another tensor: not the stream's start
        def forward(self, x):
            return torch.cat((2.0 * x[:, :, :1], x[:, :, 1:] - PREEMPH * x[:, :, :-1]), dim=2)

    src = _export(Other(), tmp_path / "o.onnx", (1, 1, 64), 2, False, "N")
    with pytest.raises(UsageError, match="concatenates non-zero frames to a stream"):
        streamify(src, tmp_path / "o.stream.onnx", sample_rate_hz=16000, hop_samples=160)


@pytest.mark.parametrize("dynamo,batch", EXPORTS + FIXED_2)
@pytest.mark.parametrize("post", [False, True])
def test_left_replicate_pad_streams_from_the_first_frame(tmp_path, dynamo, batch, post):
    c, err = _check(EdgePadConv(post=post), tmp_path, (1, 2, 64), 2, dynamo, batch)
    assert c.outputs[0].delay_frames == 1  # the second conv's one frame of look-ahead, nothing from the pad
    assert err <= 1e-5, err


@pytest.mark.parametrize("dynamo", [False, True])
def test_left_replicate_pad_channels_last_and_held_first_frame(tmp_path, dynamo):
    c, err = _check(EdgePadNtc(), tmp_path / "", (1, 64, 2), 1, dynamo, "N")
    assert c.delay_samples == 0 and err <= 1e-5, err
    (tmp_path / "hold").mkdir()
    c, err = _check(EdgeHold(), tmp_path / "hold", (1, 2, 64), 2, dynamo, 1)
    assert c.delay_samples == 0 and err <= 1e-6, err


@pytest.mark.parametrize("dynamo", [False, True])
def test_left_reflect_pad_refused_naming_the_frames_it_copies(tmp_path, dynamo):
    src = _export(EdgePadConv("reflect"), tmp_path / "r.onnx", (1, 2, 64), 2, dynamo, "N")
    with pytest.raises(UsageError, match=r"'reflect' mode on the left: its first 3 frames copy frames 3..1 of the sequence"):
        streamify(src, tmp_path / "r.stream.onnx", sample_rate_hz=16000, hop_samples=160)


class LookAheadThenPreEmphasis(nn.Module):
    """(N, 2, T) -> Conv1d(5, padding 2: two frames of look-ahead) -> pre-emphasis over time keeping the first frame
    -> Conv1d(3) with a causal left pad: the head's source is two frames late, so the head is aligned to it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Conv1d(2, 2, 5, padding=2), nn.Conv1d(2, 2, 3)

    def forward(self, x):
        h = self.a(x)
        y = torch.cat((h[..., :1], h[..., 1:] - PREEMPH * h[..., :-1]), dim=-1)
        return self.b(F.pad(y, (2, 0)))


@pytest.mark.parametrize("dynamo,batch", [(False, "N"), (True, 1)])
def test_pre_emphasis_after_a_look_ahead_streams_exactly(tmp_path, dynamo, batch):
    c, err = _check(LookAheadThenPreEmphasis(), tmp_path, (1, 2, 64), 2, dynamo, batch)
    assert c.outputs[0].delay_frames == 2
    assert err <= 1e-5, err


def test_replicate_pad_after_a_look_ahead_refused_by_name(tmp_path):
    class Late(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = nn.Conv1d(2, 2, 3, padding=1), nn.Conv1d(2, 2, 3)

        def forward(self, x):
            return self.b(F.pad(self.a(x), (2, 0), mode="replicate"))

    src = _export(Late(), tmp_path / "l.onnx", (1, 2, 64), 2, False, "N")
    with pytest.raises(UsageError, match=r"pads time in 'edge' \(replicate\) mode on the left after 1 frame of "
                                         r"look-ahead"):
        streamify(src, tmp_path / "l.stream.onnx", sample_rate_hz=16000, hop_samples=160)


def test_onnx_edge_pad_with_axes_on_channels_last_time(tmp_path):
    """A hand-built opset-18 graph: (1, T, 3) -> Pad(mode=edge, pads [2, 0] on axes [1]) -> Conv over time after a
    Transpose; batch fixed at 1 (only the time axis dynamic, as most streaming exports are)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Pad", ["x", "pads", "", "axes"], ["p"], mode="edge"),
             helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 2, 1]),
             helper.make_node("Conv", ["pt", "w"], ["c"], kernel_shape=[3]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 1])]
    g = helper.make_graph(nodes, "edge", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 3])],
                          [w, numpy_helper.from_array(np.array([2, 0], np.int64), "pads"),
                           numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "e.onnx")
    c = streamify(tmp_path / "e.onnx", tmp_path / "e.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert c.delay_samples == 0
    x = rng.standard_normal((1, 1120, 3)).astype(np.float32)
    assert chunked_equals_full(tmp_path / "e.onnx", tmp_path / "e.stream.onnx", x, [1, 7, 160]) <= 1e-5
