"""Engine models cosyedge writes declare the lowest IR version their content needs (``artifacts.with_portable_ir``), so
ONNX Runtime 1.23 (IR <= 11: what an aarch64 Python 3.10 gets), TensorRT's parser and Netron load them whatever onnx
wrote them; and the project's toposort names a cycle instead of leaving the nodes in some order.

The source model is a copy of the bundled one declaring the installed onnx's newest IR version (as a model made with
that onnx does: IR 14 with onnx 1.23, IR 10 with onnx 1.16)."""

from __future__ import annotations

import shutil

import onnx
import pytest
from onnx import TensorProto, helper

from cosyedge.artifacts import model_content_sha256, portable_ir_version, with_portable_ir
from cosyedge.errors import ArtifactError
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.precision import int8_fixtures as fx


@pytest.fixture(scope="module")
def newest_ir(tmp_path_factory):
    """The bundled model (opset 17: IR 8 is enough) declaring onnx.IR_VERSION."""
    p = tmp_path_factory.mktemp("ir") / "reference.stream.onnx"
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    m.ir_version = onnx.IR_VERSION
    onnx.save(m, str(p))
    return p


def test_fp16_and_int8_engine_models_carry_the_ir_their_opsets_need(newest_ir, tmp_path):
    from cosyedge.precision.fp16 import fp16_onnx
    from cosyedge.precision.int8 import int8_onnx

    assert onnx.IR_VERSION > 8 and onnx.load(str(newest_ir)).ir_version == onnx.IR_VERSION
    fp16_onnx(newest_ir, tmp_path / "m.fp16.onnx")
    int8_onnx(newest_ir, tmp_path / "m.int8.onnx", calib=fx.small_calibration_set(tmp_path))
    got = {}
    for name in ("m.fp16.onnx", "m.int8.onnx"):
        m = onnx.load(str(tmp_path / name))
        onnx.checker.check_model(m)
        got[name] = (m.ir_version, portable_ir_version(m))
    assert got == {"m.fp16.onnx": (8, 8), "m.int8.onnx": (8, 8)}  # opset 17 (+ com.microsoft): IR 8


def test_portable_ir_counts_what_opsets_cannot_say():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])  # opset 13: IR 7
    assert portable_ir_version(m) == 7
    f = helper.make_function("local", "f", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
                             [helper.make_opsetid("", 13)])
    m.functions.append(f)
    assert portable_ir_version(m) == 8  # model-local functions
    m.graph.node[0].metadata_props.add(key="k", value="v")
    assert portable_ir_version(m) == 10  # metadata on a node
    for declared in (6, onnx.IR_VERSION):  # too low for its content (as the NSNet2 export, IR 6 at opset 17), newest
        m.ir_version = declared
        assert with_portable_ir(m).ir_version == 10


def test_the_content_hash_covers_the_ir_version(tmp_path):
    """Why streamify/adopt/recipe exports keep the IR version onnx wrote: the committed baselines (nsnet2 IR 6, dfn3
    IR 7, gtcrn IR 14, all opset 17) are keyed by their exports' content hash, which covers ir_version
    (docs/design.md, Platforms)."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, a)
    m = onnx.load(str(a))
    m.ir_version += 1
    onnx.save(m, str(b))
    assert model_content_sha256(a) != model_content_sha256(b)


def test_toposort_orders_and_names_a_cycle():
    from cosyedge.precision.bodies import toposort

    def node(op, i, o, name):
        return helper.make_node(op, i, o, name=name)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph([node("Relu", ["a"], ["y"], "last"), node("Neg", ["x"], ["a"], "first")], "g", [x], [y])
    toposort(g)
    assert [n.name for n in g.node] == ["first", "last"]
    g = helper.make_graph([node("Neg", ["x"], ["a"], "first"), node("Add", ["a", "c"], ["b"], "add"),
                           node("Relu", ["b"], ["c"], "relu"), node("Relu", ["c"], ["y"], "out")], "loop", [x], [y])
    before = [n.name for n in g.node]
    with pytest.raises(ArtifactError) as err:
        toposort(g)
    assert str(err.value) == ("graph 'loop': nodes form a cycle (relu -> add -> relu); a rewrite fed a node's output "
                              "back into its own inputs, so it has no order")
    assert [n.name for n in g.node] == before  # left as it was
