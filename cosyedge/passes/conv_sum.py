"""Per-chunk graph simplification for ONNX Runtime CPU: fold ``Conv -> Add`` (residual sums) into one node.

A streaming step of a small model is a short chain of small kernels (the reference stream graph: 172 nodes,
156 after ONNX Runtime's ``ORT_ENABLE_ALL`` optimisation), so per-node dispatch counts. ONNX Runtime fuses
``Conv -> activation`` into ``com.microsoft.FusedConv`` but leaves a ``Conv`` whose output is added to
another tensor (a residual ``x + proj(y)``) as two nodes. Its CPU ``FusedConv`` kernel takes that tensor
as a fourth input ``Z`` ("sum") and adds it into the convolution's output buffer: one node, one pass less
over memory. :func:`fuse_conv_sum` rewrites every such pair where ``Z`` has exactly the convolution's
output shape (checked with ONNX shape inference at the session's concrete input shapes: no broadcast).

The rewrite is for ONNX Runtime sessions only (``FusedConv`` is an ONNX Runtime contrib op): pass ``conv_sum``
(:data:`cosyedge.passes.SESSION_PASSES`), applied in memory by :class:`~cosyedge.runtime.ort.OrtStreamSession` on the
CPU provider, never written into an artifact. Outputs are not bit-identical (the sum is added in another order): on
the bundled reference,
1000 chunks of speech, max abs difference 6e-8, SNR 141 dB vs the unfused graph (issue rule: >= 120 dB;
``tests/passes/test_conv_add_fusion.py``).

Source: ONNX Runtime ``onnxruntime/contrib_ops/cpu/fused_conv.cc`` and ``core/providers/cpu/nn/conv.cc``
(``Conv<float>::Compute``: optional input 3 "Sum" copied into Y, then MLAS accumulates with beta 1);
ONNX Runtime contrib op docs (``com.microsoft.FusedConv``: X, W, B, Z).
"""

from __future__ import annotations

from typing import Any

from cosyedge.passes.edit import DEFAULT_DOMAINS, copy_model
from cosyedge.passes.shapes import concrete_shapes

MS_DOMAIN = "com.microsoft"


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

    m = copy_model(model)
    g = m.graph
    shapes = concrete_shapes(m, input_shapes)
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
        if add.op_type != "Add" or add.domain not in DEFAULT_DOMAINS or len(add.input) != 2:
            continue
        for k in (0, 1):
            conv, z = producer.get(add.input[k]), add.input[1 - k]
            if (conv is None or conv.op_type != "Conv" or conv.domain not in DEFAULT_DOMAINS or id(conv) in replace
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


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`fuse_conv_sum` at ``target.shapes``."""
    out, n = fuse_conv_sum(model, target.shapes)
    return out, {"conv_sum": n}


__all__ = ["MS_DOMAIN", "fuse_conv_sum", "run"]
