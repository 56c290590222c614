"""Build stage for TensorRT: a (precision) streaming ONNX -> a self-describing engine folder.

``engines/<model>-<precision>[-sparse][-dla<N>]-tensorrt/`` holds

* ``model.onnx``: the precision ONNX the plan was built from (a byte copy, kept for rebuilds),
* ``engine.plan``: the serialized TensorRT engine,
* ``manifest.json``: stage ``build``, backend ``tensorrt``, precision, sparsity, TensorRT version, GPU
  name and compute capability, the build plan (network/builder flags), the optimization profile, the
  chunk length, the layers and which of them got sparse tactics, hashes and the stream contract.

The folder is assembled in a temp folder and renamed into place (an existing engine survives any
failure). The optimization profile comes from the ONNX's ``cosyedge.*`` stream contract
(:func:`profile_from_contract`): the chunk length is fixed to one multiple of the hop, state shapes are
exact, only the batch axis ``N`` has a range (``1..max_batch`` streams, optimised for ``opt_batch``).
The tactic timing cache lives in ``<engines root>/timing-cache/`` keyed by TensorRT version and GPU
architecture, so rebuilds and the other precisions of a model build faster.

Before a plan is deserialized, :func:`cosyedge.runtime.trt.load_trt_engine` compares its manifest with the installed TensorRT
and the GPU (:func:`cosyedge.runtime.trt_compat.check_engine_compat`): a mismatch rebuilds the plan from
the stored ONNX with the stored flags (with a message), or, when rebuilding is impossible or disabled,
raises a one-line error with the rebuild command.

Sources (NVIDIA TensorRT Python API, 8.6/10.x/11.x; see :mod:`cosyedge.runtime.trt_compat` for the
version differences):
  * ``Builder``, ``Builder.create_network``, ``Builder.create_builder_config``,
    ``Builder.create_optimization_profile``, ``Builder.build_serialized_network``, ``Builder.num_DLA_cores``:
    https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/python-api/infer/Core/Builder.html
  * ``OnnxParser.parse_from_file``, ``num_errors``, ``get_error``: .../python-api/parsers/Onnx/pyOnnx.html
  * ``IBuilderConfig.set_memory_pool_limit(MemoryPoolType.WORKSPACE, bytes)``, ``set_flag``,
    ``add_optimization_profile``, ``create_timing_cache``, ``set_timing_cache``, ``get_timing_cache``,
    ``default_device_type``, ``DLA_core``, ``profiling_verbosity``:
    .../python-api/infer/Core/BuilderConfig.html; ``ITimingCache.serialize``.
  * ``IOptimizationProfile.set_shape(name, min, opt, max)``: .../python-api/infer/Core/OptimizationProfile.html
  * ``ICudaEngine.create_engine_inspector``, ``IEngineInspector.get_engine_information(
    LayerInformationFormat.JSON)``: .../python-api/infer/Core/EngineInspector.html
  * FP32 pins of weakly typed FP16/INT8 builds (:func:`_pin_fp32_layers`):
    ``INetworkDefinition.num_layers``, ``get_layer(i)``:
    https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-861/api/python_api/infer/Graph/Network.html;
    ``ILayer.name``, ``num_outputs``, ``get_output(i)``, ``precision``, ``set_output_type(i, dtype)``,
    ``ITensor.dtype``: .../python-api/infer/Graph/LayerBase.html (C++ ``ILayer::setPrecision``: "preferred or
    required computational precision of this layer in a weakly-typed network",
    https://docs.nvidia.com/deeplearning/sdk/tensorrt-api/c_api/classnvinfer1_1_1_i_layer.html; the Python
    calls as in Polygraphy ``examples/cli/run/08_adding_precision_constraints/constrained_network.py``);
    ``trt.float32``/``trt.float16`` (aliases of ``DataType.FLOAT``/``HALF``):
    https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-861/api/python_api/infer/FoundationalTypes/DataType.html;
    ``BuilderFlag.PREFER_PRECISION_CONSTRAINTS`` (prefer: TensorRT may fall back to another precision when no
    implementation exists in the requested one; ``OBEY`` requires it): Polygraphy ``CreateConfig``
    ``precision_constraints``,
    https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/polygraphy/backend/trt/config.html, and
    "Precision Control", https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/precision-control.html
  * custom ``ILogger`` subclass (``ILogger.__init__(self)``, ``log(severity, msg)``), one per process
    (:func:`cosyedge.runtime.trt_stack.trt_logger`): .../python-api/infer/Core/Logger.html
  * Polygraphy ``backend/trt/config.py`` ``CreateConfig`` (same calls, timing cache handling).

Size: just over 500 lines: the build (profile, network flags, FP32 pins, timing cache, inspector, smoke
test) is one documented sequence of TensorRT calls; loading moved to :mod:`cosyedge.runtime.trt`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts import (
    BATCH_DIM,
    EngineManifest,
    SourceModel,
    Stage,
    StreamContract,
    atomic_folder,
    atomic_output,
    load_manifest,
    load_onnx,
    sha256_file,
    write_manifest,
)
from cosyedge.builders.names import check_engine_name, engine_model_name
from cosyedge.builders.names import engine_folder_name as _folder_name
from cosyedge.builders.prepare import manifest_head, warn_replacing_other_model
from cosyedge.errors import ArtifactError, CosyEdgeError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.runtime.engine import engines_root
from cosyedge.runtime.trt import BACKEND, MODEL_FILE, PLAN_FILE
from cosyedge.runtime.trt_compat import (
    PRECISIONS,
    features,
    fp32_pin_nodes,
    layers_from_inspector,
    layers_to_pin,
    network_flags_mask,
    parser_node_name,
    plan_build,
    sparse_layers_from_log,
)

TIMING_CACHE_DIR = "timing-cache"
DEFAULT_WORKSPACE_MIB = 1024
"""int: builder workspace cap (MiB); Jetson Orin Nano has 8 GB shared memory, 1 GiB is plenty here."""
DEFAULT_MAX_BATCH = 16
"""int: largest batch (streams per enqueue) of the optimization profile."""
MAX_MAX_BATCH = 4096


# ------------------------------------------------------------------------------- pure: profile, names
def profile_from_contract(contract: StreamContract, chunk_samples: int | None = None,
                          max_batch: int = DEFAULT_MAX_BATCH, opt_batch: int = 1) -> dict[str, tuple]:
    """Derive the optimization profile from a stream contract.

    The audio input is (N, 1, chunk_samples) with the chunk fixed (one multiple of the total stride,
    default one hop); a feature input has its contract shape with ``T`` = its frames per chunk
    (:meth:`StreamIO.frames`); every state input has its exact contract shape; only ``N`` ranges over
    ``1..max_batch`` (many streams per enqueue), optimised for ``opt_batch``.

    Args:
        contract (StreamContract): from the ONNX metadata.
        chunk_samples (int | None): Chunk length (samples) the engine streams; default ``hop_samples``.
        max_batch (int): Largest batch, 1..4096.
        opt_batch (int): Batch TensorRT tunes for, 1..``max_batch``.
    Returns:
        dict[str, tuple]: input name -> (min, opt, max) shapes, each a tuple of ints, audio input first.
    Raises:
        UsageError: bad chunk (not a positive multiple of the total stride) or batch numbers.
        ArtifactError: a state shape has no batch axis or a non-positive dimension.
    Source: TensorRT ``IOptimizationProfile.set_shape(input, min, opt, max)``; DESIGN.md ("optimization
        profile for a state tensor that disagrees with (kernel-1)*dilation" is a known failure: shapes come
        from the contract, never guessed).
    """
    chunk = int(contract.hop_samples if chunk_samples is None else chunk_samples)
    contract.check_chunk(chunk)
    if not 1 <= int(max_batch) <= MAX_MAX_BATCH:
        raise UsageError(f"max batch must be between 1 and {MAX_MAX_BATCH}, got {max_batch}")
    if not 1 <= int(opt_batch) <= int(max_batch):
        raise UsageError(f"opt batch must be between 1 and max batch {max_batch}, got {opt_batch}")
    lo, opt, hi = 1, int(opt_batch), int(max_batch)
    prof = {}
    for io in contract.stream_inputs:  # audio (N, 1, chunk) or features: frames per chunk from the contract
        frames = io.frames(chunk, contract.hop_samples)
        prof[io.name] = tuple(io.concrete_shape(b, frames) for b in (lo, opt, hi))
    for s in contract.states:
        _ = s.batch_axis  # raises ArtifactError without "N"
        if any(d != BATCH_DIM and (not isinstance(d, int) or d <= 0) for d in s.shape):
            raise ArtifactError(f"state '{s.input}' has shape {s.shape}; dimensions must be positive or 'N'")
        prof[s.input] = (s.concrete_shape(lo), s.concrete_shape(opt), s.concrete_shape(hi))
    return prof


def check_onnx_against_profile(model: Any, contract: StreamContract, profile: dict) -> None:
    """Check every ONNX graph input is in the profile and its static dimensions agree with it.

    Args:
        model (onnx.ModelProto): The ONNX to build.
        contract (StreamContract): Its contract.
        profile (dict): from :func:`profile_from_contract`.
    Raises:
        ArtifactError: an input missing from the profile (not in the contract) or vice versa, a rank
            mismatch, or a static dimension different from the profile (e.g. a state of 8 frames in the
            graph but 4 in the metadata).
    """
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in inits}
    extra = sorted(set(inputs) - set(profile))
    if extra:
        raise ArtifactError(f"ONNX inputs {extra} are not in the stream contract; re-run 'cosyedge streamify'")
    for name, (mn, _, mx) in profile.items():
        if name not in inputs:
            raise ArtifactError(f"contract input '{name}' is not an ONNX input; re-run 'cosyedge streamify'")
        dims = inputs[name].type.tensor_type.shape.dim
        if len(dims) != len(mn):
            raise ArtifactError(f"ONNX input '{name}' has rank {len(dims)}, the contract/profile shape is {list(mx)}")
        for axis, d in enumerate(dims):
            if d.HasField("dim_value") and mn[axis] == mx[axis] and d.dim_value != mn[axis]:
                raise ArtifactError(f"ONNX input '{name}' has {d.dim_value} on axis {axis} but the contract says "
                                    f"{mn[axis]} (profile {list(mn)}..{list(mx)}); re-run 'cosyedge streamify'")


def onnx_precision_stats(model: Any) -> dict:
    """Count what makes an ONNX reduced-precision, in its main graph and its Scan bodies (an INT8 ``ort_matmul``
    model runs its Q/DQ graph in a Scan over hops; an adopted model quantizes inside its bodies).

    Args:
        model (onnx.ModelProto)
    Returns:
        dict: ``{"qdq_nodes": int, "int8_kernels": int, "fp16_initializers": int, "fp16_casts": int}``
        (``int8_kernels``: ONNX Runtime's quantized kernels written into the model,
        :data:`cosyedge.precision.ort_fusion.FUSED_OPS`: the ``ort_matmul`` placement's ``DynamicQuantizeMatMul``,
        which needs no Q/DQ node).
    """
    from onnx import TensorProto

    from cosyedge.precision.bodies import iter_graphs

    graphs = list(iter_graphs(model.graph))
    qdq = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for g in graphs for n in g.node)
    f16 = sum(t.data_type == TensorProto.FLOAT16 for g in graphs for t in g.initializer)
    casts = sum(n.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.FLOAT16 for a in n.attribute)
                for g in graphs for n in g.node)
    from cosyedge.precision.ort_fusion import FUSED_OPS

    kernels = sum(n.op_type in FUSED_OPS for g in graphs for n in g.node)
    return {"qdq_nodes": int(qdq), "int8_kernels": int(kernels), "fp16_initializers": int(f16),
            "fp16_casts": int(casts)}


def check_precision(precision: str, stats: dict, strongly_typed: bool, where: str) -> None:
    """Refuse an ONNX whose content cannot give ``precision`` (precision lives in the ONNX).

    Args:
        precision (str): ``fp32`` | ``fp16`` | ``int8`` requested.
        stats (dict): from :func:`onnx_precision_stats`.
        strongly_typed (bool): The network will be strongly typed (then fp16 must be in the ONNX types).
        where (str): ONNX path for the message.
    Raises:
        UsageError: int8 without Q/DQ nodes; fp16 on a strongly typed build without FP16 tensors; fp32
            with Q/DQ nodes (that ONNX is an INT8 model).
    """
    if precision == "int8" and not stats["qdq_nodes"]:
        raise UsageError(f"{where} has no QuantizeLinear/DequantizeLinear nodes: an INT8 TensorRT build needs the "
                         f"INT8 (Q/DQ) ONNX from 'cosyedge build --int8' (TensorRT 10/11 take INT8 only from Q/DQ)")
    if precision == "fp16" and strongly_typed and not (stats["fp16_initializers"] or stats["fp16_casts"]):
        raise UsageError(f"{where} holds no FP16 tensors: a strongly typed FP16 build needs the FP16 ONNX from "
                         f"'cosyedge build --fp16'")
    if precision == "fp32" and stats["qdq_nodes"]:
        raise UsageError(f"{where} has {stats['qdq_nodes']} Q/DQ nodes: it is an INT8 model, build it with --int8")


def engine_folder_name(name: str, precision: str = "fp32", sparse: bool = False, dla_core: int | None = None) -> str:
    """Return the engine folder name (str), e.g. ``reference-int8-sparse-tensorrt`` or
    ``reference-fp16-dla0-tensorrt``."""
    return _folder_name(name, precision, BACKEND, sparse, dla_core)


def timing_cache_path(root: Path, trt_version: str, compute_capability: str) -> Path:
    """Return ``<root>/timing-cache/tensorrt-<version>-sm<major><minor>.cache`` (Path): one cache per
    TensorRT version and GPU architecture (a cache from another one is rejected by TensorRT)."""
    return Path(root) / TIMING_CACHE_DIR / f"tensorrt-{trt_version}-sm{compute_capability.replace('.', '')}.cache"


# ------------------------------------------------------------------------------------------ building
def build_trt(onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None, precision: str = "fp32",
              sparse: bool = False, dla_core: int | None = None, gpu_fallback: bool = False,
              workspace_mib: int = DEFAULT_WORKSPACE_MIB, max_batch: int = DEFAULT_MAX_BATCH,
              chunk_samples: int | None = None, opt_batch: int = 1, timing_cache: bool = True,
              device: int = 0, parent_path: "str | Path | SourceModel | None" = None,
              extra_manifest: dict | None = None) -> Path:
    """Build a TensorRT engine folder from a streaming (precision) ONNX.

    Args:
        onnx_path (str | Path | callable): Streaming ONNX (FP32, the FP16 ONNX or the Q/DQ INT8 ONNX of
            the precision stage, optionally 2:4-pruned), or a stage returning its path.
        out_dir (str | Path | None): Engines root; defaults to ``$COSYEDGE_ENGINES_DIR`` or ``./engines``.
        name (str | None): Model name for the folder; defaults to the contract's ``name`` (``<name>-<sha256[:8]>``
            of the parent for a model derived from another one: :func:`cosyedge.builders.names.engine_model_name`).
        precision (str): ``fp32`` | ``fp16`` | ``int8``: what the ONNX holds.
        sparse (bool): Set ``SPARSE_WEIGHTS`` (2:4 sparse tactics where faster; reported per layer).
        dla_core (int | None): Build for this DLA core (Jetson, TensorRT 8.6/10.x; fp16/int8 only).
        gpu_fallback (bool): With ``dla_core``: layers DLA cannot run go to the GPU.
        workspace_mib (int): Builder workspace cap, MiB (>= 1).
        max_batch (int): Largest number of streams per enqueue (profile max of ``N``).
        chunk_samples (int | None): Chunk length the engine streams (samples); default one hop.
        opt_batch (int): Batch the builder tunes for.
        timing_cache (bool): Load/save the timing cache under ``<out_dir>/timing-cache/``.
        device (int): CUDA device index.
        parent_path (str | Path | SourceModel | None): The FP32 ONNX the precision ONNX was made from
            (recorded as ``parent_path``/``parent_sha256``; a SourceModel, what ``cosyedge build`` passes, is
            not hashed again); defaults to ``onnx_path``.
        extra_manifest (dict | None): More manifest fields (calibration hash, precision reports).
    Returns:
        Path: the engine folder.
    Raises:
        UsageError: bad arguments (precision, DLA without fp16/int8, chunk/batch), ONNX content that does
            not match ``precision``, a DLA core the device does not have.
        ArtifactError: ONNX missing/corrupt/not streamified, TensorRT cannot parse or build it, the built
            engine fails its one-chunk smoke test, or the folder cannot be written.
        DependencyError: tensorrt, pycuda or a GPU is missing; unsupported TensorRT version.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r} (use one of {', '.join(PRECISIONS)})")
    if not 1 <= int(workspace_mib) <= 1 << 20:
        raise UsageError(f"workspace must be between 1 and {1 << 20} MiB, got {workspace_mib}")
    model_in = SourceModel.of(onnx_path)
    src = model_in.path
    contract = model_in.contract
    contract.require_streaming(src)
    from cosyedge.runtime.trt import require_one_waveform

    require_one_waveform(contract, str(src))
    # the parent is hashed once (name, replacement warning, manifest): a SourceModel caches its SHA-256
    parent = SourceModel.of(parent_path) if parent_path is not None else model_in
    name = check_engine_name(name or engine_model_name(contract.name, parent))
    profile = profile_from_contract(contract, chunk_samples, max_batch, opt_batch)
    model = load_onnx(src, load_external_data=False)
    check_onnx_against_profile(model, contract, profile)
    stats = onnx_precision_stats(model)

    from cosyedge.runtime.trt_stack import device_info, require_stack

    trt, cuda = require_stack("build TensorRT engines", device)
    feat = features(trt.__version__, trt)
    plan = plan_build(feat, precision, sparse, dla_core, gpu_fallback,
                      available_builder_flags=_enum_names(trt.BuilderFlag))
    check_precision(precision, stats, plan.strongly_typed, str(src))
    # Weak typing + FP16 flag: TensorRT may run any layer in FP16, so the ONNX's FP32 region is pinned.
    pins = fp32_pin_nodes(model, contract) if not plan.strongly_typed and "FP16" in plan.builder_flags else None
    gpu = device_info(cuda, device)
    root = Path(out_dir) if out_dir is not None else engines_root()
    dest = root / engine_folder_name(name, precision, sparse, plan.dla_core)
    # compared with what the old manifest records as its parent: the FP32 ONNX, not this precision ONNX
    warn_replacing_other_model(dest, parent)
    for note in plan.notes:
        LOG.info("%s", note)
    with LOG.stage(f"build {BACKEND} {precision}{' sparse' if sparse else ''} engine {dest} "
                   f"(TensorRT {trt.__version__}, {gpu['name']} sm{gpu['compute_capability']})"), \
            atomic_folder(dest, "engine folder") as tmp:
        model_dst = tmp / MODEL_FILE
        if _uses_external_data(model):
            import onnx

            onnx.save(load_onnx(src, load_external_data=True), str(model_dst))
        else:
            shutil.copyfile(src, model_dst)
        cache_file = timing_cache_path(root, trt.__version__, gpu["compute_capability"]) if timing_cache else None
        report = _build_plan_file(trt, model_dst, tmp / PLAN_FILE, plan, profile, workspace_mib, cache_file,
                                  fp32_nodes=pins, node_names=[parser_node_name(n) for n in model.graph.node])
        _smoke_test(tmp / PLAN_FILE, contract, profile, device)
        head = manifest_head(name=name, backend=BACKEND, precision=precision, sparse=sparse,
                             model_file=MODEL_FILE, model_path=model_dst, parent=parent)
        write_manifest(tmp, {
            **head,
            "plan": {"file": PLAN_FILE, "sha256": sha256_file(tmp / PLAN_FILE)},
            "tools": {"tensorrt": trt.__version__, "onnx": _onnx_version()},
            "gpu": gpu,
            "flags": {**head["flags"], "dla_core": plan.dla_core,
                      "gpu_fallback": bool(gpu_fallback), "workspace_mib": int(workspace_mib),
                      "max_batch": int(max_batch), "opt_batch": int(opt_batch)},
            "build_plan": plan.as_dict(),
            "onnx_precision": stats,
            "profile": {k: [list(s) for s in v] for k, v in profile.items()},
            "layers": report,
            "timing_cache": str(cache_file) if cache_file else None,
            "contract": contract.to_metadata(),
            "chunk_samples": profile[contract.input][0][2],
            "max_batch": int(max_batch),
            "sample_rate_hz": contract.sample_rate_hz,
            **(extra_manifest or {}),
        })
    if sparse:
        LOG.info("sparse tactics picked for %d of %d eligible layer(s): %s", len(report["sparse_picked"]),
                 len(report["sparse_eligible"]), ", ".join(report["sparse_picked"]) or "none")
    LOG.info("engine: %s", dest)
    return dest


