"""One streaming rule per ONNX op kind, in one registry (closed world: an op without a rule is refused).

A rule is ``rule(node, ctx) -> None``: it rewrites ``node`` (and may add nodes and state pairs through
``ctx``) so that the node computes, on one chunk, the chunk's part of what it computes on the whole
sequence, and it sets the delay of every output that streams (``ctx.set_delay``). A rule that cannot
stream a node raises :class:`Blocker` with the reason; the walker names the node and op, records the
blocker and goes on, so every blocker of a graph is reported in one run.

Families (one module each): :mod:`.perframe` (pass-through, following the time axis), :mod:`.context`
(Conv, Pad, pooling: causal context becomes state; look-ahead becomes delay), :mod:`.timeslice` (Slice on
time: crops become delay, steps decimate), :mod:`.recurrent` (GRU, LSTM, RNN: hidden state becomes state
I/O), :mod:`.deconv` (ConvTranspose over time: an overlap-add state), :mod:`.running` (CumSum over time:
a running-sum state), :mod:`.attention` (attention over query x key time: key/value caches, measured masks;
the ONNX Attention op), :mod:`.relative` (Transformer-XL relative positions with rel_shift under a bounded mask: the
term from the chunk's relative positions), :mod:`.refuse` (ops that see the whole sequence, named with the reason).
:mod:`.start` holds no rule: the helpers the Slice, Gather, Concat and Pad rules share for the stream's first frames
(pre-emphasis, edge pads).

Source: sonos/tract ``pulse/src/ops/`` (one ``pulsify`` per op family, ``register_all!``).
"""

from __future__ import annotations

from typing import Any, Callable

INT64_MAX = 9223372036854775807
"""int: ``np.iinfo(np.int64).max``, the ``end`` of a Slice that runs to the end of its axis."""

RULES: dict[str, Callable[[Any, Any], None]] = {}


class Blocker(Exception):
    """A node that cannot be streamed; ``str()`` is the reason (one line, without the node's name)."""


def attr_str(node: Any, key: str, default: str) -> str:
    """A string attribute of ``node`` (onnx-graphsurgeon keeps some as bytes), or ``default``."""
    v = node.attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def register(*ops: str) -> Callable:
    """Decorator: register a rule ``f(node, ctx)`` for each ONNX op type in ``ops`` (str)."""

    def deco(fn: Callable) -> Callable:
        for op in ops:
            if op in RULES:
                raise RuntimeError(f"two streaming rules for {op}")
            RULES[op] = fn
        return fn

    return deco


def load_all() -> dict[str, Callable]:
    """Import every rule module (registering its rules) and return the registry (dict[str, callable])."""
    from cosyedge.surgery.rules import (attention, context, deconv, perframe, recurrent, refuse,  # noqa: F401
                                        relative, running, timeslice)

    return RULES
