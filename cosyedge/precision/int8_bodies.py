"""INT8 inside Scan bodies (adopted models: GTCRN, DTLN, Silero VAD keep all their compute in ``Scan`` bodies).

The flat INT8 stage reads activations as extra model outputs and places Q/DQ in the main graph; for an adopted
model both happen in the leaf bodies (:func:`cosyedge.precision.bodies.leaf_bodies`):

* **Selection** (:func:`body_plans`): each leaf body is made a standalone model
  (:func:`~cosyedge.precision.bodies.body_model`; weights held by ``Constant`` nodes, as in Silero VAD's export, become initializers) and its weighted ops are split
  with the flat rules (:func:`cosyedge.precision.qdq.select_nodes`, with the body's roles: the body input carrying
  the audio is the "audio input", the body output carrying ``contract.output`` the "audio output"). The nodes a
  recipe builds as signal processing (``<recipe>_dsp/...``, the fixed STFT bases,
  :func:`cosyedge.precision.sparsity.is_dsp_node`) stay float as well.
* **Calibration** (:func:`expose`): a calibration copy of the model gets every body tensor to calibrate as an
  extra *scan output* of its body (an ``Identity`` into a new body output), then as a new output of each
  enclosing Scan up to the main graph. A scan output is the per-iteration values stacked on a new leading axis
  (hops; for GTCRN also streams), so fetching it from the main graph gives every value the tensor took in the
  chunk: the |x| histograms are those of the flat graphs (ONNX ``Scan``: scan outputs are concatenated over the
  iterations; onnx.ai/onnx/operators/onnx__Scan.html). The states still cross hops inside the Scan, so the values
  are those of one-hop streaming.
* **Q/DQ** (:func:`quantize_bodies`): each body gets the flat Q/DQ (:func:`cosyedge.precision.qdq.insert_qdq`:
  activations per tensor, weights per channel, pre-quantized) and is put back
  (:func:`~cosyedge.precision.bodies.put_body`); body inputs/outputs (the model's audio and states) keep FP32.
* **MACs** (:func:`mac_share`): one hop of the Q/DQ model with the inputs/outputs of every MAC op exposed the same
  way gives their shapes (the leading scan axes removed), so the share counted in INT8 is that of the bodies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, UsageError

onnx = lazy_import("onnx")

DSP_REASON = "recipe signal processing (fixed transform, <recipe>_dsp/)"
"""str: why a recipe's ``<recipe>_dsp/`` weighted node stays float."""


@dataclasses.dataclass
class BodyPlan:
    """One leaf body to quantize: the :class:`~cosyedge.precision.bodies.Body`, its standalone model ``model``
    (Constant weights as initializers), the ``quantize`` list (:class:`~cosyedge.precision.qdq.WeightedNode`) and
    ``kept`` ({node: reason})."""

    body: Any
    model: Any
    quantize: list
    kept: dict


def constants_to_initializers(graph: Any) -> int:
    """Move the tensors of ``graph``'s ``Constant`` nodes (``value`` attribute) into initializers of the same name,
    in place; returns how many moved. Other Constant forms (``value_float`` ...) are left as nodes."""
    keep, moved = [], 0
    for n in graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            graph.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    del graph.node[:]
    graph.node.extend(keep)
    return moved


def body_plans(model: Any, contract: Any, exclude: Iterable[str] = ()) -> list[BodyPlan]:
    """Split the weighted ops of every leaf body of ``model`` into quantized and kept float (see module docstring).

    Args:
        model (onnx.ModelProto): Adopted streaming model (not modified).
        contract (StreamContract): Its contract.
        exclude (Iterable[str]): Node names kept float on request (each must be a weighted node of some body).
    Returns:
        list[BodyPlan]: one per leaf body holding a weighted op, in depth-first order.
    Raises:
        UsageError: an ``exclude`` name is a weighted node of no body; no body holds a weighted op (compute in
            If/Loop bodies, or bodies reading tensors of an enclosing scope).
    """
    from cosyedge.precision import qdq
    from cosyedge.precision.bodies import body_model, leaf_bodies
    from cosyedge.precision.sparsity import is_dsp_node

    exclude = list(exclude or ())
    plans = []
    for b in leaf_bodies(model, contract):
        bm = body_model(model, b.graph)
        constants_to_initializers(bm.graph)
        nodes = qdq.weighted_nodes(bm)
        if not nodes:
            continue
        own = {w.name for w in nodes}
        quantize, kept = qdq.select_nodes(bm, [i.name for i in b.contract.stream_inputs], b.contract.output,
                                          [e for e in exclude if e in own])
        for w in nodes:
            if is_dsp_node(w.name):
                kept.setdefault(w.name, DSP_REASON)
        plans.append(BodyPlan(b, bm, [w for w in quantize if w.name not in kept], kept))
    known = {w for p in plans for w in [*(q.name for q in p.quantize), *p.kept]}
    missing = [e for e in exclude if e not in known]
    if missing:
        raise UsageError(f"--exclude {missing[0]!r} is not a weighted node of any Scan body (weighted nodes: "
                         f"{', '.join(sorted(known)) or 'none'})")
    if not plans:
        raise UsageError("int8: no Scan body of this model holds a Conv/ConvTranspose/Gemm/MatMul with constant "
                         "weights that the INT8 stage can reach (it enters Scan bodies that read no outer tensor, "
                         "not If/Loop): build it with --fp16 and/or --sparse, or in FP32")
    return plans


