"""Pass ``dft_fft`` (ONNX Runtime CPU): a one-frame windowed real-DFT ``Conv`` / ``ConvTranspose`` becomes an FFT.

Recipes write the STFT as a strided ``Conv`` whose weights are windowed DFT bases
(:func:`cosyedge.recipes.dsp.rdft_bases`, (2B, 1, K), B = K/2 + 1) and the inverse as a ``ConvTranspose`` with
:func:`cosyedge.recipes.dsp.irdft_bases`. On one frame per step that is a dense (2B x K) matrix-vector product:
for DeepFilterNet3 (K = 960) 3.7 MB of weights read per transform per hop, the two largest nodes of the step
(about 0.44 ms of 2.4 ms per hop in ONNX Runtime's profile). :func:`fft_dft_convs` replaces each such node, when
its weights are recognised as exactly those bases and the step has one frame, by a two-stage Cooley-Tukey FFT
(K = N1 N2, e.g. 30 x 32) written as small ONNX ``MatMul`` s with constant complex-as-real matrices, an elementwise
twiddle ``Mul``, one ``ReduceSum`` and one ``Transpose`` (the index reversal of the factorisation): about
12 K + 4 N1 N2 (N1 + N2) multiply-adds and 60 kB of constants instead of 2 B K and 3.7 MB.

Recognition: the window is read back from the DC row (``W[0, 0, :]``; for the inverse, with its bin weight 1),
the bases are rebuilt in float64 from it and must equal the weights to float32 rounding (relative 1e-6 of
the largest weight); anything else (another basis, a bias, groups, dilation, pads, several frames per step) is
left as it is. The FFT's rounding differs from the dense product's: on DeepFilterNet3 over the whole bundled
recording the output is within 120 dB of the unrewritten graph (``tests/passes/test_dft_to_fft.py``).

Pass ``dft_fft`` (:data:`cosyedge.passes.SESSION_PASSES`, :data:`cosyedge.passes.POOL_PASSES`): like
:mod:`cosyedge.passes.conv_sum` it is applied in memory by :class:`~cosyedge.runtime.ort.OrtStreamSession` and
:class:`~cosyedge.runtime.pool.StreamPool` (CPU provider), never written into an artifact.

Source: J. W. Cooley, J. W. Tukey, "An algorithm for the machine calculation of complex Fourier series",
Math. Comp. 19 (1965); the "four-step" form (column DFTs, twiddles, row DFTs): D. H. Bailey, "FFTs in external
or hierarchical memory", J. Supercomputing 4 (1990).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.passes.edit import DEFAULT_DOMAINS, copy_model, node_attrs, spliced
from cosyedge.passes.shapes import known_shapes

MIN_FFT_SIZE = 512
"""int: smallest transform rewritten. Below it the dense product is small (K = 320: 0.4 MB) and the rewrite's
other rounding is not worth it: on the bundled reference model (K = 320 analysis) the FFT moved the output to
112 dB from the unrewritten graph, under the 120 dB rule for FP32 graph rewrites; DeepFilterNet3 (K = 960) stays at 128 dB."""
MATCH_RTOL = 1e-6
"""float: largest difference between the weights and the rebuilt bases, relative to the largest weight."""


def split_size(k: int) -> tuple[int, int] | None:
    """The factorisation ``k = n1 * n2`` with ``n1 <= n2`` closest to a square (``None`` when ``k`` is prime or
    smaller than 16: nothing to gain)."""
    if k < 16:
        return None
    for n1 in range(int(np.sqrt(k)), 1, -1):
        if k % n1 == 0:
            return n1, k // n1
    return None


def analysis_window(w: np.ndarray) -> np.ndarray | None:
    """The window ``g`` (float64 (K,)) if ``w`` (float32 (2B, 1, K)) is ``rdft_bases(g, K)`` stacked (re; im), else
    ``None``."""
    if w.ndim != 3 or w.shape[1] != 1 or w.shape[0] != 2 * (w.shape[2] // 2 + 1):
        return None
    k_len = w.shape[2]
    g = w[0, 0].astype(np.float64)
    n = np.arange(k_len)
    ang = 2.0 * np.pi * np.arange(k_len // 2 + 1)[:, None] * n[None, :] / k_len
    want = np.concatenate([np.cos(ang) * g, -np.sin(ang) * g])
    ok = np.max(np.abs(want - w[:, 0].astype(np.float64))) <= MATCH_RTOL * max(np.max(np.abs(w)), 1e-30)
    return g if ok else None


def synthesis_window(w: np.ndarray) -> np.ndarray | None:
    """The window ``g`` (float64 (K,)) if ``w`` (float32 (2B, 1, K)) holds ``irdft_bases``-form weights
    ``c_k cos(2 pi k n / K) g[n]`` and ``-c_k sin(...) g[n]`` (c = 1 at DC and Nyquist, 2 between; the sine rows of
    DC and Nyquist zero), else ``None``. (``irdft_bases(window, K)`` is this with ``g = window / K``.)"""
    if w.ndim != 3 or w.shape[1] != 1 or w.shape[0] != 2 * (w.shape[2] // 2 + 1) or w.shape[2] % 2:
        return None
    k_len = w.shape[2]
    bins = k_len // 2 + 1
    g = w[0, 0].astype(np.float64)
    c = np.full((bins, 1), 2.0)
    c[0] = c[-1] = 1.0
    ang = 2.0 * np.pi * np.arange(bins)[:, None] * np.arange(k_len)[None, :] / k_len
    im = -c * np.sin(ang) * g
    im[0] = im[-1] = 0.0
    want = np.concatenate([c * np.cos(ang) * g, im])
    ok = np.max(np.abs(want - w[:, 0].astype(np.float64))) <= MATCH_RTOL * max(np.max(np.abs(w)), 1e-30)
    return g if ok else None


def forward_constants(g: np.ndarray, n1: int, n2: int) -> dict[str, np.ndarray]:
    """Constants of the forward FFT of a real frame of K = n1 n2 samples (n = n1' + n1 n2', k = k2 + n2 k1').

    Returns:
        dict[str, np.ndarray]: float32 ``win`` (n2, n1) the window; ``a`` (4 n2, n2) stage 1 (rows: Re, Im, -Im,
        Re of the length-n2 DFT); ``tw`` (4 n2, n1) the twiddles (Re, Re, Im, Im); ``b`` (4, n1, 2 n1) stage 2
        (per block [cos | -sin], [sin | cos], [cos | -sin], [sin | cos]).
    """
    k_len = n1 * n2
    th = 2.0 * np.pi * np.outer(np.arange(n2), np.arange(n2)) / n2  # (k2, n2')
    cr, ci = np.cos(th), -np.sin(th)
    ph = 2.0 * np.pi * np.outer(np.arange(n2), np.arange(n1)) / k_len  # (k2, n1')
    tr, ti = np.cos(ph), -np.sin(ph)
    ps = 2.0 * np.pi * np.outer(np.arange(n1), np.arange(n1)) / n1  # (n1', k1')
    c, s = np.cos(ps), np.sin(ps)
    b0, b1 = np.concatenate([c, -s], 1), np.concatenate([s, c], 1)
    f32 = np.float32
    return {"win": g.reshape(n2, n1).astype(f32), "a": np.concatenate([cr, ci, -ci, cr]).astype(f32),
            "tw": np.concatenate([tr, tr, ti, ti]).astype(f32), "b": np.stack([b0, b1, b0, b1]).astype(f32)}


def inverse_constants(g: np.ndarray, n1: int, n2: int) -> dict[str, np.ndarray]:
    """Constants of the windowed inverse real FFT of B = K/2 + 1 bins to K = n1 n2 samples (k = k2 + n2 k1,
    n = n1' + n1 n2'; the bins padded to ``rows`` = ceil(B / n2) rows of n2).

    Returns:
        dict[str, np.ndarray]: float32 ``c`` (2, rows n2) the bin weights (1 at DC and Nyquist, 2 between, 0 for
        the ignored imaginary parts and the padding); ``a`` (4 n1, 2 rows) stage 1 over k1 (rows Re, Im, Re, Im of
        the length-n1 inverse DFT, columns Re | Im inputs); ``tw`` (4 n1, n2) the twiddles with signs (Re, -Im,
        -Im, -Re); ``d`` (4, n2, n2) stage 2, real part only (cos, cos, sin, sin); ``win`` (n2, n1) the window.
    """
    k_len = n1 * n2
    bins = k_len // 2 + 1
    rows = -(-bins // n2)
    c = np.zeros((2, rows * n2))
    c[:, :bins] = 2.0
    c[:, 0] = c[:, bins - 1] = 1.0
    c[1, 0] = c[1, bins - 1] = 0.0
    ps = 2.0 * np.pi * np.outer(np.arange(n1), np.arange(rows)) / n1  # (n1', k1)
    er, ei = np.cos(ps), np.sin(ps)
    a_re = np.concatenate([er, -ei], 1)  # Re(E Y) = Er Yr - Ei Yi
    a_im = np.concatenate([ei, er], 1)  # Im(E Y) = Ei Yr + Er Yi
    ph = 2.0 * np.pi * np.outer(np.arange(n1), np.arange(n2)) / k_len  # (n1', k2)
    tr, ti = np.cos(ph), np.sin(ph)
    th = 2.0 * np.pi * np.outer(np.arange(n2), np.arange(n2)) / n2  # (k2, n2')
    f32 = np.float32
    return {"c": c.astype(f32), "a": np.concatenate([a_re, a_im, a_re, a_im]).astype(f32),
            "tw": np.concatenate([tr, -ti, -ti, -tr]).astype(f32),
            "d": np.stack([np.cos(th), np.cos(th), np.sin(th), np.sin(th)]).astype(f32),
            "win": g.reshape(n2, n1).astype(f32)}


def rfft_numpy(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The forward rewrite's arithmetic in numpy (float64), for checking: ``x`` (K,) -> (2B,) [Re; Im] of
    ``rfft(g * x)``."""
    k_len = x.size
    n1, n2 = split_size(k_len)
    cst = {k: v.astype(np.float64) for k, v in forward_constants(g, n1, n2).items()}
    p = (cst["a"] @ (x.reshape(n2, n1) * cst["win"])) * cst["tw"]  # (4 n2, n1)
    y = np.einsum("bij,bjk->ik", p.reshape(4, n2, n1), cst["b"])  # (n2, 2 n1) [k2, (ri, k1)]
    full = y.reshape(n2, 2, n1).transpose(1, 2, 0).reshape(2, k_len)
    return full[:, : k_len // 2 + 1].reshape(-1)


def irfft_numpy(spec: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The inverse rewrite's arithmetic in numpy (float64), for checking: ``spec`` (2B,) [Re; Im] -> (K,)."""
    bins = spec.size // 2
    k_len = 2 * (bins - 1)
    n1, n2 = split_size(k_len)
    cst = {k: v.astype(np.float64) for k, v in inverse_constants(g, n1, n2).items()}
    rows = cst["c"].shape[1] // n2
    y = np.zeros((2, rows * n2))
    y[:, :bins] = spec.reshape(2, bins)
    y = (y * cst["c"]).reshape(2 * rows, n2)
    q = (cst["a"] @ y) * cst["tw"]  # (4 n1, n2)
    out = np.einsum("bij,bjk->ik", q.reshape(4, n1, n2), cst["d"])  # (n1', n2')
    return (out.T * cst["win"]).reshape(-1)


def fft_dft_convs(model: Any, input_shapes: dict[str, list[int]]) -> tuple[Any, int]:
    """Replace one-frame windowed real-DFT ``Conv`` / ``ConvTranspose`` nodes by FFTs (module docstring).

    A ``Conv`` is replaced when its input is (N, 1, K) at ``input_shapes`` (one frame), its weight an initializer
    recognised by :func:`analysis_window`, no bias, pads 0, dilation 1, group 1. A ``ConvTranspose`` when its
    input is (N, 2B, 1), its weight recognised by :func:`synthesis_window`, no bias, pads 0, no output padding,
    group 1. K must factor (:func:`split_size`). Works on a copy.

    Args:
        model (onnx.ModelProto): An FP32 model.
        input_shapes (dict[str, list[int]]): Concrete shape of every graph input.
    Returns:
        tuple[onnx.ModelProto, int]: The rewritten copy and the number of nodes replaced (0: the copy equals the
        input).
    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    from onnx import numpy_helper

    m = copy_model(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    cands: list = []
    new_inits: list = []
    replace: dict[int, list] = {}

    for idx, node in enumerate(g.node):
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in ("Conv", "ConvTranspose"):
            continue
        if len(node.input) != 2 or node.input[1] not in inits:
            continue
        at = node_attrs(node)
        if (any(p != 0 for p in at.get("pads", [0])) or any(d != 1 for d in at.get("dilations", [1]))
                or at.get("group", 1) != 1 or any(p != 0 for p in at.get("output_padding", [0]))
                or "output_shape" in at or at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        if w.dtype != np.float32 or w.ndim != 3:
            continue
        k_len = w.shape[2]
        split = split_size(k_len)
        if split is None or k_len < MIN_FFT_SIZE:
            continue
        win = analysis_window(w) if node.op_type == "Conv" else synthesis_window(w)
        if win is None:
            continue
        cands.append((idx, node, win, split))
    if not cands:
        return m, 0
    shapes = known_shapes(m, [node.input[0] for _, node, _, _ in cands], input_shapes)
    for idx, node, win, split in cands:
        k_len = split[0] * split[1]
        x_shape = shapes.get(node.input[0])
        want = (1, k_len) if node.op_type == "Conv" else (2 * (k_len // 2 + 1), 1)
        if x_shape is None or len(x_shape) != 3 or tuple(x_shape[1:]) != want:
            continue
        n1, n2 = split
        base = f"{node.name or node.output[0]}/fft"
        if node.op_type == "Conv":
            nodes, consts = _forward_nodes(node.input[0], node.output[0], base, win, n1, n2)
        else:
            nodes, consts = _inverse_nodes(node.input[0], node.output[0], base, win, n1, n2)
        new_inits += [numpy_helper.from_array(v, k) for k, v in consts.items()]
        replace[idx] = nodes  # by index: protobuf wrappers' id() is not stable
    return spliced(m, replace, new_inits)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`fft_dft_convs` at ``target.shapes`` (the nodes it
    writes copy the batch axis: valid at any batch)."""
    out, n = fft_dft_convs(model, target.shapes)
    return out, {"dft_fft": n}


def _forward_nodes(x: str, y: str, base: str, win: np.ndarray, n1: int, n2: int) -> tuple[list, dict]:
    """Nodes (N, 1, K) ``x`` -> (N, 2B, 1) ``y`` and their constants (name -> array)."""
    from onnx import helper

    k_len = n1 * n2
    bins = k_len // 2 + 1
    cst = {f"{base}/{k}": v for k, v in forward_constants(win, n1, n2).items()}
    i64 = np.int64
    cst.update({f"{base}/shape_in": np.asarray([0, n2, n1], i64),
                f"{base}/shape_p": np.asarray([0, 4, n2, n1], i64),
                f"{base}/axes": np.asarray([1], i64),
                f"{base}/shape_y": np.asarray([0, n2, 2, n1], i64),
                f"{base}/shape_full": np.asarray([0, 2, k_len], i64),
                f"{base}/starts": np.asarray([0], i64), f"{base}/ends": np.asarray([bins], i64),
                f"{base}/axis2": np.asarray([2], i64),
                f"{base}/shape_out": np.asarray([0, 2 * bins, 1], i64)})
    t = lambda s: f"{base}/{s}"  # noqa: E731
    nodes = [
        helper.make_node("Reshape", [x, t("shape_in")], [t("frame")], name=t("frame")),  # (N, n2, n1)
        helper.make_node("Mul", [t("frame"), t("win")], [t("windowed")], name=t("windowed")),
        helper.make_node("MatMul", [t("a"), t("windowed")], [t("stage1")], name=t("stage1")),  # (N, 4 n2, n1)
        helper.make_node("Mul", [t("stage1"), t("tw")], [t("twiddled")], name=t("twiddled")),
        helper.make_node("Reshape", [t("twiddled"), t("shape_p")], [t("blocks")], name=t("blocks")),
        helper.make_node("MatMul", [t("blocks"), t("b")], [t("stage2")], name=t("stage2")),  # (N, 4, n2, 2 n1)
        helper.make_node("ReduceSum", [t("stage2"), t("axes")], [t("sum")], name=t("sum"), keepdims=0),
        helper.make_node("Reshape", [t("sum"), t("shape_y")], [t("y4")], name=t("y4")),  # (N, n2, 2, n1)
        helper.make_node("Transpose", [t("y4")], [t("natural")], name=t("natural"), perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", [t("natural"), t("shape_full")], [t("full")], name=t("full")),  # (N, 2, K)
        helper.make_node("Slice", [t("full"), t("starts"), t("ends"), t("axis2")], [t("half")], name=t("half")),
        helper.make_node("Reshape", [t("half"), t("shape_out")], [y], name=t("out")),
    ]
    return nodes, cst


def _inverse_nodes(x: str, y: str, base: str, win: np.ndarray, n1: int, n2: int) -> tuple[list, dict]:
    """Nodes (N, 2B, 1) ``x`` -> (N, 1, K) ``y`` and their constants (name -> array)."""
    from onnx import helper

    k_len = n1 * n2
    bins = k_len // 2 + 1
    cst_np = inverse_constants(win, n1, n2)
    rows = cst_np["c"].shape[1] // n2
    cst = {f"{base}/{k}": v for k, v in cst_np.items()}
    i64 = np.int64
    cst.update({f"{base}/shape_in": np.asarray([0, 2, bins], i64),
                f"{base}/pads": np.asarray([0, 0, 0, 0, 0, rows * n2 - bins], i64),
                f"{base}/shape_y": np.asarray([0, 2 * rows, n2], i64),
                f"{base}/shape_q": np.asarray([0, 4, n1, n2], i64),
                f"{base}/axes": np.asarray([1], i64),
                f"{base}/shape_out": np.asarray([0, 1, k_len], i64)})
    t = lambda s: f"{base}/{s}"  # noqa: E731
    nodes = [
        helper.make_node("Reshape", [x, t("shape_in")], [t("spec")], name=t("spec")),  # (N, 2, B)
        helper.make_node("Pad", [t("spec"), t("pads")], [t("padded")], name=t("padded")),  # (N, 2, rows n2)
        helper.make_node("Mul", [t("padded"), t("c")], [t("weighted")], name=t("weighted")),
        helper.make_node("Reshape", [t("weighted"), t("shape_y")], [t("grid")], name=t("grid")),  # (N, 2 rows, n2)
        helper.make_node("MatMul", [t("a"), t("grid")], [t("stage1")], name=t("stage1")),  # (N, 4 n1, n2)
        helper.make_node("Mul", [t("stage1"), t("tw")], [t("twiddled")], name=t("twiddled")),
        helper.make_node("Reshape", [t("twiddled"), t("shape_q")], [t("blocks")], name=t("blocks")),
        helper.make_node("MatMul", [t("blocks"), t("d")], [t("stage2")], name=t("stage2")),  # (N, 4, n1, n2)
        helper.make_node("ReduceSum", [t("stage2"), t("axes")], [t("sum")], name=t("sum"), keepdims=0),
        helper.make_node("Transpose", [t("sum")], [t("natural")], name=t("natural"), perm=[0, 2, 1]),  # (N, n2, n1)
        helper.make_node("Mul", [t("natural"), t("win")], [t("windowed")], name=t("windowed")),
        helper.make_node("Reshape", [t("windowed"), t("shape_out")], [y], name=t("out")),
    ]
    return nodes, cst


__all__ = ["MATCH_RTOL", "MIN_FFT_SIZE", "analysis_window", "fft_dft_convs", "forward_constants", "inverse_constants",
           "irfft_numpy", "rfft_numpy", "run", "split_size", "synthesis_window"]
