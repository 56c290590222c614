"""Build stage for NVIDIA Triton Inference Server: a streaming ONNX -> a Triton model repository.

``cosyedge build --backend triton`` writes ``<engines root>/<name>-<precision>[-sparse]-triton/``, a folder
that ``tritonserver --model-repository=<folder>`` serves as it is::

    <name>-fp32-triton/
      manifest.json              # cosyedge: hashes, versions, flags, state-name map, stream contract
      <name>/config.pbtxt        # Triton model configuration (below)
      <name>/1/model.onnx        # the precision ONNX, dynamic batch axis, for the onnxruntime backend

``--triton-backend python`` writes ``<name>-<precision>[-sparse]-triton-python/`` instead: a repository for Triton's
Python backend, whose ``model.py`` runs the engine through a :class:`~cosyedge.runtime.pool.StreamPool` with the state
of each sequence kept by its correlation id (:mod:`cosyedge.builders.triton.python`, :mod:`cosyedge.serve.model`):
what the nvidia-pytriton wheel's tritonserver serves on CPU (``cosyedge serve``). The rest of this docstring is about
the default, the onnxruntime-backend repository for NVIDIA's GPU containers.

Triton lists only the sub-folders of a repository as models, so ``manifest.json`` at the top is ignored by
the server and read by cosyedge (:func:`check_repository`).

**Stateful serving with implicit state.** Every ``state_in.NN`` / ``state_out.NN`` pair of the stream
contract becomes one ``sequence_batching.state`` entry: Triton keeps the state of every sequence (one
sequence id = one audio stream) on the server, feeds the previous request's ``state_out`` as the next
request's ``state_in`` and starts each sequence from ``initial_state { zero_data: true }`` (or a
``data_file`` for a non-zero initial value). The client sends only audio chunks. State tensors are not in
``input``/``output``. Triton batches states on axis 0 and, with ``max_batch_size > 0``, their ``dims``
exclude the batch axis: a contract state must be batch-first (``["N", ...]``) with fixed other dims, which
``cosyedge streamify`` writes; anything else (no batch axis, batch axis elsewhere, a dynamic dimension, an
unknown dtype) is refused with one line (:class:`~cosyedge.errors.ArtifactError`) before any work.

**Strategy: oldest, not direct.** *Direct* pins each sequence to a batch slot of one instance for its whole
life; it is required only when the model keeps per-slot state inside itself and needs START/READY controls to
reset or mask slots. With implicit state Triton moves each sequence's state into whatever batch row the
request lands in, so the model needs no slot affinity, and *oldest* forms each batch dynamically from the
oldest pending requests of up to ``max_candidate_sequences`` active sequences (never two requests of one
sequence in a batch): batches are exactly as large as the ready requests (no padding rows of idle slots
computed as in direct), a stream that skips a tick costs nothing, and ``max_queue_delay_microseconds`` trades
a bounded wait (default 1 ms of a 10 ms hop) for fuller batches. Because the model reads nothing but audio
and state, **no control input is declared** (no START/END/READY/CORRID): the zero ``initial_state`` is the
start of a stream, and the onnxruntime backend would reject a control tensor the ONNX does not have.
``max_candidate_sequences`` is the number of concurrent streams per instance: a stream beyond it waits in the
backlog until a candidate ends (for live audio, size it to the expected concurrency).

**State names.** Triton pairs output states to input states by their index in two name-sorted maps
(triton-inference-server/server#8586, core ``SequenceStates::OutputState``): when the sort order of the input
names differs from that of the output names (names that are prefixes of one another, e.g.
``cache_last_channel`` / ``cache_last_channel_len``), states are swapped on the second request. The
repository copy therefore renames the states to ``state_in.<i>`` / ``state_out.<i>`` of one fixed width
whenever any state name is a prefix of another or the two orders differ (:func:`triton_state_names`); the map
is kept in ``manifest.json`` (``triton.states``) and the copy's own cosyedge metadata uses the new names.

**Audio tensors.** ``input``/``output`` dims are the contract's shapes without the batch axis, with the time
axis fixed to one chunk (``chunk_samples``, default one hop): the sequence batcher batches only requests of
equal shape, and the server then refuses a wrong chunk length at the door.

**TensorRT.** On a machine with TensorRT the same ``config.pbtxt`` (``backend: "tensorrt"``) serves a plan at
``<name>/1/model.plan`` built with a batch profile ``1..max_batch_size`` for the audio and every state
(:func:`cosyedge.builders.trt.profile_from_contract` gives that profile); :func:`tensorrt_plan_hook` is the place
where that build plugs in. No TensorRT exists on the machines this was written on, so the hook only says what
is missing.

Before the folder is renamed into place the copy is run in ONNX Runtime with a batch of streams and compared
with each stream alone (rows independent, state carried), and the written ``config.pbtxt`` is parsed back with
Triton's own protobuf definitions (``tritonclient``'s ``model_config_pb2``) when tritonclient is installed.

Sources (Triton docs):
    * Implicit state: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    * Sequence batcher, strategies: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
    * Model repository layout: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_repository.html
    * Model configuration protobuf: https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto

Modules: :mod:`~cosyedge.builders.triton.python` (the Python-backend repository), :mod:`~cosyedge.builders.triton.config` (constants, state-name rules, :class:`TritonModelConfig`,
:func:`triton_config`), :mod:`~cosyedge.builders.triton.repository` (:func:`model_config_pb2`,
:func:`load_model_config`, :func:`check_repository`), :mod:`~cosyedge.builders.triton.build`
(:func:`build_triton`, the batch-independence check, :func:`tensorrt_plan_hook`).
"""

from cosyedge.builders.triton.build import build_triton, tensorrt_plan_hook
from cosyedge.builders.triton.config import (
    BACKEND,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_SEQUENCES,
    INSTANCE_KINDS,
    TritonModelConfig,
    TritonState,
    TritonTensor,
    check_triton_states,
    state_names_problem,
    triton_config,
    triton_state_names,
)
from cosyedge.builders.triton.repository import check_repository, load_model_config, model_config_pb2

__all__ = ["BACKEND", "DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_SEQUENCES", "INSTANCE_KINDS", "TritonModelConfig",
           "TritonState", "TritonTensor", "build_triton", "check_repository",
           "check_triton_states", "load_model_config", "model_config_pb2", "state_names_problem",
           "tensorrt_plan_hook", "triton_config", "triton_state_names"]
