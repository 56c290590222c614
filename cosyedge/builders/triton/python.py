"""A Triton repository for Triton's **Python backend**: a cosyedge engine that the real server loads on CPU.

``cosyedge build --backend triton --triton-backend python`` writes
``<engines root>/<name>-<precision>[-sparse]-triton-python/``::

    manifest.json             # cosyedge: hashes, flags, versions needed at serve time ("serve")
    <name>/config.pbtxt       # backend "python", sequence batcher with START/END/READY/CORRID, cosyedge parameters
    <name>/1/model.py         # imports cosyedge.serve.model.TritonPythonModel (the logic lives in the package)
    <name>/1/model.onnx       # the precision ONNX (FP32, FP16 or INT8 Q/DQ), as an ONNX Runtime engine runs it

The model keeps every sequence's state itself, in a :class:`~cosyedge.runtime.pool.StreamPool` slot keyed by the
correlation id, and runs one batched tick per ``execute()`` (:mod:`cosyedge.serve.model`), so the config declares no
implicit ``state`` but the four control inputs. The sequence batcher uses the *oldest* strategy, as the
onnxruntime repository does: batches hold only requests that are ready (no padding rows for idle slots), at most one
per sequence; ``max_candidate_sequences`` (``--max-sequences``) sequences per instance hold a slot, more wait in
Triton's backlog; ``max_sequence_idle_microseconds`` (``--idle-timeout-ms``) ends a silent sequence, whose slot the
model then frees (the Python backend is not told: see :mod:`cosyedge.serve.model`). It must exceed the longest wait in
the backlog: Triton 2.51 does not restart a backlogged sequence's idle clock when it gets a slot, and ends it at its
reaper's next round (every 50 ms) unless the sequence's next request came first (docs/triton.md, "Batching").

The Python backend runs ``model.py`` in a stub process with the Python environment tritonserver finds first on
``PATH``; it must hold cosyedge and onnxruntime (``cosyedge serve`` starts the server that way). The manifest and the
config record the versions this build used (``serve.requires``); the model warns when the server's differ.

This is the repository for CPU servers (the nvidia-pytriton wheel ships the Python backend only); GPU servers in
NVIDIA's containers use the default ``--triton-backend onnxruntime`` repository (implicit state,
:mod:`cosyedge.builders.triton`).

Source: https://github.com/triton-inference-server/python_backend (model.py, ``TritonPythonModel``),
https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
(control inputs, oldest strategy, idle sequences)
"""

from __future__ import annotations

import shlex

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import has_module, lazy_import
from cosyedge.artifacts import BATCH_DIM, SourceModel, StreamContract, atomic_folder, load_onnx, sha256_file
from cosyedge.builders.config import BuildConfig
from cosyedge.builders.names import engine_folder_name
from cosyedge.builders.prepare import manifest_head, prepare_onnx, warn_replacing_other_model
from cosyedge.builders.triton.manifest import write_repository_manifest
from cosyedge.builders.triton.config import (
    BACKEND,
    CONFIG_FILE,
    DOC_SEQUENCE_BATCHER,
    INSTANCE_KINDS,
    MODEL_VERSION,
    ONNX_FILE,
    STRATEGY,
    triton_config,
)
from cosyedge.errors import ArtifactError, first_line
from cosyedge.log import LOG

onnx = lazy_import("onnx")

PYTHON_BACKEND = "python"
MODEL_PY = "model.py"
FOLDER_BACKEND = "triton-python"
"""str: last part of the folder name (``reference-fp32-triton-python``), beside the onnxruntime repository's
``-triton``."""
DEFAULT_PYTHON_QUEUE_DELAY_US = 0
"""int: the oldest strategy's ``max_queue_delay_microseconds`` for the Python backend: 0, a request runs as soon as the
instance is free, and the requests that arrived while it ran form the next batch (under load the batch fills by itself;
one stream is not held back to wait for others)."""
CONTROL_NAMES = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}
"""dict[str, str]: the control inputs the config declares (:mod:`cosyedge.serve.model` reads them)."""
MODEL_PY_TEXT = '''"""Triton Python-backend model written by 'cosyedge build --backend triton --triton-backend python'.

The logic is cosyedge.serve.model.TritonPythonModel (one StreamPool tick per execute(), one state slot per sequence);
this environment's cosyedge runs it. See manifest.json ("serve") for the versions this repository was built with.
"""

from cosyedge.serve.model import TritonPythonModel  # noqa: F401
'''


