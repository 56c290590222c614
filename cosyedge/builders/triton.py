"""Build stage for NVIDIA Triton Inference Server: a streaming ONNX -> a Triton model repository.

``cosyedge build --backend triton`` writes ``<engines root>/<name>-<precision>[-sparse]-triton/``, a folder
that ``tritonserver --model-repository=<folder>`` serves as it is::

    <name>-fp32-triton/
      manifest.json              # cosyedge: hashes, versions, flags, state-name map, stream contract
      <name>/config.pbtxt        # Triton model configuration (below)
      <name>/1/model.onnx        # the precision ONNX, dynamic batch axis, for the onnxruntime backend

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
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import has_module, lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    META_PREFIX,
    StreamContract,
    atomic_folder,
    load_manifest,
    load_onnx,
    resolve_artifact,
    sha256_file,
    write_manifest,
)
from cosyedge.builders.prepare import (
    DEFAULT_CALIB_COUNT,
    check_engine_name,
    check_streaming_onnx,
    engine_folder_name,
    engine_model_name,
    manifest_head,
    prepare_onnx,
    warn_replacing_other_model,
)
from cosyedge.errors import ArtifactError, DependencyError, UsageError, first_line
from cosyedge.log import LOG

onnx = lazy_import("onnx")
ort = lazy_import("onnxruntime")

BACKEND = "triton"
"""str: ``backend`` of the manifest and last part of the folder name."""
TRITON_BACKENDS = ("onnxruntime", "tensorrt")
"""tuple[str]: Triton backends a repository can target (``tensorrt`` through :func:`tensorrt_plan_hook`)."""
CONFIG_FILE = "config.pbtxt"
MODEL_VERSION = "1"
ONNX_FILE = "model.onnx"
PLAN_FILE = "model.plan"
STRATEGY = "oldest"
DEFAULT_MAX_BATCH_SIZE = 64
"""int: requests (streams) per model execution."""
DEFAULT_MAX_SEQUENCES = 256
"""int: ``max_candidate_sequences``: concurrent streams per instance before new ones wait in the backlog."""
DEFAULT_MAX_QUEUE_DELAY_US = 1000
"""int: how long the batcher may wait to fill a batch (1 ms of a 10 ms hop)."""
DEFAULT_IDLE_US = 5_000_000
"""int: ``max_sequence_idle_microseconds``: a stream silent this long is ended and its slot freed (5 s)."""
INSTANCE_KINDS = {"auto": "KIND_AUTO", "gpu": "KIND_GPU", "cpu": "KIND_CPU"}
"""dict[str, str]: ``--instance-kind`` -> Triton's ``instance_group.kind``."""
STATE_IN, STATE_OUT = "state_in.", "state_out."

DOC_IMPLICIT_STATE = ("https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/"
                      "implicit_state_management.html")
DOC_SEQUENCE_BATCHER = ("https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/"
                        "model_configuration.html#sequence-batcher")

TRITON_DTYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "float64": "TYPE_FP64", "int64": "TYPE_INT64",
                 "int32": "TYPE_INT32", "int16": "TYPE_INT16", "int8": "TYPE_INT8", "uint8": "TYPE_UINT8",
                 "bool": "TYPE_BOOL"}
"""dict[str, str]: numpy dtype name -> Triton ``DataType`` name."""


