"""The model as streamify is given it: which axis is time, whether the input is audio, the contract's numbers.

Before the walk streamify reads what the caller and the graph say: the time axis of every input
(:func:`input_time_axes`: symbolic dims, ``--time-axis``, a refusal naming the input otherwise), whether the first
input is a waveform (:func:`is_audio`; an (N, T) one gets a channel axis, :func:`add_channel_axis`), the contract's
numbers from the metadata or the caller, bounded (:func:`contract_fields`, :func:`check_numbers`), whether a graph
that will not stream already carries its own state (:func:`already_streams`: adopt's advice) and which output is the
audio ``run`` writes (:func:`pick_audio_output`). Adopt bounds its numbers with the same :func:`check_numbers`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import META_PREFIX, StreamContract
from cosyedge.errors import UsageError
from cosyedge.log import LOG

gs = lazy_import("onnx_graphsurgeon")


def input_time_axes(graph: Any, given: dict[str, int] | None, where: str = "") -> dict[str, int]:
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
    dtype = np_name(t.dtype)
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


def already_streams(model: Any, src: Any, out: Any, fields: dict, err: UsageError) -> UsageError | None:
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


def waveform_like(shape: list, axis: int) -> bool:
    """Whether an input of ``shape`` with time on ``axis`` may be a waveform streamify reads as features: (N, T),
    or (N, C, T) with C of 2 (stereo) — for the hint to give ``--frames-per-hop`` (bool)."""
    return (len(shape) == 2 and axis == 1) or (len(shape) == 3 and axis == 2 and shape[1] == 2)


def is_audio(shape: list, axis: int) -> bool:
    return len(shape) == 3 and axis == 2 and shape[1] == 1


def add_channel_axis(graph: Any, axes: dict[str, int], where: str) -> dict[str, int] | None:
    """Stream a waveform without a channel axis as one with it: when the graph's only input is float (N, T) with time
    on axis 1, it becomes (N, 1, T) followed by a ``Squeeze`` of axis 1, and every output (N, T') of rank 2 with a
    symbolic axis 1 gets an ``Unsqueeze`` to (N, 1, T'), so the stream graph takes and gives what every runtime
    streams (a waveform (N, 1, T) chunked in samples) and its proof runs on real speech. The graph is edited in place
    (the names of inputs and outputs are kept); one info line says so.

    Args:
        graph (gs.Graph): The full-sequence graph.
        axes (dict[str, int]): Time axis by input name (:func:`input_time_axes`).
        where (str): Name for messages.
    Returns:
        dict[str, int] | None: the new time axes (the input's is 2), or None when the graph is left as it is (more
        than one input, another rank or time axis, an integer input, an input that is also an output).
    """
    if len(graph.inputs) != 1:
        return None
    t = graph.inputs[0]
    shape = list(t.shape or [])
    if len(shape) != 2 or axes.get(t.name) != 1 or t in graph.outputs or np.dtype(np_name(t.dtype)).kind != "f":
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


def np_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return "float32"


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


def contract_fields(model: Any, where: str, *, sample_rate_hz, hop_samples, delay_samples, name) -> dict:
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


def pick_audio_output(outputs: list, where: str) -> str:
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