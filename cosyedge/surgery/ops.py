"""Graph functions registered on ``onnx_graphsurgeon.Graph`` (call them as ``graph.clear_intermediate_shapes()``).

* :func:`clear_intermediate_shapes` forgets the shapes of every non-I/O tensor (stale after a rewrite;
  strict shape inference recomputes them).

It returns the graph; the caller ends its pass with ``graph.cleanup().toposort()``. (The state pairs themselves
are built by :class:`cosyedge.surgery.walker.Walker`.)

Sources: onnx-graphsurgeon ``Graph.register`` (``ir/graph.py``) and ``exporters/onnx_exporter.py``
(``has_value_info``).
"""

from __future__ import annotations

from typing import Any

from cosyedge._lazy import lazy_import

gs = lazy_import("onnx_graphsurgeon")

@gs.Graph.register()
def clear_intermediate_shapes(self: Any) -> Any:
    """Forget shape and dtype of every Variable that is not a graph input/output; returns the graph.

    After a rewrite the recorded ``value_info`` of intermediate tensors can be stale (a Conv input that
    was (N, C, T + P) zero-padded is now a Concat); exporting them would make strict shape inference
    fail or lie. The exporter omits tensors without shape and dtype (``has_value_info`` in
    ``exporters/onnx_exporter.py``).
    """
    io = {t.name for t in (*self.inputs, *self.outputs)}
    for t in self.tensors().values():
        if isinstance(t, gs.Variable) and t.name not in io:
            t.shape = None
            t.dtype = None
    return self