# ------------------------------------------------------------------------------ contract checks, names
def check_triton_states(states: Iterable[dict], where: str = "model") -> None:
    """Refuse state entries Triton's implicit state cannot express, before any other check.

    Takes the raw ``cosyedge.state`` entries (dicts with ``input``, ``shape``, ``dtype``), so a dynamic
    dimension is named here rather than as generic invalid metadata.

    Args:
        states (Iterable[dict]): State entries; ``shape`` is a list with the batch axis written ``"N"``.
        where (str): The model, for messages.
    Raises:
        ArtifactError: a state without batch axis ``"N"``, with ``"N"`` elsewhere than axis 0, with a dynamic
            or non-positive dimension, or with a dtype Triton has no type for (one line, naming the state).

    Source: Triton implicit state (``dims`` exclude the batch axis when ``max_batch_size > 0``), https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    for s in states:
        name, shape, dtype = s.get("input", "?"), list(s.get("shape", [])), s.get("dtype", "float32")
        why = None
        if BATCH_DIM not in shape:
            why = (f"has shape {shape} without a batch axis '{BATCH_DIM}': Triton batches every state of a sequence "
                   f"on axis 0 (max_batch_size > 0); export it batch-first, as 'cosyedge streamify' does")
        elif shape.index(BATCH_DIM) != 0 or shape.count(BATCH_DIM) != 1:
            why = (f"has shape {shape}: Triton's implicit state needs the batch axis '{BATCH_DIM}' first, once "
                   f"(batch-first states); transpose it in the model")
        elif any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in shape[1:]):
            bad = next(d for d in shape[1:] if not isinstance(d, int) or isinstance(d, bool) or d <= 0)
            why = (f"has shape {shape} with dynamic dimension {bad!r}: Triton's implicit state needs fixed state "
                   f"dims (its zero initial_state and the batches of sequences are made from them)")
        elif dtype not in TRITON_DTYPES:
            why = f"has dtype '{dtype}', which Triton has no data type for"
        if why:
            raise ArtifactError(f"{where}: state '{name}' {why}; it cannot be served with Triton implicit state "
                                f"({DOC_IMPLICIT_STATE})")


def state_names_problem(pairs: list[tuple[str, str]]) -> str | None:
    """Say why a list of (input, output) state names is unsafe for Triton's implicit state, or None.

    Unsafe: a name (input or output) that is a prefix of another state name, or input names whose sorted
    order differs from that of their outputs (Triton pairs the two by index in name-sorted maps and swaps
    states then: triton-inference-server/server#8586), or a name used twice.

    Args:
        pairs (list[tuple[str, str]]): (state input name, state output name) per state.
    Returns:
        str | None: one-line reason, None when safe.

    Source: https://github.com/triton-inference-server/server/issues/8586,
    https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    names = [n for p in pairs for n in p]
    if len(set(names)) != len(names):
        return "a state name is used twice"
    ordered = sorted(names)
    for a, b in zip(ordered, ordered[1:]):
        if b.startswith(a):
            return f"state name '{a}' is a prefix of '{b}'"
    by_in = [o for _, o in sorted(pairs)]
    if by_in != sorted(o for _, o in pairs):
        return "the sort order of the state input names differs from that of their output names"
    return None


def triton_state_names(pairs: list[tuple[str, str]], taken: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Return the state names the repository copy uses: ``pairs`` when safe, else fixed-width renames.

    Args:
        pairs (list[tuple[str, str]]): (input, output) state names of the contract, in contract order.
        taken (Iterable[str]): Other tensor names of the graph that new names must not take.
    Returns:
        list[tuple[str, str]]: same length and order; ``state_in.<i>`` / ``state_out.<i>`` zero-padded to one
        width (names of equal length are never prefixes of one another and sort alike) when
        :func:`state_names_problem` finds a problem.
    Raises:
        ArtifactError: the new names collide with other tensors of the graph.

    Source: triton-inference-server/server#8586 (state swap), https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    if state_names_problem(pairs) is None:
        return list(pairs)
    width = max(2, len(str(len(pairs) - 1)))
    new = [(f"{STATE_IN}{i:0{width}d}", f"{STATE_OUT}{i:0{width}d}") for i in range(len(pairs))]
    old = {n for p in pairs for n in p}
    clash = sorted((set(taken) - old) & {n for p in new for n in p})
    if clash:
        raise ArtifactError(f"cannot rename the states for Triton: tensor '{clash[0]}' already exists in the model")
    return new


# ------------------------------------------------------------------------------ config model
@dataclasses.dataclass
class TritonTensor:
    """One ``input`` / ``output`` entry of config.pbtxt.

    Attributes:
        name (str): ONNX tensor name.
        data_type (str): Triton type, e.g. ``"TYPE_FP32"``.
        dims (list[int]): Shape without the batch axis, e.g. ``[1, 160]`` (channels, samples of one chunk).

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#inputs-and-outputs
    """

    name: str
    data_type: str
    dims: list


@dataclasses.dataclass
class TritonState:
    """One ``sequence_batching.state`` entry (implicit state).

    Attributes:
        input_name (str): ONNX state input in the repository copy, e.g. ``"state_in.03"``.
        output_name (str): ONNX state output, e.g. ``"state_out.03"``.
        data_type (str): Triton type, e.g. ``"TYPE_FP32"``.
        dims (list[int]): State shape without the batch axis, e.g. ``[96, 2]``.
        init (float): Initial value of every element: 0 gives ``zero_data: true``, else ``data_file``.
        data_file (str): File name under ``<model>/initial_state/`` when ``init`` is not 0, else ``""``.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """

    input_name: str
    output_name: str
    data_type: str
    dims: list
    init: float = 0.0
    data_file: str = ""


def _q(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dims(d: list) -> str:
    return "[ " + ", ".join(str(int(x)) for x in d) + " ]"


@dataclasses.dataclass
class TritonModelConfig:
    """What config.pbtxt says (a subset of Triton's ``ModelConfig`` protobuf), rendered by :meth:`to_pbtxt`.

    Attributes:
        name (str): Model name = its folder in the repository.
        backend (str): ``"onnxruntime"`` or ``"tensorrt"``.
        max_batch_size (int): Requests (streams) per execution, >= 1.
        inputs (list[TritonTensor]): Audio/feature inputs (states excluded).
        outputs (list[TritonTensor]): Audio/feature outputs (states excluded).
        states (list[TritonState]): Implicit states.
        max_candidate_sequences (int): Oldest strategy: active sequences per instance.
        max_queue_delay_us (int): Oldest strategy: longest wait to fill a batch (microseconds).
        idle_us (int): ``max_sequence_idle_microseconds``.
        instance_count (int): Instances per device.
        instance_kind (str): ``KIND_AUTO`` | ``KIND_GPU`` | ``KIND_CPU``.
        model_file (str): ``default_model_filename``.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
    """

    name: str
    backend: str
    max_batch_size: int
    inputs: list
    outputs: list
    states: list
    max_candidate_sequences: int = DEFAULT_MAX_SEQUENCES
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US
    idle_us: int = DEFAULT_IDLE_US
    instance_count: int = 1
    instance_kind: str = "KIND_AUTO"
    model_file: str = ONNX_FILE

    def to_pbtxt(self) -> str:
        """Return config.pbtxt (str, protobuf text format of ``inference.ModelConfig``)."""
        def tensors(key: str, ts: list) -> list[str]:
            out = [f"{key} ["]
            for i, t in enumerate(ts):
                out += ["  {", f"    name: {_q(t.name)}", f"    data_type: {t.data_type}", f"    dims: {_dims(t.dims)}",
                        "  }" + ("," if i < len(ts) - 1 else "")]
            return out + ["]"]

        lines = [f"name: {_q(self.name)}", f"backend: {_q(self.backend)}", f"max_batch_size: {self.max_batch_size}",
                 f"default_model_filename: {_q(self.model_file)}"]
        lines += tensors("input", self.inputs) + tensors("output", self.outputs)
        lines += ["sequence_batching {", f"  max_sequence_idle_microseconds: {self.idle_us}", "  oldest {",
                  f"    max_candidate_sequences: {self.max_candidate_sequences}",
                  f"    max_queue_delay_microseconds: {self.max_queue_delay_us}", "  }", "  state ["]
        for i, s in enumerate(self.states):
            init = "zero_data: true" if not s.data_file else f"data_file: {_q(s.data_file)}"
            lines += ["    {", f"      input_name: {_q(s.input_name)}", f"      output_name: {_q(s.output_name)}",
                      f"      data_type: {s.data_type}", f"      dims: {_dims(s.dims)}", "      initial_state: {",
                      f"        data_type: {s.data_type}", f"        dims: {_dims(s.dims)}", f"        {init}",
                      f"        name: {_q('initial ' + s.input_name)}", "      }",
                      "    }" + ("," if i < len(self.states) - 1 else "")]
        lines += ["  ]", "}", "instance_group [", "  {", f"    count: {self.instance_count}",
                  f"    kind: {self.instance_kind}", "  }", "]"]
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ ONNX copy
def _np_name(elem_type: int) -> str:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name


def _shape(v: Any) -> list:
    return [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in v.type.tensor_type.shape.dim]


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
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise ArtifactError(f"ONNX Runtime cannot load {model_path}: {first_line(err)}") from None
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(0)
    ins = contract.stream_inputs
    hop = contract.hop_samples
    feeds = [{i.name: (0.1 * rng.standard_normal(i.concrete_shape(batch, i.frames(chunk_samples, hop))))
              .astype(np.dtype(i.dtype)) for i in ins} for _ in range(chunks)]

    def run(rows: slice) -> list[dict]:
        n = rows.stop - rows.start
        st = {s.input: s.zeros(n) for s in contract.states}
        outs = []
        for f in feeds:
            try:
                res = dict(zip(names, sess.run(None, {**{k: v[rows] for k, v in f.items()}, **st})))
            except Exception as err:
                raise ArtifactError(f"{model_path} does not run with a batch of {n} streams ({first_line(err)}); "
                                    f"Triton needs a dynamic batch axis on every input, output and state") from None
            outs.append(res)
            st = {s.input: res[s.output] for s in contract.states}
        return outs

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
                 chunk_samples: int | None = None, max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
                 idle_us: int = DEFAULT_IDLE_US, triton_backend: str = "onnxruntime") -> Path:
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
        max_queue_delay_us (int): Oldest strategy's batching delay, >= 0 microseconds.
        idle_us (int): ``max_sequence_idle_microseconds``, >= 1.
        triton_backend (str): ``onnxruntime`` (written here) or ``tensorrt`` (:func:`tensorrt_plan_hook`).
    Returns:
        Path: the repository folder ``<out_dir>/<name>-<precision>[-sparse]-triton``.
    Raises:
        ArtifactError: model missing/corrupt/not streamified, a state Triton cannot express (no batch axis,
            batch axis not first, dynamic dims), batch rows not independent, unwritable folder.
        UsageError: bad options (batch size, sequences, instances, kind, chunk).
        DependencyError: onnxruntime missing; ``triton_backend="tensorrt"`` without TensorRT.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html,
    https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html#sequence-batcher
    """
    from cosyedge.runtime.engine import engines_root

    if triton_backend not in TRITON_BACKENDS:
        raise UsageError(f"unknown Triton backend '{triton_backend}' (use one of {', '.join(TRITON_BACKENDS)})")
    if instance_kind not in INSTANCE_KINDS:
        raise UsageError(f"unknown instance kind '{instance_kind}' (use one of {', '.join(INSTANCE_KINDS)})")
    for label, v, lo, hi in (("max batch size", max_batch_size, 1, 4096), ("max sequences", max_sequences, 1, 1 << 20),
                             ("instances", instances, 1, 1024), ("max queue delay", max_queue_delay_us, 0, 10**9),
                             ("idle time", idle_us, 1, 10**12)):
        if not lo <= int(v) <= hi:
            raise UsageError(f"{label} must be between {lo} and {hi}, got {v}")
    src = resolve_artifact(onnx_path)
    raw = {p.key: p.value for p in load_onnx(src, load_external_data=False).metadata_props}
    try:
        raw_states = json.loads(raw.get(META_PREFIX + "state", "[]"))
    except json.JSONDecodeError:
        raw_states = None  # the contract parser names it
    if isinstance(raw_states, list) and all(isinstance(s, dict) for s in raw_states):
        check_triton_states(raw_states, str(src))
    contract = check_streaming_onnx(src)
    chunk = int(contract.hop_samples if chunk_samples is None else chunk_samples)
    contract.check_chunk(chunk)
    for io in contract.stream_inputs + contract.stream_outputs:
        if not io.shape or io.shape[0] != BATCH_DIM:
            raise ArtifactError(f"{src}: '{io.name}' has shape {io.shape}; Triton batches on axis 0, so it must be "
                                f"batch-first ('{BATCH_DIM}' first)")
    name = check_engine_name(name or engine_model_name(contract.name, src))
    root = Path(out_dir) if out_dir is not None else engines_root()
    dest = root / engine_folder_name(name, precision, BACKEND, sparse)
    warn_replacing_other_model(dest, src)
    label = precision + ("+2:4 sparse" if sparse else "")
    with LOG.stage(f"build Triton {label} repository {dest}"), atomic_folder(dest, "Triton model repository") as tmp:
        version_dir = tmp / name / MODEL_VERSION
        version_dir.mkdir(parents=True)
        model_dst = version_dir / ONNX_FILE
        fields = prepare_onnx(src, model_dst, precision=precision, sparse=sparse, exclude=exclude, calib=calib,
                              calib_count=calib_count, amax=amax)
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
        onnx.save(model, str(model_dst))
        worst = _check_batch_independent(model_dst, copy, chunk)
        config = triton_config(model, copy, name=name, chunk_samples=chunk, max_batch_size=max_batch_size,
                               max_sequences=max_sequences, instances=instances, instance_kind=instance_kind,
                               max_queue_delay_us=max_queue_delay_us, idle_us=idle_us)
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
        write_manifest(tmp, {
            **head,
            "artifact": {"file": f"{name}/{CONFIG_FILE}", "sha256": sha256_file(tmp / name / CONFIG_FILE),
                         "kind": "Triton model repository (tritonserver --model-repository=<this folder>)"},
            "triton": {
                "model_name": name, "backend": triton_backend, "strategy": STRATEGY,
                "max_batch_size": int(max_batch_size), "max_candidate_sequences": int(max_sequences),
                "max_queue_delay_microseconds": int(max_queue_delay_us),
                "max_sequence_idle_microseconds": int(idle_us), "instance_count": int(instances),
                "instance_kind": INSTANCE_KINDS[instance_kind], "chunk_samples": chunk,
                "control_inputs": [],
                "states_renamed": new_pairs != pairs,
                "states": [{"contract_input": a, "contract_output": b, "triton_input": c, "triton_output": d}
                           for (a, b), (c, d) in zip(pairs, new_pairs)],
                "batch_independence_max_abs": worst,
                "docs": [DOC_IMPLICIT_STATE, DOC_SEQUENCE_BATCHER],
            },
            "calibration_sha256": fields["calibration_sha256"],
            "tools": _tool_versions(precision),
            "flags": {**head["flags"], "exclude": list(exclude), "calib": None if calib is None else str(calib),
                      "calib_count": int(calib_count) if precision == "int8" else None,
                      "max_batch_size": int(max_batch_size), "max_sequences": int(max_sequences),
                      "instances": int(instances), "instance_kind": instance_kind, "chunk_samples": chunk,
                      "triton_backend": triton_backend},
            "reports": {k: fields[k] for k in ("sparsity", "fp16", "int8") if fields[k] is not None},
            "contract": copy.to_metadata(),
            "chunk_samples": chunk,
            "sample_rate_hz": contract.sample_rate_hz,
        })
        check_repository(tmp, parse=has_module("tritonclient"))
    LOG.info("Triton repository: %s (tritonserver --model-repository=%s)", dest, dest.resolve())
    return dest


def _np_of(triton_type: str) -> Any:
    return np.dtype({v: k for k, v in TRITON_DTYPES.items()}[triton_type])


def triton_config(model: Any, contract: StreamContract, *, name: str, chunk_samples: int,
                  max_batch_size: int = DEFAULT_MAX_BATCH_SIZE, max_sequences: int = DEFAULT_MAX_SEQUENCES,
                  instances: int = 1, instance_kind: str = "auto",
                  max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US, idle_us: int = DEFAULT_IDLE_US,
                  backend: str = "onnxruntime") -> TritonModelConfig:
    """Derive the Triton config of a streaming ONNX from its graph and contract.

    Args:
        model (onnx.ModelProto): The repository copy (state names as in ``contract``).
        contract (StreamContract): Its contract; states batch-first with fixed dims.
        name (str): Model name.
        chunk_samples (int): Samples per request; the time axis of every streaming tensor is fixed to its frames.
        max_batch_size, max_sequences, instances, instance_kind, max_queue_delay_us, idle_us, backend: see
            :func:`build_triton`.
    Returns:
        TritonModelConfig: inputs/outputs with dims (batch axis dropped, time = one chunk), one state per pair
        (dtype and dims from the ONNX graph, checked against the contract).
    Raises:
        ArtifactError: a contract tensor missing from the graph, a dtype/dims disagreement, a dynamic state dim.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    g_in = {v.name: v for v in model.graph.input}
    g_out = {v.name: v for v in model.graph.output}

    def graph_tensor(table: dict, tname: str, kind: str) -> Any:
        if tname not in table:
            raise ArtifactError(f"model {name}: contract {kind} '{tname}' is not a graph {kind} "
                                f"(graph {kind}s: {sorted(table)})")
        return table[tname]

    def io_tensor(io: Any, table: dict, kind: str) -> TritonTensor:
        v = graph_tensor(table, io.name, kind)
        dtype = _np_name(v.type.tensor_type.elem_type)
        shape = io.concrete_shape(1, io.frames(chunk_samples, contract.hop_samples))[1:]
        g = _shape(v)
        if len(g) != len(shape) + 1 or any(isinstance(a, int) and a != b for a, b in zip(g[1:], shape)):
            raise ArtifactError(f"model {name}: {kind} '{io.name}' has shape {g} in the graph but the contract "
                                f"gives {io.shape} (a chunk of {chunk_samples} samples: {list(shape)})")
        if dtype not in TRITON_DTYPES:
            raise ArtifactError(f"model {name}: {kind} '{io.name}' has dtype {dtype}, which Triton has no type for")
        return TritonTensor(io.name, TRITON_DTYPES[dtype], list(shape))

    states = []
    for s in contract.states:
        vi, vo = graph_tensor(g_in, s.input, "input"), graph_tensor(g_out, s.output, "output")
        dims = [int(d) for d in s.shape[1:]]
        for v in (vi, vo):
            g, dtype = _shape(v), _np_name(v.type.tensor_type.elem_type)
            if len(g) != len(s.shape) or any(a != b for a, b in zip(g[1:], dims)):
                raise ArtifactError(f"model {name}: state '{v.name}' has shape {g} in the graph but the contract says "
                                    f"{s.shape}; Triton's implicit state needs these fixed dims ({DOC_IMPLICIT_STATE})")
            if dtype != s.dtype:
                raise ArtifactError(f"model {name}: state '{v.name}' is {dtype} in the graph but {s.dtype} in the "
                                    f"contract; re-run 'cosyedge streamify'")
        init = float(s.init)
        states.append(TritonState(s.input, s.output, TRITON_DTYPES[s.dtype], dims, init,
                                  "" if init == 0.0 else f"{s.input}.bin"))
    return TritonModelConfig(
        name=name, backend=backend, max_batch_size=int(max_batch_size),
        inputs=[io_tensor(i, g_in, "input") for i in contract.stream_inputs],
        outputs=[io_tensor(o, g_out, "output") for o in contract.stream_outputs],
        states=states, max_candidate_sequences=int(max_sequences), max_queue_delay_us=int(max_queue_delay_us),
        idle_us=int(idle_us), instance_count=int(instances), instance_kind=INSTANCE_KINDS[instance_kind],
        model_file=ONNX_FILE if backend == "onnxruntime" else PLAN_FILE)


def _tool_versions(precision: str) -> dict:
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


# ------------------------------------------------------------------------------ reading back
def model_config_pb2() -> Any:
    """Return Triton's model-config protobuf module (``inference.ModelConfig`` and friends) from tritonclient.

    It is loaded from ``tritonclient/grpc/model_config_pb2.py`` by path, because importing the
    ``tritonclient.grpc`` package needs grpcio, which the protobuf definitions do not.

    Returns:
        module: with ``ModelConfig``, ``ModelSequenceBatching``, ``DataType``...
    Raises:
        DependencyError: tritonclient is not installed (``pip install tritonclient``).

    Source: https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto
    """
    import sys

    key = "cosyedge._triton_model_config_pb2"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.find_spec("tritonclient")
    path = Path(spec.origin).parent / "grpc" / "model_config_pb2.py" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise DependencyError("parsing config.pbtxt needs Triton's protobuf definitions from tritonclient: "
                              "pip install tritonclient")
    mspec = importlib.util.spec_from_file_location(key, path)
    mod = importlib.util.module_from_spec(mspec)
    try:
        mspec.loader.exec_module(mod)
    except Exception as err:  # protobuf runtime too old for the generated code
        raise DependencyError(f"cannot load Triton's model_config_pb2 ({first_line(err)}); pip install -U protobuf") from None
    sys.modules[key] = mod
    return mod


def load_model_config(path: str | Path) -> Any:
    """Parse a config.pbtxt with Triton's own protobuf definitions.

    Args:
        path (str | Path): config.pbtxt.
    Returns:
        inference.ModelConfig: the parsed message.
    Raises:
        ArtifactError: missing file or text that is not a valid ``ModelConfig`` (unknown field, bad enum...).
        DependencyError: tritonclient is missing.

    Source: https://github.com/triton-inference-server/common/blob/main/protobuf/model_config.proto
    """
    from google.protobuf import text_format

    mc = model_config_pb2()
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path} not found")
    try:
        return text_format.Parse(path.read_text(), mc.ModelConfig())
    except text_format.ParseError as err:
        raise ArtifactError(f"{path} is not a valid Triton model configuration: {first_line(err, False)}") from None


def check_repository(repo: str | Path, parse: bool = True) -> dict:
    """Check a Triton repository written by :func:`build_triton` field by field against its model.

    Checked: manifest (backend, hashes of model.onnx and config.pbtxt), config name = folder, backend,
    ``max_batch_size`` >= 1, oldest strategy, no control inputs, every input/output name, type and dims
    against the ONNX graph (batch axis dynamic and dropped, other dims equal where the graph fixes them), every
    state's names, type and dims against the graph's state input *and* output and its zero (or file) initial
    state, every ONNX input covered by an input or a state, state names safe (:func:`state_names_problem`),
    the manifest's state map against the config and the copy's contract.

    Args:
        repo (str | Path): The repository folder (with manifest.json).
        parse (bool): Parse config.pbtxt with Triton's protobuf (needs tritonclient); False skips the check of
            the text itself (used at build time when tritonclient is missing).
    Returns:
        dict: ``model_name``, ``max_batch_size``, ``inputs``, ``outputs`` (name -> dims), ``states`` (list of
        (input_name, output_name, dims)), ``parsed`` (bool).
    Raises:
        ArtifactError: the first disagreement, in one line.
        DependencyError: ``parse`` and tritonclient missing.

    Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
    """
    repo = Path(repo)
    manifest = load_manifest(repo)
    if manifest.get("backend") != BACKEND:
        raise ArtifactError(f"{repo} is a '{manifest.get('backend')}' engine, not a Triton repository")
    tri = manifest.get("triton") or {}
    name = tri.get("model_name")
    model_path = repo / str(manifest["model"]["file"])
    cfg_path = repo / str(name) / CONFIG_FILE
    for p, want in ((model_path, manifest["model"].get("sha256")), (cfg_path, manifest.get("artifact", {}).get("sha256"))):
        if not p.is_file():
            raise ArtifactError(f"Triton repository {repo} has no {p.relative_to(repo)}; rebuild it")
        if sha256_file(p) != want:
            raise ArtifactError(f"Triton repository {repo}: {p.relative_to(repo)} does not match its manifest hash "
                                f"(edited or corrupt); rebuild it with 'cosyedge build --backend triton'")
    model = load_onnx(model_path, load_external_data=False)
    contract = StreamContract.from_onnx(model)
    g_in = {v.name: v for v in model.graph.input}
    g_out = {v.name: v for v in model.graph.output}

    def fail(msg: str) -> None:
        raise ArtifactError(f"Triton repository {repo}: {msg}")

    if parse:
        cfg = load_model_config(cfg_path)
        mc = model_config_pb2()
        dtype_name = mc.DataType.Name
        sb = cfg.sequence_batching
        summary_cfg = {
            "name": cfg.name, "backend": cfg.backend, "max_batch_size": cfg.max_batch_size,
            "strategy": sb.WhichOneof("strategy_choice"), "controls": len(sb.control_input),
            "inputs": [(t.name, dtype_name(t.data_type), list(t.dims)) for t in cfg.input],
            "outputs": [(t.name, dtype_name(t.data_type), list(t.dims)) for t in cfg.output],
            "states": [(s.input_name, s.output_name, dtype_name(s.data_type), list(s.dims),
                        [(dtype_name(i.data_type), list(i.dims), i.WhichOneof("state_data")) for i in s.initial_state])
                       for s in sb.state],
            "instances": [(g.count, mc.ModelInstanceGroup.Kind.Name(g.kind)) for g in cfg.instance_group],
            "scheduling": cfg.WhichOneof("scheduling_choice"),
        }
    else:  # re-derive from the model: checks the manifest and the model, not the text
        c = triton_config(model, contract, name=str(name), chunk_samples=int(tri.get("chunk_samples")),
                          max_batch_size=int(tri.get("max_batch_size", 1)))
        summary_cfg = {
            "name": c.name, "backend": c.backend, "max_batch_size": c.max_batch_size, "strategy": STRATEGY,
            "controls": 0, "inputs": [(t.name, t.data_type, t.dims) for t in c.inputs],
            "outputs": [(t.name, t.data_type, t.dims) for t in c.outputs],
            "states": [(s.input_name, s.output_name, s.data_type, s.dims,
                        [(s.data_type, s.dims, "data_file" if s.data_file else "zero_data")]) for s in c.states],
            "instances": [(c.instance_count, c.instance_kind)], "scheduling": "sequence_batching",
        }
    s = summary_cfg
    if s["name"] != name or cfg_path.parent.name != name:
        fail(f"config name '{s['name']}' is not its folder '{cfg_path.parent.name}'")
    if s["backend"] != tri.get("backend", "onnxruntime"):
        fail(f"config backend '{s['backend']}' is not the manifest's '{tri.get('backend')}'")
    if s["scheduling"] != "sequence_batching" or s["strategy"] != STRATEGY:
        fail(f"config schedules with {s['scheduling']}/{s['strategy']}, not sequence_batching/{STRATEGY}")
    if not 1 <= s["max_batch_size"] or s["max_batch_size"] != tri.get("max_batch_size"):
        fail(f"max_batch_size {s['max_batch_size']} (manifest {tri.get('max_batch_size')}) must be >= 1: states are "
             f"batched on axis 0")
    if s["controls"]:
        fail("config declares control inputs the model does not read")
    if not s["instances"] or any(n < 1 for n, _ in s["instances"]):
        fail("config has no instance group with count >= 1")

    def check_tensor(tname: str, ttype: str, dims: list, table: dict, kind: str) -> None:
        if tname not in table:
            fail(f"config {kind} '{tname}' is not an ONNX {kind} ({sorted(table)})")
        v = table[tname]
        g = _shape(v)
        want = TRITON_DTYPES.get(_np_name(v.type.tensor_type.elem_type))
        if ttype != want:
            fail(f"{kind} '{tname}' is {ttype} in the config but {want} in the ONNX")
        if not g or isinstance(g[0], int):
            fail(f"ONNX {kind} '{tname}' has shape {g}: its batch axis (0) must be dynamic for max_batch_size > 0")
        if len(g) != len(dims) + 1 or any(isinstance(a, int) and a != b for a, b in zip(g[1:], dims)):
            fail(f"{kind} '{tname}' has dims {list(dims)} in the config but shape {g} in the ONNX")
        if any(int(d) <= 0 for d in dims):
            fail(f"{kind} '{tname}' has dims {list(dims)} in the config: every dim must be fixed")

    for tname, ttype, dims in s["inputs"]:
        check_tensor(tname, ttype, dims, g_in, "input")
    for tname, ttype, dims in s["outputs"]:
        check_tensor(tname, ttype, dims, g_out, "output")
    st_pairs = []
    for iname, oname, ttype, dims, inits in s["states"]:
        check_tensor(iname, ttype, dims, g_in, "input")
        check_tensor(oname, ttype, dims, g_out, "output")
        if [d for d in _shape(g_in[iname])[1:]] != [d for d in _shape(g_out[oname])[1:]]:
            fail(f"state '{iname}' and '{oname}' have different shapes in the ONNX")
        if len(inits) != 1 or inits[0][0] != ttype or list(inits[0][1]) != list(dims) or \
                inits[0][2] not in ("zero_data", "data_file"):
            fail(f"state '{iname}' needs one initial_state of its own type and dims (zero_data or data_file), got {inits}")
        st_pairs.append((iname, oname))
    covered = {t[0] for t in s["inputs"]} | {p[0] for p in st_pairs}
    missing = sorted(set(g_in) - covered)
    if missing:
        fail(f"ONNX inputs {missing} are neither config inputs nor states (Triton would never feed them)")
    if sorted({t[0] for t in s["outputs"]} | {p[1] for p in st_pairs}) != sorted(g_out):
        fail(f"ONNX outputs {sorted(g_out)} are not exactly the config outputs and state outputs")
    problem = state_names_problem(st_pairs)
    if problem:
        fail(f"{problem}: Triton would swap states (server#8586)")
    if st_pairs != [(x.input, x.output) for x in contract.states]:
        fail("config states are not the model's contract states (in order)")
    if st_pairs != [(m["triton_input"], m["triton_output"]) for m in tri.get("states", [])]:
        fail("manifest triton.states does not match the config")
    return {"model_name": name, "max_batch_size": s["max_batch_size"],
            "inputs": {t[0]: list(t[2]) for t in s["inputs"]}, "outputs": {t[0]: list(t[2]) for t in s["outputs"]},
            "states": [(a, b, list(d)) for a, b, _, d, _ in s["states"]], "parsed": bool(parse)}


__all__ = ["BACKEND", "DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_SEQUENCES", "INSTANCE_KINDS", "TritonModelConfig",
           "TritonState", "TritonTensor", "build_triton", "check_repository",
           "check_triton_states", "load_model_config", "model_config_pb2", "state_names_problem",
           "tensorrt_plan_hook", "triton_config", "triton_state_names"]