def calibration_tensors(model: Any, contract: Any) -> list[str]:
    """Every body tensor to calibrate (list[str], no duplicates): :func:`cosyedge.precision.qdq.calibration_tensors`
    of each leaf body, excluded nodes' inputs included (one amax cache serves any ``--exclude``).

    Raises:
        ArtifactError: two bodies use one tensor name (the amax cache is keyed by name).
        UsageError: see :func:`body_plans`.
    """
    from cosyedge.precision import qdq

    seen: dict[str, None] = {}
    for p in body_plans(model, contract):
        names = qdq.calibration_tensors(p.model)
        clash = [t for t in names if t in seen]
        if clash:
            raise ArtifactError(f"tensor name {clash[0]!r} is used in two Scan bodies; INT8 calibration keys its "
                                f"ranges by name")
        seen.update(dict.fromkeys(names))
    return list(seen)


def _body(node: Any) -> Any:
    return next(a.g for a in node.attribute if a.name == "body")


def expose(model: Any, tensors: Iterable[str]) -> tuple[Any, dict[str, str]]:
    """A copy of ``model`` where each tensor of ``tensors`` computed in a Scan body is also a main-graph output.

    Args:
        model (onnx.ModelProto): The model (not modified).
        tensors (Iterable[str]): Float tensor names, of the main graph or of any Scan body under it.
    Returns:
        tuple[onnx.ModelProto, dict[str, str]]: the copy and ``{tensor: main-graph output name}``. A body tensor's
        output has one leading axis per enclosing Scan (outermost first: hops, then e.g. streams), each the
        iterations of that Scan; a main-graph tensor is its own name (not added).
    Raises:
        ArtifactError: a tensor is in no graph of the model.
    """
    from onnx import TensorProto, helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    wanted = list(dict.fromkeys(tensors))
    where: dict[str, list] = {}

    def visit(graph: Any, path: list) -> None:
        defined = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
        defined |= {t.name for t in graph.initializer}
        for t in wanted:
            if t in defined:
                where.setdefault(t, path)
        for n in graph.node:
            if n.op_type == "Scan":
                visit(_body(n), path + [n])

    visit(m.graph, [])
    fetch: dict[str, str] = {}
    have = {o.name for o in m.graph.output}
    for t in wanted:
        if t not in where:
            raise ArtifactError(f"tensor {t!r} to calibrate is in no graph of the model")
        path, cur = where[t], t
        for level in range(len(path) - 1, -1, -1):
            scan = path[level]
            body = _body(scan)
            inner = f"{t}::calib{level}"
            body.node.append(helper.make_node("Identity", [cur], [inner], name=f"{inner}/Identity"))
            body.output.append(helper.make_tensor_value_info(inner, TensorProto.FLOAT, None))
            cur = f"{t}::scan{level}"
            scan.output.append(cur)
            for a in scan.attribute:
                if a.name in ("scan_output_axes", "scan_output_directions"):
                    a.ints.append(0)
        if cur not in have:
            m.graph.output.append(helper.make_tensor_value_info(cur, TensorProto.FLOAT, None))
            have.add(cur)
        fetch[t] = cur
    return m, fetch


