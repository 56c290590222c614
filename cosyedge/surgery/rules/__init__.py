"""One streaming rule per ONNX op kind, in one registry (closed world: an op without a rule is refused).

Every node has one **role**, decided once by the walker from the facts of its tensors (:data:`STREAM`,
:data:`QUERY_KEY`, :data:`POSITIONS`, :data:`UNIFORM`, :data:`REPLACED`; :data:`SHAPE_ONLY` is a refused stream
node's fallback), and rules are registered by (role, op type) with :func:`register`; the walker looks a node up once
(:func:`lookup`). A rule is ``rule(node, ctx) -> None``: it rewrites ``node`` (and may add nodes and state pairs through
``ctx``) so that the node computes, on one chunk, the chunk's part of what it computes on the whole
sequence, and it sets the delay of every output that streams (``ctx.set_delay``). A rule that cannot
stream a node raises :class:`Blocker` with the reason; the walker names the node and op, records the
blocker and goes on, so every blocker of a graph is reported in one run.

Families (one module each): :mod:`.perframe` (pass-through, following the time axis), :mod:`.context`
(Conv, Pad, pooling: causal context becomes state; look-ahead becomes delay), :mod:`.timeslice` (Slice on
time: crops become delay, steps decimate), :mod:`.recurrent` (GRU, LSTM, RNN: hidden state becomes state
I/O), :mod:`.deconv` (ConvTranspose over time: an overlap-add state), :mod:`.running` (CumSum over time:
a running-sum state), :mod:`.attention` (attention over query x key time: key/value caches, masks measured and rebuilt
by :mod:`.attention_mask`; the ONNX Attention op), :mod:`.relative` (Transformer-XL relative positions with rel_shift
under a bounded mask: the term from the chunk's relative positions), :mod:`.positions` (positions counted from the
sequence start: a counter state) and :mod:`.lifted` (ops on those positions), :mod:`.refuse` (ops that see the whole
sequence, named with the reason), :mod:`.roles` (the rules of the uniform, shape-only and replaced roles).
:mod:`.start` holds no rule: the helpers the Slice, Gather, Concat and Pad rules share for the stream's first frames
(pre-emphasis, edge pads).

Source: sonos/tract ``pulse/src/ops/`` (one ``pulsify`` per op family, ``register_all!``).
"""

from __future__ import annotations

from typing import Any, Callable

INT64_MAX = 9223372036854775807
"""int: ``np.iinfo(np.int64).max``, the ``end`` of a Slice that runs to the end of its axis."""

STREAM = "stream"
"""str: the role of a node on tensors with one time axis (the ordinary rules of the families above)."""
QUERY_KEY = "query x key"
"""str: the role of a node that takes or makes a tensor over query x key time (:mod:`.attention`)."""
POSITIONS = "positions"
"""str: the role of a node with an input of positions counted from the sequence start (:mod:`.positions`)."""
SHAPE_ONLY = "shape-only"
"""str: the role of a node whose outputs only feed Shape/Size and do not grow with the length; it is the fallback of a
:data:`STREAM` node whose rule refused it (:func:`cosyedge.surgery.rules.roles.shape_only`)."""
UNIFORM = "uniform"
"""str: the role of a node whose output runs over time but holds one value everywhere at every length
(:func:`cosyedge.surgery.rules.roles.uniform`)."""
REPLACED = "replaced"
"""str: the role of a node that only computes what an attention or relative-position rule replaces (masks from shapes,
the terms of :mod:`.relative`): the walk leaves it as it is and it becomes dead."""
FALLBACK = {STREAM: SHAPE_ONLY, POSITIONS: SHAPE_ONLY}
"""dict[str, str]: the role whose rule the walker tries when a node's rule refused it (the rule's reason is reported
when the fallback refuses too)."""
ANY = "*"
"""str: the op type of a rule that takes every op of its role."""

RULES: dict[tuple[str, str], Callable[[Any, Any], None]] = {}
"""The registry: rule by (role, ONNX op type); :data:`ANY` as the op type takes every op of the role."""


class Blocker(Exception):
    """A node that cannot be streamed; ``str()`` is the reason (one line, without the node's name)."""


def attr_str(node: Any, key: str, default: str) -> str:
    """A string attribute of ``node`` (onnx-graphsurgeon keeps some as bytes), or ``default``."""
    v = node.attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def register(*ops: str, roles: tuple[str, ...] = (STREAM,)) -> Callable:
    """Decorator: register a rule ``f(node, ctx)`` for each ONNX op type in ``ops`` (str, or :data:`ANY`) in each of
    ``roles`` (default: :data:`STREAM`)."""

    def deco(fn: Callable) -> Callable:
        for role in roles:
            for op in ops:
                if (role, op) in RULES:
                    raise RuntimeError(f"two streaming rules for {op} ({role})")
                RULES[(role, op)] = fn
        return fn

    return deco


def lookup(role: str, op: str) -> Callable[[Any, Any], None] | None:
    """The rule of op type ``op`` in ``role`` (the op's own, else the role's :data:`ANY` rule), or None."""
    return RULES.get((role, op)) or RULES.get((role, ANY))


def load_all() -> dict[str, Callable]:
    """Import every rule module (registering its rules) and return the registry (dict[str, callable])."""
    from cosyedge.surgery.rules import (attention, context, deconv, lifted, perframe, positions,  # noqa: F401
                                        recurrent, refuse, relative, roles, running, timeslice)

    return RULES
