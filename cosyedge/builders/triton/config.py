"""Triton model configuration: constants, state-name rules, the config model and its ``config.pbtxt`` writer.

:class:`TritonModelConfig` (tensors, implicit states, sequence batcher, instance group) is made from a streaming
ONNX's contract by :func:`triton_config` and written as text protobuf by :meth:`TritonModelConfig.to_pbtxt`.
See :mod:`cosyedge.builders.triton` for the repository layout.

Source: https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/model_configuration.html,
https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/user_guide/implicit_state_management.html
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM, StreamContract
from cosyedge.errors import ArtifactError

onnx = lazy_import("onnx")

BACKEND = "triton"
"""str: ``backend`` of the manifest and last part of the folder name."""
TRITON_BACKENDS = ("onnxruntime", "tensorrt", "python")
"""tuple[str]: Triton backends a repository can target (``tensorrt`` through :func:`tensorrt_plan_hook`; ``python``:
a cosyedge engine in Triton's Python backend, :mod:`cosyedge.builders.triton.python`)."""
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
        graph_level (int | None): ``optimization.graph.level``; 1 (ONNX Runtime's ORT_ENABLE_EXTENDED in
            Triton's onnxruntime backend) for an FP16 model, whose ORT_ENABLE_ALL layout pass (NchwcTransformer,
            :data:`cosyedge.runtime.ort.FP16_DISABLED_OPTIMIZERS`) crashes ONNX Runtime; None keeps the default.
        controls (dict | None): Sequence-batcher control input names by kind (``start``, ``end``, ``ready``,
            ``corrid``: the Python backend's model reads them); None declares none (implicit state).
        parameters (dict | None): ``parameters`` entries (str -> str), e.g. the ``cosyedge.*`` settings
            :mod:`cosyedge.serve.model` reads.

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
    graph_level: int | None = None
    controls: dict | None = None
    parameters: dict | None = None

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
        lines += ["  ]"]
        if self.controls:  # START/END/READY as fp32 0/1, CORRID as uint64 (Python backend)
            lines += ["  control_input ["]
            kinds = [("start", "CONTROL_SEQUENCE_START"), ("end", "CONTROL_SEQUENCE_END"),
                     ("ready", "CONTROL_SEQUENCE_READY"), ("corrid", "CONTROL_SEQUENCE_CORRID")]
            for i, (key, kind) in enumerate(kinds):
                value = "data_type: TYPE_UINT64" if key == "corrid" else "fp32_false_true: [ 0, 1 ]"
                lines += ["    {", f"      name: {_q(self.controls[key])}", "      control [",
                          f"        {{ kind: {kind} {value} }}", "      ]", "    }" + ("," if i < 3 else "")]
            lines += ["  ]"]
        lines += ["}", "instance_group [", "  {", f"    count: {self.instance_count}",
                  f"    kind: {self.instance_kind}", "  }", "]"]
        for k, v in (self.parameters or {}).items():
            lines += ["parameters {", f"  key: {_q(k)}", f"  value {{ string_value: {_q(v)} }}", "}"]
        if self.graph_level is not None:  # onnxruntime_backend: -1 basic, 1 extended, default all
            lines += ["optimization {", "  graph {", f"    level: {self.graph_level}", "  }", "}"]
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ ONNX copy
def _np_name(elem_type: int) -> str:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name


def _shape(v: Any) -> list:
    return [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in v.type.tensor_type.shape.dim]


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
    from cosyedge.runtime.ort import disabled_optimizers_for

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
        model_file=ONNX_FILE if backend == "onnxruntime" else PLAN_FILE,
        graph_level=1 if backend == "onnxruntime" and disabled_optimizers_for(model) else None)
