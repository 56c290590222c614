"""Stage 2, streamify: full-sequence ONNX -> chunk-in / chunk-out ONNX with explicit state, proved equal.

One rule per op kind (:mod:`cosyedge.surgery.rules`) over a stream fact carried through the graph: which
axis is time, frames per input tick (strides and upsampling so far), delay in frames
(:mod:`cosyedge.surgery.facts`, :mod:`cosyedge.surgery.walker`). Closed world: every node that touches a
tensor with a time axis either has a rule or the run stops, naming every such node with its op and the
reason, in one line. What becomes state: causal context of Conv / pooling (1-D or 2-D, time on any spatial
axis, strided, dilated, grouped), Pad on time, GRU / LSTM / RNN hidden and cell state, transposed-conv
overlap, running sums, delay lines where paths of different delay meet. Look-ahead (right pads, symmetric
conv pads that are not chomped, crops at the start) becomes delay; the outputs share one delay, added to
the contract's ``delay_samples`` (whole samples: a vocoder's delay is not rounded up to whole input frames); the
proof measures the full graph's look-ahead by future perturbation and logs it against that delay, a warning when
they differ. States are batch-first, named ``state_in.NN`` / ``state_out.NN`` with a
fixed width (no name a prefix of another).

A time axis the export left at a fixed length on a graph input or output is made symbolic (one warning line).
Before anything is written the stream graph is run chunk by chunk (the smallest chunk, one hop and a larger
one, each as ``cosyedge run`` runs it) against the full-sequence graph on real speech for waveform inputs
(:mod:`cosyedge.surgery.proof`); above tolerance nothing is written and the message names the first diverging
tensor.

Several ONNX files that form one model (DeepFilterNet3's encoder and two decoders) are merged first
(:mod:`cosyedge.surgery.merge`): outputs of one feed inputs of the same name of another.

Sources: sonos/tract ``pulse/`` (pulsify rules per op, stream facts, delays); onnx-graphsurgeon docs
(``Graph.fold_constants``, ``cleanup``, ``toposort``); icefall ``export-onnx-streaming.py`` (explicit
cache I/O).
"""

from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    META_PREFIX,
    Stage,
    StreamContract,
    StreamIO,
    check_name,
    check_not_input,
    check_writable,
    resolve_artifact,
)
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG, plural
from cosyedge.surgery import io, ops  # noqa: F401  (ops registers graph functions)
from cosyedge.surgery import proof
from cosyedge.surgery.proof import ATOL

gs = lazy_import("onnx_graphsurgeon")

STATE_IN_PREFIX = "state_in."
STATE_OUT_PREFIX = "state_out."


@dataclasses.dataclass
class StreamGraph:
    """What :func:`streamify_graph` made.

    Attributes:
        states (list[StateSpec]): State pairs in creation (graph) order, batch-first.
        inputs (list[StreamIO]): Streaming inputs (frames per hop, time axis).
        outputs (list[StreamIO]): Streaming outputs with their delay in frames.
        stride_ticks (int): Chunks must hold a multiple of this many input ticks.
        delay_ticks (Fraction): The outputs' common delay in input ticks (look-ahead found in the graph; a
            fraction of a tick for outputs faster than the input, a whole number of samples).
        walker (Walker): The walker (per-tensor delays and facts, for the proof's bisection).
        rf_ticks (int): Longest time context of one stateful layer, in input ticks.
        full_model (onnx.ModelProto): The constant-folded full-sequence graph (the proof's reference; with its
            attention bounded where ``--attention-window`` bounded it).
        original_model (onnx.ModelProto): The constant-folded full-sequence graph as given (with the time axes
            of its inputs made symbolic where the export fixed them).
        repairs (list[tuple[str, str, int, int]]): Graph inputs and outputs whose time axis the export fixed and
            streamify made symbolic: (``"input"`` or ``"output"``, name, axis, fixed length); reported, with what
            else was repaired, by :func:`check_repaired_copy`.
        probe_ticks (tuple[int, int]): The two lengths (input ticks) the repaired copy was measured at.
    """

    states: list
    inputs: list
    outputs: list
    stride_ticks: int
    delay_ticks: Fraction
    walker: Any
    rf_ticks: int
    full_model: Any = None
    original_model: Any = None
    repairs: list = dataclasses.field(default_factory=list)
    probe_ticks: tuple = ()


def _input_time_axes(graph: Any, given: dict[str, int] | None, where: str = "") -> dict[str, int]:
    names = [t.name for t in graph.inputs]
    unknown = sorted(set(given or {}) - set(names))
    if unknown:
        raise UsageError(f"--time-axis names {unknown}, which are not inputs of the model (its inputs: {names})")
    axes = {}
    for t in graph.inputs:
        shape = list(t.shape or [])
        if given and t.name in given:
            ax = int(given[t.name])
            if t.shape is not None and len(shape) < 2:  # 1..rank-1 would read "axes 1..0"
                raise UsageError(f"{where + ': ' if where else ''}--time-axis {t.name}={ax}: input '{t.name}' {shape} "
                                 f"has no time axis to pick (rank {len(shape)}: "
                                 f"{'its only axis is the batch' if shape else 'a scalar'}): one value per sequence, "
                                 f"not a stream over time; inputs without a time axis (a speaker id, a conditioning "
                                 f"vector) are not supported: fix its value inside the model before export")
            if shape and not -len(shape) < ax < len(shape) or shape and ax % len(shape) == 0:
                raise UsageError(f"--time-axis {t.name}={ax}: input '{t.name}' has shape {shape}; time must be one of "
                                 f"axes 1..{len(shape) - 1} (axis 0 is the batch)")
            axes[t.name] = ax % len(shape) if shape else ax
            sym = [i for i, d in enumerate(shape) if i > 0 and not (isinstance(d, (int, np.integer)) and d > 0)]
            if shape and axes[t.name] not in sym and sym:
                raise UsageError(f"--time-axis {t.name}={ax}: axis {axes[t.name]} of input '{t.name}' {shape} has a "
                                 f"fixed size; the export made axis {sym[0]} dynamic (give --time-axis "
                                 f"{t.name}={sym[0]}, or export with axis {axes[t.name]} dynamic)")
            continue
        sym = [i for i, d in enumerate(shape) if i > 0 and not (isinstance(d, (int, np.integer)) and d > 0)]
        if len(sym) == 1:
            axes[t.name] = sym[0]
        elif len(sym) > 1:
            raise UsageError(f"input '{t.name}' has several symbolic axes {sym} ({shape}): give its time axis "
                             f"(--time-axis {t.name}=AXIS)")
        elif not any(i > 0 and not (isinstance(d, (int, np.integer)) and d > 0)
                     for u in graph.inputs for i, d in enumerate(u.shape or [])):
            from cosyedge.surgery.facts import dynamic_axes_hint

            hint = dynamic_axes_hint([(u.name, u.shape) for u in graph.inputs],
                                     [(u.name, u.shape) for u in graph.outputs])
            guess = next((i for i in range(len(shape) - 1, 0, -1) if isinstance(shape[i], (int, np.integer))
                          and shape[i] > 1), None)
            alt = (f", or give its time axis (--time-axis {t.name}={guess}) to stream it as exported (that axis is "
                   "made symbolic and the proof checks it)") if guess is not None else ""
            raise UsageError(f"{where + ': ' if where else ''}the export fixed the time length (input '{t.name}' is "
                             f"{shape}, no input has a dynamic axis); export with a dynamic time axis: {hint}{alt}")
        else:
            timed = next((f"{u.name}.shape[{i}]" for u in graph.inputs for i, d in enumerate(u.shape or [])
                          if i > 0 and not (isinstance(d, (int, np.integer)) and d > 0)), "x.shape[1]")
            raise _no_time_axis_error(t, shape, where, timed)
    return axes


_COMPARE_OPS = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"}
_PASS_OPS = {"Unsqueeze", "Squeeze", "Reshape", "Cast", "Expand", "Identity", "Flatten", "Add", "Sub", "Mul"}


def _compared_along_time(t: Any, depth: int = 6) -> bool:
    """Whether the values of graph input ``t`` (gs.Variable) reach a comparison (Less, Greater, ...) through at most
    ``depth`` shape or arithmetic steps (Unsqueeze, Cast, Expand, Add, ...): a length compared with positions along
    time, as WeNet's ``make_pad_mask(lengths)`` (``arange(T) >= lengths.unsqueeze(-1)``) builds a key-padding mask.
    A ``Shape`` of it reads no values and is not followed."""
    front, seen = [t], set()
    for _ in range(depth):
        nxt = []
        for v in front:
            for node in v.outputs:
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if node.op in _COMPARE_OPS:
                    return True
                if node.op in _PASS_OPS:
                    nxt.extend(node.outputs)
        front = nxt
    return False


def _no_time_axis_error(t: Any, shape: list, where: str, timed: str) -> UsageError:
    """The refusal (UsageError, exit 2) of graph input ``t`` (gs.Variable of ``shape``) that has no time axis while
    another input has one (``timed``: that input's length, e.g. ``"x.shape[1]"``), naming what it is: a per-sequence
    length that feeds a padding mask (a stream has no total length), a value per sequence (only a batch axis), or a
    tensor of fixed sizes (give its time axis if it has one)."""
    pre = f"{where}: " if where else ""
    dtype = _np_name(t.dtype)
    if len(shape) <= 1 and np.dtype(dtype).kind in "iu" and _compared_along_time(t):
        return UsageError(f"{pre}input '{t.name}' ({dtype} {shape}) is a length per sequence compared with positions "
                          f"along time (a padding mask, as make_pad_mask(lengths)): a stream has no total length, so "
                          f"no chunk can be masked by it; export without the '{t.name}' input and its mask (every "
                          f"frame of a stream is valid), or with the lengths computed from the input's shape ({timed})")
    if len(shape) <= 1:
        return UsageError(f"{pre}input '{t.name}' ({dtype} {shape}) has no axis but the batch: one value per sequence, "
                          f"not a stream over time; inputs without a time axis (a speaker id, a conditioning vector) "
                          f"are not supported: fix its value inside the model before export")
    return UsageError(f"{pre}input '{t.name}' has no symbolic axis ({shape}): every input must run over time "
                      f"(export it with a dynamic time axis, or give it: --time-axis {t.name}=AXIS); inputs "
                      f"without a time axis (a fixed conditioning vector) are not supported")


