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

from tests.helpers.streams import run_streaming  # noqa: F401 - torch-free; imported from here by older tests

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
    """``scripts/training/train_reference.py`` imported as a module (it is a script, not part of the package)."""
    from tests.scripts import load_script

    return load_script("training/train_reference")


class MelFrameStreamer(nn.Module):
    """An already-streaming encoder over one mel frame per call, as streaming ASR front ends are exported: a causal
    conv over time whose last ``kernel - 1`` frames are a cache, then a GRU whose hidden state is the second cache.

    forward(mel (N, 1, F), cache_conv (N, F, kernel - 1), cache_gru (1, N, H)) -> (enc (N, 1, H),
    new_cache_conv (N, F, kernel - 1), new_cache_gru (1, N, H)), float32 throughout.
    """

    def __init__(self, feats: int = 80, hidden: int = 32, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(feats, hidden, kernel)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.feats, self.hidden, self.kernel = feats, hidden, kernel

    def forward(self, mel: torch.Tensor, cache_conv: torch.Tensor, cache_gru: torch.Tensor):
        x = torch.cat([cache_conv, mel.transpose(1, 2)], dim=2)  # (N, F, kernel)
        h = torch.tanh(self.conv(x)).transpose(1, 2)  # (N, 1, H)
        y, new_gru = self.gru(h, cache_gru)
        return y, x[:, :, 1:], new_gru

    def zeros(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial caches at ``batch``: (N, F, kernel - 1) and (1, N, H) float32 zeros."""
        return torch.zeros(batch, self.feats, self.kernel - 1), torch.zeros(1, batch, self.hidden)


def export_one_frame(model: MelFrameStreamer, path, *, dynamo: bool, batch: int | None = None) -> None:
    """Export :class:`MelFrameStreamer` as its authors would: inputs ``mel``, ``cache_conv``, ``cache_gru``, outputs
    ``enc``, ``new_cache_conv``, ``new_cache_gru``; the batch fixed at ``batch`` or symbolic (None), time fixed at
    one frame per call. Weights are inlined (no ``.onnx.data``)."""
    n = batch or 2
    cc, cg = model.zeros(n)
    args = (torch.randn(n, 1, model.feats), cc, cg)
    names_in, names_out = ["mel", "cache_conv", "cache_gru"], ["enc", "new_cache_conv", "new_cache_gru"]
    with torch.no_grad():
        if dynamo:
            shapes = None
            if batch is None:
                b = torch.export.Dim("N")
                shapes = ({0: b}, {0: b}, {1: b})
            torch.onnx.export(model.eval(), args, str(path), input_names=names_in, output_names=names_out,
                              dynamic_shapes=shapes, dynamo=True, verbose=False, external_data=False)
        else:
            axes = None
            if batch is None:
                axes = {"mel": {0: "N"}, "cache_conv": {0: "N"}, "cache_gru": {1: "N"}, "enc": {0: "N"},
                        "new_cache_conv": {0: "N"}, "new_cache_gru": {1: "N"}}
            torch.onnx.export(model.eval(), args, str(path), input_names=names_in, output_names=names_out,
                              dynamic_axes=axes, dynamo=False, opset_version=17)


class WaveformNoChannel(nn.Module):
    """A waveform model without a channel axis, (N, T) float32 -> (N, T) float32: analysis conv of one hop's stride
    (window two hops), tanh, synthesis transposed conv, the first hop chomped (as ``_Waveform2d`` of the audit
    tests, which used to be refused with 'output does not grow')."""

    def __init__(self, hop: int = 160):
        super().__init__()
        torch.manual_seed(0)
        self.hop = hop
        self.enc = nn.Conv1d(1, 8, 2 * hop, stride=hop)
        self.dec = nn.ConvTranspose1d(8, 1, 2 * hop, stride=hop)

    def forward(self, x):
        y = self.dec(torch.tanh(self.enc(F.pad(x[:, None], (self.hop, 0)))))[..., :-self.hop]
        return y[:, 0]


class ConvGruGain(nn.Module):
    """Conv (stride one hop) -> GRU -> Linear -> sigmoid gain -> transposed conv: (N, 1, T) -> (N, 1, T), hop 80.
    Its dynamo export keeps the example's frame count in value_info, which ONNX Runtime bakes into a fused Gemm
    reshape: the graph as exported runs only at its trace length."""

    def __init__(self, hop: int = 80, c: int = 24):
        super().__init__()
        torch.manual_seed(0)
        self.hop = hop
        self.enc = nn.Conv1d(1, c, 2 * hop, stride=hop)
        self.gru = nn.GRU(c, c, batch_first=True)
        self.g = nn.Linear(c, c)
        self.dec = nn.ConvTranspose1d(c, 1, 2 * hop, stride=hop)

    def forward(self, x):
        z = self.enc(F.pad(x, (self.hop, 0)))
        h, _ = self.gru(z.transpose(1, 2))
        return self.dec(z * torch.sigmoid(self.g(h)).transpose(1, 2))[..., :-self.hop]


def export_in_child(call: str) -> None:
    """Run one export statement (Python source, e.g. ``"export_one_frame(MelFrameStreamer(), 'm.onnx', dynamo=True)"``)
    in a fresh Python process with this module's names imported, and wait for it.

    torch 2.13: after one ``torch.onnx.export(dynamo=True)`` of a model with ``nn.GRU``, every later dynamo export of a
    GRU over a dynamic time axis in the same process fails in ``torch.export`` ("The size of tensor a (24) must match
    the size of tensor b (72)"); exporting GRUs in a child keeps the test process clean for the tests after it.

    Raises:
        RuntimeError: the child failed (its last stderr lines).
    """
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    code = f"import sys; sys.path.insert(0, {root!r}); import torch; from tests.models_torch import *; {call}"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    if res.returncode:
        raise RuntimeError(f"export in a child process failed: {res.stderr.strip().splitlines()[-3:]}")
