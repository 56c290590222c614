"""Adopt, step 0: bring a graph's streaming inputs and outputs to the layouts the later steps take.

The later steps (batch axes, Scan over hops, the contract) take stream tensors batch-first with a time axis:
audio ``(N, 1, T)``, outputs ``(N, C, F)`` (time last) or features with a named time axis. Graphs in the
wild give one value per call instead (a VAD's speech probability ``(N, 1)`` or ``(N,)``): such an output gets
a ``Reshape`` to ``(N, C, 1)``, so it streams as a ``"features"`` output of one frame per hop.

Everything here edits a copy of the original graph before the reference loop is run on it, so the proof
(:func:`cosyedge.surgery.proof.prove_against_loop`) compares the adopted graph with this canonical one,
which computes exactly what the original computes (a Reshape moves no value).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def _rename_output(graph: Any, name: str, new: str) -> None:
    """Make the node that produces graph output ``name`` write ``new`` instead (and its readers read ``new``)."""
    for n in graph.node:
        for k, o in enumerate(n.output):
            if o == name:
                n.output[k] = new
        for k, i in enumerate(n.input):
            if i == name:
                n.input[k] = new


def per_call_outputs_to_frames(model: Any, ranks: dict[str, int]) -> tuple[Any, list[str]]:
    """Copy of ``model`` whose outputs of rank 1 ``(N,)`` or 2 ``(N, C)`` are reshaped to ``(N, C, 1)``.

    Args:
        model (onnx.ModelProto): The graph.
        ranks (dict[str, int]): Rank of each stream output (by name) as the graph gives it when run.
    Returns:
        tuple[onnx.ModelProto, list[str]]: the copy (``model`` itself when nothing changes) and the names of
        the reshaped outputs.
    """
    from onnx import numpy_helper

    fix = [o for o, r in ranks.items() if r in (1, 2)]
    if not fix:
        return model, []
    m = copy.deepcopy(model)
    g = m.graph
    by_name = {o.name: o for o in g.output}
    inputs = {i.name for i in g.input}
    for o in fix:
        raw = f"{o}/adopt_per_call"
        if o in inputs:  # an input passed straight through: read it
            raw = o
        else:
            _rename_output(g, o, raw)
        shape_name = f"{o}/adopt_frames_shape"
        target = [-1, 1, 1] if ranks[o] == 1 else [0, 0, 1]
        g.initializer.append(numpy_helper.from_array(np.array(target, np.int64), shape_name))
        from onnx import helper

        g.node.append(helper.make_node("Reshape", [raw, shape_name], [o], name=f"adopt/{o}/one_frame_per_call"))
        vi = by_name[o]
        dims = vi.type.tensor_type.shape.dim
        old = [(d.dim_param or None) if not d.HasField("dim_value") else d.dim_value for d in dims]
        new = ([old[0] if old else "N", 1, 1] if ranks[o] == 1 else
               [old[0] if old else "N", old[1] if len(old) > 1 else "C", 1])
        del dims[:]
        for d in new:
            dim = dims.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d or "?"
    return m, fix
