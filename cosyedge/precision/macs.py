"""Multiply-accumulates (MACs) per chunk of a streaming ONNX, and the share that INT8 Q/DQ covers.

An "INT8" build quantizes only the inputs of Conv, ConvTranspose, Gemm and MatMul with constant weights
(:mod:`cosyedge.precision.qdq`); GRU/LSTM/RNN and the weighted ops kept in float (first and last convs, 1-channel
ops, ``--exclude``) still run in float. This module says how much of the arithmetic that is: every MAC-heavy op of
the stream graph (Conv, ConvTranspose, MatMul, Gemm, GRU, LSTM, RNN) is counted at the shapes one chunk has, and an
op counts as quantized when both its data input (input 0) and its weight (input 1) come out of a
``DequantizeLinear`` node (explicit Q/DQ, as TensorRT fuses it into an INT8 kernel), or it is a
``com.microsoft.DynamicQuantizeMatMul`` (INT8 weight, activation quantized per call: the ``ort_matmul`` GRU cells).

Shapes are measured, not inferred: the stream graph runs once in ONNX Runtime on a zero chunk (batch 1, one hop by
default) with every tensor marked as an output, so every shape is the one a chunk really has.

MACs per op (batch N; shapes of the chunk):

* Conv: ``N * C_out * prod(out spatial) * (C_in / group) * prod(kernel)``;
* ConvTranspose: ``N * C_in * prod(in spatial) * (C_out / group) * prod(kernel)``;
* MatMul, Gemm: ``prod(output shape) * K`` (K the reduced dimension of input A);
* GRU / LSTM / RNN: ``directions * steps * N * gates * H * (input size + H)`` with 3 / 4 / 1 gates (the input and
  recurrent matrix products of every step; biases and peepholes are not MACs).

Source: ONNX operator specs (Conv, ConvTranspose, MatMul, Gemm, GRU, LSTM, RNN: input/weight layouts, ``layout``
attribute); the MAC counts are the textbook dot-product counts (e.g. fvcore / ptflops conventions: one MAC per
multiply-add of a weight).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError, first_line
from cosyedge.passes.edit import node_attrs

MAC_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "GRU", "LSTM", "RNN", "DynamicQuantizeMatMul")
"""tuple[str, ...]: the ops counted (the ones that hold nearly all the arithmetic of a speech model)."""

LOW_SHARE = 0.5
"""float: below this share of the MACs in INT8, an INT8 build warns that it is mostly float."""

_GATES = {"GRU": 3, "LSTM": 4, "RNN": 1}


@dataclasses.dataclass
class OpMacs:
    """MACs of one op for one chunk.

    Attributes:
        name (str): Node name.
        op (str): Op type (one of :data:`MAC_OPS`).
        macs (int): Multiply-accumulates per chunk (batch 1).
        quantized (bool): Its data input and weight both come out of ``DequantizeLinear`` (runs in INT8).
    """

    name: str
    op: str
    macs: int
    quantized: bool


def op_macs(node: Any, shapes: dict[str, tuple]) -> int:
    """MACs (int) of one node for the shapes in ``shapes`` (module doc for the formulas); 0 when a shape it needs
    is unknown.

    Args:
        node (onnx.NodeProto): A node whose op is in :data:`MAC_OPS`.
        shapes (dict[str, tuple[int, ...]]): Shape of every tensor by name (inputs, initializers, outputs).
    Returns:
        int: multiply-accumulates.
    """
    def shape(i: int, outputs: bool = False) -> tuple | None:
        names = node.output if outputs else node.input
        return shapes.get(names[i]) if len(names) > i and names[i] else None

    op, a = node.op_type, node_attrs(node)
    x, w, y = shape(0), shape(1), shape(0, outputs=True)
    if op == "Conv" and w is not None and y is not None:
        return int(math.prod(y[:1]) * w[0] * math.prod(y[2:]) * math.prod(w[1:]))
    if op == "ConvTranspose" and w is not None and x is not None:
        return int(math.prod(x[:2]) * math.prod(x[2:]) * math.prod(w[1:]))
    if op in ("MatMul", "DynamicQuantizeMatMul") and x is not None and y is not None:
        return int(math.prod(y) * (x[-1] if x else 1))
    if op == "Gemm" and x is not None and y is not None and len(x) == 2:
        return int(math.prod(y) * (x[0] if int(a.get("transA", 0)) else x[1]))
    if op in _GATES and x is not None and w is not None and len(x) == 3 and len(w) == 3:
        hidden = int(a.get("hidden_size", w[1] // _GATES[op]))
        steps, batch = (x[1], x[0]) if int(a.get("layout", 0)) else (x[0], x[1])
        return int(w[0] * steps * batch * _GATES[op] * hidden * (x[2] + hidden))
    return 0


def chunk_shapes(model: Any, contract: StreamContract, chunk_samples: int | None = None) -> dict[str, tuple]:
    """Shapes of every tensor of a stream graph for one chunk: the graph runs once in ONNX Runtime on zeros
    (batch 1) with every tensor marked as an output.

    Args:
        model (onnx.ModelProto): The stream graph (FP32 or Q/DQ).
        contract (StreamContract): Its contract (inputs, states, hop).
        chunk_samples (int | None): Samples in the chunk; default one hop (what ``cosyedge run`` uses).
    Returns:
        dict[str, tuple[int, ...]]: by tensor name (graph inputs, initializers, node outputs).
    Raises:
        ArtifactError: ONNX Runtime cannot run the graph (first line of its message).
    """
    from cosyedge.runtime.ort import session_from_onnx
    from cosyedge.surgery.facts import mark_all_outputs

    chunk = int(chunk_samples or contract.hop_samples)
    feeds = {i.name: np.zeros(i.concrete_shape(1, i.frames(chunk, contract.hop_samples)), dtype=i.dtype)
             for i in contract.stream_inputs}
    feeds.update({s.input: s.zeros(1) for s in contract.states})
    marked, _ = mark_all_outputs(model)
    try:
        sess = session_from_onnx(marked, threads=1, inter_threads=1, optimize=False, log_severity=4)
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(None, feeds)
    except Exception as err:  # onnxruntime's own exception types
        raise ArtifactError(f"cannot count the MACs per chunk: ONNX Runtime cannot run the stream graph on a "
                            f"chunk of {chunk} samples ({first_line(err)})") from None
    shapes = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}
    shapes.update({k: tuple(v.shape) for k, v in feeds.items()})
    shapes.update({n: tuple(np.shape(v)) for n, v in zip(names, values)})
    return shapes


def count_macs(model: Any, contract: StreamContract, chunk_samples: int | None = None) -> list[OpMacs]:
    """MACs per chunk of every :data:`MAC_OPS` node of a stream graph, and whether it runs quantized.

    Args:
        model (onnx.ModelProto): The stream graph (FP32 or with explicit Q/DQ).
        contract (StreamContract): Its contract.
        chunk_samples (int | None): Samples per chunk; default one hop.
    Returns:
        list[OpMacs]: in graph order (ops with 0 MACs, e.g. unknown shapes, left out).
    Raises:
        ArtifactError: ONNX Runtime cannot run the graph.
    """
    shapes = chunk_shapes(model, contract, chunk_samples)
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    rows = []
    for n in model.graph.node:
        if n.op_type not in MAC_OPS:
            continue
        macs = op_macs(n, shapes)
        if macs <= 0:
            continue
        q = n.op_type == "DynamicQuantizeMatMul" or (
            len(n.input) > 1 and all(producer.get(n.input[i]) == "DequantizeLinear" for i in (0, 1)))
        rows.append(OpMacs(n.name or f"{n.op_type}:{n.output[0]}", n.op_type, macs, q))
    return rows


def mac_share(model: Any, contract: StreamContract, chunk_samples: int | None = None) -> dict:
    """The INT8 share of a stream graph's MACs per chunk (what an INT8 build records in its manifest).

    Args:
        model (onnx.ModelProto): The stream graph (with explicit Q/DQ for an INT8 build; an ``ort_matmul`` model
            is counted on its one-hop graph, :func:`cosyedge.passes.hop_scan.one_hop_body`).
        contract (StreamContract): Its contract.
        chunk_samples (int | None): Samples per chunk; default one hop.
    Returns:
        dict: ``chunk_samples`` (int), ``total`` (int, MACs per chunk), ``quantized`` (int, MACs of quantized
        ops), ``share`` (float in [0, 1], ``quantized / total``; 0.0 when total is 0), ``float_ops`` (list of
        ``{"name", "op", "macs"}``, most MACs first: every counted op left in float).
    Raises:
        ArtifactError: ONNX Runtime cannot run the graph.
    """
    from cosyedge.passes.hop_scan import one_hop_body

    model = one_hop_body(model) or model  # an ort_matmul model: its one-hop graph, the body of its Scan over hops
    rows = count_macs(model, contract, chunk_samples)
    total = sum(r.macs for r in rows)
    quant = sum(r.macs for r in rows if r.quantized)
    floats = sorted((r for r in rows if not r.quantized), key=lambda r: -r.macs)
    return {"chunk_samples": int(chunk_samples or contract.hop_samples), "total": int(total), "quantized": int(quant),
            "share": float(quant / total) if total else 0.0,
            "float_ops": [{"name": r.name, "op": r.op, "macs": int(r.macs)} for r in floats]}


def _si(n: float) -> str:
    for unit, k in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{int(n)}"


def share_line(report: dict, shown: int = 4) -> str:
    """The one log line of an INT8 build: ``"INT8 covers 12.3 % of the 1.2 M MACs per chunk of 160 samples;
    float: GRU '/gru/GRU' (1.05 M MACs), Conv '/enc/Conv' (51.2 k MACs) (+1 more)"``.

    Args:
        report (dict): What :func:`mac_share` returned.
        shown (int): Float ops named (most MACs first); the rest are counted.
    Returns:
        str: the line.
    """
    floats = report["float_ops"]
    named = ", ".join(f"{f['op']} '{f['name']}' ({_si(f['macs'])} MACs)" for f in floats[:shown])
    more = f" (+{len(floats) - shown} more)" if len(floats) > shown else ""
    return (f"INT8 covers {100 * report['share']:.1f} % of the {_si(report['total'])} MACs per chunk of "
            f"{report['chunk_samples']} samples; float: " + (named + more if floats else "none"))


__all__ = ["LOW_SHARE", "MAC_OPS", "OpMacs", "chunk_shapes", "count_macs", "mac_share", "op_macs", "share_line"]
