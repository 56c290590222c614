"""Pretrained models by name: a recipe's stream ONNX and ONNX Runtime engine, made on first use, reused after.

``cosyedge run --model dtln FILE`` (and ``--vad``, which means Silero VAD) needs an engine of a recipe
(:func:`cosyedge.recipes.recipes`: nsnet2, dtln, dfn3, silero-vad, ...). :func:`recipe_engine` keeps two
things in the engines root (:func:`cosyedge.runtime.engine.engines_root`: ``$COSYEDGE_ENGINES_DIR`` or
``./engines``; in a read-only folder the per-user cache), like the bundled reference's engine (:func:`cosyedge.builders.cache.default_engine`):

* ``<name>.stream.onnx``: the recipe's export (proof included). It is reused while it loads and records the
  provenance the installed wheel gives now (recipe, package version, network hashes); a changed wheel
  re-exports. With the wheel missing, an existing export is used as it is (one info line); none: the recipe's
  one-line DependencyError naming the extra to install.
* ``<name>-fp32-onnxruntime/``: its engine, reused while its manifest's ``parent_sha256`` is the export's
  SHA-256 (:func:`cosyedge.builders.cache.reuse_or_build`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from cosyedge.errors import CosyEdgeError, DependencyError
from cosyedge.log import LOG

STREAM_SUFFIX = ".stream.onnx"


def wheel_missing(recipe) -> DependencyError | None:
    """The recipe's DependencyError when its wheel is not installed (also for a dotted module whose parent
    package is missing, which ``importlib.util.find_spec`` raises on), else None."""
    try:
        recipe.package_dir()
    except DependencyError as err:
        return err
    return None


def _recorded(path: Path) -> dict | None:
    """The recipe provenance recorded in a stream ONNX (dict), or None when it does not load as one."""
    try:
        from cosyedge.artifacts import StreamContract, load_onnx

        model = load_onnx(path, load_external_data=False)
        if not StreamContract.from_onnx(model).is_streaming:
            return None
        meta = {p.key: p.value for p in model.metadata_props}
        return json.loads(meta.get("recipe") or "null")
    except (CosyEdgeError, ValueError, OSError):
        return None


def recipe_stream_onnx(name: str, root: Path, export: Callable | None = None) -> Path:
    """Return ``<root>/<name>.stream.onnx``, exporting recipe ``name`` there unless a current export is there.

    Args:
        name (str): Recipe name.
        root (Path): Engines root.
        export (Callable | None): ``export(name, out)`` (tests count calls); default
            :func:`cosyedge.recipes.export_recipe`.
    Returns:
        Path: the stream ONNX.
    Raises:
        UsageError: unknown recipe. DependencyError: wheel missing and nothing exported yet (names the extra).
        ArtifactError / AccuracyError: from the export.
    """
    from cosyedge.recipes import export_recipe, get_recipe

    recipe = get_recipe(name)
    src = root / f"{name}{STREAM_SUFFIX}"
    have = _recorded(src) if src.is_file() else None
    missing = wheel_missing(recipe)
    if missing is not None:
        if have is None:
            raise missing
        LOG.info("%s: the %s wheel is not installed; using the model exported earlier, %s", name, recipe.package, src)
        return src
    if have is not None and have == recipe.provenance():
        LOG.info("%s: reusing %s", name, src)
        return src
    if have is not None:
        LOG.info("%s: %s was exported from another %s (%s); exporting again", name, src, recipe.package,
                 have.get("version"))
    LOG.info("%s: exporting the recipe to %s (first use)", name, src)
    (export or export_recipe)(name, src)
    return src


def recipe_engine(name: str, *, export: Callable | None = None, build: Callable | None = None) -> Path:
    """Return the FP32 ONNX Runtime engine folder of recipe ``name``, exporting and building on first use.

    Args:
        name (str): Recipe name (``nsnet2``, ``dtln``, ``dfn3``, ``silero-vad``, ...).
        export (Callable | None): ``export(name, out)``; default :func:`cosyedge.recipes.export_recipe`.
        build (Callable | None): ``build(onnx_path, out_dir=...) -> Path``; default
            :func:`cosyedge.builders.ort.build_ort`.
    Returns:
        Path: ``<engines root>/<name>-fp32-onnxruntime``.
    Raises:
        UsageError: unknown recipe. DependencyError: the wheel is missing (one line naming the extra).
        ArtifactError / AccuracyError: export or build failed.
    """
    return _recipe_engine(name, export, build)[0]


def load_recipe_engine(name: str, *, export: Callable | None = None, build: Callable | None = None):
    """:func:`recipe_engine`, loaded once: the engine loaded to see that the folder is fresh is the one returned
    (one just built is loaded after its build); what ``cosyedge run --model NAME`` / ``--vad`` run.

    Args:
        name (str): Recipe name.
        export (Callable | None): As :func:`recipe_engine`.
        build (Callable | None): As :func:`recipe_engine`.
    Returns:
        Engine: the loaded engine of ``<engines root>/<name>-fp32-onnxruntime``.
    Raises:
        As :func:`recipe_engine`; ArtifactError: the engine just built does not load.
    """
    folder, engine = _recipe_engine(name, export, build)
    if engine is None:
        from cosyedge.builders.cache import load_or_rebuild

        engine = load_or_rebuild(folder)
    return engine


def _recipe_engine(name: str, export: Callable | None, build: Callable | None):
    """(folder, engine): :func:`recipe_engine`'s folder and, when the existing folder was fresh and reused, the
    engine loaded to check it (None when it was built now)."""
    from cosyedge.artifacts import sha256_file
    from cosyedge.builders.cache import built_from, reuse_or_build, writable_root
    from cosyedge.builders.names import engine_folder_name
    from cosyedge.runtime.engine import load_engine

    if build is None:
        from cosyedge.builders.ort import build_ort as build
    root = writable_root(f"the {name}", lambda r: (r / f"{name}{STREAM_SUFFIX}").is_file())
    src = recipe_stream_onnx(name, root, export)
    digest = sha256_file(src)
    folder = root / engine_folder_name(name)
    fresh: dict = {}

    def is_fresh(f: Path) -> bool:  # cache.parent_is, keeping the engine it loaded when fresh
        engine = load_engine(f)
        if not built_from(engine, digest):
            return False
        fresh[Path(f)] = engine
        return True

    out = reuse_or_build(src, folder, build=lambda: build(src, out_dir=root), fresh=is_fresh,
                         reused=f"{name}: reusing the engine %s", stale=f"{name}: model changed; rebuilding %s",
                         broken=f"{name}: rebuilding %s (%s)")
    return out, fresh.get(Path(out))
