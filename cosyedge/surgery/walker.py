"""The streamify walker: visit every node once, in topological order, and ask its op's rule.

The walker carries the **delay** of every streaming tensor: stream frame ``k`` of tensor ``x`` holds full-
sequence frame ``k - delay(x)`` (frames of ``x``'s own time axis; the axis and rate come from
:mod:`cosyedge.surgery.facts`). A delay is negative after a causal left pad that a following Conv has not
absorbed yet; it is ``None`` for a tensor that is constant along time (``ConstantOfShape`` over a computed
shape). Rules use the services of :class:`Walker` to rewrite a node:

* :meth:`Walker.add_state`: ``Concat(state_in, x)`` on the time axis, ``state_out`` = the last P frames
  (causal context, delay lines); states are stored batch-first;
* :meth:`Walker.delay_line`: ``x`` late by D more frames (re-aligning paths of different delay);
* :meth:`Walker.align`: give every streaming input of a node the same delay (at least ``minimum``);
* :meth:`Walker.mask_preroll`: zero the frames of ``x`` that come before the stream's start (frames
  ``< delay``: a full-sequence graph sees zeros or nothing there), with one saturating tick counter state.
* :meth:`Walker.before_frame` / :meth:`Walker.select`: the same counter as a bool flag (stream frames before a given
  frame) and a Where for any dtype (the stream's first frames of :mod:`cosyedge.surgery.rules.start`).

Blockers are collected, so one run names every node that cannot stream.

Source: sonos/tract ``pulse/src/model.rs`` (pulsify walk), ``pulse/src/ops/delay.rs`` (delay lines),
``pulse/src/ops/array/pad.rs`` (PulsePad: the stream's start is overwritten with the pad value).

About 520 lines: nearly all of it is the one :class:`Walker`, whose services share the walk's
state (delays, new nodes, states, blockers); the op rules already live in :mod:`cosyedge.surgery.rules`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM, BOOKKEEPING, StateSpec
from cosyedge.log import plural
from cosyedge.surgery.facts import TimeFact
from cosyedge.surgery.rules import INT64_MAX, RULES, Blocker, load_all

gs = lazy_import("onnx_graphsurgeon")

COUNTER = "counter"
EDGE = "edge"
"""str: :meth:`Walker._lead_values` of frames that copy the sequence's first frame (a left edge / replicate pad)."""


def node_desc(node: Any) -> str:
    """'Op node 'name'' for messages."""
    return f"{node.op} node '{node.name}'"


def common_delay_ticks(delays: list[tuple[Fraction, int]], tick_step: Fraction = Fraction(1)) -> Fraction:
    """The smallest common delay (input ticks, Fraction >= 0) of outputs that must be ``delays`` frames late at
    least, each given as (frames per tick, frames): a whole number of frames of every output and a multiple of
    ``tick_step``. Those delays form the lattice ``unit * Z``, ``unit`` the lcm of every ``1 / rate`` and
    ``tick_step`` (lcm of fractions: lcm of the numerators over the gcd of the denominators).

    Example: one output at 256 frames per tick, 1032 frames late, ``tick_step`` 1/256: 1032/256 ticks (not 5).
    """
    gens = [1 / Fraction(r) for r, _ in delays] + [Fraction(tick_step)]
    unit = Fraction(math.lcm(*(g.numerator for g in gens)), math.gcd(*(g.denominator for g in gens)))
    ticks = max([Fraction(d) / Fraction(r) for r, d in delays] + [Fraction(0)])
    return math.ceil(ticks / unit) * unit


