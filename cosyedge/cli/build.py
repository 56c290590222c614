"""``cosyedge build``: streaming ONNX -> engine folder (thin click layer over :mod:`cosyedge.builders`)."""

from __future__ import annotations

import click

from cosyedge.cli.options import log_opts


@click.command("build")
@click.option("--onnx", "onnx_path", metavar="PATH", default=None,
              help="Streaming FP32 ONNX (from 'cosyedge streamify'). Default: bundled reference model.")
@click.option("--fp16", is_flag=True, help="FP16 compute, FP32 inputs/outputs/states (overflow-prone ops stay FP32).")
@click.option("--int8", is_flag=True, help="INT8: on ONNX Runtime (placement ort_matmul) INT8 kernels whose activation step is taken per call; "
                   "for TensorRT explicit Q/DQ from KL (entropy) calibration.")
@click.option("--sparse", is_flag=True, help="Prune Conv/Gemm/MatMul weights 2:4 first (then convert/quantize).")
@click.option("--exclude", "exclude", metavar="NODE", multiple=True,
              help="Keep this ONNX node as in the FP32 model (float, dense). Repeatable.")
@click.option("--calib", metavar="DIR", default=None,
              help="INT8 calibration set folder (from 'cosyedge calib make [--from DIR]'). "
                   "Default: $COSYEDGE_CALIB_DIR or ./calib (made when missing). Not read by ONNX Runtime's "
                   "default INT8 (activation step per call).")
@click.option("--calib-count", type=int, default=2048, show_default=True, help="INT8 calibration utterances when the default set has to be made.")
@click.option("--int8-placement", "placement", default=None, metavar="NAME",
              help="INT8 Q/DQ placement: ort_matmul (default for ONNX Runtime and --triton-backend python: one-frame "
                   "convs and MatMuls as DynamicQuantizeMatMul (activation step per call; --bias-correction: calibrated "
                   "steps, MatMulIntegerToFloat), GRUs as dynamic INT8 cells, any hops per call; a model with Scan bodies gets trt), trt (default for TensorRT and "
                   "Triton's onnxruntime/tensorrt backends; TensorRT's rules) or ort (QLinearConv). The default "
                   "placement gets no folder-name part.")
@click.option("--bias-correction", is_flag=True,
              help="INT8 ort_matmul: subtract E[W_q Q(x) - W x] over the calibration set from each quantized bias.")
@click.option("--int8-min-snr", "min_snr", default=None, metavar="DB",
              help="INT8: keep in float the layers whose quantization hurts most (measured one by one on held-out "
                   "speech, the bundled demo recording) until the output SNR vs FP32 reaches DB (e.g. 42); the "
                   "manifest lists them with their measured dB.")
@click.option("--name", default=None, help="Engine name. Default: the model's name from its metadata, plus the first "
                                           "8 hex digits of the ONNX's SHA-256 for a model derived from another one "
                                           "(the 2:4 fine-tuned model, a 'cosyedge sparsify' output).")
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "tensorrt", "triton"]), default="auto",
              show_default=True, help="auto picks tensorrt when TensorRT, pycuda and a GPU are present, else onnxruntime; "
                                      "triton writes a Triton Inference Server model repository.")
@click.option("-o", "--out-dir", metavar="DIR", default=None,
              help="Engines root. Default: $COSYEDGE_ENGINES_DIR or ./engines.")
@click.option("--dla-core", type=click.IntRange(0, 1), default=None, metavar="N",
              help="TensorRT on Jetson: run on DLA core N, 0 or 1 (Xavier and Orin have two; needs --fp16 or "
                   "--int8; TensorRT 8.6/10.x).")
@click.option("--gpu-fallback", is_flag=True, help="With --dla-core: layers the DLA cannot run go to the GPU.")
@click.option("--max-batch-size", type=int, default=None, metavar="N",
              help="Triton: streams per model execution (max_batch_size). Default: 64.")
@click.option("--max-sequences", type=int, default=None, metavar="N",
              help="Triton: concurrent streams per instance (oldest max_candidate_sequences). Default: 256.")
@click.option("--instances", type=int, default=None, metavar="N", help="Triton: model instances (instance_group count). Default: 1.")
@click.option("--instance-kind", type=click.Choice(["auto", "gpu", "cpu"]), default=None,
              help="Triton: instance_group kind (auto: GPU when the server has one). Default: auto.")
@click.option("--chunk-samples", type=int, default=None, metavar="N",
              help="Triton: samples per request, a multiple of the model's hop (the config fixes it). Default: one hop.")
@click.option("--triton-backend", type=click.Choice(["onnxruntime", "python"]), default=None,
              help="Triton: onnxruntime (implicit state; NVIDIA's GPU containers) or python (a cosyedge engine in "
                   "Triton's Python backend: what 'cosyedge serve' runs on CPU). Default: onnxruntime.")
@click.option("--idle-timeout-ms", type=click.IntRange(1, 10**9), default=None, metavar="MS",
              help="Triton: a sequence that sends nothing this long is ended and its slot freed "
                   "(max_sequence_idle_microseconds). Default: 5000. It must exceed the longest wait of a "
                   "stream in Triton's backlog (more streams than --max-sequences): Triton ends one that waited "
                   "longer.")
@click.option("--max-queue-delay-us", type=click.IntRange(0, 10**9), default=None, metavar="US",
              help="Triton: how long the batcher may hold a request to fill a batch. Default: 1000 (onnxruntime), "
                   "0 (python: requests that arrive while a batch runs form the next one).")
