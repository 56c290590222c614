"""Adopt, step 3: rename the states ``state_in.NN``/``state_out.NN``, move each state's batch axis first, and
wrap a one-hop graph in an ONNX ``Scan`` over the hops of a chunk (the states are the Scan's loop-carried values).

Source: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: loop-carried state variables, scan input and
output axes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM, TIME_DIM
from cosyedge.surgery import io
from cosyedge.surgery.adopt.batch import _perm_from_first, _perm_to_first
from cosyedge.surgery.adopt.pairs import AdoptedState

gs = lazy_import("onnx_graphsurgeon")


def _unique_node_names(model: Any) -> Any:
    """``model`` with every node of its main graph named, and named once (exporters such as spox repeat names;
    graphsurgeon warns at length on each repeat). A copy when a name changes."""
    seen: set = set()
    nodes = model.graph.node
    if len({n.name for n in nodes}) == len(nodes) and all(n.name for n in nodes):
        return model
    import copy

    model = copy.deepcopy(model)
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        n.name = name
        seen.add(name)
    return model


def _rename_and_wrap(model: Any, ins: list, outs: list, states: list[AdoptedState], *, dynamic: bool,
                     scan: bool, hop: int) -> Any:
    """The adopted graph: states renamed ``state_in.NN``/``state_out.NN`` batch-first (Transposes where the batch
    axis is elsewhere); with ``scan``, the one-hop graph as the body of a Scan over the hops of a chunk.

    Args:
        model (onnx.ModelProto): The canonical graph (streamed tensors batch-first).
        ins, outs (list[StreamTensor]): Streamed inputs and outputs (time axis, frames per hop, shape at batch 1).
        states (list[AdoptedState]): The state pairs.
        dynamic (bool): Declare ``N`` on the batch axes (else 1).
        scan (bool): Wrap in a Scan over hops (each input split into hops on its time axis; each output joined).
        hop (int): Samples per hop.
    Returns:
        onnx.ModelProto: the adopted graph.
    """
    from cosyedge.surgery.streamify import STATE_IN_PREFIX, STATE_OUT_PREFIX

    graph = gs.import_onnx(_unique_node_names(model))
    tensors = graph.tensors()
    width = max(2, len(str(len(states) - 1)))
    new_inputs, new_outputs = [], []
    by_in = {t.name: t for t in graph.inputs}
    by_out = {t.name: t for t in graph.outputs}
    for k, s in enumerate(states):
        t_in, t_out = by_in[s.input], by_out[s.output]
        rank = len(s.shape)
        b = s.batch_axis
        shape = list(s.shape)
        if b is not None:
            shape[b] = BATCH_DIM if dynamic else 1
            first = [shape[b]] + [d for i, d in enumerate(shape) if i != b]
        else:  # a batch-1 graph's state without batch axis: (1, ...) outside, reshaped to its own shape inside
            first = [1] + shape
        sin = gs.Variable(f"{STATE_IN_PREFIX}{k:0{width}d}", dtype=t_in.dtype, shape=first)
        sout = gs.Variable(f"{STATE_OUT_PREFIX}{k:0{width}d}", dtype=t_out.dtype, shape=first)
        if b is None:
            graph.nodes.append(gs.Node("Reshape", name=f"adopt/{s.input}/drop_batch", outputs=[t_in], inputs=[
                sin, gs.Constant(f"adopt/{s.input}/shape", np.array(shape, np.int64))]))
            graph.nodes.append(gs.Node("Reshape", name=f"adopt/{s.output}/add_batch", outputs=[sout], inputs=[
                t_out, gs.Constant(f"adopt/{s.output}/shape", np.array(first, np.int64))]))
        elif b == 0:
            graph.nodes.append(gs.Node("Identity", name=f"adopt/{s.input}/in", inputs=[sin], outputs=[t_in]))
            graph.nodes.append(gs.Node("Identity", name=f"adopt/{s.output}/out", inputs=[t_out], outputs=[sout]))
        else:
            graph.nodes.append(gs.Node("Transpose", name=f"adopt/{s.input}/batch_axis_{b}", inputs=[sin],
                                       outputs=[t_in], attrs={"perm": _perm_from_first(rank, b)}))
            graph.nodes.append(gs.Node("Transpose", name=f"adopt/{s.output}/batch_first", inputs=[t_out],
                                       outputs=[sout], attrs={"perm": _perm_to_first(rank, b)}))
        t_in.shape = t_out.shape = None
        new_inputs.append(sin)
        new_outputs.append(sout)
    bdim = BATCH_DIM if dynamic else 1

    def declared(t: Any, per_hop: bool) -> list:
        return [bdim] + [(t.frames if per_hop else TIME_DIM) if k == t.time_axis else int(d)
                         for k, d in enumerate(t.shape) if k > 0]

    a_ins = [by_in[t.name] for t in ins]
    plain_outs = [by_out[t.name] for t in outs]
    for v, t in zip(a_ins + plain_outs, ins + outs):
        v.shape = declared(t, scan)
    graph.inputs = a_ins + new_inputs
    graph.outputs = plain_outs + new_outputs
    for t in tensors.values():
        if isinstance(t, gs.Variable) and t not in graph.inputs and t not in graph.outputs:
            t.shape = None
    graph.cleanup().toposort()
    if not scan:
        return io.graph_to_model(graph, like=model)
    # Scan over the hops of a chunk: body = the one-hop graph (state vars first, then the scan inputs)
    for t in graph.tensors().values():
        if isinstance(t, gs.Variable):
            t.name = f"step/{t.name}"
    body = graph
    body.inputs = new_inputs + a_ins
    body.outputs = new_outputs + plain_outs
    body.name = "adopt_step"
    outer = gs.Graph(opset=graph.opset, name="adopted")
    outer.import_domains = graph.import_domains
    o_states_in = [gs.Variable(t.name.removeprefix("step/"), dtype=t.dtype, shape=t.shape) for t in new_inputs]
    o_states_out = [gs.Variable(t.name.removeprefix("step/"), dtype=t.dtype, shape=t.shape) for t in new_outputs]
    xs, hops_in = [], []
    for t, v in zip(ins, a_ins):
        x = gs.Variable(t.name, dtype=v.dtype, shape=declared(t, False))
        ta = t.time_axis
        split = [0] + [int(d) for d in t.shape[1:ta]] + [-1, t.frames] + [int(d) for d in t.shape[ta + 1:]]
        xh = gs.Variable(f"adopt/{t.name}/hops", dtype=v.dtype)
        outer.nodes.append(gs.Node("Reshape", name=f"adopt/{t.name}/split_hops", outputs=[xh], inputs=[
            x, gs.Constant(f"adopt/{t.name}/hops_shape", np.array(split, np.int64))]))
        xs.append(x)
        hops_in.append(xh)
    ys_h = [gs.Variable(f"adopt/{t.name}/hops", dtype=v.dtype) for t, v in zip(outs, plain_outs)]
    outer.nodes.append(gs.Node("Scan", name="adopt/scan_hops", inputs=o_states_in + hops_in,
                               outputs=o_states_out + ys_h,
                               attrs={"body": body, "num_scan_inputs": len(ins),
                                      "scan_input_axes": [t.time_axis for t in ins],
                                      "scan_output_axes": [t.time_axis for t in outs]}))
    finals = []
    for t, v, yh in zip(outs, plain_outs, ys_h):
        ta = t.time_axis
        join = [0] + [int(d) for d in t.shape[1:ta]] + [-1] + [int(d) for d in t.shape[ta + 1:]]
        y = gs.Variable(t.name, dtype=v.dtype, shape=declared(t, False))
        outer.nodes.append(gs.Node("Reshape", name=f"adopt/{t.name}/join_hops", outputs=[y], inputs=[
            yh, gs.Constant(f"adopt/{t.name}/join_shape", np.array(join, np.int64))]))
        finals.append(y)
    outer.inputs = xs + o_states_in
    outer.outputs = finals + o_states_out
    outer.cleanup().toposort()
    return io.graph_to_model(outer, like=model)
