"""FP32 pins of weakly typed TensorRT builds: which ONNX nodes (pure, on the bundled reference model, its FP16
ONNX as ``cosyedge build --fp16`` makes it, and a Q/DQ version), which parsed layers (parser naming), and
the build through the fake TensorRT (8.6: pinned + PREFER_PRECISION_CONSTRAINTS; 10.x strongly typed: none)."""

from __future__ import annotations

import json
import re

import onnx
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.builders import trt as bt
from cosyedge.runtime.trt_compat import PIN_SKIP_OPS, fp32_pin_nodes, layers_to_pin, parser_node_name
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.fp16 import fp16_model, fp32_node_plan
from tests.reference_structure import reference_structure
from tests.trt import fakes

REF = REFERENCE_STREAM_ONNX
GATED_CONV = "/blocks.0/conv/conv/Conv"  # a gated block's dilated conv: FP16 compute, never pinned


@pytest.fixture(scope="module")
def fp32_model():
    return onnx.load(str(REF))


@pytest.fixture(scope="module")
def fp16_path(tmp_path_factory, fp32_model):
    """The FP16 ONNX as ``cosyedge build --fp16`` makes it (``fp16_onnx`` -> ``fp16_model``, default plan)."""
    m16, _ = fp16_model(fp32_model, StreamContract.from_onnx(REF))
    path = tmp_path_factory.mktemp("pins") / "reference.fp16.onnx"
    onnx.save(m16, str(path))
    return path


@pytest.fixture(scope="module")
def qdq_model(fp32_model):
    """The reference model with the Q/DQ placement of ``cosyedge build --int8`` (amax 1.0: no calibration)."""
    from cosyedge.precision import qdq
    from cosyedge.surgery import io

    c = StreamContract.from_onnx(REF)
    graph, model = io.load_graph(REF)
    to_quantize, _ = qdq.select_nodes(model, c.input, c.output)
    graph.insert_qdq({t: 1.0 for t in qdq.activation_tensors(model)}, to_quantize)
    graph.cleanup().toposort()
    return io.graph_to_model(graph, like=model)


