"""Signal processing written as ONNX nodes, so a recipe's whole model is one graph every backend runs.

Each helper appends onnx-graphsurgeon nodes to a graph and returns the new tensors. Only ops that
:mod:`cosyedge.surgery` streams by rule are used: the STFT analysis is a strided ``Conv`` with fixed
windowed DFT bases, the synthesis a strided ``ConvTranspose`` with windowed inverse-DFT bases (overlap-add
in the kernel), so streamify turns the analysis into a context state and the synthesis into an overlap
state; features are elementwise.

Source: the fixed-basis STFT as convolutions is the reference model's (:mod:`cosyedge.models.stft`);
real DFT / inverse real DFT as in NumPy ``numpy.fft.rfft`` / ``irfft`` (numpy.org/doc/stable/reference/
routines.fft.html): the imaginary parts of the DC and Nyquist bins are ignored by the inverse.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import

gs = lazy_import("onnx_graphsurgeon")


def rdft_bases(window: np.ndarray, n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """Windowed real-DFT analysis bases for a ``Conv`` over a (N, 1, T) waveform.

    Args:
        window (np.ndarray): float (W,), W <= ``n_fft`` (frame = window * samples, zero-padded to n_fft).
        n_fft (int): FFT size.
    Returns:
        tuple[np.ndarray, np.ndarray]: ``(re, im)`` float32 (n_fft // 2 + 1, 1, W): conv with them gives
        Re and Im of ``numpy.fft.rfft(window * frame, n_fft)`` per frame.
    """
    w = np.asarray(window, np.float64)
    n = np.arange(w.size)
    k = np.arange(n_fft // 2 + 1)[:, None]
    ang = 2.0 * np.pi * k * n[None, :] / n_fft
    re = (np.cos(ang) * w)[:, None, :]
    im = (-np.sin(ang) * w)[:, None, :]
    return re.astype(np.float32), im.astype(np.float32)


def irdft_bases(window: np.ndarray, n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """Windowed inverse real-DFT synthesis bases for a ``ConvTranspose`` over (N, n_fft // 2 + 1, F) spectra.

    Args:
        window (np.ndarray): float (W,), the synthesis window (the first W samples of each inverse frame).
        n_fft (int): FFT size (even).
    Returns:
        tuple[np.ndarray, np.ndarray]: ``(re, im)`` float32 (n_fft // 2 + 1, 1, W): ConvTranspose of Re and
        Im with them, summed, is ``window * numpy.fft.irfft(X, n_fft)[:W]`` overlap-added at the stride.
    """
    w = np.asarray(window, np.float64)
    n = np.arange(w.size)
    bins = n_fft // 2 + 1
    k = np.arange(bins)[:, None]
    c = np.full((bins, 1), 2.0)
    c[0] = 1.0
    if n_fft % 2 == 0:
        c[-1] = 1.0
    ang = 2.0 * np.pi * k * n[None, :] / n_fft
    re = (c * np.cos(ang) * w / n_fft)[:, None, :]
    im = (-c * np.sin(ang) * w / n_fft)[:, None, :]
    im[0] = 0.0  # irfft ignores the imaginary part of DC ...
    if n_fft % 2 == 0:
        im[-1] = 0.0  # ... and of Nyquist
    return re.astype(np.float32), im.astype(np.float32)


class GraphBuilder:
    """Appends nodes to a gs graph with unique names under a prefix (``dsp/...``).

    Args:
        graph (gs.Graph): The graph to extend.
        prefix (str): Name prefix of the new nodes and tensors.
    """

    def __init__(self, graph: Any, prefix: str = "dsp"):
        self.graph, self.prefix, self._n = graph, prefix, 0

    def _name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}/{what}_{self._n}"

    def const(self, value, what: str = "const") -> Any:
        """A constant tensor (gs.Constant) holding ``value`` (a float becomes float32, an int int64)."""
        a = np.asarray(value)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        elif a.dtype.kind == "i":
            a = a.astype(np.int64)
        return gs.Constant(self._name(what), a)

    def op(self, op: str, inputs: list, attrs: dict | None = None, what: str | None = None,
           out: Any | None = None, dtype=np.float32) -> Any:
        """Append node ``op`` on ``inputs`` (tensors, or values made constants); return its output tensor."""
        ins = [x if isinstance(x, (gs.Variable, gs.Constant)) else self.const(x) for x in inputs]
        name = self._name(what or op.lower())
        y = out if out is not None else gs.Variable(name + "/out", dtype=dtype)
        self.graph.nodes.append(gs.Node(op, name=name, inputs=ins, outputs=[y], attrs=attrs or {}))
        return y

    def stft(self, x: Any, window: np.ndarray, n_fft: int, hop: int) -> tuple[Any, Any]:
        """Frames ``x`` (N, 1, T) float32 at ``hop`` with no padding: Re, Im (N, n_fft // 2 + 1, F) of the
        windowed rfft of frame f = x[f*hop : f*hop + W] (F = (T - W) // hop + 1)."""
        re_w, im_w = rdft_bases(window, n_fft)
        attrs = {"strides": [hop], "kernel_shape": [re_w.shape[-1]]}
        re = self.op("Conv", [x, self.const(re_w, "rdft_re")], attrs, what="stft_re")
        im = self.op("Conv", [x, self.const(im_w, "rdft_im")], attrs, what="stft_im")
        return re, im

    def istft(self, re: Any, im: Any, window: np.ndarray, n_fft: int, hop: int, out: Any | None = None) -> Any:
        """Overlap-add of ``window * irfft(Re + j Im)[:W]`` at ``hop``: (N, 1, (F - 1) * hop + W) float32."""
        re_w, im_w = irdft_bases(window, n_fft)
        attrs = {"strides": [hop], "kernel_shape": [re_w.shape[-1]]}
        a = self.op("ConvTranspose", [re, self.const(re_w, "irdft_re")], attrs, what="istft_re")
        b = self.op("ConvTranspose", [im, self.const(im_w, "irdft_im")], attrs, what="istft_im")
        return self.op("Add", [a, b], what="istft", out=out)

    def frame_rfft(self, frame: Any, window: np.ndarray, n_fft: int) -> tuple[Any, Any]:
        """Re, Im (..., n_fft // 2 + 1) of ``rfft(window * frame)`` for ONE frame (..., n_fft) float32, as two
        MatMuls with fixed bases (a one-hop graph: no framing conv)."""
        re_w, im_w = rdft_bases(window, n_fft)
        re = self.op("MatMul", [frame, self.const(re_w[:, 0, :].T.copy(), "rfft_re")], what="rfft_re")
        im = self.op("MatMul", [frame, self.const(im_w[:, 0, :].T.copy(), "rfft_im")], what="rfft_im")
        return re, im

    def frame_irfft(self, re: Any, im: Any, window: np.ndarray, n_fft: int, out: Any | None = None) -> Any:
        """``window * irfft(Re + j Im)`` (..., n_fft) float32 for ONE frame (Re, Im (..., n_fft // 2 + 1)), as two
        MatMuls with fixed bases and their sum."""
        ire, iim = irdft_bases(window, n_fft)
        return self.op("Add", [self.op("MatMul", [re, self.const(ire[:, 0, :].copy(), "irfft_re")]),
                               self.op("MatMul", [im, self.const(iim[:, 0, :].copy(), "irfft_im")])],
                       what="irfft", out=out)