def _already_streams(model: Any, src: Any, out: Any, fields: dict, err: UsageError) -> UsageError | None:
    """The refusal ``err`` of a graph that already streams, turned into one that says so and suggests ``cosyedge
    adopt`` (UsageError), or None when the graph does not look streaming.

    A foreign streaming graph (a chunk in, a cache or RNN state in, the next cache or state out) is refused by
    streamify for an input without a time axis, and the line suggested ``--time-axis``, never ``adopt``. It looks
    streaming when inputs pair with outputs as adopt pairs states (``cache``/``new_cache``, ``h``/``hn``,
    ``x_in``/``x_out``, a state-named input and its same-shape output, pairs in the metadata:
    :func:`cosyedge.surgery.adopt.pairs.find_state_pairs`). Only a refusal
    is rewritten, so a full-sequence graph whose names happen to pair still streamifies; its refusal keeps the reason.
    """
    from cosyedge.surgery.adopt.pairs import find_state_pairs

    try:
        pairs = find_state_pairs(model, str(src))
    except (UsageError, AttributeError):  # no pair found (or several candidates: not for this line to settle)
        return None
    why = str(err)
    where = f"{src}: "
    why = why[len(where):] if why.startswith(where) else why
    flags = "".join(f" --{k.replace('_', '-')} {fields[k]}" for k in ("sample_rate_hz", "hop_samples") if fields.get(k))
    return UsageError(f"{src} looks like a graph that already streams: its input{'s' if len(pairs) > 1 else ''} "
                      f"{', '.join(f'{i}' for i, _ in pairs)} pair{'' if len(pairs) > 1 else 's'} with output"
                      f"{'s' if len(pairs) > 1 else ''} {', '.join(o for _, o in pairs)} (a state carried from call "
                      f"to call); streamify takes a full-sequence graph: adopt this one instead: cosyedge adopt {src} "
                      f"-o {out}{flags} (streamify's refusal: {why})")


def _free_time_dims(tensors: list, axes: dict[str, int], where: str, kind: str) -> list[tuple[str, str, int, int]]:
    """Make the time axis of each graph input or output in ``tensors`` symbolic where the export left it at a
    fixed length (``torch.onnx.export(dynamo=True)`` with ``dynamic_shapes`` on the input only keeps the output
    at the example's length): a stream graph runs on chunks of any multiple of the stride, and ONNX Runtime
    refuses a bound output whose declared fixed length differs ("Got invalid dimensions for output").
    Logs nothing: :func:`check_repaired_copy` reports every repair in one warning line.

    Args:
        tensors (list[gs.Variable]): Graph inputs or outputs (their ``shape`` is edited in place).
        axes (dict[str, int]): Time axis by tensor name; tensors not named are left alone.
        where (str): Name for messages.
        kind (str): ``"input"`` or ``"output"``, for messages.
    Returns:
        list[tuple[str, str, int, int]]: (kind, name, axis, fixed length) of each repaired tensor.
    """
    freed = []
    for t in tensors:
        shape = list(t.shape or [])
        axis = axes.get(t.name)
        if axis is None or not 0 <= axis < len(shape) or not isinstance(shape[axis], (int, np.integer)):
            continue
        fixed = int(shape[axis])
        shape[axis] = f"T_{t.name}"
        t.shape = shape
        freed.append((kind, t.name, axis, fixed))
    return freed