def _existing(path: str | None) -> Path | None:
    """``Path(path)`` when that file still exists, else None."""
    return Path(path) if path and Path(path).is_file() else None


def _enum_names(enum: Any) -> list[str]:
    """Member names of a pybind11 enum (``__members__``), or the upper-case attributes of a namespace."""
    members = getattr(enum, "__members__", None)
    return list(members) if members else [n for n in dir(enum) if n.isupper()]


def _uses_external_data(model: Any) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def _pin_fp32_layers(trt: Any, network: Any, fp32_nodes: dict[str, str], node_names: list[str]) -> dict:
    """Pin the parsed layers of ``fp32_nodes`` to FP32 (weakly typed builds with the ``FP16`` flag).

    Each layer matched to a node to pin (:func:`~cosyedge.runtime.trt_compat.layers_to_pin`) that has a float
    (FP32/FP16) output gets ``layer.precision = trt.float32`` and ``set_output_type(i, trt.float32)`` on
    every float output (without the output type the data between layers may still be stored as FP16);
    layers with only integer/bool outputs (e.g. the index output of ArgMax) are left alone.

    Args:
        trt (module): ``tensorrt``.
        network (tensorrt.INetworkDefinition): The parsed network.
        fp32_nodes (dict[str, str]): Node (parser) name -> reason, from :func:`fp32_pin_nodes`.
        node_names (list[str]): Parser names of all ONNX nodes.
    Returns:
        dict: ``{"count": int, "layers": [layer names], "nodes": int (ONNX nodes to pin), "nodes_without_layer":
        [node names no float layer was found for]}``.
    """
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    match = layers_to_pin([layer.name for layer in layers], fp32_nodes, node_names)
    floats = (trt.float32, trt.float16)
    pinned: list[str] = []
    covered: set[str] = set()
    for layer in layers:
        if layer.name not in match:
            continue
        outs = [i for i in range(layer.num_outputs) if layer.get_output(i).dtype in floats]
        if not outs:
            continue
        layer.precision = trt.float32
        for i in outs:
            layer.set_output_type(i, trt.float32)
        pinned.append(layer.name)
        covered.add(match[layer.name])
    return {"count": len(pinned), "layers": pinned, "nodes": len(fp32_nodes),
            "nodes_without_layer": [n for n in fp32_nodes if n not in covered]}


