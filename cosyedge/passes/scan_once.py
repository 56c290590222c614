"""Pass ``scan_once``: a main-graph Scan that runs exactly one iteration at the target's input shapes is replaced by
its body.

An adopted model streams any chunk as a ``Scan`` over the hops of the chunk (:mod:`cosyedge.surgery.adopt.wrap`).
A :class:`~cosyedge.runtime.pool.StreamPool` fed one hop per tick runs that Scan for one iteration, and pays for it
on every tick: the Scan copies each loop-carried state into its own buffers and back out and stacks its scan
outputs (GTCRN, 64 streams batched by ``batch_streams``: 12.8 % of a tick in the Scan itself, ONNX Runtime profile,
1 thread). At a fixed chunk of one hop the body is the whole model: the states feed the body directly (Identity),
each scanned input loses its one-long scan axis (Squeeze) and each scan output gets it back (Unsqueeze). The result
is the same function at that chunk, value for value (no arithmetic changes), and only at that chunk: the pass
applies only when every scanned input's scan axis has length 1 at ``target.shapes`` (concrete shapes, the pool's
chunk), and leaves anything else as it is (a Scan body reading tensors of the enclosing graph, a length it cannot
infer).

Applied by :class:`~cosyedge.runtime.pool.StreamPool` with ``batch_rewrite`` (:data:`cosyedge.passes.POOL_PASSES`)
after ``batch_streams``.

Source: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: state variables, scan inputs sliced along
``scan_input_axes``, scan outputs stacked along ``scan_output_axes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import DEFAULT_DOMAINS, copy_model, node_attrs, opset, outer_refs

onnx = lazy_import("onnx")


def _renamed(body: Any, prefix: str) -> tuple[Any, dict[str, str]]:
    """A copy of ``body`` (GraphProto) with every tensor it defines (inputs, initializers, node outputs) and every
    node name prefixed; returns (copy, old -> new names)."""
    g = onnx.GraphProto()
    g.CopyFrom(body)
    ren = {vi.name: prefix + vi.name for vi in g.input}
    ren.update({t.name: prefix + t.name for t in g.initializer})
    ren.update({o: prefix + o for n in g.node for o in n.output if o})
    for n in g.node:
        n.input[:] = [ren.get(i, i) for i in n.input]
        n.output[:] = [ren.get(o, o) for o in n.output]
        n.name = prefix + (n.name or n.op_type)
    for t in g.initializer:
        t.name = ren[t.name]
    return g, ren


def inline_scans(model: Any, input_shapes: dict[str, list[int]]) -> tuple[Any, dict[str, int]]:
    """A copy of ``model`` with each main-graph Scan that iterates once at ``input_shapes`` replaced by its body.

    Args:
        model (onnx.ModelProto): The model (not modified).
        input_shapes (dict[str, list[int]]): Concrete shape of every graph input (the runtime's chunk and batch).
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"scan_inlined": n}`` (0: nothing applied).
    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    from cosyedge.passes.shapes import concrete_shapes

    scans = [n for n in model.graph.node if n.op_type == "Scan" and n.domain in DEFAULT_DOMAINS]
    if not scans:
        return model, {"scan_inlined": 0}
    shapes = concrete_shapes(model, input_shapes)
    out = copy_model(model)
    g = out.graph
    version = opset(out)
    nodes, inits, done = [], [], 0
    for node in g.node:
        if node.op_type != "Scan" or node.domain not in DEFAULT_DOMAINS:
            nodes.append(node)
            continue
        a = node_attrs(node)
        body = a["body"]
        m = int(a["num_scan_inputs"])
        n_state = len(node.input) - m
        in_axes = list(a.get("scan_input_axes") or [0] * m)
        out_axes = list(a.get("scan_output_axes") or [0] * (len(node.output) - n_state))
        scanned = node.input[n_state:]
        lengths = []
        for name, ax in zip(scanned, in_axes):
            s = shapes.get(name)
            lengths.append(None if s is None else s[ax % len(s)])
        if not scanned or any(v != 1 for v in lengths) or outer_refs(body):
            nodes.append(node)
            continue
        prefix = f"{node.name or 'scan'}/once/"
        b, ren = _renamed(body, prefix)
        inits += list(b.initializer)
        k = 0

        def const(what: str, v: list[int]) -> str:
            nonlocal k
            k += 1
            name = f"{prefix}{what}_{k}"
            inits.append(onnx.numpy_helper.from_array(np.array(v, np.int64), name))
            return name

        def axes_node(op: str, x: str, y: str, axes: list[int]) -> Any:
            if version >= 13:
                return onnx.helper.make_node(op, [x, const("axes", axes)], [y], name=f"{prefix}{op}_{y}")
            return onnx.helper.make_node(op, [x], [y], name=f"{prefix}{op}_{y}", axes=axes)

        # states: the body reads the outer input and writes the outer output itself (no copy) where it can
        direct = {ren[vi.name]: outer for outer, vi in zip(node.input[:n_state], body.input[:n_state])}
        produced = {o for n in b.node for o in n.output}
        for outer, vo in zip(node.output[:n_state], body.output[:n_state]):
            name = ren.get(vo.name, vo.name)
            if name in produced and name not in direct and name not in direct.values():
                direct[name] = outer
                produced.discard(name)  # a second output of the same tensor gets an Identity below
            else:
                b.node.add().CopyFrom(onnx.helper.make_node("Identity", [direct.get(name, name)], [outer],
                                                            name=f"{prefix}state_out_{vo.name}"))
        for n in b.node:
            n.input[:] = [direct.get(i, i) for i in n.input]
            n.output[:] = [direct.get(o, o) for o in n.output]
        for outer, vi, ax in zip(scanned, body.input[n_state:], in_axes):
            rank = len(shapes[outer])
            nodes.append(axes_node("Squeeze", outer, ren[vi.name], [ax % rank]))
        nodes += list(b.node)
        for outer, vo, ax in zip(node.output[n_state:], body.output[n_state:], out_axes):
            rank = len(vo.type.tensor_type.shape.dim) + 1 if vo.type.tensor_type.HasField("shape") else None
            if ax < 0 and rank is None:
                raise ValueError(f"Scan '{node.name}': negative scan output axis with an unranked body output")
            name = ren.get(vo.name, vo.name)
            nodes.append(axes_node("Unsqueeze", direct.get(name, name), outer, [ax % rank if ax < 0 else ax]))
        done += 1
    if not done:
        return model, {"scan_inlined": 0}
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    del g.value_info[:]
    return out, {"scan_inlined": done}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`inline_scans` at ``target.shapes`` (concrete)."""
    return inline_scans(model, target.shapes)


__all__ = ["inline_scans", "run"]
