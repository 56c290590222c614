"""Names of build configurations, one copy each: precisions, precision labels, engine folder and model names.

* :data:`PRECISIONS`: ``fp32``, ``fp16``, ``int8`` (defined beside the TensorRT version shim, which the runtime
  needs too: :data:`cosyedge.runtime.trt_compat.PRECISIONS`).
* :func:`precision_label` / :func:`parse_precision_label`: ``int8-sparse`` <-> ``("int8", True)``.
* :func:`engine_folder_name`: ``<model>-<precision>[-sparse][-<INT8 variant>][-dla<N>]-<backend>``.
* :func:`int8_variant` / :func:`variant_parts`: the INT8 options that make another engine (placement, bias correction,
  minimum SNR): recorded in the manifest's ``flags`` and, when not the defaults, in the folder name, so INT8 variants
  never replace each other. :func:`default_placement`: the placement of a plain ``--int8`` build, per backend
  (``ort_matmul`` on ONNX Runtime CPU, ``trt`` for TensorRT and Triton's onnxruntime/tensorrt backends).
* :func:`engine_model_name`: ``<name>`` or ``<name>-<sha256[:8]>`` for a model derived from another one.
"""

from __future__ import annotations

from pathlib import Path

from cosyedge.artifacts import SourceModel
from cosyedge.errors import UsageError
from cosyedge.runtime.trt_compat import PRECISIONS


def precision_label(precision: str, sparse: bool) -> str:
    """Return the label (str) of a build: ``precision`` plus ``-sparse`` when 2:4-pruned (``int8-sparse``)."""
    return f"{precision}-sparse" if sparse else precision


def parse_precision_label(label: str) -> tuple[str, bool]:
    """Split a label such as ``int8-sparse`` into ``("int8", True)``.

    Raises:
        UsageError: not ``fp32|fp16|int8`` optionally followed by ``-sparse`` (``sparse`` alone = fp32-sparse).
    """
    text = label.strip().lower().replace("+", "-").replace("_", "-")
    if text == "sparse":
        return "fp32", True
    base, _, rest = text.partition("-")
    if base not in PRECISIONS or rest not in ("", "sparse"):
        raise UsageError(f"unknown precision '{label}' (use fp32, fp16, int8, optionally with -sparse: "
                         f"e.g. fp16,int8-sparse)")
    return base, rest == "sparse"


DEFAULT_VARIANT = {"int8_placement": "trt", "bias_correction": False, "int8_min_snr": None}
"""dict: the INT8 variant flags (keys) of a plain ``--int8`` build; its placement is the backend's default
(:func:`default_placement`: ``ort_matmul`` on ONNX Runtime CPU, ``trt`` for TensorRT and Triton's
onnxruntime/tensorrt backends), as :func:`default_variant` gives it."""

ORT_DEFAULT_PLACEMENT = "ort_matmul"
"""str: the INT8 placement a plain ``--int8`` build gets where ONNX Runtime's CPU EP runs the engine: the fused
INT8 kernels (``DynamicQuantizeMatMul``) that pay there (measured p50 vs FP32, one thread, ``docs/bench/bench_targets.json``:
NSNet2 1.6-1.7x, DeepFilterNet3 1.2-1.3x, the bundled reference about 1.0x; ``trt`` there: 0.7-1.1x)."""

ORT_CPU_BACKENDS = ("onnxruntime", "triton-python")
"""tuple[str, ...]: the folder backends whose engine ONNX Runtime's CPU EP runs (an ONNX Runtime engine, a Triton
Python-backend repository: a StreamPool in the model's stub), so that default to :data:`ORT_DEFAULT_PLACEMENT`."""


def default_placement(backend: str, model=None) -> tuple[str, str | None]:
    """The INT8 placement a build with no ``--int8-placement`` gets, and why not ``ort_matmul`` where it could.

    Args:
        backend (str): The folder backend: ``onnxruntime``, ``triton-python`` (:data:`ORT_CPU_BACKENDS`: ONNX Runtime
            CPU) or ``tensorrt``/``triton`` (TensorRT, Triton's onnxruntime/tensorrt backends: ``trt``).
        model (str | Path | SourceModel | None): The FP32 streaming model; one whose compute sits in Scan bodies (an
            adopted model: GTCRN, DTLN, Silero VAD) takes the ``trt`` placement only
            (:func:`cosyedge.precision.int8.int8_onnx`). None: not looked at.
    Returns:
        tuple[str, str | None]: the placement (``ort_matmul`` | ``trt``) and, when an ONNX Runtime CPU backend gets
        ``trt``, the one line saying why (for an info line; None otherwise).
    """
    if backend not in ORT_CPU_BACKENDS:
        return "trt", None
    if model is not None:
        from cosyedge.precision.bodies import has_subgraphs

        src = SourceModel.of(model)
        if has_subgraphs(src.proto):
            return "trt", (f"INT8 placement trt: {src.path.name} keeps its compute in Scan bodies, which the ONNX "
                           f"Runtime default {ORT_DEFAULT_PLACEMENT} (flat graphs only) cannot take")
    return ORT_DEFAULT_PLACEMENT, None


