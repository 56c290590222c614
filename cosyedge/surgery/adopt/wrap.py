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


def _rename_and_wrap(model: Any, audio: str, outs: list[str], states: list[AdoptedState], *, dynamic: bool,
                     scan: bool, hop: int, out_frames: dict[str, int]) -> Any:
    """The adopted graph: states renamed ``state_in.NN``/``state_out.NN`` batch-first (Transposes where the batch
    axis is elsewhere); with ``scan``, the one-hop graph as the body of a Scan over the hops of a chunk."""
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
    a_in = by_in[audio]
    bdim = BATCH_DIM if dynamic else 1
    plain_outs = [by_out[o] for o in outs]
    if dynamic:
        a_in.shape = [BATCH_DIM] + list(a_in.shape[1:]) if a_in.shape else None
        for t in plain_outs:
            t.shape = [BATCH_DIM] + list(t.shape[1:]) if t.shape else None
    graph.inputs = [a_in] + new_inputs
    graph.outputs = plain_outs + new_outputs
    for t in tensors.values():
        if isinstance(t, gs.Variable) and t not in graph.inputs and t not in graph.outputs:
            t.shape = None
    graph.cleanup().toposort()
    if not scan:
        m = io.graph_to_model(graph, like=model)
        return m
    # Scan over the hops of a chunk: body = the one-hop graph (state vars first, then the scan input)
    for t in graph.tensors().values():
        if isinstance(t, gs.Variable):
            t.name = f"step/{t.name}"
    body = graph
    body.inputs = new_inputs + [a_in]
    body.outputs = new_outputs + plain_outs
    body.name = "adopt_step"
    a_in.shape = [bdim, 1, hop]
    outer = gs.Graph(opset=graph.opset, name="adopted")
    outer.import_domains = graph.import_domains
    x = gs.Variable(audio, dtype=a_in.dtype, shape=[bdim, 1, TIME_DIM])
    o_states_in = [gs.Variable(t.name.removeprefix("step/"), dtype=t.dtype, shape=t.shape) for t in new_inputs]
    o_states_out = [gs.Variable(t.name.removeprefix("step/"), dtype=t.dtype, shape=t.shape) for t in new_outputs]
    x4 = gs.Variable("adopt/hops", dtype=a_in.dtype)
    outer.nodes.append(gs.Node("Reshape", name="adopt/split_hops",
                               inputs=[x, gs.Constant("adopt/hops_shape", np.array([0, 0, -1, hop], np.int64))],
                               outputs=[x4]))
    ys4 = [gs.Variable(f"adopt/{o}/hops", dtype=t.dtype) for o, t in zip(outs, plain_outs)]
    outer.nodes.append(gs.Node("Scan", name="adopt/scan_hops", inputs=o_states_in + [x4],
                               outputs=o_states_out + ys4,
                               attrs={"body": body, "num_scan_inputs": 1, "scan_input_axes": [2],
                                      "scan_output_axes": [2] * len(outs)}))
    finals = []
    for o, t, y4 in zip(outs, plain_outs, ys4):
        c = int(t.shape[1]) if t.shape and isinstance(t.shape[1], int) else 1
        y = gs.Variable(o, dtype=t.dtype, shape=[bdim, c, TIME_DIM])
        outer.nodes.append(gs.Node("Reshape", name=f"adopt/{o}/join_hops",
                                   inputs=[y4, gs.Constant(f"adopt/{o}/join_shape", np.array([0, 0, -1], np.int64))],
                                   outputs=[y]))
        finals.append(y)
    outer.inputs = [x] + o_states_in
    outer.outputs = finals + o_states_out
    outer.cleanup().toposort()
    return io.graph_to_model(outer, like=model)
