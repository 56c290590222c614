"""Per-chunk graph simplification for ONNX Runtime CPU: fold ``Conv -> Add`` (residual sums) into one node.

A streaming step of a small model is a short chain of small kernels (the reference stream graph: 172 nodes,
156 after ONNX Runtime's ``ORT_ENABLE_ALL`` optimisation), so per-node dispatch counts. ONNX Runtime fuses
``Conv -> activation`` into ``com.microsoft.FusedConv`` but leaves a ``Conv`` whose output is added to
another tensor (a residual ``x + proj(y)``) as two nodes. Its CPU ``FusedConv`` kernel takes that tensor
as a fourth input ``Z`` ("sum") and adds it into the convolution's output buffer: one node, one pass less
over memory. :func:`fuse_conv_sum` rewrites every such pair where ``Z`` has exactly the convolution's
output shape (checked with ONNX shape inference at the session's concrete input shapes: no broadcast).

The rewrite is for ONNX Runtime sessions only (``FusedConv`` is an ONNX Runtime contrib op): it is applied
in memory by :class:`~cosyedge.runtime.ort.OrtStreamSession` on the CPU provider, never written into an
artifact. Outputs are not bit-identical (the sum is added in another order): on the bundled reference,
1000 chunks of speech, max abs difference 6e-8, SNR 141 dB vs the unfused graph (issue rule: >= 120 dB;
``tests/runtime/test_ort_fuse.py``).

Source: ONNX Runtime ``onnxruntime/contrib_ops/cpu/fused_conv.cc`` and ``core/providers/cpu/nn/conv.cc``
(``Conv<float>::Compute``: optional input 3 "Sum" copied into Y, then MLAS accumulates with beta 1);
ONNX Runtime contrib op docs (``com.microsoft.FusedConv``: X, W, B, Z).
"""

from __future__ import annotations

from typing import Any

MS_DOMAIN = "com.microsoft"
SMALL_BYTES = 4096
"""int: initializers up to this size keep their values for the shape check; larger ones are replaced by their
declared shape (weights: no serialised copy of them is made)."""


def _concrete(model: Any, input_shapes: dict[str, list[int]]) -> dict[str, tuple]:
    """Shapes of every value (name -> tuple of ints, only fully known ones) at the given input shapes."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    # big initializers become typed graph inputs (their shape is all shape inference needs): no serialised
    # copy of the weights; small ones (Slice bounds, Reshape shapes) keep their values for data propagation
    big = [t for t in m.graph.initializer if t.ByteSize() > SMALL_BYTES]
    for t in big:
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    keep = [t for t in m.graph.initializer if t.ByteSize() <= SMALL_BYTES]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    for i in m.graph.input:
        if i.name in input_shapes:
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, input_shapes[i.name]):
                d.Clear()
                d.dim_value = int(v)
    del m.graph.value_info[:]
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    out: dict[str, tuple] = {}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[v.name] = tuple(d.dim_value for d in dims)
    return out


def fuse_conv_sum(model: Any, input_shapes: dict[str, list[int]]) -> tuple[Any, int]:
    """Fold ``Add(Conv(x, W, B), z)`` into ``com.microsoft.FusedConv(x, W, B, z)`` (ONNX Runtime CPU).

    A pair is folded only when the Conv output feeds that Add alone and is no graph output, ``z`` is not
    an initializer, and ``z`` and the Conv output have the same fully known shape at ``input_shapes``.
    Works on a copy.

    Args:
        model (onnx.ModelProto): An FP32 model (float Conv only; other dtypes are left alone).
        input_shapes (dict[str, list[int]]): Concrete shape of every graph input (e.g. ``{"audio":
            [1, 1, 160], "state_in.00": [1, 1, 160], ...}``) for the shape check.
    Returns:
        tuple[onnx.ModelProto, int]: The rewritten copy (``com.microsoft`` opset 1 added when anything was
        folded) and the number of pairs folded (0: the copy equals the input).
    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference (callers fall back to
            the unfused model).
    """
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    shapes = _concrete(m, input_shapes)
    elem = {v.name: v.type.tensor_type.elem_type for v in g.input}
    inits = {t.name for t in g.initializer}
    for t in g.initializer:
        elem[t.name] = t.data_type
    producer = {o: n for n in g.node for o in n.output}
    uses: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    graph_outputs = {o.name for o in g.output}
    replace: dict[int, Any] = {}
    for add in g.node:
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
            continue
        for k in (0, 1):
            conv, z = producer.get(add.input[k]), add.input[1 - k]
            if (conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or id(conv) in replace
                    or uses.get(conv.output[0], 0) != 1 or conv.output[0] in graph_outputs or z in inits
                    or elem.get(conv.input[1]) != onnx.TensorProto.FLOAT):
                continue
            y_shape = shapes.get(conv.output[0])
            if y_shape is None or shapes.get(z) != y_shape:
                continue
            ins = list(conv.input) + ([""] if len(conv.input) == 2 else []) + [z]
            fused = helper.make_node("FusedConv", ins, [add.output[0]], name=f"{conv.name or add.name}/sum",
                                     domain=MS_DOMAIN)
            fused.attribute.extend(conv.attribute)
            replace[id(conv)] = None
            replace[id(add)] = fused
            break
    folded = sum(1 for v in replace.values() if v is not None)
    if not folded:
        return m, 0
    nodes = [replace.get(id(n), n) for n in g.node]
    del g.node[:]
    g.node.extend(n for n in nodes if n is not None)
    if not any(o.domain == MS_DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return m, folded


def splice(m: Any, replace: dict[int, list], new_inits: list) -> None:
    """In place: splice ``replace`` (node index -> its new nodes; by index, since protobuf wrappers' ``id()`` is not
    stable) into ``m`` (onnx.ModelProto), add ``new_inits`` (onnx.TensorProto list) and drop the initializers no node
    or graph output reads any more. Shared by the in-memory session rewrites (:mod:`cosyedge.runtime.ort_fft`,
    :mod:`cosyedge.runtime.ort_matmul`)."""
    g = m.graph
    out = []
    for idx, node in enumerate(g.node):
        out.extend(replace.get(idx, [node]))
    del g.node[:]
    g.node.extend(out)
    g.initializer.extend(new_inits)
    used = {i for n in g.node for i in n.input}
    used |= {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)


def node_attrs(node: Any) -> dict:
    """``node``'s (onnx.NodeProto) attributes as a dict of Python values (name -> int, float, bytes, list, ...), for
    the in-memory session rewrites (:mod:`cosyedge.runtime.ort_fft`, :mod:`cosyedge.runtime.ort_matmul`)."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
