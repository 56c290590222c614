"""Pass ``gather_inner``: a GatherElements whose axis is followed only by size-1 axes runs on its axis as the last one
(the unit axes dropped by a Reshape before and put back after).

ONNX Runtime 1.32's CPU ``GatherElements`` takes a per-element path when the gathered axis is not the innermost one,
even when every axis after it has size 1: measured at 64 streams, 1 thread, float32 data (64, 640, 1) and int64
indices (64, 320, 1) on axis 1: 150 us; the same numbers as (64, 640) and (64, 320): 19 us. The reference model's
pitch branch gathers a lag's 320 samples that way (``perm_gather``'s module doc); its GatherElements was 0.21 ms of
a 5.7 ms batched run (ORT profile). Reshapes move no number, so outputs are bit-identical.

Rewrites (top-level graph): a default-domain ``GatherElements`` of rank r > 1 on axis a < r - 1 whose data and
indices both have known size 1 on every axis after a: ``Reshape`` data and indices to their first a + 1 axes (shape
``[0] * a + [-1]``), gather on axis a, ``Reshape`` the result back (``[0] * a + [-1] + [1] * (r - a - 1)``).

Applied by :class:`~cosyedge.runtime.pool.StreamPool` (:data:`cosyedge.passes.POOL_PASSES`).

Source: ONNX operator specs (GatherElements, Reshape); ONNX Runtime ``core/providers/cpu/tensor/gather_elements.cc``
(the measured kernel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import Builder, copy_with, node_attrs, spliced
from cosyedge.passes.shapes import partial_shapes

onnx = lazy_import("onnx")


def inner_rewrite(model: Any, input_dims: dict[str, list]) -> tuple[Any, dict[str, int]]:
    """Return a copy of ``model`` whose GatherElements over trailing unit axes gather on their last axis (module doc).

    Args:
        model (onnx.ModelProto): The graph (not modified).
        input_dims (dict[str, list[int | str]]): Graph input name -> dims (batch axis symbolic), for the unit axes.
    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{"gather_inner": <nodes rewritten>}``.
    Raises:
        Exception: onnx's own errors for a model it cannot infer shapes of.
    """
    shapes = partial_shapes(model, input_dims)
    m, g, _, found = copy_with(model, "GatherElements")
    replace, new_inits = {}, []
    for idx, node in found:
        data, ind = (shapes.get(x) for x in node.input[:2])
        if not data or not ind or len(data) != len(ind) or len(data) < 2:
            continue
        r = len(data)
        a = node_attrs(node).get("axis", 0)
        a = a + r if a < 0 else a
        if not 0 <= a < r - 1 or any(d != 1 for d in data[a + 1:] + ind[a + 1:]):
            continue
        b = Builder(node.name or node.output[0], "inner")
        flat = b.const("shape", np.array([0] * a + [-1], np.int64))
        ins = [b.node("Reshape", [node.input[0], flat]), b.node("Reshape", [node.input[1], flat])]
        y = b.node("GatherElements", ins, axis=a)
        b.node("Reshape", [y, b.const("shape", np.array([0] * a + [-1] + [1] * (r - a - 1), np.int64))],
               out=node.output[0])
        replace[idx] = b.nodes
        new_inits += b.inits
    m, count = spliced(m, replace, new_inits)
    return m, {"gather_inner": count}


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`inner_rewrite` at ``target.dims``, the states a
    ``state_layout`` rewrite turned time-major given in their new layout."""
    from cosyedge.passes.state_layout import layout_dims

    return inner_rewrite(model, layout_dims(model, target.dims))


__all__ = ["inner_rewrite", "run"]
