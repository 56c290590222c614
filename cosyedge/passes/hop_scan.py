"""Any whole number of hops per call for a graph that takes exactly one: an ONNX ``Scan`` over the hops of a chunk.

The INT8 ``ort_matmul`` form (:func:`cosyedge.precision.qdq_matmul.matmul_form`) computes every conv for exactly one
output frame (a ``MatMul`` of one row per stream) and every GRU for one step (its cell), so its graph takes one hop
per call. :func:`scan_over_hops` makes the model that takes ``k`` hops per call, any ``k`` >= 1, without touching that
graph: it becomes the body of a ``Scan`` whose loop-carried values are the stream states and whose scan inputs and
outputs are the stream tensors cut into hops on their time axis:

``x (N, C, k*f) -> Reshape (N, C, k, f) -> Scan over axis 2 [body: the one-hop graph, states carried]
-> y (N, C', k, f') -> Reshape (N, C', k*f')``

The body runs the same nodes on the same numbers as the one-hop graph run ``k`` times with its states fed back, so
the outputs are the same (measured bit-identical at 1, 2 and 4 hops per call on the demo speech,
``tests/precision/test_ort_matmul_hops.py``). ONNX Runtime optimizes Scan bodies like a main graph: the ``DQ ->
MatMul`` groups still fuse into ``MatMulIntegerToFloat`` (counted by
:func:`cosyedge.precision.ort_fusion.ort_fusion_report`, which walks subgraphs). :func:`one_hop_body` gives the
one-hop graph back and :func:`with_body` puts a rewritten one in: :func:`cosyedge.passes.base.apply_passes` applies
the session and pool passes (``dqmm_per_row``, ``einsum_matmul``, ``dft_fft``...) to the one-hop graph that way.

Source: ONNX ``Scan`` (https://onnx.ai/onnx/operators/onnx__Scan.html: loop-carried state variables, scan input
and output axes); the same wrapping :mod:`cosyedge.surgery.adopt.wrap` gives an adopted one-hop graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import

onnx = lazy_import("onnx")

SCAN_NAME = "hops/scan"
"""str: the name of the ``Scan`` node :func:`scan_over_hops` writes (how :func:`one_hop_body` recognises it)."""
BODY_PREFIX = "hop/"
"""str: prefix of every tensor name inside the body (ONNX names are unique across a graph and its subgraphs)."""


def _dims(vi: Any) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]


def _value_info(name: str, elem: int, dims: list) -> Any:
    return onnx.helper.make_tensor_value_info(name, elem, [d if d is not None else None for d in dims])


def scan_over_hops(model: Any, contract: Any) -> Any:
    """Return the model (onnx.ModelProto, a new one) that takes any whole number of hops per call, running ``model``
    (which takes exactly one) hop by hop in a ``Scan`` (module docstring).

    Args:
        model (onnx.ModelProto): A one-hop streaming graph: its stream inputs declare one hop on their time axis
            (``frames_per_hop`` frames), its graph inputs are the contract's stream inputs and state inputs and its
            outputs the stream outputs and state outputs; no subgraphs.
        contract (StreamContract): Its stream contract (states, stream inputs/outputs with their time axes).
    Returns:
        onnx.ModelProto: inputs and outputs named as before, the stream tensors' time axis ``"T"`` (any multiple of
        the hop), states unchanged; same opsets, IR version and metadata.
    Raises:
        ValueError: the graph has inputs or outputs outside the contract, or a stream tensor's shape is not the
            contract's (callers keep the one-hop graph).
    """
    from onnx import helper

    g = model.graph
    ins = {v.name: v for v in g.input}
    outs = {v.name: v for v in g.output}
    s_in = [s.input for s in contract.states]
    s_out = [s.output for s in contract.states]
    x_io, y_io = list(contract.stream_inputs), list(contract.stream_outputs)
    if set(ins) != set(s_in) | {x.name for x in x_io} or set(outs) != set(s_out) | {y.name for y in y_io}:
        raise ValueError("graph inputs/outputs are not exactly the contract's stream tensors and states")
    for io, decl in [(x, ins[x.name]) for x in x_io] + [(y, outs[y.name]) for y in y_io]:
        if len(_dims(decl)) != len(io.shape):
            raise ValueError(f"'{io.name}' has rank {len(_dims(decl))}, the contract says {len(io.shape)}")
    p = BODY_PREFIX
    rn = lambda t: p + t if t else t  # noqa: E731

    body = _renamed(g, rn)
    body.name = "one_hop"
    del body.input[:], body.output[:]
    body.input.extend([_body_io(ins[n], rn(n)) for n in s_in] + [_body_io(ins[x.name], rn(x.name)) for x in x_io])
    body.output.extend([_body_io(outs[n], rn(n)) for n in s_out] + [_body_io(outs[y.name], rn(y.name)) for y in y_io])
    nodes, inits, new_in, new_out = [], [], [], []

    def split_shape(io: Any) -> np.ndarray:
        rest = [int(d) for d in io.shape[io.time_axis + 1:]]
        mid = [int(d) for d in io.shape[1:io.time_axis]]
        return np.array([0] + mid + [-1, int(io.frames_per_hop)] + rest, np.int64)

    hops_in = []
    for x in x_io:
        shp = f"hops/{x.name}/split_shape"
        inits.append(onnx.numpy_helper.from_array(split_shape(x), shp))
        hops_in.append(f"hops/{x.name}/hops")
        nodes.append(helper.make_node("Reshape", [x.name, shp], [hops_in[-1]], name=f"hops/{x.name}/split"))
        new_in.append(_outer_io(ins[x.name], x))
    hops_out = [f"hops/{y.name}/hops" for y in y_io]
    nodes.append(helper.make_node("Scan", s_in + hops_in, s_out + hops_out, name=SCAN_NAME, body=body,
                                  num_scan_inputs=len(x_io), scan_input_axes=[x.time_axis for x in x_io],
                                  scan_output_axes=[y.time_axis for y in y_io]))
    for y, h in zip(y_io, hops_out):
        shp = f"hops/{y.name}/join_shape"
        join = [0] + [int(d) for d in y.shape[1:y.time_axis]] + [-1] + [int(d) for d in y.shape[y.time_axis + 1:]]
        inits.append(onnx.numpy_helper.from_array(np.array(join, np.int64), shp))
        nodes.append(helper.make_node("Reshape", [h, shp], [y.name], name=f"hops/{y.name}/join"))
        new_out.append(_outer_io(outs[y.name], y))
    outer = helper.make_graph(nodes, g.name or "hops", new_in + [_copy_vi(ins[n]) for n in s_in],
                              new_out + [_copy_vi(outs[n]) for n in s_out], initializer=inits)
    # the stream inputs first, then the states, as the one-hop graph declared them
    order = [v.name for v in g.input]
    outer.input.sort(key=lambda v: order.index(v.name))
    oorder = [v.name for v in g.output]
    outer.output.sort(key=lambda v: oorder.index(v.name))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(outer)
    return out


def _copy_vi(vi: Any) -> Any:
    c = onnx.ValueInfoProto()
    c.CopyFrom(vi)
    return c


def _body_io(vi: Any, name: str) -> Any:
    """The body's declaration of ``vi`` under ``name``: its element type and shape (batch left symbolic)."""
    c = _copy_vi(vi)
    c.name = name
    return c


