"""The engine cache: reuse an engine folder while it is fresh, else build it; rebuild foreign TensorRT plans.

One rule for every "reuse the engine folder or build it" in cosyedge:

* :func:`reuse_or_build`: the folder is reused when ``fresh(folder)`` says so (default: it loads with
  :func:`cosyedge.runtime.engine.load_engine` and its manifest's ``parent_sha256`` is the source's SHA-256);
  a folder that fails to load counts as stale. Otherwise ``build()`` writes it (atomically: the old folder
  survives a failed build).
* :func:`default_engine`: the bundled reference model's FP32 ONNX Runtime engine, built on first use into
  the engines root, cached per process (what ``cosyedge run`` / ``live`` / ``eval`` use without ``--engine``).
* :func:`load_or_rebuild`: :func:`cosyedge.runtime.engine.load_engine` with the TensorRT rebuild injected (a
  plan built for another TensorRT version or GPU is rebuilt in place from its stored ONNX).

The runtime only loads; this module is where running meets building (Polygraphy keeps that wiring in its
``tools/`` layer, never in a runner).
"""

from __future__ import annotations

import os

from collections.abc import Callable
from pathlib import Path

from cosyedge.artifacts import MANIFEST_NAME, EngineManifest, StreamContract, check_writable, sha256_file
from cosyedge.errors import ArtifactError, CosyEdgeError
from cosyedge.log import LOG
from cosyedge.runtime.engine import ENGINES_ENV, Engine, engines_root, load_engine

_DEFAULT_CACHE: dict[tuple[str, str], Path] = {}


def parent_is(folder: Path, parent_sha256: str) -> bool:
    """Whether the engine ``folder`` loads and was built from the model with SHA-256 ``parent_sha256``.

    Args:
        folder (Path): Engine folder.
        parent_sha256 (str): Hex SHA-256 of the source ONNX.
    Returns:
        bool: manifest ``parent_sha256`` equals it.
    Raises:
        CosyEdgeError: the folder does not load (missing, stale, corrupt; see
            :func:`cosyedge.runtime.engine.load_engine`).
    """
    return built_from(load_engine(folder), parent_sha256)


def built_from(engine: Engine, parent_sha256: str) -> bool:
    """Whether the loaded ``engine`` was built from the model with SHA-256 ``parent_sha256`` (bool: its manifest's
    ``parent_sha256``; False for a bare ``.onnx``)."""
    return EngineManifest.from_dict(engine.manifest or {}).parent_sha256 == parent_sha256


