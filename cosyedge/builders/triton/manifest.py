"""The manifest of a Triton model repository: one writer for both repository kinds (implicit-state ONNX Runtime /
TensorRT backend, :mod:`cosyedge.builders.triton.build`; Python backend, :mod:`cosyedge.builders.triton.python`).

Both write the same blocks in the same order (``manifest_head``'s keys, ``artifact``, ``triton``, ``serve`` for the
Python backend, ``calibration_sha256``, ``tools``, ``flags``, ``reports``, ``contract``, ``chunk_samples``,
``sample_rate_hz``); the ``triton`` block holds the sequence batcher's settings every repository has plus what one
kind adds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosyedge.artifacts import sha256_file, write_manifest


def tool_versions(precision: str) -> dict:
    """Versions (dict[str, str | None]) of the tools that made the repository: the ONNX Runtime build's
    (:func:`cosyedge.builders.ort._tool_versions`) plus tritonclient (None when absent)."""
    from cosyedge.builders.ort import _tool_versions as ort_tool_versions

    tools = ort_tool_versions(precision)
    try:
        from importlib.metadata import version

        tools["tritonclient"] = version("tritonclient")
    except Exception:  # not installed: the config was not parsed with Triton's protobuf at build time
        tools["tritonclient"] = None
    return tools


def write_repository_manifest(folder: Path, *, head: dict, config_file: str, kind: str, batcher: dict,
                              triton: dict, flags: dict, build: dict, contract: Any, chunk: int,
                              serve: dict | None = None) -> None:
    """Write ``folder/manifest.json`` of a Triton repository.

    Args:
        folder (Path): The repository (being written: the build's temporary folder).
        head (dict): :func:`cosyedge.builders.prepare.manifest_head`'s block (its ``flags`` come first in ``flags``).
        config_file (str): The model's ``config.pbtxt``, relative to ``folder`` (hashed as the ``artifact``).
        kind (str): What the artifact is, in words.
        batcher (dict): The sequence batcher's settings: ``model_name``, ``backend``, ``strategy``,
            ``max_batch_size``, ``max_sequences``, ``max_queue_delay_us``, ``idle_us``, ``instances``,
            ``instance_kind`` (Triton's KIND_ name), ``chunk_samples``, ``control_inputs``.
        triton (dict): What this kind adds to the ``triton`` block (after the batcher's keys).
        flags (dict): What this kind adds to ``flags`` (after the common ones).
        build (dict): The build's inputs: ``precision``, ``variant`` (dict or None), ``exclude``, ``calib``,
            ``calib_count``, ``max_batch_size``, ``max_sequences``, ``instances``, ``instance_kind`` (the flag's
            value), ``fields`` (the precision stage's reports: ``calibration_sha256``, ``sparsity``, ``fp16``,
            ``int8``).
        contract (StreamContract): The contract of the served graph.
        chunk (int): Samples per request.
        serve (dict | None): What serving needs (Python backend: the environment's requirements); None: no block.
    """
    b, fields, precision = batcher, build["fields"], build["precision"]
    manifest = {
        **head,
        "artifact": {"file": config_file, "sha256": sha256_file(folder / config_file), "kind": kind},
        "triton": {
            "model_name": b["model_name"], "backend": b["backend"], "strategy": b["strategy"],
            "max_batch_size": int(b["max_batch_size"]), "max_candidate_sequences": int(b["max_sequences"]),
            "max_queue_delay_microseconds": int(b["max_queue_delay_us"]),
            "max_sequence_idle_microseconds": int(b["idle_us"]), "instance_count": int(b["instances"]),
            "instance_kind": b["instance_kind"], "chunk_samples": chunk, "control_inputs": list(b["control_inputs"]),
            **triton,
        },
    }
    if serve is not None:
        manifest["serve"] = serve
    manifest.update({
        "calibration_sha256": fields["calibration_sha256"],
        "tools": tool_versions(precision),
        "flags": {**head["flags"], **(build["variant"] or {}), "exclude": list(build["exclude"]),
                  "calib": None if build["calib"] is None else str(build["calib"]),
                  "calib_count": int(build["calib_count"]) if precision == "int8" else None,
                  "max_batch_size": int(build["max_batch_size"]), "max_sequences": int(build["max_sequences"]),
                  "instances": int(build["instances"]), "instance_kind": build["instance_kind"],
                  "chunk_samples": chunk, **flags},
        "reports": {k: fields[k] for k in ("sparsity", "fp16", "int8") if fields[k] is not None},
        "contract": contract.to_metadata(),
        "chunk_samples": chunk,
        "sample_rate_hz": contract.sample_rate_hz,
    })
    write_manifest(folder, manifest)