def _outer_io(vi: Any, io: Any) -> Any:
    """The outer declaration of stream tensor ``vi``: its dims with the time axis ``"T"``."""
    from cosyedge.artifacts import TIME_DIM

    dims = _dims(vi)
    dims[io.time_axis] = TIME_DIM
    return _value_info(vi.name, vi.type.tensor_type.elem_type, dims)


def with_body(model: Any, body: Any) -> Any:
    """``model`` (a :func:`scan_over_hops` model) with its Scan body replaced by ``body``'s graph (onnx.ModelProto, a
    one-hop graph with the same inputs and outputs, e.g. :func:`one_hop_body` rewritten by graph passes): a new model;
    ``body``'s opsets (a pass may add ``com.microsoft``) are added to the outer ones.

    Raises:
        ValueError: ``model`` is not a :func:`scan_over_hops` model.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    scans = [n for n in out.graph.node if n.op_type == "Scan" and n.name == SCAN_NAME]
    if len(scans) != 1:
        raise ValueError("not a model with a Scan over hops")
    attr = next(a for a in scans[0].attribute if a.name == "body")
    old_in = [v.name for v in attr.g.input]
    old_out = [v.name for v in attr.g.output]
    g = _renamed(body.graph, lambda t: BODY_PREFIX + t if t else t)
    ins = {v.name: v for v in g.input}
    outs = {v.name: v for v in g.output}
    del g.input[:], g.output[:]
    g.input.extend([ins[n] for n in old_in])
    g.output.extend([outs[n] for n in old_out])
    g.name = attr.g.name
    attr.g.CopyFrom(g)
    have = {o.domain for o in out.opset_import}
    for o in body.opset_import:
        if o.domain not in have:
            out.opset_import.append(o)
    return out


def one_hop_target(body: Any, shapes: dict) -> dict:
    """``shapes`` (graph input name -> concrete shape at the chunk a runtime feeds, list[int]) at one hop: each axis
    the one-hop ``body`` (onnx.ModelProto) declares as an integer takes that value (the time axis of a stream input);
    the others (batch) are kept. Returns a new dict (names ``body`` does not declare are kept as given)."""
    declared = {v.name: _dims(v) for v in body.graph.input}
    out = {}
    for name, shape in shapes.items():
        d = declared.get(name)
        out[name] = ([b if isinstance(b, int) and b > 0 else v for b, v in zip(d, shape)]
                     if d is not None and len(d) == len(shape) else list(shape))
    return out


def _renamed(src: Any, rn: Any) -> Any:
    """A copy of graph ``src`` with every tensor name ``t`` (node inputs/outputs, initializers, graph inputs/outputs,
    value_info) replaced by ``rn(t)`` (subgraphs of its nodes are not entered)."""
    g = onnx.GraphProto()
    g.CopyFrom(src)
    for n in g.node:
        n.input[:] = [rn(t) for t in n.input]
        n.output[:] = [rn(t) for t in n.output]
    for t in g.initializer:
        t.name = rn(t.name)
    for t in g.sparse_initializer:
        t.values.name = rn(t.values.name)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = rn(v.name)
    return g


def one_hop_body(model: Any) -> Any:
    """The one-hop graph inside a :func:`scan_over_hops` model (onnx.ModelProto, a new one: body tensors renamed back,
    the stream inputs' time axis one hop), or None when ``model`` is not one.

    Args:
        model (onnx.ModelProto): Any model.
    Returns:
        onnx.ModelProto | None: the model :func:`scan_over_hops` was given (same names, nodes and weights; the outer
        metadata and opsets), or None.
    """
    scans = [n for n in model.graph.node if n.op_type == "Scan" and n.name == SCAN_NAME]
    if len(scans) != 1:
        return None
    body = next(a.g for a in scans[0].attribute if a.name == "body")
    g = _renamed(body, lambda t: t[len(BODY_PREFIX):] if t.startswith(BODY_PREFIX) else t)
    order = [v.name for v in model.graph.input]
    g.input.sort(key=lambda v: order.index(v.name) if v.name in order else len(order))
    oorder = [v.name for v in model.graph.output]
    g.output.sort(key=lambda v: oorder.index(v.name) if v.name in oorder else len(oorder))
    g.name = model.graph.name
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(g)
    return out


__all__ = ["BODY_PREFIX", "SCAN_NAME", "one_hop_body", "one_hop_target", "scan_over_hops", "with_body"]
