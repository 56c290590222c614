"""Batch facts of a fixed-batch export: free its batch axis so every tensor gets a measured batch axis.

Most streaming exports fix the batch (input ``[1, 1, 'T']``: only the time axis dynamic). Streamify needs a batch
axis for every tensor that has one: states are stored batch-first, per-stream positions (:mod:`.rules.positions`)
join the data at its batch axis, and StreamPool runs many streams in one batch. :func:`measure` finds batch axes by
a second run at batch 2, which a fixed-batch graph refuses. :func:`free_batch` makes such a graph batch-dynamic:

* the graph inputs' and outputs' axis 0 (the export's fixed batch ``B``) becomes ``N``;
* every Reshape whose target's first entry is a constant multiple ``k * B`` while its data's axis 0 is a constant
  ``m * B`` (at both probe lengths) gets ``k * (data's axis 0) / m`` there instead: ``x.view(1, T, H, D)``, the heads
  folded into the batch, ``x.view(1 * H, T, D)``, and unfolded again, ``x.view(1, H, T, D)`` of a ``(1 * H, T, D)``
  tensor, as both exporters bake them;
* every constant operand of a broadcasting op (a MatMul's of rank 3 or more) whose axis 0 is ``B`` (2 or more) with
  equal rows (``torch.zeros(B)`` folded, ``inv_freq.expand(B, -1, 1)``) becomes its first row, which broadcasts to any
  batch;
* every Expand of a tensor that has no batch (size 1 there) to a target whose first entry is ``k * B`` (``B`` of 2 or
  more: an attention mask expanded to the batch) gets ``k *`` (this run's batch) there;

then proves the change before it is used: the freed graph at batch ``B`` equals the export, and at batch ``2 B``
each half equals the export run on that half alone (two different seeded signals), at two lengths. A graph whose
batch is baked elsewhere (``torch.zeros(1, C)`` as a ConstantOfShape, an Expand to ``[1, ...]``) fails the proof and
is kept as exported: the stream graph then keeps the fixed batch too, and positions meet its tensors as one stream
(the positions rules of :mod:`cosyedge.surgery.rules.positions`).

Source: ONNX Reshape (``0`` copies an input dimension, ``-1`` is inferred); the adopt path's Reshape ``[1, ...] ->
[-1, ...]`` (:mod:`cosyedge.surgery.adopt.batch`) for graphs that already stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM
from cosyedge.log import LOG

gs = lazy_import("onnx_graphsurgeon")
onnx = lazy_import("onnx")


def fixed_batch(graph: Any) -> int | None:
    """The fixed batch (int) of a graph whose every input has the same fixed size on axis 0, else None."""
    sizes = set()
    for t in graph.inputs:
        shape = list(t.shape or [])
        if not shape or not isinstance(shape[0], (int, np.integer)) or int(shape[0]) <= 0:
            return None
        sizes.add(int(shape[0]))
    return sizes.pop() if len(sizes) == 1 else None


def _patch(graph: Any, b: int, values: tuple[dict, dict]) -> int:
    """Free the batch of ``graph`` (gs.Graph, edited in place; module doc); returns the Reshape and Expand targets rewritten (int)."""
    for t in list(graph.inputs) + list(graph.outputs):
        shape = list(t.shape or [])
        if shape and shape[0] == b:
            t.shape = [BATCH_DIM] + shape[1:]
    v1, v2 = values
    n = 0
    _UID[0] = 0  # the same names in the proved copy and in the graph itself
    for node in list(graph.nodes):
        if b > 1 and (node.op in _BROADCAST or node.op == "MatMul"):
            n += _patch_constants(node, b, min_rank=3 if node.op == "MatMul" else 1)
        if node.op == "Expand" and len(node.inputs) == 2:
            n += _patch_expand(graph, node, b, values)
        if node.op != "Reshape" or len(node.inputs) < 2:
            continue
        data, shp = node.inputs[0], node.inputs[1]
        s1, s2 = _value(shp, v1), _value(shp, v2)
        d1, d2 = v1.get(data.name), v2.get(data.name)
        if s1 is None or s2 is None or d1 is None or d2 is None or s1.ndim != 1 or s2.shape != s1.shape:
            continue
        if np.ndim(d1) == 0 or np.shape(d1)[0] != np.shape(d2)[0] or np.shape(d1)[0] % b:
            continue
        first, m = int(s1[0]), np.shape(d1)[0] // b
        if first != int(s2[0]) or first <= 0 or first % b:
            continue
        base = f"{node.name}/free_batch"
        lead = _layer(graph, "Shape", [data], base, {"start": 0, "end": 1}) if _opset(graph) >= 15 else \
            _layer(graph, "Slice", [_layer(graph, "Shape", [data], base), _c([0], base), _c([1], base)], base)
        if m != 1:  # the data's axis 0 folds m per batch row (heads: (B H, ...))
            lead = _layer(graph, "Div", [lead, _c([m], base)], base)
        if first != b:
            lead = _layer(graph, "Mul", [lead, _c([first // b], base)], base)
        rest = _layer(graph, "Slice", [shp, _c([1], base), _c([len(s1)], base)], base)
        node.inputs[1] = _layer(graph, "Concat", [lead, rest], base, {"axis": 0})
        n += 1
    graph.cleanup().toposort()
    return n


_BROADCAST = set("Add Sub Mul Div Pow Max Min Where Equal Less Greater LessOrEqual GreaterOrEqual And Or".split())


def _patch_constants(node: Any, b: int, min_rank: int = 1) -> int:
    """Replace each constant input of a broadcasting op whose axis 0 is the export's batch ``b`` (2 or more) and whose
    rows are all equal (``torch.zeros(B)`` folded to a constant: moshi's RoPE offsets; Hugging Face's
    ``inv_freq[None, :, None].expand(B, -1, 1)`` before its MatMul) by its first row, which broadcasts to any batch;
    returns how many. ``min_rank``: only constants of at least that rank (a MatMul broadcasts its batch axes only,
    rank 3 and up)."""
    n = 0
    for i, t in enumerate(node.inputs):
        if not isinstance(t, gs.Constant):
            continue
        v = np.asarray(t.values)
        if v.ndim >= min_rank and v.shape[0] == b and all(np.array_equal(v[0], v[r]) for r in range(1, b)):
            node.inputs[i] = gs.Constant(f"{t.name}/free_batch/{node.name}", np.ascontiguousarray(v[:1]))
            n += 1
    return n


def _batch_size(graph: Any, base: str) -> Any:
    """int64 (1,): this run's batch, axis 0 of the first graph input (every input's axis 0 is the batch here)."""
    shape = _layer(graph, "Shape", [graph.inputs[0]], base)
    return _layer(graph, "Slice", [shape, _c([0], base), _c([1], base)], base)


def _patch_expand(graph: Any, node: Any, b: int, values: tuple[dict, dict]) -> int:
    """Rewrite an Expand that broadcasts a batch-less tensor to the export's batch (target ``[k * B, ...]``, the data 1
    there: an attention mask ``mask.expand(B, 1, T, T)``) to ``k * (this run's batch)``; returns 1 when rewritten."""
    data, shp = node.inputs
    s1, s2 = _value(shp, values[0]), _value(shp, values[1])
    d1 = _value(data, values[0])
    if s1 is None or s2 is None or d1 is None or s1.ndim != 1 or s1.shape != s2.shape or not s1.size:
        return 0
    first = int(s1[0])
    aligned = np.shape(d1)[0] if np.ndim(d1) == s1.size else 1
    if b < 2 or first != int(s2[0]) or first % b or aligned != 1:
        return 0
    base = f"{node.name}/free_batch"
    lead = _batch_size(graph, base)
    if first != b:
        lead = _layer(graph, "Mul", [lead, _c([first // b], base)], base)
    rest = _layer(graph, "Slice", [shp, _c([1], base), _c([int(s1.size)], base)], base)
    node.inputs[1] = _layer(graph, "Concat", [lead, rest], base, {"axis": 0})
    return 1


def _opset(graph: Any) -> int:
    return int(graph.opset or 13)


def _value(t: Any, values: dict) -> np.ndarray | None:
    if isinstance(t, gs.Constant):
        return np.asarray(t.values)
    v = values.get(t.name)
    return None if v is None else np.asarray(v)


_UID = [0]


def _c(v: list, base: str) -> Any:
    _UID[0] += 1
    return gs.Constant(f"{base}/c{_UID[0]}", np.asarray(v, dtype=np.int64))


def _layer(graph: Any, op: str, inputs: list, base: str, attrs: dict | None = None) -> Any:
    _UID[0] += 1
    out = gs.Variable(f"{base}/{op.lower()}{_UID[0]}", dtype=np.int64)
    graph.layer(op=op, name=f"{base}/{op}{_UID[0]}", inputs=inputs, outputs=[out], attrs=attrs or {})
    return out


def _run(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from cosyedge.runtime.ort import session_from_onnx

    return session_from_onnx(model, threads=1, inter_threads=1, optimize=False, log_severity=4).run(None, feeds)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    peak = float(np.max(np.abs(a))) if a.size else 0.0
    return bool(np.all(np.isfinite(b) == np.isfinite(a))) and \
        float(np.max(np.abs(np.nan_to_num(a) - np.nan_to_num(b)), initial=0.0)) <= 1e-5 * max(peak, 1e-3)


def _proof(model: Any, freed: Any, time_axes: dict[str, int], b: int, lengths: tuple[int, int]) -> str:
    """'' when ``freed`` runs at batch ``b`` and ``2 b`` and equals ``model`` row group by row group, else why not."""
    from cosyedge.surgery.facts import probe_inputs

    for k, ticks in enumerate(lengths):
        one = probe_inputs(model, time_axes, ticks, seed=10 + k)
        two = probe_inputs(model, time_axes, ticks, seed=20 + k)
        try:
            ref1, ref2 = _run(model, one), _run(model, two)
        except Exception:  # noqa: BLE001 - the export itself fails here: measure() reports it
            return "the export does not run at the probe lengths"
        try:
            got1 = _run(freed, one)
            both = _run(freed, {n: np.concatenate([one[n], two[n]], axis=0) if one[n].ndim else one[n] for n in one})
        except Exception as err:  # noqa: BLE001 - a batch baked where no rewrite reaches
            from cosyedge.errors import first_line

            return f"batch {2 * b} does not run ({first_line(err)[:160]})"
        for r1, r2, g1, g2 in zip(ref1, ref2, got1, both):
            if not _close(r1, g1):
                return f"batch {b} differs from the export"
            if np.ndim(g2) == 0 or np.shape(g2)[0] != 2 * np.shape(r1)[0] or not (
                    _close(r1, g2[:np.shape(r1)[0]]) and _close(r2, g2[np.shape(r1)[0]:])):
                return f"batch {2 * b} mixes the streams or differs from the export run one at a time"
    return ""


def free_batch(graph: Any, model: Any, time_axes: dict[str, int], values: tuple[dict, dict],
               lengths: tuple[int, int], where: str = "model") -> tuple[Any | None, str]:
    """Make a fixed-batch graph batch-dynamic in place, proved (module doc).

    Args:
        graph (gs.Graph): The folded full-sequence graph (edited in place only when the proof passes).
        model (onnx.ModelProto): The same graph as exported from ``graph`` (the reference of the proof).
        time_axes (dict[str, int]): Time axis of each graph input.
        values (tuple[dict, dict]): Every tensor's values in the two probe runs (:func:`facts.measure`): the Reshape
            targets and their data's batch size.
        lengths (tuple[int, int]): The probe lengths (input ticks) the proof runs at.
        where (str): Name for messages.
    Returns:
        tuple[onnx.ModelProto | None, str]: the freed model (``graph`` now matches it) and "", or None and why not (no
        fixed batch: ""; the freed graph fails the proof: the reason, also logged; ``graph`` unchanged).
    """
    b = fixed_batch(graph)
    if b is None:
        return None, ""
    trial = graph.copy()
    n = _patch(trial, b, values)
    freed = gs.export_onnx(trial)
    del freed.graph.value_info[:]
    why = _proof(model, freed, time_axes, b, lengths)
    if why:
        LOG.info("%s: exported with a fixed batch of %d; freeing it failed (%s): the stream graph keeps batch %d",
                 where, b, why, b)
        return None, why
    _patch(graph, b, values)
    LOG.info("%s: exported with a fixed batch of %d: batch made dynamic (%d shape target%s and constant%s "
             "rewritten), proved equal to the export at batch %d and row by row at batch %d", where, b, n,
             "" if n == 1 else "s", "" if n == 1 else "s", b, 2 * b)
    return freed, ""
