"""Tiny PyTorch models for the export / streamify tests (random weights, no downloads).

``UserCausalNet`` stands for a user's own model: plain ``nn.Conv1d`` with ``F.pad`` left pads, dilations,
a grouped conv, a weight-normalised conv, a strided conv and a pixel-shuffle upsampler; it has no
``stream_metadata()``. The other models are deliberately not causal and must be refused.
All map (N, 1, T) float32 -> (N, 1, T) float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# (in, out, kernel, dilation, stride, groups) of UserCausalNet's padded convs, in graph order.
USER_CONVS = [
    (1, 8, 5, 1, 1, 1),
    (8, 8, 3, 2, 1, 1),
    (8, 8, 3, 3, 1, 4),
    (8, 16, 4, 1, 2, 1),  # strided: pad k - s = 2
    (16, 16, 3, 4, 1, 1),
    (16, 2, 2, 1, 1, 1),  # upsampler conv at the low rate (2 = 1 channel x factor 2)
]


def user_state_frames() -> list[tuple[int, int]]:
    """(C_in, P) per padded conv of :class:`UserCausalNet`: P = (k-1)*d, or k - s for the strided one."""
    return [(cin, (k - 1) * d if s == 1 else k - s) for cin, _, k, d, s, _ in USER_CONVS]


class UserCausalNet(nn.Module):
    """A user's causal conv net (total stride 2): x (N, 1, T), T even -> (N, 1, T)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(cin, cout, k, dilation=d, stride=s, groups=g)
                                   for cin, cout, k, d, s, g in USER_CONVS)
        self.convs[1] = nn.utils.parametrizations.weight_norm(self.convs[1])
        self.pads = [(k - 1) * d if s == 1 else k - s for _, _, k, d, s, _ in USER_CONVS]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (conv, pad) in enumerate(zip(self.convs, self.pads)):
            h = conv(F.pad(h, (pad, 0)))
            if i < len(self.convs) - 1:
                h = torch.tanh(h)
        n, _, t = h.shape  # (N, 2, T/2) -> (N, 1, T): time pixel-shuffle
        return h.reshape(n, 1, 2, t).transpose(2, 3).reshape(n, 1, 2 * t)


class SamePadNet(nn.Module):
    """Symmetric ``padding='same'`` conv: looks one sample ahead (not causal)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3, padding="same")
        self.out = nn.Conv1d(4, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.conv(x)))


class RightPadNet(nn.Module):
    """``F.pad(x, (0, 2))`` before a conv: uses the future (not causal)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3)
        self.out = nn.Conv1d(4, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.conv(F.pad(x, (0, 2)))))


class PointwiseNet(nn.Module):
    """Only 1x1 convs: nothing to stream (no causal pad)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class CausalTap3(nn.Module):
    """A causal 3-tap conv (seeded): (N, 1, T) -> (N, 1, T), two samples of left context."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(1, 1, 3)

    def forward(self, audio):
        return self.c(nn.functional.pad(audio, (2, 0)))


def export_plain(model: nn.Module, path, *, dynamo: bool = False, samples: int = 64) -> None:
    """Export like a user would (no cosyedge metadata): input ``x``, output ``y``, dynamic N and T."""
    x = torch.randn(2, 1, samples)
    with torch.no_grad():
        if dynamo:
            dim = torch.export.Dim
            torch.onnx.export(model.eval(), (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamic_shapes=({0: dim("batch"), 2: dim("time")},), dynamo=True, verbose=False,
                              external_data=False)
        else:
            torch.onnx.export(model.eval(), (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch", 2: "time"}, "y": {0: "batch", 2: "time"}},
                              dynamo=False, opset_version=17)


def run_streaming(onnx_path, contract, audio, chunk: int):
    """Stream ``audio`` (N, 1, T) float32 through a streaming ONNX with raw ONNX Runtime.

    Starts from ``StateSpec.zeros`` and feeds each ``state_out`` back as the matching ``state_in``;
    T must be a multiple of ``chunk``. Returns the concatenated audio output (N, 1, T') float32.
    Independent of cosyedge.runtime on purpose: it checks the ONNX itself.
    """
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    batch = audio.shape[0]
    states = {s.input: s.zeros(batch) for s in contract.states}
    outs = []
    for start in range(0, audio.shape[-1], chunk):
        feed = {contract.input: np.ascontiguousarray(audio[..., start:start + chunk], dtype=np.float32), **states}
        res = dict(zip(names, sess.run(None, feed)))
        outs.append(res[contract.output])
        states = {s.input: res[s.output] for s in contract.states}
    return np.concatenate(outs, axis=-1)


def assert_streams_exactly(model, onnx_path, contract, audio, chunks=(160, 480), atol: float = 1e-5) -> None:
    """Assert that streaming ``audio`` (N, 1, T) float32 through ``onnx_path`` in each chunk length (samples) of
    ``chunks`` (:func:`run_streaming`) gives ``model``'s full-sequence output: same shape, max abs error <= atol."""
    import numpy as np

    with torch.no_grad():
        ref = model(torch.from_numpy(audio)).numpy()
    for chunk in chunks:
        y = run_streaming(onnx_path, contract, audio, chunk)
        assert y.shape == ref.shape
        assert float(np.abs(y - ref).max()) <= atol, (chunk, float(np.abs(y - ref).max()))


def noise_input(n: int = 16000, seed: int = 1):
    """White noise at 0.1 RMS as a model input: float32 (1, 1, n), reproducible from ``seed``."""
    import numpy as np

    return (0.1 * np.random.default_rng(seed).standard_normal((1, 1, n))).astype(np.float32)


def train_reference_module():
    """``scripts/train_reference.py`` imported as a module (it is a script, not part of the package)."""
    from tests.scripts import load_script

    return load_script("train_reference")
