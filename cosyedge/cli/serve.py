"""``cosyedge serve``: run Triton Inference Server on a model repository (thin click layer over
:func:`cosyedge.serve.server.serve`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("serve")
@click.argument("repo", metavar="REPO")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the HTTP, gRPC and metrics endpoints listen on. Loopback: only this machine can connect; "
                   "0.0.0.0 (every address) is an explicit choice.")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=8001, show_default=True,
              help="gRPC port ('cosyedge run --server HOST:PORT' connects to it); 0 picks a free one.")
@click.option("--http-port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="HTTP port (health: /v2/health/ready); 0 picks a free one.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8002, show_default=True,
              help="Prometheus metrics port (/metrics); 0 picks a free one.")
@click.option("--tritonserver", "tritonserver", metavar="PATH", default=None,
              help="The tritonserver binary. Default: the nvidia-pytriton wheel's (pip install 'cosyedge[serve]'), "
                   "else tritonserver on PATH.")
@click.option("--ready-timeout", type=click.FloatRange(1, 3600), default=120.0, show_default=True, metavar="S",
              help="Seconds to wait for the server and its models to be ready.")
@click.option("--exit-timeout", type=click.IntRange(0, 3600), default=30, show_default=True, metavar="S",
              help="After Ctrl-C/SIGTERM, seconds Triton lets open streams finish; 10 s later the server and its "
                   "stubs are killed (open streams are cut).")
@log_opts
def serve(repo, host, grpc_port, http_port, metrics_port, tritonserver, ready_timeout, exit_timeout):
    """Serve a model repository with Triton Inference Server until Ctrl-C or SIGTERM.

    REPO is a folder from 'cosyedge build --backend triton --triton-backend python' (the Python
    backend, which the nvidia-pytriton wheel's tritonserver runs on CPU; 'cosyedge[serve]' installs it)
    or any repository the given --tritonserver can load. The server's Python backend imports cosyedge
    and onnxruntime from this Python environment (its bin/ goes first on PATH, this cosyedge first on
    PYTHONPATH). The files the repository's manifest hashes are checked first. Once every model is
    loaded, each cosyedge model gets one warm-up request of zeros, then the endpoints are printed
    (gRPC, HTTP, metrics). Ctrl-C/SIGTERM is forwarded to Triton, which lets open streams finish for
    up to --exit-timeout seconds, unloads the models and exits: exit 0 (a server still running 10 s
    later is killed with its stubs, open streams cut: exit 0 with a warning). A tampered file, a
    repository Triton cannot load or a model whose warm-up request fails is one '[!]' line with the
    reason (exit 3); so is a port in use (exit 3); no tritonserver: exit 4; a server that exits by
    itself: exit 6. Use -v to see Triton's log.

    Example: cosyedge build --backend triton --triton-backend python -o engines &&
    cosyedge serve engines/reference-fp32-triton-python (then, elsewhere: cosyedge run noisy.wav -o
    clean.wav --server 127.0.0.1:8001)
    """
    from cosyedge.serve.server import serve as serve_repo

    def ready(srv) -> None:
        where = " (listening on every address of this machine)" if srv.host in ("0.0.0.0", "::", "") else ""
        click.echo(f"Triton {srv.version or '?'} serving {', '.join(srv.models)} from {srv.repo}: "
                   f"gRPC {srv.grpc_url}, HTTP {srv.http_url}, metrics {srv.metrics_url}{where} (Ctrl-C stops)")

    def stopped(srv) -> None:
        if srv.forced:
            click.echo(f"Triton stopped: killed after its {srv.exit_timeout_s} s exit timeout (open streams were cut)")
        else:
            click.echo("Triton stopped cleanly")

    serve_repo(repo, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
               tritonserver=tritonserver, ready_timeout_s=ready_timeout, on_ready=ready, exit_timeout_s=exit_timeout,
               on_stop=stopped)