def amax_matches(amax: str | Path | None, manifest: EngineManifest) -> bool:
    """Whether the amax cache ``amax`` is the calibration an INT8 engine was built from.

    The cache must be for the model the engine quantized (``model.sha256`` equals the INT8 report's
    ``model_sha256``) and from the same calibration set (``calibration.manifest_sha256`` equals the report's
    ``calibration_manifest_sha256``).

    Args:
        amax (str | Path | None): An ``<model>.amax.json`` file (None or missing: False).
        manifest (EngineManifest): The engine's manifest.
    Returns:
        bool
    """
    import json

    if amax is None or not Path(amax).is_file():
        return False
    try:
        data = json.loads(Path(amax).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    rep = manifest.int8
    want = rep.get("model_sha256")
    if not want or (data.get("model") or {}).get("sha256") != want:
        return False
    return (data.get("calibration") or {}).get("manifest_sha256") == rep.get("calibration_manifest_sha256")


def label_fresh(folder: Path, parent_sha256: str, label: str, *, amax: str | Path | None = None,
                calib: str | Path | None = None, placement: str = "ort_matmul", calibrated: bool = False) -> bool:
    """The freshness rule of ``cosyedge check``'s engines (``reuse_or_build(..., fresh=...)``).

    Fresh when the folder loads (:func:`cosyedge.runtime.engine.load_engine`), was built from ``parent_sha256``,
    has the precision label ``label`` (``fp16``, ``int8-sparse``, ...) and no ``--exclude``; for INT8 also: the
    default variant (placement ``placement``, no bias correction, no minimum SNR: what check builds; an engine built
    with another placement, e.g. ``trt`` before ``ort_matmul`` became ONNX Runtime's default, is rebuilt; a folder
    written before
    other variants got their own folder names that holds another one is rebuilt, and the build says so in one warning
    line naming the flags and the folder that variant now builds into:
    :func:`cosyedge.builders.prepare.warn_replacing_other_flags`), and
    built from the amax cache ``amax`` when given (:func:`amax_matches`), else from the amax cache its report
    names, and, with ``calib``, on that calibration set (its ``manifest.json`` SHA-256); an INT8 engine that was not
    calibrated (its report's ``calibrated`` False: dynamic activations) reads neither, so ``amax`` and ``calib`` do
    not make it stale, unless ``calibrated`` says check's own build of it calibrates (e.g. a user's ``--int8-placement
    ort_matmul`` build of a model where ort_matmul finds nothing and check's build takes ``trt``): then it is stale.

    Args:
        folder (Path): ONNX Runtime engine folder.
        parent_sha256 (str): SHA-256 of the FP32 model the label is built from.
        label (str): Normalized precision label.
        amax (str | Path | None): The amax cache kept next to the baseline (check without ``--update-baseline``).
        calib (str | Path | None): The calibration set passed now.
        placement (str): The placement a plain ``--int8`` build of this model gets on ONNX Runtime
            (:func:`cosyedge.builders.names.default_placement`: ``ort_matmul``, or ``trt`` for a Scan-body model).
        calibrated (bool): INT8: check's build of this label calibrates
            (:func:`cosyedge.precision.int8.needs_calibration`), so an engine that was not calibrated is not it.
    Returns:
        bool
    Raises:
        CosyEdgeError: the folder does not load (:func:`reuse_or_build` counts that as stale).
    """
    from cosyedge.builders.names import parse_precision_label, precision_label

    m = EngineManifest.from_dict(load_engine(folder).manifest or {})
    precision, _ = parse_precision_label(label)
    fresh = (m.parent_sha256 == parent_sha256 and precision_label(m.precision, m.sparse) == label
             and not list(m.flags.get("exclude") or []))
    if fresh and precision == "int8":
        from cosyedge.builders.names import default_variant, variant_diff, variant_of_manifest

        if variant_diff(variant_of_manifest(m.raw), default_variant(placement)):
            return False
    if fresh and precision == "int8" and calibrated and not m.int8.get("calibrated", True):
        return False  # check's build calibrates; this one did not (another placement's all-float result)
    if fresh and precision == "int8" and m.int8.get("calibrated", True):  # dynamic activations: no calibration
        used = m.int8.get("amax_path")
        fresh = amax_matches(amax, m) if amax is not None else amax_matches(Path(used) if used else None, m)
        if fresh and calib is not None:  # built on the set passed now?
            cal = Path(calib) / MANIFEST_NAME
            fresh = cal.is_file() and sha256_file(cal) == m.int8.get("calibration_manifest_sha256")
    return fresh


def reuse_or_build(src: str | Path, folder: str | Path, *, build: Callable[[], Path],
                   fresh: Callable[[Path], bool] | None = None, reused: str | None = None,
                   stale: str | None = None, broken: str | None = None) -> Path:
    """Return ``folder`` when it is a fresh engine of ``src``, else build it.

    ``fresh(folder)`` decides; a :class:`CosyEdgeError` raised by it (the folder is missing or does not load)
    counts as stale. The default rule is :func:`parent_is` (the manifest's ``parent_sha256`` is ``src``'s
    SHA-256). ``cosyedge check`` passes its stricter rule (label, no ``--exclude``, INT8 amax and calibration
    set) as ``fresh``.

    Args:
        src (str | Path): The source (FP32 streaming) ONNX the engine is built from.
        folder (str | Path): The engine folder to reuse.
        build (callable): ``build() -> Path`` that (re)writes the engine; its result is returned.
        fresh (callable | None): ``fresh(folder) -> bool``; None: :func:`parent_is` with ``sha256(src)``.
        reused (str | None): Log line (``%s`` = folder) when reused; None: silent.
        stale (str | None): Log line (``%s`` = folder) when it loads but is not fresh; None: silent.
        broken (str | None): Log line (``%s`` = folder, ``%s`` = the error) when an existing folder does not
            load; None: silent.
    Returns:
        Path: the engine folder (``folder``, or what ``build`` returned).
    Raises:
        ArtifactError / UsageError / DependencyError / AccuracyError: from ``build``.
    """
    folder = Path(folder)
    if fresh is None:
        digest = sha256_file(src)

        def fresh(f: Path) -> bool:
            return parent_is(f, digest)

    try:
        ok = bool(fresh(folder))
        if not ok and stale:
            LOG.info(stale, folder)
    except CosyEdgeError as err:
        ok = False
        if broken and folder.exists():
            LOG.info(broken, folder, err)
    if ok:
        if reused:
            LOG.info(reused, folder)
        return folder
    return build()


def user_engines_root() -> Path:
    """Return the per-user engines cache (Path): ``$XDG_CACHE_HOME/cosyedge/engines``, else
    ``~/.cache/cosyedge/engines``: where :func:`default_engine` builds when ``./engines`` cannot be written."""
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cosyedge" / "engines"


def _writable(root: Path) -> bool:
    """Whether an engine folder can be created in ``root`` (Path; missing folders count as creatable)."""
    try:
        check_writable(root / ".cosyedge-probe")
    except ArtifactError:
        return False
    return True


def _fresh(folder: Path, digest: str) -> bool:
    """Whether ``folder`` (Path) holds a loadable engine built from the model with SHA-256 ``digest`` (str)."""
    try:
        return (folder / MANIFEST_NAME).is_file() and parent_is(folder, digest)
    except CosyEdgeError:
        return False


def writable_root(what: str, has: Callable[[Path], bool]) -> Path:
    """The engines root for ``what`` (Path): :func:`engines_root`, unless ``$COSYEDGE_ENGINES_DIR`` is unset, ``has``
    finds nothing usable of it there and it cannot be written (a read-only working folder): then
    :func:`user_engines_root`, said in one info line.

    Args:
        what (str): The engine as the messages name it (``"the reference"``, ``"the gtcrn"``).
        has (Callable[[Path], bool]): ``has(root)``: the root already holds what is needed (used as it is).
    Raises:
        ArtifactError: neither ``./engines`` nor the user cache can be written (names both and the fix).
    """
    import os

    root = engines_root()
    if os.environ.get(ENGINES_ENV) or has(root) or _writable(root):
        return root
    cache = user_engines_root()
    if not _writable(cache):
        raise ArtifactError(f"cannot write {what} engine in {root.absolute()} (not writable) nor in {cache}: "
                            f"set {ENGINES_ENV} to a writable folder, or pass --engine PATH")
    LOG.info("%s is not writable: %s engine goes to %s (set %s to choose another folder)", root.absolute(), what,
             cache, ENGINES_ENV)
    return cache


def default_engine(build: Callable[..., Path] | None = None) -> Path:
    """Return the engine folder of the bundled reference model, building it on first use.

    The folder ``<engines root>/<name>-fp32-onnxruntime`` is reused while its manifest's
    ``parent_sha256`` equals the hash of the bundled ONNX and the engine validates; otherwise it is
    rebuilt. The result is cached per process and engines root (``$COSYEDGE_ENGINES_DIR`` may change).
    Without ``$COSYEDGE_ENGINES_DIR``, when ``./engines`` holds no fresh engine and cannot be written (a
    read-only working folder), the engine goes to :func:`user_engines_root` (one info line says so).

    Args:
        build (callable | None): Builder ``build(onnx_path, out_dir=None) -> Path`` (for tests); default
            :func:`cosyedge.builders.ort.build_ort`.
    Returns:
        Path: the engine folder.
    Raises:
        ArtifactError: the bundled ONNX (``cosyedge/models/reference.stream.onnx``) is missing, the
            engine cannot be built, or neither ``./engines`` nor the user cache can be written.
    """
    from cosyedge.builders.names import engine_folder_name
    from cosyedge.models import require_reference

    if build is None:
        from cosyedge.builders.ort import build_ort as build
    src = require_reference("(reinstall cosyedge, or pass an engine with --engine PATH / build one with "
                            "'cosyedge build --onnx MODEL.stream.onnx')")
    digest = sha256_file(src)
    key = (digest, str(engines_root().resolve()))
    cached = _DEFAULT_CACHE.get(key)
    if cached is not None and (cached / MANIFEST_NAME).is_file():
        return cached
    contract = StreamContract.from_onnx(src)
    name = engine_folder_name(contract.name)
    folder = writable_root("the reference", lambda root: _fresh(root / name, digest)) / name
    folder = reuse_or_build(src, folder, build=lambda: build(src, out_dir=folder.parent),
                            fresh=lambda f: parent_is(f, digest),
                            stale="bundled reference model changed; rebuilding %s", broken="rebuilding %s (%s)")
    _DEFAULT_CACHE[key] = folder
    return folder


def rebuild_foreign_plan(folder: Path, manifest: dict | None = None, device: int = 0) -> Path:
    """Rebuild a TensorRT engine folder in place (:func:`cosyedge.builders.trt.rebuild_trt`, imported lazily).

    Args:
        folder (Path): Engine folder whose plan cannot run on this machine.
        manifest (dict | None): Its manifest.
        device (int): CUDA device.
    Returns:
        Path: the rebuilt folder.
    Raises:
        ArtifactError / UsageError / DependencyError: as :func:`cosyedge.builders.trt.build_trt`.
    """
    from cosyedge.builders.trt import rebuild_trt

    return rebuild_trt(folder, manifest, device=device)


def load_or_rebuild(path: str | Path, manifest: dict | None = None, *, device: int = 0) -> Engine:
    """Load an engine (folder or bare ``.onnx``); a TensorRT plan from another TensorRT/GPU is rebuilt in place.

    What ``cosyedge run``/``live``/``eval``/``compare`` call: :func:`cosyedge.runtime.engine.load_engine` (or,
    with ``manifest`` of a TensorRT folder, :func:`cosyedge.runtime.trt.load_trt_engine`) with
    :func:`rebuild_foreign_plan` injected.

    Args:
        path (str | Path | Engine): Engine folder, its ``manifest.json``, or a streaming ``.onnx``; an engine object
            (e.g. :class:`cosyedge.serve.client.ServedModel`) is returned as it is.
        manifest (dict | None): The folder's already loaded manifest (TensorRT folders).
        device (int): CUDA device (TensorRT).
    Returns:
        Engine: an OrtEngine or TrtEngine.
    Raises:
        ArtifactError: see :func:`cosyedge.runtime.engine.load_engine`; a foreign plan whose rebuild failed.
        DependencyError: a TensorRT engine without tensorrt, pycuda or a GPU.
    """
    if not isinstance(path, (str, os.PathLike)) and hasattr(path, "contract") and callable(path):
        return path  # already an engine (a model on a Triton server: cosyedge.serve.client.ServedModel)
    if manifest is not None and EngineManifest.from_dict(manifest).backend == "tensorrt":
        from cosyedge.runtime.trt import load_trt_engine

        return load_trt_engine(path, manifest, rebuild=rebuild_foreign_plan, device=device)
    return load_engine(path, rebuild=rebuild_foreign_plan)


__all__ = ["amax_matches", "built_from", "default_engine", "label_fresh", "load_or_rebuild", "parent_is", "rebuild_foreign_plan", "reuse_or_build",
           "user_engines_root", "writable_root"]
