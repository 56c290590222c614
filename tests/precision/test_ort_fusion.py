"""INT8 Q/DQ that ONNX Runtime's CPU EP (x86) fuses, counted in the graph ORT runs.

A small conv model with a skip connection and a fan-out (one conv output read by a conv and by the residual Add):
with TensorRT's placement (one shared int8 Q/DQ on the conv inputs, float outputs) ORT fuses nothing and runs three
float convs between Q/DQ; with the ``ort`` placement (uint8 activations, a DQ per consumer, a Q on each conv output,
int32 biases) the two inner convs become QLinearConv and the residual Add QLinearAdd (the last conv feeds the float
graph output and stays float). The engine manifest of ``build_ort(precision='int8', qdq_placement='ort')`` carries the report.
"""

from __future__ import annotations

import json
import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.precision import qdq
from cosyedge.precision.ort_fusion import fusion_line, ort_fusion_report

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _skip_model() -> onnx.ModelProto:
    """x (1, 8, 32) -> c1 (k3) -> [c2 (k1) -> Add(., c1 out) -> c3 (k1)] -> y: a skip connection and fan-out."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for i, k in ((1, 3), (2, 1), (3, 1)):
        inits.append(numpy_helper.from_array((rng.standard_normal((8, 8, k)) * 0.3).astype(np.float32), f"w{i}"))
        inits.append(numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), f"b{i}"))
    nodes.append(helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], name="c1", pads=[1, 1]))
    nodes.append(helper.make_node("Conv", ["h1", "w2", "b2"], ["h2"], name="c2"))
    nodes.append(helper.make_node("Add", ["h2", "h1"], ["s"], name="skip"))
    nodes.append(helper.make_node("Conv", ["s", "w3", "b3"], ["y"], name="c3"))
    graph = helper.make_graph(nodes, "skip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, x: np.ndarray, outputs=("y",)) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        list(outputs), {"x": x})


@pytest.fixture(scope="module")
def float_model_and_amax():
    model = _skip_model()
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for t in ("h1", "h2", "s"):
        probe.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
    vals = dict(zip(("h1", "h2", "s", "y"), _run(probe, x, ("h1", "h2", "s", "y"))))
    amax = {"x": float(np.abs(x).max()), **{k: float(np.abs(v).max()) for k, v in vals.items()}}
    return model, amax, x, vals["y"]


def _quantized(model, amax, placement, path):
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(model)
    nodes = [w for w in qdq.weighted_nodes(model)]
    report = graph.insert_qdq(amax, nodes, placement=placement)
    graph.cleanup().toposort()
    out = gs.export_onnx(graph)
    onnx.checker.check_model(out)
    onnx.save(out, str(path))
    return out, report


def _snr(ref, est) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - est) ** 2)))


@pytest.mark.skipif(not X86, reason="counts ONNX Runtime's x86 QDQ rules (ARM fuses int8 pairs differently)")
def test_fusion_report_before_and_after(float_model_and_amax, tmp_path):
    model, amax, x, y = float_model_and_amax
    trt_model, trt_rep = _quantized(model, amax, "trt", tmp_path / "trt.onnx")
    ort_model, ort_rep = _quantized(model, amax, "ort", tmp_path / "ort.onnx")
    before = ort_fusion_report(tmp_path / "trt.onnx")
    after = ort_fusion_report(tmp_path / "ort.onnx")
    # TensorRT's placement: nothing fused, every conv runs in float between Q/DQ
    assert before["fused"] == {} and before["fused_total"] == 0
    assert before["unfused_weighted"] == ["c1", "c2", "c3"]
    assert before["qdq_left"] == 3 + 3 + 3  # 3 activation Q + 3 activation DQ (c2, c3 share none) + 3 weight DQ
    assert trt_rep["activation_type"] == "int8" and ort_rep["activation_type"] == "uint8"
    # ORT's placement: c1 and c2 fuse, and so does the residual Add (its inputs and output are quantized now);
    # c3 feeds the graph output, which keeps its float tensor, so it stays float between Q/DQ and is reported
    assert after["fused"] == {"QLinearAdd": 1, "QLinearConv": 2} and after["fused_total"] == 3
    assert after["unfused_weighted"] == ["c3"]
    assert after["fused_mac_share"] is None  # no stream contract: no MAC count
    assert "fuses 1 QLinearAdd, 2 QLinearConv; 1 weighted ops stay float" in fusion_line(after)
    assert "fuses nothing; 3 weighted ops stay float" in fusion_line(before)
    # the fused graph computes what its Q/DQ says: close to float, and to the unfused Q/DQ graph
    y_trt, y_ort = _run(trt_model, x)[0], _run(ort_model, x)[0]
    assert _snr(y, y_trt) > 30.0
    assert _snr(y, y_ort) > 25.0
    assert _snr(y_trt, y_ort) > 25.0


def test_unknown_placement_is_refused(float_model_and_amax):
    import onnx_graphsurgeon as gs

    from cosyedge.errors import UsageError

    model, amax, _, _ = float_model_and_amax
    with pytest.raises(UsageError, match="--int8-placement 'arm': unknown Q/DQ placement"):
        gs.import_onnx(model).insert_qdq(amax, qdq.weighted_nodes(model), placement="arm")


@pytest.mark.skipif(not X86, reason="counts ONNX Runtime's x86 QDQ rules")
def test_ort_engine_manifest_holds_fusion_report(tmp_path):
    from cosyedge.builders.ort import build_ort
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from tests.precision.int8_fixtures import small_calibration_set

    dest = build_ort(REFERENCE_STREAM_ONNX, out_dir=tmp_path / "engines", precision="int8",
                     calib=small_calibration_set(tmp_path), qdq_placement="ort")
    rep = json.loads((dest / "manifest.json").read_text())["reports"]["int8"]
    assert rep["placement"] == "ort" and rep["activation_type"] == "uint8"
    fusion = rep["ort_fusion"]
    assert fusion["fused"] == {"QLinearConv": 24}
    assert fusion["unfused_weighted"] == []
    assert 0.5 < fusion["fused_mac_share"] < 0.55
