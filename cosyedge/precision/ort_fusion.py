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
    from cosyedge.runtime.ort import ort_session

    ort_session(str(onnx_path), so, ["CPUExecutionProvider"])


def _graphs(graph: Any, depth: int = 0):
    """Yield ``(graph, depth)`` for ``graph`` (depth 0) and every subgraph under it (Scan/Loop/If bodies, depth >= 1),
    depth first."""
    yield graph, depth
    for n in graph.node:
        for a in n.attribute:
            if a.g is not None and a.g.ByteSize():
                yield from _graphs(a.g, depth + 1)
            for g in a.graphs:
                yield from _graphs(g, depth + 1)


def _weight_owner(model: Any) -> dict[str, str]:
    """Map each weight initializer that reaches a weighted op (directly or through one DequantizeLinear) to that
    op's name (dict[str, str]), in the model given to ORT."""
    inits = {t.name for g, _ in _graphs(model.graph) for t in g.initializer}
    nodes = [n for g, _ in _graphs(model.graph) for n in g.node]
    dq_src = {n.output[0]: n.input[0] for n in nodes if n.op_type == "DequantizeLinear"}
    owner: dict[str, str] = {}
    for n in nodes:
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
        output: Q/DQ that did not fuse), ``qdq_left`` (int: Quantize/DequantizeLinear nodes left), ``qdq_in_bodies``
        (int: how many of them sit inside subgraphs, e.g. the Scan bodies of an adopted model; every count here covers
        the main graph and every subgraph ORT optimized), ``fused_mac_share``
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
    graphs = list(_graphs(opt.graph))
    nodes = [n for g, _ in graphs for n in g.node]
    fused = Counter(n.op_type for n in nodes if n.op_type in FUSED_OPS)
    producer = {o: n for n in nodes for o in n.output}
    unfused = [n.name for n in nodes if n.op_type in WEIGHTED_FLOAT_OPS
               and any(getattr(producer.get(i), "op_type", "") == "DequantizeLinear" for i in n.input[:2])]
    in_bodies = sum(1 for g, d in graphs if d for n in g.node if n.op_type in _QDQ)
    owner = _weight_owner(model)
    fused_owners = {owner[i] for n in nodes if n.op_type in FUSED_OPS for i in n.input if i in owner}
    share = None
    try:
        from cosyedge.artifacts import StreamContract
        from cosyedge.precision.macs import count_macs

        from cosyedge.passes.hop_scan import one_hop_body

        # an ort_matmul model: the MACs of its one-hop graph (the body of its Scan over hops; node names unchanged)
        ops = count_macs(one_hop_body(model) or model,
                         contract if contract is not None else StreamContract.from_onnx(model))
        total = sum(o.macs for o in ops)
        share = sum(o.macs for o in ops if o.name in fused_owners) / total if total else 0.0
    except Exception:  # no stream contract (a plain model): no MAC share
        share = None
    return {"fused": dict(sorted(fused.items())), "fused_total": int(sum(fused.values())),
            "unfused_weighted": sorted(unfused), "qdq_left": sum(1 for n in nodes if n.op_type in _QDQ),
            "qdq_in_bodies": in_bodies,
            "fused_mac_share": share, "machine": platform.machine(), "onnxruntime": ort.__version__}


def fusion_line(report: dict) -> str:
    """One log line (str) for :func:`ort_fusion_report`'s result."""
    fused = ", ".join(f"{n} {op}" for op, n in report["fused"].items()) or "nothing"
    share = report["fused_mac_share"]
    share_txt = f"{100 * share:.0f} % of MACs in fused INT8 kernels" if share is not None else "MAC share unknown"
    bodies = report.get("qdq_in_bodies")
    where = f" ({bodies} inside Scan bodies)" if bodies else ""
    return (f"ONNX Runtime CPU ({report['machine']}) fuses {fused}; {len(report['unfused_weighted'])} weighted ops "
            f"stay float between Q/DQ, {report['qdq_left']} Q/DQ nodes left{where}; {share_txt}")


def placement_hint(int8: dict | None) -> str | None:
    """The one line ``cosyedge build`` logs after an ONNX Runtime INT8 build with TensorRT's placement whose weighted
    ops ORT leaves in float between Q/DQ (str), naming ``--int8-placement ort_matmul``; None when there is nothing to
    say: no INT8 report, another placement, a default ``ort_matmul`` that found nothing of its form
    (``placement_note``), everything fused, or Q/DQ inside Scan bodies (an adopted model, where only ``trt``
    applies). A ``cosyedge build`` line: ``check`` and the Python API do not log it.

    Args:
        int8 (dict | None): The manifest's ``reports.int8``.
    """
    if not int8 or int8.get("placement") != "trt" or int8.get("placement_note"):  # note: ort_matmul found nothing
        return None
    fusion = int8.get("ort_fusion") or {}
    unfused = len(fusion.get("unfused_weighted") or [])
    if not unfused or fusion.get("qdq_in_bodies"):
        return None
    return (f"placement trt is TensorRT's: ONNX Runtime CPU runs {unfused} of its weighted ops in float between Q/DQ "
            f"here; --int8-placement ort_matmul is the CPU placement (fused INT8 kernels; the default of a plain --int8 "
            f"ONNX Runtime build; docs/bench/bench_targets.json)")
