"""Build stage for ONNX Runtime: a streaming ONNX -> a self-describing engine folder.

An engine folder ``<engines root>/<name>-fp32-onnxruntime/`` holds:

* ``model.onnx``: the streaming model (a byte copy; models with external data are saved as one file),
* ``manifest.json``: stage ``build``, backend ``onnxruntime``, precision ``fp32``, the model's SHA-256,
  the parent ONNX SHA-256, onnxruntime/onnx versions, build flags and the stream contract.

The folder is assembled in a temp folder next to the destination and renamed into place, so a failed
build never leaves a half-written engine and never destroys the previous one. Before writing, the
model is loaded in ONNX Runtime and one zero chunk is run (shapes and finite output checked).

Engines root: ``$COSYEDGE_ENGINES_DIR`` or ``./engines``.

:func:`load_engine` accepts an engine folder (manifest and model hash validated) or a bare streaming
``.onnx`` and returns an :class:`OrtEngine`, a factory of :class:`~cosyedge.runtime.ort.OrtStreamSession`.
:func:`default_engine` builds (once, cached) the engine of the bundled reference model.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    default_file_mode,
    MANIFEST_NAME,
    Stage,
    StreamContract,
    load_manifest,
    load_onnx,
    resolve_artifact,
    sha256_file,
    write_manifest,
)
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError
from cosyedge.log import LOG

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

BACKEND = "onnxruntime"
PRECISION = "fp32"
MODEL_FILE = "model.onnx"
ENGINES_ENV = "COSYEDGE_ENGINES_DIR"


def engines_root() -> Path:
    """Return the engines root folder (Path): ``$COSYEDGE_ENGINES_DIR`` or ``./engines``."""
    return Path(os.environ.get(ENGINES_ENV) or "engines")


def engine_folder_name(name: str, precision: str = PRECISION, backend: str = BACKEND) -> str:
    """Return the engine folder name (str) encoding its configuration, e.g. ``reference-fp32-onnxruntime``."""
    return f"{name}-{precision}-{backend}"


def _uses_external_data(model) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def _smoke_test(model_path: Path, contract: StreamContract) -> None:
    """Run one zero chunk through ONNX Runtime: the model loads, shapes match, output is finite."""
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(model_path) as s:
        chunk = np.zeros((1, 1, s.chunk_samples), np.float32)
        y = s.push(chunk)[contract.output]
        if not np.isfinite(y).all():
            raise ArtifactError(f"{model_path} produced NaN/Inf for a zero input chunk; check the model")
        states = s.state()
        bad = [k for k, v in states.items() if not np.isfinite(v).all()]
        if bad:
            raise ArtifactError(f"{model_path} produced NaN/Inf states {bad} for a zero input chunk")


def build_ort(onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None) -> Path:
    """Build an ONNX Runtime FP32 engine folder from a streaming ONNX.

    Args:
        onnx_path (str | Path | callable): Streaming ONNX (output of ``cosyedge streamify``), or a stage
            returning its path.
        out_dir (str | Path | None): Engines root that receives the engine folder; defaults to
            :func:`engines_root` (``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        name (str | None): Model name for the folder; defaults to the contract's ``name``.
    Returns:
        Path: the engine folder ``<out_dir>/<name>-fp32-onnxruntime``.
    Raises:
        ArtifactError: ONNX missing/corrupt, no cosyedge metadata, no state (not streamified), ONNX
            Runtime cannot run it, or the folder cannot be written.
        DependencyError: onnxruntime is missing.
    """
    src = resolve_artifact(onnx_path)
    contract = StreamContract.from_onnx(src)
    if not contract.is_streaming:
        raise ArtifactError(f"{src} has no streaming state (state_in.*/state_out.*); run 'cosyedge streamify' first")
    name = name or contract.name
    if not name or any(ch in name for ch in "/\\") or name in (".", ".."):
        raise UsageError(f"engine name {name!r} must be a plain folder name (no path separators)")
    root = Path(out_dir) if out_dir is not None else engines_root()
    dest = root / engine_folder_name(name)
    with LOG.stage(f"build {BACKEND} {PRECISION} engine {dest}"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
        except OSError as err:
            raise ArtifactError(f"cannot write engine folder in {root}: {err.strerror or err}") from None
        try:
            model_dst = tmp / MODEL_FILE
            model = load_onnx(src, load_external_data=False)
            if _uses_external_data(model):
                full = load_onnx(src, load_external_data=True)
                onnx.save(full, str(model_dst))  # one self-contained file (< 2 GiB)
            else:
                shutil.copyfile(src, model_dst)
            _smoke_test(model_dst, contract)
            write_manifest(tmp, {
                "stage": "build",
                "name": name,
                "backend": BACKEND,
                "precision": PRECISION,
                "model": {"file": MODEL_FILE, "sha256": sha256_file(model_dst)},
                "parent_sha256": sha256_file(src),
                "parent_path": str(src.resolve()),
                "tools": {"onnxruntime": ort.__version__, "onnx": onnx.__version__},
                "flags": {"backend": BACKEND, "precision": PRECISION, "fp16": False, "int8": False,
                          "sparse": False},
                "contract": contract.to_metadata(),
                "chunk_samples": contract.hop_samples,
                "sample_rate_hz": contract.sample_rate_hz,
            })
            os.chmod(tmp, default_file_mode(0o777))  # mkdtemp/mkstemp create 0700/0600
            _replace_dir(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    LOG.info("engine: %s", dest)
    return dest


def _replace_dir(tmp: Path, dest: Path) -> None:
    """Rename folder ``tmp`` onto ``dest``; an existing ``dest`` is moved aside first and removed after."""
    old = None
    try:
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.rmdir(old)
            os.rename(dest, old)
        os.rename(tmp, dest)
    except OSError as err:
        if old is not None and not dest.exists():
            os.rename(old, dest)
            old = None
        raise ArtifactError(f"cannot write engine folder {dest}: {err.strerror or err}") from None
    finally:
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


class OrtEngineFromOnnx(Stage):
    """Stage: streaming ONNX -> ONNX Runtime engine folder. Lazy: nothing runs until called.

    Args:
        onnx_path (str | Path | callable): Streaming ONNX path, or a stage returning one
            (e.g. ``OrtEngineFromOnnx(StatefulOnnxFromOnnx(...))``).
        out_dir (str | Path | None): Engines root (see :func:`build_ort`).
        name (str | None): Engine name (defaults to the contract's).
    Returns (when called):
        Path: the engine folder.

    Source: Polygraphy ``backend/base/loader.py`` (lazy loaders with ``call_impl``).
    """

    def __init__(self, onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None):
        self.onnx_path = onnx_path
        self.out_dir = out_dir
        self.name = name

    def call_impl(self) -> Path:
        """Build and return the engine folder (Path); see :func:`build_ort`."""
        return build_ort(self.onnx_path, out_dir=self.out_dir, name=self.name)


@dataclasses.dataclass
class OrtEngine:
    """A loaded ONNX Runtime engine: a factory of :class:`~cosyedge.runtime.ort.OrtStreamSession`.

    Attributes:
        model_path (Path): Streaming ONNX run by the sessions.
        contract (StreamContract): Its stream contract.
        folder (Path | None): Engine folder, or None for a bare ``.onnx``.
        manifest (dict | None): The validated manifest, or None for a bare ``.onnx``.
    """

    model_path: Path
    contract: StreamContract
    folder: Path | None = None
    manifest: dict | None = None

    def __call__(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                 providers: list[str] | None = None):
        """Return a new inactive :class:`~cosyedge.runtime.ort.OrtStreamSession` on this engine.

        Args:
            chunk_samples (int | None): Samples per chunk (defaults to one hop).
            batch (int): Streams per push.
            threads (int): ONNX Runtime threads.
            providers (list[str] | None): Execution providers (defaults to CPU).
        """
        from cosyedge.runtime.ort import OrtStreamSession

        return OrtStreamSession(self.model_path, chunk_samples=chunk_samples, batch=batch, threads=threads,
                                providers=providers)

    session = __call__


def load_engine(path: str | Path) -> OrtEngine:
    """Load an engine folder (made by ``cosyedge build``) or a bare streaming ``.onnx``.

    Args:
        path (str | Path): Engine folder with ``manifest.json`` + ``model.onnx``, or a ``.onnx`` file.
    Returns:
        OrtEngine: session factory (``engine(chunk_samples=..., threads=...)``).
    Raises:
        ArtifactError: missing path; manifest missing/invalid or for another backend; model missing or
            its SHA-256 differs from the manifest (stale/corrupt engine: rebuild); no stream contract
            or no state in the model.
    """
    path = Path(path)
    if path.is_dir():
        manifest = load_manifest(path)
        backend = manifest.get("backend")
        if backend != BACKEND:
            raise ArtifactError(f"engine {path} is for backend '{backend}', not '{BACKEND}' "
                                f"(rebuild with 'cosyedge build --backend {BACKEND}')")
        model_info = manifest.get("model") or {}
        model_path = path / model_info.get("file", MODEL_FILE)
        rebuild = f"rebuild it with 'cosyedge build --onnx {manifest.get('parent_path', 'MODEL.stream.onnx')}'"
        if not model_path.is_file():
            raise ArtifactError(f"engine {path} has no {model_path.name}; {rebuild}")
        digest = sha256_file(model_path)
        if digest != model_info.get("sha256"):
            raise ArtifactError(
                f"engine {path} is stale or corrupt: {model_path.name} sha256 {digest[:12]}... does not match "
                f"the manifest ({str(model_info.get('sha256'))[:12]}...); {rebuild}"
            )
        contract = StreamContract.from_onnx(model_path)
        folder: Path | None = path
    elif path.is_file():
        if path.name == MANIFEST_NAME:
            return load_engine(path.parent)
        if path.suffix.lower() != ".onnx":
            raise ArtifactError(f"{path} is neither an engine folder nor a .onnx file")
        manifest, model_path, folder = None, path, None
        contract = StreamContract.from_onnx(model_path)
    else:
        raise ArtifactError(f"engine not found: {path} (build one with 'cosyedge build --onnx MODEL.stream.onnx')")
    if not contract.is_streaming:
        raise ArtifactError(f"{model_path} has no streaming state (state_in.*/state_out.*); "
                            f"run 'cosyedge streamify' first")
    LOG.debug("engine %s: %s, %d Hz, hop %d, delay %d", path, contract.name, contract.sample_rate_hz,
              contract.hop_samples, contract.delay_samples)
    return OrtEngine(model_path=model_path, contract=contract, folder=folder, manifest=manifest)


_DEFAULT_CACHE: dict[str, Path] = {}


def default_engine(build: Callable[..., Path] = build_ort) -> Path:
    """Return the engine folder of the bundled reference model, building it on first use.

    The folder ``<engines root>/<name>-fp32-onnxruntime`` is reused while its manifest's
    ``parent_sha256`` equals the hash of the bundled ONNX and the engine validates; otherwise it is
    rebuilt. The result is cached per process.

    Args:
        build (callable): Builder ``build(onnx_path, out_dir=None) -> Path`` (for tests).
    Returns:
        Path: the engine folder.
    Raises:
        ArtifactError: the bundled ONNX (``cosyedge/models/reference.stream.onnx``) is missing, or the
            engine cannot be built.
    """
    from cosyedge.models import REFERENCE_STREAM_ONNX

    src = Path(REFERENCE_STREAM_ONNX)
    if not src.is_file():
        raise ArtifactError(
            f"bundled reference model {src} is missing (reinstall cosyedge, or pass an engine with "
            f"--engine PATH / build one with 'cosyedge build --onnx MODEL.stream.onnx')"
        )
    digest = sha256_file(src)
    cached = _DEFAULT_CACHE.get(digest)
    if cached is not None and (cached / MANIFEST_NAME).is_file():
        return cached
    contract = StreamContract.from_onnx(src)
    folder = engines_root() / engine_folder_name(contract.name)
    try:
        if load_engine(folder).manifest.get("parent_sha256") == digest:
            _DEFAULT_CACHE[digest] = folder
            return folder
        LOG.info("bundled reference model changed; rebuilding %s", folder)
    except CosyEdgeError as err:
        if folder.exists():
            LOG.info("rebuilding %s (%s)", folder, err)
    folder = build(src, out_dir=folder.parent)
    _DEFAULT_CACHE[digest] = folder
    return folder
