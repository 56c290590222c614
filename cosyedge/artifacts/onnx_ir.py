"""ONNX IR versions: the lowest IR version a model's content needs (:func:`portable_ir_version`: its opsets, tensor
element types (:data:`TYPE_MIN_IR`) and other IR features) and :func:`with_portable_ir`, which declares it, so that
models onnx stamps with its own newest IR version still load in older readers (ONNX Runtime, TensorRT's parser).
"""

from __future__ import annotations

from typing import Any

TYPE_MIN_IR = {17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13}
"""dict[int, int]: ONNX tensor element type -> the IR version that introduced it (onnx ``docs/IR.md``: the FLOAT8 types
IR 9, UINT4/INT4 IR 10, FLOAT4E2M1 IR 11, later types after); types not listed exist since IR 4 or earlier."""


def portable_ir_version(model: Any) -> int:
    """The lowest IR version ``model`` may declare (int): what its opsets need (``onnx.helper.find_min_ir_version_for``;
    domains onnx does not know are ignored), what its tensor element types need (:data:`TYPE_MIN_IR`, over the
    graph and every subgraph), and what its other IR features need (onnx ``docs/IR.md``, ``docs/Versioning.md``:
    sparse initializers IR 6, training info IR 7, model-local functions and optional types IR 8, function overloads,
    function ``value_info`` and ``metadata_props`` on graphs, nodes or functions IR 10); at least 4 (initializers
    that are not graph inputs).

    onnx writes its own newest IR version into every model it makes (``helper.make_model``, the version converter,
    onnx-graphsurgeon's export: IR 14 with onnx 1.23), while ONNX Runtime refuses a model whose IR version is newer
    than it knows (onnxruntime 1.23.2, what an aarch64 Python 3.10 gets: "Unsupported model IR version: 14, max
    supported IR version: 11"), although nothing in the model needs more than its opsets.

    Args:
        model (onnx.ModelProto): The model (external data need not be loaded).
    """
    from onnx import helper

    need = 4
    try:
        need = max(need, helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True))
    except (TypeError, ValueError):  # an opset onnx does not know: keep what the model says
        return int(model.ir_version)

    def has(msg, field: str) -> bool:  # a field an older onnx's protobuf may not even know
        try:
            return len(getattr(msg, field)) > 0
        except AttributeError:
            return False

    def type_needs(tp) -> int:
        which = tp.WhichOneof("value")
        if which == "tensor_type":
            return TYPE_MIN_IR.get(tp.tensor_type.elem_type, 0)
        if which == "optional_type":
            return max(8, type_needs(tp.optional_type.elem_type))
        if which == "sequence_type":
            return type_needs(tp.sequence_type.elem_type)
        if which == "map_type":
            return type_needs(tp.map_type.value_type)
        return 0

    def needs(graph):
        yield 10 if has(graph, "metadata_props") else 0
        yield 6 if len(graph.sparse_initializer) else 0
        for t in graph.initializer:
            yield TYPE_MIN_IR.get(t.data_type, 0)
        for v in (*graph.input, *graph.output, *graph.value_info):
            yield type_needs(v.type)
        yield from nodes(graph.node)

    def nodes(node_list):
        for node in node_list:
            yield 10 if has(node, "metadata_props") else 0
            for a in node.attribute:
                if a.HasField("t"):
                    yield TYPE_MIN_IR.get(a.t.data_type, 0)
                if a.HasField("tp"):
                    yield type_needs(a.tp)
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    yield from needs(g)

    extra = [7 if len(model.training_info) else 0]
    for f in model.functions:
        extra.append(10 if (getattr(f, "overload", "") or has(f, "value_info") or has(f, "metadata_props")) else 8)
        extra.extend(nodes(f.node))
    return max([need, *extra, *needs(model.graph)])


def with_portable_ir(model: Any) -> Any:
    """Declare the lowest IR version ``model``'s content needs (:func:`portable_ir_version`), in place: lower than onnx's
    newest (which onnx writes into every model it makes), so that older readers (ONNX Runtime 1.23, which reads
    IR <= 11; TensorRT's ONNX parser; Netron) load it, and never lower than its opsets need (the NSNet2 and
    DeepFilterNet3 exports declare IR 6 and 7 with opset 17, which needs IR 8).

    Returns:
        onnx.ModelProto: ``model``.
    """
    model.ir_version = portable_ir_version(model)
    return model
