"""``cosyedge build``: streaming ONNX -> engine folder (thin click layer over :mod:`cosyedge.build`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("build")
@click.option("--onnx", "onnx_path", metavar="PATH", default=None,
              help="Streaming ONNX (from 'cosyedge streamify'). Default: bundled reference model.")
@click.option("--name", default=None, help="Engine name. Default: the model's name from its metadata.")
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "tensorrt"]), default="auto",
              show_default=True, help="auto picks tensorrt when it is importable, else onnxruntime.")
@click.option("-o", "--out-dir", metavar="DIR", default=None,
              help="Engines root. Default: $COSYEDGE_ENGINES_DIR or ./engines.")
@log_opts
def build(onnx_path, name, backend, out_dir):
    """Build an FP32 engine folder (<name>-fp32-<backend>/ with model + manifest.json).

    The model is checked by running one chunk before the folder is written; the folder appears
    atomically. Prints the engine folder path as the last line. (FP16/INT8/sparse come later.)

    Example: cosyedge build --onnx model.stream.onnx --backend onnxruntime -o engines
    """
    from cosyedge.build import build_engine

    click.echo(str(build_engine(onnx_path, backend=backend, name=name, out_dir=out_dir)))
