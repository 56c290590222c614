"""Tiny streaming ONNX models with real state, built with ``onnx.helper`` (no torch, no downloads).

Every model follows the cosyedge stream contract: audio ``noisy`` (N, 1, T) float32 in, ``enhanced``
(N, 1, T) out, state pairs ``state_in.NN`` / ``state_out.NN`` written as ``Concat(state, x)`` + Conv +
``Slice(-P:)`` (exactly what ``cosyedge streamify`` produces), and the contract in ``metadata_props``.
Each builder has a numpy full-sequence reference to compare streamed output against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StateSpec, StreamContract

INPUT, OUTPUT = "noisy", "enhanced"
SAMPLE_RATE_HZ = 16000
OPSET = 17
_INT64_MAX = np.iinfo(np.int64).max


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _causal_conv(prefix: str, x: str, state_in: str, state_out: str, weight: np.ndarray, dilation: int = 1):
    """Nodes/initializers of one streamified causal conv: Concat(state, x) -> Conv, Slice(-P:) -> state."""
    k = weight.shape[-1]
    p = (k - 1) * dilation
    nodes = [
        helper.make_node("Concat", [state_in, x], [f"{prefix}_cat"], axis=2, name=f"{prefix}_concat"),
        helper.make_node("Conv", [f"{prefix}_cat", f"{prefix}_w"], [f"{prefix}_y"], dilations=[dilation],
                         kernel_shape=[k], name=f"{prefix}_conv"),
        helper.make_node("Slice", [f"{prefix}_cat", f"{prefix}_st", f"{prefix}_en", f"{prefix}_ax"], [state_out],
                         name=f"{prefix}_slice"),
    ]
    inits = [
        _const(f"{prefix}_w", weight.astype(np.float32)),
        _const(f"{prefix}_st", np.array([-p], np.int64)),
        _const(f"{prefix}_en", np.array([_INT64_MAX], np.int64)),
        _const(f"{prefix}_ax", np.array([2], np.int64)),
    ]
    return nodes, inits, p


def _audio(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 1, "T"])


def _save(graph: onnx.GraphProto, contract: StreamContract, path: str | Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cosyedge-tests")
    model.ir_version = 9
    contract.write_to_onnx(model)
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def default_taps(k: int = 5, seed: int = 0) -> np.ndarray:
    """Random FIR taps (float32, shape (k,)) with a non-trivial history dependence."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, k).astype(np.float32)


def make_fir_model(path: str | Path, taps=None, hop: int = 4, delay_samples: int = 0, name: str = "fir") -> Path:
    """Causal FIR ``y[t] = sum_m taps_rev[m] x[t-m]``; one state (N, 1, K-1).

    ONNX Conv is a correlation over ``Concat(state, x)``, so ``y = np.convolve(x, taps[::-1])[:T]``
    (see :func:`fir_reference`). ``taps = [1, 0, ..., 0]`` (K = D+1) is a pure delay of D samples.
    """
    taps = default_taps() if taps is None else np.asarray(taps, np.float32)
    k = taps.size
    nodes, inits, p = _causal_conv("c0", INPUT, "state_in.00", "state_out.00", taps.reshape(1, 1, k))
    nodes[1].output[0] = OUTPUT
    graph = helper.make_graph(
        nodes, name,
        [_audio(INPUT), helper.make_tensor_value_info("state_in.00", TensorProto.FLOAT, ["N", 1, p])],
        [_audio(OUTPUT), helper.make_tensor_value_info("state_out.00", TensorProto.FLOAT, ["N", 1, p])],
        initializer=inits,
    )
    contract = StreamContract(input=INPUT, output=OUTPUT, sample_rate_hz=SAMPLE_RATE_HZ, hop_samples=hop,
                              total_stride=hop, delay_samples=delay_samples, name=name,
                              states=[StateSpec("state_in.00", "state_out.00", ["N", 1, p], node="c0_conv")])
    return _save(graph, contract, path)


