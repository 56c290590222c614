"""``cosyedge export`` and ``cosyedge streamify``: thin click wrappers over :mod:`cosyedge.export` and
:mod:`cosyedge.surgery` (no logic here)."""

from __future__ import annotations

from pathlib import Path

import click

from cosyedge.cli.options import log_opts

_PATH = click.Path(dir_okay=True, path_type=Path)


@click.command("export")
@log_opts
@click.option("--weights", type=_PATH, default=None,
              help="Reference weights (.safetensors). Default: the bundled cosyedge/models/reference.safetensors.")
@click.option("--dynamo/--no-dynamo", default=False, show_default=True,
              help="Use the torch.export-based ONNX exporter instead of TorchScript tracing.")
@click.option("-o", "--output", "out", type=_PATH, default=None,
              help="Streaming ONNX to write. Default: cosyedge/models/reference.stream.onnx.")
@click.option("--full-onnx", type=_PATH, default=None,
              help="Also keep the full-sequence FP32 ONNX here (default: temporary, deleted).")
def export(weights: Path | None, dynamo: bool, out: Path | None, full_onnx: Path | None) -> None:
    """Export the bundled reference enhancer to a streaming ONNX (export + streamify).

    Writes one self-contained ONNX with inputs audio (N, 1, T) and state_in.NN, outputs enhanced and
    state_out.NN, and the stream contract (sample rate, hop, total stride, state shapes) in its metadata.
    """
    from cosyedge.export import export_reference

    export_reference(weights=weights, out=out, dynamo=dynamo, full_onnx=full_onnx)


@click.command("streamify")
@log_opts
@click.argument("in_onnx", type=_PATH)
@click.argument("out_onnx", type=_PATH)
@click.option("--sample-rate-hz", type=click.IntRange(min=1), default=None,
              help="Sample rate; required when IN_ONNX has no cosyedge metadata.")
@click.option("--hop-samples", type=click.IntRange(min=1), default=None,
              help="Samples per model step (natural chunk); required without cosyedge metadata.")
@click.option("--delay-samples", type=click.IntRange(min=0), default=None,
              help="Algorithmic delay of the output in samples. Default: metadata value or 0.")
@click.option("--name", type=str, default=None, help="Model name. Default: metadata value or the file stem.")
def streamify(in_onnx: Path, out_onnx: Path, sample_rate_hz: int | None, hop_samples: int | None,
              delay_samples: int | None, name: str | None) -> None:
    """Turn a full-sequence causal-conv ONNX into a streaming ONNX with explicit state I/O.

    Every causal left pad (a Pad before a Conv, or a Conv with pads=[P, 0]) becomes an input
    state_in.NN (zeros at stream start) concatenated before the Conv and an output state_out.NN (the
    last P frames) to feed back with the next chunk. Non-causal pads are refused (exit 2).
    """
    from cosyedge.surgery import streamify as streamify_api

    streamify_api(in_onnx, out_onnx, sample_rate_hz=sample_rate_hz, hop_samples=hop_samples,
                  delay_samples=delay_samples, name=name)
