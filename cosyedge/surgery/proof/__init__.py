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

Every proof also measures the full graph's true look-ahead by future perturbation
(:func:`cosyedge.surgery.proof.lookahead.measure_lookahead`: change the input from tick ``k`` on, for several ``k``,
and find the first output frame that changes), so the stream's delay is checked against the smallest delay at which
any stream could equal the full graph.

The package holds every proof: this module the chunk-by-chunk comparison, the bisection and the proof inputs;
:mod:`.lookahead` the look-ahead measurement; :mod:`.stream` streamify's proof (the chunks, the tables' limits, the
repaired copy, the ``--attention-window`` deviation); :mod:`.adopt` adopt's proof (a graph that already streams has
no full-sequence twin, so its reference is the original graph's own state loop, :func:`run_state_loop`, hop by hop,
on real speech). Every proof takes its inputs from here (:func:`proof_inputs`, :func:`demo_audio`,
:func:`demo_audio_rows`) and streams through :func:`cosyedge.runtime.loop.stream`.

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

    path = Path(__file__).resolve().parents[2] / "assets" / "demo" / "noisy.wav"
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


# ---------------------------------------------------------------- a graph's own state loop, and the error
def run_state_loop(sess: Any, feed: dict[str, np.ndarray], chunk: int, states: list[tuple[str, str, np.ndarray]],
                   outputs: list[str] | dict[str, int], zero: set | None = None, *, axes: dict[str, int] | None = None,
                   chunks: dict[str, int] | None = None, call: str | None = None) -> dict[str, np.ndarray]:
    """Stream ``feed`` through a graph with its own state loop: each call's state outputs feed the next call (a
    recipe's check, adopt's reference and its proof).

    Args:
        sess (onnxruntime.InferenceSession): The graph.
        feed (dict[str, np.ndarray]): Full-length inputs by name, batch first (an audio input float32 (B, 1, L), L a
            multiple of ``chunk``).
        chunk (int): Ticks per call of the first input (samples for audio).
        states (list[tuple[str, str, np.ndarray]]): (input, output, initial value) per state pair.
        outputs (list[str] | dict[str, int]): Outputs to collect, concatenated along their last axis, or along the
            given time axis by name.
        zero (set | None): State inputs reset to their initial value before every call (the carry test).
        axes (dict[str, int] | None): Time axis by input name (default: the last axis of every input).
        chunks (dict[str, int] | None): Frames per call by input name (with ``axes``; default ``chunk``).
        call (str | None): What a call is, for the error (default: "a chunk of N samples").
    Returns:
        dict[str, np.ndarray]: by output name.
    Raises:
        ArtifactError: ONNX Runtime fails on a call (first line of its message).
    """
    names = [o.name for o in sess.get_outputs()]
    call = call or f"a chunk of {plural(chunk, 'sample')}"

    def error(err: Exception, _k: int) -> ArtifactError:
        return ArtifactError(f"ONNX Runtime fails on {call} ({first_line(err)})")

    out_axes = dict(outputs) if isinstance(outputs, dict) else {o: -1 for o in outputs}
    where = {} if axes is None else {"axes": axes, "chunks": chunks}
    got = loop.stream(lambda feeds: dict(zip(names, sess.run(None, feeds))), None, dict(feed), chunk,
                      states={i: v for i, _o, v in states}, pairs=[(i, o) for i, o, _v in states],
                      zero=zero or (), outputs=list(out_axes), on_error=error, **where)
    return {o: np.concatenate([c[o] for c in got], axis=a) for o, a in out_axes.items()}


def max_err(a: np.ndarray, b: np.ndarray, *, same_shape: bool = False) -> tuple[float, float, float]:
    """(max abs error, SNR dB (capped at 200), peak |a|) of ``b`` against ``a`` over their common length (last axis).

    Args:
        a, b (np.ndarray): Reference and result.
        same_shape (bool): Compare the whole arrays, which must have one shape (adopt's proof): another shape is an
            infinite error at -200 dB. Its SNR goes through numpy's log10, as adopt's contracts record it (it can
            differ from ``math.log10`` in the last bit, which streamify's contracts use).
    """
    if same_shape and a.shape != b.shape:
        return float("inf"), -200.0, float(np.abs(a).max()) if a.size else 0.0
    n = min(a.shape[-1], b.shape[-1])
    a, b = a[..., :n].astype(np.float64), b[..., :n].astype(np.float64)
    e = b - a
    e2, s2 = float((e ** 2).sum()), float((a ** 2).sum())
    log10 = np.log10 if same_shape else math.log10
    snr = 200.0 if e2 == 0 else min(200.0, 10 * log10(max(s2, 1e-300) / e2))
    return float(np.abs(e).max()) if e.size else 0.0, float(snr), float(np.abs(a).max()) if a.size else 0.0


# the look-ahead measurement, re-exported (its module imports this one)
from cosyedge.surgery.proof.lookahead import (Lookahead, first_change, measure_lookahead,  # noqa: E402,F401
                                              perturbation_starts, perturbed)
