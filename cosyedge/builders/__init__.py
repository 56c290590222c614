"""Build stage: streaming ONNX -> engine folder (``model`` + ``manifest.json``) for one backend.

* :mod:`cosyedge.builders.prepare`: the precision ONNX every backend builds from (2:4 pruning, then FP16
  or INT8 Q/DQ, or an FP32 copy).
* :mod:`cosyedge.builders.ort`: ONNX Runtime (:func:`build_ort`, :class:`OrtEngineFromOnnx`).
* :mod:`cosyedge.builders.cache`: reuse an engine folder or build it (:func:`~cosyedge.builders.cache.default_engine`,
  :func:`~cosyedge.builders.cache.reuse_or_build`, :func:`~cosyedge.builders.cache.load_or_rebuild`).
* :mod:`cosyedge.builders.names`: precisions, labels, engine folder and model names.
* :mod:`cosyedge.builders.trt`: TensorRT (imported lazily, only for ``backend="tensorrt"``).

:func:`build` is what ``cosyedge build`` calls: one dispatch for ONNX Runtime, TensorRT and Triton, taking a
:class:`~cosyedge.builders.config.BuildConfig`; :func:`build_engine` resolves ``auto`` and the default model
for ONNX Runtime/TensorRT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from cosyedge._lazy import has_module
from cosyedge.builders.prepare import DEFAULT_CALIB_COUNT
from cosyedge.builders.config import BuildConfig
from cosyedge.builders.ort import OrtEngineFromOnnx, build_ort
from cosyedge.runtime.engine import engines_root
from cosyedge.errors import DependencyError, UsageError
from cosyedge.log import LOG

BACKENDS = ("auto", "onnxruntime", "tensorrt")
TRITON = "triton"
TRITON_OPTIONS = ("max_batch_size", "max_sequences", "instances", "instance_kind", "chunk_samples", "triton_backend",
                  "idle_us", "max_queue_delay_us")
"""tuple[str, ...]: :func:`build` options only ``backend="triton"`` takes (see ``builders.triton.build_triton``)."""
TRITON_FLAGS = {"idle_us": "--idle-timeout-ms"}
"""dict[str, str]: the ``cosyedge build`` flag of a :data:`TRITON_OPTIONS` name whose flag is not the name with
dashes (``idle_us`` is given in ms on the command line)."""


def resolve_backend(backend: str = "auto") -> str:
    """Return the concrete backend (str) for ``backend`` in :data:`BACKENDS`.

    ``auto`` picks ``tensorrt`` when TensorRT and pycuda are importable and a GPU answers, else
    ``onnxruntime``; the choice and the reason are logged.

    Raises:
        UsageError: unknown backend.
        DependencyError: ``tensorrt`` requested but the tensorrt package is not importable.
    """
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend '{backend}' (use one of {', '.join(BACKENDS)})")
    trt_ok = has_module("tensorrt")
    if backend == "auto":
        chosen = "tensorrt" if trt_ok else "onnxruntime"
        why = "tensorrt is importable" if chosen == "tensorrt" else "tensorrt is not importable"
        if chosen == "tensorrt":  # TensorRT alone is not enough: pycuda and a GPU too
            from cosyedge.runtime.trt import require_stack

            try:
                require_stack("build TensorRT engines")
                why = "tensorrt, pycuda and a GPU found"
            except DependencyError as err:
                chosen, why = "onnxruntime", str(err).split(";")[0]
        LOG.info("backend auto -> %s (%s)", chosen, why)
        return chosen
    if backend == "tensorrt":
        if not trt_ok:
            raise DependencyError(
                "backend 'tensorrt' needs TensorRT and an NVIDIA GPU: pip install 'cosyedge[trt]' on a GPU "
                "machine (JetPack's TensorRT on Jetson); on CPU use --backend onnxruntime"
            )
        if not has_module("pycuda"):
            from cosyedge.runtime.trt import missing_stack_message

            raise DependencyError(missing_stack_message(True, False, None, "build TensorRT engines"))
    return backend


def build_engine(onnx_path: str | Path | None = None, backend: str = "auto", name: str | None = None,
                 out_dir: str | Path | None = None, *, precision: str = "fp32", sparse: bool = False,
                 exclude: Iterable[str] = (), calib: str | Path | None = None,
                 calib_count: int = DEFAULT_CALIB_COUNT, dla_core: int | None = None,
                 gpu_fallback: bool = False, amax: str | Path | None = None,
                 config: BuildConfig | None = None) -> Path:
    """Build an engine folder ``<name>-<precision>[-sparse]-<backend>/`` from a streaming FP32 ONNX.

    The precision ONNX is made first (:func:`cosyedge.builders.prepare.prepare_onnx`: 2:4 pruning if
    ``sparse``, then FP16 conversion or INT8 calibration + Q/DQ), then the backend builds from it. Every
    folder is assembled in a temp folder and renamed into place: a failure leaves nothing behind.

    Args:
        onnx_path (str | Path | None): Streaming FP32 ONNX; defaults to the bundled reference
            (``cosyedge.models.REFERENCE_STREAM_ONNX``).
        backend (str): ``auto`` | ``onnxruntime`` | ``tensorrt``.
        name (str | None): Engine name (defaults to the model's contract name; ``<name>-<sha256[:8]>`` for a
            model derived from another one, :func:`cosyedge.builders.names.engine_model_name`).
        out_dir (str | Path | None): Engines root (defaults to ``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        precision (str): ``fp32`` | ``fp16`` | ``int8``.
        sparse (bool): 2:4-prune Conv/Gemm/MatMul weights first.
        exclude (Iterable[str]): Node names kept as in the FP32 model (dense, float).
        calib (str | Path | None): INT8 calibration folder (None: the default calibration set).
        calib_count (int): INT8 calibration utterances.
        dla_core (int | None): TensorRT only: build for this DLA core (Jetson; fp16/int8).
        gpu_fallback (bool): TensorRT only, with ``dla_core``: unsupported layers run on the GPU.
        amax (str | Path | None): INT8: reuse this amax cache instead of calibrating (it must belong to
            the model being quantized; see :func:`cosyedge.builders.prepare.prepare_onnx`).
        config (BuildConfig | None): The build options as one checked object (what ``cosyedge build`` passes);
            when given, ``precision``, ``sparse``, ``exclude``, ``calib``, ``calib_count`` and ``amax`` are not used.
    Returns:
        Path: the engine folder.
    Raises:
        ArtifactError: model missing/invalid (bundled reference missing included), not streamified.
        UsageError: bad precision/options; see also :func:`resolve_backend`.
        DependencyError: see :func:`resolve_backend`.
        AccuracyError: the FP16 model gave NaN/Inf in its scan.
        UsageError: ``backend="tensorrt"`` for a model that does not map one waveform to one waveform (several
            inputs, features: :func:`cosyedge.runtime.trt.require_one_waveform`), or with an INT8 placement other
            than ``trt``; ``auto`` builds those for ONNX Runtime (one info line says why).
    """
    import shutil
    import tempfile

    from cosyedge.builders.names import PRECISIONS
    from cosyedge.builders.prepare import check_streaming_onnx, prepare_onnx
    from cosyedge.artifacts import SourceModel
    from cosyedge.errors import ArtifactError
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX, REFERENCE_STREAM_ONNX, require_reference

    if config is not None:  # one checked object instead of the keyword options
        precision, sparse, exclude, calib, calib_count, amax = config.options()
    elif precision not in PRECISIONS:
        raise UsageError(f"unknown precision '{precision}' (use one of {', '.join(PRECISIONS)})")
    if backend == "tensorrt":  # a model TensorRT cannot stream is refused before TensorRT is looked for
        from cosyedge.runtime.trt import require_one_waveform

        src = SourceModel.of(onnx_path if onnx_path is not None else require_reference())
        require_one_waveform(check_streaming_onnx(src), str(src.path))
    chosen = resolve_backend(backend)
    if chosen == "tensorrt" and backend == "auto":
        src = SourceModel.of(onnx_path if onnx_path is not None else require_reference())
        if not check_streaming_onnx(src).is_audio:
            LOG.info("backend auto -> onnxruntime instead: the TensorRT backend streams one waveform input and "
                     "output, %s streams %s", src.path, [i.name for i in src.contract.stream_inputs])
            chosen = "onnxruntime"
    if chosen == "tensorrt" and config is not None and config.placement not in (None, "trt"):
        if backend != "auto":
            raise UsageError(f"--int8-placement {config.placement} is for ONNX Runtime CPU; TensorRT builds use trt")
        LOG.info("backend auto -> onnxruntime instead: --int8-placement %s is ONNX Runtime's CPU placement (TensorRT "
                 "builds use trt)", config.placement)
        chosen = "onnxruntime"
    if (dla_core is not None or gpu_fallback) and chosen != "tensorrt":
        raise UsageError("--dla-core/--gpu-fallback are TensorRT options (Jetson): add --backend tensorrt")
    if onnx_path is None:
        onnx_path = require_reference()
    if sparse and Path(onnx_path).resolve() == REFERENCE_STREAM_ONNX.resolve() and REFERENCE_SPARSE_STREAM_ONNX.is_file():
        LOG.warning("pruning the bundled dense model 2:4 without fine-tuning; the fine-tuned 2:4 model is "
                    "--onnx %s", REFERENCE_SPARSE_STREAM_ONNX)
    options = dict(precision=precision, sparse=sparse, exclude=tuple(exclude), calib=calib, calib_count=calib_count,
                   amax=amax, config=config)
    if chosen == "tensorrt":
        from cosyedge.builders.names import check_engine_name, engine_model_name

        src = SourceModel(onnx_path)  # parsed and hashed once
        contract = check_streaming_onnx(src)
        name = check_engine_name(name or engine_model_name(contract.name, src))
        root = Path(out_dir) if out_dir is not None else engines_root()
        from cosyedge.artifacts.files import made_folders, remove_empty_folders

        made: list[Path] = []
        try:
            made = made_folders(root)
            tmp = Path(tempfile.mkdtemp(prefix=".prepare-", dir=root))
        except OSError as err:
            remove_empty_folders(made)
            raise ArtifactError(f"cannot write in {root}: {err.strerror or err}") from None
        done = False
        try:
            model = tmp / f"{name}.{precision}{'.sparse' if sparse else ''}.onnx"
            from cosyedge.builders.names import engine_folder_name
            from cosyedge.runtime.trt import MODEL_FILE as TRT_MODEL_FILE

            final = root / engine_folder_name(name, precision, "tensorrt", sparse, dla_core) / TRT_MODEL_FILE
            fields = prepare_onnx(src, model, final_path=final, **options) or {}
            extra = {"calibration_sha256": fields.get("calibration_sha256"),
                     "reports": {k: fields[k] for k in ("sparsity", "fp16", "int8") if fields.get(k) is not None}}
            from cosyedge.builders.trt import build_trt

            folder = build_trt(
                model, out_dir=out_dir, name=name, precision=precision, sparse=sparse,
                dla_core=dla_core, gpu_fallback=gpu_fallback, parent_path=src, extra_manifest=extra)
            done = True
            return folder
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if not done:  # an engines folder this build made stays only with an engine in it
                remove_empty_folders(made)
    return build_ort(onnx_path, out_dir=out_dir, name=name, **options)


def build(source: str | Path | None = None, config: BuildConfig | None = None, backend: str = "auto", *,
          name: str | None = None, out_dir: str | Path | None = None, dla_core: int | None = None,
          gpu_fallback: bool = False, **triton_options) -> Path:
    """Build an engine folder for one backend: the one dispatch for ONNX Runtime, TensorRT and Triton.

    ``auto``/``onnxruntime``/``tensorrt`` go through :func:`build_engine`; ``triton`` writes a Triton model
    repository (:func:`cosyedge.builders.triton.build_triton`, imported lazily).

    Args:
        source (str | Path | None): Streaming FP32 ONNX; None: the bundled reference model
            (:func:`cosyedge.models.require_reference`).
        config (BuildConfig | None): Precision, sparsity, exclusions, calibration (None: FP32 dense).
        backend (str): ``auto`` | ``onnxruntime`` | ``tensorrt`` | ``triton``.
        name (str | None): Engine name (default: the model's, see :func:`cosyedge.builders.names.engine_model_name`).
        out_dir (str | Path | None): Engines root (default ``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        dla_core (int | None): TensorRT only: DLA core (Jetson).
        gpu_fallback (bool): TensorRT only, with ``dla_core``: unsupported layers run on the GPU.
        **triton_options: Triton only (:data:`TRITON_OPTIONS`); None values are dropped (defaults apply).
    Returns:
        Path: the engine folder (or Triton repository folder).
    Raises:
        UsageError: TensorRT options with Triton, Triton options with another backend, bad options.
        ArtifactError: ``out_dir`` (or a parent) is a file (checked before any work).
        ArtifactError / DependencyError / AccuracyError: see :func:`build_engine` and
            :func:`cosyedge.builders.triton.build_triton`.
    """
    from cosyedge.artifacts import check_folder_path

    config = config if config is not None else BuildConfig()
    if out_dir is not None:  # before any work: -o is the engines root, a folder that receives the engine folder
        check_folder_path(out_dir, "-o", "the engines root, which receives the engine folder")
    unknown = [k for k in triton_options if k not in TRITON_OPTIONS]
    if unknown:
        raise TypeError(f"build() got unexpected options {unknown}")
    given = {k: v for k, v in triton_options.items() if v is not None}
    if backend == TRITON:
        from cosyedge.builders.triton import build_triton

        if config.placement not in (None, "trt") and given.get("triton_backend") != "python":
            raise UsageError(f"--int8-placement {config.placement} is for ONNX Runtime CPU; Triton builds use trt "
                             f"(its Python backend runs ONNX Runtime CPU: --triton-backend python)")
        from cosyedge.models import require_reference

        if dla_core is not None or gpu_fallback:
            raise UsageError("--dla-core/--gpu-fallback are TensorRT options (Jetson), not Triton ones")
        return build_triton(source or require_reference(), out_dir=out_dir, name=name, config=config, **given)
    if given:
        flags = ", ".join(TRITON_FLAGS.get(k, "--" + k.replace("_", "-")) for k in given)
        raise UsageError(f"{flags} {'applies' if len(given) == 1 else 'apply'} to --backend triton only")
    return build_engine(source, backend=backend, name=name, out_dir=out_dir, config=config,
                        dla_core=dla_core, gpu_fallback=gpu_fallback)


__all__ = [
    "BACKENDS",
    "BuildConfig",
    "TRITON_OPTIONS",
    "build",
    "OrtEngineFromOnnx",
    "build_engine",
    "build_ort",
    "resolve_backend",
]
