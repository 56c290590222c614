"""Build a Triton model repository: the precision ONNX with a dynamic batch axis, the batch-independence
check, ``config.pbtxt`` and ``manifest.json`` (:func:`build_triton`); the TensorRT-plan hook.

See :mod:`cosyedge.builders.triton` for the repository layout.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import has_module, lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    META_PREFIX,
    SourceModel,
    StreamContract,
    atomic_folder,
    load_onnx,
    with_portable_ir,
)
from cosyedge.builders.config import BuildConfig
from cosyedge.builders.names import check_engine_name, check_triton_model_name, engine_folder_name, engine_model_name
from cosyedge.builders.prepare import (
    DEFAULT_CALIB_COUNT,
    check_streaming_onnx,
    manifest_head,
    prepare_onnx,
    warn_replacing_other_model,
)
from cosyedge.builders.triton.manifest import write_repository_manifest
from cosyedge.builders.triton.config import (
    BACKEND,
    CONFIG_FILE,
    DEFAULT_IDLE_US,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_DELAY_US,
    DEFAULT_MAX_SEQUENCES,
    DOC_IMPLICIT_STATE,
    DOC_SEQUENCE_BATCHER,
    INSTANCE_KINDS,
    MODEL_VERSION,
    ONNX_FILE,
    PLAN_FILE,
    STRATEGY,
    TRITON_BACKENDS,
    _np_of,
    check_triton_states,
    state_names_problem,
    triton_config,
    triton_state_names,
)
from cosyedge.builders.triton.repository import check_repository
from cosyedge.errors import ArtifactError, DependencyError, UsageError, first_line
from cosyedge.log import LOG

onnx = lazy_import("onnx")


def _rename(graph: Any, mapping: dict[str, str]) -> None:
    """Rename tensors everywhere in ``graph`` (graph I/O, value_info, node I/O, subgraphs reading outer names)."""
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.name in mapping:
            v.name = mapping[v.name]
    for node in graph.node:
        node.input[:] = [mapping.get(x, x) for x in node.input]
        node.output[:] = [mapping.get(x, x) for x in node.output]
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename(g, mapping)


def _batch_first(model: Any, names: Iterable[str]) -> None:
    """Make axis 0 of the named graph inputs/outputs the symbolic batch axis ``N`` (Triton batches on it)."""
    names = set(names)
    for v in list(model.graph.input) + list(model.graph.output):
        if v.name in names and v.type.tensor_type.shape.dim:
            d = v.type.tensor_type.shape.dim[0]
            if not d.HasField("dim_param"):
                d.Clear()
                d.dim_param = BATCH_DIM


def _check_batch_independent(model_path: Path, contract: StreamContract, chunk_samples: int,
                             batch: int = 3, chunks: int = 3) -> float:
    """Run ``batch`` seeded streams together for ``chunks`` chunks and each alone; return the max abs difference.

    Raises:
        ArtifactError: ONNX Runtime cannot run the copy at batch ``batch`` (its batch axis is not really
            dynamic), or batch rows are not independent (difference > 1e-4), or the output is not finite.
    """
    from cosyedge.runtime.loop import stream
    from cosyedge.runtime.ort import session_from_onnx

    try:
        sess = session_from_onnx(model_path, threads=1, inter_threads=None, log_severity=4)
    except Exception as err:
        raise ArtifactError(f"ONNX Runtime cannot load {model_path}: {first_line(err)}") from None
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(0)
    ins = contract.stream_inputs
    hop = contract.hop_samples
    per_chunk = [{i.name: (0.1 * rng.standard_normal(i.concrete_shape(batch, i.frames(chunk_samples, hop))))
                  .astype(np.dtype(i.dtype)) for i in ins} for _ in range(chunks)]
    inputs = {i.name: np.concatenate([f[i.name] for f in per_chunk], axis=i.time_axis) for i in ins}
    axes = {i.name: i.time_axis for i in ins}
    ticks = {i.name: i.frames(chunk_samples, hop) for i in ins}

    def run(rows: slice) -> list[dict]:
        n = rows.stop - rows.start

        def failed(err: Exception, k: int) -> Exception:
            return ArtifactError(f"{model_path} does not run with a batch of {n} streams ({first_line(err)}); "
                                 f"Triton needs a dynamic batch axis on every input, output and state")

        return stream(lambda feeds: dict(zip(names, sess.run(None, feeds))), contract,
                      {k: v[rows] for k, v in inputs.items()}, ticks[ins[0].name], axes=axes, chunks=ticks,
                      states={s.input: s.zeros(n) for s in contract.states}, on_error=failed)

    together = run(slice(0, batch))
    worst = 0.0
    for b in range(batch):
        alone = run(slice(b, b + 1))
        for t, a in zip(together, alone):
            for name in [o.name for o in contract.stream_outputs] + [s.output for s in contract.states]:
                if not np.isfinite(t[name]).all():
                    raise ArtifactError(f"{model_path}: '{name}' is NaN/Inf for a seeded input chunk")
                worst = max(worst, float(np.abs(t[name][b:b + 1] - a[name]).max()))
    if worst > 1e-4:
        raise ArtifactError(f"{model_path}: the streams of one batch are not independent (max difference {worst:.3g} "
                            f"against each stream alone); Triton's sequence batcher mixes streams in one batch")
    return worst


def tensorrt_plan_hook(model_onnx: Path, version_dir: Path, contract: StreamContract, max_batch_size: int,
                       chunk_samples: int) -> Path:
    """Where a TensorRT plan for Triton's ``tensorrt`` backend would be built: ``<model>/1/model.plan``.

    On a TensorRT machine this builds ``model_onnx`` with the profile of
    :func:`cosyedge.builders.trt.profile_from_contract` (``chunk_samples`` fixed, batch ``1..max_batch_size`` on the
    audio and every state) and writes the serialized engine to ``version_dir / "model.plan"``; the config then says
    ``backend: "tensorrt"`` and ``default_model_filename: "model.plan"`` with the same ``sequence_batching``.
    Not implemented in this cosyedge version (it was written without TensorRT).

    Args:
        model_onnx (Path): The repository's precision ONNX (states renamed).
        version_dir (Path): ``<repo>/<model>/1``.
        contract (StreamContract): The copy's contract.
        max_batch_size (int): Upper end of the batch profile.
        chunk_samples (int): Samples per request.
    Returns:
        Path: the plan (never, in this version).
    Raises:
        DependencyError: TensorRT is not importable (the usual case here).
        UsageError: TensorRT is present but this version cannot place plans yet (use the onnxruntime backend,
            or build with ``cosyedge build --backend tensorrt`` and copy ``engine.plan`` to ``model.plan``).

    Source: Triton TensorRT backend with implicit state, https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    if not has_module("tensorrt"):
        raise DependencyError("a Triton repository for the tensorrt backend needs TensorRT on the build machine (the "
                              "plan is tied to its TensorRT version and GPU): pip install 'cosyedge[trt]' on the "
                              "serving GPU, or use --triton-backend onnxruntime")
    raise UsageError(f"placing a TensorRT plan in a Triton repository is not available in this cosyedge version: "
                     f"build '{model_onnx}' with 'cosyedge build --backend tensorrt' (batch profile 1..{max_batch_size}, "
                     f"chunk {chunk_samples}) and copy its engine.plan to {version_dir / PLAN_FILE}")


