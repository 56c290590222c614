"""Tensor shapes of a graph at given input shapes, for the passes' checks (one frame? same shape as the sum?).

* :func:`concrete_shapes`: fully known shapes (tuples of ints) by ONNX shape inference with data propagation, the
  large initializers replaced by their declared shapes (no serialised copy of the weights).
* :func:`known_shapes`: the same, then one ONNX Runtime run on zeros for the tensors inference loses
  (data-dependent reshapes inside a network).
* :func:`partial_shapes`: dims (int or None) at symbolic input dims (a batch axis ``"N"``), non-strict inference.

Source: ONNX ``onnx.shape_inference.infer_shapes`` (``data_prop``, ``strict_mode``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import copy_model

onnx = lazy_import("onnx")

SMALL_BYTES = 4096
"""int: initializers up to this size keep their values for :func:`concrete_shapes` (Slice bounds, Reshape shapes);
larger ones are replaced by their declared shape (weights: no serialised copy of them is made)."""


def _fix_inputs(m: Any, dims: dict[str, list], symbols: bool) -> None:
    """In place: give the graph inputs of ``m`` named in ``dims`` those dims: every one a value (``symbols``
    False), or a value for an int and a symbol for anything else (``symbols`` True)."""
    for vi in m.graph.input:
        want = dims.get(vi.name)
        if want is None:
            continue
        for d, v in zip(vi.type.tensor_type.shape.dim, want):
            if not symbols:
                d.Clear()
                d.dim_value = int(v)
            elif isinstance(v, int):
                d.dim_value = v
            else:
                d.dim_param = str(v)


def concrete_shapes(model: Any, input_shapes: dict[str, list[int]]) -> dict[str, tuple]:
    """Shapes of every value of ``model`` whose dims are all known at ``input_shapes``.

    Args:
        model (onnx.ModelProto): The model (not modified).
        input_shapes (dict[str, list[int]]): Concrete shape per graph input (others keep their declared dims).
    Returns:
        dict[str, tuple[int, ...]]: tensor name -> shape (only fully known ones).
    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    m = copy_model(model)
    big = [t for t in m.graph.initializer if t.ByteSize() > SMALL_BYTES]
    for t in big:
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    keep = [t for t in m.graph.initializer if t.ByteSize() <= SMALL_BYTES]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    _fix_inputs(m, input_shapes, symbols=False)
    del m.graph.value_info[:]
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    out: dict[str, tuple] = {}
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[v.name] = tuple(d.dim_value for d in dims)
    return out


def run_shapes(model: Any, names: list[str], input_shapes: dict[str, list[int]]) -> dict[str, tuple]:
    """Shapes of the tensors ``names`` found by running ``model`` once on zeros at ``input_shapes`` (ONNX Runtime,
    graph optimisation off, the tensors added as outputs). Tensors that cannot be shaped (an input that cannot be
    fed) are left out.

    Returns:
        dict[str, tuple[int, ...]]: tensor name -> shape.
    """
    from cosyedge.runtime.ort import session_from_onnx

    m = copy_model(model)
    for name in names:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    try:
        sess = session_from_onnx(m, threads=1, inter_threads=1, optimize=False, log_severity=4,
                                 disabled_optimizers=())
        types = {i.name: i.type for i in sess.get_inputs()}
        feeds = {k: np.zeros(v, np.float32 if types.get(k) == "tensor(float)" else np.int64)
                 for k, v in input_shapes.items() if k in types}
        outs = sess.run(names, feeds)
    except Exception:  # noqa: BLE001  (an input we cannot feed: no shapes)
        return {}
    return {n: tuple(o.shape) for n, o in zip(names, outs)}


