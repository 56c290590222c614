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


def partial_shapes(model: Any, input_dims: dict[str, list]) -> dict[str, list]:
    """Tensor name -> inferred dims (int, or None where unknown) of ``model`` with the graph inputs of ``input_dims``
    fixed (int: a value, str: a symbol such as ``"N"``); non-strict ONNX shape inference with data propagation.

    Raises:
        onnx.shape_inference.InferenceError: the model fails ONNX shape inference.
    """
    probe = copy_model(model)
    _fix_inputs(probe, input_dims, symbols=True)
    probe = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
    out = {}
    for vi in list(probe.graph.input) + list(probe.graph.value_info) + list(probe.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return out


__all__ = ["SMALL_BYTES", "concrete_shapes", "known_shapes", "partial_shapes", "run_shapes"]
