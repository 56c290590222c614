"""``cosyedge calib``: calibration sets, KL amax caches and INT8 Q/DQ models (thin click layer over
:mod:`cosyedge.precision`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts, warn_threads_above_cpus
from cosyedge.log import plural
from cosyedge.precision.calibration import MAX_CALIB_COUNT


@click.group("calib")
def calib():
    """INT8 calibration: make a calibration set, compute KL amax, write the Q/DQ ONNX.

    Example: cosyedge calib make && cosyedge calib int8 -o model.stream.int8.onnx
    """


@calib.command("make")
@click.option("--count", type=click.IntRange(1, MAX_CALIB_COUNT), default=None,
              help="Utterances. Default: 2048 generated; all usable files with --from.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws (reproducible set).")
@click.option("--out", "out", metavar="DIR", default=None, help="Set folder. Default: $COSYEDGE_CALIB_DIR or ./calib.")
@click.option("--from", "from_dir", metavar="DIR", default=None,
              help="Use your own 16 kHz recordings (searched recursively) instead of generated noisy speech; "
                   "unreadable or wrong-rate files are skipped and counted (at least 16 must remain).")
@log_opts
def make(count, seed, out, from_dir):
    """Write a deterministic calibration set: audio/*.wav + manifest.json (sha256, duration, SNR).

    Generated sets mix training speech and training noise like the training data (never the test set);
    the first run downloads the Debian source packages (minutes). The first INT8 build that calibrates
    ('cosyedge build --int8' for TensorRT, --int8-placement trt, --bias-correction; not ONNX Runtime's default
    INT8, which calibrates nothing) makes the set when calib/ holds none: progress bars on a terminal, under 1 GB of memory for 2048
    utterances, about 10 s once the training corpora are cached, about 80 s with their first download.
    The manifest also lists the training corpora this machine could not make (missing_corpora: a machine
    without espeak-ng, flite or festival makes another set); the audio is regenerated, not committed.
    Prints the manifest path last.

    Example: cosyedge calib make --count 2048 --seed 0 --out calib/
    """
    from cosyedge.precision.calibset import MANIFEST, make_calibration_set

    s = make_calibration_set(out, count=count, seed=seed, from_dir=from_dir)
    skipped = s.manifest.get("skipped", {})
    n_skip = sum(skipped.values())
    click.echo(f"{plural(len(s), 'utterance')}, {s.duration_s / 60:.1f} min"
               + (f", {plural(n_skip, 'file')} skipped {skipped}" if n_skip else "") + f", sha256 {s.sha256[:12]}")
    click.echo(str(s.folder / MANIFEST))


def _check_trt_version(ctx, param, value):
    """click callback: ``--trt-version`` must read as ``major.minor[.patch]`` with a major of 5..99 (checked before
    any calibration; a click usage error naming the option, exit 2)."""
    if value is None:
        return value
    parts = str(value).split(".")
    if not (2 <= len(parts) <= 4 and all(p.isdigit() and len(p) <= 4 for p in parts) and 5 <= int(parts[0]) <= 99):
        raise click.BadParameter(f"{value!r} is not a TensorRT version like 10.3.0", ctx=ctx, param=param)
    return value


@calib.command("amax")
@click.option("--onnx", "onnx_path", metavar="PATH", default=None,
              help="FP32 streaming ONNX. Default: bundled reference model.")
@click.option("--calib", "calib_dir", metavar="DIR", default=None,
              help="Calibration set folder. Default: $COSYEDGE_CALIB_DIR or ./calib (made if missing).")
@click.option("--threads", type=int, default=1, show_default=True, callback=warn_threads_above_cpus,
              help="ONNX Runtime threads.")
@click.option("--force", is_flag=True, help="Recompute even if the cache matches.")
@click.option("--trt-version", default=None, metavar="X.Y.Z", callback=_check_trt_version,
              help="TensorRT version for the calibration-cache header. Default: installed tensorrt, else 10.3.0.")
@log_opts
def amax(onnx_path, calib_dir, threads, force, trt_version):
    """KL-calibrate a streaming model: writes <model>.amax.json and <model>.calibration.cache.

    KL (entropy) amax per tensor, streamed through the FP32 model with real states; cached as
    calib/<model>.amax.json keyed by the model and manifest hashes, plus a TensorRT calibration cache.
    The cache is reused when the model and calibration manifest hashes match, recomputed otherwise.
    Prints the amax JSON path last.

    Example: cosyedge calib amax --onnx model.stream.onnx --calib calib/
    """
    from cosyedge.errors import UsageError
    from cosyedge.precision.calibrate import calibrate
    from cosyedge.precision.int8 import resolve_calibration_set

    if not 1 <= threads <= 256:
        raise UsageError(f"--threads must be between 1 and 256, got {threads}")
    cset = resolve_calibration_set(calib_dir)
    click.echo(str(calibrate(_model(onnx_path), cset, threads=threads, force=force, trt_version=trt_version)))


@calib.command("int8")
@click.option("--onnx", "onnx_path", metavar="PATH", default=None,
              help="FP32 streaming ONNX. Default: bundled reference model.")
@click.option("-o", "--output", "output", metavar="PATH", required=True, help="INT8 Q/DQ ONNX to write.")
@click.option("--calib", "calib_dir", metavar="DIR", default=None,
              help="Calibration set folder. Default: $COSYEDGE_CALIB_DIR or ./calib (made if missing).")
@click.option("--amax", "amax_path", metavar="PATH", default=None,
              help="Use this amax cache (must be from the same model) instead of calibrating.")
@click.option("--exclude", multiple=True, metavar="NODE", help="Keep this weighted node in float (repeatable).")
@click.option("--threads", type=int, default=1, show_default=True, callback=warn_threads_above_cpus,
              help="ONNX Runtime threads for calibration.")
@click.option("--placement", "--int8-placement", "placement", default="trt", show_default=True, metavar="NAME",
              help="Q/DQ placement: trt, ort or ort_matmul (fused INT8 kernels on ONNX Runtime x86 CPU, any hops per "
                   "call; what 'cosyedge build --int8' uses for ONNX Runtime).")
@click.option("--bias-correction", is_flag=True,
              help="ort_matmul: subtract E[W_q Q(x) - W x] over the calibration set from each quantized bias.")
@click.option("--min-snr", "--int8-min-snr", "min_snr", default=None, metavar="DB",
              help="Keep in float the layers whose quantization hurts most (measured on held-out speech, the bundled "
                   "demo recording) until the output SNR vs FP32 reaches DB.")
@log_opts
def int8(onnx_path, output, calib_dir, amax_path, exclude, threads, placement, bias_correction, min_snr):
    """Write the INT8 streaming ONNX: KL-calibrated activations, per-channel weights, explicit Q/DQ.

    The first and last (1-channel audio) convs and any --exclude node stay in float, and so do the
    analysis and synthesis convs, convs that only copy samples (one-hot weights, e.g. the pitch comb's
    framing) and any node the model declares float-only (e.g. the reference's /inp); one scale per
    Concat(state, x). The result runs in ONNX Runtime ('cosyedge run --engine PATH') and is what
    TensorRT builds from. Prints its path last.

    Example: cosyedge calib int8 --onnx model.stream.onnx --calib calib/ -o model.stream.int8.onnx
    """
    from cosyedge.errors import UsageError
    from cosyedge.precision.int8 import int8_onnx

    from cosyedge.precision.fallback import check_min_snr

    if not 1 <= threads <= 256:
        raise UsageError(f"--threads must be between 1 and 256, got {threads}")
    min_snr = check_min_snr(min_snr, "--min-snr")
    r = int8_onnx(_model(onnx_path), output, calib=calib_dir, exclude=exclude, amax=amax_path, threads=threads,
                  placement=placement, bias_correction=bias_correction, min_snr_db=min_snr)
    click.echo(f"{plural(r['qdq_pairs'], 'Q/DQ pair')}, {plural(len(r['quantized_nodes']), 'node')} INT8, float: "
               f"{', '.join(r['excluded_nodes']) or 'none'}; "
               f"{'amax ' + r['amax_path'] if r['amax_path'] else 'activations quantized per call (not calibrated)'}")
    click.echo(r["output"])


def _model(onnx_path):
    """The ``--onnx`` model (str), or the bundled reference model (:func:`cosyedge.models.require_reference`)."""
    if onnx_path:
        return onnx_path
    from cosyedge.models import require_reference

    return str(require_reference())