def quantize_bodies(model: Any, plans: list[BodyPlan], amax: dict[str, float]) -> dict:
    """Insert the flat Q/DQ (:func:`cosyedge.precision.qdq.insert_qdq`) into each planned body of ``model``, in
    place (the bodies of ``plans`` must be ``model``'s, from :func:`body_plans` on it).

    Returns:
        dict: ``{"activations": {tensor: scale}, "weights": {node: axis}, "qdq_pairs": int}`` summed over bodies.
    Raises:
        ArtifactError: a tensor to quantize has no amax (a cache of another model).
    """
    import onnx_graphsurgeon as gs

    from cosyedge.precision import qdq  # noqa: F401 - registers Graph.insert_qdq
    from cosyedge.precision.bodies import put_body

    total = {"activations": {}, "weights": {}, "qdq_pairs": 0}
    for p in plans:
        graph = gs.import_onnx(p.model)
        rep = graph.insert_qdq(amax, p.quantize)
        graph.cleanup().toposort()
        g = gs.export_onnx(graph).graph
        del g.value_info[:]
        put_body(p.body.attr, g, p.body.graph)
        total["activations"].update(rep["activations"])
        total["weights"].update(rep["weights"])
        total["qdq_pairs"] += rep["qdq_pairs"]
    return total


def mac_share(model: Any, contract: Any) -> dict:
    """The INT8 share of the MACs of one hop of an adopted model (what :func:`cosyedge.precision.macs.mac_share`
    gives for a flat graph), counted in its leaf bodies: the shapes come from one hop of zeros in ONNX Runtime
    with the inputs/outputs of every MAC op exposed (:func:`expose`), less the leading scan axes.

    Returns:
        dict: ``chunk_samples``, ``total``, ``quantized``, ``share``, ``float_ops`` (as the flat function).
    Raises:
        ArtifactError: ONNX Runtime cannot run the model.
    """
    from cosyedge.errors import first_line
    from cosyedge.precision.bodies import leaf_bodies
    from cosyedge.precision.macs import MAC_OPS, OpMacs, op_macs
    from cosyedge.runtime.ort import session_from_onnx

    bodies = leaf_bodies(model, contract)
    names = []
    for b in bodies:
        inits = {t.name for t in b.graph.initializer}
        consts = {o for n in b.graph.node if n.op_type == "Constant" for o in n.output}
        for n in b.graph.node:
            if n.op_type in MAC_OPS:
                for t in [*n.input, *n.output]:
                    if t and t not in inits and t not in consts:
                        names.append(t)
    exposed, fetch = expose(model, names)
    hop = contract.hop_samples
    feeds = {i.name: np.zeros(i.concrete_shape(1, i.frames(hop, hop)), dtype=i.dtype) for i in contract.stream_inputs}
    feeds.update({s.input: s.zeros(1) for s in contract.states})
    try:
        sess = session_from_onnx(exposed, threads=1, inter_threads=1, log_severity=4)
        outs = list(dict.fromkeys(fetch.values()))
        values = dict(zip(outs, sess.run(outs, feeds)))
    except Exception as err:  # onnxruntime's own exception types
        raise ArtifactError(f"cannot count the MACs per hop: ONNX Runtime cannot run the model ({first_line(err)})") \
            from None
    rows = []
    for b in bodies:
        levels = fetch_depth(model, b.graph)
        shapes = {t.name: tuple(int(d) for d in t.dims) for t in b.graph.initializer}
        for n in b.graph.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        shapes[n.output[0]] = tuple(int(d) for d in a.t.dims)
        shapes.update({t: tuple(values[fetch[t]].shape[levels:]) for t in names if t in fetch})
        producer = {o: n.op_type for n in b.graph.node for o in n.output}
        for n in b.graph.node:
            if n.op_type not in MAC_OPS:
                continue
            macs = op_macs(n, shapes)
            if macs > 0:
                q = len(n.input) > 1 and all(producer.get(n.input[i]) == "DequantizeLinear" for i in (0, 1))
                rows.append(OpMacs(n.name or f"{n.op_type}:{n.output[0]}", n.op_type, macs, q))
    total = sum(r.macs for r in rows)
    quant = sum(r.macs for r in rows if r.quantized)
    floats = sorted((r for r in rows if not r.quantized), key=lambda r: -r.macs)
    return {"chunk_samples": int(hop), "total": int(total), "quantized": int(quant),
            "share": float(quant / total) if total else 0.0,
            "float_ops": [{"name": r.name, "op": r.op, "macs": int(r.macs)} for r in floats]}


def fetch_depth(model: Any, body: Any) -> int:
    """int: how many Scans enclose ``body`` (onnx.GraphProto) in ``model`` (1 for a body of a main-graph Scan);
    0 when it is not found."""

    def visit(graph: Any, d: int) -> int:
        for n in graph.node:
            if n.op_type == "Scan":
                g = _body(n)
                if g is body or g.name == body.name:
                    return d + 1
                found = visit(g, d + 1)
                if found:
                    return found
        return 0

    return visit(model.graph, 0)


__all__ = ["BodyPlan", "DSP_REASON", "body_plans", "calibration_tensors", "constants_to_initializers", "expose",
           "fetch_depth", "mac_share", "quantize_bodies"]