def known_shapes(model: Any, names: list[str], input_shapes: dict[str, list[int]]) -> dict[str, tuple]:
    """:func:`concrete_shapes`, completed by :func:`run_shapes` for those of ``names`` it does not know.

    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    shapes = concrete_shapes(model, input_shapes)
    missing = [n for n in names if n not in shapes]
    if missing:
        shapes.update(run_shapes(model, missing, input_shapes))
    return shapes


def _value(name: str, graph: tuple, shapes: dict[str, list], memo: dict) -> Any:
    """The value (np.ndarray; dtype object with None where a dim is unknown) of the small tensor ``name`` when it
    follows from small initializers and the dims in ``shapes`` through Shape, Gather, (Un)Squeeze, Cast, Concat,
    Identity, Constant and Add/Sub/Mul/Div; None otherwise. ``graph``: (initializers by name, node by output name);
    ``memo``: values found so far."""
    if name in memo:
        return memo[name]
    memo[name] = None  # (a cycle or a failure reads as unknown)
    inits, prod = graph
    if name in inits:
        t = inits[name]
        memo[name] = onnx.numpy_helper.to_array(t) if t.ByteSize() <= SMALL_BYTES else None
        return memo[name]
    n = prod.get(name)
    if n is None or n.domain not in ("", "ai.onnx"):
        return None
    a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
    v = None
    if n.op_type == "Shape":
        dims = shapes.get(n.input[0])
        if dims is not None:
            dims = dims[slice(a.get("start", 0), a.get("end"))]
            v = np.array(dims, np.int64) if all(d is not None for d in dims) else np.array(dims, object)
    elif n.op_type == "Constant" and "value" in a:
        v = onnx.numpy_helper.to_array(a["value"])
    else:
        ins = [_value(i, graph, shapes, memo) if i else None for i in n.input]
        x = ins[0] if ins else None
        known = [i is not None and i.dtype != object for i in ins]
        op = n.op_type
        try:
            if x is None:
                v = None
            elif op == "Identity":
                v = x
            elif op == "Gather" and known[1]:
                v = np.take(x, ins[1], axis=a.get("axis", 0))
            elif op in ("Squeeze", "Unsqueeze"):
                given = len(n.input) > 1 and bool(n.input[1])  # axes as an input (opset 13) or an attribute
                axes = ins[1] if given else a.get("axes")
                axes = None if axes is None or (given and not known[1]) else [int(i) for i in np.ravel(axes)]
                if op == "Squeeze" and (axes is not None or not given):
                    v = np.squeeze(x, tuple(axes)) if axes else np.squeeze(x)
                elif op == "Unsqueeze" and axes is not None:
                    v = x
                    for ax in sorted(i % (x.ndim + len(axes)) for i in axes):
                        v = np.expand_dims(v, ax)
            elif op == "Concat" and all(i is not None for i in ins):
                v = np.concatenate(ins, axis=a.get("axis", 0))
            elif op == "Cast" and known[0]:
                v = x.astype(onnx.helper.tensor_dtype_to_np_dtype(a["to"]))
            elif op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2 and all(known):
                y = ins[1]
                if op == "Div":
                    v = None if np.any(y == 0) else (np.trunc(x / y).astype(x.dtype) if x.dtype.kind in "iu" else x / y)
                else:
                    v = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](x, y)
        except (ValueError, TypeError, IndexError, KeyError):
            v = None
        if v is not None and v.dtype == object and all(e is not None for e in v.ravel()):
            v = v.astype(np.int64)
    memo[name] = v
    return v


def _range_lengths(g: Any, shapes: dict[str, list]) -> dict[str, int]:
    """Output length of every Range of graph ``g`` that inference left unknown (ONNX infers a Range only from
    initializer bounds) whose start, limit and delta follow from the dims in ``shapes`` (:func:`_value`): e.g. the
    ``arange(frames of x)`` of a streamify clock's pre-roll mask (``cosyedge/surgery/clock.py`` ``before_frame``)."""
    graph = ({t.name: t for t in g.initializer}, {o: n for n in g.node for o in n.output})
    memo: dict = {}
    out = {}
    for n in g.node:
        if n.op_type != "Range" or n.domain not in ("", "ai.onnx") or shapes.get(n.output[0]) not in (None, [None]):
            continue
        vals = [_value(i, graph, shapes, memo) for i in n.input]
        if any(v is None or v.dtype == object or v.size != 1 for v in vals):
            continue
        start, limit, delta = (v.ravel()[0].item() for v in vals)
        if delta:
            out[n.output[0]] = max(int(np.ceil((limit - start) / delta)), 0)
    return out


def partial_shapes(model: Any, input_dims: dict[str, list]) -> dict[str, list]:
    """Tensor name -> inferred dims (int, or None where unknown) of ``model`` with the graph inputs of ``input_dims``
    fixed (int: a value, str: a symbol such as ``"N"``); non-strict ONNX shape inference with data propagation, then
    again with the lengths of the Ranges whose bounds follow from the inferred dims (:func:`_range_lengths`: ONNX
    leaves them unknown, and with them every tensor a streamify pre-roll mask multiplies) until none is left.

    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    probe = copy_model(model)
    _fix_inputs(probe, input_dims, symbols=True)
    ranges = sum(n.op_type == "Range" for n in probe.graph.node)
    for _ in range(ranges + 1):  # each round fixes the Ranges the last one's dims decide (masks in a chain: several)
        probe = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
        out = {}
        for vi in list(probe.graph.input) + list(probe.graph.value_info) + list(probe.graph.output):
            t = vi.type.tensor_type
            if t.HasField("shape"):
                out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        lengths = _range_lengths(probe.graph, out)
        if not lengths:
            break
        for vi in list(probe.graph.value_info) + list(probe.graph.output):
            if vi.name in lengths:
                d = vi.type.tensor_type.shape.dim
                del d[:]
                d.add().dim_value = lengths[vi.name]
        known = {vi.name for vi in list(probe.graph.value_info) + list(probe.graph.output)}
        for name, length in lengths.items():
            if name not in known:
                dt = next((vi.type.tensor_type.elem_type for vi in probe.graph.value_info if vi.name == name), 0)
                probe.graph.value_info.append(onnx.helper.make_tensor_value_info(name, dt, [length]))
    return out


__all__ = ["SMALL_BYTES", "concrete_shapes", "known_shapes", "partial_shapes", "run_shapes"]
