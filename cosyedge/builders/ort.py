"""Build stage for ONNX Runtime: a streaming ONNX -> a self-describing engine folder.

An engine folder ``<engines root>/<name>-<precision>[-sparse]-onnxruntime/`` (``<name>``: the model's name, or
``<name>-<sha256[:8]>`` for a model derived from another one, :func:`cosyedge.builders.names.engine_model_name`)
holds:

* ``model.onnx``: the precision ONNX (:func:`cosyedge.builders.prepare.prepare_onnx`: FP32 copy, FP16
  with FP32 I/O and states, or INT8 Q/DQ; optionally 2:4-pruned first). ONNX Runtime runs it as is, so it
  is also the backend artifact; models with external data are saved as one file.
* ``manifest.json``: stage ``build``, backend ``onnxruntime``, precision, sparse, the model's SHA-256,
  the parent (FP32) ONNX SHA-256, the calibration hash (INT8), tool versions, build flags, the ONNX Runtime
  session options (``session``: optimisation level, transformers turned off), the FP16/INT8/sparsity reports
  and the stream contract.

The folder is assembled in a temp folder next to the destination and renamed into place, so a failed
build never leaves a half-written engine and never destroys the previous one. Before writing, the
model is loaded in ONNX Runtime and one zero chunk is run (shapes and finite output checked).

Engines root: ``$COSYEDGE_ENGINES_DIR`` or ``./engines``.

Loading an engine folder is :func:`cosyedge.runtime.engine.load_engine`; the bundled reference model's engine
(built once, cached) is :func:`cosyedge.builders.cache.default_engine`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    SourceModel,
    Stage,
    StreamContract,
    atomic_folder,
    write_manifest,
)
from cosyedge.builders.config import BuildConfig
from cosyedge.builders.names import check_engine_name, default_placement, engine_folder_name, engine_model_name
from cosyedge.builders.prepare import (
    DEFAULT_CALIB_COUNT,
    check_streaming_onnx,
    manifest_head,
    prepare_onnx,
    warn_replacing_other_flags,
    warn_replacing_other_model,
)
from cosyedge.errors import ArtifactError
from cosyedge.log import LOG
from cosyedge.runtime.engine import engines_root

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

BACKEND = "onnxruntime"
PRECISION = "fp32"
MODEL_FILE = "model.onnx"


def _smoke_test(model_path: Path, contract: StreamContract) -> None:
    """Run one zero chunk through ONNX Runtime: the model loads, shapes match, outputs are finite. A model with
    several streaming inputs (or feature inputs) gets a zero chunk on each (:func:`cosyedge.runtime.feeds.zero_feeds`)."""
    from cosyedge.runtime.feeds import zero_feeds
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(model_path) as s:
        if contract.audio_in:
            outs = s.push(np.zeros((1, 1, s.chunk_samples), np.float32))
        else:
            outs = s.push(zero_feeds(contract, s.chunk_samples))
        bad = [k for k, v in outs.items() if not np.isfinite(v).all()]
        if bad:
            raise ArtifactError(f"{model_path} produced NaN/Inf{'' if bad == [contract.output] else f' in {bad}'} "
                                f"for a zero input chunk; check the model")
        states = s.state()
        bad = [k for k, v in states.items() if not np.isfinite(v).all()]
        if bad:
            raise ArtifactError(f"{model_path} produced NaN/Inf states {bad} for a zero input chunk")


def build_ort(onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None, *,
              precision: str = PRECISION, sparse: bool = False, exclude: Iterable[str] = (),
              calib: str | Path | None = None, calib_count: int = DEFAULT_CALIB_COUNT,
              amax: str | Path | None = None, config: BuildConfig | None = None,
              qdq_placement: str | None = None) -> Path:
    """Build an ONNX Runtime engine folder (FP32, FP16 or INT8, optionally 2:4-sparse) from a streaming ONNX.

    The folder ``<out_dir>/<name>-<precision>[-sparse][-<INT8 variant>]-onnxruntime/`` (the variant, when not the
    default: placement, ``biascorr``, ``minsnr<dB>``, :func:`cosyedge.builders.names.engine_folder_name`; recorded in
    the manifest's ``flags``) holds ``model.onnx`` (the precision
    ONNX; for ONNX Runtime it is also the backend artifact the session loads) and ``manifest.json``
    (model and parent SHA-256, calibration hash, flags, tool versions, precision/sparsity reports, stream
    contract). It is assembled in a temp folder and renamed into place after one chunk ran finite.

    Args:
        onnx_path (str | Path | callable | SourceModel): Streaming FP32 ONNX (output of ``cosyedge streamify``),
            or a stage returning its path.
        out_dir (str | Path | None): Engines root that receives the engine folder; defaults to
            :func:`engines_root` (``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        name (str | None): Model name for the folder; defaults to the contract's ``name``, plus a short hash
            of the ONNX for a model derived from another one (:func:`cosyedge.builders.names.engine_model_name`:
            the 2:4 fine-tuned ``reference.sparse.stream.onnx`` builds into ``reference-60b615af-...``).
        precision (str): ``fp32`` (default) | ``fp16`` | ``int8``.
        sparse (bool): Prune Conv/Gemm/MatMul weights 2:4 first (then quantize/convert).
        exclude (Iterable[str]): Node names kept as in the FP32 model (dense, float).
        calib (str | Path | None): INT8 calibration folder (None: the default calibration set).
        calib_count (int): INT8 calibration utterances (default 2048).
        amax (str | Path | None): INT8: reuse this amax cache instead of calibrating (see
            :func:`cosyedge.builders.prepare.prepare_onnx`).
        config (BuildConfig | None): The build options as one checked object (what ``cosyedge build`` passes);
            when given, ``precision``, ``sparse``, ``exclude``, ``calib``, ``calib_count`` and ``amax`` are not used.
        qdq_placement (str | None): INT8 Q/DQ placement (:func:`~cosyedge.precision.int8.int8_onnx`) when
            ``config.placement`` is None: ``ort_matmul`` (fused INT8 MatMuls, any hops per call), ``trt`` (TensorRT's
            rules; float convs between Q/DQ on ONNX Runtime CPU) or ``ort`` (QLinearConv, 4.6 dB lower output SNR).
            None (default): :func:`cosyedge.builders.names.default_placement` (``ort_matmul``; ``trt`` for a model
            whose compute sits in Scan bodies, said in one info line); that placement gets no folder-name part.
    Returns:
        Path: the engine folder.
    Raises:
        ArtifactError: ONNX missing/corrupt, no cosyedge metadata, no state (not streamified), ONNX
            Runtime cannot run it, or the folder cannot be written. Nothing is left behind.
        UsageError: bad name, precision or options.
        AccuracyError: the FP16 model produced NaN/Inf in its scan.
        DependencyError: onnxruntime is missing, or INT8 is requested without ``cosyedge.precision.int8``.
    """
    if config is None:  # one checked object instead of the keyword options
        config = BuildConfig.of(precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                                calib_count=calib_count, amax=amax)
    precision, sparse, exclude, calib, calib_count, amax = config.options()
    # parsed and hashed once for the whole build
    src = SourceModel.of(onnx_path)
    contract = check_streaming_onnx(src)
    plain, why = default_placement(BACKEND, src) if precision == "int8" else ("trt", None)
    placement = config.placement or qdq_placement or plain
    if why and placement == plain:
        LOG.info("%s", why)
    variant = config.variant(placement)
    name = check_engine_name(name or engine_model_name(contract.name, src))
    root = Path(out_dir) if out_dir is not None else engines_root()
    dest = root / engine_folder_name(name, precision, BACKEND, sparse, variant=variant, plain_placement=plain)
    label = precision + ("+2:4 sparse" if sparse else "")
    warn_replacing_other_model(dest, src)
    warn_replacing_other_flags(dest, variant)
    with LOG.stage(f"build {BACKEND} {label} engine {dest}"), atomic_folder(dest, "engine folder") as tmp:
        model_dst = tmp / MODEL_FILE
        fields = prepare_onnx(src, model_dst, precision=precision, sparse=sparse, exclude=exclude,
                              calib=calib, calib_count=calib_count, amax=amax, config=config, placement=placement,
                              final_path=dest / MODEL_FILE)
        _smoke_test(model_dst, StreamContract.from_onnx(model_dst))
        head = manifest_head(name=name, backend=BACKEND, precision=precision, sparse=sparse,
                             model_file=MODEL_FILE, model_path=model_dst, parent=src)
        write_manifest(tmp, {
            **head,
            "artifact": {"file": MODEL_FILE, "kind": "onnx (loaded by onnxruntime.InferenceSession)"},
            "session": _session_options(model_dst),
            "calibration_sha256": fields["calibration_sha256"],
            "tools": _tool_versions(precision),
            "flags": {**head["flags"], **variant, "exclude": list(exclude), "calib": None if calib is None else str(calib),
                      "calib_count": int(calib_count) if precision == "int8" else None},
            "reports": {k: fields[k] for k in ("sparsity", "fp16", "int8") if fields[k] is not None},
            "contract": contract.to_metadata(),
            "chunk_samples": contract.hop_samples,
            "sample_rate_hz": contract.sample_rate_hz,
        })
    LOG.info("engine: %s", dest)
    return dest


def _session_options(model_path: Path) -> dict:
    """The ONNX Runtime session options every cosyedge session on ``model_path`` uses (dict, for the manifest):
    ``graph_optimization_level`` (``ORT_ENABLE_ALL``) and ``disabled_optimizers`` (list[str],
    :func:`cosyedge.runtime.ort.disabled_optimizers_for`: ``NchwcTransformer`` for an FP16 model, whose
    ``ORT_ENABLE_ALL`` session can otherwise segfault; the same rule applies when ``run``/``compare``/``check``
    load it)."""
    from cosyedge.runtime.ort import disabled_optimizers_for

    return {"graph_optimization_level": "ORT_ENABLE_ALL",
            "disabled_optimizers": list(disabled_optimizers_for(model_path))}


def _tool_versions(precision: str) -> dict:
    """Versions (dict[str, str]) of the tools that made the engine."""
    tools = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "numpy": np.__version__}
    if precision == "int8":
        try:
            import onnx_graphsurgeon

            tools["onnx_graphsurgeon"] = onnx_graphsurgeon.__version__
        except ImportError:  # pragma: no cover - a hard dependency, but the manifest must not fail on it
            pass
    return tools


class OrtEngineFromOnnx(Stage):
    """Stage: streaming ONNX -> ONNX Runtime engine folder. Lazy: nothing runs until called.

    Args:
        onnx_path (str | Path | callable): Streaming ONNX path, or a stage returning one
            (e.g. ``OrtEngineFromOnnx(StatefulOnnxFromOnnx(...))``).
        out_dir (str | Path | None): Engines root (see :func:`build_ort`).
        name (str | None): Engine name (defaults to the contract's).
        **options: ``precision``, ``sparse``, ``exclude``, ``calib``, ``calib_count`` (see :func:`build_ort`).
    Returns (when called):
        Path: the engine folder.

    Source: Polygraphy ``backend/base/loader.py`` (lazy loaders with ``call_impl``).
    """

    def __init__(self, onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None, **options):
        self.onnx_path = onnx_path
        self.out_dir = out_dir
        self.name = name
        self.options = options

    def call_impl(self) -> Path:
        """Build and return the engine folder (Path); see :func:`build_ort`."""
        return build_ort(self.onnx_path, out_dir=self.out_dir, name=self.name, **self.options)

