"""Conv -> Add folding into ONNX Runtime's FusedConv (cosyedge.passes.conv_sum): what folds, what must not,
and the bundled reference streamed fused vs unfused on real speech (>= 120 dB, the rule for FP32 graph rewrites)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.audio import load_audio, to_model_input
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime import OrtStreamSession
from cosyedge.passes.conv_sum import fuse_conv_sum

ROOT = Path(__file__).resolve().parents[2]
NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def _residual_model(z_shape: list, extra_use: bool = False) -> onnx.ModelProto:
    """y = Conv(x) + z with x (1, 4, 6), W (4, 4, 1); z of ``z_shape``; ``extra_use`` also outputs the Conv."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 4, 1)).astype(np.float32), "W")
    b = numpy_helper.from_array(np.arange(4, dtype=np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[1]),
             helper.make_node("Add", ["c", "z"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_use:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        outs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6]),
                                       helper.make_tensor_value_info("z", TensorProto.FLOAT, z_shape)],
                          outs, [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_residual_conv_add_folds_into_fusedconv_with_same_values():
    m = _residual_model([1, 4, 6])
    fused, n = fuse_conv_sum(m, {"x": [1, 4, 6], "z": [1, 4, 6]})
    assert n == 1
    assert [nd.op_type for nd in fused.graph.node] == ["FusedConv"]
    assert fused.graph.node[0].domain == "com.microsoft" and list(fused.graph.node[0].input)[-1] == "z"
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 4, 6)).astype(np.float32),
             "z": rng.standard_normal((1, 4, 6)).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, feeds)[0], _run(m, feeds)[0], rtol=0, atol=1e-6)
    assert [nd.op_type for nd in m.graph.node] == ["Conv", "Add"]  # the input model is not touched


@pytest.mark.parametrize("z_shape, extra_use", [([1, 4, 1], False), ([1, 4, 6], True)])
def test_broadcast_sum_or_shared_conv_output_is_not_folded(z_shape, extra_use):
    m = _residual_model(z_shape, extra_use)
    fused, n = fuse_conv_sum(m, {"x": [1, 4, 6], "z": z_shape})
    assert n == 0
    assert [nd.op_type for nd in fused.graph.node] == [nd.op_type for nd in m.graph.node]


def test_reference_stream_fused_matches_unfused_on_speech():
    x, sr = load_audio(NOISY)
    x = to_model_input(x, sr, 16000)[: 160 * 400].reshape(400, 1, 1, 160)
    ys, folded = [], []
    for rewrites in (("dft_fft", "einsum_matmul"), None):  # every default pass but conv_sum, then the defaults
        with OrtStreamSession(REFERENCE_STREAM_ONNX, rewrites=rewrites) as s:
            ys.append(np.concatenate([s.push(c)["enhanced"].copy() for c in x], axis=-1).astype(np.float64))
            folded.append(s.fused_nodes)
    assert folded == [0, 12]  # 10 residual blocks + the two input-branch sums
    err = np.sum((ys[1] - ys[0]) ** 2)
    snr = np.inf if err == 0 else 10 * np.log10(np.sum(ys[0] ** 2) / err)
    assert snr >= 120.0, snr
    assert np.abs(ys[0]).max() > 1e-3  # real output, not silence