def _serve_requires() -> dict[str, str]:
    """The versions (dict[str, str]) the server's Python should have: cosyedge and onnxruntime of this build."""
    import cosyedge

    ort = lazy_import("onnxruntime")
    return {"cosyedge": cosyedge.__version__, "onnxruntime": ort.__version__}


def batch_rewrite_for(precision: str) -> bool:
    """Whether the model's pool runs one-frame convs as batched GEMMs (:func:`cosyedge.passes.batch_gemm.batch_rewrite`):
    yes for FP32/FP16 (outputs 125-139 dB from the local run, measured on the bundled model), no for INT8, where the
    GEMMs move Q/DQ rounding steps that the recurrent state then carries (52 dB from the local run); the stored graph
    runs there: a static INT8 graph (Q/DQ, ``--bias-correction``) bit-identical to the local ``OrtStreamSession``; the
    default ``ort_matmul`` one (activation step per call, each stream's row quantized alone) bit-identical for a
    sequence alone, and batched within INT8 rounding of it (a float layer of a batch rounds differently and a flipped
    step is carried: 52 dB for one of three bundled-model sequences)."""
    return precision != "int8"


def _check_pool(model_path: Path, contract: StreamContract, chunk: int, streams: int = 3, chunks: int = 3,
                batch_rewrite: bool = True) -> tuple[str, float]:
    """Run ``streams`` seeded streams together in one :class:`~cosyedge.runtime.pool.StreamPool` and each alone;
    return (mode, max abs difference): mode ``"pool"`` (batched ticks) or ``"solo"`` (a graph with a fixed batch of 1,
    one pool per sequence).

    Raises:
        ArtifactError: ONNX Runtime cannot run the model, a non-finite output, streams not independent (> 1e-4).
    """
    from cosyedge.errors import CosyEdgeError
    from cosyedge.runtime.pool import StreamPool

    rng = np.random.default_rng(0)
    hop = contract.hop_samples
    audio = contract.is_audio
    ins = [i for i in contract.stream_inputs if not audio or i.name == contract.input]

    def feed() -> Any:
        if audio:
            return (0.1 * rng.standard_normal(chunk)).astype(np.float32)
        return {i.name: (0.1 * rng.standard_normal(i.concrete_shape(1, i.frames(chunk, hop))[1:]))
                .astype(np.dtype(i.dtype)) for i in ins}

    feeds = [[feed() for _ in range(chunks)] for _ in range(streams)]

    def flat(y: Any) -> np.ndarray:
        parts = y.values() if isinstance(y, dict) else [y]
        return np.concatenate([np.asarray(v, np.float64).reshape(-1) for v in parts])

    try:
        try:
            with StreamPool(model_path, max_streams=streams, chunk_samples=chunk, batch_rewrite=batch_rewrite) as pool:
                ids = [pool.join() for _ in range(streams)]
                together = [pool.push({sid: feeds[k][t] for k, sid in enumerate(ids)}) for t in range(chunks)]
                together = [[flat(out[sid]) for out in together] for sid in ids]
            mode = "pool"
        except CosyEdgeError as err:
            if "one stream per run" not in str(err):
                raise
            together, mode = None, "solo"
        worst = 0.0
        for k in range(streams):
            with StreamPool(model_path, max_streams=1, chunk_samples=chunk) as pool:
                sid = pool.join()
                alone = [flat(pool.push({sid: feeds[k][t]})[sid]) for t in range(chunks)]
            for t, a in enumerate(alone):
                if not np.isfinite(a).all():
                    raise ArtifactError(f"{model_path}: a NaN/Inf output for a seeded input chunk")
                if together is not None:
                    worst = max(worst, float(np.abs(together[k][t] - a).max()))
    except CosyEdgeError:
        raise
    except Exception as err:  # noqa: BLE001 - onnxruntime's own exception types
        raise ArtifactError(f"ONNX Runtime cannot run {model_path} as a stream pool: {first_line(err)}") from None
    if worst > 1e-4:
        raise ArtifactError(f"{model_path}: the streams of one pool tick are not independent (max difference "
                            f"{worst:.3g} against each stream alone)")
    return mode, worst


