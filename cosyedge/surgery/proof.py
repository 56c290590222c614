"""Proof that a stream graph computes what its full-sequence graph computes, chunk by chunk.

Every streamify run ends here before anything is written. The full-sequence graph runs once on an input
of ``L`` ticks; the stream graph runs on the same input cut into chunks of the smallest allowed length
(the total stride), of one hop (what ``cosyedge run`` uses) and of a larger one, starting from the contract's
initial states and feeding every ``state_out`` back. Each chunk runs as ``cosyedge run`` runs it (outputs
bound at the contract's shapes, :class:`cosyedge.runtime.ort.BoundRunner`), so a graph whose declared output
shape cannot hold a chunk is refused here, not later by ``run``. Each output of the stream, shifted by its delay, must equal the full output on the
frames both have: max abs error <= ``atol * max(peak, 1e-3)`` (:func:`tolerance`: relative to the full output's
own level, so a quiet output is held to its own scale, not to full scale). Waveform inputs get real speech (the bundled
demo recording, noise and speech, resampled to the model rate), other inputs seeded Gaussian values; ``L``
covers at least 8 receptive fields of the stateful layers and 64 of the largest chunks, so a norm or sum
over time that is exact on the first chunk (a cumulative norm) still shows.

On a mismatch the error is bisected: every tensor that exists in both graphs is compared at its own delay
and the first one in graph order whose error exceeds the tolerance is named (as ``compare --mark-all`` does
for precision).

Every proof also measures the full graph's true look-ahead by future perturbation (:func:`measure_lookahead`:
change the input from tick ``k`` on, for several ``k``, and find the first output frame that changes), so the
stream's delay is checked against the smallest delay at which any stream could equal the full graph.

Adopt's proof (:func:`cosyedge.surgery.adopt.feeds.prove`) uses pieces of this module: a graph that already streams
has no full-sequence twin, so its reference is the original graph's own state loop (:func:`run_state_loop`), hop by
hop, on real speech. Both proofs take their inputs from this module (:func:`proof_inputs`,
:func:`demo_audio`, :func:`demo_audio_rows`) and stream through :func:`cosyedge.runtime.loop.stream`.

Source: sonos/tract ``pulse`` tests (pulsed == full model after the delay).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.errors import AccuracyError, ArtifactError, UsageError, first_line
from cosyedge.log import plural
from cosyedge.runtime import loop
from cosyedge.runtime.ort import BoundRunner, chunk_output_buffers, session_from_onnx
from cosyedge.surgery.facts import mark_all_outputs

ATOL = 1e-4
"""float: default tolerance, relative to the peak |full output| (:func:`tolerance`)."""

LEVEL_FLOOR = 1e-3
"""float: the level (peak |full output|, -60 dB full scale) below which the tolerance stops shrinking: an output
quieter than that is held to ``atol * 1e-3`` absolute, about float32 rounding of unit-level values."""


def tolerance(peak: float, atol: float) -> float:
    """Largest max abs error (float) the proof accepts for a tensor whose full-sequence peak |value| is ``peak``:
    ``atol * max(peak, LEVEL_FLOOR)``. Relative to the tensor's own level, so a stream 400x louder than a quiet
    full output (peak 3.7e-6) fails as it does for a loud one; above a peak of 1 this is the former
    ``atol * max(1, peak)``.

    Args:
        peak (float): Peak |full-sequence value| (>= 0).
        atol (float): Relative tolerance (> 0).
    """
    return atol * max(peak, LEVEL_FLOOR)


def session(model: Any) -> Any:
    """An ONNX Runtime CPU session of ``model`` (onnx.ModelProto) for proofs: one thread, full graph
    optimisation, fatal-only logging (errors come back as one line)."""
    return session_from_onnx(model, threads=1, inter_threads=1, log_severity=4)


def ort_reason(err: BaseException, limit: int = 240) -> str:
    """ONNX Runtime's error, shortened to one readable line (str): ``<Op> node '<name>': <status message>`` without
    the ``[ONNXRuntimeError] : 1 : FAIL : Non-zero status code ...`` preamble and the source-file/assertion prefix
    (``/onnxruntime_src/...:91 ReshapeHelper(...) cond was false.``); any other error: its first line with its type
    (:func:`cosyedge.errors.first_line`); cut at ``limit`` characters.

    Example: ``Reshape node 'gemm_input_reshape': The input tensor cannot be reshaped to the requested shape. Input
    shape:{1,402,24}, requested shape:{12,24}``.
    """
    import re

    node = re.search(r"while running (\w+) node\. Name:'([^']*)' Status Message: (.*)", " ".join(str(err).split()))
    if node:
        msg = re.sub(r"^\S+:\d+ .*? was false\.\s*", "", node.group(3))
        text = f"{node.group(1)} node '{node.group(2)}': {msg}"
    else:
        text = first_line(err)
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def tick_unit(contract: Any, short: bool = False) -> str:
    """What one input tick of a proof is (str), for messages: ``"samples"`` for a waveform first input, else
    ``"frames of '<input>'"`` (feature frames; ``"frames"`` when ``short``)."""
    first = contract.stream_inputs[0]
    if first.kind == "audio":
        return "samples"
    return "frames" if short else f"frames of '{first.name}'"


def count_ticks(contract: Any, n: int, short: bool = False) -> str:
    """``n`` input ticks in words (str): ``"1 sample"``, ``"160 samples"``, ``"3 frames of 'x'"``
    (:func:`tick_unit`)."""
    first = contract.stream_inputs[0]
    if first.kind == "audio":
        return plural(n, "sample")
    return plural(n, "frame") + ("" if short else f" of '{first.name}'")


def ticks_seconds(contract: Any, ticks: int) -> float:
    """Seconds (float) of audio that ``ticks`` input ticks (samples, or feature frames) stand for."""
    first = contract.stream_inputs[0]
    return ticks * contract.hop_samples / (first.frames_per_hop * contract.sample_rate_hz)


def stream_run(model: Any, contract: Any, inputs: dict[str, np.ndarray], chunk_ticks: int,
               ticks_per_frame: dict[str, Any], mark_all: bool = False, where: str = "") -> dict[str, np.ndarray]:
    """Stream ``inputs`` through a stream graph with ONNX Runtime; return every output concatenated
    over chunks along its time axis (with ``mark_all``, every intermediate tensor too, along the axis
    given by ``ticks_per_frame``'s keys).

    Each chunk runs as ``cosyedge run`` runs it (:class:`cosyedge.runtime.ort.BoundRunner`: inputs and outputs
    bound, outputs preallocated at the contract's shapes), so an output whose declared shape cannot hold a
    chunk (a time axis the export fixed) fails here as it would there. With ``mark_all`` (bisection only,
    intermediate tensors have no contract shape) each chunk is a plain ``sess.run``.

    Args:
        model (onnx.ModelProto): The stream graph.
        contract (StreamContract): Its contract (inputs, outputs, states).
        inputs (dict[str, np.ndarray]): Full-length inputs (batch 1), time on each input's time axis.
        chunk_ticks (int): Input ticks per chunk; the input length must be a multiple of it.
        ticks_per_frame (dict[str, tuple[int, Fraction]]): (time axis, frames per tick) by tensor name, for
            the tensors to collect.
        mark_all (bool): Collect intermediate tensors as well.
        where (str): Name (the source path) that starts messages ("": none).
    Returns:
        dict[str, np.ndarray]: by tensor name.
    Raises:
        ArtifactError: ONNX Runtime cannot load the stream graph, or cannot run it on a chunk of
            ``chunk_ticks`` (one line: ``where``, the chunk and ONNX Runtime's reason, :func:`ort_reason`).
    """
    m = mark_all_outputs(model)[0] if mark_all else model
    try:
        sess = session(m)
    except Exception as err:
        raise ArtifactError(f"{where + ': ' if where else ''}ONNX Runtime cannot load the stream graph "
                            f"({ort_reason(err)})") from None
    names = [o.name for o in sess.get_outputs()]
    want = [n for n in names if n in ticks_per_frame]
    io = {i.name: i for i in contract.stream_inputs}
    first = contract.stream_inputs[0]

    def error(err: Exception, _k: int) -> ArtifactError:
        return ArtifactError(f"{where + ': ' if where else ''}ONNX Runtime cannot run the stream graph on a chunk "
                             f"of {count_ticks(contract, chunk_ticks, short=True)} ({ort_reason(err)}), as "
                             "'cosyedge run' and 'build' would run it; nothing written")

    def buffers(feeds: dict) -> dict:  # what OrtStreamSession (cosyedge run / build) binds for this chunk
        samples = feeds[first.name].shape[first.time_axis] * contract.hop_samples // first.frames_per_hop
        return {**chunk_output_buffers(contract, sess, samples), **{s.output: s.zeros(1) for s in contract.states}}

    infer = (lambda feeds: dict(zip(names, sess.run(None, feeds)))) if mark_all else BoundRunner(sess, buffers)
    chunks = loop.stream(infer, contract, inputs, chunk_ticks, axes={name: io[name].time_axis for name in inputs},
                         outputs=want, on_error=error)
    return {n: np.concatenate([c[n] for c in chunks], axis=ticks_per_frame[n][0]) for n in want if chunks}


def _batch_two(full_sess: Any, full_model: Any, stream_model: Any, contract: Any, inputs: dict[str, np.ndarray],
               chunk: int, out_facts: dict, atol: float, where: str) -> None:
    """Run the stream graph with two streams in one batch (the proof input and the same input turned by a third of its
    length, a different signal) at ``chunk`` ticks and compare each row with the full graph at batch 2: a graph that
    baked the probes' batch of 1 into a shape (positions joined to the wrong axis, a Reshape to a fixed batch) fails
    here, before anything is written, not later in StreamPool.

    Raises:
        AccuracyError: a row differs from the full graph beyond tolerance (names the output).
        ArtifactError: ONNX Runtime cannot run one of the graphs at batch 2.
    """
    from cosyedge.errors import AccuracyError

    io = {i.name: i for i in contract.stream_inputs}
    two = {}
    for name, v in inputs.items():
        ax = io[name].time_axis if name in io else v.ndim - 1
        two[name] = np.concatenate([v, np.roll(v, v.shape[ax] // 3, axis=ax)], axis=0) if v.ndim else v
    try:
        full = dict(zip([o.name for o in full_model.graph.output], full_sess.run(None, two)))
    except Exception:  # a full graph that runs batch 1 only: nothing to compare at batch 2
        return
    names_full = [o.name for o in full_model.graph.output]
    alone = [dict(zip(names_full, full_sess.run(None, {k: v[r:r + 1] if v.ndim else v for k, v in two.items()})))
             for r in range(2)]  # each stream alone: what StreamPool must give it whatever shares its batch
    sess = session(stream_model)
    names = [o.name for o in sess.get_outputs()]

    def error(err: Exception, _k: int) -> ArtifactError:
        return ArtifactError(f"{where + ': ' if where else ''}ONNX Runtime cannot run the stream graph with two "
                             f"streams in a batch at chunks of {chunk} {tick_unit(contract, short=True)} "
                             f"({ort_reason(err)}), as StreamPool would run it; nothing written")

    chunks = loop.stream(lambda feeds: dict(zip(names, sess.run(None, feeds))), contract, two, chunk,
                         states={s.input: s.zeros(2) for s in contract.states},
                         axes={name: io[name].time_axis for name in two if name in io}, outputs=list(out_facts),
                         on_error=error)
    for name, (axis, _rate, delay) in out_facts.items():
        got = np.concatenate([c[name] for c in chunks], axis=axis)
        for row in range(2):
            mx, _, peak = compare_aligned(alone[row][name], full[name][row:row + 1], axis, 0)
            if mx > tolerance(peak, atol):
                raise AccuracyError(f"{where}: the model mixes the streams of a batch: output '{name}' row {row} of "
                                    f"the full graph at batch 2 differs from that stream run alone by {mx:.3g} (its "
                                    f"peak {peak:.3g}): a statistic over the batch (x.mean(0), BatchNorm in training "
                                    "mode)? StreamPool and Triton would mix their users; export it with each batch row "
                                    "on its own; nothing written")
            mx, snr, peak = compare_aligned(full[name][row:row + 1], got[row:row + 1], axis, delay)
            if mx > tolerance(peak, atol):
                raise AccuracyError(f"{where}: the stream graph differs from the full-sequence graph with two streams "
                                    f"in a batch (as StreamPool runs it): output '{name}' row {row} max abs error "
                                    f"{mx:.3g} (SNR {snr:.1f} dB) at chunks of {chunk} "
                                    f"{tick_unit(contract, short=True)}; batch 1 is exact, so a shape baked the "
                                    "probes' batch of 1; nothing written")


def compare_aligned(full: np.ndarray, stream: np.ndarray, axis: int, delay: int) -> tuple[float, float, float]:
    """(max abs error, SNR dB, peak |full|) of ``stream`` shifted by ``delay`` frames against ``full``,
    over the frames both have along ``axis`` (a negative delay: the stream starts ``-delay`` frames into the
    full tensor). SNR is capped at 200 dB (identical)."""
    s0, f0 = (delay, 0) if delay >= 0 else (0, -delay)  # an early tensor (delay < 0) lacks the pad's frames
    n = min(full.shape[axis] - f0, stream.shape[axis] - s0)
    if n <= 0:
        return float("inf"), -float("inf"), 0.0
    a = np.take(full, np.arange(f0, f0 + n), axis=axis).astype(np.float64)
    b = np.take(stream, np.arange(s0, s0 + n), axis=axis).astype(np.float64)
    err = b - a
    peak = float(np.abs(a).max()) if a.size else 0.0
    e2, s2 = float((err ** 2).sum()), float((a ** 2).sum())
    snr = 200.0 if e2 == 0 else min(200.0, 10 * math.log10(max(s2, 1e-300) / e2))
    return float(np.abs(err).max()) if err.size else 0.0, snr, peak


@dataclasses.dataclass
class ProofResult:
    """Outcome of :func:`prove`.

    Attributes:
        ok (bool): Every output within tolerance at every chunk length.
        rows (list[dict]): One per (output, chunk ticks): max_abs, snr_db, peak, ok.
        first_bad (str): When not ok: the first diverging tensor, its producer and error (one line).
        ticks (int): Input length used (ticks).
        full (dict[str, np.ndarray]): The full-sequence graph's outputs on the proof input, by name.
    """

    ok: bool
    rows: list
    first_bad: str = ""
    ticks: int = 0
    full: dict = dataclasses.field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-able summary for the contract metadata: worst max abs error and SNR, chunks, length."""
        return {"max_abs": max(r["max_abs"] for r in self.rows), "snr_db": min(r["snr_db"] for r in self.rows),
                "chunks_ticks": sorted({r["chunk_ticks"] for r in self.rows}), "ticks": self.ticks,
                "outputs": sorted({r["output"] for r in self.rows})}


def prove(full_model: Any, stream_model: Any, contract: Any, inputs: dict[str, np.ndarray], chunks: list[int],
          out_facts: dict[str, tuple[int, Any, int]], all_facts: dict[str, tuple[int, Any, int]] | None = None,
          order: list[str] | None = None, producers: dict[str, str] | None = None,
          atol: float = ATOL, where: str = "model", ran_at: tuple = ()) -> ProofResult:
    """Run both graphs and compare (module doc).

    Args:
        full_model (onnx.ModelProto): Full-sequence graph.
        stream_model (onnx.ModelProto): Stream graph.
        contract (StreamContract): The stream graph's contract.
        inputs (dict[str, np.ndarray]): Full inputs (batch 1), length a multiple of every chunk.
        chunks (list[int]): Chunk lengths to try, in input ticks.
        out_facts (dict[str, tuple]): (time axis, frames per tick, delay frames) per output.
        all_facts (dict[str, tuple] | None): The same for every tensor of the full graph (for bisection).
        order (list[str] | None): Tensor names in graph order (bisection).
        producers (dict[str, str] | None): "Op node 'name'" by tensor name (bisection).
        atol (float): Tolerance relative to the peak of each full output (:func:`tolerance`).
        where (str): Name (the source path) for messages.
        ran_at (tuple[int, ...]): Lengths (input ticks) the full graph already ran at (streamify's probes): a failure
            at a longer proof length is then not called a fixed time length (the export did not fix it; something
            inside, a table of fixed rows, is shorter than the proof).
    Returns:
        ProofResult: the rows; ``first_bad`` names the first diverging tensor when not ok.
    Raises:
        UsageError: the full-sequence graph gives NaN/Inf on the proof input (nothing to prove against); it
            fails at the proof's length in a way that shows a length the export
            fixed (:func:`cosyedge.surgery.facts.fixed_length_error`: one line with the export fix).
        ArtifactError: a graph cannot be run otherwise (one line: ``where``, the length, ONNX Runtime's reason).
    """
    from cosyedge.surgery.facts import fixed_length_error

    ticks = next(iter(inputs.values())).shape[contract.stream_inputs[0].time_axis]
    try:
        full_sess = session(full_model)
        full = dict(zip([o.name for o in full_model.graph.output], full_sess.run(None, inputs)))
    except Exception as err:
        fixed = fixed_length_error(full_model, err, where)
        if fixed is not None and ran_at and ticks > max(ran_at):
            raise UsageError(f"{where}: the full-sequence graph runs at {' and '.join(map(str, ran_at))} "
                             f"{tick_unit(contract, short=True)} but not at the proof's {ticks} (8 x the longest "
                             f"context; {getattr(fixed, 'what', 'a tensor of fixed length')}): a tensor of fixed "
                             "length inside it, such as a table of positions, is shorter than that input; bound the "
                             "context less (a smaller --attention-window) or give proof inputs; nothing "
                             "written") from None
        if fixed is not None:
            raise fixed from None
        if "allocate" in str(err).lower():
            raise UsageError(f"{where}: the proof runs the full-sequence graph on {ticks} "
                             f"{tick_unit(contract, short=True)} (8 x the longest context) and ONNX Runtime cannot "
                             f"allocate the memory (attention over {ticks} x {ticks} frames?): bound the context less "
                             "(a smaller --attention-window) or give proof inputs; nothing written") from None
        raise ArtifactError(f"{where}: ONNX Runtime cannot run the full-sequence graph on {ticks} "
                            f"{tick_unit(contract, short=True)} ({ort_reason(err)}), though it ran at the probe "
                            "lengths without graph optimisation: re-export with a dynamic time axis and shapes "
                            "computed from the input; nothing written") from None
    bad = [n for n in out_facts if not np.all(np.isfinite(full[n]))]
    if bad:
        raise UsageError(f"{where}: the full-sequence graph itself gives NaN/Inf in output '{bad[0]}' on the proof's "
                         f"real speech ({ticks} {tick_unit(contract, short=True)}), so there is nothing to prove the "
                         "stream against: make the model finite on speech (e.g. log of a non-positive value, "
                         "division by zero); nothing written")
    rows, ok, bad_chunk = [], True, None
    for chunk in chunks:
        got = stream_run(stream_model, contract, inputs, chunk, {n: f[:2] for n, f in out_facts.items()},
                         where=where)
        for name, (axis, _rate, delay) in out_facts.items():
            mx, snr, peak = compare_aligned(full[name], got[name], axis, delay)
            good = mx <= tolerance(peak, atol)
            rows.append({"output": name, "chunk_ticks": chunk, "max_abs": mx, "snr_db": snr, "peak": peak,
                         "ok": bool(good)})
            if not good and ok:
                ok, bad_chunk = False, chunk
    if ok:
        _batch_two(full_sess, full_model, stream_model, contract, inputs, min(chunks), out_facts, atol, where)
    result = ProofResult(ok, rows, ticks=ticks, full=full)
    if not ok and all_facts and order:
        result.first_bad = bisect(full_model, stream_model, contract, inputs, bad_chunk, all_facts, order,
                                  producers or {}, atol, where)
    return result


def bisect(full_model: Any, stream_model: Any, contract: Any, inputs: dict[str, np.ndarray], chunk: int,
           all_facts: dict, order: list[str], producers: dict[str, str], atol: float, where: str = "model") -> str:
    """Name the first tensor (graph order) whose streamed values differ from the full graph's beyond
    tolerance, with its producer and error (str; "" when none is found)."""
    from cosyedge.surgery.facts import run_all

    full = run_all(full_model, inputs)
    got = stream_run(stream_model, contract, inputs, chunk, {n: f[:2] for n, f in all_facts.items()},
                     mark_all=True, where=where)
    for name in order:
        if name not in got or name not in full or name not in all_facts:
            continue
        axis, _rate, delay = all_facts[name]
        if delay is None or not np.issubdtype(np.asarray(full[name]).dtype, np.floating):
            continue
        mx, snr, peak = compare_aligned(full[name], got[name], axis, delay)
        if not mx <= tolerance(peak, atol):
            return (f"first diverging tensor '{name}' (output of {producers.get(name, '?')}): max abs error "
                    f"{mx:.3g}, SNR {snr:.1f} dB at chunks of {chunk} {tick_unit(contract, short=True)}")
    return ""


# ---------------------------------------------------------------- look-ahead, measured
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
    Source: measured here (changing input frames from k on leaves output frames before k - L bit-identical).
    """
    from fractions import Fraction

    name0 = next(iter(in_axes))
    ticks = int(Fraction(inputs[name0].shape[in_axes[name0][0]]) / Fraction(in_axes[name0][1]))
    sess = sess or session(full_model)
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


# ---------------------------------------------------------------- proof inputs
def proof_inputs(contract: StreamContract, ticks: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for the proof: real speech for waveform inputs (the bundled demo recording, noisy, at the model
    rate, repeated to ``ticks`` samples), seeded N(0, 0.5^2) values for other inputs; batch 1.

    Args:
        contract (StreamContract): The stream contract (inputs, rate).
        ticks (int): Length of every time axis.
        seed (int): Seed for non-audio inputs.
    Returns:
        dict[str, np.ndarray]: by input name.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in contract.stream_inputs:
        shape = spec.concrete_shape(1, ticks)
        if spec.kind == "audio":
            feeds[spec.name] = demo_audio(contract.sample_rate_hz, ticks).reshape(shape)
        else:
            feeds[spec.name] = (0.5 * rng.standard_normal(shape)).astype(spec.dtype)
    return feeds


def demo_audio(rate: int, n: int) -> np.ndarray:
    """Real speech for proofs: the bundled demo recording (noisy speech) at ``rate``, repeated to ``n`` samples.

    Args:
        rate (int): Sample rate in Hz.
        n (int): Samples.
    Returns:
        np.ndarray: float32 (n,), range [-1, 1].
    Raises:
        ArtifactError: the bundled recording is missing or unreadable.
    """
    from cosyedge.audio import load_audio, to_model_input

    path = Path(__file__).resolve().parents[1] / "assets" / "demo" / "noisy.wav"
    x, sr = load_audio(path)
    x = to_model_input(x, sr, rate).reshape(-1)
    reps = -(-n // x.size)
    return np.tile(x, reps)[:n].astype(np.float32)


def demo_audio_rows(rate: int, n: int, batch: int = 1) -> np.ndarray:
    """Real speech (bundled demo recording at ``rate``) as float32 (batch, 1, n); row b is rolled and scaled so
    that the rows differ."""
    x = demo_audio(rate, n)
    rows = [x] + [0.6 * np.roll(x[::-1], 1234 * b) for b in range(1, batch)]
    return np.stack(rows)[:, None, :].astype(np.float32)


# ---------------------------------------------------------------- adopt: the graph's own state loop
def run_state_loop(sess: Any, audio: str, x: np.ndarray, chunk: int, states: list[tuple[str, str, np.ndarray]],
                   outputs: list[str], zero: set | None = None) -> dict[str, np.ndarray]:
    """Stream ``x`` through a graph with its own state loop: each chunk's state outputs feed the next chunk.

    Args:
        sess (onnxruntime.InferenceSession): The graph.
        audio (str): Audio input name.
        x (np.ndarray): float32 (B, 1, L), L a multiple of ``chunk``.
        chunk (int): Samples per call.
        states (list[tuple[str, str, np.ndarray]]): (input, output, initial value) per state pair.
        outputs (list[str]): Outputs to collect (concatenated along their last axis).
        zero (set | None): State inputs reset to their initial value before every chunk (the carry test).
    Returns:
        dict[str, np.ndarray]: by output name.
    Raises:
        ArtifactError: ONNX Runtime fails on a chunk (first line of its message).
    """
    names = [o.name for o in sess.get_outputs()]

    def error(err: Exception, _k: int) -> ArtifactError:
        return ArtifactError(f"ONNX Runtime fails on a chunk of {plural(chunk, 'sample')} ({first_line(err)})")

    chunks = loop.stream(lambda feeds: dict(zip(names, sess.run(None, feeds))), None, {audio: x}, chunk,
                         states={i: v for i, _o, v in states}, pairs=[(i, o) for i, o, _v in states],
                         zero=zero or (), outputs=outputs, on_error=error)
    return {o: np.concatenate([c[o] for c in chunks], axis=-1) for o in outputs}


def max_err(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, SNR dB (capped at 200), peak |a|) of b against a over their common length."""
    n = min(a.shape[-1], b.shape[-1])
    a, b = a[..., :n].astype(np.float64), b[..., :n].astype(np.float64)
    e = b - a
    e2, s2 = float((e ** 2).sum()), float((a ** 2).sum())
    snr = 200.0 if e2 == 0 else min(200.0, 10 * math.log10(max(s2, 1e-300) / e2))
    return float(np.abs(e).max()) if e.size else 0.0, snr, float(np.abs(a).max()) if a.size else 0.0
