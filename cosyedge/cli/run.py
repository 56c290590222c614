"""``cosyedge run``: stream an audio file through an engine (thin click layer over :mod:`cosyedge.enhance`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("run")
@click.argument("input", metavar="INPUT")
@click.option("-o", "--output", "output", metavar="OUTPUT", help="Output audio (.wav/.flac/.ogg), mono, "
              "at the input's sample rate and length.")
@click.option("--engine", metavar="PATH", default=None,
              help="Engine folder (from 'cosyedge build') or streaming .onnx. Default: bundled reference.")
@click.option("--chunk-ms", type=float, default=None,
              help="Chunk length in ms (a multiple of the model hop). Default: one hop (10 ms for the reference).")
@click.option("--threads", type=int, default=1, show_default=True, help="ONNX Runtime threads.")
@log_opts
def run(input, output, engine, chunk_ms, threads):
    """Enhance an audio file by streaming it chunk by chunk, state carried.

    INPUT is a wav/flac/ogg file of any sample rate and channel count (mixed to mono, resampled to the
    model rate and back). The output is aligned with the input (model delay compensated). Prints a
    final report line with RTF and per-chunk latency p50/p99. ('cosyedge run mic' comes later.)

    Example: cosyedge run noisy.wav -o clean.wav --chunk-ms 10
    """
    from cosyedge.errors import UsageError

    if input == "mic":
        raise UsageError("microphone input is not available yet; pass an audio file as INPUT")
    if not output:
        raise UsageError("missing output file: cosyedge run INPUT -o OUTPUT.wav")
    from cosyedge.enhance import enhance_file

    s = enhance_file(input, output, engine=engine, chunk_ms=chunk_ms, threads=threads)
    click.echo(
        f"{input} -> {s['output']}: {s['duration_s']:.2f} s audio in {s['elapsed_s']:.3f} s, "
        f"RTF {s['rtf']:.4f}, chunk {s['chunk_ms']:g} ms x {s['chunks']}, latency p50 {s['latency_ms_p50']:.3f} ms "
        f"p99 {s['latency_ms_p99']:.3f} ms, delay {s['delay_ms']:g} ms compensated, {s['sample_rate_hz_out']} Hz mono"
    )