@log_opts
def build(onnx_path, fp16, int8, sparse, exclude, calib, calib_count, placement, bias_correction, min_snr, name, backend, out_dir, dla_core,
          gpu_fallback, max_batch_size, max_sequences, instances, instance_kind, chunk_samples, triton_backend,
          idle_timeout_ms, max_queue_delay_us):
    """Build an FP32/FP16/INT8 (optionally 2:4-sparse) engine folder for one backend.

    Writes <out-dir>/<name>-<precision>[-sparse]-<backend>/ with the precision ONNX, the backend's
    artifact and manifest.json (model and calibration hashes, flags, tool versions, reports). A non-default
    INT8 variant gets its own folder, e.g. <name>-int8-trt-biascorr-minsnr42-onnxruntime (placement,
    --bias-correction, --int8-min-snr), so INT8 variants never replace each other (a build that replaces
    an engine of other INT8 flags says so in one line). A source ONNX that already holds Q/DQ nodes (an
    INT8 engine's model.onnx) is refused for every precision and backend (exit 2). A model
    derived from another one (it records its dense parent, or was pruned by 'cosyedge sparsify') carries
    that one's name, so its <name> is <model>-<sha256[:8]> (reference-60b615af-int8-sparse-onnxruntime for
    the bundled fine-tuned 2:4 model): it never replaces the dense model's engines.
    Neither --fp16 nor --int8 builds FP32. --fp16: FP16 compute with FP32 inputs, outputs and states
    (scanned for non-finite values, its SNR vs FP32 in the manifest). --int8: for TensorRT, Q/DQ nodes
    from KL (entropy) calibration on real speech streamed with real states (see 'cosyedge calib --help'); for ONNX
    Runtime (placement ort_matmul) DynamicQuantizeMatMul kernels (activation step per call: nothing calibrated,
    --calib unused; calibrated steps with --bias-correction).
    --sparse prunes Conv/Gemm/MatMul weights 2:4 first (the per-layer report goes into the manifest).
    The model is checked by running one chunk before the folder is written; the folder appears
    atomically (nothing is left on failure; temp folders a killed build of the same engine left are
    removed). Prints the engine folder path as the last line. 'cosyedge run --engine' runs any engine
    folder except a Triton repository (served by Triton).

    --backend tensorrt (the trt extra: TensorRT, pycuda, cuda-python; JetPack's TensorRT on Jetson)
    writes <name>-<precision>[-sparse][-dlaN]-tensorrt/ with engine.plan and a manifest naming the
    TensorRT version, GPU, flags and the layers that got sparse tactics; a plan from another TensorRT
    version or GPU is rebuilt from its stored ONNX on load. TensorRT 8.6, 10.x and 11.x (11.x: precision
    only from the ONNX, no DLA). Without TensorRT, pycuda or a GPU it stops with one line (exit 4);
    --backend auto then builds for ONNX Runtime and says why. See docs/tensorrt.md.

    --backend triton writes <out-dir>/<name>-<precision>[-sparse]-triton/, a Triton Inference Server
    model repository: <name>/config.pbtxt (sequence batcher, oldest strategy, one implicit state per
    state pair, zero initial state), <name>/1/model.onnx (onnxruntime backend) and manifest.json; serve
    it with 'tritonserver --model-repository=<folder>' in NVIDIA's container (GPU; docs/triton.md).
    --triton-backend python writes <name>-<precision>[-sparse]-triton-python/ instead: <name>/1/model.py
    runs the engine (<name>/1/model.onnx) through a StreamPool in Triton's Python backend, one batched
    run per execution, each sequence's state kept by its correlation id (START/END/READY/CORRID control
    inputs), freed at its end or after --idle-timeout-ms of silence; serve it on CPU with 'cosyedge serve
    <folder>' and stream to it with 'cosyedge run FILE -o OUT --server HOST:PORT'.

    Example: cosyedge build --onnx model.stream.onnx --int8 --sparse --backend onnxruntime -o engines
    """
    from cosyedge.builders import build as build_folder
    from cosyedge.builders.config import BuildConfig
    from cosyedge.artifacts import check_name

    check_name(name)
    config = BuildConfig.from_flags(fp16=fp16, int8=int8, sparse=sparse, exclude=exclude, calib=calib,
                                    calib_count=calib_count, placement=placement, bias_correction=bias_correction,
                                    min_snr_db=min_snr)
    folder = build_folder(onnx_path, config, backend, name=name, out_dir=out_dir, dla_core=dla_core,
                          gpu_fallback=gpu_fallback, max_batch_size=max_batch_size, max_sequences=max_sequences,
                          instances=instances, instance_kind=instance_kind, chunk_samples=chunk_samples,
                          triton_backend=triton_backend, max_queue_delay_us=max_queue_delay_us,
                          idle_us=None if idle_timeout_ms is None else 1000 * idle_timeout_ms)
    _hint(folder)
    click.echo(str(folder))


def _hint(folder) -> None:
    """Log :func:`cosyedge.precision.ort_fusion.placement_hint` for an ONNX Runtime INT8 engine folder."""
    from cosyedge.artifacts import EngineManifest
    from cosyedge.errors import CosyEdgeError
    from cosyedge.log import LOG
    from cosyedge.precision.ort_fusion import placement_hint

    try:
        manifest = EngineManifest.load(folder)
    except CosyEdgeError:  # a Triton repository's manifest, etc.: nothing to add
        return
    line = placement_hint(manifest.int8) if manifest.backend == "onnxruntime" else None
    if line:
        LOG.info("%s", line)
