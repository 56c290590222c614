"""Self-describing artifacts: the streaming contract in ONNX metadata, manifests, atomic writes.

The **stream contract** (:mod:`cosyedge.artifacts.contract`) is what any runtime needs to start a stream without
guessing: the audio input and output names, sample rate (Hz), hop (samples per model step), total stride (the chunk
length must be a multiple of it), algorithmic delay (samples), and one entry per state pair (input name, output name,
shape with the batch axis written ``"N"``, dtype, zero initial value). It is stored as ONNX
``metadata_props`` under ``cosyedge.*`` keys (values are strings; lists/dicts are JSON).

A **manifest** (``manifest.json``, :mod:`cosyedge.artifacts.manifest`) sits next to every built artifact: schema
version, stage, cosyedge version, parent hashes, flags, tool versions and a copy of the contract.
:func:`load_manifest` names any missing key. The lazy pipeline :class:`Stage` and the typed views
:class:`SourceModel` / :class:`EngineManifest` live there too.

Every file is written through :func:`atomic_output` (:mod:`cosyedge.artifacts.files`: temp file in the destination
folder, then ``os.replace``) so a failure never leaves a partial file or destroys the previous one; ONNX loading,
hashes and destination checks are there as well.

This package namespace is the API: import from ``cosyedge.artifacts``, not from its modules.

Source: k2-fsa/icefall ``export-onnx-streaming.py`` ``add_meta_data`` (metadata in the ONNX).
"""

from cosyedge.artifacts.contract import (
    BATCH_DIM,
    BOOKKEEPING,
    MAX_CHUNK_MS,
    MAX_STATE_BYTES_PER_STREAM,
    META_PREFIX,
    SCHEMA_VERSION,
    TIME_DIM,
    StateSpec,
    StreamContract,
    StreamIO,
    check_name,
    check_state_bytes,
    state_nbytes,
)
from cosyedge.artifacts.files import (
    MACHINE_MEASURED_KEYS,
    OWNER_FILE,
    WriteError,
    atomic_folder,
    atomic_output,
    check_folder_path,
    check_not_input,
    check_not_inputs,
    check_writable,
    default_file_mode,
    is_write_error,
    load_onnx,
    model_content_sha256,
    portable_ir_version,
    remove_stale_temp_folders,
    replace_dir,
    sha256_file,
    signals_held,
    with_portable_ir,
    write_error,
    write_json,
    writing,
)
from cosyedge.artifacts.manifest import (
    MANIFEST_NAME,
    MANIFEST_OBJECTS,
    MANIFEST_REQUIRED,
    PRECISIONS,
    EngineManifest,
    SourceModel,
    Stage,
    load_manifest,
    resolve_artifact,
    write_manifest,
)
from cosyedge.artifacts.task import TASKS, ModelTask, model_metadata, task_of
from cosyedge.artifacts.task import resolve as resolve_task

__all__ = [
    "BATCH_DIM", "BOOKKEEPING", "MAX_CHUNK_MS", "MAX_STATE_BYTES_PER_STREAM", "META_PREFIX", "SCHEMA_VERSION",
    "TIME_DIM", "StateSpec",
    "StreamContract", "StreamIO", "check_name", "check_state_bytes", "state_nbytes",
    "MACHINE_MEASURED_KEYS", "OWNER_FILE", "atomic_folder", "atomic_output", "check_not_input", "check_writable",
    "check_not_inputs",
    "default_file_mode", "load_onnx", "model_content_sha256", "portable_ir_version", "remove_stale_temp_folders",
    "replace_dir", "sha256_file", "signals_held", "with_portable_ir", "write_json", "WriteError", "check_folder_path",
    "is_write_error",
    "write_error", "writing",
    "MANIFEST_NAME", "MANIFEST_OBJECTS", "MANIFEST_REQUIRED", "PRECISIONS", "EngineManifest", "SourceModel", "Stage", "load_manifest",
    "resolve_artifact", "write_manifest",
    "TASKS", "ModelTask", "model_metadata", "resolve_task", "task_of",
]
