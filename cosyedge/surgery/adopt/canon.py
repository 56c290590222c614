"""Adopt, step 0: bring a graph's streaming inputs and outputs to the layouts the later steps take.

Constant side inputs (``--const sr=16000``) become initializers (:func:`fix_consts`); a waveform block of L
samples per call in any layout becomes a waveform input of one hop plus, when L > hop, its context as a state
(:func:`frame_input`).

The later steps (batch axes, Scan over hops, the contract) take stream tensors batch-first with a time axis:
audio ``(N, 1, T)``, outputs ``(N, C, F)`` (time last) or features with a named time axis. Graphs in the
wild give one value per call instead (a VAD's speech probability ``(N, 1)`` or ``(N,)``): such an output gets
a ``Reshape`` to ``(N, C, 1)``, so it streams as a ``"features"`` output of one frame per hop.

Everything here edits a copy of the original graph before the reference loop is run on it, so the proof
(:func:`cosyedge.surgery.proof.adopt.prove`) compares the adopted graph with this canonical one,
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
    from onnx import helper, numpy_helper

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


def _dims(vi: Any) -> list:
    t = vi.type.tensor_type
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def _set_dims(vi: Any, dims: list) -> None:
    shape = vi.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = str(d)


def parse_const(text: str) -> float:
    """A ``--const`` value: a number (int or float), e.g. ``16000`` or ``0.5``; ``nan``, ``inf``, ``-inf`` as written.

    Raises:
        ValueError: not a number, or one beyond the float range (``1e400``, which float() turns into inf).
    """
    value = float(text) if any(c in text for c in ".eE") or text.lower() in ("nan", "inf", "-inf") else int(text)
    if isinstance(value, float) and np.isinf(value) and text.lower().lstrip("+-") != "inf":
        raise ValueError(f"{text} is beyond the float range")
    return value


def check_const(name: str, value: object, dtype: object, where: str) -> object:
    """``value`` as ``dtype`` holds it exactly, else one line: an integer input takes a whole number within its dtype's
    range (``sr=16000.7`` is not silently 16000, nor ``sr=1e20`` an overflow), a bool input 0 or 1, a float input a
    number within its dtype's range (65504 for float16) or nan/inf as written.

    Args:
        name (str): The input.
        value (int | float | bool): The value given.
        dtype (numpy.dtype): The input's dtype in the graph.
        where (str): Name for messages.
    Returns:
        int | float | bool: the value to fill the input with.
    Raises:
        UsageError: a value the dtype cannot hold (exit 2).
    """
    from cosyedge.errors import UsageError

    dt = np.dtype(dtype)
    fix = f"--const {name}={value}: input '{name}' is {dt.name}"
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise UsageError(f"{where}: {fix}, the value is not a number ({type(value).__name__})")
    if dt.kind in "iub":
        if isinstance(value, (float, np.floating)) and not (np.isfinite(value) and float(value).is_integer()):
            cut = f"{value} would be cut to {int(value)}" if np.isfinite(value) else f"{value} is no whole number"
            raise UsageError(f"{where}: {fix}, which takes whole numbers only ({cut}): give a whole number")
        v = int(value)
        lo, hi = (0, 1) if dt.kind == "b" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        if not lo <= v <= hi:
            raise UsageError(f"{where}: {fix}, which holds {lo}..{hi}: the value is out of its range")
        return bool(v) if dt.kind == "b" else v
    if dt.kind == "f":
        v = float(value)
        if np.isfinite(v) and abs(v) > float(np.finfo(dt).max):
            raise UsageError(f"{where}: {fix}, which holds at most {float(np.finfo(dt).max):g} in magnitude: the value "
                             f"would become inf")
        return v
    raise UsageError(f"{where}: --const {name}: input '{name}' is {dt.name}; only number inputs (int, float, bool) can "
                     f"be fixed with --const")


def fix_consts(model: Any, consts: dict, where: str) -> Any:
    """Copy of ``model`` with each input named in ``consts`` replaced by an initializer of that value (dtype and
    shape from the graph: Silero's ``sr`` int64 scalar = 16000).

    Args:
        model (onnx.ModelProto): The graph.
        consts (dict[str, int | float]): Value by input name.
        where (str): Name for messages.
    Returns:
        onnx.ModelProto: the copy (``model`` when ``consts`` is empty).
    Raises:
        UsageError: a name that is not an input, an input whose shape is not fixed (a tensor with a symbolic
            size cannot be made a constant), a value its dtype cannot hold exactly (:func:`check_const`).
    """
    from onnx import helper, numpy_helper

    from cosyedge.errors import UsageError

    if not consts:
        return model
    m = copy.deepcopy(model)
    ins = {i.name: i for i in m.graph.input}
    for name, value in consts.items():
        if name not in ins:
            raise UsageError(f"{where}: --const {name}=... names no input of the graph (inputs: {list(ins)})")
        shape = _dims(ins[name])
        if any(not isinstance(d, int) for d in shape):
            raise UsageError(f"{where}: --const {name}: the input has shape {shape}, not a fixed one; only inputs of a "
                             f"fixed shape (a scalar such as sr) can be constants")
        dtype = helper.tensor_dtype_to_np_dtype(ins[name].type.tensor_type.elem_type)
        value = check_const(name, value, dtype, where)
        m.graph.initializer.append(numpy_helper.from_array(np.full(shape, value, dtype=dtype), name))
        m.graph.input.remove(ins[name])
    if m.ir_version < 4:
        m.ir_version = 4  # initializers that are not inputs
    return m


def waveform_layout(shape: list) -> int | None:
    """Rank of a waveform block input: 3 for (N, 1, L), 2 for (N, L), 1 for (L,); None for anything else."""
    if len(shape) == 3 and shape[1] == 1:
        return 3
    return len(shape) if len(shape) in (1, 2) else None


def frame_input(model: Any, name: str, frame: int, hop: int) -> tuple[Any, tuple[str, str] | None]:
    """Copy of ``model`` whose waveform block input ``name`` ((N, L), (N, 1, L) or (L,), L = ``frame`` samples per
    call) becomes a waveform input (N, 1, hop) of the same name; when ``frame`` > ``hop`` the graph expects
    ``frame - hop`` samples of context before each hop (Silero: 64 + 512): that context becomes a state of its own,
    ``NAME.context_in`` -> ``NAME.context_out`` (N, frame - hop), zeros at the start (the package loop's own
    start), the last ``frame - hop`` samples of the block.

    Args:
        model (onnx.ModelProto): The graph (opset >= 10 for Slice with inputs).
        name (str): The block input.
        frame (int): Samples per call the graph takes (L).
        hop (int): Samples per hop (H <= L).
    Returns:
        tuple[onnx.ModelProto, tuple[str, str] | None]: the copy and the context state pair (or None).
    """
    from onnx import helper, numpy_helper

    m = copy.deepcopy(model)
    g = m.graph
    vi = next(i for i in g.input if i.name == name)
    rank = len(_dims(vi))
    raw = f"{name}/adopt_block"
    for n in g.node:
        for k, i in enumerate(n.input):
            if i == name:
                n.input[k] = raw
    _rename_in_subgraphs(g, name, raw)
    ctx = frame - hop
    inits = {f"{name}/adopt_hop_shape": [-1, hop],
             f"{name}/adopt_block_shape": {1: [frame], 2: [-1, frame], 3: [-1, 1, frame]}[rank]}
    nodes = [helper.make_node("Reshape", [name, f"{name}/adopt_hop_shape"], [f"{name}/adopt_hop"])]
    pair = None
    block2 = f"{name}/adopt_hop"
    if ctx > 0:
        cin, cout = f"{name}.context_in", f"{name}.context_out"
        inits.update({f"{name}/adopt_ctx_starts": [hop], f"{name}/adopt_ctx_ends": [frame], f"{name}/adopt_ax1": [1]})
        block2 = f"{name}/adopt_block2"
        nodes += [helper.make_node("Concat", [cin, f"{name}/adopt_hop"], [block2], axis=1),
                  helper.make_node("Slice", [block2, f"{name}/adopt_ctx_starts", f"{name}/adopt_ctx_ends",
                                             f"{name}/adopt_ax1"], [cout])]
        b = _dims(vi)[0] if rank > 1 else 1
        g.input.append(helper.make_tensor_value_info(cin, vi.type.tensor_type.elem_type, [b, ctx]))
        g.output.append(helper.make_tensor_value_info(cout, vi.type.tensor_type.elem_type, [b, ctx]))
        pair = (cin, cout)
    nodes.append(helper.make_node("Reshape", [block2, f"{name}/adopt_block_shape"], [raw]))
    for k, v in inits.items():
        g.initializer.append(numpy_helper.from_array(np.array(v, np.int64), k))
    for k, n in enumerate(nodes):
        n.name = f"adopt/{name}/frame_{k}"
        g.node.insert(k, n)
    _set_dims(vi, [_dims(vi)[0] if rank > 1 else 1, 1, hop])
    return m, pair


def _rename_in_subgraphs(graph: Any, old: str, new: str) -> None:
    """Rename outer-scope references to ``old`` inside If/Loop/Scan bodies (Silero reads its input in an If)."""
    from onnx import AttributeProto

    for n in graph.node:
        for a in n.attribute:
            subs = ([a.g] if a.type == AttributeProto.GRAPH else
                    list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
            for sg in subs:
                if any(i.name == old for i in sg.input) or any(t.name == old for t in sg.initializer):
                    continue  # shadowed inside
                for sn in sg.node:
                    for k, i in enumerate(sn.input):
                        if i == old:
                            sn.input[k] = new
                _rename_in_subgraphs(sg, old, new)


def time_axis_candidates(shape: list) -> list[int]:
    """Axes (after the batch axis 0) that may be time in a features tensor: symbolic sizes other than the batch's,
    else sizes of 1."""
    sym = [k for k, d in enumerate(shape) if k > 0 and isinstance(d, str) and d != shape[0]]
    return sym or [k for k, d in enumerate(shape) if k > 0 and d == 1]
