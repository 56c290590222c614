"""Engines: load an engine folder (or a bare streaming ``.onnx``) as a factory of stream sessions.

An *engine* is what ``cosyedge build`` writes (``<engines root>/<name>-<precision>[-sparse]-<backend>/``:
the model, ``manifest.json``, for TensorRT ``engine.plan``) or a streaming ``.onnx`` with ``cosyedge.*``
metadata. :func:`load_engine` validates it (manifest, model hash, stream contract, streaming state) and
returns an :class:`Engine`: :class:`~cosyedge.runtime.ort.OrtEngine` (ONNX Runtime) or
:class:`~cosyedge.runtime.trt.TrtEngine` (TensorRT, imported lazily).

This module only *loads*. Building an engine that is missing or stale (the bundled reference model's
engine on first use, a TensorRT plan from another machine) is the build stage's job
(:mod:`cosyedge.builders.cache`: ``default_engine``, ``reuse_or_build``, ``load_or_rebuild``); nothing in
:mod:`cosyedge.runtime` imports :mod:`cosyedge.builders`.

Engines root: ``$COSYEDGE_ENGINES_DIR`` or ``./engines`` (:func:`engines_root`).

Source: Polygraphy ``backend/<fw>/{loader,runner}.py`` (loaders beside their runners; no runner imports a
builder).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cosyedge.artifacts import (MANIFEST_NAME, EngineManifest, SourceModel, StreamContract, load_manifest, load_onnx,
                                sha256_file)
from cosyedge.errors import ArtifactError
from cosyedge.log import LOG

BACKEND = "onnxruntime"
MODEL_FILE = "model.onnx"
ENGINES_ENV = "COSYEDGE_ENGINES_DIR"


def engines_root() -> Path:
    """Return the engines root folder (Path): ``$COSYEDGE_ENGINES_DIR`` or ``./engines``."""
    return Path(os.environ.get(ENGINES_ENV) or "engines")


@runtime_checkable
class Engine(Protocol):
    """A loaded engine: a factory of inactive :class:`~cosyedge.runtime.base.StreamSession` objects.

    Attributes:
        model_path (Path): The streaming ONNX the engine runs (or was built from, for TensorRT).
        contract (StreamContract): Its stream contract.
        folder (Path | None): Engine folder, or None for a bare ``.onnx``.
        manifest (dict | None): The validated manifest, or None for a bare ``.onnx``.
    """

    model_path: Path
    contract: StreamContract
    folder: Path | None
    manifest: dict | None

    def __call__(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                 providers: list[str] | None = None, max_latency_records: int | None = None) -> Any:
        """Return a new inactive stream session (see the backend's engine class)."""

    def session(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                providers: list[str] | None = None, max_latency_records: int | None = None) -> Any:
        """Same as calling the engine."""


def load_engine(path: str | Path, *, rebuild: Callable[..., Path] | None = None) -> Engine:
    """Load an engine folder (made by ``cosyedge build``) or a bare streaming ``.onnx``.

    A folder whose manifest says backend ``tensorrt`` is handed to
    :func:`cosyedge.runtime.trt.load_trt_engine` (a :class:`~cosyedge.runtime.trt.TrtEngine` with the same
    call signature; needs TensorRT, pycuda and a GPU, else a one-line DependencyError). Loading never builds:
    a plan built for another TensorRT/GPU is rebuilt only through ``rebuild`` (the build stage passes
    :func:`cosyedge.builders.trt.rebuild_trt`, see :func:`cosyedge.builders.cache.load_or_rebuild`).

    Args:
        path (str | Path): Engine folder with ``manifest.json`` + ``model.onnx``, or a ``.onnx`` file.
        rebuild (callable | None): TensorRT only: ``rebuild(folder, manifest, device=0) -> Path`` for a plan
            that cannot run here; None: such a plan raises ArtifactError with the rebuild command.
    Returns:
        Engine: an :class:`~cosyedge.runtime.ort.OrtEngine` or :class:`~cosyedge.runtime.trt.TrtEngine`,
        a session factory (``engine(chunk_samples=..., threads=...)``).
    Raises:
        ArtifactError: missing path; manifest missing/invalid or for another backend; model missing or
            its SHA-256 differs from the manifest (stale/corrupt engine: rebuild); no stream contract
            or no state in the model.
    """
    path = Path(path)
    if path.is_dir():
        manifest = load_manifest(path)
        m = EngineManifest.from_dict(manifest)
        backend = m.backend
        if backend == "tensorrt":  # checked against this machine's TensorRT/GPU, rebuilt if foreign
            from cosyedge.runtime.trt import load_trt_engine

            return load_trt_engine(path, manifest, rebuild=rebuild)
        if backend != BACKEND:
            raise ArtifactError(f"engine {path} is for backend '{backend}', not '{BACKEND}' "
                                f"(rebuild with 'cosyedge build --backend {BACKEND}')")
        model_path = path / (m.model_file or MODEL_FILE)
        extra = "".join(f" --{k}" for k in ("fp16", "int8", "sparse") if m.flags.get(k))
        fix = (f"rebuild it with 'cosyedge build --onnx {m.parent_path or 'MODEL.stream.onnx'}"
               f"{extra} --backend {BACKEND}'")
        if not model_path.is_file():
            raise ArtifactError(f"engine {path} has no {model_path.name}; {fix}")
        digest = sha256_file(model_path)
        if digest != m.model_sha256:
            raise ArtifactError(
                f"engine {path} is stale or corrupt: {model_path.name} sha256 {digest[:12]}... does not match "
                f"the manifest ({str(m.model_sha256)[:12]}...); {fix}"
            )
        source = ReadModel(model_path)
        folder: Path | None = path
    elif path.is_file():
        if path.name == MANIFEST_NAME:
            return load_engine(path.parent, rebuild=rebuild)
        if path.suffix.lower() != ".onnx":
            raise ArtifactError(f"{path} is neither an engine folder nor a .onnx file")
        manifest, model_path, folder = None, path, None
        source = ReadModel(model_path)
    elif path.suffix.lower() == ".onnx":  # meant as a model file (e.g. check --onnx), not an engine folder
        raise ArtifactError(f"ONNX model not found: {path}")
    else:
        raise ArtifactError(f"engine not found: {path} (build one with 'cosyedge build --onnx MODEL.stream.onnx')")
    contract = source.contract
    contract.require_streaming(model_path)
    LOG.debug("engine %s: %s, %d Hz, hop %d, delay %d", path, contract.name, contract.sample_rate_hz,
              contract.hop_samples, contract.delay_samples)
    from cosyedge.runtime.ort import OrtEngine

    return OrtEngine(model_path=model_path, contract=contract, folder=folder, manifest=manifest, source=source)


class ReadModel(SourceModel):
    """The streaming ONNX of a loaded engine, read from disk once: the ModelProto (without external data) is
    loaded here and the stream contract parsed from it, so the engine's sessions and the metadata checks of the run
    path (:func:`cosyedge.vad.stream.model_metadata`) reuse that one read (a :class:`SourceModel` would read the
    file again for its contract).

    Args:
        path (Path): The ``.onnx`` file.
    Raises:
        ArtifactError: as :meth:`StreamContract.from_onnx <cosyedge.artifacts.StreamContract.from_onnx>` on the path
            (the messages name the file): missing, corrupt, metadata missing/invalid or contradicting the graph.
    """

    def __init__(self, path: Path):
        super().__init__(path)
        self._proto = load_onnx(self.path, load_external_data=False)
        self._contract = StreamContract.from_onnx(self._proto, where=str(self.path))


__all__ = ["BACKEND", "ENGINES_ENV", "Engine", "MODEL_FILE", "ReadModel", "engines_root", "load_engine"]
