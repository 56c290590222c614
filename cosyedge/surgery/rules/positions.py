"""Positions as state: ``Range`` over time (positions counted from the sequence start) streams with a counter.

``arange(T)`` (``Range(start, start + delta * T, delta)`` whose length is the frames of a time axis, with a start and
a step that are the same at every length) becomes, on one chunk, ``start + delta * (counter + arange(chunk
frames))`` where ``counter`` is a per-stream **position state**: int64 ``(N, 1)``, zeros at the stream's start, kind
``"position"``, advanced by the chunk's frames (of that time axis's rate) on every run. An encoding table sliced to
the length (``pe[:, :T]``: a Slice of a constant whose end is the sequence length) becomes a Gather of the table at
the same positions.

The positions differ per stream (StreamPool runs streams that joined at different times in one batch), so in the
chunk graph they carry a leading batch axis that the full graph does not have: such a tensor is **lifted** (its
chunk shape is ``(N, *full shape)``); the ops on lifted tensors are rewritten by the rules of
:mod:`cosyedge.surgery.rules.lifted`. Positions counted from a start that depends on the sequence length or downwards
(``arange(T - 1, -1, -1)``) are refused.

Sources: ONNX Range (``number_of_elements = max(ceil((limit - start) / delta), 0)``), Gather, GatherND, numpy
broadcasting; the cache offsets of streaming transformers (NeMo ``cache_last_channel_len``, Zipformer
``processed_lens``, Mimi ``end_offset``) are the same per-stream counter.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge.surgery.rules import Blocker

POSITION = "position"
"""str: :class:`~cosyedge.artifacts.StateSpec` kind of a position counter."""

_FUTURE = ("needs the sequence's total length, which a stream does not know (T - pos, pos / T, positions counted "
           "from the end)")


@dataclasses.dataclass
class PositionFamily:
    """What one walk knows of positions (:attr:`cosyedge.surgery.walker.Walker.positions`)."""

    lifted: set = dataclasses.field(default_factory=set)  # tensors of positions: chunk shape (N, *full shape)
    counters: dict = dataclasses.field(default_factory=dict)  # position counter state_in by rate (frames per tick)
    max_ticks: tuple | None = None  # (ticks, why): the longest stream positions can be counted for (a table's rows)
    # (ticks, why, frames): the longest input the full-sequence graph runs at where the stream itself has no such limit
    # (a relative-position table of fixed rows): it bounds only the proof
    full_max_ticks: tuple | None = None


def _same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and np.shape(a) == np.shape(b) and np.array_equal(a, b)


def _dtype(ctx: Any, t: Any) -> Any:
    v = ctx.value(t)
    if v is not None:
        return np.asarray(v).dtype
    return np.dtype(t.dtype) if t.dtype is not None else np.dtype(np.float32)


def _chunk_positions(ctx: Any, rate: Fraction, base: str) -> Any:
    """int64 (N, frames): each stream's positions of this chunk's frames at ``rate`` frames per tick, counted from
    its stream's start (the position counter state plus ``arange(frames)``)."""
    counter = ctx.position_counter(rate)
    n = ctx.unsqueeze(ctx.frames_tensor(rate, base), [0], base, squeeze=True)
    rng = ctx.op("Range", [ctx.const(0), n, ctx.const(1)], base, dtype=np.int64)
    return ctx.op("Add", [counter, rng], base, dtype=np.int64)


def range_positions(node: Any, ctx: Any) -> None:
    """Range whose output runs over time (module doc): positions from the sequence start become the position
    counter plus the chunk's frames; the output is lifted (``(N, frames)``), delay 0.

    Raises:
        Blocker: start or step computed from the sequence length or the data, a step that is not positive (counts
            down from the end), or more positions than the time axis has frames.
    """
    out = node.outputs[0]
    f = ctx.fact(out)
    start, _, delta = node.inputs
    s1, d1 = ctx.value(start), ctx.value(delta)
    if not _same(s1, ctx.value2(start)):
        raise Blocker(f"counts positions from a start computed from the sequence length or the data: it {_FUTURE}")
    if not _same(d1, ctx.value2(delta)):
        raise Blocker("counts positions with a step computed from the sequence length or the data")
    s, d = np.asarray(s1).reshape(()), np.asarray(d1).reshape(())
    if not d > 0:
        raise Blocker(f"counts positions downwards (step {d}): it {_FUTURE}")
    if f.axis != 0 or f.extra > 0:
        raise Blocker(f"counts {f.extra} positions beyond the frames of a time axis (only arange over the frames "
                      "of a time axis streams)")
    if f.extra < 0:  # the frames of an axis a valid conv or a crop shortened: position 0 is not the stream's start
        raise Blocker(f"counts the frames of a time axis {-f.extra} frame(s) shorter than the input's ticks (after a "
                      "valid conv or a crop): its position 0 is not the stream's first frame (only arange over the "
                      "frames of a time axis that starts with the stream streams)")
    base = f"{node.name}/position"
    dt = _dtype(ctx, out)
    pos = _chunk_positions(ctx, f.rate, base)
    if dt != np.int64:
        pos = ctx.op("Cast", [pos], base, {"to": _onnx_type(dt)}, dtype=dt)
    if d != 1:
        pos = ctx.op("Mul", [pos, ctx.const(d, dtype=dt)], base, dtype=dt)
    if s != 0:
        pos = ctx.op("Add", [pos, ctx.const(s, dtype=dt)], base, dtype=dt)
    _become(node, "Identity", [pos])
    ctx.positions.lifted.add(out.name)
    ctx.set_delay(out, 0)