def build_triton_python(src: SourceModel, contract: StreamContract, dest_root: Path, name: str, *, precision: str,
                        sparse: bool, exclude: Iterable[str], calib: Any, calib_count: int, amax: Any,
                        config: BuildConfig | None, variant: dict | None, chunk: int, max_batch_size: int,
                        max_sequences: int, instances: int, instance_kind: str, max_queue_delay_us: int | None,
                        idle_us: int, placement: str = "ort_matmul", plain_placement: str = "ort_matmul") -> Path:
    """Write the Python-backend repository (called by :func:`cosyedge.builders.triton.build_triton` once the options,
    the source and the chunk are checked).

    Args:
        src (SourceModel): The streaming FP32 ONNX.
        contract (StreamContract): Its contract.
        dest_root (Path): Engines root.
        name (str): Model name (checked).
        precision, sparse, exclude, calib, calib_count, amax, config: see
            :func:`cosyedge.builders.prepare.prepare_onnx`.
        variant (dict | None): INT8 variant (folder name).
        placement (str): INT8 Q/DQ placement (``config.placement`` wins when set).
        plain_placement (str): The placement of a plain ``--int8`` build here (left out of the folder name:
            :func:`cosyedge.builders.names.default_placement`, ``ort_matmul`` since the pool runs on ONNX Runtime CPU).
        chunk (int): Samples per request.
        max_batch_size (int): Requests per ``execute()``.
        max_sequences (int): Sequences per instance holding a state slot (``max_candidate_sequences``; pool slots).
        instances (int): Model instances (stub processes, one pool each).
        instance_kind (str): ``auto`` | ``cpu`` | ``gpu`` (the Python backend runs on CPU: ``auto`` writes KIND_CPU).
        max_queue_delay_us (int | None): Oldest strategy's batching delay; None: :data:`DEFAULT_PYTHON_QUEUE_DELAY_US`.
        idle_us (int): ``max_sequence_idle_microseconds``.
    Returns:
        Path: ``<dest_root>/<name>-<precision>[-sparse]-triton-python``.
    Raises:
        ArtifactError: a streaming input/output whose batch axis is not first, a control name taken by the model,
            ONNX Runtime cannot run it as a pool, unwritable folder.
    """
    for io in contract.stream_inputs + contract.stream_outputs:
        if not io.shape or io.shape[0] != BATCH_DIM:
            raise ArtifactError(f"{src}: '{io.name}' has shape {io.shape}; Triton batches requests on axis 0, so it "
                                f"must be batch-first ('{BATCH_DIM}' first)")
    taken = sorted({i.name for i in contract.stream_inputs + contract.stream_outputs} & set(CONTROL_NAMES.values()))
    if taken:
        raise ArtifactError(f"{src}: the model has a tensor named {taken[0]!r}, which the sequence batcher's control "
                            f"inputs use; rename it in the model")
    delay = DEFAULT_PYTHON_QUEUE_DELAY_US if max_queue_delay_us is None else int(max_queue_delay_us)
    kind = "cpu" if instance_kind == "auto" else instance_kind
    dest = dest_root / engine_folder_name(name, precision, FOLDER_BACKEND, sparse, variant=variant,
                                          plain_placement=plain_placement)
    warn_replacing_other_model(dest, src)
    label = precision + ("+2:4 sparse" if sparse else "")
    requires = _serve_requires()
    with LOG.stage(f"build Triton Python-backend {label} repository {dest}"), \
            atomic_folder(dest, "Triton model repository") as tmp:
        version_dir = tmp / name / MODEL_VERSION
        version_dir.mkdir(parents=True)
        model_dst = version_dir / ONNX_FILE
        fields = prepare_onnx(src, model_dst, precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                              calib_count=calib_count, amax=amax, config=config, placement=placement,
                              final_path=dest / name / MODEL_VERSION / ONNX_FILE)
        rewrite = batch_rewrite_for(precision)
        mode, worst = _check_pool(model_dst, contract, chunk, batch_rewrite=rewrite)
        model = load_onnx(model_dst, load_external_data=False)
        io_only = dataclasses.replace(contract, states=[])
        cfg = triton_config(model, io_only, name=name, chunk_samples=chunk, max_batch_size=max_batch_size,
                            max_sequences=max_sequences, instances=instances, instance_kind=kind,
                            max_queue_delay_us=delay, idle_us=idle_us, backend=PYTHON_BACKEND)
        meta = {p.key: p.value for p in model.metadata_props}
        params = {"cosyedge.model_file": ONNX_FILE, "cosyedge.chunk_samples": str(chunk),
                  "cosyedge.slots": str(int(max_sequences)), "cosyedge.threads": "1",
                  "cosyedge.controls": json.dumps(CONTROL_NAMES), "cosyedge.requires": json.dumps(requires),
                  "cosyedge.contract": json.dumps(contract.to_metadata(), sort_keys=True),
                  "cosyedge.precision": precision, "cosyedge.pool": mode,
                  "cosyedge.batch_rewrite": "1" if rewrite else "0"}
        if "recipe" in meta:  # a recipe's provenance (a VAD's task), for clients
            params["cosyedge.recipe"] = json.dumps(json.loads(meta["recipe"]), sort_keys=True)
        cfg = dataclasses.replace(cfg, model_file=MODEL_PY, graph_level=None, controls=dict(CONTROL_NAMES),
                                  parameters=params)
        (version_dir / MODEL_PY).write_text(MODEL_PY_TEXT)
        (tmp / name / CONFIG_FILE).write_text(cfg.to_pbtxt())
        head = manifest_head(name=name, backend=BACKEND, precision=precision, sparse=sparse,
                             model_file=f"{name}/{MODEL_VERSION}/{ONNX_FILE}", model_path=model_dst, parent=src)
        write_repository_manifest(
            tmp, head=head, config_file=f"{name}/{CONFIG_FILE}",
            kind="Triton model repository, Python backend (cosyedge serve <this folder>)",
            batcher={"model_name": name, "backend": PYTHON_BACKEND, "strategy": STRATEGY,
                     "max_batch_size": max_batch_size, "max_sequences": max_sequences, "max_queue_delay_us": delay,
                     "idle_us": idle_us, "instances": instances, "instance_kind": INSTANCE_KINDS[kind],
                     "control_inputs": list(CONTROL_NAMES.values())},
            triton={"states": [], "pool": mode, "batch_rewrite": rewrite,
                    "model_py": {"file": f"{name}/{MODEL_VERSION}/{MODEL_PY}",
                                 "sha256": sha256_file(version_dir / MODEL_PY)},
                    "batch_independence_max_abs": worst,
                    "docs": [DOC_SEQUENCE_BATCHER, "https://github.com/triton-inference-server/python_backend"]},
            serve={"requires": requires, "python": "the environment tritonserver finds first on PATH (cosyedge "
                                                   "serve puts its own first)"},
            flags={"max_queue_delay_us": delay, "idle_timeout_us": int(idle_us), "triton_backend": PYTHON_BACKEND},
            build={"precision": precision, "variant": variant, "exclude": exclude, "calib": calib,
                   "calib_count": calib_count, "max_batch_size": max_batch_size, "max_sequences": max_sequences,
                   "instances": instances, "instance_kind": instance_kind, "fields": fields},
            contract=contract, chunk=chunk)
        from cosyedge.builders.triton.repository import check_repository

        check_repository(tmp, parse=has_module("tritonclient"))
    LOG.info("Triton Python-backend repository: %s (cosyedge serve %s)", dest, shlex.quote(str(dest)))
    return dest
