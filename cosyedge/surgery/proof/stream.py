"""Streamify's proof: the stream graph == the full-sequence graph, chunk by chunk, before anything is written.

:func:`prove_stream` runs :func:`cosyedge.surgery.proof.prove` at the chunks of :func:`proof_chunks` (the smallest,
one hop, a larger one) on an input cut to what the model's tables allow, then measures the look-ahead
(:func:`cosyedge.surgery.proof.lookahead.check_lookahead`) and, for a model bounded by ``--attention-window``, how far
the bounded graph is from the original. :func:`check_repaired_copy` says when the graph proved is a repaired copy of
the one given (a time axis the export fixed, the exporter's value_info) and refuses a repair that changes results.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from cosyedge.artifacts import StreamContract
from cosyedge.errors import AccuracyError, UsageError
from cosyedge.log import LOG, plural
from cosyedge.surgery import proof
from cosyedge.surgery.proof import ATOL
from cosyedge.surgery.proof.lookahead import check_lookahead

if TYPE_CHECKING:
    from cosyedge.surgery.streamify import StreamGraph


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
        sg (StreamGraph): What :func:`cosyedge.surgery.streamify.streamify_graph` returned (facts and delays for the
            bisection).
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
    summary["lookahead"] = check_lookahead(full_model, inputs, res.full, contract, sg, where)
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
    (:func:`cosyedge.surgery.streamify._free_time_dims`), and the exporter's intermediate shapes (``value_info``, which
    hold the example's length; ONNX Runtime bakes them into fused nodes) are dropped. A repaired output shape changes
    only the stream graph: the line names it. When the graph as exported fails in ONNX Runtime at another length (it
    runs only at its trace length), the proof's full-sequence reference is the repaired copy: the copy is compared with
    the export at the trace length (the fixed length of an input, or of an output over its frames per tick) and the
    line says so, with the error; a copy that differs there is refused.

    Args:
        model (onnx.ModelProto): The graph as exported (loaded, weights inline).
        sg (StreamGraph): What :func:`cosyedge.surgery.streamify.streamify_graph` made (``repairs``,
            ``original_model``: the repaired copy).
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