def fir_reference(x: np.ndarray, taps) -> np.ndarray:
    """Full-sequence reference of :func:`make_fir_model`: x (T,) or (N, T) -> same shape, float64."""
    taps = np.asarray(taps, np.float64)
    x = np.atleast_2d(np.asarray(x, np.float64))
    y = np.stack([np.convolve(row, taps[::-1])[: row.size] for row in x])
    return y


def make_delay_model(path: str | Path, delay_samples: int, hop: int = 8) -> Path:
    """Pure delay of ``delay_samples`` (metadata ``delay_samples`` says so): y[t] = x[t - D]."""
    taps = np.zeros(delay_samples + 1, np.float32)
    taps[0] = 1.0
    return make_fir_model(path, taps=taps, hop=hop, delay_samples=delay_samples, name="delay")


TWO_STATE_TAPS = (default_taps(5, seed=1), default_taps(3, seed=2))
"""Weights of :func:`make_two_state_model`: a K=5 conv, then a K=3 conv with dilation 2."""


def make_two_state_model(path: str | Path, hop: int = 4) -> Path:
    """Two causal convs with **equal state shapes** (N, 1, 4): conv K=5 -> tanh -> conv K=3 dilation 2.

    Swapping the two states would still run but give wrong numbers, so tests catch state mix-ups.
    """
    w0, w1 = TWO_STATE_TAPS
    n0, i0, p0 = _causal_conv("c0", INPUT, "state_in.00", "state_out.00", w0.reshape(1, 1, -1))
    n1, i1, p1 = _causal_conv("c1", "h", "state_in.01", "state_out.01", w1.reshape(1, 1, -1), dilation=2)
    assert p0 == p1 == 4
    n1[1].output[0] = OUTPUT
    nodes = n0 + [helper.make_node("Tanh", ["c0_y"], ["h"], name="act")] + n1
    st = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 1, 4])  # noqa: E731
    graph = helper.make_graph(nodes, "two_state", [_audio(INPUT), st("state_in.00"), st("state_in.01")],
                              [_audio(OUTPUT), st("state_out.00"), st("state_out.01")], initializer=i0 + i1)
    contract = StreamContract(
        input=INPUT, output=OUTPUT, sample_rate_hz=SAMPLE_RATE_HZ, hop_samples=hop, total_stride=hop,
        name="two_state",
        states=[StateSpec("state_in.00", "state_out.00", ["N", 1, 4], node="c0_conv"),
                StateSpec("state_in.01", "state_out.01", ["N", 1, 4], node="c1_conv")],
    )
    return _save(graph, contract, path)


def two_state_reference(x: np.ndarray) -> np.ndarray:
    """Full-sequence reference of :func:`make_two_state_model`: x (T,) or (N, T) -> float64, same shape."""
    w0, w1 = TWO_STATE_TAPS
    h = np.tanh(fir_reference(x, w0))
    k_dil = np.zeros(5, np.float64)
    k_dil[0::2] = w1  # dilation 2 == a K=5 kernel with zeros in between
    return fir_reference(h, k_dil)


def make_stateless_model(path: str | Path, hop: int = 4) -> Path:
    """A full-sequence (not streamified) causal conv: Conv with left pads, metadata without states."""
    taps = default_taps()
    graph = helper.make_graph(
        [helper.make_node("Conv", [INPUT, "w"], [OUTPUT], pads=[4, 0], kernel_shape=[5])], "stateless",
        [_audio(INPUT)], [_audio(OUTPUT)], initializer=[_const("w", taps.reshape(1, 1, 5))],
    )
    contract = StreamContract(input=INPUT, output=OUTPUT, sample_rate_hz=SAMPLE_RATE_HZ, hop_samples=hop,
                              total_stride=hop, name="stateless")
    return _save(graph, contract, path)


def make_nan_model(path: str | Path, hop: int = 4) -> Path:
    """FIR followed by Sqrt: finite for the zero chunk of the build check, NaN for negative samples."""
    path = Path(path)
    make_fir_model(path, taps=[0, 0, 0, 0, 1], hop=hop, name="nan")
    model = onnx.load(str(path))
    model.graph.node[1].output[0] = "pre_sqrt"
    model.graph.node.append(helper.make_node("Sqrt", ["pre_sqrt"], [OUTPUT], name="sqrt"))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
