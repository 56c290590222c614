"""Attention masks measured, not guessed: evaluate a mask at long lengths from shapes alone, and classify it.

An attention mask (or additive bias) of a full-sequence graph is a tensor over query time x key time that is computed
from the sequence length only (``arange``, ``tril``, ``subsequent_chunk_mask``). :class:`MaskEvaluator` proves that
(every path from the mask back to the graph's inputs passes through ``Shape``/``Size``: the mask depends on shapes,
not on values) and evaluates the mask's subgraph at any length by feeding those ``Shape`` outputs the shapes the
measured stream facts predict (``size = rate * T + extra`` on the time axis), without running the model.

:func:`classify` reads the visible set ``V[i, j]`` (query ``i`` may attend key ``j``) at two or more lengths and
names its pattern:

* ``banded`` (sliding window ``W``): ``0 <= i - j < W``, a key cache of ``W - 1`` frames;
* ``chunked`` (block-causal, chunk ``C``, ``n`` left chunks; WeNet ``subsequent_chunk_mask``, NeMo/CosyVoice static
  chunks): ``j // C`` in ``[i // C - n, i // C]``, a key cache of ``n * C`` frames, a look-ahead of ``C - 1`` frames;
* ``causal`` (unlimited left context) and ``chunked`` with ``n`` unlimited: a stream would need a growing cache;
* ``full`` (every query sees every key: bidirectional);
* anything else: ``other``, described by what row 0 and the last row see.

Sources: WeNet ``wenet/utils/mask.py`` (``subsequent_chunk_mask``), NeMo ``conformer_encoder.py`` (``_create_masks``,
``att_context_size``), sonos/tract ``pulse/src/blockify.rs`` (block-diagonal and banded masks recognised from their
values), ONNX ``Shape``/``Size`` operators.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import first_line
from cosyedge.log import plural

onnx = lazy_import("onnx")

UNLIMITED = -1
"""int: ``n`` of a chunked pattern whose queries see every earlier chunk (and ``W`` of an unlimited causal one)."""

_RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


@dataclasses.dataclass(frozen=True)
class Pattern:
    """The visible set of an attention mask.

    Attributes:
        kind (str): ``"banded"``, ``"chunked"``, ``"causal"`` (banded with unlimited window), ``"full"``, ``"none"``
            (the mask hides nothing: a key padding mask of ones) or ``"other"``.
        window (int): ``banded``: keys ``i - window + 1 .. i + ahead`` (frames); :data:`UNLIMITED` for ``causal``.
        chunk (int): ``chunked``: chunk size ``C`` (frames).
        left (int): ``chunked``: left chunks ``n`` a query sees besides its own; :data:`UNLIMITED` for all.
        text (str): For ``other``: what the rows see (for the refusal).
        ahead (int): ``banded``: future frames every query sees (a band with look-ahead, e.g. NeMo's ``regular``
            att_context_size ``[W - 1, A]``); 0 for a causal band.
    """

    kind: str
    window: int = 0
    chunk: int = 0
    left: int = 0
    text: str = ""
    ahead: int = 0

    @property
    def bounded(self) -> bool:
        """bool: a stream needs a fixed-size cache only (banded, or chunked with finite left chunks)."""
        return (self.kind == "banded") or (self.kind == "chunked" and self.left != UNLIMITED)

    @property
    def cache_frames(self) -> int:
        """int: key/value frames a stream keeps from earlier chunks (``W - 1`` banded, ``n * C`` chunked)."""
        if self.kind == "banded":
            return self.window - 1
        if self.kind == "chunked":
            return self.left * self.chunk
        raise ValueError(f"no finite cache for a {self.kind} mask")

    @property
    def lookahead_frames(self) -> int:
        """int: future frames a query sees (``C - 1`` for chunked, ``ahead`` for banded, else 0)."""
        return self.chunk - 1 if self.kind == "chunked" else self.ahead if self.kind == "banded" else 0

    def describe(self) -> str:
        """One phrase: ``banded causal, window 16 frames``, ``chunked, chunk 4 frames, 2 left chunks``..."""
        if self.kind == "banded" and self.ahead:
            return f"banded (sliding window of {plural(self.window, 'frame')} and {plural(self.ahead, 'frame')} ahead)"
        if self.kind == "banded":
            return f"banded causal (sliding window of {plural(self.window, 'frame')})"
        if self.kind == "causal":
            ahead = f" and {plural(self.ahead, 'frame')} ahead" if self.ahead else ""
            return "causal with unlimited left context" + ahead
        if self.kind == "chunked":
            left = ("every earlier chunk" if self.left == UNLIMITED
                    else f"{self.left} left chunk{'s' * (self.left != 1)}")
            return f"chunked (chunks of {plural(self.chunk, 'frame')}, {left})"
        if self.kind == "full":
            return "full (bidirectional: every frame sees the whole sequence)"
        if self.kind == "none":
            return "no masking"
        return f"neither banded nor chunked ({self.text})"

    def bound(self, window: int) -> "Pattern":
        """This pattern limited to ``window`` frames of left context (``--attention-window``): causal -> banded
        ``window``; chunked with unlimited left chunks -> ``window // C`` left chunks, at least one; any other pattern
        as it is."""
        if self.kind == "causal":
            return Pattern("banded", window=window, ahead=self.ahead)
        if self.kind == "chunked" and self.left == UNLIMITED:
            return Pattern("chunked", chunk=self.chunk, left=max(1, window // self.chunk))
        return self

    def visible(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """bool array: whether query positions ``q`` see key positions ``k`` (broadcast; frames from the start)."""
        if self.kind == "none" or self.kind == "full":
            return np.ones(np.broadcast(q, k).shape, dtype=bool)
        if self.kind in ("banded", "causal"):
            d = q - k
            return (d >= -self.ahead) & ((d < self.window) if self.window != UNLIMITED else True)
        if self.kind == "chunked":
            cq, ck = q // self.chunk, k // self.chunk
            return (ck <= cq) & ((ck >= cq - self.left) if self.left != UNLIMITED else True)
        raise ValueError(self.kind)


def window_rounding(original: Pattern, window: int) -> str:
    """What ``--attention-window window`` becomes on ``original`` when it is not exactly ``window`` frames (str, "" when
    it is): a chunked attention keeps whole chunks of left context, ``max(1, window // C)`` of them, so the window is
    rounded down to a multiple of the chunk, or up to one chunk. E.g. ``"attention window rounded up from 4 to 8
    frames (a whole number of chunks of 8 frames, at least one: 1 left chunk)"``."""
    if original.kind != "chunked" or original.left != UNLIMITED or original.chunk < 1:
        return ""
    got = original.bound(int(window))
    frames = got.left * got.chunk
    if frames == int(window):
        return ""
    way = "up" if frames > int(window) else "down"
    return (f"attention window rounded {way} from {int(window)} to {frames} frames (a whole number of chunks of "
            f"{original.chunk} frames, at least one: {got.left} left chunk{'s' * (got.left != 1)})")


def window_for_cache(original: Pattern, cache_frames: int) -> int:
    """The longest ``--attention-window`` (frames, int) whose bound of ``original`` (an unlimited causal or chunked
    pattern, :meth:`Pattern.bound`) keeps at most ``cache_frames`` frames of keys: ``cache + 1`` for causal (a window of
    ``W`` caches ``W - 1``), whole chunks for chunked; 0 when none fits (or ``original`` is not unlimited)."""
    cache_frames = int(cache_frames)
    if original.kind == "causal":
        return max(0, cache_frames + 1)
    if original.kind == "chunked" and original.left == UNLIMITED and original.chunk > 0:
        return (cache_frames // original.chunk) * original.chunk
    return 0


def window_for_reach(original: Pattern, frames: int) -> int:
    """The longest ``--attention-window`` (frames, int) whose bound of ``original`` sees keys at most ``frames - 1``
    frames away (a relative-position table that holds relative positions up to +-(frames - 1)): ``frames`` for causal
    (a window of ``W`` reaches ``W - 1`` back), for chunked ``n`` left chunks reach ``(n + 1) C - 1`` back; 0 when none
    fits."""
    frames = int(frames)
    if original.kind == "causal":
        return max(0, frames) if original.ahead <= frames - 1 else 0
    if original.kind == "chunked" and original.left == UNLIMITED and original.chunk > 0:
        return max(0, frames // original.chunk - 1) * original.chunk
    return 0


def _rows(v: np.ndarray, i: int) -> str:
    idx = np.flatnonzero(v[i])
    if not idx.size:
        return f"row {i} sees no key"
    if idx.size == idx[-1] - idx[0] + 1:
        return f"row {i} sees keys {idx[0]}..{idx[-1]}"
    return f"row {i} sees {idx.size} scattered keys"


def classify_one(v: np.ndarray) -> Pattern:
    """Classify one visible matrix ``v`` (bool (F, F), query x key) at one length (module doc)."""
    n = v.shape[0]
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    if v.all():
        return Pattern("none") if n > 1 else Pattern("full")
    text = f"{_rows(v, 0)}, {_rows(v, n - 1)} of {n}"
    if not v[np.arange(n), np.arange(n)].all():
        return Pattern("other", text=f"a query does not see its own frame: {text}")
    if not (v & (j > i)).any():  # causal
        lo = np.argmax(v, axis=1)  # first visible key per row
        if (lo == 0).all():
            return Pattern("causal", window=UNLIMITED) if np.array_equal(v, j <= i) else Pattern("other", text=text)
        w = int((np.arange(n) - lo).max()) + 1
        p = Pattern("banded", window=w)
        return p if np.array_equal(v, p.visible(i, j)) else Pattern("other", text=text)
    lo, hi = np.argmax(v, axis=1), n - 1 - np.argmax(v[:, ::-1], axis=1)  # first and last visible key per row
    ahead = int((hi - np.arange(n)).max())
    p = Pattern("banded", window=int((np.arange(n) - lo).max()) + 1, ahead=ahead) if lo[-1] > 0 else \
        Pattern("causal", window=UNLIMITED, ahead=ahead)  # keys i - W + 1 (or 0) .. i + A: a band that looks ahead
    if np.array_equal(v, p.visible(i, j)):
        return p
    c = int(np.flatnonzero(v[0]).max()) + 1
    if c >= n:
        return Pattern("other", text=text)
    lo = np.argmax(v, axis=1)
    if (lo == 0).all():
        cands = [Pattern("chunked", chunk=c, left=UNLIMITED)]
    else:
        lefts = {(r // c * c - int(lo[r])) // c for r in range(n) if lo[r] > 0}
        cands = [Pattern("chunked", chunk=c, left=x) for x in sorted(lefts)]
    for p in cands:
        if np.array_equal(v, p.visible(i, j)):
            return p
    return Pattern("other", text=text)


def classify(views: list[np.ndarray]) -> Pattern:
    """Classify the visible set measured at several lengths (list of bool (F, F)), shortest first: the pattern read at
    the longest length must reproduce every shorter one (a window of 800 frames looks causal at 701 frames and is
    banded at 1103; a window of T / 2, or chunks counted from the sequence's end, reproduce nothing).

    Returns:
        Pattern: the pattern (``other`` with the reason when the lengths disagree).
    """
    last = classify_one(views[-1])
    if last.kind == "other":
        return last
    for v in views[:-1]:
        n = v.shape[0]
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        if not np.array_equal(v, np.broadcast_to(last.visible(i, j), v.shape)):
            return Pattern("other", text=f"the pattern changes with the sequence length: {classify_one(v).describe()} "
                                         f"at {n} frames; {last.describe()} at {views[-1].shape[0]} frames")
    return last


class MaskEvaluator:
    """Evaluate tensors of a full-sequence graph that depend on shapes only, at any length.

    Args:
        model (onnx.ModelProto): The constant-folded full-sequence graph.
        facts (dict[str, TimeFact]): Measured stream facts (:func:`cosyedge.surgery.facts.measure`), with
            :attr:`TimeFact.axes2` for tensors over time x time.
        t1 (int): The first probe length (input ticks) the facts were measured at.
        batch_axes (dict[str, int] | None): Batch axis by tensor name (to evaluate at a batch of more than 1).
    """

    def __init__(self, model: Any, facts: dict, t1: int, batch_axes: dict | None = None):
        self.batch_axes = batch_axes or {}
        self.model = model
        self.facts = facts
        self.t1 = t1
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.inits = {i.name for i in model.graph.initializer}
        self.graph_inputs = {i.name for i in model.graph.input}
        self._why: dict[str, str] = {}

    def data_path(self, name: str) -> str:
        """"" when tensor ``name`` depends on shapes only; else the graph input (or random op) its value comes from
        (a path that does not pass through ``Shape``/``Size``). One pass over the graph in topological order, on
        first use."""
        if not self._why:
            why = {i: f"graph input '{i}'" for i in self.graph_inputs if i not in self.inits}
            for node in self.model.graph.node:
                if node.op_type in ("Shape", "Size"):
                    w = ""
                elif node.op_type in _RANDOM:
                    w = f"{node.op_type} node '{node.name}'"
                else:
                    w = next((why[i] for i in node.input if why.get(i)), "")
                for o in node.output:
                    why[o] = w
            self._why = why
        return self._why.get(name, "")

    def shape_at(self, name: str, ticks: int, batch: int = 1) -> list[int]:
        """The shape (list[int]) tensor ``name`` has at ``ticks`` input ticks and ``batch`` streams, from its measured
        fact (and batch axis)."""
        f = self.facts[name]
        shape = list(f.shape1)
        for ax in (f.axes2 or ((f.axis,) if f.axis is not None else ())):
            shape[ax] = int(f.rate * ticks + f.extra)
        if batch != 1 and name in self.batch_axes:
            shape[self.batch_axes[name]] *= batch
        return shape

    def evaluate(self, names: list[str], ticks: int, batch: int = 1) -> dict[str, np.ndarray]:
        """Values of ``names`` (each shape-only: :meth:`data_path` is "") at ``ticks`` input ticks and ``batch``
        streams.

        Raises:
            RuntimeError: ONNX Runtime cannot run the mask's subgraph (its first line).
        """
        need, stack = set(), list(names)
        while stack:
            t = stack.pop()
            node = self.producer.get(t)
            if node is None or id(node) in need:
                continue
            need.add(id(node))
            if node.op_type not in ("Shape", "Size"):
                stack.extend(node.input)
        feeds, nodes = {}, []
        for node in self.model.graph.node:
            if id(node) not in need:
                continue
            if node.op_type in ("Shape", "Size"):
                shape = self.shape_at(node.input[0], ticks, batch)
                if node.op_type == "Size":
                    feeds[node.output[0]] = np.asarray(math.prod(shape), dtype=np.int64)
                else:
                    a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
                    r = len(shape)
                    s, e = int(a.get("start", 0)), int(a.get("end", r))
                    s, e = [max(0, min(r, x + r if x < 0 else x)) for x in (s, e)]
                    feeds[node.output[0]] = np.asarray(shape[s:e], dtype=np.int64)
            else:
                nodes.append(node)
        used = {i for n in nodes for i in n.input}
        g = onnx.helper.make_graph(
            nodes, "mask",
            [onnx.helper.make_tensor_value_info(k, onnx.TensorProto.INT64, list(v.shape)) for k, v in feeds.items()],
            [onnx.ValueInfoProto(name=n) for n in names],
            [i for i in self.model.graph.initializer if i.name in used])
        m = onnx.helper.make_model(g, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        from cosyedge.runtime.ort import session_from_onnx

        try:
            sess = session_from_onnx(m, threads=1, inter_threads=1, optimize=False, log_severity=4)
            vals = sess.run(list(names), feeds)
        except Exception as err:
            raise RuntimeError(first_line(err)) from None
        return dict(zip(names, vals))