def _build_plan_file(trt: Any, onnx_file: Path, plan_file: Path, plan: Any, profile: dict, workspace_mib: int,
                     cache_file: Path | None, fp32_nodes: dict[str, str] | None = None,
                     node_names: list[str] | None = None) -> dict:
    """Parse, configure, build and serialize; save the timing cache; return the layer/sparsity report.

    ``fp32_nodes`` (node -> reason, None for strongly typed builds): ONNX nodes whose layers are pinned to
    FP32 (:func:`_pin_fp32_layers`) with ``PREFER_PRECISION_CONSTRAINTS``; the report's ``fp32_pinned``
    says how many layers and which.
    """
    from cosyedge.runtime.trt_stack import trt_logger

    logger = trt_logger(trt)
    logger.clear()
    builder = trt.Builder(logger)
    if builder is None:
        raise ArtifactError("TensorRT could not create a builder (CUDA initialisation failed?): "
                            + (logger.errors[-1] if logger.errors else "see the log"))
    network = builder.create_network(network_flags_mask(plan.network_flags, trt.NetworkDefinitionCreationFlag))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_file)):
        errs = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        first = errs[0].strip().splitlines()[0] if errs else "unknown error"
        raise ArtifactError(f"TensorRT {trt.__version__} cannot parse {onnx_file.name}: {first}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mib) << 20)
    pinned = {"count": 0, "layers": [], "nodes": 0, "nodes_without_layer": []}
    if fp32_nodes:
        pinned = _pin_fp32_layers(trt, network, fp32_nodes, list(node_names or fp32_nodes))
        if pinned["count"]:
            # PREFER, not OBEY: where a pinned layer has no FP32 implementation (DLA runs FP16/INT8 only; some
            # GPU layers may lack one) TensorRT warns and uses another precision; OBEY fails the whole build.
            plan.builder_flags.append("PREFER_PRECISION_CONSTRAINTS")
            plan.notes.append(f"{pinned['count']} layer(s) the ONNX keeps in FP32 pinned to FP32 "
                              f"(PREFER_PRECISION_CONSTRAINTS): the FP16 flag would allow FP16 kernels there")
        shown = ", ".join(pinned["layers"][:8]) + (", ..." if pinned["count"] > 8 else "")
        LOG.info("weakly typed build with the FP16 flag: %d layer(s) of %d FP32 ONNX node(s) pinned to FP32%s",
                 pinned["count"], pinned["nodes"], f": {shown}" if shown else "")
    for flag in plan.builder_flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if plan.dla_core is not None:
        cores = int(builder.num_DLA_cores)
        if plan.dla_core >= cores:
            raise UsageError(f"--dla-core {plan.dla_core}: this device has {cores} DLA core(s)"
                             + (" (DLA exists on Jetson Xavier/Orin only)" if cores == 0 else ""))
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = plan.dla_core
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # layer/tactic names for the inspector
    prof = builder.create_optimization_profile()
    for tensor, (mn, opt, mx) in profile.items():
        prof.set_shape(tensor, mn, opt, mx)
    config.add_optimization_profile(prof)
    cache = None
    if cache_file is not None:
        data = b""
        if cache_file.is_file():
            try:
                data = cache_file.read_bytes()
            except OSError as err:
                LOG.warning("cannot read timing cache %s (%s); starting an empty one", cache_file, err.strerror)
        cache = config.create_timing_cache(data)
        config.set_timing_cache(cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        why = logger.errors[-1] if logger.errors else (logger.recent[-1] if logger.recent else "no log")
        raise ArtifactError(f"TensorRT {trt.__version__} failed to build {onnx_file.name}: {first_line(Exception(why), False)}")
    with atomic_output(plan_file) as tmp, open(tmp, "wb") as f:
        f.write(serialized)
    if cache is not None:
        try:
            with atomic_output(cache_file) as tmp, open(tmp, "wb") as f:
                f.write(config.get_timing_cache().serialize())
        except CosyEdgeError as err:
            LOG.warning("timing cache not saved: %s", err)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(plan_file.read_bytes())
    if engine is None:
        raise ArtifactError(f"TensorRT built {plan_file.name} but cannot deserialize it: "
                            + (logger.errors[-1] if logger.errors else "see the log"))
    info = engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)
    layers = layers_from_inspector(info)
    sparsity = sparse_layers_from_log(logger.sparsity)
    del engine, runtime
    return {
        "count": len(layers),
        "sparse_eligible": sparsity["eligible"],
        "sparse_picked": sparsity["picked"],
        "sparse_tactics": [layer["name"] for layer in layers if layer["sparse"]],
        "fp32_pinned": pinned,
        "engine_layers": layers,
    }


def _smoke_test(plan_file: Path, contract: StreamContract, profile: dict, device: int) -> None:
    """Run one zero chunk at batch 1 through the new plan: it deserializes, runs, gives finite output."""
    from cosyedge.runtime.trt import TrtStreamSession

    chunk = profile[contract.input][0][2]
    with TrtStreamSession(plan_file, contract, chunk_samples=chunk, built_chunk_samples=chunk, device=device) as s:
        y = s.push(np.zeros((1, 1, chunk), np.float32))[contract.output]
        if not np.isfinite(y).all():
            raise ArtifactError(f"the TensorRT engine built from {plan_file.parent.name} produced NaN/Inf for a zero "
                                f"chunk (FP16 overflow? keep those layers in FP32)")
        bad = [k for k, v in s.state().items() if not np.isfinite(v).all()]
        if bad:
            raise ArtifactError(f"the TensorRT engine produced NaN/Inf states {bad} for a zero chunk")


class TrtEngineFromOnnx(Stage):
    """Stage: streaming (precision) ONNX -> TensorRT engine folder. Lazy: nothing runs until called.

    Args:
        onnx_path (str | Path | callable): ONNX path or a stage returning one.
        **kwargs: Any keyword of :func:`build_trt` (``precision``, ``sparse``, ``dla_core``, ...).
    Returns (when called):
        Path: the engine folder.
    Source: Polygraphy ``backend/trt/loader.py`` (``EngineFromNetwork`` loader).
    """

    def __init__(self, onnx_path: Any, **kwargs: Any):
        self.onnx_path = onnx_path
        self.kwargs = kwargs

    def call_impl(self) -> Path:
        """Build and return the engine folder (Path); see :func:`build_trt`."""
        return build_trt(self.onnx_path, **self.kwargs)


# ------------------------------------------------------------------------------------------- rebuild
def rebuild_trt(folder: str | Path, manifest: dict | None = None, device: int = 0) -> Path:
    """Rebuild an engine folder in place from its stored ``model.onnx`` with the manifest's flags.

    Args:
        folder (str | Path): Engine folder.
        manifest (dict | None): Its manifest (loaded if None).
        device (int): CUDA device.
    Returns:
        Path: the (same) engine folder.
    Raises:
        ArtifactError / UsageError / DependencyError: as :func:`build_trt`.
    """
    folder = Path(folder)
    manifest = manifest if manifest is not None else load_manifest(folder)
    m = EngineManifest.from_dict(manifest)
    flags = m.flags
    # Build from a copy: the folder (and its model.onnx) is replaced by the build.
    with tempfile.TemporaryDirectory(prefix=".rebuild.", dir=folder.parent) as tmpdir:
        src = Path(tmpdir) / MODEL_FILE
        shutil.copyfile(folder / (m.model_file or MODEL_FILE), src)
        out = build_trt(src, out_dir=folder.parent, name=m.name,
                        precision=flags.get("precision", m.precision),
                        sparse=bool(flags.get("sparse")), dla_core=flags.get("dla_core"),
                        gpu_fallback=bool(flags.get("gpu_fallback")),
                        workspace_mib=int(flags.get("workspace_mib", DEFAULT_WORKSPACE_MIB)),
                        max_batch=int(flags.get("max_batch",
                                                DEFAULT_MAX_BATCH if m.max_batch is None else m.max_batch)),
                        opt_batch=int(flags.get("opt_batch", 1)), chunk_samples=m.chunk_samples,
                        device=device, parent_path=_existing(m.parent_path),
                        extra_manifest={k: m.raw[k] for k in ("calibration_sha256", "reports") if k in m.raw})
    if out != folder:  # same name/flags give the same folder; keep the user's path otherwise
        LOG.info("rebuilt engine written to %s", out)
    return out
