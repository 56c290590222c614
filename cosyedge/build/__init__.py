"""Build stage: streaming ONNX -> engine folder (``model`` + ``manifest.json``) for one backend.

* :mod:`cosyedge.build.ort`: ONNX Runtime FP32 (:func:`build_ort`, :class:`OrtEngineFromOnnx`,
  :func:`load_engine`, :func:`default_engine`).
* TensorRT (``cosyedge.build.trt``) comes later; FP16/INT8/2:4-sparse builds too.

:func:`build_engine` is what ``cosyedge build`` calls: it resolves the backend and the default model.
"""

from __future__ import annotations

from pathlib import Path

from cosyedge._lazy import has_module
from cosyedge.build.ort import (
    OrtEngine,
    OrtEngineFromOnnx,
    build_ort,
    default_engine,
    engines_root,
    load_engine,
)
from cosyedge.errors import DependencyError, UsageError
from cosyedge.log import LOG

BACKENDS = ("auto", "onnxruntime", "tensorrt")


def _tensorrt_builder_available() -> bool:
    return has_module("cosyedge.build.trt")


def resolve_backend(backend: str = "auto") -> str:
    """Return the concrete backend (str) for ``backend`` in :data:`BACKENDS`.

    ``auto`` picks ``tensorrt`` when TensorRT is importable and cosyedge ships its TensorRT builder,
    else ``onnxruntime``; the choice is logged.

    Raises:
        UsageError: unknown backend, or TensorRT builds are not available in this cosyedge version.
        DependencyError: ``tensorrt`` requested but the tensorrt package is not importable.
    """
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend '{backend}' (use one of {', '.join(BACKENDS)})")
    trt_ok = has_module("tensorrt")
    if backend == "auto":
        chosen = "tensorrt" if trt_ok and _tensorrt_builder_available() else "onnxruntime"
        why = "tensorrt is importable" if chosen == "tensorrt" else (
            "tensorrt is not importable" if not trt_ok else "the TensorRT builder is not in this cosyedge version")
        LOG.info("backend auto -> %s (%s)", chosen, why)
        return chosen
    if backend == "tensorrt":
        if not trt_ok:
            raise DependencyError(
                "backend 'tensorrt' needs TensorRT and an NVIDIA GPU: pip install 'cosyedge[trt]' on a GPU "
                "machine (JetPack's TensorRT on Jetson); on CPU use --backend onnxruntime"
            )
        if not _tensorrt_builder_available():
            raise UsageError("TensorRT engine builds are not available in this cosyedge version yet; "
                             "use --backend onnxruntime")
    return backend


def build_engine(onnx_path: str | Path | None = None, backend: str = "auto", name: str | None = None,
                 out_dir: str | Path | None = None) -> Path:
    """Build an FP32 engine folder for ``backend`` from a streaming ONNX.

    Args:
        onnx_path (str | Path | None): Streaming ONNX; defaults to the bundled reference
            (``cosyedge.models.REFERENCE_STREAM_ONNX``).
        backend (str): ``auto`` | ``onnxruntime`` | ``tensorrt``.
        name (str | None): Engine name (defaults to the model's contract name).
        out_dir (str | Path | None): Engines root (defaults to ``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
    Returns:
        Path: the engine folder.
    Raises:
        ArtifactError: model missing/invalid (bundled reference missing included).
        DependencyError / UsageError: see :func:`resolve_backend`.
    """
    from cosyedge.errors import ArtifactError
    from cosyedge.models import REFERENCE_STREAM_ONNX

    chosen = resolve_backend(backend)
    if onnx_path is None:
        onnx_path = REFERENCE_STREAM_ONNX
        if not Path(onnx_path).is_file():
            raise ArtifactError(f"bundled reference model {onnx_path} is missing; pass --onnx MODEL.stream.onnx")
    if chosen == "tensorrt":  # pragma: no cover - needs the TensorRT builder (later issue)
        import importlib

        return importlib.import_module("cosyedge.build.trt").build_trt(onnx_path, out_dir=out_dir, name=name)
    return build_ort(onnx_path, out_dir=out_dir, name=name)


__all__ = [
    "BACKENDS",
    "OrtEngine",
    "OrtEngineFromOnnx",
    "build_engine",
    "build_ort",
    "default_engine",
    "engines_root",
    "load_engine",
    "resolve_backend",
]
