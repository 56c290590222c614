"""Adopt, step 2: the batch axis of each state and the dynamic-batch rewrite, and the batch test that proves it.

cosyedge states are batch-first (``["N", ...]``); a graph exported for batch 1 gets ``N`` on the batch axes
of its inputs and outputs, and each ``Reshape`` to a constant shape starting with 1 gets ``-1`` there. The
batch test streams two utterances at batch 2 and each at batch 1 (:data:`BATCH_CHUNKS` chunks of real
speech); a difference keeps the graph at batch 1.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from cosyedge.artifacts import BATCH_DIM
from cosyedge.errors import ArtifactError, first_line
from cosyedge.surgery import proof
from cosyedge.surgery.adopt.pairs import AdoptedState

BATCH_CHUNKS = 48
"""int: chunks the batch test streams (two streams at batch 2 against each at batch 1)."""


def _perm_to_first(rank: int, axis: int) -> list[int]:
    """Permutation moving ``axis`` to 0 (the others keep their order)."""
    return [axis] + [i for i in range(rank) if i != axis]


def _perm_from_first(rank: int, axis: int) -> list[int]:
    """Inverse of :func:`_perm_to_first`."""
    p = _perm_to_first(rank, axis)
    return [p.index(i) for i in range(rank)]


def _set_dim(vi: Any, axis: int, value: Any) -> None:
    d = vi.type.tensor_type.shape.dim[axis]
    if isinstance(value, str):
        d.dim_param = value
    else:
        d.dim_value = int(value)


def _dynamic_batch(model: Any, streamed: list[str], states: list[AdoptedState]) -> tuple[Any, int]:
    """Copy of ``model`` with ``N`` on every batch axis (axis 0 of the ``streamed`` inputs and outputs, each
    state's own) and Reshape shapes ``[1, ...]`` -> ``[-1, ...]``.

    Returns:
        tuple[onnx.ModelProto, int]: the copy and the number of Reshape shapes rewritten.
    """
    from onnx import numpy_helper

    m = copy.deepcopy(model)
    axes = {n: 0 for n in streamed}
    for s in states:
        axes[s.input] = axes[s.output] = s.batch_axis
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in axes and axes[vi.name] is not None and len(vi.type.tensor_type.shape.dim) > axes[vi.name]:
            _set_dim(vi, axes[vi.name], BATCH_DIM)
    del m.graph.value_info[:]
    consts = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = n.attribute[0].t
    users: dict[str, int] = {}
    for n in m.graph.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    patched = 0
    for n in m.graph.node:
        if n.op_type != "Reshape" or len(n.input) < 2 or n.input[1] not in consts:
            continue
        shape = numpy_helper.to_array(consts[n.input[1]])
        if shape.ndim != 1 or shape.size < 2 or shape[0] != 1 or (shape == -1).any() or (shape == 0).any():
            continue
        new = shape.copy()
        new[0] = -1
        if users.get(n.input[1], 0) > 1:  # a shared constant: give this node its own
            name = f"{n.input[1]}/adopt_batch_{patched}"
            m.graph.initializer.append(numpy_helper.from_array(new.astype(shape.dtype), name))
            n.input[1] = name
        else:
            consts[n.input[1]].CopyFrom(numpy_helper.from_array(new.astype(shape.dtype), consts[n.input[1]].name))
        patched += 1
    return m, patched


def _adopted_states(model: Any, states: list[AdoptedState], batch: int, dynamic: bool) -> list:
    res = []
    width = max(2, len(str(len(states) - 1)))
    for k, s in enumerate(states):
        shape = [batch] + [d for i, d in enumerate(s.shape) if i != s.batch_axis]
        name = f"state_in.{k:0{width}d}"
        res.append((name, f"state_out.{k:0{width}d}", np.full(shape, s.init, dtype=s.dtype)))
    return res


def _batch_test(model: Any, ins: list, outs: list, states: list[AdoptedState], feed: dict[str, np.ndarray],
                atol: float) -> str:
    """'' when ``model`` at batch 2 gives each stream what it gives at batch 1, else why not (str).

    Args:
        model (onnx.ModelProto): The adopted candidate (``state_in.NN``...).
        ins, outs (list[StreamTensor]): Streamed inputs and outputs.
        states (list[AdoptedState]): The state pairs as the candidate has them.
        feed (dict[str, np.ndarray]): Batch-1 inputs (the proof's); the second stream gets them reversed in time,
            rolled and scaled by 0.6.
        atol (float): Tolerance relative to max(1, peak).
    """
    from cosyedge.surgery.proof.adopt import run_loop

    try:
        sess = proof.session(model)
    except Exception as err:
        return f"the graph does not load with a dynamic batch ({brief(first_line(err))})"
    fb = {}
    for t in ins:
        a = feed[t.name]
        a = np.take(a, np.arange(min(a.shape[t.time_axis], BATCH_CHUNKS * t.frames)), axis=t.time_axis)
        other = 0.6 * np.roll(np.flip(a, axis=t.time_axis), 1234, axis=t.time_axis)
        fb[t.name] = np.concatenate([a, other.astype(a.dtype)], axis=0)
    try:
        both = run_loop(sess, ins, fb, 1, _adopted_states(model, states, 2, True), outs)
        one = [run_loop(sess, ins, {k: v[b:b + 1] for k, v in fb.items()}, 1,
                        _adopted_states(model, states, 1, True), outs) for b in range(2)]
    except ArtifactError as err:
        return f"it does not run at batch 2: {brief(str(err))}"
    for o in outs:
        for b in range(2):
            mx, _snr, peak = proof.max_err(one[b][o.name], both[o.name][b:b + 1])
            if not mx <= max(atol, 1e-5) * max(1.0, peak):
                return f"at batch 2 stream {b} of '{o.name}' differs from batch 1 by {mx:.3g}"
    return ""


BRIEF_CHARS = 160
"""int: the most characters of a third-party error text quoted in an info line (:func:`brief`)."""


def brief(text: str) -> str:
    """str: the first clause of an ONNX Runtime error text for a log line: its first line, without the
    ``[ONNXRuntimeError] : 1 : FAIL :`` code and the ``Status Message:`` detail, cut at :data:`BRIEF_CHARS`."""
    import re

    t = (text.strip().splitlines() or [""])[0]
    t = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", t).split(" Status Message:")[0].rstrip()
    return t if len(t) <= BRIEF_CHARS else t[: BRIEF_CHARS - 3] + "..."
