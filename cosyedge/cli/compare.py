"""``cosyedge compare`` and ``cosyedge check`` (thin click layer over :mod:`cosyedge.compare`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import FiniteFloat, log_opts, warn_threads_above_cpus


def _utterances(path, rate, limit):
    from cosyedge.compare.utterances import fixed_utterances, utterances_from

    return utterances_from(path, rate, limit) if path else fixed_utterances(rate)[:limit]


@click.command("compare")
@click.argument("reference", metavar="REF")
@click.argument("candidate", metavar="CANDIDATE")
@click.option("--mode", "modes", type=click.Choice(["teacher-forced", "free-running", "both"]), default="both",
              show_default=True, help="teacher-forced: the candidate gets the reference's states every chunk "
                                      "(per-step error); free-running: each carries its own (what a user hears).")
@click.option("--chunk-ms", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Chunk (ms), a multiple of the hop; teacher forcing happens every chunk. Default: the multiple "
                   "of the hop nearest 100 ms, or the one chunk a candidate takes (a graph with a fixed time axis).")
@click.option("--utterances", "utt_path", metavar="PATH", default=None,
              help="Folder (noisy/ + clean/) or manifest of real recordings. Default: the bundled demo "
                   "recording, noisy and clean.")
@click.option("--max-utterances", type=click.IntRange(min=1), default=None, help="Use the first N utterances.")
@click.option("--snr-db", type=FiniteFloat(min=-200, max=200), default=None,
              help="Override the minimum audio output SNR (dB, -200..200; 200 is the SNR of identical outputs).")
@click.option("--no-pesq", is_flag=True, help="Skip PESQ-WB (needs the 'pesq' package).")
@click.option("--mark-all", is_flag=True,
              help="Layer bisection: mark every tensor as an output and name the first whose error jumps.")
@click.option("--seconds", type=FiniteFloat(min=0, min_open=True, max=3600), default=2.0, show_default=True,
              help="--mark-all: audio streamed (s, at most 3600).")
@click.option("--jump-db", type=FiniteFloat(min=0, min_open=True, max=200), default=20.0, show_default=True,
              help="--mark-all: SNR drop across one node (dB) that counts as a jump.")
@click.option("--floor-db", type=FiniteFloat(min=-200, max=200), default=40.0, show_default=True,
              help="--mark-all: tensors at or above this SNR (dB) are never the jump.")
@click.option("--json", "json_path", metavar="FILE", default=None, help="Write the full result as JSON.")
@click.option("--threads", type=int, default=1, show_default=True, callback=warn_threads_above_cpus,
              help="ONNX Runtime threads per model.")
@log_opts
def compare(reference, candidate, modes, chunk_ms, utt_path, max_utterances, snr_db, no_pesq, mark_all, seconds,
            jump_db, floor_db, json_path, threads):
    """Compare CANDIDATE (engine folder or streaming ONNX) with REF on real speech, with Polygraphy.

    Both are streamed chunk by chunk through Polygraphy runners (ONNX Runtime; TensorRT engines on a GPU
    machine). Reports per output (audio and every state_out) the max and mean abs error and SNR (dB), per
    utterance PESQ-WB and SI-SNR against the clean speech and their differences. An output of one value per
    hop (a VAD's speech probability) is judged by its decisions instead: max abs difference, hops that cross
    0.5 and, for a VAD, whether the speech segments change (FAIL when they do; another such output fails
    when any hop crosses 0.5). Default tolerances
    follow the candidate's precision (fp32, fp16, int8, *-sparse; see cosyedge.compare.tolerances).
    Exit 1 when a tolerance is exceeded (each failure named), 2 for incompatible models, a CANDIDATE built
    from another model than REF (its manifest's parent SHA-256) or an engine that cannot run here (and for a noisy/clean pair of different sample rate or length). --mark-all names
    the first tensor whose error jumps (an SNR drop of --jump-db across one node, SNR below --floor-db).

    Example: cosyedge compare cosyedge/models/reference.stream.onnx engines/reference-int8-onnxruntime --mark-all
    """
    import dataclasses

    from cosyedge.artifacts import check_not_inputs, check_writable, write_json
    from cosyedge.compare.report import _jsonable
    from cosyedge.compare.core import MODES, default_chunk
    from cosyedge.compare.core import compare as run_compare
    from cosyedge.compare.models import check_compatible, check_lineage, check_reference, load_compare_model
    from cosyedge.compare.tolerances import tolerance_for
    from cosyedge.errors import RegressionError, UsageError

    if threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    if not mark_all:  # as 'run' refuses --device without mic: silently ignored, the user believes they applied
        from click.core import ParameterSource

        ctx = click.get_current_context()
        given = [f"--{name.replace('_', '-')}" for name in ("seconds", "jump_db", "floor_db")
                 if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        if given:
            raise UsageError(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to the layer "
                             f"bisection: add --mark-all")
    if json_path:
        check_writable(json_path)
        check_not_inputs(json_path, (reference, candidate, utt_path), "--json")
    ref = load_compare_model(reference)
    cand = load_compare_model(candidate)
    check_reference(ref, cand)
    check_lineage(cand, ref, f"candidate {cand.path}")
    check_compatible(ref, cand)
    chunk = default_chunk(ref, chunk_ms, (cand,))  # a candidate that runs one chunk length only sets it
    utts = _utterances(utt_path, ref.contract.sample_rate_hz, max_utterances)
    from cosyedge.compare.utterances import with_partners

    utts = with_partners(utts, ref.contract, str(ref.path), "cosyedge compare")  # several inputs: who feeds which
    tol = tolerance_for(cand.label)
    if snr_db is not None:
        tol = dataclasses.replace(tol, output_snr_db=snr_db)
    result = run_compare(ref, cand, utts, chunk=chunk, tolerance=tol,
                         modes=MODES if modes == "both" else (modes,), pesq=not no_pesq, threads=threads)
    c = ref.contract
    click.echo(f"{cand.label} {cand.path} vs {ref.label} {ref.path}; {result['chunk_ms']:g} ms chunks; "
               f"tolerance {tol.as_dict()}")
    click.echo(f"{'mode':<15} {'utterance':<24} {'tensor':<16} {'SNR dB':>8} {'max abs':>10} {'mean abs':>10}")
    for mode, data in result["modes"].items():
        for utt, entry in data["utterances"].items():
            for name, st in entry["outputs"].items():
                click.echo(f"{mode:<15} {utt[:24]:<24} {name[:16]:<16} {st['snr_db']:8.2f} {st['max_abs']:10.3e} "
                           f"{st['mean_abs']:10.3e}")
            p = entry.get("probabilities")
            if p:
                seg = ("" if "segments_equal" not in p else
                       f", speech segments {'unchanged' if p['segments_equal'] else 'CHANGED'} "
                       f"({len(p['segments_cand'])} vs {len(p['segments_ref'])})")
                click.echo(f"{mode:<15} {utt[:24]:<24} {c.output} (one value per hop): max abs {p['max_abs']:.3e}, "
                           f"{p['flips']}/{p['hops']} hops cross {p['threshold']:g}{seg}")
            a = entry.get("audio")
            if a:
                pesq = (f"PESQ-WB ref {a['pesq_ref']:.3f} cand {a['pesq_cand']:.3f} (diff {a['pesq_delta']:+.3f}), "
                        if "pesq_cand" in a else "")
                click.echo(f"{mode:<15} {utt[:24]:<24} {pesq}SI-SNR vs {a['against']}: ref "
                           f"{a['si_snr_ref_db']:.2f} dB cand {a['si_snr_cand_db']:.2f} dB "
                           f"(diff {a['si_snr_delta_db']:+.2f} dB)")
    if mark_all:
        from cosyedge.compare.bisect import bisect_layers

        bis = bisect_layers(ref, cand, utts[0], chunk=chunk, seconds=seconds, jump_db=jump_db, floor_db=floor_db,
                            threads=threads)
        result["bisection"] = bis
        click.echo(f"mark-all: {bis['compared']} tensors compared ({bis['skipped']} only in REF), "
                   f"{bis['seconds']:g} s of '{bis['utterance']}', teacher-forced")
        for r in bis["top_drops"][:5]:
            click.echo(f"  drop {r['drop_db']:7.2f} dB  SNR {r['snr_db']:7.2f} dB  {r['op']:<10} {r['tensor']}")
        j = bis["first_jump"]
        if j:
            click.echo(f"error jumps first at tensor '{j['tensor']}' (node '{j['node']}', {j['op']}): SNR "
                       f"{j['snr_in_db']:.2f} dB at its inputs -> {j['snr_db']:.2f} dB")
        else:
            click.echo(f"no tensor's error jumps (drop >= {jump_db:g} dB with SNR < {floor_db:g} dB)")
    if json_path:
        write_json(json_path, _jsonable(result))
    for f in result["failures"]:
        click.echo(f"FAIL {f}")
    if not result["passed"]:
        raise RegressionError(f"{cand.label} candidate {cand.path} is outside tolerance: {result['failures'][0]}"
                              + (f" (+{len(result['failures']) - 1} more)" if len(result["failures"]) > 1 else ""))
    rule = ("" if not any("probabilities" in e for d in result["modes"].values() for e in d["utterances"].values())
            else f" ({c.output} judged by its decisions: speech segments unchanged for a VAD, else no hop across 0.5)")
    click.echo(f"PASS: {cand.label} within tolerance on {len(utts)} utterance(s), {c.output} and states{rule}")


@click.command("check")
@click.option("--onnx", "onnx_path", metavar="PATH", default=None,
              help="FP32 streaming ONNX reference. Default: the bundled reference model.")
@click.option("--baseline", metavar="FILE", default=None,
              help="Baseline JSON. Default: <file>.accuracy.json beside the --onnx file (mine.stream.onnx -> "
                   "mine.stream.accuracy.json; the log says where); for the "
                   "bundled model, the committed cosyedge/compare/baselines/reference.accuracy.json.")
@click.option("--update-baseline", is_flag=True,
              help="Measure and (re)write the baseline (and the INT8 calibration caches next to it).")
@click.option("--precisions", default=None, metavar="LIST",
              help="Comma-separated labels: fp32, fp16, int8, with -sparse (default: the baseline's, or "
                   "fp16,int8-sparse).")
@click.option("--candidate", "candidate_opts", multiple=True, metavar="LABEL=PATH",
              help="Check this engine folder/ONNX for LABEL instead of building it. Repeatable.")
@click.option("--engines-dir", metavar="DIR", default=None,
              help="Where engines are built/reused. Default: $COSYEDGE_ENGINES_DIR or ./engines.")
@click.option("--calib", metavar="DIR", default=None, help="INT8: calibrate on this set instead of the kept amax.")
@click.option("--sparse-onnx", metavar="PATH", default=None,
              help="FP32 parent of the -sparse labels: the 2:4-pruned, fine-tuned streaming ONNX they are built "
                   "from and compared with. Default: the bundled reference.sparse.stream.onnx for the bundled "
                   "model; otherwise the --onnx model, pruned on the fly.")
@click.option("--utterances", "utt_path", metavar="PATH", default=None,
              help="Real recordings to use instead of the bundled set (the baseline must use the same).")
@click.option("--chunk-ms", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Chunk (ms), a multiple of the hop. Default: the multiple of the hop nearest 100 ms, or the one "
                   "chunk a --candidate takes (a graph with a fixed time axis).")
@click.option("--json", "json_path", metavar="FILE", default=None, help="Write the full report as JSON.")
@click.option("--junit", "junit_path", metavar="FILE", default=None, help="Write JUnit XML.")
@click.option("--no-pesq", is_flag=True, help="Skip PESQ-WB.")
@log_opts
def check(onnx_path, baseline, update_baseline, precisions, candidate_opts, engines_dir, calib, sparse_onnx, utt_path,
          chunk_ms, json_path, junit_path, no_pesq):
    """CI accuracy gate: build (or reuse) each precision on ONNX Runtime, compare with the FP32 reference
    on real speech, and fail when any metric is worse than the baseline by more than its tolerance.
    Sparse labels are built from and compared with the 2:4 fine-tuned FP32 model (--sparse-onnx).

    Prints a table; --json/--junit write the report. Exit 0 pass, 1 regression (the metrics are named),
    2 bad input (a baseline of another model, a baseline label measured against another sparse parent, a
    sparse parent or candidate with other inputs/outputs or built from another model, an engine that
    cannot run here, INT8 without its calibration; also, after the table, an FP16 label whose baseline
    was measured on another kind of platform only: arm64 CPUs with FP16 arithmetic compute FP16 in half
    precision, so it is measured, shown as NO BASELINE and not gated, and the line gives the command that
    records a baseline on this machine), 3 a missing or malformed baseline (the line names
    the field) or an utterance shorter than 1 s or silent. Metrics not in the baseline, or not measured,
    are listed on NOT GATED lines. After the model changes, run
    'cosyedge check --update-baseline' once and commit the baseline folder.

    Baselines (cosyedge/compare/baselines/) are keyed by the model's SHA-256, or by its content hash
    without the proof figures measured on the machine that exported it; their tolerances are written from
    cosyedge/compare/tolerances.py, and edited values apply and are printed. --update-baseline also keeps
    the INT8 calibration next to the baseline, so CI needs no calibration audio. Exit 2 also for a sparse
    parent fine-tuned from another dense model (a stale sparse model after a dense retrain) or a
    --candidate whose manifest, ONNX metadata or content contradicts its label (e.g. fp16= an FP32
    engine); exit 3 also for an engine manifest whose schema_version is newer than this cosyedge. Sparse
    labels are built in their own folders (<name>-<sparse parent sha256[:8]>-<label>-onnxruntime).

    Example: cosyedge check --precisions fp16,int8-sparse --json accuracy.json --junit accuracy.xml
    """
    from cosyedge.compare.check import run_check
    from cosyedge.compare.labels import parse_precisions
    from cosyedge.compare.report import format_table
    from cosyedge.errors import RegressionError, UsageError

    cands = {}
    for opt in candidate_opts:
        label, sep, path = opt.partition("=")
        if not sep or not label or not path:
            raise UsageError(f"--candidate takes LABEL=PATH (e.g. int8-sparse=engines/x), got {opt!r}")
        cands[label] = path
    labels = parse_precisions(precisions) if precisions is not None else None
    utts = None
    if utt_path:
        from cosyedge.compare.models import load_compare_model
        from cosyedge.models import require_reference

        rate = load_compare_model(onnx_path or require_reference()).contract.sample_rate_hz
        utts = _utterances(utt_path, rate, None)
    report = run_check(onnx_path, baseline=baseline, update_baseline=update_baseline, precisions=labels,
                       engines_dir=engines_dir, candidates=cands, utterances=utts, chunk_ms=chunk_ms, calib=calib,
                       json_path=json_path, junit_path=junit_path, pesq=not no_pesq, sparse_onnx=sparse_onnx,
                       utterances_arg=utt_path)
    click.echo(format_table(report))
    if report["regressions"]:
        n = len(report["regressions"])
        raise RegressionError(f"accuracy regression: {report['regressions'][0]}" + (f" (+{n - 1} more)" if n > 1 else ""))
    if report.get("no_baseline"):  # measured, not gated: never a silent pass, and not a regression
        first, n = report["no_baseline"][0], len(report["no_baseline"])
        gated = [lab for lab in report["labels"] if lab not in {x["label"] for x in report["no_baseline"]}]
        raise UsageError(f"{first['label']} has no baseline for this platform{f' (+{n - 1} more)' if n > 1 else ''} "
                         f"and was not gated ({', '.join(gated) + ' passed; ' if gated else ''}see the NO BASELINE "
                         f"line): record one with {first['command']}")
    ungated = f"; {len(report['not_gated'])} NOT GATED note(s) above" if report.get("not_gated") else ""
    click.echo(f"PASS: {', '.join(report['labels'])} within baseline tolerance{ungated} ({report['elapsed_s']:.1f} s)")
