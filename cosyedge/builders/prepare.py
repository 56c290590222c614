"""Precision preparation shared by every backend: streaming FP32 ONNX -> the ONNX an engine is built from.

Order (one direction of flow): **sparsify** (2:4 pruning of the FP32 weights) -> **precision**
(FP16 conversion or INT8 KL calibration + Q/DQ, or a plain copy for FP32). Stacked INT8 + sparse is
therefore "sparsify then quantize": the pruned zeros stay exact zeros after symmetric per-channel
quantization (zero point 0), so the Q/DQ weights keep the 2:4 pattern.

``exclude`` names nodes kept as in the FP32 model by every step: left dense by the pruning and kept in
float by FP16/INT8.

The INT8 entry point :func:`cosyedge.precision.int8.int8_onnx` is imported when an INT8 build runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import SourceModel, StreamContract, load_onnx, sha256_file
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.builders.config import BuildConfig
from cosyedge.log import LOG
from cosyedge.precision.calibration import DEFAULT_CALIB_COUNT, Calibration

onnx = lazy_import("onnx")



def precision_from_flags(fp16: bool = False, int8: bool = False) -> str:
    """Return the precision (str) of the ``--fp16``/``--int8`` flags: ``fp16``, ``int8`` or ``fp32`` (neither).

    Raises:
        UsageError: both flags given.
    """
    if fp16 and int8:
        raise UsageError("--int8 and --fp16 are mutually exclusive: pick one precision (neither = FP32)")
    return "fp16" if fp16 else "int8" if int8 else "fp32"


def manifest_head(*, name: str, backend: str, precision: str, sparse: bool, model_file: str, model_path: Path,
                  parent: Path | SourceModel) -> dict:
    """The manifest fields every backend's engine folder shares (dict): stage, name, backend, precision,
    sparse flag, the model file and its SHA-256, the parent ONNX's SHA-256 and path, and the common
    ``flags`` (backend, precision, fp16, int8, sparse) that each backend extends with its own.

    Raises:
        ArtifactError: ``model_path`` or ``parent`` cannot be read (from :func:`sha256_file`).
    """
    return {
        "stage": "build",
        "name": name,
        "backend": backend,
        "precision": precision,
        "sparse": bool(sparse),
        "model": {"file": model_file, "sha256": sha256_file(model_path)},
        "parent_sha256": SourceModel.of(parent).sha256,
        "parent_path": str(Path(parent).resolve()),
        "flags": {"backend": backend, "precision": precision, "fp16": precision == "fp16",
                  "int8": precision == "int8", "sparse": bool(sparse)},
    }


QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
                           "MatMulIntegerToFloat", "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul"})
"""frozenset[str]: ops that mark an already quantized (INT8) model: no build starts from one."""


def check_streaming_onnx(src: Path | SourceModel) -> StreamContract:
    """Return the stream contract of ``src`` (Path, or a SourceModel: parsed once): the one source check every
    build (ONNX Runtime, TensorRT, Triton; FP32, FP16, INT8) makes before any work.

    Raises:
        ArtifactError: file missing/corrupt, no cosyedge metadata, or no state pairs (not streamified).
        UsageError: the model (or a Scan body in it) already holds Q/DQ or quantized ops (:data:`QUANTIZED_OPS`: an
            INT8 engine's ``model.onnx``), one line naming its FP32 parent as what to build from.
    """
    src = SourceModel.of(src)
    contract = src.contract
    contract.require_streaming(src)
    from cosyedge.precision.bodies import iter_graphs

    if any(n.op_type in QUANTIZED_OPS for g in iter_graphs(src.proto.graph) for n in g.node):
        raise UsageError(f"{src.path} already holds Q/DQ nodes (an INT8 model): build from its FP32 parent (an "
                         f"engine's manifest.json names it as 'parent_path')")
    return contract


def _copy_onnx(src: Path, dest: Path) -> None:
    model = load_onnx(src, load_external_data=False)
    from onnx.external_data_helper import uses_external_data

    if any(uses_external_data(t) for t in model.graph.initializer):
        onnx.save(load_onnx(src, load_external_data=True), str(dest))  # one self-contained file (< 2 GiB)
    else:
        shutil.copyfile(src, dest)


def prepare_onnx(onnx_path: Any, dest: str | Path, *, precision: str = "fp32", sparse: bool = False,
                 exclude: Iterable[str] = (), calib: str | Path | None = None,
                 calib_count: int = DEFAULT_CALIB_COUNT, amax: str | Path | None = None,
                 config: BuildConfig | None = None, placement: str = "trt",
                 final_path: str | Path | None = None) -> dict:
    """Write the precision ONNX ``dest`` from a streaming FP32 ONNX (sparsify, then FP16/INT8/copy).

    Args:
        onnx_path (str | Path | Stage | SourceModel): Streaming FP32 ONNX (``cosyedge streamify`` output).
        dest (str | Path): Output ``.onnx``; its folder holds temporary files during the call (a temp
            folder of the caller, typically). Not written atomically here: callers build in a temp folder.
        precision (str): ``fp32`` | ``fp16`` | ``int8``.
        sparse (bool): Prune 2:4 first.
        exclude (Iterable[str]): Node names kept as in the FP32 model (dense, float).
        calib (str | Path | None): INT8 calibration folder (None: the default calibration set).
        calib_count (int): INT8 calibration utterances (default 2048).
        amax (str | Path | None): INT8 only: reuse this amax cache (``<model>.amax.json`` of the model
            being quantized, i.e. of the 2:4-pruned model when ``sparse``) instead of calibrating; a
            cache of another model is an ArtifactError.
        config (BuildConfig | None): The options as one checked object (made by the CLI with
            :meth:`BuildConfig.from_flags`); when given, the keyword options above are not used.
        placement (str): INT8 Q/DQ placement for the backend (:func:`~cosyedge.precision.int8.int8_onnx`):
            ``trt`` (TensorRT, Triton's onnxruntime/tensorrt backends), ``ort`` or ``ort_matmul`` (ONNX Runtime CPU:
            the default of its builds, :func:`cosyedge.builders.names.default_placement`); ``config.placement`` wins
            when set. A default ``ort_matmul`` (``config.placement`` None) that finds nothing of its form in the
            model takes ``trt`` (one info line).
        final_path (str | Path | None): Where ``dest`` ends up once the caller's temp folder is renamed into place:
            the path the INT8 report and log line name (None: ``dest``).
    Returns:
        dict: manifest fields: ``precision``, ``sparse``, ``exclude``, ``parent_sha256`` of the FP32
        input is added by the caller; ``sparsity`` (report of :func:`~cosyedge.precision.sparsity.sparsify_onnx`
        or None), ``fp16`` (result of :func:`~cosyedge.precision.fp16.fp16_onnx` or None), ``int8``
        (result of ``int8_onnx`` or None), ``calibration_sha256`` (str | None).
    Raises:
        UsageError: unknown precision, ``calib``/``calib_count`` without INT8, unknown node in ``exclude``; a
            source that already holds FP16 tensors (an FP16 build's model.onnx).
        ArtifactError: input missing, not a streaming cosyedge ONNX, conversion failures.
        AccuracyError: FP16 scan found NaN/Inf.
    """
    if config is None:
        config = BuildConfig.of(precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                                calib_count=calib_count, amax=amax)
    cal = config.calibration or Calibration()
    precision, sparse, exclude = config.precision, config.sparse, config.exclude
    calib, calib_count, amax = cal.set, cal.count, cal.amax
    src = SourceModel.of(onnx_path)
    contract = check_streaming_onnx(src)  # src is passed down: its contract and SHA-256 are computed once
    from cosyedge.runtime.ort import holds_fp16

    if holds_fp16(src.proto):
        raise UsageError(f"{src.path} already holds FP16 tensors (an FP16 engine's model.onnx?): build from the FP32 "
                         "stream ONNX that 'cosyedge streamify' wrote (an engine's manifest.json names it as "
                         "'parent_path')")
    dest = Path(dest)
    if precision == "int8":
        from cosyedge.precision.int8 import int8_onnx, refuse_scan_bodies

        refuse_scan_bodies(src.proto, src.path, src.contract)  # before any pruning: the line names the user's model
    fields: dict = {"precision": precision, "sparse": bool(sparse), "exclude": list(exclude), "sparsity": None,
                    "fp16": None, "int8": None, "calibration_sha256": None}
    stage_in = src
    sparse_tmp = dest.with_name(dest.stem + ".sparse.tmp.onnx")
    try:
        if sparse:
            from cosyedge.precision.sparsity import sparsify_onnx

            target = dest if precision == "fp32" else sparse_tmp
            fields["sparsity"] = sparsify_onnx(src, target, exclude=exclude)
            stage_in = target
        if precision == "fp16":
            from cosyedge.precision.fp16 import fp16_onnx

            fields["fp16"] = fp16_onnx(stage_in, dest, exclude=exclude)
        elif precision == "int8":
            calibration = Calibration(set=calib, count=calib_count, amax=amax,
                                      cache_name=f"{contract.name}-sparse" if sparse else None,
                                      bias_correction=cal.bias_correction, min_snr_db=cal.min_snr_db)
            fallback = "trt" if config.placement is None and placement == "ort_matmul" else None
            placement = config.placement or placement
            res = int8_onnx(stage_in, dest, exclude=exclude, calibration=calibration, placement=placement,
                            final_path=final_path, fallback_placement=fallback)
            fields["int8"] = res
            fields["calibration_sha256"] = res["calibration_manifest_sha256"]  # the one key int8_onnx returns
        elif not sparse:
            _copy_onnx(src.path, dest)
    finally:
        sparse_tmp.unlink(missing_ok=True)
    if not dest.is_file():
        raise ArtifactError(f"the {precision} step did not write {dest}")
    LOG.debug("prepared %s (%s%s)", dest, precision, ", sparse" if sparse else "")
    return fields


def warn_replacing_other_model(dest: Path, parent: Path | SourceModel) -> None:
    """Log a warning when the engine folder ``dest`` already holds an engine built from another model (its
    manifest's ``parent_sha256`` is not the SHA-256 of ``parent``, the streaming ONNX about to be built): the
    build replaces it (e.g. a fine-tuned sparse ONNX whose metadata carries the same model name as its dense
    parent). Unreadable or absent manifests are ignored: there is nothing to tell then."""
    import json

    from cosyedge.artifacts import MANIFEST_NAME

    try:
        old = json.loads((Path(dest) / MANIFEST_NAME).read_text()).get("parent_sha256")
    except (OSError, ValueError, AttributeError):
        return
    new = SourceModel.of(parent).sha256
    if old and old != new:
        LOG.warning("%s holds an engine built from another model (sha256 %s...); replacing it with one built from "
                    "%s (%s...); pass --name to keep both", dest, str(old)[:12], Path(parent).name, new[:12])


def warn_replacing_other_flags(dest: Path, variant: dict) -> None:
    """Log one warning line when the engine folder ``dest`` already holds an INT8 engine of another variant (its
    manifest's placement, bias correction or minimum SNR, :func:`cosyedge.builders.names.variant_of_manifest`,
    differ from ``variant``, the build about to replace it), naming the differing flags. A non-default variant
    builds into its own folder (:func:`cosyedge.builders.names.engine_folder_name`), so this only fires for folders
    written before the variant was in the name. Unreadable or absent manifests and non-INT8 engines are ignored."""
    import json

    from cosyedge.artifacts import MANIFEST_NAME
    from cosyedge.builders.names import variant_diff, variant_of_manifest

    try:
        raw = json.loads((Path(dest) / MANIFEST_NAME).read_text())
        old = variant_of_manifest(raw)
    except (OSError, ValueError, AttributeError):
        return
    if old.get("int8_placement") is None or variant.get("int8_placement") is None:
        return
    diff = variant_diff(old, variant)
    if diff:
        from cosyedge.builders.names import engine_folder_name

        now = engine_folder_name(str(raw.get("name")), "int8", str(raw.get("backend")), bool(raw.get("sparse")),
                                 variant=old)
        LOG.warning("%s holds an INT8 engine built with other flags (%s); replacing it (an INT8 build with those "
                    "flags now writes %s)", dest, "; ".join(diff), now)


__all__ = ["DEFAULT_CALIB_COUNT", "QUANTIZED_OPS", "check_streaming_onnx", "manifest_head",
           "warn_replacing_other_flags", "warn_replacing_other_model",
           "precision_from_flags", "prepare_onnx"]