def _onnx_type(dt: Any) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))


def _become(node: Any, op: str, inputs: list, attrs: dict | None = None) -> None:
    node.op, node.attrs = op, attrs or {}
    node.inputs.clear()
    node.inputs.extend(inputs)


def table_slice(node: Any, ctx: Any, v1: dict, v2: dict) -> None:
    """A Slice of a constant table whose end runs with the sequence length (``pe[:, :T]``, ``pe[:, s:s + T]``): the
    rows at this chunk's positions, ``Gather(table, s + positions)`` on the sliced axis; the output is lifted.

    Args:
        node: The Slice node (data input not streaming, output streaming).
        ctx: The walker.
        v1, v2 (dict[str, np.ndarray]): starts/ends/axes/steps (int64, axes and steps filled in) in both probes.
    Raises:
        Blocker: the start depends on the sequence length, a step other than 1 on that axis, another axis sliced
            by a length-dependent amount, or more rows than the time axis has frames.
    """
    data, out = node.inputs[0], node.outputs[0]
    fo = ctx.fact(out)
    table = ctx.value(data)
    if table is None or not _same(table, ctx.value2(data)):
        raise Blocker("its starts/ends run over time and it slices a tensor that is not a constant table")
    rank = table.ndim
    axes = [int(a) % rank for a in v1["axes"]]
    a = fo.axis
    if a not in axes:
        raise Blocker("its starts/ends run over time")
    j = axes.index(a)
    if v1["starts"][j] != v2["starts"][j] or int(v1["steps"][j]) != 1:
        raise Blocker(f"slices a table at a start computed from the sequence length, or by steps: it {_FUTURE}")
    for key in ("starts", "ends", "axes", "steps"):
        for i in range(len(axes)):
            if i != j and v1[key][i] != v2[key][i]:
                raise Blocker(f"slices another axis by a {key} computed from the sequence length")
    if fo.extra != 0:
        raise Blocker("slices a table to a length other than the frames of a time axis")
    n = table.shape[a]
    s = int(v1["starts"][j])
    s = max(0, min(n, s + n if s < 0 else s))
    base = f"{node.name}/position"
    keep = [i for i in range(len(axes)) if i != j]
    src = data
    if keep:
        src = ctx.op("Slice", [data] + [ctx.const([int(v1[k][i]) for i in keep]) for k in ("starts", "ends")]
                     + [ctx.const([axes[i] for i in keep]), ctx.const([int(v1["steps"][i]) for i in keep])], base,
                     dtype=table.dtype)
    ctx.limit_ticks(math.floor(Fraction(n - s) / fo.rate), f"the encoding table '{data.name}' of {node.op} node "
                    f"'{node.name}' ({n - s} rows)")
    idx = _chunk_positions(ctx, fo.rate, base)
    if s:
        idx = ctx.op("Add", [idx, ctx.const(s)], base, dtype=np.int64)
    if a == 0:
        _become(node, "Gather", [src, idx], {"axis": 0})
    else:
        g = ctx.op("Gather", [src, idx], base, {"axis": a}, dtype=table.dtype)  # table[:a] + (N, frames) + ...
        perm = [a] + list(range(a)) + list(range(a + 1, rank + 1))
        _become(node, "Transpose", [g], {"perm": perm})
    ctx.positions.lifted.add(out.name)
    ctx.set_delay(out, 0)


def _table_limit(ctx: Any, node: Any, idx: Any, rows: int) -> None:
    """Record the stream length a lookup of ``rows`` rows by positions ``idx`` allows (``nn.Embedding(arange(T))``):
    from the probe's indices, the row the first frame reads and how many rows a frame advances."""
    f, v = ctx.fact(idx), ctx.value(idx)
    if v is None or f.axis is None or not np.size(v):
        return
    seq = np.moveaxis(np.asarray(v), f.axis, 0).reshape(np.shape(v)[f.axis], -1)[:, 0]
    if len(seq) < 2 or seq[1] <= seq[0]:
        return
    step, start = int(seq[1] - seq[0]), int(seq[0])
    frames = (rows - start + step - 1) // step  # rows start, start + step, ... < rows
    ctx.limit_ticks(math.floor(Fraction(frames) / f.rate), f"the table '{node.inputs[0].name}' of {node.op} node "
                    f"'{node.name}' ({rows} rows)")
