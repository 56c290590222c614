"""Q/DQ placement ``ort_matmul`` (one-frame convs as MatMuls ONNX Runtime fuses into
``MatMulIntegerToFloat``) and bias correction, on the bundled reference model and the demo recording."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.cli.main import main
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision import qdq, qdq_matmul
from cosyedge.runtime import OrtStreamSession
from cosyedge.runtime import stream_array
from tests.helpers.cli_errors import refused
from tests.precision import int8_fixtures as fx

X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def reference():
    model = onnx.load(str(REFERENCE_STREAM_ONNX))
    contract = StreamContract.from_onnx(model)
    rw, info = qdq_matmul.matmul_form(model, contract)
    return model, contract, rw, info


def _stream(path, x: np.ndarray) -> np.ndarray:
    s = OrtStreamSession(path)
    s.activate()
    try:
        return stream_array(s, x).astype(np.float64)
    finally:
        s.deactivate()


def _snr(ref: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10((ref ** 2).sum() / max(((y - ref) ** 2).sum(), 1e-300)))


def test_matmul_form_is_the_same_function(reference, tmp_path):
    model, _, rw, info = reference
    # 26 one-frame convs become MatMuls (the 4 feeding the pitch ArgMax / log power stay Conv), each bias Add moved
    # after its Reshape (25 of them have a bias)
    assert info["counts"]["conv_gemm"] == 26 and info["counts"]["bias_moved"] == 25
    assert sum(n.op_type == "Conv" for n in rw.graph.node) == 4
    path = tmp_path / "rw.onnx"
    onnx.save(rw, str(path))
    x = fx._read(fx.DEMO_NOISY)
    assert _snr(_stream(REFERENCE_STREAM_ONNX, x), _stream(path, x)) >= 120.0  # measured 127.5 dB


def test_the_matmul_form_refuses_another_chunk_length(reference, tmp_path):
    import onnxruntime as ort

    _, contract, rw, _ = reference
    audio = next(i for i in rw.graph.input if i.name == contract.input)
    assert [d.dim_value for d in audio.type.tensor_type.shape.dim][1:] == [1, contract.hop_samples]
    sess = ort.InferenceSession(rw.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d.dim_value or 1 for d in i.type.tensor_type.shape.dim], np.float32)
             for i in rw.graph.input}
    feeds[contract.input] = np.zeros((1, 1, 2 * contract.hop_samples), np.float32)
    with pytest.raises(Exception, match="(?i)dimension"):
        sess.run(None, feeds)


@pytest.mark.skipif(not X86, reason="ORT's QDQ fusion rules counted here are those of x86-64")
def test_ort_fuses_every_quantized_matmul(reference, tmp_path):
    from cosyedge.precision.ort_fusion import ort_fusion_report

    model, contract, rw, info = reference
    quantize, kept = qdq.select_nodes(model, [i.name for i in contract.stream_inputs], contract.output)
    wanted = {w.name for w in quantize}
    names = [n.name for n in qdq_matmul.quantizable(rw) if info["origin"].get(n.name) in wanted]
    assert len(names) == len(quantize) == 24
    q = onnx.ModelProto()
    q.CopyFrom(rw)
    amax = {qdq_matmul.data_tensor(rw, n)[0]: 2.0 for n in qdq_matmul.quantizable(rw)}
    report = qdq_matmul.insert_qdq_matmul(q, amax, names)
    assert report["qdq_pairs"] == len(report["activations"]) + 24
    path = tmp_path / "q.onnx"
    onnx.save(q, str(path))
    fusion = ort_fusion_report(path, contract)
    assert fusion["fused"] == {"MatMulIntegerToFloat": 24}
    assert fusion["unfused_weighted"] == []
    assert fusion["qdq_left"] == len(report["activations"])  # only the (shared) activation Qs remain
    assert 0.5 < fusion["fused_mac_share"] < 0.55  # measured 0.52: first/last/ArgMax-cone convs stay float


@pytest.mark.slow
def test_bias_correction_raises_the_int8_snr(tmp_path):
    from cosyedge.precision.calibset import DemoMix, make_calibration_set
    from cosyedge.precision.int8 import int8_onnx

    cs = make_calibration_set(tmp_path / "calib", count=8, seed=0, training_data=DemoMix())
    plain = int8_onnx(REFERENCE_STREAM_ONNX, tmp_path / "plain.onnx", calib=cs, placement="ort_matmul",
                      activations="static")  # the calibrated steps bias correction corrects
    corr = int8_onnx(REFERENCE_STREAM_ONNX, tmp_path / "corr.onnx", calib=cs, placement="ort_matmul",
                     amax=plain["amax_path"], bias_correction=True)
    assert plain["bias_correction"] is None
    layers = corr["bias_correction"]["layers"]
    assert len(layers) >= 20 and all(v["norm"] > 0 for v in layers.values())
    # measured on this set: 38.8 dB -> 39.1 dB vs FP32 on the demo recording
    assert corr["output_snr_db"] > plain["output_snr_db"] + 0.1
    assert plain["output_snr_db"] > 35.0


def test_bad_placement_is_one_line(capsys):
    rc = main(["calib", "int8", "--placement", "nope", "-o", "x.onnx"])
    line = refused(rc, capsys.readouterr().err, 2)
    assert "--int8-placement 'nope': unknown Q/DQ placement" in line and "ort_matmul" in line
    rc = main(["build", "--int8", "--int8-placement", "nope"])
    assert "--int8-placement 'nope': unknown Q/DQ placement" in refused(rc, capsys.readouterr().err, 2)


def test_bias_correction_needs_ort_matmul(capsys):
    rc = main(["calib", "int8", "--bias-correction", "-o", "x.onnx"])
    assert "ort_matmul only" in refused(rc, capsys.readouterr().err, 2)


def test_an_ort_build_with_trt_placement_names_the_cpu_placement():
    from cosyedge.precision.ort_fusion import placement_hint

    line = placement_hint({"placement": "trt", "ort_fusion": {"unfused_weighted": ["a", "b", "c"]}})
    assert "runs 3 of its weighted ops in float" in line and "--int8-placement ort_matmul" in line
    assert placement_hint({"placement": "ort_matmul", "ort_fusion": {"unfused_weighted": ["a"]}}) is None
    assert placement_hint({"placement": "trt", "ort_fusion": {"unfused_weighted": []}}) is None
    assert placement_hint(None) is None
    # an adopted model's Q/DQ sits in Scan bodies, where only trt applies: no hint
    assert placement_hint({"placement": "trt", "ort_fusion": {"unfused_weighted": ["a"], "qdq_in_bodies": 98}}) is None


@pytest.mark.skipif(not X86, reason="ORT's kernel choices counted here are those of x86-64")
def test_dynamic_activations_are_one_kernel_per_layer_and_closer_to_fp32(reference, tmp_path):
    """The default ``dynamic`` activations: each of the 24 quantized MatMuls is one DynamicQuantizeMatMul with its bias
    folded (no Q/DQ, no bias Add left), the same function as the static (calibrated) form to within INT8 rounding,
    and closer to FP32 on the noisy demo than the static form with a fixed step."""
    from cosyedge.precision.ort_fusion import ort_fusion_report

    model, contract, rw, info = reference
    quantize, _ = qdq.select_nodes(model, [i.name for i in contract.stream_inputs], contract.output)
    wanted = {w.name for w in quantize}
    names = [n.name for n in qdq_matmul.quantizable(rw) if info["origin"].get(n.name) in wanted]
    dyn, sta = onnx.ModelProto(), onnx.ModelProto()
    dyn.CopyFrom(rw)
    sta.CopyFrom(rw)
    rep = qdq_matmul.quantize_matmuls_dynamic(dyn, names)
    assert rep["weights"] == {n: 1 for n in names} and rep["qdq_pairs"] == 0 and rep["bias_folded"] == 24
    ops = [n.op_type for n in dyn.graph.node]
    assert ops.count("DynamicQuantizeMatMul") == 24 and "QuantizeLinear" not in ops
    assert ops.count("Add") == [n.op_type for n in rw.graph.node].count("Add") - 24  # biases folded
    amax = {qdq_matmul.data_tensor(rw, n)[0]: 4.0 for n in qdq_matmul.quantizable(rw)}
    qdq_matmul.insert_qdq_matmul(sta, amax, names)
    paths = {}
    for k, m in (("dyn", dyn), ("sta", sta)):
        paths[k] = tmp_path / f"{k}.onnx"
        onnx.save(m, str(paths[k]))
    assert ort_fusion_report(paths["dyn"], contract)["fused"] == {"DynamicQuantizeMatMul": 24}
    x = fx._read(fx.DEMO_NOISY)[: 16000 * 6]
    ref = _stream(REFERENCE_STREAM_ONNX, x)
    snr_dyn, snr_sta = _snr(ref, _stream(paths["dyn"], x)), _snr(ref, _stream(paths["sta"], x))
    assert snr_dyn > 40.0 and snr_dyn > snr_sta + 3.0, (snr_dyn, snr_sta)