# ------------------------------------------------------------------------------ build
def build_triton(onnx_path: Any, out_dir: str | Path | None = None, name: str | None = None, *,
                 precision: str = "fp32", sparse: bool = False, exclude: Iterable[str] = (),
                 calib: str | Path | None = None, calib_count: int = DEFAULT_CALIB_COUNT,
                 amax: str | Path | None = None, max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                 max_sequences: int = DEFAULT_MAX_SEQUENCES, instances: int = 1, instance_kind: str = "auto",
                 chunk_samples: int | None = None, max_queue_delay_us: int | None = None,
                 idle_us: int = DEFAULT_IDLE_US, triton_backend: str = "onnxruntime",
                 config: BuildConfig | None = None) -> Path:
    """Write a Triton model repository for a streaming ONNX (see the module docstring for the layout).

    Args:
        onnx_path (str | Path | Stage): Streaming FP32 ONNX with a cosyedge stream contract; audio (N, 1, T)
            float32 in and out (or any batch-first streaming inputs/outputs), states (N, ...) fixed dims.
        out_dir (str | Path | None): Engines root (``$COSYEDGE_ENGINES_DIR`` or ``./engines``).
        name (str | None): Model name (Triton's and the folder's); defaults as for ``cosyedge build``.
        precision (str): ``fp32`` | ``fp16`` | ``int8`` (:func:`cosyedge.builders.prepare.prepare_onnx`).
        sparse (bool): 2:4-prune first.
        exclude (Iterable[str]): Nodes kept as in the FP32 model.
        calib (str | Path | None): INT8 calibration folder.
        calib_count (int): INT8 calibration utterances.
        amax (str | Path | None): INT8 amax cache to reuse.
        max_batch_size (int): Streams per execution, 1..4096.
        max_sequences (int): ``max_candidate_sequences`` (concurrent streams per instance), >= 1.
        instances (int): ``instance_group.count``, >= 1.
        instance_kind (str): ``auto`` | ``gpu`` | ``cpu``.
        chunk_samples (int | None): Samples per request (a multiple of the total stride); default one hop.
        max_queue_delay_us (int | None): Oldest strategy's batching delay, >= 0 microseconds; None: the backend's
            default (1000 for onnxruntime, 0 for python: :data:`cosyedge.builders.triton.python.DEFAULT_PYTHON_QUEUE_DELAY_US`).
        idle_us (int): ``max_sequence_idle_microseconds``, >= 1: a sequence that sends nothing this long is ended
            and its slot freed.
        triton_backend (str): ``onnxruntime`` (written here: implicit state, for NVIDIA's GPU containers),
            ``python`` (a cosyedge engine in Triton's Python backend, which the nvidia-pytriton wheel's server runs
            on CPU: :mod:`cosyedge.builders.triton.python`) or ``tensorrt`` (:func:`tensorrt_plan_hook`).
        config (BuildConfig | None): The build options as one checked object (what ``cosyedge build`` passes);
            when given, ``precision``, ``sparse``, ``exclude``, ``calib``, ``calib_count`` and ``amax`` are not used.
    Returns:
        Path: the repository folder ``<out_dir>/<name>-<precision>[-sparse]-triton`` (``-triton-python`` for the
        Python backend).
    Raises:
        ArtifactError: model missing/corrupt/not streamified, a state Triton cannot express (no batch axis,
            batch axis not first, dynamic dims), batch rows not independent, unwritable folder.
        UsageError: bad options (batch size, sequences, instances, kind, chunk).
        DependencyError: onnxruntime missing; ``triton_backend="tensorrt"`` without TensorRT.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html,
    https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
    """
    from cosyedge.runtime.engine import engines_root

    if config is None:  # the keyword options as one checked object (its INT8 variant names the folder)
        from cosyedge.builders.config import BuildConfig

        config = BuildConfig.of(precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                                calib_count=calib_count, amax=amax)
    precision, sparse, exclude, calib, calib_count, amax = config.options()
    if triton_backend not in TRITON_BACKENDS:
        raise UsageError(f"unknown Triton backend '{triton_backend}' (use one of {', '.join(TRITON_BACKENDS)})")
    if instance_kind not in INSTANCE_KINDS:
        raise UsageError(f"unknown instance kind '{instance_kind}' (use one of {', '.join(INSTANCE_KINDS)})")
    for label, v, lo, hi in (("max batch size", max_batch_size, 1, 4096), ("max sequences", max_sequences, 1, 1 << 20),
                             ("instances", instances, 1, 1024),
                             ("max queue delay", 0 if max_queue_delay_us is None else max_queue_delay_us, 0, 10**9),
                             ("idle time", idle_us, 1, 10**12)):
        if not lo <= int(v) <= hi:
            raise UsageError(f"{label} must be between {lo} and {hi}, got {v}")
    src = SourceModel.of(onnx_path)
    raw = {p.key: p.value for p in src.proto.metadata_props}
    try:
        raw_states = json.loads(raw.get(META_PREFIX + "state", "[]"))
    except json.JSONDecodeError:
        raw_states = None  # the contract parser names it
    if triton_backend != "python" and isinstance(raw_states, list) and all(isinstance(s, dict) for s in raw_states):
        check_triton_states(raw_states, str(src))  # implicit state's limits (the Python backend keeps its own)
    contract = check_streaming_onnx(src)
    chunk = int(contract.hop_samples if chunk_samples is None else chunk_samples)
    from cosyedge.artifacts.contract import MAX_CHUNK_MS

    longest = int(MAX_CHUNK_MS * contract.sample_rate_hz // 1000) // contract.total_stride * contract.total_stride
    if chunk_samples is not None and chunk > longest:  # refused before a seeded chunk is allocated
        raise UsageError(f"--chunk-samples {chunk}: a chunk is at most {MAX_CHUNK_MS / 1000:g} s "
                         f"({longest} samples at {contract.sample_rate_hz} Hz, as run and compare allow); give a "
                         f"multiple of {contract.total_stride} up to {longest}")
    try:
        contract.check_chunk(chunk)
    except UsageError as err:
        raise UsageError(f"--chunk-samples {chunk}: {err}" if chunk_samples is not None else str(err)) from None
    given = bool(name)
    name = check_triton_model_name(check_engine_name(name or engine_model_name(contract.name, src)), given)
    root = Path(out_dir) if out_dir is not None else engines_root()
    variant = config.variant() if config is not None else None
    if triton_backend == "python":
        from cosyedge.builders.names import default_placement
        from cosyedge.builders.triton.python import FOLDER_BACKEND, build_triton_python

        # the Python backend's StreamPool runs on ONNX Runtime CPU: its default INT8 placement is ort_matmul
        plain, why = default_placement(FOLDER_BACKEND, src) if precision == "int8" else ("trt", None)
        placement = (config.placement if config is not None else None) or plain
        if why and placement == plain:
            LOG.info("%s", why)
        variant = config.variant(placement) if config is not None else None
        return build_triton_python(src, contract, root, name, precision=precision, sparse=sparse, exclude=exclude,
                                   calib=calib, calib_count=calib_count, amax=amax, config=config, variant=variant,
                                   placement=placement, plain_placement=plain,
                                   chunk=chunk, max_batch_size=max_batch_size, max_sequences=max_sequences,
                                   instances=instances, instance_kind=instance_kind,
                                   max_queue_delay_us=max_queue_delay_us, idle_us=idle_us)
    if max_queue_delay_us is None:
        max_queue_delay_us = DEFAULT_MAX_QUEUE_DELAY_US
    for io in contract.stream_inputs + contract.stream_outputs:
        if not io.shape or io.shape[0] != BATCH_DIM:
            raise ArtifactError(f"{src}: '{io.name}' has shape {io.shape}; Triton batches on axis 0, so it must be "
                                f"batch-first ('{BATCH_DIM}' first)")
    dest = root / engine_folder_name(name, precision, BACKEND, sparse, variant=variant)
    warn_replacing_other_model(dest, src)
    label = precision + ("+2:4 sparse" if sparse else "")
    with LOG.stage(f"build Triton {label} repository {dest}"), atomic_folder(dest, "Triton model repository") as tmp:
        version_dir = tmp / name / MODEL_VERSION
        version_dir.mkdir(parents=True)
        model_dst = version_dir / ONNX_FILE
        fields = prepare_onnx(src, model_dst, precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                              calib_count=calib_count, amax=amax, config=config,
                              final_path=dest / name / MODEL_VERSION / ONNX_FILE)
        model = load_onnx(model_dst)
        pairs = [(s.input, s.output) for s in contract.states]
        taken = {t for n in model.graph.node for t in list(n.input) + list(n.output)} | \
            {v.name for v in list(model.graph.input) + list(model.graph.output)}
        new_pairs = triton_state_names(pairs, taken)
        if new_pairs != pairs:
            mapping = {}
            for i, ((a, b), (c, d)) in enumerate(zip(pairs, new_pairs)):
                mapping[a], mapping[b] = c, d
            tmp_names = {k: f"__cosyedge_triton_tmp_{i}" for i, k in enumerate(mapping)}
            _rename(model.graph, tmp_names)  # two passes: a new name may be an old name of another state
            _rename(model.graph, {tmp_names[k]: v for k, v in mapping.items()})
            LOG.info("states renamed for Triton (%s): %s -> %s ...", state_names_problem(pairs), pairs[0][0],
                     new_pairs[0][0])
        copy = dataclasses.replace(contract, states=[dataclasses.replace(s, input=c, output=d) for s, (c, d)
                                                     in zip(contract.states, new_pairs)])
        io_names = [i.name for i in copy.stream_inputs] + [o.name for o in copy.stream_outputs]
        _batch_first(model, io_names + [n for p in new_pairs for n in p])
        copy.write_to_onnx(model)
        onnx.save(with_portable_ir(model), str(model_dst))  # Triton's onnxruntime may be older
        worst = _check_batch_independent(model_dst, copy, chunk)
        config = triton_config(model, copy, name=name, chunk_samples=chunk, max_batch_size=max_batch_size,
                               max_sequences=max_sequences, instances=instances, instance_kind=instance_kind,
                               max_queue_delay_us=max_queue_delay_us, idle_us=idle_us)
        # what clients read (cosyedge run --server): the stream contract and the chunk; the backend ignores them
        config = dataclasses.replace(config, parameters={"cosyedge.contract": json.dumps(copy.to_metadata(), sort_keys=True),
                                                         "cosyedge.chunk_samples": str(chunk)})
        for s in config.states:
            if s.data_file:
                f = tmp / name / "initial_state" / s.data_file
                f.parent.mkdir(exist_ok=True)
                f.write_bytes(np.full(s.dims, s.init, dtype=_np_of(s.data_type)).tobytes())
        if triton_backend == "tensorrt":
            tensorrt_plan_hook(model_dst, version_dir, copy, max_batch_size, chunk)
        (tmp / name / CONFIG_FILE).write_text(config.to_pbtxt())
        head = manifest_head(name=name, backend=BACKEND, precision=precision, sparse=sparse,
                             model_file=f"{name}/{MODEL_VERSION}/{ONNX_FILE}", model_path=model_dst, parent=src)
        write_repository_manifest(
            tmp, head=head, config_file=f"{name}/{CONFIG_FILE}",
            kind="Triton model repository (tritonserver --model-repository=<this folder>)",
            batcher={"model_name": name, "backend": triton_backend, "strategy": STRATEGY,
                     "max_batch_size": max_batch_size, "max_sequences": max_sequences,
                     "max_queue_delay_us": max_queue_delay_us, "idle_us": idle_us, "instances": instances,
                     "instance_kind": INSTANCE_KINDS[instance_kind], "control_inputs": []},
            triton={"states_renamed": new_pairs != pairs,
                    "states": [{"contract_input": a, "contract_output": b, "triton_input": c, "triton_output": d}
                               for (a, b), (c, d) in zip(pairs, new_pairs)],
                    "batch_independence_max_abs": worst,
                    "docs": [DOC_IMPLICIT_STATE, DOC_SEQUENCE_BATCHER]},
            flags={"triton_backend": triton_backend},
            build={"precision": precision, "variant": variant, "exclude": exclude, "calib": calib,
                   "calib_count": calib_count, "max_batch_size": max_batch_size, "max_sequences": max_sequences,
                   "instances": instances, "instance_kind": instance_kind, "fields": fields},
            contract=copy, chunk=chunk)
        check_repository(tmp, parse=has_module("tritonclient"))
    LOG.info("Triton repository: %s (tritonserver --model-repository=%s)", dest, dest.resolve())
    return dest
