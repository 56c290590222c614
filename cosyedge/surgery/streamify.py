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
    Stage,
    StreamContract,
    StreamIO,
    check_name,
    check_not_input,
    check_writable,
    resolve_artifact,
)
from cosyedge.artifacts.task import to_write
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG, plural
from cosyedge.surgery import io, ops  # noqa: F401  (ops registers graph functions)
from cosyedge.surgery.given import (MAX_HOP, add_channel_axis, already_streams, check_numbers, contract_fields,
                                    input_time_axes, is_audio, np_name, pick_audio_output, waveform_like)
from cosyedge.surgery.proof import ATOL
from cosyedge.surgery.proof.stream import check_repaired_copy, proof_chunks, prove_stream  # noqa: F401

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
            else was repaired, by :func:`cosyedge.surgery.proof.stream.check_repaired_copy`.
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


def _free_time_dims(tensors: list, axes: dict[str, int], where: str, kind: str) -> list[tuple[str, str, int, int]]:
    """Make the time axis of each graph input or output in ``tensors`` symbolic where the export left it at a
    fixed length (``torch.onnx.export(dynamo=True)`` with ``dynamic_shapes`` on the input only keeps the output
    at the example's length): a stream graph runs on chunks of any multiple of the stride, and ONNX Runtime
    refuses a bound output whose declared fixed length differs ("Got invalid dimensions for output").
    Logs nothing: :func:`cosyedge.surgery.proof.stream.check_repaired_copy` reports every repair in one warning line.

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
    axes = input_time_axes(graph, time_axes, where)
    repairs = list(_free_time_dims(graph.inputs, axes, where, "input") or [])
    # Probe at multiples of the hop and, for waveforms, of 64 samples, so strides up to 64 are measured
    # exactly even when the hop is not a multiple of them (then refused below, naming the stride).
    quantum = math.lcm(hop_ticks, 64) if is_audio(list(graph.inputs[0].shape or []), axes[graph.inputs[0].name]) \
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
        kind = "audio" if is_audio(list(f.shape1), axes[name]) else "features"
        inputs.append(StreamIO(name, shape, np_name(values[0][name].dtype), axes[name], hop_ticks, 0, kind))
    outputs, delay_ticks = [], Fraction(0)
    for name in out_names:
        f = walker.facts[name]
        fph = f.rate * hop_ticks
        shape = [BATCH_DIM if i == walker.batch_axis(next(t for t in graph.outputs if t.name == name)) else
                 ("T" if i == f.axis else int(d)) for i, d in enumerate(f.shape1)]
        kind = ("audio" if inputs[0].kind == "audio" and fph == hop_ticks and is_audio(list(f.shape1), f.axis)
                else "features")
        dtype = np_name(values[0][name].dtype) if name in values[0] else "float32"
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
            (:func:`cosyedge.surgery.given.add_channel_axis`); given, such an input is read as features.
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
        task (str | None): The contract's task; None: the source's or guessed; ``""``: none (``task.to_write``).

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
            bounds (:func:`cosyedge.surgery.given.check_numbers`: rate 1000..384000 Hz, hop 1 sample..1 s, delay
            0..10 s, 0 < atol <= 1).
        AccuracyError: the proof failed (names the first diverging tensor); nothing is written.
    """

    def __init__(self, onnx_in: Any, out: str | Path, *, sample_rate_hz: int | None = None,
                 hop_samples: int | None = None, delay_samples: int | None = None, name: str | None = None,
                 time_axes: dict[str, int] | None = None, frames_per_hop: int | None = None,
                 proof_inputs: dict | None = None, atol: float = ATOL, audio_output: str | None = None,
                 attention_window: int | None = None, attention_per_frame: bool = False, task: str | None = None):
        self.onnx_in, self.task = onnx_in, task
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
            fields = contract_fields(model, str(src), sample_rate_hz=self.sample_rate_hz,
                                      hop_samples=self.hop_samples, delay_samples=self.delay_samples,
                                      name=self.name)
            hop = int(fields["hop_samples"])
            first = graph.inputs[0] if graph.inputs else None
            if first is None or not graph.outputs:
                raise ArtifactError(f"{src} has no inputs or no outputs (an empty or truncated ONNX?)")
            try:
                axes0 = input_time_axes(graph, self.time_axes, str(src))
            except UsageError as err:
                raise already_streams(model, src, self.out, fields, err) or err from None
            time_axes = dict(self.time_axes)
            wrapped = add_channel_axis(graph, axes0, str(src)) if self.frames_per_hop is None else None
            if wrapped:  # not asked for features: an (N, T) waveform streams as (N, 1, T)
                time_axes, axes0 = wrapped, wrapped
            frames_per_hop = 1 if self.frames_per_hop is None else self.frames_per_hop
            shape0 = list(first.shape or [])
            audio = is_audio(shape0, axes0[first.name])  # (N, 1, T), whether or not --time-axis named it
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
                adopt = already_streams(model, src, self.out, fields, err)
                if adopt is not None:
                    raise adopt from None
                if audio or hop_ticks != 1 or not waveform_like(shape0, axes0[first.name]):
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
            audio_out = pick_audio_output(sg.outputs, str(src)) if not want_out else want_out
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
            contract.task = to_write(self.task, contract, {p.key: p.value for p in model.metadata_props}, str(src))
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
              attention_window: int | None = None, attention_per_frame: bool = False,
              task: str | None = None) -> StreamContract:
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
        task (str | None): The contract's task (see :class:`StatefulOnnxFromOnnx`).
    Returns:
        StreamContract: the contract written into ``out_onnx``'s metadata (states, I/O, strides, proof).
    Raises:
        ArtifactError, UsageError, AccuracyError: see :class:`StatefulOnnxFromOnnx`.
    """
    stage = StatefulOnnxFromOnnx(in_onnx, out_onnx, sample_rate_hz=sample_rate_hz, hop_samples=hop_samples,
                                 delay_samples=delay_samples, name=name, time_axes=time_axes,
                                 frames_per_hop=frames_per_hop, proof_inputs=proof_inputs, atol=atol,
                                 audio_output=audio_output, attention_window=attention_window,
                                 attention_per_frame=attention_per_frame, task=task)
    stage()
    return stage.contract
