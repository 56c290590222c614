"""Pass ``dqmm_per_row``: per-row dynamic quantization for batched runs: each stream of a
:class:`~cosyedge.runtime.pool.StreamPool` tick quantizes its own activations, so no stream's volume sets another
stream's quantization step.

What stays: the float ops of a batched run round differently from a batch-1 run (about 1e-7, as in any FP32
pool), and at a dynamic INT8 step such a difference can flip one rounding step, which a recurrence (GRU) carries on:
a stream in a pool is then close to, not bit-identical with, itself alone (NSNet2
``ort_matmul``, 600 hops: 50.8 dB for a stream depending on its slot; the same as the INT8 model's own distance from
FP32, 43-54 dB). Batch 1 (one stream) is bit-identical.

``com.microsoft.DynamicQuantizeMatMul`` (the ``ort_matmul`` INT8 GRU cells, :mod:`cosyedge.precision.qdq_matmul`)
quantizes its input ``A`` to uint8 with one scale and zero point computed per call over the whole tensor. At batch 1
that is per stream; in a pool tick of ``m`` streams it is one range over all ``m`` rows, so a loud stream coarsens a
quiet stream's quantization (a quiet stream beside a loud one 54.9 dB from the same stream alone).
:func:`per_row_dynamic_quant` rewrites each such node into the same arithmetic done per row of ``A`` (every axis but
the last is a row): ``lo = min(min(a), 0)``, ``hi = max(max(a), 0)``, ``scale = (hi - lo) / 255`` (1 when
``hi == lo``), ``zp = round_half_even(clip(-lo / scale, 0, 255))``, ``q = clip(round(a / scale) + zp, 0, 255)``, then
``MatMulInteger(q, B)`` (uint8 x int8 -> int32, zero point 0), minus ``zp * colsum(B)`` in int32 (the zero point
taken out exactly), times ``scale * b_scale`` plus the bias, in float: what ONNX Runtime's kernel computes for one
row alone (``GetQuantizationParameter`` and ``MlasQuantizeLinear`` then the u8s8 GEMM with the zero point inside).

Applied (for correctness, any provider) by a StreamPool of more than one stream (:data:`cosyedge.passes.POOL_PASSES`);
it works in place on the model it is given (the pool's own copy) and a failure is raised, not skipped.

Source: ONNX Runtime ``onnxruntime/contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc``
(https://github.com/microsoft/onnxruntime); ONNX ``DynamicQuantizeLinear`` and ``MatMulInteger``
(https://onnx.ai/onnx/operators/).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.passes.edit import opset, splice

OP = "DynamicQuantizeMatMul"


def per_row_dynamic_quant(model: Any) -> int:
    """In place: rewrite every ``DynamicQuantizeMatMul`` of ``model``'s main graph with a constant int8 ``B`` and zero
    (or absent) ``b_zero_point`` into per-row dynamic quantization (module docstring), so that each row of ``A`` (one
    stream of a batched run) is quantized from its own range.

    Args:
        model (onnx.ModelProto): The model a batched session runs (a copy: it is changed).
    Returns:
        int: the nodes rewritten (0: none found, the model is unchanged). Nodes whose ``B`` is not a constant int8
        initializer or whose ``b_zero_point`` is not all zeros are left as they are (not counted).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    version = opset(model)
    replace: dict[int, list] = {}
    new_inits: list = []

    def const(name: str, value, dtype) -> str:
        new_inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    for idx, n in enumerate(g.node):
        if n.op_type != OP or n.input[1] not in inits:
            continue
        b = numpy_helper.to_array(inits[n.input[1]])
        if b.dtype != np.int8 or b.ndim != 2:
            continue
        if len(n.input) > 3 and n.input[3]:
            if n.input[3] not in inits or numpy_helper.to_array(inits[n.input[3]]).any():
                continue
        p = f"{n.name or n.output[0]}/per_row"
        a, y = n.input[0], n.output[0]
        zero, one = const(f"{p}/zero", 0.0, np.float32), const(f"{p}/one", 1.0, np.float32)
        qmax = const(f"{p}/qmax", 255.0, np.float32)
        colsum = const(f"{p}/colsum", b.astype(np.int32).sum(axis=0), np.int32)
        nodes = []

        def node(op: str, ins: list, out: str, **attrs) -> str:
            nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
            return out

        if version >= 18:
            axes = const(f"{p}/axes", [-1], np.int64)
            lo = node("ReduceMin", [a, axes], f"{p}/rmin", keepdims=1)
            hi = node("ReduceMax", [a, axes], f"{p}/rmax", keepdims=1)
        else:
            lo = node("ReduceMin", [a], f"{p}/rmin", axes=[-1], keepdims=1)
            hi = node("ReduceMax", [a], f"{p}/rmax", axes=[-1], keepdims=1)
        lo = node("Min", [lo, zero], f"{p}/lo")
        hi = node("Max", [hi, zero], f"{p}/hi")
        rng = node("Sub", [hi, lo], f"{p}/range")
        same = node("Equal", [hi, lo], f"{p}/same")
        scale = node("Where", [same, one, node("Div", [rng, qmax], f"{p}/scale0")], f"{p}/scale")
        zpf = node("Sub", [zero, node("Div", [lo, scale], f"{p}/lo_scaled")], f"{p}/zp0")
        zpf = node("Round", [node("Clip", [zpf, zero, qmax], f"{p}/zp_clip")], f"{p}/zp")
        q = node("Add", [node("Round", [node("Div", [a, scale], f"{p}/a_scaled")], f"{p}/a_round"), zpf],
                 f"{p}/a_shift")
        q = node("Cast", [node("Clip", [q, zero, qmax], f"{p}/a_clip")], f"{p}/a_u8", to=TensorProto.UINT8)
        acc = node("MatMulInteger", [q, n.input[1]], f"{p}/acc")
        zpi = node("Cast", [zpf], f"{p}/zp_i32", to=TensorProto.INT32)
        acc = node("Sub", [acc, node("Mul", [zpi, colsum], f"{p}/zp_colsum")], f"{p}/acc_zp")
        mult = node("Mul", [scale, n.input[2]], f"{p}/multiplier")
        out = node("Mul", [node("Cast", [acc], f"{p}/acc_f", to=TensorProto.FLOAT), mult],
                   y if len(n.input) < 5 or not n.input[4] else f"{p}/scaled")
        if len(n.input) > 4 and n.input[4]:
            node("Add", [out, n.input[4]], y)
        replace[idx] = nodes
    if not replace:
        return 0
    splice(model, replace, new_inits)
    onnx.checker.check_model(model)
    return len(replace)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`per_row_dynamic_quant`, in place on ``model``."""
    return model, {"dqmm_per_row": per_row_dynamic_quant(model)}


__all__ = ["OP", "per_row_dynamic_quant", "run"]
