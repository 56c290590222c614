"""The look-ahead of a full-sequence graph, measured by future perturbation, and streamify's check of its delay.

:func:`measure_lookahead` changes the input from tick ``k`` on, for several ``k`` (:func:`perturbation_starts`,
:func:`perturbed`), and finds the first output frame that changes (:func:`first_change`): the graph's true
look-ahead, the smallest delay at which any stream could equal it. :func:`check_lookahead` compares it, in every
streamify proof, with the delay the walker gave the stream.

Source: sonos/tract ``pulse`` (a look-ahead is a delay that adds up along the path).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.log import LOG, plural
from cosyedge.surgery import proof

if TYPE_CHECKING:
    from cosyedge.surgery.streamify import StreamGraph


@dataclasses.dataclass
class Lookahead:
    """What :func:`measure_lookahead` found for one output.

    Attributes:
        frames (int | None): Look-ahead in the output's frames, ``max over k of (k r - first changed frame)``
            (negative: the output lags its input; None: no perturbation changed the output).
        points (list[tuple[int, int]]): (first perturbed input tick k, first output frame that changed) per k that
            changed something.
    """

    frames: int | None
    points: list


def perturbation_starts(ticks: int, stride: int, count: int = 4) -> list[int]:
    """Input ticks (list[int], sorted, distinct) from which :func:`measure_lookahead` changes the input: ``count``
    points well inside ``ticks`` (from a fifth to four fifths of it), each a multiple of ``stride`` (a chunk
    boundary the stream can have, so every phase of a strided model is the same)."""
    out = set()
    for j in range(count):
        k = int(ticks * (0.2 + 0.6 * j / max(1, count - 1))) // stride * stride
        if 0 < k < ticks:
            out.add(k)
    return sorted(out)


def perturbed(inputs: dict[str, np.ndarray], axes: dict[str, tuple[int, Any]], k: int,
              nan: bool = False) -> dict[str, np.ndarray]:
    """``inputs`` with every time-running input changed from input tick ``k`` on (its frame ``k x frames per
    tick``): the same input turned by a third of its length (other real speech for a waveform), mixed
    ``0.7 alt - 0.3 x`` for floats (so that neither a sign nor a scale hides the change); integers are turned only.
    Frames before ``k`` are bit-identical.

    Args:
        inputs (dict[str, np.ndarray]): Proof inputs (batch 1).
        axes (dict[str, tuple[int, Fraction]]): (time axis, frames per tick) of each input that runs over time.
        k (int): First changed input tick.
        nan (bool): Float inputs become NaN from tick ``k`` on instead (:func:`measure_lookahead` with ``nan``).
    """
    out = dict(inputs)
    for name, (axis, rate) in axes.items():
        v = np.asarray(inputs[name])
        n = v.shape[axis]
        start = int(k * rate)
        alt = np.roll(v, max(1, n // 3), axis=axis)
        if np.issubdtype(v.dtype, np.floating):
            alt = np.full_like(v, np.nan) if nan else (0.7 * alt - 0.3 * v).astype(v.dtype)
        idx = [slice(None)] * v.ndim
        idx[axis] = slice(start, None)
        w = v.copy()
        w[tuple(idx)] = alt[tuple(idx)]
        out[name] = w
    return out


def first_change(a: np.ndarray, b: np.ndarray, axis: int) -> int | None:
    """First index along ``axis`` where ``a`` and ``b`` differ at all (bit for bit; NaN equal to NaN), else None."""
    diff = ~((a == b) | (np.isnan(a) & np.isnan(b)) if np.issubdtype(np.asarray(a).dtype, np.floating) else a == b)
    other = tuple(i for i in range(diff.ndim) if i != axis)
    hit = np.flatnonzero(diff.any(axis=other) if other else diff)
    return int(hit[0]) if hit.size else None


def measure_lookahead(full_model: Any, inputs: dict[str, np.ndarray], full: dict[str, np.ndarray],
                      in_axes: dict[str, tuple[int, Any]], out_axes: dict[str, tuple[int, Any]], stride: int,
                      sess: Any = None, nan: bool = False, phases: int = 1) -> dict[str, Lookahead]:
    """The true look-ahead of a full-sequence graph, measured by future perturbation: for several input ticks ``k``
    well inside the input (:func:`perturbation_starts`), change every input from tick ``k`` on
    (:func:`perturbed`), run the full graph and find the first output frame ``f(k)`` that changes; an output ``r``
    frames per tick ahead of its input by ``L`` frames changes first at ``k r - L``, so ``L = max over k of
    (k r - f(k))``. A stream that emits ``n r`` frames after ``n`` ticks with delay ``D`` holds full frames
    ``< n r - D``, which must not depend on ticks ``>= n``: the smallest delay at which the stream can equal the full
    graph is ``max(0, L)``.

    Args:
        full_model (onnx.ModelProto): The full-sequence graph.
        inputs (dict[str, np.ndarray]): Proof inputs (batch 1, real speech or seeded features).
        full (dict[str, np.ndarray]): The full graph's outputs on ``inputs``.
        in_axes (dict[str, tuple[int, Fraction]]): (time axis, frames per tick) of each streaming input.
        out_axes (dict[str, tuple[int, Fraction]]): (time axis, frames per tick) of each output to measure.
        stride (int): Total stride (ticks); every ``k`` is a multiple of it.
        sess (onnxruntime.InferenceSession | None): A session of ``full_model`` (made when None).
        nan (bool): Change the float inputs to NaN (:func:`perturbed`): the **reach** of the future through the graph's
            ops, whatever the size of their weights (every arithmetic op carries a NaN forward), where a change of
            values can vanish below float32 resolution (15 stacked 3-tap convs: the last taps' product is about 1e-8
            of the output). An upper bound where ops only mask (an additive -inf mask carries NaN; Where does not).
        phases (int): Also change the input from the ``phases - 1`` strides after the first start (a look-ahead that
            depends on the phase, as a chunked attention's: a query at a chunk's start looks ``chunk - 1`` frames
            ahead, one at its end none).
    Returns:
        dict[str, Lookahead]: by output name.
    Changing input frames from k on leaves output frames before k - L bit-identical (a look-ahead of L).
    """
    from fractions import Fraction

    name0 = next(iter(in_axes))
    ticks = int(Fraction(inputs[name0].shape[in_axes[name0][0]]) / Fraction(in_axes[name0][1]))
    sess = sess or proof.session(full_model)
    names = [o.name for o in full_model.graph.output]
    points: dict[str, list] = {o: [] for o in out_axes}
    starts = perturbation_starts(ticks, stride)
    starts = sorted(set(starts) | {starts[0] + i * stride for i in range(1, phases) if starts and
                                   starts[0] + i * stride < ticks})
    for k in starts:
        got = dict(zip(names, sess.run(None, perturbed(inputs, in_axes, k, nan=nan))))
        for o, (axis, _rate) in out_axes.items():
            f = first_change(np.asarray(full[o]), np.asarray(got[o]), axis)
            if f is not None:
                points[o].append((k, f))
    out = {}
    for o, (_axis, rate) in out_axes.items():
        la = [math.ceil(k * Fraction(rate)) - f for k, f in points[o]]
        out[o] = Lookahead(max(la) if la else None, points[o])
    return out


def check_lookahead(full_model: Any, inputs: dict, full: dict, contract: StreamContract, sg: StreamGraph,
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