def _argmax_chain(model):
    nodes = list(model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    argmax = next(n for n in nodes if n.op_type == "ArgMax")
    matmul = producer[argmax.input[0]]
    return argmax, matmul


def _has_pitch_search():
    return reference_structure().pitch_comb


# ------------------------------------------------------------------------------------------- pure: nodes
def test_fp16_onnx_pins_what_its_types_keep_in_fp32(fp16_path, fp32_model):
    m16 = onnx.load(str(fp16_path))
    pins = fp32_pin_nodes(m16)
    plan = fp32_node_plan(fp32_model, StreamContract.from_onnx(REF))
    # the converter's plan, plus the FP32 Identities it leaves on outputs; no cast, no FP16 compute
    assert set(plan) <= set(pins)
    ops = {n.name: n.op_type for n in m16.graph.node}
    assert all(ops[n] == "Identity" for n in set(pins) - set(plan))
    assert not {ops[n] for n in pins} & set(PIN_SKIP_OPS)
    assert GATED_CONV in ops and GATED_CONV not in pins
    assert "/synthesis/conv/conv/Conv" in pins and "/analysis/conv/Conv" in pins  # boundary convs stay FP32
    if _has_pitch_search():
        argmax, matmul = _argmax_chain(m16)
        assert argmax.name in pins and matmul.op_type == "MatMul" and matmul.name in pins


def test_fp32_and_qdq_onnx_pin_the_fp32_plan_not_every_float_node(fp32_model, qdq_model):
    c = StreamContract.from_onnx(REF)
    plan = fp32_node_plan(fp32_model, c)
    assert fp32_pin_nodes(fp32_model, c) == plan
    pins = fp32_pin_nodes(qdq_model)  # contract read from the model
    ops = {n.name: n.op_type for n in qdq_model.graph.node}
    assert any(op == "QuantizeLinear" for op in ops.values())
    assert set(pins) == set(plan) and not {ops[n] for n in pins} & set(PIN_SKIP_OPS)
    unquantized = [n for n, op in ops.items() if op not in PIN_SKIP_OPS and n not in pins]
    assert GATED_CONV in unquantized and len(unquantized) > len(pins)  # not "every unquantized node"
    if _has_pitch_search():
        argmax, matmul = _argmax_chain(qdq_model)
        assert pins[argmax.name] == "op ArgMax" and pins[matmul.name] == "input of ArgMax"


# ------------------------------------------------------------------------------------------ pure: layers
def test_layer_names_match_nodes_as_the_parser_names_them():
    nodes = ["/MatMul", "/ArgMax", "/Add", "/Add_1", "/blocks.0/conv/conv/Conv"]
    layers = ["/MatMul", "/ArgMax", "/ArgMax_3", "/Add_1", "/Add_1_7", "/Add_12", "/blocks.0/conv/conv/Conv",
              "/blocks.0/conv/conv/Conv_4", "(Unnamed Layer* 9) [Shuffle]", "blocks.0.conv.conv.weight", "/ArgMax_x"]
    got = layers_to_pin(layers, ["/MatMul", "/ArgMax", "/Add_1"], nodes)
    assert got == {"/MatMul": "/MatMul", "/ArgMax": "/ArgMax", "/ArgMax_3": "/ArgMax", "/Add_1": "/Add_1",
                   "/Add_1_7": "/Add_1"}
    # "/Add_12" is a helper layer of "/Add" (not pinned); an exact node name wins over a suffix
    assert layers_to_pin(["/Add_12", "/Add_1"], ["/Add"], nodes) == {"/Add_12": "/Add"}
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    assert parser_node_name(node) == "node_of_y"
    node.name = "/relu"
    assert parser_node_name(node) == "/relu"


# ------------------------------------------------------------------------------------- builds (fakes)
def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_weakly_typed_86_fp16_build_pins_the_argmax_chain(monkeypatch, fp16_path, tmp_path):
    f = fakes.install(monkeypatch, version="8.6.1")
    out = bt.build_trt(fp16_path, out_dir=tmp_path, name="reference", precision="fp16")
    calls = f.trt.calls
    assert calls["builder_flags"] == ["FP16", "PREFER_PRECISION_CONSTRAINTS"]
    pinned = calls["layer_precisions"]
    assert pinned and all(p["precision"] == f.trt.float32 for p in pinned.values())
    assert all(p["output_types"] and set(p["output_types"].values()) == {f.trt.float32} for p in pinned.values())
    assert GATED_CONV not in pinned and not any(k.startswith(GATED_CONV + "_") for k in pinned)
    last = "/synthesis/conv/conv/Conv"  # the conv layer and its two shuffle helpers (parser suffixes)
    synth = [k for k in calls["layer_names"] if re.fullmatch(re.escape(last) + r"(_\d+)?", k)]
    assert len(synth) == 3 and set(synth) <= set(pinned)
    if _has_pitch_search():
        argmax, matmul = _argmax_chain(onnx.load(str(fp16_path)))
        assert matmul.name in pinned and argmax.name in pinned
        assert pinned[argmax.name]["output_types"] == {0: f.trt.float32}  # TopK values; indices stay int32
        helper = [k for k in calls["layer_names"] if k.startswith(argmax.name + "_")]
        assert helper and not set(helper) & set(pinned)  # int32-only helper layer left alone
    m = _manifest(out)
    rep = m["layers"]["fp32_pinned"]
    assert rep["count"] == len(pinned) and sorted(rep["layers"]) == sorted(pinned)
    assert rep["nodes"] == len(fp32_pin_nodes(onnx.load(str(fp16_path)))) and rep["nodes_without_layer"] == []
    assert "PREFER_PRECISION_CONSTRAINTS" in m["build_plan"]["builder_flags"]
    assert m["flags"]["precision"] == "fp16" and m["build_plan"]["strongly_typed"] is False


def test_strongly_typed_10x_build_pins_nothing(fake10, fp16_path, tmp_path):
    out = bt.build_trt(fp16_path, out_dir=tmp_path, name="reference", precision="fp16")
    calls = fake10.trt.calls
    assert calls["builder_flags"] == [] and calls["layer_precisions"] == {}
    assert calls["layer_names"]  # the network was parsed, just not constrained
    assert _manifest(out)["layers"]["fp32_pinned"] == {"count": 0, "layers": [], "nodes": 0,
                                                       "nodes_without_layer": []}


def test_weak_fp32_build_sets_no_fp16_flag_and_pins_nothing(monkeypatch, two_state, tmp_path):
    f = fakes.install(monkeypatch, version="8.6.1")
    bt.build_trt(two_state, out_dir=tmp_path, precision="fp32")
    assert f.trt.calls["builder_flags"] == [] and f.trt.calls["layer_precisions"] == {}