def _probe_lengths(quantum: int) -> tuple[int, int]:
    """The two probe lengths (input ticks) for a probe quantum: multiples of it, at least 8 quanta and 512 ticks."""
    m1 = max(8, -(-512 // quantum))
    return m1 * quantum, (m1 + 5) * quantum


MAX_PROBE_QUANTUM = 20000
"""int: largest probe quantum (ticks) streamify re-probes at to measure a stride the first probes missed."""


def _stride_beyond(facts: dict, quantum: int, t1: int, t2: int, model: Any) -> int:
    """A stride the probes at ``t1`` and ``t2`` (multiples of ``quantum``) could not measure, or 0.

    A tensor at ``p / s`` frames per tick whose stride ``s`` divides ``t2 - t1`` is measured exactly, its
    rate's denominator dividing ``quantum``; one whose ``s`` does not (a stride-3 conv probed at multiples of
    320 samples) reads as a nearby fraction such as 533/1600. Candidates: for each such rate the fraction with
    the smallest denominator within 2 frames over the probe difference, among denominators small enough for
    that fraction to be the only one (up to ``sqrt((t2 - t1) / 4)``), and the product of the ``strides`` of the
    graph's strided Conv and pooling nodes (a rate's denominator comes from downsampling and divides it).

    Args:
        facts (dict[str, TimeFact]): Measured facts.
        quantum (int): The probe quantum (ticks).
        t1 (int): First probe length.
        t2 (int): Second probe length.
        model (onnx.ModelProto): The graph (its strided nodes).
    Returns:
        int: a stride to probe again at multiples of ``lcm(quantum, it)`` (at most :data:`MAX_PROBE_QUANTUM`),
        or 0 when every rate was exact or no candidate fits.
    """
    bad = [f for f in facts.values() if f.is_stream and quantum % f.rate.denominator]
    if not bad:
        return 0
    eps, limit = 2.0 / (t2 - t1), max(1, math.isqrt((t2 - t1) // 4))
    small = 1
    for f in bad:
        r = float(f.rate)
        q = next((q for q in range(1, limit + 1) if round(r * q) > 0 and abs(round(r * q) / q - r) <= eps), 0)
        small = math.lcm(small, q) if q and small else 0
    product = 1
    for node in model.graph.node:
        if node.op_type in ("Conv", "MaxPool", "AveragePool", "LpPool"):  # downsampling: denominators
            for a in node.attribute:
                if a.name == "strides":
                    product *= math.prod(int(v) for v in a.ints if v > 1)
    for cand in (small, math.lcm(small or 1, product), product):
        if cand and quantum % cand and math.lcm(quantum, cand) <= MAX_PROBE_QUANTUM:
            return cand
    return 0


def _waveform_like(shape: list, axis: int) -> bool:
    """Whether an input of ``shape`` with time on ``axis`` may be a waveform streamify reads as features: (N, T),
    or (N, C, T) with C of 2 (stereo) — for the hint to give ``--frames-per-hop`` (bool)."""
    return (len(shape) == 2 and axis == 1) or (len(shape) == 3 and axis == 2 and shape[1] == 2)


def _is_audio(shape: list, axis: int) -> bool:
    return len(shape) == 3 and axis == 2 and shape[1] == 1


def _add_channel_axis(graph: Any, axes: dict[str, int], where: str) -> dict[str, int] | None:
    """Stream a waveform without a channel axis as one with it: when the graph's only input is float (N, T) with time
    on axis 1, it becomes (N, 1, T) followed by a ``Squeeze`` of axis 1, and every output (N, T') of rank 2 with a
    symbolic axis 1 gets an ``Unsqueeze`` to (N, 1, T'), so the stream graph takes and gives what every runtime
    streams (a waveform (N, 1, T) chunked in samples) and its proof runs on real speech. The graph is edited in place
    (the names of inputs and outputs are kept); one info line says so.

    Args:
        graph (gs.Graph): The full-sequence graph.
        axes (dict[str, int]): Time axis by input name (:func:`_input_time_axes`).
        where (str): Name for messages.
    Returns:
        dict[str, int] | None: the new time axes (the input's is 2), or None when the graph is left as it is (more
        than one input, another rank or time axis, an integer input, an input that is also an output).
    """
    if len(graph.inputs) != 1:
        return None
    t = graph.inputs[0]
    shape = list(t.shape or [])
    if len(shape) != 2 or axes.get(t.name) != 1 or t in graph.outputs or np.dtype(_np_name(t.dtype)).kind != "f":
        return None
    opset = int(graph.opset or 13)

    def axis_op(op: str, x: Any, y: Any, name: str) -> Any:
        if opset >= 13:
            return gs.Node(op, name=name, inputs=[x, gs.Constant(f"{name}/axes", np.array([1], np.int64))],
                           outputs=[y])
        return gs.Node(op, name=name, attrs={"axes": [1]}, inputs=[x], outputs=[y])

    def replace_uses(old: Any, new: Any) -> None:
        for node in list(old.outputs):
            for k, i in enumerate(node.inputs):
                if i is old:
                    node.inputs[k] = new

    flat = gs.Variable(f"{t.name}/no_channel", dtype=t.dtype, shape=shape)
    replace_uses(t, flat)
    graph.nodes.append(axis_op("Squeeze", t, flat, f"{t.name}/drop_channel_axis"))
    t.shape = [shape[0], 1, shape[1]]
    made = []
    fixed_in = shape[1] if isinstance(shape[1], (int, np.integer)) else None  # an export that fixed the length
    for o in graph.outputs:
        oshape = list(o.shape or [])
        same_fixed = fixed_in is not None and isinstance(oshape[1] if len(oshape) == 2 else None, (int, np.integer)) \
            and int(oshape[1]) == int(fixed_in)  # the waveform out, its length fixed with the input's
        if len(oshape) != 2 or (isinstance(oshape[1], (int, np.integer)) and not same_fixed) or not o.inputs:
            continue
        raw = gs.Variable(f"{o.name}/no_channel", dtype=o.dtype, shape=oshape)
        producer = o.inputs[0]
        for k, v in enumerate(producer.outputs):
            if v is o:
                producer.outputs[k] = raw
        replace_uses(o, raw)
        graph.nodes.append(axis_op("Unsqueeze", raw, o, f"{o.name}/add_channel_axis"))
        o.shape = [oshape[0], 1, oshape[1]]
        made.append(o.name)
    graph.toposort()
    LOG.info("%s: input '%s' %s is a waveform without a channel axis: streamed as (N, 1, T) in samples (the stream "
             "graph takes it as %s%s; a Squeeze inside); to stream it as features instead, give --frames-per-hop",
             where, t.name, shape, t.shape, f" and gives {made} as (N, 1, T)" if made else "")
    return {**axes, t.name: 2}


def streamify_graph(graph: Any, *, hop_ticks: int, time_axes: dict[str, int] | None = None,
                    where: str = "model", hop_label: str = "hop_samples",
                    attention_window: int | None = None, samples_per_tick: int = 1,
                    attention_per_frame: bool = False) -> StreamGraph:
    """Rewrite ``graph`` in place into its stream graph: one rule per node (:mod:`cosyedge.surgery.rules`).

    Args:
        graph (gs.Graph): Full-sequence graph; every input has a time axis (found from its one symbolic
            axis besides batch, or given in ``time_axes``).
        hop_ticks (int): Input ticks (samples for a waveform input, frames for features) per hop; the probe
            lengths are multiples of it.
        time_axes (dict[str, int] | None): Time axis by input name, where the shapes do not tell.
        where (str): Name for messages.
        hop_label (str): What the hop is called in messages (``hop_samples`` or ``frames_per_hop``).
        samples_per_tick (int): Samples one input tick stands for (1 for a waveform; ``hop_samples /
            frames_per_hop`` for feature frames): the delay is a whole number of samples, not of ticks.
        attention_per_frame (bool): Stream chunked attention at any hop with ``chunk - 1`` frames of delay
            (:class:`cosyedge.surgery.walker.Walker`).
    Returns:
        StreamGraph: states, I/O and strides (see there).
    Raises:
        UsageError: one line naming every node that cannot stream (node, op, reason), inputs without a time
            axis, no state at all, tensors already named ``state_in.*``.
        ArtifactError: ONNX Runtime cannot run the graph.
    """
    from cosyedge.surgery.batch import fixed_batch, free_batch
    from cosyedge.surgery.facts import measure
    from cosyedge.surgery.walker import Walker

    for i, node in enumerate(graph.nodes):  # error messages and StateSpec.node need names
        if not node.name:
            node.name = f"{node.op}_{i}"
    graph.toposort()
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # fold_constants' own sessions warn of optimiser details otherwise
    graph.fold_constants().cleanup().toposort()
    taken = [n for n in graph.tensors() if n.startswith((STATE_IN_PREFIX, STATE_OUT_PREFIX))]
    if taken:
        raise UsageError(f"model already has tensor '{taken[0]}': is it already streamified?")
    axes = _input_time_axes(graph, time_axes, where)
    repairs = list(_free_time_dims(graph.inputs, axes, where, "input") or [])
    # Probe at multiples of the hop and, for waveforms, of 64 samples, so strides up to 64 are measured
    # exactly even when the hop is not a multiple of them (then refused below, naming the stride).
    quantum = math.lcm(hop_ticks, 64) if _is_audio(list(graph.inputs[0].shape or []), axes[graph.inputs[0].name]) \
        else hop_ticks
    folded = gs.export_onnx(graph)
    # The exporter's shapes of intermediate tensors hold the example's frame count (torch.onnx.export(dynamo=True)
    # writes value_info such as (1, 12, 24) for a GRU output); ONNX Runtime's optimiser bakes them into fused
    # nodes (a Gemm's 'gemm_input_reshape' to {12, 24}) that fail at any other length. The graph itself does not
    # need them: drop them all (ONNX Runtime infers what it needs).
    del folded.graph.value_info[:]
    facts, values, batch_axes = measure(folded, axes, *_probe_lengths(quantum), where)
    fixed = fixed_batch(graph)
    if fixed is not None:  # a fixed-batch export: free its batch (proved) so every tensor gets a batch axis
        freed, why = free_batch(graph, folded, axes, values, _probe_lengths(quantum), where)
        if freed is not None:
            folded, fixed = freed, None
            facts, values, batch_axes = measure(folded, axes, *_probe_lengths(quantum), where)
        elif fixed > 1:  # streams run one at a time or together from one start: only batch 1 is kept as exported
            raise UsageError(f"{where}: exported with a fixed batch of {fixed} that cannot be made dynamic ({why}): "
                             "export it with batch 1 or a dynamic batch axis")
    finer = _stride_beyond(facts, quantum, *_probe_lengths(quantum), folded)
    if finer:  # a stride the probes did not divide (3 with a hop of 160): measure again at multiples of it
        quantum = math.lcm(quantum, finer)
        facts, values, batch_axes = measure(folded, axes, *_probe_lengths(quantum), where)
    inexact = [n for n, f in facts.items() if f.is_stream and quantum % f.rate.denominator]
    in_names = [t.name for t in graph.inputs]
    out_names = [t.name for t in graph.outputs]
    first = graph.inputs[0]
    walker = Walker(graph, facts, values, batch_axes, (first.name, axes[first.name]), model=folded,
                    t1=_probe_lengths(quantum)[0], attention_window=attention_window, fixed_batch=fixed,
                    attention_per_frame=attention_per_frame)
    walker.walk()
    delays = walker.finish(out_names, Fraction(1, max(1, int(samples_per_tick))))
    if walker.blockers:
        n = len(walker.blockers)
        raise UsageError(f"{where} cannot stream: {n} node{'s' if n > 1 else ''} block{'' if n > 1 else 's'} it: "
                         + "; ".join(_group_blockers(walker.blockers)))
    if not walker.states:
        LOG.warning("%s has no time context to carry: every op works on whole chunks of the total stride (a "
                    "frame-by-frame model streams as it is; if it should not, check the time axis)", where)
    repairs += _free_time_dims(graph.outputs, {t.name: walker.facts[t.name].axis for t in graph.outputs
                                               if t.name in walker.facts and walker.facts[t.name].is_stream},
                               where, "output") or []
    denoms = [f.rate.denominator for f in facts.values() if f.is_stream]
    stride = math.lcm(*denoms) if denoms else 1
    for ticks, _why in walker.strides:
        stride = math.lcm(stride, ticks)
    for t in graph.outputs:
        f = walker.facts.get(t.name)
        if f is not None and f.is_stream:
            stride = math.lcm(stride, f.rate.denominator)
    if hop_ticks % stride and inexact:
        raise UsageError(f"{where}: {hop_label} {hop_ticks} does not fit the model's strides, which probes at "
                         f"multiples of {quantum} {'samples' if hop_label == 'hop_samples' else 'frames'} cannot "
                         f"measure (tensor '{inexact[0]}' grows by {facts[inexact[0]].rate} frames per tick): use a "
                         "hop that is a multiple of the product of the model's conv and pooling strides")
    if hop_ticks % stride:
        near, common = stride * max(1, round(hop_ticks / stride)), math.lcm(hop_ticks, stride)
        why = [w for t, w in walker.strides if hop_ticks % t]
        raise UsageError(f"{hop_label} {hop_ticks} is not a multiple of the model's total stride {stride} "
                         f"{'samples' if hop_label == 'hop_samples' else 'frames'} (use {near}"
                         + (f", or {common} to keep a multiple of {hop_ticks}" if common != near else "") + ")"
                         + (f"; it comes from the {why[0]}" if why else ""))
    inputs = []
    for name in in_names:
        f = facts[name]
        shape = [BATCH_DIM if i == 0 else ("T" if i == axes[name] else int(d)) for i, d in enumerate(f.shape1)]
        kind = "audio" if _is_audio(list(f.shape1), axes[name]) else "features"
        inputs.append(StreamIO(name, shape, _np_name(values[0][name].dtype), axes[name], hop_ticks, 0, kind))
    outputs, delay_ticks = [], Fraction(0)
    for name in out_names:
        f = walker.facts[name]
        fph = f.rate * hop_ticks
        shape = [BATCH_DIM if i == walker.batch_axis(next(t for t in graph.outputs if t.name == name)) else
                 ("T" if i == f.axis else int(d)) for i, d in enumerate(f.shape1)]
        kind = ("audio" if inputs[0].kind == "audio" and fph == hop_ticks and _is_audio(list(f.shape1), f.axis)
                else "features")
        dtype = _np_name(values[0][name].dtype) if name in values[0] else "float32"
        outputs.append(StreamIO(name, shape, dtype, f.axis, int(fph) if fph.denominator == 1 else 0,
                                delays.get(name, 0), kind))
        delay_ticks = max(delay_ticks, Fraction(delays.get(name, 0)) / f.rate)
    bad = [o.name for o in outputs if o.frames_per_hop == 0]
    if bad:
        raise UsageError(f"{where}: output '{bad[0]}' has a fractional number of frames per hop of {hop_ticks} "
                         f"ticks: use a hop that is a multiple of {stride}")
    graph.clear_intermediate_shapes().cleanup().toposort()
    full = folded
    if walker.attention.sites:
        from cosyedge.surgery.rules.attention_mask import bound_full_model

        full = bound_full_model(folded, walker.attention.sites)
    return StreamGraph(walker.states, inputs, outputs, stride, delay_ticks, walker, walker.rf_ticks, full, folded,
                       repairs, _probe_lengths(quantum))


def _group_blockers(blockers: list[str]) -> list[str]:
    """One entry per distinct reason (list[str]): ``<first node>: <reason> (the same for <two more> and N more)``, in
    first-seen order, so a reason shared by every layer is said once."""
    groups: dict[str, list[str]] = {}
    for b in blockers:
        m = re.match(r"^(.*? node '[^']*'): (.*)$", b, re.S)
        node, why = (m.group(1), m.group(2)) if m else ("", b)
        groups.setdefault(why, []).append(node)
    out = []
    for why, nodes in groups.items():
        named = [x for x in nodes if x]
        if not named:
            out.append(why)
            continue
        also = ""
        if len(named) > 1:
            more = f" and {len(named) - 3} more" if len(named) > 3 else ""
            also = f" (the same for {', '.join(named[1:3])}{more})"
        out.append(f"{named[0]}: {why}{also}")
    return out


def _attention_lookahead(a: dict) -> str:
    """What an attention's look-ahead costs the stream (str), from its contract entry (``Site.info``): chunked
    attention at a hop of whole chunks sees up to ``C - 1`` frames ahead inside its chunk with no delay (the chunk
    arrives whole); per-frame chunked attention waits for the end of its chunk; a band that looks ahead waits as
    many frames."""
    ahead, lead = int(a.get("lookahead_frames", 0)), int(a.get("per_frame_lead_frames", 0))
    if not ahead:
        return "no look-ahead"
    if lead:
        return (f"a query waits up to {plural(lead, 'frame')} for the end of its chunk ({plural(lead, 'frame')} of "
                "delay)")
    if str(a.get("pattern", "")).startswith("chunked"):
        return (f"a query sees up to {plural(ahead, 'frame')} ahead inside its chunk, which a hop of whole chunks "
                "brings at once (no delay across chunks)")
    return f"a query sees {plural(ahead, 'frame')} ahead ({plural(ahead, 'frame')} of delay)"


def _bytes_by_kind(contract: StreamContract) -> dict[str, int]:
    """Bytes of state per stream by state kind (dict[str, int], e.g. {"key": 4096, "value": 4096, "position": 8})."""
    out: dict[str, int] = {}
    for s in contract.states:
        out[s.kind] = out.get(s.kind, 0) + s.nbytes
    return out


def _np_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return "float32"


def proof_chunks(stride_ticks: int, hop_ticks: int) -> list[int]:
    """Chunk lengths the proof streams at (input ticks: samples for a waveform input, frames for features):
    the smallest a user may pick (the total stride), the one ``cosyedge run`` and ``build`` use by default
    (one hop) and a larger one (three strides, at least a hop), each run as ``run`` runs it.

    Args:
        stride_ticks (int): Total stride, input ticks (>= 1).
        hop_ticks (int): Ticks per hop, a multiple of ``stride_ticks``.
    Returns:
        list[int]: sorted, distinct, e.g. [160, 480] for stride = hop = 160, [80, 160, 240] for stride 80 and
        hop 160.
    """
    return sorted({stride_ticks, hop_ticks, max(hop_ticks, 3 * stride_ticks)})


FP16_ATOL = 2e-3
"""float: proof tolerance (relative to the peak) for a model whose outputs are float16: four float16 steps (2**-11)."""


def prove_stream(full_model: Any, stream_model: Any, contract: StreamContract, sg: StreamGraph, *,
                 inputs: dict[str, np.ndarray] | None = None, atol: float = ATOL, where: str = "model") -> dict:
    """Prove ``stream_model`` == ``full_model`` chunk by chunk (:func:`cosyedge.surgery.proof.prove`) at the
    chunks of :func:`proof_chunks` (the smallest, one hop, a larger one), each chunk run with its outputs
    bound at the contract's shapes as ``cosyedge run`` binds them; returns the summary for the contract.

    Args:
        full_model (onnx.ModelProto): The full-sequence graph (folded).
        stream_model (onnx.ModelProto): The stream graph.
        contract (StreamContract): Its contract.
        sg (StreamGraph): What :func:`streamify_graph` returned (facts and delays for the bisection).
        inputs (dict[str, np.ndarray] | None): Proof inputs (time length a multiple of every chunk);
            default :func:`cosyedge.surgery.proof.proof_inputs`.
        atol (float): Tolerance relative to the peak |full output| (:func:`cosyedge.surgery.proof.tolerance`).
        where (str): Name for messages.
    Returns:
        dict: max abs error, worst SNR, chunks, length (:meth:`ProofResult.summary`).
    Raises:
        AccuracyError: the stream differs; the message names the first diverging tensor.
        ArtifactError: ONNX Runtime cannot run the stream graph at one of the chunks (e.g. an output whose
            declared shape cannot hold it); the message names the chunk.
    """
    from cosyedge.errors import AccuracyError
    from cosyedge.surgery.proof import prove

    if any(o.dtype == "float16" for o in contract.stream_outputs) and atol < FP16_ATOL:
        LOG.info("%s: float16 outputs: the proof's tolerance is %.0e of the peak (a few float16 steps; a chunk sums "
                 "in another order than the whole sequence)", where, FP16_ATOL)
        atol = FP16_ATOL
    s = sg.stride_ticks
    hop = contract.stream_inputs[0].frames_per_hop
    chunks = proof_chunks(s, hop)
    big = max(chunks)
    if inputs is None:
        need = max(64 * big, 8 * sg.rf_ticks + math.ceil(sg.delay_ticks), 4 * contract.sample_rate_hz * hop //
                   contract.hop_samples)
        step = math.lcm(*chunks)
        ticks = step * -(-need // step)
        ticks = _proof_ticks_within_tables(ticks, step, sg, contract, where)
        inputs = proof.proof_inputs(contract, ticks)
    else:
        ticks = next(iter(inputs.values())).shape[contract.stream_inputs[0].time_axis]
        chunks = [c for c in chunks if ticks % c == 0] or [s]
    w = sg.walker
    out_facts = {o.name: (o.time_axis, w.facts[o.name].rate, o.delay_frames) for o in contract.stream_outputs}
    all_facts = {n: (f.axis, f.rate, w.delay.get(n)) for n, f in w.facts.items()
                 if f.is_stream and n not in w.positions.lifted}  # lifted positions: an extra leading axis
    order, producers = [], {}
    for node in full_model.graph.node:
        for o in node.output:
            order.append(o)
            producers[o] = f"{node.op_type} node '{node.name}'"
    res = prove(full_model, stream_model, contract, inputs, chunks, out_facts, all_facts, order, producers, atol,
                where, ran_at=tuple(sg.probe_ticks))
    worst = max(res.rows, key=lambda r: r["max_abs"])
    if not res.ok:
        worst = max(res.rows, key=lambda r: r["max_abs"] / proof.tolerance(r["peak"], atol))
        hint = ""
        if "CumSum" in res.first_bad:
            hint = (" (a running sum in float32 drifts over a long input in the full graph as well: if the model is "
                    "meant to sum that long, loosen the proof with --atol)")
        raise AccuracyError(f"{where}: the stream graph differs from the full-sequence graph: output "
                            f"'{worst['output']}' max abs error {worst['max_abs']:.3g} (SNR {worst['snr_db']:.1f} dB; "
                            f"its peak {worst['peak']:.3g}, tolerance {proof.tolerance(worst['peak'], atol):.3g}) "
                            f"at chunks of {worst['chunk_ticks']} {proof.tick_unit(contract, short=True)}; "
                            + (res.first_bad or "no single tensor found") + hint + "; nothing written")
    LOG.info("proved on %d %s (%.2f s) at chunks of %s %s: max abs error %.3g, SNR >= %.1f dB", res.ticks,
             proof.tick_unit(contract), proof.ticks_seconds(contract, res.ticks), chunks,
             proof.tick_unit(contract, short=True),
             worst["max_abs"], min(r["snr_db"] for r in res.rows))
    summary = res.summary()
    summary["lookahead"] = _check_lookahead(full_model, inputs, res.full, contract, sg, where)
    if sg.original_model is not None and sg.full_model is not sg.original_model:
        summary["attention_window"] = _window_deviation(sg, inputs, res.full, contract, where)
    return summary


def _proof_ticks_within_tables(ticks: int, step: int, sg: StreamGraph, contract: StreamContract, where: str) -> int:
    """The proof's length (input ticks, a multiple of ``step``) cut to what the model's tables allow, with one info line
    naming the table when cut.

    An encoding table of absolute positions bounds the stream itself (``walker.positions.max_ticks``: a stream is never
    longer, so the proof covers every length a stream runs at). A relative-position table bounds only the full-sequence
    graph (``walker.positions.full_max_ticks``): the stream runs on, so the proof must still see its caches filled and
    replaced once, at least twice the longest context (``sg.rf_ticks``); a table too short for that is refused, naming
    it, its rows and the longest ``--attention-window`` it allows.

    Raises:
        UsageError: a table shorter than the proof's chunks, or a relative-position table shorter than twice the
            longest context (exit 2; nothing written).
    """
    unit = proof.tick_unit(contract)
    pos = sg.walker.positions
    limits = [(pos.max_ticks[0], pos.max_ticks[1], None)] if pos.max_ticks else []
    if pos.full_max_ticks:
        limits.append(pos.full_max_ticks)
    if not limits or ticks <= min(x[0] for x in limits):
        return ticks
    limit, why, frames = min(limits, key=lambda x: x[0])
    cut = step * (limit // step)
    if not cut:
        raise UsageError(f"{where}: {why} allows a stream of {limit} {unit}, fewer than the proof's chunks of "
                         f"{step}: the model cannot stream a chunk that long")
    if frames is not None and cut < 2 * sg.rf_ticks:  # the stream outlives the table: its caches must turn over
        from cosyedge.surgery.masks import window_for_cache

        bounded = [x for x in sg.walker.attention.sites if x.original != x.pattern]
        cache = math.floor(Fraction(limit, 2) * min(x.rate for x in bounded)) if bounded else 0
        longest = min(window_for_cache(x.original, cache) for x in bounded) if bounded else 0
        asked = {x.pattern.window if x.pattern.kind == "banded" else x.pattern.cache_frames for x in bounded}
        fix = ((f"; the longest --attention-window it allows is {plural(longest, 'frame')} (asked: "
                f"{'/'.join(map(str, sorted(asked)))}): give --attention-window {longest} or less" if longest else
                "; no --attention-window fits it") if bounded else "")
        raise UsageError(f"{where}: the proof streams at least twice the longest context ({2 * sg.rf_ticks} {unit}) "
                         f"against the full-sequence graph, which runs on at most {limit} {unit}: {why} holds the "
                         f"relative positions of {plural(frames, 'frame')} and no more{fix}; nothing written")
    if frames is None:
        LOG.info("%s: the proof runs on %d %s, the longest stream %s allows", where, cut, unit, why)
    else:
        LOG.info("%s: the proof runs on %d %s: the full-sequence graph runs no longer, %s holds the relative positions "
                 "of %s (the stream has no such limit)", where, cut, unit, why, plural(frames, "frame"))
    return cut


def _check_lookahead(full_model: Any, inputs: dict, full: dict, contract: StreamContract, sg: StreamGraph,
                     where: str) -> dict:
    """The future-perturbation test of every streamify proof (:func:`cosyedge.surgery.proof.measure_lookahead`):
    the full graph's true look-ahead on the proof's input against the delay the walker gave the stream. Logs both
    (one line); a contract delay above the measured look-ahead (a rule that over-counts) or below it is a warning
    naming both, never hidden.

    Returns:
        dict: for the contract's proof: ``measured_samples`` (the smallest common delay at which the stream can
        equal the full graph), ``graph_delay_samples`` (the stream's), ``reach_samples`` (None, or where the stream's
        delay is larger than ``measured_samples``: the same measured with NaN inputs, which no small weight hides),
        ``outputs`` (per output: measured look-ahead and delay, frames), ``equal`` (bool: the delay equals the
        measured look-ahead, or the NaN reach where changed values vanish below float32 resolution).
    """
    from cosyedge.surgery.walker import common_delay_ticks

    first = contract.stream_inputs[0]
    per_tick = contract.hop_samples // first.frames_per_hop
    in_axes = {i.name: (i.time_axis, Fraction(i.frames_per_hop, first.frames_per_hop)) for i in contract.stream_inputs}
    out_axes = {o.name: (o.time_axis, sg.walker.facts[o.name].rate) for o in contract.stream_outputs}
    period = max([int(Fraction(s.pattern.chunk) / s.rate / sg.stride_ticks) for s in sg.walker.attention.sites
                  if s.lead] + [1])  # per-frame chunked attention: its look-ahead depends on the chunk phase
    found = proof.measure_lookahead(full_model, inputs, full, in_axes, out_axes, sg.stride_ticks,
                                    phases=min(period, 16))
    delays = {o.name: o.delay_frames for o in contract.stream_outputs}
    known = {o: la.frames for o, la in found.items() if la.frames is not None}
    measured = common_delay_ticks([(out_axes[o][1], max(0, f)) for o, f in known.items()], Fraction(1, per_tick)) \
        if known else Fraction(0)
    graph = int(sg.delay_ticks * per_tick)
    measured_samples = int(measured * per_tick)
    rows = {o: {"lookahead_frames": found[o].frames, "delay_frames": delays[o]} for o in found}
    reach_samples = None
    if graph > measured_samples:  # a change below float32 resolution? the reach of NaN inputs (proof.measure_lookahead)
        reach = proof.measure_lookahead(full_model, inputs, full, in_axes, out_axes, sg.stride_ticks, nan=True)
        known_r = {o: la.frames for o, la in reach.items() if la.frames is not None}
        if known_r:
            reach_samples = int(common_delay_ticks([(out_axes[o][1], max(0, f)) for o, f in known_r.items()],
                                                   Fraction(1, per_tick)) * per_tick)
    structural = reach_samples == graph
    unit = {o.name: "samples" if o.kind == "audio" else "frames" for o in contract.stream_outputs}
    text = ", ".join(f"'{o}' {plural(r['lookahead_frames'], unit.get(o, 'frames')[:-1])} ahead, "
                     f"{r['delay_frames']} late"
                     for o, r in rows.items())
    if not known:
        LOG.info("%s: look-ahead: changing the input from %s on changes no output: nothing to measure", where,
                 proof.perturbation_starts(next(iter(inputs.values())).shape[first.time_axis], sg.stride_ticks))
    elif graph == measured_samples or structural:
        points = "several points" if sg.stride_ticks == 1 else \
            (f"several chunk boundaries (multiples of the {sg.stride_ticks}-"
             f"{proof.tick_unit(contract, True)[:-1]} stride)")
        how = (f"input changed from {points} on, first output frame that changes" if not structural else
               f"input set to NaN from {points} on, first output frame that turns NaN; changed values reached "
               f"only {plural(measured_samples, 'sample')} back, the rest is below float32 resolution")
        inside = max([int(x.pattern.lookahead_frames) for x in sg.walker.attention.sites if not x.lead] + [0])
        across = "" if not inside else (
            f" across chunks (inside a chunk, which arrives whole, chunked attention sees up to "
            f"{plural(inside, 'frame')} ahead)")
        LOG.info("%s: look-ahead%s measured on the full graph (%s) %s = the delay the graph gives the stream (%s)",
                 where, across, how, plural(graph if structural else measured_samples, "sample"), text)
    else:
        LOG.warning("%s: the stream's delay from the graph is %s but the full graph's look-ahead measured by "
                    "changing its input from several points on is %s (%s)%s", where, plural(graph, "sample"),
                    plural(measured_samples, "sample"),
                    text, (": either a rule counts more look-ahead than the graph has, or the measurement sees less "
                           "(a nonlinearity that hides the change at the first frames, whole frames at a lower rate "
                           "inside the graph); NaN inputs reach "
                           + (f"{plural(reach_samples, 'sample')} back" if reach_samples is not None else "no output"))
                    if graph > measured_samples else ": the measured look-ahead exceeds the stream's delay")
    return {"measured_samples": measured_samples, "graph_delay_samples": graph,
            "equal": graph == measured_samples or structural, "reach_samples": reach_samples, "outputs": rows}


def _window_deviation(sg: StreamGraph, inputs: dict, bounded: dict, contract: StreamContract, where: str) -> dict:
    """How far the ``--attention-window`` bound moves the model from the unbounded original on the proof's input
    (max abs error and SNR of each output of the bounded full graph, ``bounded`` as the proof ran it, against the
    original's), logged as a warning: the stream equals the bounded model, never called exact to the original.

    The deviation grows with the input's length (the original attends to all of the past, the bounded model to its
    window: every frame past the window adds keys only the original sees), so the SNR is also given over the first
    half of the proof's input (the same causal outputs, measured on a shorter stretch) and the line says which way it
    went: streams longer than the proof's input differ more."""
    outs = [o.name for o in contract.stream_outputs]
    original = dict(zip(outs, proof.session(sg.original_model).run(outs, inputs)))
    rows = {o: proof.max_err(original[o], bounded[o]) for o in outs}
    worst = min(rows, key=lambda o: rows[o][1])
    frames = sorted({s.pattern.window or s.pattern.left * s.pattern.chunk for s in sg.walker.attention.sites
                     if s.original != s.pattern})
    seconds = proof.ticks_seconds(contract,
                                  next(iter(inputs.values())).shape[contract.stream_inputs[0].time_axis])
    ax = next(o.time_axis for o in contract.stream_outputs if o.name == worst)
    n = np.shape(original[worst])[ax]
    a = np.take(original[worst], np.arange(n // 2), axis=ax).astype(np.float64)
    e = np.take(bounded[worst], np.arange(n // 2), axis=ax).astype(np.float64) - a
    e2, s2 = float((e ** 2).sum()), float((a ** 2).sum())
    half_snr = 200.0 if e2 == 0 else min(200.0, 10 * math.log10(max(s2, 1e-300) / e2))
    grows = rows[worst][1] < half_snr
    # a positional table ends every stream (the run refuses longer ones): when the proof ran up to that end (it is cut
    # to the longest stream the table allows, a whole number of steps), no stream is longer than the proof's input
    longest = contract.max_stream_samples / contract.sample_rate_hz if contract.max_stream_samples else 0.0
    step_s = contract.total_stride / contract.sample_rate_hz
    ends = bool(longest) and seconds + step_s > longest - 1e-9
    if ends:
        grown = ": the deviation grows with the stream's length" if grows else ""
        trend = (f"SNR {half_snr:.1f} dB over its first {seconds / 2:.2f} s, {rows[worst][1]:.1f} dB over all of "
                 f"it{grown}; streams end at "
                 f"{longest:.2f} s, the length the model's positional table allows ('cosyedge run' refuses longer "
                 f"ones): the proof's input ran to that end (within one {1000 * step_s:g} ms step)")
    else:
        trend = (f"SNR {half_snr:.1f} dB over its first {seconds / 2:.2f} s, {rows[worst][1]:.1f} dB over all of it: "
                 f"the deviation grows with the stream's length (the original attends to all of the past, the bounded "
                 f"model to its window), so streams longer than {seconds:.2f} s differ more" if grows else
                 f"SNR {half_snr:.1f} dB over its first {seconds / 2:.2f} s, {rows[worst][1]:.1f} dB over all of it; "
                 f"streams longer than {seconds:.2f} s may differ more (the original attends to all of the past)")
    LOG.warning("%s: --attention-window bounds %s to %s: the stream equals the bounded model (proved above); "
                "the bounded model differs from the unbounded original on the proof's %.2f s of input by max abs "
                "error %.3g (SNR %.1f dB at output '%s'; %s): not the original model", where,
                "attention" if len(frames) == 1 else f"{len(frames)} attentions",
                plural(frames[0], "frame") if len(frames) == 1 else "/".join(map(str, frames)) + " frames",
                seconds, rows[worst][0], rows[worst][1], worst, trend)
    return {"frames": frames, "max_abs_vs_original": rows[worst][0], "snr_db_vs_original": rows[worst][1],
            "output": worst, "seconds": round(seconds, 3), "snr_db_vs_original_first_half": half_snr,
            "grows_with_length": bool(grows)}


def _run_as_exported(model: Any, contract: StreamContract, ticks: int) -> tuple[dict | None, str]:
    """Run ``model`` (the graph as exported) once at batch 1 on ``ticks`` input ticks of the proof's inputs
    (:func:`cosyedge.surgery.proof.proof_inputs`, reshaped to each input's declared rank: an (N, T) waveform takes
    the samples of (N, 1, T)), with ONNX Runtime's default graph optimisation, as a user runs it.

    Returns:
        tuple[dict | None, str]: the outputs by name (None when ONNX Runtime fails) and its reason ("" on success).
    """
    feeds = proof.proof_inputs(contract, ticks)
    declared = {i.name: len(i.type.tensor_type.shape.dim) for i in model.graph.input}
    for name, a in feeds.items():
        rank = declared.get(name, a.ndim)
        if rank != a.ndim and rank >= 2 and a.ndim == rank + 1 and a.shape[1] == 1:
            feeds[name] = a.reshape(a.shape[:1] + a.shape[2:])
    try:
        sess = proof.session(model)
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, feeds))), ""
    except Exception as err:  # onnxruntime's own exception types: the reason is reported, not raised
        why = re.sub(r"^\w+: \[ONNXRuntimeError\] : \d+ : \w+ : ", "", proof.ort_reason(err, 400))
        return None, why if len(why) <= 160 else why[:157].rstrip() + "..."


def check_repaired_copy(model: Any, sg: StreamGraph, contract: StreamContract, *, atol: float = ATOL,
                        where: str = "model", given: dict[str, int] | None = None) -> dict | None:
    """Say (one warning line) when the graph streamify proved is a repaired copy of the one given, and refuse a
    repair that changes results.

    Streamify repairs two export defects: a time axis the export fixed on a graph input or output is made symbolic
    (:func:`_free_time_dims`), and the exporter's intermediate shapes (``value_info``, which hold the example's
    length; ONNX Runtime bakes them into fused nodes) are dropped. A repaired output shape changes only the stream
    graph: the line names it. When the graph as exported fails in ONNX Runtime at another length (it runs only at
    its trace length), the proof's full-sequence reference is the repaired copy: the copy is compared with the
    export at the trace length (the fixed length of an input, or of an output over its frames per tick) and the line
    says so, with the error; a copy that differs there is refused.

    Args:
        model (onnx.ModelProto): The graph as exported (loaded, weights inline).
        sg (StreamGraph): What :func:`streamify_graph` made (``repairs``, ``original_model``: the repaired copy).
        contract (StreamContract): The stream contract (inputs, rate, hop).
        atol (float): Tolerance relative to the peak output (:func:`cosyedge.surgery.proof.tolerance`).
        where (str): Name for messages.
        given (dict[str, int] | None): Time axes the user gave (``--time-axis``): making a fixed one symbolic is then
            what was asked, said in an info line without the advice to re-export (and with the axis as given, for an
            (N, T) waveform streamed as (N, 1, T)).
    Returns:
        dict | None: for the contract's proof (``repairs``: what was repaired; ``runs_only_at_ticks``: the trace
        length or None; ``max_abs_vs_export``: error of the copy there, or None when not compared), None when
        nothing was repaired.
    Raises:
        UsageError: the repaired copy differs from the export at its trace length (exit 2; nothing written).
    """
    freed = [tuple(r) for r in sg.repairs]
    given = dict(given or {})
    unit = proof.tick_unit(contract, short=True)
    said = [f"{kind} '{name}' had its time axis {given.get(name, axis) if kind == 'input' else axis} fixed at {fixed} "
            f"by the export" + (f" (--time-axis {name}={given[name]})" if kind == "input" and name in given else "")
            for kind, name, axis, fixed in freed]
    asked = bool(given) and all(kind == "output" or name in given for kind, name, _a, _f in freed)
    lengths = {fixed for kind, _n, _a, fixed in freed if kind == "input"}
    for kind, name, _axis, fixed in freed:
        rate = sg.walker.facts[name].rate if kind == "output" and name in sg.walker.facts else None
        if rate and (Fraction(fixed) / rate).denominator == 1:
            lengths.add(int(Fraction(fixed) / rate))
    trace = min(lengths) if len(lengths) == 1 else None
    if not freed and not model.graph.value_info:
        return None
    probes = tuple(sg.probe_ticks) or (512, 517)
    other = probes[1] if probes[0] == trace else probes[0]  # a length the copy ran at when measured
    got, why = _run_as_exported(model, contract, other)
    if got is None and _run_as_exported(sg.original_model, contract, other)[0] is None:
        got = {}  # the copy fails there too: no repair made it run (the proof reports what fails)
    if got is not None:  # the export runs at other lengths: only the stream graph's declared shapes were repaired
        if not freed:
            return None
        (LOG.info if asked else LOG.warning)("%s: %s; made %s symbolic in the stream graph so that every chunk length "
                                             "runs", where, ", ".join(said), "it" if len(said) == 1 else "them")
        return {"repairs": said, "runs_only_at_ticks": None, "max_abs_vs_export": None}
    what = ([] if not model.graph.value_info else
            ["dropped the exporter's intermediate shapes (value_info, which hold the example's length)"]) + said
    if not what:
        what = ["folded its constants"]
    err_txt = "not compared: the export declares no fixed length to run it at"
    max_abs = None
    if trace is not None:
        want, why_trace = _run_as_exported(model, contract, trace)
        mine, _ = _run_as_exported(sg.original_model, contract, trace)
        if want is None or mine is None:
            err_txt = f"not compared: at {trace} {unit} {'the export' if want is None else 'the copy'} fails too"
        else:
            worst = (0.0, 0.0, "")
            for o in contract.stream_outputs:
                a, b = want.get(o.name), mine.get(o.name)
                if a is None or b is None:
                    continue
                if a.size != b.size:
                    worst = max(worst, (float("inf"), 0.0, o.name))
                    continue
                e, _snr, peak = proof.max_err(a.reshape(-1), b.reshape(-1))
                worst = max(worst, (e / proof.tolerance(peak, atol), e, o.name))
            max_abs = worst[1]
            if worst[0] > 1:
                raise UsageError(f"{where}: the graph as exported runs only at its trace length ({trace} {unit}; at "
                                 f"{other} {unit} ONNX Runtime fails: {why}), and the copy streamify repaired "
                                 f"({'; '.join(what)}) differs from it there (output '{worst[2]}' max abs error "
                                 f"{worst[1]:.3g}): re-export with a dynamic time axis and shapes computed from the "
                                 "input; nothing written")
            err_txt = f"equal to the export at {trace} {unit} (max abs error {max_abs:.3g})"
    made = "" if not said else f"; made {'it' if len(said) == 1 else 'them'} symbolic in the stream graph so that " \
        "every chunk length runs"
    fix = " and ".join((["re-export with a dynamic time axis"] if (said or not model.graph.value_info) and not asked
                        else [])
                       + (["drop the export's value_info (del model.graph.value_info[:])"] if model.graph.value_info
                          else []))
    at = f" ({trace} {unit})" if trace is not None else ""
    if asked and not fix:  # --time-axis named every fixed axis: the repair is what was asked, the stream graph runs
        LOG.info("%s: the graph as exported runs only at its trace length%s (at %d %s ONNX Runtime fails: %s); as "
                 "--time-axis asked, the proof ran on a repaired copy (%s%s), %s; the stream graph runs at every "
                 "chunk length", where, at, other, unit, why, "; ".join(what), made, err_txt)
    else:
        LOG.warning("%s: the graph as exported runs only at its trace length%s (at %d %s ONNX Runtime fails: %s); the "
                    "proof ran on a repaired copy (%s%s), %s; %s to run the graph itself at other lengths", where, at,
                    other, unit, why, "; ".join(what), made, err_txt, fix)
    return {"repairs": what, "runs_only_at_ticks": trace, "max_abs_vs_export": max_abs}


SAMPLE_RATE_RANGE_HZ = (1000, 384000)
"""tuple[int, int]: sample rates streamify accepts, Hz (telephone-band 1 kHz .. 384 kHz studio rates)."""
MAX_HOP = SAMPLE_RATE_RANGE_HZ[1]
"""int: the longest hop any rate allows, samples (1 s at the highest rate)."""



def check_numbers(*, sample_rate_hz: Any = None, hop_samples: Any = None, delay_samples: Any = None,
                  atol: Any = None) -> None:
    """Bound streamify's numeric arguments before any work (each ``None`` is skipped): a sample rate in
    :data:`SAMPLE_RATE_RANGE_HZ`, a hop of 1 sample .. 1 s, a delay of 0 .. 10 s (what ``run`` and ``build`` accept,
    :meth:`cosyedge.artifacts.StreamContract.validate`), a finite tolerance in (0, 1]. The hop and delay bounds use
    ``sample_rate_hz`` when it is given (else the largest rate).

    Args:
        sample_rate_hz (int | None): Hz.
        hop_samples (int | None): Samples per hop.
        delay_samples (int | None): Samples of extra delay.
        atol (float | None): Proof tolerance (:func:`cosyedge.surgery.proof.tolerance`).
    Raises:
        UsageError: one line naming the argument, its value and the range (exit 2).
    """
    lo, hi = SAMPLE_RATE_RANGE_HZ
    rate = hi
    if sample_rate_hz is not None:
        if not isinstance(sample_rate_hz, (int, np.integer)) or not lo <= sample_rate_hz <= hi:
            raise UsageError(f"sample_rate_hz (--sample-rate-hz) {sample_rate_hz} must be an integer in {lo}..{hi} Hz")
        rate = int(sample_rate_hz)
    if hop_samples is not None and (not isinstance(hop_samples, (int, np.integer)) or not 1 <= hop_samples <= rate):
        raise UsageError(f"hop_samples (--hop-samples) {hop_samples} must be an integer in 1..{rate} samples (1 s at "
                         f"{rate} Hz)")
    if delay_samples is not None and (not isinstance(delay_samples, (int, np.integer))
                                      or not 0 <= delay_samples <= 10 * rate):
        raise UsageError(f"delay_samples (--delay-samples) {delay_samples} must be an integer in 0..{10 * rate} "
                         f"samples (10 s at {rate} Hz)")
    if atol is not None and not (isinstance(atol, (int, float, np.floating)) and 0 < atol <= 1):  # NaN fails too
        raise UsageError(f"atol (--atol) {atol} must be a finite number in (0, 1] (the proof tolerance, relative to "
                         "the output's peak)")


def _contract_fields(model: Any, where: str, *, sample_rate_hz, hop_samples, delay_samples, name) -> dict:
    """Merge cosyedge metadata of ``model`` with explicit arguments (arguments win)."""
    meta = {p.key: p.value for p in model.metadata_props}
    fields: dict = {}
    if any(k.startswith(META_PREFIX) for k in meta):
        old = StreamContract.from_metadata(meta, where=where)
        if old.is_streaming:
            raise UsageError(f"{where} is already streaming (has {len(old.states)} states): streamify the "
                             "full-sequence ONNX instead")
        fields = {"sample_rate_hz": old.sample_rate_hz, "hop_samples": old.hop_samples,
                  "delay_samples": old.delay_samples, "name": old.name, "input": old.input, "output": old.output}
    given = {"sample_rate_hz": sample_rate_hz, "hop_samples": hop_samples, "delay_samples": delay_samples,
             "name": name}
    for key, value in given.items():
        if value is None:
            continue
        if key in fields and fields[key] != value:
            LOG.warning("%s: %s=%s overrides the model's metadata value %s", where, key, value, fields[key])
        fields[key] = value
    missing = [key for key in ("sample_rate_hz", "hop_samples") if fields.get(key) is None]
    if missing:  # every missing value at once, not one per run
        raise UsageError(f"{where} has no cosyedge metadata: give "
                         + " and ".join(f"{key}= (CLI: --{key.replace('_', '-')} N)" for key in missing))
    check_numbers(sample_rate_hz=int(fields["sample_rate_hz"]), hop_samples=int(fields["hop_samples"]),
                  delay_samples=int(fields.get("delay_samples") or 0))
    return fields



_ESTIMATE = re.compile(r"enh|out|audio|wav|speech|clean|est|denois|signal|^y", re.I)
_MASK = re.compile(r"mask|gain|prob|vad|logit|noise|interf|residual|echo", re.I)


def _pick_audio_output(outputs: list, where: str) -> str:
    """The output name 'run' writes (str): the only waveform output; among several, the first named like an
    estimate (``_ESTIMATE``) and not like a mask (``_MASK``), else the first not named like a mask, with one
    warning naming every waveform output and ``--audio-output``; with none, the first output."""
    audio = [o.name for o in outputs if o.kind == "audio"]
    if not audio:
        return outputs[0].name
    if len(audio) == 1:
        return audio[0]
    plain = [n for n in audio if not _MASK.search(n)] or audio
    chosen = next((n for n in plain if _ESTIMATE.search(n)), plain[0])
    LOG.warning("%s: %d waveform outputs %s; 'run' writes '%s' (choose another with --audio-output NAME)",
                where, len(audio), audio, chosen)
    return chosen

class StatefulOnnxFromOnnx(Stage):
    """Stage: full-sequence ONNX (one file, or several forming one model) -> proved stream ONNX (module doc).

    Args:
        onnx_in (str | Path | Stage | list): Source ONNX path, a stage producing it (e.g. ``OnnxFromTorch``),
            or a list of paths merged into one model (:func:`cosyedge.surgery.merge.merge_models`).
        out (str | Path): Destination ``.stream.onnx`` (one self-contained file, written atomically).
        sample_rate_hz (int | None): Sample rate; required when the source has no cosyedge metadata.
        hop_samples (int | None): Samples per model step; required without metadata; must be a multiple
            of the graph's total stride.
        delay_samples (int | None): Algorithmic delay beyond the graph's own (samples, e.g. the overlap-add
            of an STFT model); defaults to the metadata value or 0. The look-ahead streamify finds is added.
        name (str | None): Model name; defaults to the metadata value or the file stem.
        time_axes (dict[str, int] | None): Time axis by input name where the input's shape does not tell
            (one symbolic axis besides batch axis 0 is taken as time).
        frames_per_hop (int | None): Frames per hop of feature inputs (not waveforms): 1 by default. Not given
            (None), an only input (N, T) of floats is a waveform without a channel axis, streamed as (N, 1, T)
            (:func:`_add_channel_axis`); given, such an input is read as features.
        proof_inputs (dict[str, np.ndarray] | None): Inputs for the proof (batch 1, full length); default
            real speech for waveform inputs, seeded values for others.
        atol (float): Proof tolerance relative to the peak output (:func:`cosyedge.surgery.proof.tolerance`).
        audio_output (str | None): The output 'run' writes when the graph has several waveform outputs (e.g.
            a mask and the enhanced signal); default: the metadata value, else the one named like an estimate
            (enhanced, output, audio, speech, clean, est, ...) and never one named like a mask, with a warning
            naming every waveform output.
        attention_window (int | None): Bound attention with unlimited left context to this many frames.
        attention_per_frame (bool): Stream chunked attention at a hop below its chunk with ``chunk - 1`` frames of
            delay (default: the hop must hold whole chunks).

    Calling it returns the output Path; afterwards :attr:`contract` holds the written
    :class:`~cosyedge.artifacts.StreamContract` (with ``inputs``/``outputs``: time axis, frames per hop and
    delay of each; ``proof``: the measured error).

    Stream model I/O: every input with its time axis holding ``frames_per_hop * chunk / hop`` frames
    (``<audio input>`` (N, 1, T) for a waveform model, T a positive multiple of ``contract.total_stride``);
    ``state_in.NN`` batch-first, zeros at stream start (a tick counter state starts at 0); outputs likewise
    and ``state_out.NN`` (same shapes as ``state_in.NN``), fed back next chunk.

    Raises:
        ArtifactError: source missing/corrupt, output not writable, rewritten graph fails ONNX checks.
        UsageError: a node that cannot stream (every one named, with op and reason), missing metadata
            (names the option), hop not a multiple of the total stride, already streaming, a number out of
            bounds (:func:`check_numbers`: rate 1000..384000 Hz, hop 1 sample..1 s, delay 0..10 s, 0 < atol <= 1).
        AccuracyError: the proof failed (names the first diverging tensor); nothing is written.
    """

    def __init__(self, onnx_in: Any, out: str | Path, *, sample_rate_hz: int | None = None,
                 hop_samples: int | None = None, delay_samples: int | None = None, name: str | None = None,
                 time_axes: dict[str, int] | None = None, frames_per_hop: int | None = None,
                 proof_inputs: dict | None = None, atol: float = ATOL, audio_output: str | None = None,
                 attention_window: int | None = None, attention_per_frame: bool = False):
        self.onnx_in = onnx_in
        if attention_window is not None and not 1 <= int(attention_window) <= 100000:
            raise UsageError(f"attention_window must be 1..100000 frames, got {attention_window}")
        self.attention_window = None if attention_window is None else int(attention_window)
        self.attention_per_frame = bool(attention_per_frame)
        self.audio_output = audio_output
        self.out = Path(out)
        self.sample_rate_hz = sample_rate_hz
        self.hop_samples = hop_samples
        self.delay_samples = delay_samples
        self.name = name
        self.time_axes = dict(time_axes or {})
        self.frames_per_hop = None if frames_per_hop is None else int(frames_per_hop)
        self.proof_inputs = proof_inputs
        self.atol = float(atol)
        self.contract: StreamContract | None = None

    def _load(self) -> tuple[Any, Any, Path]:
        if isinstance(self.onnx_in, (list, tuple)):
            from cosyedge.surgery.merge import merge_models

            srcs = [Path(p) for p in self.onnx_in]
            for src in srcs:
                check_not_input(src, self.out)
            if len(srcs) > 1:
                model = merge_models(srcs)
                return gs.import_onnx(model), model, srcs[0]
            self.onnx_in = srcs[0]
        src = resolve_artifact(self.onnx_in)
        check_not_input(src, self.out)
        graph, model = io.load_graph(src)
        return graph, model, src

    def call_impl(self) -> Path:
        """Run the surgery and the proof now; returns the stream ONNX path (errors: class doc)."""
        check_numbers(sample_rate_hz=self.sample_rate_hz, hop_samples=self.hop_samples,
                      delay_samples=self.delay_samples, atol=self.atol)
        check_writable(self.out)
        if self.frames_per_hop is not None and not 1 <= self.frames_per_hop <= (self.hop_samples or MAX_HOP):
            raise UsageError(f"frames_per_hop (--frames-per-hop) {self.frames_per_hop} must be in 1.."
                             f"{self.hop_samples or MAX_HOP} (at most one frame per sample of the hop)")
        check_name(self.name)
        graph, model, src = self._load()
        with LOG.stage(f"streamify {src} -> {self.out}"):
            fields = _contract_fields(model, str(src), sample_rate_hz=self.sample_rate_hz,
                                      hop_samples=self.hop_samples, delay_samples=self.delay_samples,
                                      name=self.name)
            hop = int(fields["hop_samples"])
            first = graph.inputs[0] if graph.inputs else None
            if first is None or not graph.outputs:
                raise ArtifactError(f"{src} has no inputs or no outputs (an empty or truncated ONNX?)")
            try:
                axes0 = _input_time_axes(graph, self.time_axes, str(src))
            except UsageError as err:
                raise _already_streams(model, src, self.out, fields, err) or err from None
            time_axes = dict(self.time_axes)
            wrapped = _add_channel_axis(graph, axes0, str(src)) if self.frames_per_hop is None else None
            if wrapped:  # not asked for features: an (N, T) waveform streams as (N, 1, T)
                time_axes, axes0 = wrapped, wrapped
            frames_per_hop = 1 if self.frames_per_hop is None else self.frames_per_hop
            shape0 = list(first.shape or [])
            audio = _is_audio(shape0, axes0[first.name])  # (N, 1, T), whether or not --time-axis named it
            hop_ticks = hop if audio else frames_per_hop
            if audio and frames_per_hop != 1:
                LOG.warning("%s: frames_per_hop %d ignored: input '%s' %s is a waveform, chunked in samples (%d per "
                            "hop); frames_per_hop is for feature inputs", src, frames_per_hop, first.name,
                            shape0, hop)
            if hop % hop_ticks:
                raise UsageError(f"hop_samples {hop} is not a multiple of frames_per_hop {hop_ticks}")
            try:
                sg = streamify_graph(graph, hop_ticks=hop_ticks, time_axes=time_axes, where=str(src),
                                     hop_label="hop_samples" if audio else "frames_per_hop",
                                     attention_window=self.attention_window,
                                     attention_per_frame=self.attention_per_frame,
                                     samples_per_tick=hop // hop_ticks)
            except UsageError as err:
                adopt = _already_streams(model, src, self.out, fields, err)
                if adopt is not None:
                    raise adopt from None
                if audio or hop_ticks != 1 or not _waveform_like(shape0, axes0[first.name]):
                    raise
                raise UsageError(f"{err}; note: input '{first.name}' {shape0} was read as features at 1 frame per "
                                 f"hop (only (N, 1, T) is read as a waveform, and (N, T) when --frames-per-hop is not "
                                 f"given): if it is a waveform (N, T) or (N, channels, T), give --frames-per-hop {hop} "
                                 f"(its samples per hop)") from None
            for note in dict.fromkeys(x.rounding for x in sg.walker.attention.sites if x.rounding):
                LOG.warning("%s: --attention-window %d: %s", src, self.attention_window, note)
            if self.attention_window and not any(x.original != x.pattern for x in sg.walker.attention.sites):
                LOG.warning("%s: --attention-window %d changes nothing: no attention in the model has an unlimited "
                            "left context (%s)", src, self.attention_window,
                            "; ".join(f"{x.node}: {x.pattern.describe()}" for x in sg.walker.attention.sites)
                            or "it has no attention")
            per_tick = hop // hop_ticks
            in_names = [i.name for i in sg.inputs]
            want_in, want_out = fields.get("input"), self.audio_output or fields.get("output")
            if self.audio_output is not None and self.audio_output not in [o.name for o in sg.outputs]:
                raise UsageError(f"--audio-output '{self.audio_output}' is not an output of {src} (outputs: "
                                 f"{[o.name for o in sg.outputs]})")
            audio_out = _pick_audio_output(sg.outputs, str(src)) if not want_out else want_out
            if want_in and want_in not in in_names or want_out and want_out not in [o.name for o in sg.outputs]:
                raise UsageError(f"{src}: metadata names input '{want_in}' / output '{want_out}', the graph has "
                                 f"inputs {in_names} and outputs {[o.name for o in sg.outputs]}")
            contract = StreamContract(
                input=want_in or in_names[0], output=want_out or audio_out,
                sample_rate_hz=int(fields["sample_rate_hz"]), hop_samples=hop,
                total_stride=sg.stride_ticks * per_tick,
                delay_samples=int(fields.get("delay_samples") or 0) + int(sg.delay_ticks * per_tick),
                states=sg.states, name=str(fields.get("name")
                                                      or io.model_stem(src, (".onnx", ".full", ".stream"))),
                inputs=sg.inputs, outputs=sg.outputs,
                attention=[site.info() for site in sg.walker.attention.sites],
                max_stream_samples=sg.walker.positions.max_ticks[0] * per_tick if sg.walker.positions.max_ticks else 0,
            )
            if sg.walker.positions.max_ticks:
                LOG.info("positions: %s: a stream may last %d samples (%.1f s) at most, as the full-sequence model",
                         sg.walker.positions.max_ticks[1], contract.max_stream_samples,
                         contract.max_stream_samples / contract.sample_rate_hz)
            new = io.graph_to_model(graph, like=model)
            contract.write_to_onnx(new)
            new = io.finalize_model(new, where=str(src))
            repaired = check_repaired_copy(model, sg, contract, atol=self.atol, where=str(src),
                                           given=self.time_axes)
            contract.proof = prove_stream(sg.full_model, new, contract, sg, inputs=self.proof_inputs,
                                          atol=self.atol, where=str(src))
            if repaired:
                contract.proof["repaired"] = repaired
            contract.write_to_onnx(new)
            io.save_model(new, self.out)
            LOG.info("%s, total stride %s, delay %s (%d from the graph), %s", plural(len(sg.states), "state"),
                     plural(contract.total_stride, "sample"), plural(contract.delay_samples, "sample"),
                     int(sg.delay_ticks * per_tick), ", ".join(f"{s.input}{s.shape[1:]}" for s in sg.states))
            LOG.info("state per stream: %s (%s)", plural(contract.state_bytes, "byte"),
                     ", ".join(f"{k} {v}" for k, v in _bytes_by_kind(contract).items()))
            for a in contract.attention:
                LOG.info("attention at %s: %s, key/value cache %s, %s%s", a["node"], a["pattern"],
                         plural(a["cache_frames"], "frame"), _attention_lookahead(a),
                         f" (bounded from {a['bounded_from']})" if "bounded_from" in a else "")
        self.contract = contract
        return self.out


def streamify(in_onnx: Any, out_onnx: str | Path, *, sample_rate_hz: int | None = None,
              hop_samples: int | None = None, delay_samples: int | None = None,
              name: str | None = None, time_axes: dict[str, int] | None = None, frames_per_hop: int | None = None,
              proof_inputs: dict | None = None, atol: float = ATOL, audio_output: str | None = None,
              attention_window: int | None = None, attention_per_frame: bool = False) -> StreamContract:
    """Function twin of :class:`StatefulOnnxFromOnnx`: rewrite ``in_onnx`` into a proved stream ``out_onnx``.

    Args:
        in_onnx (str | Path | Stage | list): Full-sequence ONNX (or a stage producing it, or several paths
            forming one model).
        out_onnx (str | Path): Destination stream ONNX.
        sample_rate_hz (int | None): Required when ``in_onnx`` has no cosyedge metadata.
        hop_samples (int | None): Required when ``in_onnx`` has no cosyedge metadata.
        delay_samples (int | None): Delay beyond the graph's own look-ahead; defaults to the metadata value or 0.
        name (str | None): Defaults to the metadata value or the file stem.
        time_axes (dict[str, int] | None): Time axis by input name where the shape does not tell.
        frames_per_hop (int | None): Frames per hop of feature inputs (default 1; see :class:`StatefulOnnxFromOnnx`
            for an (N, T) waveform).
        proof_inputs (dict | None): Inputs for the proof (default: real speech / seeded values).
        atol (float): Proof tolerance relative to the peak output (:func:`cosyedge.surgery.proof.tolerance`).
        audio_output (str | None): The waveform output 'run' writes (see :class:`StatefulOnnxFromOnnx`).
        attention_window (int | None): Bound attention with unlimited left context to this many frames (changes the
            model; the proof compares with the bounded full graph, :mod:`cosyedge.surgery.rules.attention`).
        attention_per_frame (bool): Stream chunked attention at a hop below its chunk: each query waits ``chunk - 1``
            frames for the end of its chunk (that much more delay); default: the hop must hold whole chunks.
    Returns:
        StreamContract: the contract written into ``out_onnx``'s metadata (states, I/O, strides, proof).
    Raises:
        ArtifactError, UsageError, AccuracyError: see :class:`StatefulOnnxFromOnnx`.
    """
    stage = StatefulOnnxFromOnnx(in_onnx, out_onnx, sample_rate_hz=sample_rate_hz, hop_samples=hop_samples,
                                 delay_samples=delay_samples, name=name, time_axes=time_axes,
                                 frames_per_hop=frames_per_hop, proof_inputs=proof_inputs, atol=atol,
                                 audio_output=audio_output, attention_window=attention_window,
                                 attention_per_frame=attention_per_frame)
    stage()
    return stage.contract