def default_variant(placement: str = "trt") -> dict:
    """The INT8 variant flags (dict, :func:`int8_variant`) of a plain ``--int8`` build whose placement is
    ``placement`` (the backend's, :func:`default_placement`)."""
    return dict(DEFAULT_VARIANT, int8_placement=placement)


def int8_variant(precision: str, placement: str | None = None, bias_correction: bool = False,
                 min_snr_db: float | None = None) -> dict:
    """The INT8 variant flags of a build (dict): ``int8_placement`` (str; ``trt`` when None), ``bias_correction``
    (bool), ``int8_min_snr`` (float | None); ``{}`` for an FP32/FP16 build (its manifest flags get none of them).

    Raises:
        UsageError: ``min_snr_db`` not a finite number >= 0 (:func:`cosyedge.precision.fallback.check_min_snr`)."""
    if precision != "int8":
        return {}
    from cosyedge.precision.fallback import check_min_snr

    return {"int8_placement": placement or "trt", "bias_correction": bool(bias_correction),
            "int8_min_snr": check_min_snr(min_snr_db)}


def variant_of_manifest(manifest: dict) -> dict:
    """The INT8 variant (:func:`int8_variant`) an engine's manifest records (dict): its ``flags``, or for a folder
    built before they were recorded, what its ``reports.int8`` says (placement, bias correction report, fallback
    target). FP32/FP16 engines: all None."""
    flags = manifest.get("flags") or {}
    if manifest.get("precision") != "int8":
        return {k: None for k in DEFAULT_VARIANT}
    if "int8_placement" in flags:
        return {k: flags.get(k) for k in DEFAULT_VARIANT}
    rep = (manifest.get("reports") or {}).get("int8") or {}
    target = (rep.get("fallback") or {}).get("target_db")
    return int8_variant("int8", rep.get("placement"), rep.get("bias_correction") is not None, target)


def variant_parts(variant: dict | None, default: str = "trt") -> list[str]:
    """The folder-name parts (list[str]) of an INT8 variant that is not the default: the placement when it is not
    ``default`` (the backend's, :func:`default_placement`: ``trt``, ``ort``, ``ort_matmul``), ``biascorr``,
    ``minsnr<dB>`` (e.g. ``minsnr42``); ``[]`` for the default or None."""
    if not variant or variant.get("int8_placement") is None:
        return []
    parts = [variant["int8_placement"]] if variant["int8_placement"] != default else []
    parts += ["biascorr"] if variant.get("bias_correction") else []
    snr = variant.get("int8_min_snr")
    return parts + ([f"minsnr{snr:g}"] if snr is not None else [])


def variant_diff(old: dict, new: dict) -> list[str]:
    """The flags (list[str], as ``cosyedge build`` spells them with the old and new values) in which two INT8 variants
    differ, e.g. ``["--int8-placement ort_matmul -> trt"]``; ``[]`` when equal."""
    spell = {"int8_placement": "--int8-placement", "bias_correction": "--bias-correction",
             "int8_min_snr": "--int8-min-snr"}
    return [f"{spell[k]} {_show(old.get(k))} -> {_show(new.get(k))}" for k in DEFAULT_VARIANT
            if old.get(k) != new.get(k)]


def _show(value) -> str:
    """A flag value as a message shows it: ``on``/``off`` for bools, ``none`` for None."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def engine_folder_name(name: str, precision: str = "fp32", backend: str = "onnxruntime", sparse: bool = False,
                       dla_core: int | None = None, variant: dict | None = None,
                       plain_placement: str | None = None) -> str:
    """Return the engine folder name (str) encoding its configuration, e.g. ``reference-int8-sparse-onnxruntime``,
    ``reference-int8-trt-biascorr-onnxruntime`` or ``reference-fp16-dla0-tensorrt`` (``dla_core``: TensorRT's
    DLA core, None for the GPU; ``variant``: the INT8 variant, :func:`int8_variant`, named by :func:`variant_parts`
    when not the default; ``plain_placement``: the placement a plain ``--int8`` build of this model gets here,
    which the name leaves out; None: the backend's, :func:`default_placement` without the model: ``ort_matmul``
    for ``onnxruntime``/``triton-python``, else ``trt``). ``name`` is the model part: :func:`engine_model_name`
    (``reference``, or ``reference-60b615af`` for a derived model)."""
    default = plain_placement or default_placement(backend)[0]
    parts = [name, precision] + (["sparse"] if sparse else []) + variant_parts(variant, default)
    parts += [f"dla{int(dla_core)}"] if dla_core is not None else []
    return "-".join(parts + [backend])


PARENT_HASH_CHARS = 8
"""int: hex digits of the parent ONNX's SHA-256 in the folder name of a derived model (:func:`engine_model_name`)."""


