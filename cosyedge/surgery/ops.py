"""Graph functions registered on ``onnx_graphsurgeon.Graph`` (call them as ``graph.expose_state(...)``).

* :func:`expose_state` replaces a causal left pad of a Conv input by a carried state:
  ``Concat(state_in, x, axis=-1)`` feeds the Conv and ``Slice(concat, -P:)`` becomes ``state_out``.
* :func:`clear_intermediate_shapes` forgets the shapes of every non-I/O tensor (stale after a rewrite;
  strict shape inference recomputes them).

Each returns the graph or the new tensor; the caller ends its pass with ``graph.cleanup().toposort()``.

Sources: onnx-graphsurgeon ``Graph.register`` / ``Graph.layer`` (``ir/graph.py``) and its example
``08_replacing_a_subgraph/replace.py``; ONNX operator docs for Concat and Slice (opset 13+:
``starts``/``ends``/``axes`` as int64 inputs; ``ends`` clamps to the dimension, so INT64_MAX means
"to the end").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import

gs = lazy_import("onnx_graphsurgeon")

INT64_MAX = int(np.iinfo(np.int64).max)


@gs.Graph.register()
def expose_state(self: Any, x: Any, pad_frames: int, shape: list, name_in: str, name_out: str,
                 dtype: Any = np.float32, prefix: str = "") -> Any:
    """Add a state input/output pair that carries the last ``pad_frames`` frames of ``x`` across chunks.

    Creates ``cat = Concat(state_in, x, axis=-1)`` (shape (N, C, P + T)) and
    ``state_out = Slice(cat, starts=[-P], ends=[INT64_MAX], axes=[-1])`` (shape (N, C, P)), appends
    ``state_in`` to the graph inputs and ``state_out`` to the graph outputs. The caller feeds ``cat`` to
    the Conv in place of the zero-padded ``x`` and removes the pad.

    Args:
        x (gs.Tensor): Unpadded Conv input, (N, C, T) (time last).
        pad_frames (int): P > 0, frames of left (causal) pad replaced by the state.
        shape (list): Static state shape with the batch axis as ``"N"``, e.g. ``["N", 96, 4]``.
        name_in (str): Name of the new graph input (e.g. ``"state_in.03"``).
        name_out (str): Name of the new graph output (e.g. ``"state_out.03"``).
        dtype (np.dtype): State dtype; float32 by default.
        prefix (str): Prefix for the names of the new nodes (the Conv node name).
    Returns:
        gs.Variable: ``cat``, the tensor to feed to the Conv.
    """
    state_in = gs.Variable(name_in, dtype=dtype, shape=list(shape))
    state_out = gs.Variable(name_out, dtype=dtype, shape=list(shape))
    cat = gs.Variable(f"{prefix}/state_concat_output", dtype=dtype)
    self.layer(op="Concat", name=f"{prefix}/state_concat", inputs=[state_in, x], outputs=[cat],
               attrs={"axis": -1})
    ints = {k: gs.Constant(f"{prefix}/state_slice_{k}", np.array([v], dtype=np.int64))
            for k, v in (("starts", -pad_frames), ("ends", INT64_MAX), ("axes", -1))}
    self.layer(op="Slice", name=f"{prefix}/state_slice", inputs=[cat, ints["starts"], ints["ends"], ints["axes"]],
               outputs=[state_out])
    self.inputs.append(state_in)
    self.outputs.append(state_out)
    return cat


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
