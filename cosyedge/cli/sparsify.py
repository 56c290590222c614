"""``cosyedge sparsify``: prune an ONNX to 2:4 structured sparsity (thin click layer over
:mod:`cosyedge.precision.sparsity`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("sparsify")
@click.argument("in_onnx", metavar="IN.onnx")
@click.argument("out_onnx", metavar="OUT.onnx")
@click.option("--exclude", "exclude", metavar="NODE", multiple=True, help="Leave this node dense. Repeatable.")
@click.option("--json", "json_path", metavar="FILE", default=None,
              help="Also write the per-layer report as JSON to FILE ('-': print only the JSON, no table).")
@log_opts
def sparsify(in_onnx, out_onnx, exclude, json_path):
    """Prune Conv/Gemm/MatMul weights to 2 non-zeros in every 4 along the input channels (by magnitude).

    Prints a per-layer table (eligible or not and why, sparsity reached, 2:4 pattern verified in the
    written ONNX), then OUT.onnx as the last line. Fine-tune afterwards to recover accuracy
    (scripts/training/finetune_sparse.py --minutes N for the reference model; it records the SHA-256 of the dense
    streaming ONNX it started from, --dense-onnx, in the sparse ONNX). A fine-tuned 2:4 reference ships
    as cosyedge/models/reference.sparse.stream.onnx ('cosyedge build --onnx
    cosyedge/models/reference.sparse.stream.onnx --sparse [--int8]'; PESQ-WB on the test set 0.03 below
    the dense model's, see docs/model-card.md).

    Example: cosyedge sparsify model.stream.onnx model.sparse.stream.onnx --json sparsity.json
    """
    from cosyedge.artifacts import check_writable, write_json
    from cosyedge.precision.sparsity import format_report, report_json, sparsify_onnx

    if json_path not in (None, "-"):
        check_writable(json_path)
    report = sparsify_onnx(in_onnx, out_onnx, exclude=exclude)
    if json_path == "-":  # stdout is pure JSON
        click.echo(report_json(report))
        return
    click.echo(format_report(report))
    if json_path:
        write_json(json_path, report)
    click.echo(out_onnx)
