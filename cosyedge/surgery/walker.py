"""The streamify walker: visit every node once, in topological order, decide its role and ask its rule.

The walker carries the **delay** of every streaming tensor: stream frame ``k`` of tensor ``x`` holds full-
sequence frame ``k - delay(x)`` (frames of ``x``'s own time axis; the axis and rate come from
:mod:`cosyedge.surgery.facts`). A delay is negative after a causal left pad that a following Conv has not
absorbed yet; it is ``None`` for a tensor that is constant along time (``ConstantOfShape`` over a computed
shape).

Each node gets one role from the facts of its tensors (:meth:`Walker.role_of`: stream, query x key, positions,
uniform, replaced; shape-only as a refused stream node's fallback), and its rule is looked up once by (role, op type)
in the one registry (:func:`cosyedge.surgery.rules.lookup`). Rules use the walker's public context API:

* facts and values: :meth:`Walker.fact`, :meth:`Walker.is_stream`, :meth:`Walker.delay_of` /
  :meth:`Walker.set_delay`, :meth:`Walker.value` / :meth:`Walker.value2`, :meth:`Walker.batch_axis`, ...;
* graph building: :meth:`Walker.op`, :meth:`Walker.const`, :meth:`Walker.unsqueeze`, :meth:`Walker.time_slice`;
* states and delay lines (:class:`cosyedge.surgery.states.StateServices`): ``add_state``, ``delay_line``, ``align``,
  ``lead_values``;
* the stream clock (:class:`cosyedge.surgery.clock.StreamClock`): ``counter``, ``position_counter``, ``mask_preroll``,
  ``before_frame``, ``select``, ``frames_tensor``, ``stream_sizes``;
* :meth:`Walker.pass_delay`: the outputs of a node left as it is take its inputs' delay;
* the family objects :attr:`Walker.attention` (:class:`cosyedge.surgery.rules.attention.AttentionFamily`) and
  :attr:`Walker.positions` (:class:`cosyedge.surgery.rules.positions.PositionFamily`).

Blockers are collected, so one run names every node that cannot stream.

Source: sonos/tract ``pulse/src/model.rs`` (pulsify walk: ``translate_node`` per node).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BOOKKEEPING
from cosyedge.log import plural
from cosyedge.surgery.clock import COUNTER, StreamClock
from cosyedge.surgery.facts import TimeFact
from cosyedge.surgery.rules import (FALLBACK, POSITIONS, QUERY_KEY, REPLACED, STREAM, UNIFORM, Blocker, load_all,
                                    lookup)
from cosyedge.surgery.states import StateServices

gs = lazy_import("onnx_graphsurgeon")


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


class Walker(StateServices, StreamClock):
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
        from cosyedge.surgery.rules.attention import AttentionFamily
        from cosyedge.surgery.rules.positions import PositionFamily

        self.masks = MaskEvaluator(model, facts, t1, batch_axes) if model is not None else None
        self.attention = AttentionFamily(window=attention_window, per_frame=bool(attention_per_frame))
        self.positions = PositionFamily()
        self.fixed_batch = fixed_batch  # the export's batch where it could not be freed (surgery/batch.py), else None
        self._length_dep: dict[str, str] = {}  # length_dependence() by tensor name
        self.strides: list[tuple[int, str]] = []  # (ticks, why): chunks must be a multiple of each
        self.graph = graph
        self.facts = facts
        self.values, self.values2 = values
        self.batch_axes = batch_axes
        self.tick_source = tick_source
        self.delay: dict[str, int | None] = {}
        self.blockers: list[str] = []
        self._uid = 0
        self._init_states()
        self._init_clock()

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
        if self.positions.max_ticks is None or ticks < self.positions.max_ticks[0]:
            self.positions.max_ticks = (int(ticks), why)

    def limit_full_ticks(self, ticks: int, why: str, frames: int) -> None:
        """The full-sequence graph runs at most ``ticks`` input ticks (``frames`` frames at the attention's rate) though
        the stream runs longer: a relative-position table of fixed rows (``why`` names it, with its rows). Only the
        proof's input is bounded by it (:func:`cosyedge.surgery.proof.stream.prove_stream`)."""
        if self.positions.full_max_ticks is None or ticks < self.positions.full_max_ticks[0]:
            self.positions.full_max_ticks = (int(ticks), why, int(frames))

    def require_stride(self, ticks: int, why: str) -> None:
        """Chunks must hold a multiple of ``ticks`` input ticks (a chunked attention's chunk); ``why`` names it."""
        if ticks > 1:
            self.strides.append((int(ticks), why))


    # ------------------------------------------------------------------ walk
    def role_of(self, node: Any) -> str | None:
        """The role of ``node`` (:mod:`cosyedge.surgery.rules`), decided once from the facts of its tensors, in this
        order: :data:`REPLACED` (it only computes masks or relative-position terms a site replaces), :data:`UNIFORM`
        (:func:`cosyedge.surgery.rules.roles.is_uniform`), :data:`QUERY_KEY` (it takes or makes a tensor over query x
        key time), :data:`POSITIONS` (an input is positions counted from the sequence start), :data:`STREAM`.

        Returns:
            str | None: the role; None for a node with no streaming input or output (static, or arithmetic on sizes:
            recomputed per chunk; its consumers decide).
        Raises:
            Blocker: an output whose fact could not be measured.
        """
        from cosyedge.surgery.rules.roles import is_uniform
        from cosyedge.surgery.rules.attention import involved

        if node.name in self.attention.replaced or node.name in self.attention.relative_nodes:
            return REPLACED
        if is_uniform(node, self):
            return UNIFORM
        if self.masks is not None and involved(node, self):
            return QUERY_KEY
        outs_stream = [o for o in node.outputs if o.name and self.fact(o).is_stream]
        errors = [self.fact(o).error for o in node.outputs if o.name and self.fact(o).error]
        if errors:
            raise Blocker(f"output {errors[0]}")
        if not self.stream_inputs(node) and not outs_stream:
            return None
        if any(t.name in self.positions.lifted for t in node.inputs):
            return POSITIONS
        return STREAM

    def walk(self) -> None:
        """Visit every node of the graph (snapshot in topological order), decide its role and apply the rule of its
        (role, op type); record blockers in :attr:`blockers` (one line each: node, op, reason). A stream or positions
        node whose rule refused it gets its role's fallback (:data:`cosyedge.surgery.rules.FALLBACK`: shape-only)."""
        for name, f in self.facts.items():  # graph inputs that stream start at delay 0
            if f.is_stream:
                self.delay.setdefault(name, 0)
        from cosyedge.surgery.rules import relative
        from cosyedge.surgery.rules.attention import find_replaced

        relative.find(self)
        find_replaced(self)
        blocked: list[tuple[Any, str]] = []
        for node in list(self.graph.nodes):
            try:
                role = self.role_of(node)
            except Blocker as err:
                blocked.append((node, f"{node_desc(node)}: {err}"))
                continue
            if role is None:
                continue
            rule = lookup(role, node.op)
            if rule is None:
                blocked.append((node, f"{node_desc(node)}: no streaming rule for {node.op} on a tensor with a time "
                                      "axis (closed world: the op is refused until it has one)"))
                self.pass_delay(node)
                continue
            try:
                rule(node, self)
            except Blocker as err:
                if role in FALLBACK and self._fallback_rule(FALLBACK[role], node):
                    continue
                blocked.append((node, f"{node_desc(node)}: {err}"))
                self.pass_delay(node)
        self._keep_live_blockers(blocked)

    def _fallback_rule(self, role: str, node: Any) -> bool:
        """Apply the rule of ``node`` in fallback ``role``; bool: it applied (False: it refused too)."""
        rule = lookup(role, node.op)
        try:
            rule(node, self)
        except Blocker:
            return False
        return True

    def _keep_live_blockers(self, blocked: list[tuple[Any, str]]) -> None:
        """Record the walk's blockers (node, text) of nodes the chunk graph still computes: a node whose consumers were
        all rewritten not to read it (a Range whose ``arange(T) < length`` pad mask
        :func:`cosyedge.surgery.rules.roles.uniform` folded to a constant) blocks nothing."""
        outs = [t for t in self.graph.outputs]
        live, stack = set(), [t.inputs[0] for t in outs if t.inputs]
        while stack:
            n = stack.pop()
            if id(n) in live:
                continue
            live.add(id(n))
            stack.extend(t.inputs[0] for t in n.inputs if t.inputs)
        self.blockers.extend(text for node, text in blocked if id(node) in live)


    def pass_delay(self, node: Any) -> None:
        """Leave ``node`` as it is: its outputs take the largest delay of its streaming inputs (0 without any)."""
        d = max([self.delay_of(node.inputs[i]) or 0 for i in self.stream_inputs(node)] or [0])
        for o in node.outputs:
            self.set_delay(o, d)

    def _drop_unused_positions(self) -> None:
        """Remove position counters nothing reads any more (their positions only fed a tensor that
        :func:`cosyedge.surgery.rules.roles.uniform` folded to a constant): after dropping dead nodes, a counter whose
        state_in feeds only its own update is no state a runtime should carry."""
        from cosyedge.surgery.rules.positions import POSITION

        self.graph.cleanup()
        for rate, s_in in list(self.positions.counters.items()):
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
            del self._state_vars[i], self.states[i], self.positions.counters[rate]
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
            if name in self.positions.lifted:
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