def engine_model_name(name: str, parent: str | Path | SourceModel, *, derived: bool | None = None) -> str:
    """Return the model part (str) of the folder name of an engine built from ``parent``.

    A model's name (its ONNX ``cosyedge.name``) stands for the model itself: its dense streaming ONNX, e.g. the
    bundled ``reference.stream.onnx`` for ``reference``; its engines are ``<name>-<precision>[-sparse]-<backend>``.
    A model **derived** from another one carries that one's name in its metadata, so it gets
    ``<name>-<first 8 hex digits of the parent ONNX's SHA-256>`` instead: two different parents never write the
    same folder, and neither build replaces the other's engines. Derived means the ONNX records where it comes
    from: the 2:4 fine-tuned model (``cosyedge.dense_parent_sha256``, written by
    ``scripts/training/finetune_sparse.py``;
    e.g. the bundled ``reference.sparse.stream.onnx`` builds into ``reference-60b615af-int8-sparse-onnxruntime``
    next to ``reference-int8-sparse-onnxruntime``, the dense model pruned on the fly) or a
    ``cosyedge sparsify`` output (``cosyedge.sparsity``). A retrained dense model with the same name still
    builds into the plain folder (it replaces the old engine, with a warning: :func:`warn_replacing_other_model`);
    ``--name`` picks any name.

    Args:
        name (str): Model name (the stream contract's ``name``).
        parent (str | Path | SourceModel): The FP32 streaming ONNX the engine is built from (a SourceModel is
            parsed and hashed once).
        derived (bool | None): True: always add the hash (``cosyedge check`` for its sparse parent, which may
            record nothing); False: never; None (default): read ``parent``'s metadata.
    Returns:
        str: ``name`` or ``<name>-<sha256[:8]>``.
    Raises:
        ArtifactError: ``parent`` missing or not a readable ONNX.
    """
    if derived is None:
        from cosyedge.precision.sparsity import DENSE_PARENT_KEY, SPARSITY_KEY

        keys = {p.key for p in SourceModel.of(parent).proto.metadata_props}
        derived = bool(keys & {DENSE_PARENT_KEY, SPARSITY_KEY})
    return f"{name}-{SourceModel.of(parent).sha256[:PARENT_HASH_CHARS]}" if derived else name


def check_engine_name(name: str | None) -> str:
    """Return ``name`` if it is usable as an engine folder name.

    Raises:
        UsageError: empty, ``.``/``..``, holding a path separator, or longer than
            :data:`~cosyedge.artifacts.contract.MAX_NAME_BYTES` (a name from the model's metadata: give ``--name``).
    """
    from cosyedge.artifacts.contract import name_too_long

    if not name or any(ch in name for ch in "/\\") or name in (".", ".."):
        raise UsageError(f"engine name {name!r} must be a plain folder name (no path separators)")
    too_long = name_too_long(name, "engine name")
    if too_long:
        raise UsageError(too_long.replace("give a shorter one", "give a shorter one with --name"))
    return name


TRITON_NAME_CHARS = "letters, digits, '_', '-' and '.' (not first)"
"""str: what :func:`check_triton_model_name` accepts, in words."""


def check_triton_model_name(name: str, given: bool = True) -> str:
    """Return ``name`` if Triton can load a model of that name, the name of its folder and of its config.

    Triton's Python backend starts each model's stub through a ``bash -c`` command line that holds the model's
    folder path and instance name unquoted, so a space or a shell character in the name breaks the stub's launch
    (the model never loads); Triton skips hidden folders (a leading ``.``) and a leading ``-`` reads as a flag. So a
    Triton model name is letters, digits, ``_``, ``-`` and ``.``, starting with a letter, digit or ``_``
    (``reference``, ``silero-vad``, ``reference-60b615af``).

    Args:
        name (str): The model name.
        given (bool): It came from ``--name`` (else from the model's metadata; the message says so).
    Raises:
        UsageError: one line naming --name (exit 2).
    """
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name or ""):
        where = f"--name {name!r}" if given else f"the model's name {name!r} (from its metadata)"
        raise UsageError(f"{where} cannot name a Triton model: use {TRITON_NAME_CHARS}"
                         f"{'' if given else '; give --name'}")
    return name


__all__ = ["DEFAULT_VARIANT", "ORT_CPU_BACKENDS", "ORT_DEFAULT_PLACEMENT", "PARENT_HASH_CHARS", "default_placement",
           "default_variant", "PRECISIONS", "TRITON_NAME_CHARS", "check_engine_name",
           "check_triton_model_name", "engine_folder_name",
           "engine_model_name", "int8_variant", "variant_diff", "variant_of_manifest", "variant_parts",
           "parse_precision_label", "precision_label"]
