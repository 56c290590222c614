"""Differentiable DNSMOS P.835 (SIG, BAK, OVRL) in PyTorch, for training against it (needs torch).

A layer-for-layer port of the DNS-Challenge ``sig_bak_ovr.onnx`` that ``speechmos`` ships (the model
:class:`cosyedge.eval.metrics.DnsMos` scores with): its weights are read from that ONNX file with
``onnx.numpy_helper`` (no pickle), so the scores are the ones ``cosyedge eval`` reports, up to float
rounding (checked by ``tests/eval/test_dnsmos_torch.py`` against ONNX Runtime on real audio).

The ONNX graph: frames of 320 samples at hop 160 (two slices of the waveform, concatenated), two learnt
1x1 convs (161 x 320 each: a real and an imaginary "DFT"), power ``re^2 + im^2`` floored at 1e-12,
``log10``, then 7 conv layers (3x3, ReLU, three 2x2 max-pools), a global max over time and frequency and
three dense layers giving raw (sig, bak, ovr). The raw scores are mapped by the non-personalised quadratic
polynomials of ``speechmos`` / ``dnsmos_local.py``. The ONNX model is fixed to 144,160 samples (9.01 s,
900 frames); this port takes any length of at least 480 samples (the convs and the global max do not
depend on the length), so shorter training segments can be scored without tiling them.

Source: Reddy, Gopal & Cutler, "DNSMOS P.835", ICASSP 2022 (arXiv:2110.01763); model and polynomials from
https://github.com/microsoft/DNS-Challenge (DNSMOS/dnsmos_local.py) via ``speechmos``.
"""

from __future__ import annotations

import os

from cosyedge._lazy import require

POLY_SIG = (-0.08397278, 1.22083953, 0.0052439)
"""Quadratic polynomial (highest power first) mapping raw SIG to the reported SIG (dnsmos_local.py)."""
POLY_BAK = (-0.13166888, 1.60915514, -0.39604546)
"""Polynomial (highest power first) mapping raw BAK to the reported BAK."""
POLY_OVR = (-0.06766283, 1.11546468, 0.04602535)
"""Polynomial (highest power first) mapping raw OVRL to the reported OVRL."""

MIN_SAMPLES = 480
"""int: shortest input (samples at 16 kHz): two frames, so the first 3x3 conv sees time context."""


def sig_bak_ovr_path() -> str:
    """Path of the ``sig_bak_ovr.onnx`` that ``speechmos`` ships.

    Raises:
        DependencyError: ``speechmos`` is not installed.
    """
    spec = require("importlib.util").find_spec("speechmos")
    if spec is None or not spec.submodule_search_locations:
        require("speechmos")  # raises the one-line DependencyError
    return os.path.join(list(spec.submodule_search_locations)[0], "dnsmos_models", "sig_bak_ovr.onnx")


def _poly(p, x):
    return (p[0] * x + p[1]) * x + p[2]


def build_dnsmos(path: str | None = None):
    """The DNSMOS P.835 model as a frozen ``torch.nn.Module`` (eval mode, ``requires_grad`` off).

    ``module(x)`` maps ``x`` (B, T) float32 waveforms at 16 kHz in [-1, 1] (T >= :data:`MIN_SAMPLES`; a
    trailing part shorter than a hop is dropped, as the ONNX slices do) to (B, 3) float32 reported scores
    (SIG, BAK, OVRL on the 1..5 MOS scale, after the polynomials); ``module.raw(x)`` gives the raw network
    outputs. Gradients flow to ``x``.

    Args:
        path: the ONNX file (default :func:`sig_bak_ovr_path`).
    Raises:
        DependencyError: torch, onnx or speechmos missing.
        ValueError: the ONNX file is not the expected graph (another layer count or shape).
    """
    torch = require("torch")
    onnx = require("onnx")
    from onnx import numpy_helper

    model = onnx.load(path or sig_bak_ovr_path())
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    dense = [n for n in model.graph.node if n.op_type == "MatMul"]
    if len(convs) != 9 or len(dense) != 3:
        raise ValueError(f"{path}: not the DNSMOS sig_bak_ovr graph ({len(convs)} convs, {len(dense)} MatMuls; "
                         "expected 9 and 3)")
    nodes = list(model.graph.node)

    def bias_of(n):
        # a dense layer's bias is the constant of the Add that consumes its MatMul output
        for m in nodes:
            if m.op_type == "Add" and n.output[0] in m.input:
                return inits[[i for i in m.input if i in inits][0]]
        raise ValueError(f"no bias for {n.name}")

    class _DnsMos(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.re = torch.nn.Parameter(torch.from_numpy(inits[convs[0].input[1]][:, :, 0].copy()), False)
            self.im = torch.nn.Parameter(torch.from_numpy(inits[convs[1].input[1]][:, :, 0].copy()), False)
            self.convs = torch.nn.ModuleList()
            for n in convs[2:]:
                w, b = inits[n.input[1]], inits[n.input[2]]
                c = torch.nn.Conv2d(w.shape[1], w.shape[0], 3, padding=1)
                c.weight.data.copy_(torch.from_numpy(w.copy()))
                c.bias.data.copy_(torch.from_numpy(b.copy()))
                self.convs.append(c)
            self.dense = torch.nn.ModuleList()
            for n in dense:
                w = inits[n.input[1]]
                d = torch.nn.Linear(w.shape[0], w.shape[1])
                d.weight.data.copy_(torch.from_numpy(w.T.copy()))
                d.bias.data.copy_(torch.from_numpy(bias_of(n).copy()))
                self.dense.append(d)
            self.requires_grad_(False)
            self.eval()

        def raw(self, x):
            if x.dim() != 2 or x.shape[-1] < MIN_SAMPLES:
                raise ValueError(f"DNSMOS needs (B, T) audio with T >= {MIN_SAMPLES}, got {tuple(x.shape)}")
            n = x.shape[-1] // 160 - 1
            frames = torch.cat([x[:, : n * 160].reshape(-1, n, 160),
                                x[:, 160: (n + 1) * 160].reshape(-1, n, 160)], dim=-1)  # (B, n, 320)
            power = (frames @ self.re.T) ** 2 + (frames @ self.im.T) ** 2  # (B, n, 161)
            h = torch.log10(torch.clamp(power, min=1e-12))[:, None]  # (B, 1, n, 161)
            for i, conv in enumerate(self.convs):
                h = torch.relu(conv(h))
                if i in (3, 4, 5):  # max-pools after conv2d_3, conv2d_4, conv2d_5
                    h = torch.nn.functional.max_pool2d(h, 2)
            h = h.amax(dim=(2, 3))
            h = torch.relu(self.dense[0](h))
            h = torch.relu(self.dense[1](h))
            return self.dense[2](h)

        def forward(self, x):
            r = self.raw(x)
            return torch.stack([_poly(POLY_SIG, r[:, 0]), _poly(POLY_BAK, r[:, 1]), _poly(POLY_OVR, r[:, 2])], -1)

    return _DnsMos()