class Walker:
    """Rewrites a constant-folded, sorted full-sequence graph in place into its streaming form.

    Args:
        graph (gs.Graph): The graph (modified in place).
        facts (dict[str, TimeFact]): Measured stream facts by tensor name (:func:`facts.measure`).
        values (tuple[dict, dict]): Tensor values of the two probe runs (for rules that must know a value:
            zero initial states, computed pad sizes, the frames a left pad adds).
        batch_axes (dict[str, int]): Batch axis by tensor name where a batch-2 probe found it.
        tick_source (tuple[str, int]): (graph input name, its time axis): the chunk length in ticks.
        model (onnx.ModelProto | None): The same graph as a model (attention masks are evaluated from it,
            :class:`cosyedge.surgery.masks.MaskEvaluator`); None: no attention rules.
        t1 (int): The first probe length of ``facts`` (ticks).
        attention_window (int | None): ``--attention-window``: bound attention with unlimited left context to this
            many frames (:mod:`cosyedge.surgery.rules.attention`).
        fixed_batch (int | None): The batch of an export whose fixed batch could not be freed
            (:mod:`cosyedge.surgery.batch`): its stream graph runs that batch only, every row from the same start, so
            positions meet its tensors as one stream; None for a batch-dynamic graph.
        attention_per_frame (bool): ``--attention-per-frame``: stream chunked attention at any hop, each query waiting
            ``chunk - 1`` frames for the end of its chunk (a delay), instead of requiring a hop of whole chunks.
    """

    def __init__(self, graph: Any, facts: dict[str, TimeFact], values: dict[str, np.ndarray],
                 batch_axes: dict[str, int], tick_source: tuple[str, int], model: Any = None, t1: int = 0,
                 attention_window: int | None = None, fixed_batch: int | None = None,
                 attention_per_frame: bool = False):
        load_all()
        from cosyedge.surgery.masks import MaskEvaluator

        self.masks = MaskEvaluator(model, facts, t1, batch_axes) if model is not None else None
        self.attention_window = attention_window
        self.fixed_batch = fixed_batch  # the export's batch where it could not be freed (surgery/batch.py), else None
        self._length_dep: dict[str, str] = {}  # length_dependence() by tensor name
        self.attention_per_frame = bool(attention_per_frame)
        self.attn: dict[str, Any] = {}  # tensors over query x key time (rules/attention.Att)
        self.attention_sites: list[Any] = []
        self.partners: dict[str, Any] = {}  # second score nodes of a site (rules/attention.py)
        self.strides: list[tuple[int, str]] = []  # (ticks, why): chunks must be a multiple of each
        self.mask_only: set[str] = set()
        self.relative: dict[str, Any] = {}  # relative-position terms by tensor name (rules/relative.py)
        self.relative_nodes: set[str] = set()  # nodes of those terms the walk leaves alone
        self.max_ticks: tuple[int, str] | None = None  # (ticks, why): the longest stream positions can be counted for
        # (ticks, why, frames): the longest input the full-sequence graph runs at where the stream itself has no such
        # limit (a relative-position table of fixed rows): it bounds only the proof (streamify.prove_stream)
        self.full_max_ticks: tuple[int, str, int] | None = None
        self.graph = graph
        self.facts = facts
        self.values, self.values2 = values
        self.batch_axes = batch_axes
        self.tick_source = tick_source
        self.delay: dict[str, int | None] = {}
        self.states: list[StateSpec] = []
        self.blockers: list[str] = []
        self._state_vars: list[tuple[Any, Any]] = []  # (state_in, state_out) Variables, creation order
        self._uid = 0
        self._delayed: dict[tuple[str, int], Any] = {}
        self._masked: dict[str, Any] = {}
        self._counter_in = None
        self._counter_max = 0
        self.lifted: set[str] = set()  # positions: chunk shape (N, *full shape) (rules/positions.py)
        self._positions: dict[Fraction, Any] = {}
        self._ticks = None
        self._source_shape = None
        self._source_dims: dict[int, Any] = {}
        self.rf_ticks = 0

    # ------------------------------------------------------------------ facts
    def fact(self, t: Any) -> TimeFact:
        """The :class:`TimeFact` of tensor ``t`` (an empty one for constants and new tensors)."""
        f = self.facts.get(t.name)
        if f is None:
            shape = tuple(np.asarray(t.values).shape) if isinstance(t, gs.Constant) else ()
            f = TimeFact(shape, shape)
        return f

    def is_stream(self, t: Any) -> bool:
        """bool: tensor ``t`` has a time axis."""
        return bool(t.name) and self.fact(t).is_stream

    def delay_of(self, t: Any) -> int | None:
        """Delay (frames, int; None: constant along time) of streaming tensor ``t``."""
        return self.delay.get(t.name, 0)

    def set_delay(self, t: Any, d: int | None) -> None:
        """Record the delay ``d`` (frames) of tensor ``t``."""
        self.delay[t.name] = d

    def value(self, t: Any) -> np.ndarray | None:
        """Value of ``t`` in the first probe run (or its constant value), else None."""
        if isinstance(t, gs.Constant):
            return np.asarray(t.values)
        if len(t.inputs) == 1 and t.inputs[0].op == "Constant":
            return np.asarray(t.inputs[0].attrs["value"].values)
        return self.values.get(t.name)

    def value2(self, t: Any) -> np.ndarray | None:
        """Value of ``t`` in the second probe run (another length, other seeded inputs), else None; a constant's
        value."""
        if isinstance(t, gs.Constant) or (len(t.inputs) == 1 and t.inputs[0].op == "Constant"):
            return self.value(t)
        return self.values2.get(t.name)

    def dtype_of(self, t: Any) -> Any:
        """numpy dtype of tensor ``t``: its declared one, else its value's in the probe run, else float32 (a float16
        model's intermediate tensors carry no type after the export's shapes are cleared)."""
        if t.dtype is not None:
            return t.dtype
        v = self.value(t)
        return np.asarray(v).dtype if v is not None else np.float32

    def batch_axis(self, t: Any) -> int:
        """Batch axis of ``t`` (int): from the batch probe, else 0."""
        return self.batch_axes.get(t.name, 0)

    def stream_inputs(self, node: Any) -> list[int]:
        """Indices (list[int]) of ``node``'s inputs that stream."""
        return [i for i, t in enumerate(node.inputs) if self.is_stream(t)]

    # ------------------------------------------------------------------ graph building
    def name(self, base: str) -> str:
        """A fresh, unique tensor/node name starting with ``base``."""
        self._uid += 1
        return f"{base}/s{self._uid}"

    def const(self, values: Any, base: str = "c", dtype: Any = np.int64) -> Any:
        """A new gs.Constant holding ``values`` as ``dtype``."""
        return gs.Constant(self.name(base), np.asarray(values, dtype=dtype))

    def op(self, op: str, inputs: list, base: str, attrs: dict | None = None, n_out: int = 1,
           dtype: Any = None, like: Any = None) -> Any:
        """Add node ``op`` and return its output Variable (or list when ``n_out`` > 1); when ``like`` is
        a streaming tensor, the outputs get its fact (same axis and rate)."""
        outs = [gs.Variable(self.name(f"{base}_{op.lower()}"), dtype=dtype) for _ in range(n_out)]
        self.graph.layer(op=op, name=self.name(f"{base}/{op}"), inputs=inputs, outputs=outs, attrs=attrs or {})
        if like is not None and like.name in self.facts:
            for o in outs:
                self.facts[o.name] = self.facts[like.name]
                if like.name in self.batch_axes:
                    self.batch_axes[o.name] = self.batch_axes[like.name]
        return outs[0] if n_out == 1 else outs

    @property
    def opset(self) -> int:
        """int: the default-domain opset of the graph."""
        return int(self.graph.opset or 13)

    def unsqueeze(self, x: Any, axes: list[int], base: str, squeeze: bool = False) -> Any:
        """Unsqueeze (or Squeeze) ``x`` at ``axes``: axes as an input from opset 13, an attribute before."""
        op = "Squeeze" if squeeze else "Unsqueeze"
        if self.opset >= 13:
            return self.op(op, [x, self.const(list(axes))], base)
        return self.op(op, [x], base, {"axes": list(axes)})

    def time_slice(self, x: Any, start: int, end: int, axis: int, base: str, out: Any = None) -> Any:
        """``x[start:end]`` along ``axis`` (Slice with int64 constants; ``end`` :data:`INT64_MAX` is "to the
        end"); written into ``out`` (a Variable, e.g. a state_out) when given, else a new tensor."""
        inputs = [x, self.const([start]), self.const([end]), self.const([axis])]
        if out is None:
            return self.op("Slice", inputs, base, like=x)
        self.graph.layer(op="Slice", name=self.name(f"{base}/Slice"), inputs=inputs, outputs=[out])
        return out

    # ------------------------------------------------------------------ states
    def _state_shape(self, x: Any, frames: int, axis: int) -> tuple[list, int]:
        f = self.fact(x)
        shape = list(f.shape1)
        b = self.batch_axis(x)
        if b == axis:
            raise Blocker(f"time axis {axis} is also the batch axis")
        shape[axis] = int(frames)
        shape[b] = BATCH_DIM
        return shape, b

    def new_state(self, shape: list, dtype: Any, kind: str, node: str, init: float = 0.0) -> tuple[Any, Any]:
        """Create a state pair with a batch-first ``shape`` (list, ``"N"`` at axis 0); returns the
        (state_in, state_out) Variables, named ``state_in.NN`` / ``state_out.NN`` when the walk ends.
        The caller produces ``state_out``."""
        i = len(self._state_vars)
        s_in = gs.Variable(f"__state_in_{i}", dtype=dtype, shape=list(shape))
        s_out = gs.Variable(f"__state_out_{i}", dtype=dtype, shape=list(shape))
        self.graph.inputs.append(s_in)
        self.graph.outputs.append(s_out)
        self._state_vars.append((s_in, s_out))
        self.states.append(StateSpec(input=s_in.name, output=s_out.name, shape=list(shape),
                                     dtype=np.dtype(dtype).name, node=node, init=float(init), kind=kind))
        return s_in, s_out

    def batch_fold(self, t: Any) -> int:
        """Streams folded into the batch axis of ``t`` per model stream (int): 1 normally; ``k`` when the model
        reshaped (N, k, ...) into (N k, ...) (per-channel or per-band processing in a dual-path model)."""
        if t.name not in self.batch_axes:
            return 1
        return int(self.fact(t).shape1[self.batch_axis(t)])

    def add_state(self, x: Any, frames: int, axis: int, kind: str, node: str) -> Any:
        """Carry the last ``frames`` frames of ``x`` across chunks: returns ``cat = Concat(state, x)`` on
        ``axis`` (``frames`` + chunk frames long); ``state_out = cat[-frames:]``. The state is stored with
        the batch axis first (Transposes are added when ``x``'s batch axis is not 0; a batch that folds ``k``
        sequences per stream is stored (N, k, ...) and reshaped)."""
        shape, b = self._state_shape(x, frames, axis)
        rate = self.fact(x).rate
        if rate:
            self.rf_ticks = max(self.rf_ticks, math.ceil(Fraction(frames) / rate))
        if self.batch_fold(x) > 1:
            return self._add_folded_state(x, frames, axis, b, kind, node)
        perm = None
        if b != 0:
            perm = [b] + [i for i in range(len(shape)) if i != b]
            shape = [shape[i] for i in perm]
        dtype = self.dtype_of(x)
        s_in, s_out = self.new_state(shape, dtype, kind, node)
        src = self._lead_start(s_in, x, frames, axis, perm, node)
        if perm is not None:
            inv = [perm.index(i) for i in range(len(perm))]
            src = self.op("Transpose", [src], f"{node}/state", {"perm": inv})
        cat = self.op("Concat", [src, x], f"{node}/state", {"axis": axis}, like=x)
        if perm is None:
            self.time_slice(cat, -frames, INT64_MAX, axis, f"{node}/state_slice", out=s_out)
        else:
            tail = self.time_slice(cat, -frames, INT64_MAX, axis, f"{node}/state")
            self.graph.layer(op="Transpose", name=self.name(f"{node}/state_out"), inputs=[tail], outputs=[s_out],
                             attrs={"perm": perm})
        return cat

    def _add_folded_state(self, x: Any, frames: int, axis: int, b: int, kind: str, node: str) -> Any:
        """:meth:`add_state` for a batch axis that holds N x k sequences: the state is (N, k, other axes)."""
        k = self.batch_fold(x)
        full = list(self.fact(x).shape1)
        full[axis] = int(frames)
        others = [i for i in range(len(full)) if i != b]
        if self._lead_values(x, frames, axis) is not None:
            raise Blocker(f"the frames a left pad adds before '{x.name}' are not zeros and its batch folds {k} "
                          "sequences per stream (not supported)")
        dtype = self.dtype_of(x)
        s_in, s_out = self.new_state([BATCH_DIM, k] + [full[i] for i in others], dtype, kind, node)
        src = self.op("Reshape", [s_in, self.const([-1] + [full[i] for i in others])], f"{node}/state")
        order = [b] + others  # batch-first axis j is axis order[j] of x
        if b != 0:
            src = self.op("Transpose", [src], f"{node}/state", {"perm": [order.index(i) for i in range(len(order))]})
        cat = self.op("Concat", [src, x], f"{node}/state", {"axis": axis}, like=x)
        tail = self.time_slice(cat, -frames, INT64_MAX, axis, f"{node}/state")
        if b != 0:
            tail = self.op("Transpose", [tail], f"{node}/state", {"perm": order})
        self.graph.layer(op="Reshape", name=self.name(f"{node}/state_out"),
                         inputs=[tail, self.const([-1, k] + [full[i] for i in others])], outputs=[s_out])
        return cat

    def _lead_values(self, x: Any, frames: int, axis: int) -> np.ndarray | None:
        """The frames a left pad put before the sequence that a state of ``frames`` frames on early ``x``
        (delay ``d < 0``) must start with: its last ``min(frames, -d)`` frames, as the full graph computes them
        (the same in both probe runs); :data:`EDGE` when in both probe runs they are copies of the frame after them
        (the sequence's first frame: an edge pad); None when ``x`` is not early or they are zeros.

        Raises:
            Blocker: they cannot be found or depend on the data.
        """
        d = self.delay_of(x)
        if d is None or d >= 0:
            return None
        n = min(frames, -d)
        v1, v2 = self.values.get(x.name), self.values2.get(x.name)
        if v1 is None or v2 is None:
            raise Blocker(f"the {plural(-d, 'frame')} a left pad adds before '{x.name}' cannot be traced to constants")
        lead1 = np.take(v1, np.arange(-d - n, -d), axis=axis)
        lead2 = np.take(v2, np.arange(-d - n, -d), axis=axis)
        if lead1.shape != lead2.shape or not np.array_equal(lead1, lead2):
            if all(np.array_equal(np.take(v, np.arange(-d - n, -d), axis=axis),
                                  np.broadcast_to(np.take(v, [-d], axis=axis), lead1.shape)) for v in (v1, v2)):
                return EDGE  # copies of the sequence's first frame (an edge / replicate pad)
            raise Blocker(f"the frames a left pad adds before '{x.name}' depend on the data (and are not copies of "
                          "its first frame)")
        return lead1 if np.any(lead1) else None

    def _lead_start(self, s_in: Any, x: Any, frames: int, axis: int, perm: list | None, node: str) -> Any:
        """The state to use in place of ``s_in`` for ``x``: when ``x`` is early (a left pad not yet absorbed),
        the state's last frames at the stream's start are the pad's frames as the ops since compute them
        (:meth:`_lead_values`); zeros when they are zeros. Added at the first chunk only (tick counter at 0),
        so every runtime can still start states at zeros."""
        lead1 = self._lead_values(x, frames, axis)
        if lead1 is None:
            return s_in
        if isinstance(lead1, str):
            return self._edge_start(s_in, x, frames, axis, perm, node)
        n = lead1.shape[axis]
        shape, _ = self._state_shape(x, frames, axis)
        init = np.zeros([1 if d_ == BATCH_DIM else d_ for d_ in shape], dtype=lead1.dtype)
        idx = [slice(None)] * init.ndim
        idx[axis] = slice(frames - n, frames)
        b = self.batch_axis(x)
        init[tuple(idx)] = np.take(lead1, [0], axis=b) if lead1.shape[b] != 1 else lead1
        if perm is not None:
            init = np.transpose(init, perm)
        counter = self.counter(1, self.fact(x).rate)
        base = f"{node}/{BOOKKEEPING}_lead"
        first = self.op("Equal", [counter, self.const([[0.0]], dtype=np.float32)], base, dtype=bool)  # (N, 1)
        first = self.unsqueeze(first, list(range(2, init.ndim)), base) if init.ndim > 2 else first
        # Where, not s_in + first * init: any dtype (a bool or int state has no Mul/Add), and a state is zeros there
        # (ONNX Runtime has no bool Where: Or(And(first, init), s_in))
        if init.dtype == bool:
            return self.op("Or", [self.op("And", [first, self.const(init, dtype=bool)], base, dtype=bool), s_in],
                           base, dtype=bool)
        return self.op("Where", [first, self.const(init, dtype=init.dtype), s_in], base, dtype=init.dtype)

    def _edge_start(self, s_in: Any, x: Any, frames: int, axis: int, perm: list | None, node: str) -> Any:
        """:meth:`_lead_start` for an edge pad: at the first chunk (tick counter 0) the state's last ``min(frames,
        -delay)`` frames are copies of this chunk's first frame of ``x`` (the sequence's first frame: ``x`` is early by
        the pad, so its stream starts with it), the others zeros; later chunks keep ``s_in``."""
        n = min(frames, -self.delay_of(x))
        shape, _ = self._state_shape(x, frames, axis)
        where = np.zeros([1] * len(shape), dtype=bool).repeat(frames, axis=axis)
        idx = [slice(None)] * where.ndim
        idx[axis] = slice(frames - n, frames)
        where[tuple(idx)] = True
        first_frame = self.time_slice(x, 0, 1, axis, f"{node}/{BOOKKEEPING}_edge")
        if perm is not None:
            where = np.transpose(where, perm)
            first_frame = self.op("Transpose", [first_frame], f"{node}/{BOOKKEEPING}_edge", {"perm": perm})
        base = f"{node}/{BOOKKEEPING}_edge"
        counter = self.counter(1, self.fact(x).rate)
        first = self.op("Equal", [counter, self.const([[0.0]], dtype=np.float32)], base, dtype=bool)  # (N, 1)
        first = self.unsqueeze(first, list(range(2, where.ndim)), base) if where.ndim > 2 else first
        cond = self.op("And", [first, self.const(where, dtype=bool)], base, dtype=bool)
        return self.select(cond, first_frame, s_in, base, like=s_in)

    def delay_line(self, x: Any, frames: int, base: str) -> Any:
        """Return ``x`` late by ``frames`` (> 0) more frames: ``Concat(state, x)[:-frames]`` on its time axis,
        a state of ``frames`` frames (zeros at the stream's start). Cached per (tensor, frames)."""
        key = (x.name, frames)
        if key in self._delayed:
            return self._delayed[key]
        axis = self.fact(x).axis
        cat = self.add_state(x, frames, axis, "delay", f"{base}/delay{frames}")
        out = self.time_slice(cat, 0, -frames, axis, f"{base}/delay{frames}")
        d = self.delay_of(x)
        self.set_delay(out, None if d is None else d + frames)
        self._delayed[key] = out
        return out

    def align(self, node: Any, idxs: list[int], minimum: int | None = None) -> int | None:
        """Delay the streaming inputs ``idxs`` of ``node`` so they all have the same delay (the largest,
        at least ``minimum``); returns that delay (None when every one is constant along time). A negative
        delay (a tensor early after a left pad) may stay negative: per-frame ops compute the pad's frames
        like any other, and the state that finally absorbs them starts with their values (:meth:`add_state`).

        Raises:
            Blocker: inputs of different rates (frames per tick) meet in one node.
        """
        ds = {i: self.delay_of(node.inputs[i]) for i in idxs}
        known = [d for d in ds.values() if d is not None]
        if not known:
            return None
        rates = {self.fact(node.inputs[i]).rate for i in idxs if ds[i] is not None}
        if len(rates) > 1:
            raise Blocker(f"inputs at different frame rates ({sorted(str(r) for r in rates)} frames per tick) meet")
        target = max(known + ([minimum] if minimum is not None else []))
        for i, d in ds.items():
            if d is not None and d < target:
                node.inputs[i] = self.delay_line(node.inputs[i], target - d, node.name)
        return target

    # ------------------------------------------------------------------ stream start
    def source_shape(self) -> Any:
        """int64 (rank,): Shape of the tick source input in this chunk (built once, shared)."""
        if self._source_shape is None:
            name, _ = self.tick_source
            src = next(t for t in self.graph.inputs if t.name == name)
            self._source_shape = self.op("Shape", [src], f"{BOOKKEEPING}_source")
        return self._source_shape

    def _source_dim(self, axis: int) -> Any:
        """int64 (1,): axis ``axis`` of the tick source's shape in this chunk (built once per axis)."""
        if axis not in self._source_dims:
            self._source_dims[axis] = self.op("Gather", [self.source_shape(), self.const([axis])],
                                              f"{BOOKKEEPING}_source", {"axis": 0})
        return self._source_dims[axis]

    def ticks(self) -> Any:
        """Float32 scalar-like tensor (1,): input ticks in this chunk (time length of the tick source)."""
        if self._ticks is None:
            self._ticks = self.op("Cast", [self._source_dim(self.tick_source[1])], f"{BOOKKEEPING}_ticks",
                                  {"to": 1}, dtype=np.float32)
        return self._ticks

    def counter(self, delay: int, rate: Fraction) -> Any:
        """The tick counter state_in (float32 (N, 1): input ticks streamed so far), created on first use; it
        saturates once past ``delay`` frames at ``rate`` frames per tick (and every other user's)."""
        if self._counter_in is None:
            self._counter_in, _ = self.new_state([BATCH_DIM, 1], np.float32, COUNTER, "stream start")
        self._counter_max = max(self._counter_max, math.ceil(Fraction(delay) / rate))
        return self._counter_in

    def position_counter(self, rate: Fraction) -> Any:
        """The position counter state_in of time axes at ``rate`` frames per tick (int64 (N, 1): frames streamed so
        far by each stream, zeros at its start, kind ``"position"``), created on first use with its update
        ``state_out = state_in + this chunk's frames`` (it does not saturate)."""
        from cosyedge.surgery.rules.positions import POSITION

        if rate not in self._positions:
            s_in, s_out = self.new_state([BATCH_DIM, 1], np.int64, POSITION, f"positions at {rate} frames per tick")
            base = f"{BOOKKEEPING}_positions"
            self.graph.layer(op="Add", name=self.name(f"{base}/Add"),
                             inputs=[s_in, self.frames_tensor(rate, base)], outputs=[s_out])
            self._positions[rate] = s_in
        return self._positions[rate]

    def stream_sizes(self, sizes: Any, out: Any, base: str) -> Any:
        """A shape vector for the chunk graph in place of ``sizes`` (a shape computed from the sequence length,
        e.g. ``view(-1, 1, time)``): every entry as in the full graph except the entry of ``out``'s time axis,
        which becomes this chunk's frames of ``out`` (ticks x frames per tick). The full graph's value there
        counts the sequence's frames, edge frames included, which a chunk does not have.

        Raises:
            Blocker: ``sizes`` is not a 1-D shape, or an entry other than time also changes with the length.
        """
        fs, fo = self.fact(sizes), self.fact(out)
        v1, v2 = fs.values1, fs.values2
        if v1 is None or v1.ndim != 1 or len(v1) != len(fo.shape1):
            raise Blocker("its shape is computed from the sequence length in a form streamify cannot follow")
        t = fo.axis
        if any(v1[i] != v2[i] for i in range(len(v1)) if i != t):
            raise Blocker("its shape changes with the sequence length on an axis other than time")
        b = self.batch_axis(out) if out.name in self.batch_axes or v1[0] == 1 else None
        parts = []
        for i, v in enumerate(v1.tolist()):
            if i == t:
                frames = self.frames_tensor(fo.rate, base)
                if out.name in self.batch_axes and b == t:  # batch folded into time (N x frames: per-frame RNNs)
                    frames = self.op("Mul", [frames, self.batch_tensor(base)], base)
                parts.append(frames)
            elif i == b and v != -1:  # the batch: this chunk's streams (the probes ran batch 1) x what it folds
                n = self.batch_tensor(base)
                parts.append(n if v == 1 else self.op("Mul", [n, self.const([v])], base))
            else:
                parts.append(self.const([v]))
        return self.op("Concat", parts, f"{base}/{BOOKKEEPING}_shape", {"axis": 0}, dtype=np.int64)

    def batch_tensor(self, base: str) -> Any:
        """int64 (1,): the batch size of this chunk (axis 0 of the tick source)."""
        return self._source_dim(0)

    def frames_tensor(self, rate: Fraction, base: str) -> Any:
        """int64 (1,): frames at ``rate`` frames per tick in this chunk (ticks x rate)."""
        n = self._source_dim(self.tick_source[1])
        b = f"{base}/{BOOKKEEPING}_frames"
        if rate.numerator != 1:
            n = self.op("Mul", [n, self.const([rate.numerator])], b)
        if rate.denominator != 1:
            n = self.op("Div", [n, self.const([rate.denominator])], b)
        return n

    def before_frame(self, x: Any, frames: int, base: str, keep: bool = False) -> Any:
        """bool, broadcastable to ``x``: True at the stream frames of ``x`` numbered ``< frames`` from the stream's
        start (``counter * rate + arange(chunk frames) < frames``; (N, frames) laid out on ``x``'s batch and time axes,
        size 1 elsewhere). The counter state holds the ticks streamed so far (float32 (N, 1)) and saturates past
        ``frames`` (and every other user's). ``keep``: float32 1.0 at the other frames and 0.0 there instead (a
        factor that zeroes the early frames: :meth:`mask_preroll` of a float tensor)."""
        f = self.fact(x)
        axis, b, rank = f.axis, self.batch_axis(x), len(f.shape1)
        counter = self.counter(frames, f.rate)
        base = f"{base}/{BOOKKEEPING}_mask"
        shape = self.op("Shape", [x], base)
        n = self.op("Gather", [shape, self.const([axis])], base, {"axis": 0})
        nf = self.op("Cast", [self.unsqueeze(n, [0], base, squeeze=True)], base, {"to": 1}, dtype=np.float32)
        rng = self.op("Range", [self.const(0.0, dtype=np.float32), nf, self.const(1.0, dtype=np.float32)], base,
                      dtype=np.float32)
        start = self.op("Mul", [counter, self.const([[float(f.rate)]], dtype=np.float32)], base)
        idx = self.op("Add", [start, rng], base)  # (N, frames)
        # Less exists in every opset (GreaterOrEqual only from 12)
        flag = self.op("Less", [idx, self.const([[float(frames)]], dtype=np.float32)], base,
                       dtype=None if keep else bool)
        if keep:
            flag = self.op("Cast", [self.op("Not", [flag], base)], base, {"to": 1}, dtype=np.float32)
        if b > axis:
            flag = self.op("Transpose", [flag], base, {"perm": [1, 0]}, dtype=None if keep else bool)
        others = [i for i in range(rank) if i not in (axis, b)]
        if others:
            flag = self.unsqueeze(flag, others, base)
        return flag

    def select(self, cond: Any, a: Any, b: Any, base: str, like: Any = None) -> Any:
        """``Where(cond, a, b)`` for any dtype of ``a`` and ``b`` (``like``: the tensor whose fact the result takes):
        ONNX Runtime has no bool Where, so a bool one is ``Or(And(cond, a), And(Not(cond), b))``."""
        dt = np.dtype(self.dtype_of(like if like is not None else a))
        if dt == bool:
            keep = self.op("And", [cond, a], base, dtype=bool)
            other = self.op("And", [self.op("Not", [cond], base, dtype=bool), b], base, dtype=bool)
            return self.op("Or", [keep, other], base, like=like, dtype=bool)
        return self.op("Where", [cond, a, b], base, like=like, dtype=dt)

    def mask_preroll(self, x: Any, base: str) -> Any:
        """Return ``x`` with its frames before the stream's start set to zero (False for a bool ``x``; stream frames
        ``< delay``): a float ``x`` times ``counter * rate + arange(frames) >= delay`` (as 0/1), any other dtype
        ``Where(... < delay, 0, x)`` (:meth:`before_frame`; a bool one as And/Or, :meth:`select`). No-op for
        delay <= 0."""
        d = self.delay_of(x)
        if d is None or d <= 0:
            return x
        if x.name in self._masked:
            return self._masked[x.name]
        dt = np.dtype(self.dtype_of(x))
        if dt.kind == "f":  # a float tensor times the kept frames (0/1): the graphs earlier releases wrote
            out = self.op("Mul", [x, self.before_frame(x, d, base, keep=True)], f"{base}/{BOOKKEEPING}_mask", like=x)
        else:
            early = self.before_frame(x, d, base)
            out = self.select(early, self.const(np.zeros((), dtype=dt), base, dtype=dt), x,
                              f"{base}/{BOOKKEEPING}_mask", like=x)
        self.set_delay(out, d)
        self._masked[x.name] = out
        return out

    def ticks_for_frames(self, rate: Fraction, frames: int) -> int:
        """The input length (ticks, int) that gives at least ``frames`` frames at ``rate`` frames per tick and a whole
        number of frames on every measured time axis (a multiple of every rate's denominator)."""
        q = math.lcm(1, *[f.rate.denominator for f in self.facts.values() if f.is_stream or f.axes2])
        t = math.ceil(Fraction(frames) / rate)
        return -(-t // q) * q

    def length_dependence(self, t: Any, rate: Fraction) -> str:
        """Why ``t`` (a tensor without a time axis, computed from shapes alone) is not the same at a chunk's length as
        at the whole sequence's, or "": the chunk graph computes it again from the chunk's shapes, so a value that
        depends on the length (``x / T``, ``(T % 2) * x``) would differ, even where the two probe lengths agree.
        Evaluated (:class:`cosyedge.surgery.masks.MaskEvaluator`) at chunks of 1, 2, 3, 4, 5, 7, 8 and 16 frames at
        ``rate``; lengths it cannot be evaluated at are skipped. Constants, data and unmeasured tensors give "".
        """
        if self.masks is None or isinstance(t, gs.Constant) or not t.name or self.is_stream(t):
            return ""
        if t.name in self._length_dep:
            return self._length_dep[t.name]
        why = ""
        v = self.value(t)
        if v is not None and not self.masks.data_path(t.name) and t.name in self.facts:
            for frames in (1, 2, 3, 4, 5, 7, 8, 16):
                try:
                    w = self.masks.evaluate([t.name], self.ticks_for_frames(rate or Fraction(1), frames))[t.name]
                except Exception:  # noqa: BLE001 - a length the graph cannot run at: nothing to compare
                    continue
                if np.shape(w) != np.shape(v) or not np.array_equal(w, v):
                    why = (f"'{t.name}', which is computed from the sequence length: "
                           f"{np.asarray(w).ravel()[:4].tolist()} at a chunk of {plural(frames, 'frame')}, "
                           f"{np.asarray(v).ravel()[:4].tolist()} on the whole sequence (a stream knows only its "
                           "chunk's length)")
                    break
        self._length_dep[t.name] = why
        return why

    def limit_ticks(self, ticks: int, why: str) -> None:
        """A stream may last at most ``ticks`` input ticks (an encoding table of that many rows); ``why`` names it."""
        if self.max_ticks is None or ticks < self.max_ticks[0]:
            self.max_ticks = (int(ticks), why)

    def limit_full_ticks(self, ticks: int, why: str, frames: int) -> None:
        """The full-sequence graph runs at most ``ticks`` input ticks (``frames`` frames at the attention's rate) though
        the stream runs longer: a relative-position table of fixed rows (``why`` names it, with its rows). Only the
        proof's input is bounded by it (:func:`cosyedge.surgery.streamify.prove_stream`)."""
        if self.full_max_ticks is None or ticks < self.full_max_ticks[0]:
            self.full_max_ticks = (int(ticks), why, int(frames))

    def require_stride(self, ticks: int, why: str) -> None:
        """Chunks must hold a multiple of ``ticks`` input ticks (a chunked attention's chunk); ``why`` names it."""
        if ticks > 1:
            self.strides.append((int(ticks), why))

    def _find_mask_only(self) -> None:
        """Nodes that only compute attention masks from shapes (:mod:`cosyedge.surgery.rules.attention` replaces
        the masks with the chunk's own): every output depends on shapes only and feeds only such nodes or ops that
        apply a mask to a tensor over query x key time (not a MatMul/Einsum operand, not an Attention op's queries,
        keys or values: positional projections of the keys are streamed). The walk leaves them as they are (they
        become dead)."""
        if self.masks is None or not any(f.axes2 for f in self.facts.values()):
            return
        from cosyedge.surgery.rules.attention import involved

        outs = {t.name for t in self.graph.outputs}
        for node in reversed(list(self.graph.nodes)):
            o = [t for t in node.outputs if t.name]
            if not o or any(t.name in outs for t in o) or any(self.masks.data_path(t.name) for t in o):
                continue
            uses = [(c, [i for i, x in enumerate(c.inputs) if x is t]) for t in o for c in t.outputs]
            if uses and all(c.name in self.mask_only or (
                    involved(c, self) and any(self.masks.data_path(t.name) for t in c.outputs if t.name)
                    and c.op not in ("MatMul", "Einsum") and not (c.op == "Attention" and min(idx) < 3))
                    for c, idx in uses):
                self.mask_only.add(node.name)

    def _uniform(self, node: Any) -> bool:
        """Rewrite a node whose one output runs over time, depends on shapes only and holds one value everywhere at
        every length (NeMo's pad mask ``arange(T) < new_full((N,), T)``: all true at full length) into ``Expand`` of
        that value to this chunk's shape. Its positions would otherwise be compared with the chunk's own length.

        Returns:
            bool: True when rewritten (no rule needed).
        """
        if self.masks is None or len(node.outputs) != 1 or not node.outputs[0].name:
            return False
        o = node.outputs[0]
        f = self.facts.get(o.name)
        if (f is None or not f.is_stream or f.extra < 0 or self.masks.data_path(o.name)
                or node.op in ("Range", "Shape", "Size", "ConstantOfShape")):
            return False
        v1, v2 = self.values.get(o.name), self.values2.get(o.name)
        if v1 is None or v2 is None or not np.size(v1) or v1.dtype != v2.dtype:
            return False
        first = np.asarray(v1).reshape(-1)[0]
        if not (np.all(v1 == first) and np.all(v2 == first)):
            return False
        try:
            # a long length, and batch 3: a batch coordinate (ScatterND index tuples) is 0 at the probes' batch 1
            v3 = self.masks.evaluate([o.name], self.ticks_for_frames(f.rate, 1103), batch=3)[o.name]
        except Exception:  # noqa: BLE001 - not evaluable from shapes alone: leave it to its rule
            return False
        if not np.all(v3 == first):
            return False
        base = f"{node.name}/{BOOKKEEPING}_uniform"
        parts = []
        b = self.batch_axes.get(o.name)
        for i, d in enumerate(f.shape1):
            if i == f.axis:
                n = self.frames_tensor(f.rate, base)
                if i == b:  # batch folded into time (N x frames: zeros for a per-frame RNN's initial state)
                    n = self.op("Mul", [n, self.batch_tensor(base)], base, dtype=np.int64)
                parts.append(n)
            elif i == b:
                n = self.batch_tensor(base)
                parts.append(n if int(d) == 1 else self.op("Mul", [n, self.const([int(d)])], base, dtype=np.int64))
            else:
                parts.append(self.const([int(d)]))
        shape = self.op("Concat", parts, base, {"axis": 0}, dtype=np.int64)
        value = self.const(np.full([1] * len(f.shape1), first, dtype=v1.dtype), base, dtype=v1.dtype)
        node.op, node.attrs = "Expand", {}
        node.inputs.clear()
        node.inputs.extend([value, shape])
        self.set_delay(o, None)
        return True

    # ------------------------------------------------------------------ walk
    def walk(self) -> None:
        """Visit every node of the graph (snapshot in topological order) and apply its rule; record
        blockers in :attr:`blockers` (one line each: node, op, reason)."""
        for name, f in self.facts.items():  # graph inputs that stream start at delay 0
            if f.is_stream:
                self.delay.setdefault(name, 0)
        from cosyedge.surgery.rules import relative

        relative.find(self)
        self._find_mask_only()
        from cosyedge.surgery.rules.attention import attend, involved

        blocked: list[tuple[Any, str]] = []
        for node in list(self.graph.nodes):
            if node.name in self.mask_only or node.name in self.relative_nodes:
                for o in node.outputs:
                    self.set_delay(o, None)
                continue
            if self._uniform(node):
                continue
            if self.masks is not None and involved(node, self):
                try:
                    attend(node, self)
                except Blocker as err:
                    blocked.append((node, f"{node_desc(node)}: {err}"))
                    self._fallback(node)
                continue
            outs_stream = [o for o in node.outputs if o.name and self.fact(o).is_stream]
            errors = [self.fact(o).error for o in node.outputs if o.name and self.fact(o).error]
            if errors:
                blocked.append((node, f"{node_desc(node)}: output {errors[0]}"))
                continue
            if not self.stream_inputs(node) and not outs_stream:
                continue  # static, or arithmetic on sizes (recomputed per chunk; its consumers decide)
            rule = RULES.get(node.op)
            if any(t.name in self.lifted for t in node.inputs):
                from cosyedge.surgery.rules.positions import lifted

                rule = lifted
            if rule is None:
                blocked.append((node, f"{node_desc(node)}: no streaming rule for {node.op} on a tensor with a time "
                                      "axis (closed world: the op is refused until it has one)"))
                self._fallback(node)
                continue
            try:
                rule(node, self)
            except Blocker as err:
                if self.shape_only(node):
                    continue
                blocked.append((node, f"{node_desc(node)}: {err}"))
                self._fallback(node)
        self._keep_live_blockers(blocked)

    def _keep_live_blockers(self, blocked: list[tuple[Any, str]]) -> None:
        """Record the walk's blockers (node, text) of nodes the chunk graph still computes: a node whose consumers were
        all rewritten not to read it (a Range whose ``arange(T) < length`` pad mask :meth:`_uniform` folded to a
        constant) blocks nothing."""
        outs = [t for t in self.graph.outputs]
        live, stack = set(), [t.inputs[0] for t in outs if t.inputs]
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(t.inputs[0] for t in n.inputs if t.inputs)
        self.blockers.extend(text for node, text in blocked if id(node) in live)

    def shape_only(self, node: Any) -> bool:
        """Stream a node whose rule refused it when its outputs' values are never used, only their shapes, and
        those shapes do not change with the sequence length (``zeros_like(x[..., :1])`` exports as Slice -> Shape
        -> ConstantOfShape: only the slice's shape, one frame at any length, is read). Every ``Shape``/``Size``
        consumer is rewritten to compute the full graph's shape from constants and this chunk's batch, so the
        node becomes dead and is dropped.

        Returns:
            bool: True when rewritten (the node needs no rule); False when some output streams, changes shape
            with the length, is a graph output, or has a consumer that reads its values.
        """
        outs = [o for o in node.outputs if o.name]
        graph_outs = {t.name for t in self.graph.outputs}
        for o in outs:
            f = self.facts.get(o.name)
            if f is None or f.is_stream or f.error or tuple(f.shape1) != tuple(f.shape2) or o.name in graph_outs:
                return False
            if any(c.op not in ("Shape", "Size") for c in o.outputs):
                return False
        base = f"{node.name}/{BOOKKEEPING}_shape"
        for o in outs:
            for c in list(o.outputs):
                parts = self._static_shape(o, base)
                if c.op == "Shape":
                    rank = len(parts)
                    start = int(c.attrs.get("start", 0))
                    end = int(c.attrs.get("end", rank))
                    start, end = [max(0, min(rank, i + rank if i < 0 else i)) for i in (start, end)]
                    parts = parts[start:end]
                    value = (self.op("Concat", parts, base, {"axis": 0}, dtype=np.int64) if parts else
                             self.const(np.zeros(0, dtype=np.int64)))
                else:  # Size: a scalar, the product of the shape
                    value = parts[0] if parts else self.const([1])
                    for p in parts[1:]:
                        value = self.op("Mul", [value, p], base, dtype=np.int64)
                    value = self.unsqueeze(value, [0], base, squeeze=True)
                c.op, c.attrs = "Identity", {}
                c.inputs.clear()
                c.inputs.append(value)
        for o in outs:
            self.set_delay(o, None)
        return True

    def _static_shape(self, t: Any, base: str) -> list:
        """The shape of ``t`` (a tensor that does not grow with the input) in this chunk, one int64 (1,) tensor
        per axis: the measured size, except the batch axis (where the batch probe found one), which is this
        chunk's batch times the sequences the axis folds per stream."""
        f = self.fact(t)
        b = self.batch_axes.get(t.name)
        parts = []
        for i, v in enumerate(f.shape1):
            if i == b:
                n = self.batch_tensor(base)
                parts.append(n if int(v) == 1 else self.op("Mul", [n, self.const([int(v)])], base, dtype=np.int64))
            else:
                parts.append(self.const([int(v)]))
        return parts

    def _fallback(self, node: Any) -> None:
        d = max([self.delay_of(node.inputs[i]) or 0 for i in self.stream_inputs(node)] or [0])
        for o in node.outputs:
            self.set_delay(o, d)

    def _drop_unused_positions(self) -> None:
        """Remove position counters nothing reads any more (their positions only fed a tensor that
        :meth:`_uniform` folded to a constant): after dropping dead nodes, a counter whose state_in feeds only its own
        update is no state a runtime should carry."""
        from cosyedge.surgery.rules.positions import POSITION

        self.graph.cleanup()
        for rate, s_in in list(self._positions.items()):
            users = list(s_in.outputs)
            if len(users) != 1 or users[0].outputs[0] not in [o for _, o in self._state_vars]:
                continue
            i = [a for a, _ in self._state_vars].index(s_in)
            s_out = self._state_vars[i][1]
            if self.states[i].kind != POSITION:
                continue
            users[0].outputs.clear()
            users[0].inputs.clear()
            self.graph.inputs.remove(s_in)
            self.graph.outputs.remove(s_out)
            del self._state_vars[i], self.states[i], self._positions[rate]
        self.graph.cleanup()

    def finish(self, output_names: list[str], tick_step: Fraction = Fraction(1)) -> dict[str, int]:
        """Align the graph outputs to one delay in ticks, add the counter update, name the states.

        The common delay is the smallest one at least every output's own delay that is a whole number of frames of
        every output and a multiple of ``tick_step`` ticks (one sample: ``1 / samples per tick``), not a whole
        number of ticks: a vocoder whose waveform is 1032 samples late at 256 samples per mel frame is 1032 samples
        late, not 5 frames (1280).

        Args:
            output_names (list[str]): The model's streaming outputs (graph outputs before the walk).
            tick_step (Fraction): The delay in ticks must be a multiple of this (1 for a waveform input; ``1 /
                samples per tick`` for feature frames, so that the contract's delay is whole samples).
        Returns:
            dict[str, int]: delay of each output in its own frames.
        """
        self._drop_unused_positions()
        outs = {t.name: t for t in self.graph.outputs}
        need = {}
        for name in output_names:
            t = outs[name]
            f, d = self.fact(t), self.delay_of(t)
            if name in self.lifted:
                self.blockers.append(f"graph output '{name}' is positions counted from the sequence start (a chunk "
                                     "graph has them per stream; use them inside the model)")
                continue
            if not f.is_stream:
                self.blockers.append(f"graph output '{name}' does not grow with the input length (a summary of "
                                     "the whole sequence, or an export that fixed its length: math.ceil/int on a "
                                     "traced shape bakes the example's length in)")
                continue
            need[name] = (f.rate, 0 if d is None else d)
        delays = {}
        if need:
            ticks = common_delay_ticks([(r, d) for r, d in need.values()], tick_step)
            for name, (rate, d) in need.items():
                want = int(ticks * rate)
                if want > d:
                    t = outs[name]
                    t.name = name + "/undelayed"
                    for table in (self.facts, self.batch_axes, self.values, self.values2):
                        if name in table:
                            table[t.name] = table[name]
                    self.delay[t.name] = d
                    try:
                        out = self.delay_line(t, want - d, name)
                    except Blocker as err:
                        self.blockers.append(f"graph output '{name}': {err}")
                        continue
                    self.graph.outputs[self.graph.outputs.index(t)] = out
                    out.name, out.dtype, out.shape = name, t.dtype, t.shape
                    self.delay[name] = want
                delays[name] = want
        if self._counter_in is not None:
            s_out = self._state_vars[[s.kind for s in self.states].index(COUNTER)][1]
            inc = self.op("Add", [self._counter_in, self.ticks()], f"{BOOKKEEPING}_counter")
            self.graph.layer(op="Min", name=self.name(f"{BOOKKEEPING}_counter/Min"),
                             inputs=[inc, self.const([[float(self._counter_max)]], dtype=np.float32)],
                             outputs=[s_out])
        width = max(2, len(str(len(self._state_vars) - 1)))
        for i, ((s_in, s_out), spec) in enumerate(zip(self._state_vars, self.states)):
            s_in.name, s_out.name = f"state_in.{i:0{width}d}", f"state_out.{i:0{width}d}"
            spec.input, spec.output = s_in.name, s_out.name
        return delays

