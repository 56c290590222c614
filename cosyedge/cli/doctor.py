"""``cosyedge doctor``: what this machine can do (thin layer over :mod:`cosyedge.doctor`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@log_opts
def doctor(as_json: bool):
    """Report what this machine can run: Python, cosyedge, ONNX Runtime and its providers, TensorRT, CUDA and the GPU,
    pycuda / cuda-python, the CPU's INT8 instructions, audio server and inputs, tritonserver, cached engines.

    Each line starts with 'ok', '--' (missing: the next line says how to get it), '!!' (installed but broken) or
    nothing (information). Always exits 0, whatever is missing or broken. Run it on a Jetson before building
    engines there (docs/jetson.md).
    """
    from cosyedge.doctor import as_json as to_json
    from cosyedge.doctor import collect, format_report

    findings = collect()
    click.echo(to_json(findings) if as_json else format_report(findings))
