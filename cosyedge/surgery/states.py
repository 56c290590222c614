"""The walker's state services: causal context and delay lines become state pairs.

:class:`StateServices` is the part of :class:`cosyedge.surgery.walker.Walker` that creates state pairs
(``state_in`` / ``state_out``, batch-first) and what is built on them:

* :meth:`StateServices.add_state`: ``Concat(state_in, x)`` on the time axis, ``state_out`` = the last P frames
  (causal context, delay lines); a batch that folds ``k`` sequences per stream is stored (N, k, ...);
* :meth:`StateServices.lead_values`: the frames a left pad adds before an early tensor, which a state starts with;
* :meth:`StateServices.delay_line`: ``x`` late by D more frames (re-aligning paths of different delay);
* :meth:`StateServices.align`: give every streaming input of a node the same delay (at least ``minimum``).

Source: sonos/tract ``pulse/src/ops/delay.rs`` (delay lines).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM, BOOKKEEPING, StateSpec
from cosyedge.log import plural
from cosyedge.surgery.rules import INT64_MAX, Blocker

gs = lazy_import("onnx_graphsurgeon")

EDGE = "edge"
"""str: :meth:`StateServices.lead_values` of frames that copy the sequence's first frame (a left edge / replicate
pad)."""


class StateServices:
    """State pairs, delay lines and alignment for :class:`cosyedge.surgery.walker.Walker` (a mixin: it uses the
    walker's facts, delays and graph-building methods)."""

    def _init_states(self) -> None:
        self.states: list[StateSpec] = []
        self.rf_ticks = 0  # the longest causal context a state carries (input ticks)
        self._state_vars: list[tuple[Any, Any]] = []  # (state_in, state_out) Variables, creation order
        self._delayed: dict[tuple[str, int], Any] = {}  # delay_line() by (tensor, frames)

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
        if self.lead_values(x, frames, axis) is not None:
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

    def lead_values(self, x: Any, frames: int, axis: int) -> np.ndarray | None:
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
        (:meth:`lead_values`); zeros when they are zeros. Added at the first chunk only (tick counter at 0),
        so every runtime can still start states at zeros."""
        lead1 = self.lead_values(x, frames, axis)
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
