"""Count what ONNX Runtime's CPU execution provider fuses in a Q/DQ model: :func:`ort_fusion_report`.

A Q/DQ ONNX only runs in INT8 where ONNX Runtime's graph optimizer turns ``DQ -> op -> Q`` groups into
quantized kernels (``QLinearConv``, ``QLinearMatMul``, ``MatMulIntegerToFloat``, ...). Where it does not, the
graph runs float convs wrapped in Quantize/DequantizeLinear: slower than FP32 and no more precise. This module
writes the graph ORT actually runs (``SessionOptions.optimized_model_filepath`` at ``ORT_ENABLE_ALL``, the
level every cosyedge session uses) and counts fused quantized ops, weighted ops left in float behind a DQ, and
the Q/DQ nodes left. The rules counted are those of the ORT build this runs on: x86-64 here (``QDQS8ToU8``
converts int8 activation pairs to uint8; ARM keeps int8 and fuses other patterns), so the report is only true
for the machine family it was made on; it records ``platform.machine()``.

Sources: ONNX Runtime ``onnxruntime/core/optimizer/qdq_transformer/`` (``qdq_s8_to_u8.cc``,
``selectors_actions/qdq_selectors.cc``), https://github.com/microsoft/onnxruntime; ONNX Runtime docs,
"Graph optimizations" (``optimized_model_filepath``),
https://onnxruntime.ai/docs/performance/model-optimizations/graph-optimizations.html.
"""

from __future__ import annotations

import platform
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

FUSED_OPS = frozenset({
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearConcat", "QLinearLeakyRelu",
    "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax", "QLinearWhere", "QLinearReduceMean",
    "QLinearConvTranspose", "QAttention"})
"""frozenset[str]: quantized kernels ONNX Runtime fuses Q/DQ groups into (ai.onnx and com.microsoft)."""

WEIGHTED_FLOAT_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "FusedConv", "FusedMatMul",
                                "FusedGemm", "NchwcConv"})
"""frozenset[str]: float weighted ops (as ORT names them after its own float fusions)."""

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def optimized_graph(onnx_path: str | Path, out_path: str | Path) -> None:
    """Let ONNX Runtime (CPU, ``ORT_ENABLE_ALL``, one thread) optimize ``onnx_path`` and write the graph it runs
    to ``out_path`` (onnx file). Raises what ``onnxruntime.InferenceSession`` raises for a model it cannot load."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.optimized_model_filepath = str(out_path)
    ort.InferenceSession(str(onnx_path), sess_options=so, providers=["CPUExecutionProvider"])


def _weight_owner(model: Any) -> dict[str, str]:
    """Map each weight initializer that reaches a weighted op (directly or through one DequantizeLinear) to that
    op's name (dict[str, str]), in the model given to ORT."""
    inits = {t.name for t in model.graph.initializer}
    dq_src = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    owner: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type in WEIGHTED_FLOAT_OPS and len(n.input) > 1:
            w = dq_src.get(n.input[1], n.input[1])
            if w in inits:
                owner[w] = n.name
        elif n.op_type == "DynamicQuantizeMatMul" and n.input[1] in inits:  # INT8 weight read directly
            owner[n.input[1]] = n.name
    return owner


def ort_fusion_report(onnx_path: str | Path, contract: Any = None) -> dict:
    """Report what ONNX Runtime's CPU EP fuses in a (Q/DQ) model.

    Args:
        onnx_path (str | Path): The model (an INT8 Q/DQ stream ONNX; an FP32 model reports nothing fused).
        contract (StreamContract | None): Its stream contract, for the MAC counts (read from the model when None;
            a model without one gets ``fused_mac_share`` None).
    Returns:
        dict: ``fused`` ({op_type: count} of :data:`FUSED_OPS` in the optimized graph), ``fused_total`` (int),
        ``unfused_weighted`` (list[str]: float weighted ops of the optimized graph that read a DequantizeLinear
        output: Q/DQ that did not fuse), ``qdq_left`` (int: Quantize/DequantizeLinear nodes left), ``fused_mac_share``
        (float in [0, 1] | None: MACs per chunk of the weighted ops that became fused kernels / all MACs),
        ``machine`` (``platform.machine()``), ``onnxruntime`` (version).
    Raises:
        ArtifactError: ONNX Runtime cannot load the model (one line).
    """
    import onnx
    import onnxruntime as ort

    from cosyedge.errors import ArtifactError, first_line

    model = onnx.load(str(onnx_path))
    with tempfile.TemporaryDirectory(prefix="cosyedge-ortopt-") as tmp:
        out = Path(tmp) / "optimized.onnx"
        try:
            optimized_graph(onnx_path, out)
        except Exception as err:  # onnxruntime's own exception types
            raise ArtifactError(f"ONNX Runtime cannot load {onnx_path}: {first_line(err)}") from None
        opt = onnx.load(str(out))
    nodes = list(opt.graph.node)
    fused = Counter(n.op_type for n in nodes if n.op_type in FUSED_OPS)
    producer = {o: n for n in nodes for o in n.output}
    unfused = [n.name for n in nodes if n.op_type in WEIGHTED_FLOAT_OPS
               and any(getattr(producer.get(i), "op_type", "") == "DequantizeLinear" for i in n.input[:2])]
    owner = _weight_owner(model)
    fused_owners = {owner[i] for n in nodes if n.op_type in FUSED_OPS for i in n.input if i in owner}
    share = None
    try:
        from cosyedge.artifacts import StreamContract
        from cosyedge.precision.macs import count_macs

        ops = count_macs(model, contract if contract is not None else StreamContract.from_onnx(model))
        total = sum(o.macs for o in ops)
        share = sum(o.macs for o in ops if o.name in fused_owners) / total if total else 0.0
    except Exception:  # no stream contract (a plain model): no MAC share
        share = None
    return {"fused": dict(sorted(fused.items())), "fused_total": int(sum(fused.values())),
            "unfused_weighted": sorted(unfused), "qdq_left": sum(1 for n in nodes if n.op_type in _QDQ),
            "fused_mac_share": share, "machine": platform.machine(), "onnxruntime": ort.__version__}


def fusion_line(report: dict) -> str:
    """One log line (str) for :func:`ort_fusion_report`'s result."""
    fused = ", ".join(f"{n} {op}" for op, n in report["fused"].items()) or "nothing"
    share = report["fused_mac_share"]
    share_txt = f"{100 * share:.0f} % of MACs in fused INT8 kernels" if share is not None else "MAC share unknown"
    return (f"ONNX Runtime CPU ({report['machine']}) fuses {fused}; {len(report['unfused_weighted'])} weighted ops "
            f"stay float between Q/DQ, {report['qdq_left']} Q/DQ nodes left; {share_txt}")
