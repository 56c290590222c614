"""The stream contract: what any runtime needs to start a stream without guessing, stored in ONNX metadata.

The audio input and output names, sample rate (Hz), hop (samples per model step), total stride (the chunk length
must be a multiple of it), algorithmic delay (samples), and one entry per state pair (input name, output name,
shape with the batch axis written ``"N"``, dtype, zero initial value). It is stored as ONNX
``metadata_props`` under ``cosyedge.*`` keys (values are strings; lists/dicts are JSON).

Source: k2-fsa/icefall ``export-onnx-streaming.py`` ``add_meta_data`` (metadata in the ONNX).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts.files import load_onnx
from cosyedge.artifacts.limits import (_NP_DTYPES, MAX_CHUNK_MS, MAX_HOP_S, MAX_NAME_BYTES,  # noqa: F401 - re-exported
                                       MAX_STATE_BYTES_PER_STREAM, _mib, check_name, check_state_bytes, name_too_long,
                                       state_nbytes)
from cosyedge.artifacts.task import TASKS
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import plural

SCHEMA_VERSION = 1
META_PREFIX = "cosyedge."
BATCH_DIM = "N"
BOOKKEEPING = "~stream"
"""str: part of the name of every node that computes stream positions (tick counter, pre-roll masks, start
gates); a naming contract between surgery (which writes them) and the precision stages (which keep them
in FP32, since positions in FP16 round, and never quantize them)."""


@dataclasses.dataclass
class StateSpec:
    """One streaming state pair (cache) of a model.

    Attributes:
        input (str): ONNX input name, e.g. ``"state_in.03"``; fed the previous ``output`` (zeros at start).
        output (str): ONNX output name, e.g. ``"state_out.03"``.
        shape (list): Shape with the batch axis as ``"N"``, e.g. ``["N", 96, 4]`` = (batch, channels,
            frames). The last axis is time (samples or frames of that layer).
        dtype (str): numpy dtype name, ``"float32"`` by default.
        node (str): Name of the node (Conv) whose causal left pad this state replaces; informational.
        init (float): Initial value of every element at stream start (0.0).
        kind (str): What the state carries: ``"context"`` (past frames of a conv or pool input),
            ``"delay"`` (a delay line re-aligning paths), ``"recurrent"`` (GRU/LSTM/RNN hidden or cell
            state), ``"overlap"`` (transposed-conv overlap-add tail), ``"running"`` (running sum of a
            CumSum), ``"counter"`` (ticks since the stream's start, saturating, float32), ``"position"`` (frames
            since the stream's start of one time axis, int64 (N, 1), not saturating: positions counted from the
            sequence start).
    """

    input: str
    output: str
    shape: list
    dtype: str = "float32"
    node: str = ""
    init: float = 0.0
    kind: str = "context"

    @property
    def batch_axis(self) -> int:
        """int: index of the ``"N"`` axis in :attr:`shape`."""
        for i, d in enumerate(self.shape):
            if d == BATCH_DIM:
                return i
        raise ArtifactError(f"state '{self.input}' has no batch axis '{BATCH_DIM}' in shape {self.shape}")

    def concrete_shape(self, batch: int = 1) -> tuple[int, ...]:
        """Return the shape (tuple[int]) with the batch axis set to ``batch`` (int >= 1)."""
        return tuple(batch if d == BATCH_DIM else int(d) for d in self.shape)

    @property
    def nbytes(self) -> int:
        """int: bytes of this state one stream carries (its shape at batch 1 times its dtype's size)."""
        import math

        return math.prod(self.concrete_shape(1)) * np.dtype(_NP_DTYPES.get(self.dtype, np.float32)).itemsize

    def zeros(self, batch: int = 1) -> np.ndarray:
        """Return the initial state, an array of shape :meth:`concrete_shape` and dtype :attr:`dtype`."""
        return np.full(self.concrete_shape(batch), self.init, dtype=_NP_DTYPES.get(self.dtype, np.float32))


TIME_DIM = "T"


@dataclasses.dataclass
class StreamIO:
    """One streaming input or output of a model: where time is and how many frames a hop holds.

    Attributes:
        name (str): ONNX tensor name.
        shape (list): Shape with the batch axis as ``"N"`` and the time axis as ``"T"``, e.g.
            ``["N", 1, "T"]`` (audio) or ``["N", 1, "T", 32]`` (DeepFilterNet's ERB features).
        dtype (str): numpy dtype name.
        time_axis (int): Index of ``"T"`` in :attr:`shape`.
        frames_per_hop (int): Frames of the time axis per hop (``hop_samples`` for audio at the model rate,
            1 for one feature frame per hop, 2 for a x2 upsampled output...).
        delay_frames (int): Outputs only: frames this output is late with respect to the full-sequence
            graph (look-ahead found by streamify); 0 for inputs.
        kind (str): ``"audio"`` (a waveform at the model rate) or ``"features"`` (anything else).
    """

    name: str
    shape: list
    dtype: str = "float32"
    time_axis: int = 2
    frames_per_hop: int = 1
    delay_frames: int = 0
    kind: str = "features"

    def frames(self, chunk_samples: int, hop_samples: int) -> int:
        """Frames (int) of the time axis in a chunk of ``chunk_samples`` (a multiple of the total stride)."""
        return self.frames_per_hop * chunk_samples // hop_samples

    def concrete_shape(self, batch: int, frames: int) -> tuple[int, ...]:
        """The shape (tuple[int]) with ``"N"`` = ``batch`` and ``"T"`` = ``frames``."""
        return tuple(batch if d == BATCH_DIM else frames if d == TIME_DIM else int(d) for d in self.shape)


@dataclasses.dataclass
class StreamContract:
    """Everything a runtime needs to stream a model (see module docstring).

    Attributes:
        input (str): Audio input name; tensor (N, 1, T) float32, T = chunk samples, range [-1, 1].
        output (str): Audio output name; tensor (N, 1, T) float32.
        sample_rate_hz (int): Model sample rate, e.g. 16000.
        hop_samples (int): Samples per model step (the natural chunk), e.g. 160 (10 ms at 16 kHz).
        total_stride (int): Chunk lengths must be a multiple of this (samples); usually == hop.
        delay_samples (int): Algorithmic delay of the output w.r.t. the input, beyond the chunk itself.
        states (list[StateSpec]): State pairs; empty before streamify.
        name (str): Model name used for artifact folders.
        inputs (list[StreamIO]): Every streaming input (the audio input first when there is one);
            empty in contracts written before multi-input models (then it is ``input`` alone, (N, 1, T)).
        outputs (list[StreamIO]): Every streaming output, likewise.
        proof (dict): What streamify measured when it proved the stream graph (max abs error, SNR per
            output and chunk); empty when not proved.
        attention (list[dict]): One entry per attention streamify streamed (node, mask pattern, cache frames,
            look-ahead frames inside a chunk, delay frames; ``bounded_from`` when ``--attention-window`` bounded it).
        max_stream_samples (int): Longest stream (samples) the model can count positions for (an encoding table of
            a fixed number of rows, ``pe[:, :T]``); 0: unlimited. The runtime refuses to push past it.
        task (str): What the model does, one of :data:`cosyedge.artifacts.task.TASKS` (``"enhancer"``, ``"vad"``,
            ``"features"``); ``""``: not written (a model from before the key; :func:`cosyedge.artifacts.task.resolve`
            guesses it). Read it through ``resolve``, never here.
        fixed_chunk_samples (int): Samples per call the graph takes, when its streaming inputs declare a fixed
            (integer) time axis, e.g. 160 for an ``--int8-placement ort_matmul`` build written before its Scan over hops (one hop per
            call); 0: any
            multiple of :attr:`total_stride`. Not metadata: read from the graph by :meth:`from_onnx`
            (:meth:`fixed_chunk_of`); :meth:`check_chunk` refuses any other chunk length.
        fixed_chunk_where (str): The model as the fixed-chunk message names it (``"engine engines/x"`` or its path).
        fixed_chunk_why (str): Why its chunk is fixed (``"an ort_matmul INT8 build: one hop per call"``).
    """

    input: str
    output: str
    sample_rate_hz: int
    hop_samples: int
    total_stride: int
    delay_samples: int = 0
    states: list = dataclasses.field(default_factory=list)
    name: str = "model"
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    proof: dict = dataclasses.field(default_factory=dict)
    attention: list = dataclasses.field(default_factory=list)
    max_stream_samples: int = 0
    task: str = ""
    fixed_chunk_samples: int = dataclasses.field(default=0, compare=False, repr=False)
    fixed_chunk_where: str = dataclasses.field(default="", compare=False, repr=False)
    fixed_chunk_why: str = dataclasses.field(default="", compare=False, repr=False)

    @property
    def stream_inputs(self) -> list[StreamIO]:
        """list[StreamIO]: :attr:`inputs`, or the single audio input (N, 1, T) of an older contract."""
        if self.inputs:
            return list(self.inputs)
        return [StreamIO(self.input, [BATCH_DIM, 1, TIME_DIM], "float32", 2, self.hop_samples, 0, "audio")]

    @property
    def stream_outputs(self) -> list[StreamIO]:
        """list[StreamIO]: :attr:`outputs`, or the single audio output (N, 1, T) of an older contract."""
        if self.outputs:
            return list(self.outputs)
        return [StreamIO(self.output, [BATCH_DIM, 1, TIME_DIM], "float32", 2, self.hop_samples, 0, "audio")]

    @property
    def audio_in(self) -> bool:
        """bool: the model streams one input and it is a waveform (N, 1, T): ``push`` takes an array."""
        ins = self.stream_inputs
        return len(ins) == 1 and ins[0].kind == "audio"

    @property
    def is_audio(self) -> bool:
        """bool: one audio input (N, 1, T) and an audio output named by :attr:`input` / :attr:`output`:
        what ``cosyedge run``, StreamPool and the precision stages stream."""
        ins, outs = self.stream_inputs, self.stream_outputs
        return (len(ins) == 1 and ins[0].kind == "audio" and ins[0].name == self.input
                and any(o.name == self.output and o.kind == "audio" for o in outs))

    @property
    def state_bytes(self) -> int:
        """int: bytes of state one stream carries between chunks (every state at batch 1: caches, counters)."""
        return sum(s.nbytes for s in self.states)

    def check_stream_length(self, samples: int, who: str, restart: str) -> None:
        """Refuse a stream that would reach ``samples`` samples when the model counts positions for fewer
        (:attr:`max_stream_samples`; 0: no limit).

        Args:
            samples (int): Samples the stream will have had after this chunk.
            who (str): The stream, as the message names it (``"the stream"``, ``"stream 3"``).
            restart (str): How to start a new stream (``"reset()"``, ``"leave() it and join() a new stream"``).
        Raises:
            UsageError: one line naming the limit in samples and seconds.
        """
        if self.max_stream_samples and samples > self.max_stream_samples:
            from cosyedge.errors import UsageError

            limit = self.max_stream_samples
            raise UsageError(f"{who} is longer than the model can count positions: its position table holds {limit} "
                             f"samples ({limit / self.sample_rate_hz:g} s); the full-sequence model has the same "
                             f"limit: {restart}")

    @property
    def algorithmic_latency_ms(self) -> float:
        """float: chunk (one hop) plus delay, in ms: the earliest an input sample can be heard."""
        return 1000.0 * (self.hop_samples + self.delay_samples) / self.sample_rate_hz

    @property
    def is_streaming(self) -> bool:
        """bool: True once the model is a stream graph (after streamify: explicit state inputs/outputs, or
        a proved model without any, which streams as it is)."""
        return bool(self.states) or bool(self.proof)

    def require_streaming(self, where: Any) -> None:
        """Refuse a model that is not a stream graph yet (see :attr:`is_streaming`).

        Args:
            where (str | Path): The model, as the message names it (usually its path).
        Raises:
            ArtifactError: ``"<where> has no streaming state (state_in.*/state_out.*); run 'cosyedge
                streamify' first"`` (exit code 3).
        """
        if not self.is_streaming:
            from cosyedge.errors import ArtifactError

            raise ArtifactError(f"{where} has no streaming state (state_in.*/state_out.*); run 'cosyedge streamify' "
                                f"first")

    def check_chunk(self, chunk_samples: int) -> None:
        """Raise :class:`~cosyedge.errors.UsageError` unless ``chunk_samples`` (int) is a positive
        multiple of :attr:`total_stride` and, for a graph that fixes its time axis (:attr:`fixed_chunk_samples`),
        exactly that length: ``"engine engines/x takes exactly 160 samples (10 ms) per call, not 320 (an ort_matmul
        INT8 build: one hop per call); use --chunk-ms 10"``. The one check every session, StreamPool, ``compare``
        and the builders call before running a chunk."""
        from cosyedge.errors import UsageError

        if chunk_samples <= 0 or chunk_samples % self.total_stride:
            raise UsageError(
                f"chunk of {plural(chunk_samples, 'sample')} is not a positive multiple of the model's total stride "
                f"{plural(self.total_stride, 'sample')} (use {self.total_stride}, {2 * self.total_stride}, ...)"
            )
        fixed = self.fixed_chunk_samples
        if fixed and chunk_samples != fixed:
            ms = 1000.0 * fixed / self.sample_rate_hz
            where, why = self.fixed_chunk_where, self.fixed_chunk_why
            raise UsageError(f"{where or 'the model'} takes exactly {fixed} samples ({ms:g} ms) per call, not "
                             f"{chunk_samples} ({why or 'its input has a fixed time axis'}); use --chunk-ms {ms:g}")

    def fixed_chunk_of(self, model: Any, where: str) -> int:
        """Read from ``model``'s graph whether it fixes the chunk length, and record it on this contract.

        A streaming input whose declared time axis is an integer ``g`` (not ``"T"``) takes exactly
        ``g * hop_samples // frames_per_hop`` samples per call; ONNX Runtime refuses any other length in the middle
        of a run. The INT8 ``ort_matmul`` placement wrote such a graph before it wrapped its one-hop Conv -> MatMul
        form in a Scan over hops (:func:`cosyedge.precision.qdq_matmul.matmul_form`,
        :mod:`cosyedge.passes.hop_scan`); engines built then still load and are held to one hop.

        Args:
            model (onnx.ModelProto): The model (its ``graph.input`` shapes; a ``QuantizeLinear`` node marks it INT8).
            where (str): Its path; an engine folder's ``model.onnx`` (next to a ``manifest.json``) is named
                ``"engine <folder>"``.
        Returns:
            int: :attr:`fixed_chunk_samples` (0: any multiple of the total stride).
        """
        declared = {v.name: v for v in model.graph.input}
        fixed, name = 0, ""
        for io in self.stream_inputs:
            v = declared.get(io.name)
            if v is None or not v.type.tensor_type.HasField("shape"):
                continue
            dims = v.type.tensor_type.shape.dim
            if io.time_axis < len(dims) and dims[io.time_axis].HasField("dim_value"):
                g = int(dims[io.time_axis].dim_value)
                fixed = g * self.hop_samples // max(1, int(io.frames_per_hop or 1))
                name = io.name
                break
        self.fixed_chunk_samples = fixed
        if not fixed:
            self.fixed_chunk_where = self.fixed_chunk_why = ""
            return 0
        p = Path(where)
        label = f"engine {p.parent}" if p.name == "model.onnx" and (p.parent / "manifest.json").is_file() else where
        int8 = any(n.op_type in ("QuantizeLinear", "DynamicQuantizeMatMul") for n in model.graph.node)
        why = ("an ort_matmul INT8 build: one hop per call" if int8 and fixed == self.hop_samples
               else f"its input '{name}' has a fixed time axis")
        self.fixed_chunk_where, self.fixed_chunk_why = label, why
        return fixed

    def to_metadata(self) -> dict[str, str]:
        """Return the contract as ``cosyedge.*`` string key/values for ONNX ``metadata_props``."""
        meta = {
            "schema_version": str(SCHEMA_VERSION),
            "name": self.name,
            "input": self.input,
            "output": self.output,
            "sample_rate_hz": str(self.sample_rate_hz),
            "hop_samples": str(self.hop_samples),
            "total_stride": str(self.total_stride),
            "delay_samples": str(self.delay_samples),
            "algorithmic_latency_ms": f"{self.algorithmic_latency_ms:g}",
            "state": json.dumps([dataclasses.asdict(s) for s in self.states]),
            "state_bytes": str(self.state_bytes),
        }
        if self.attention:
            meta["attention"] = json.dumps(self.attention)
        if self.max_stream_samples:
            meta["max_stream_samples"] = str(self.max_stream_samples)
        if self.inputs or self.outputs:
            meta["io"] = json.dumps({"inputs": [dataclasses.asdict(i) for i in self.inputs],
                                     "outputs": [dataclasses.asdict(o) for o in self.outputs]})
        if self.proof:
            meta["proof"] = json.dumps(self.proof)
        if self.task:
            meta["task"] = self.task
        return {META_PREFIX + k: v for k, v in meta.items()}

    @classmethod
    def from_metadata(cls, meta: dict[str, str], where: str = "model") -> "StreamContract":
        """Parse ``cosyedge.*`` metadata (dict[str, str]).

        Raises:
            ArtifactError: a key is missing or malformed; the message names it and ``where``.
        """
        def get(key: str) -> str:
            full = META_PREFIX + key
            if full not in meta:
                raise ArtifactError(
                    f"{where} has no cosyedge metadata '{full}' (export it with 'cosyedge export' or "
                    f"'cosyedge streamify --sample-rate-hz ... --hop-samples ...' first)"
                )
            return meta[full]

        try:
            schema = int(meta.get(META_PREFIX + "schema_version", SCHEMA_VERSION))
            if schema > SCHEMA_VERSION:
                raise ArtifactError(f"{where} has cosyedge metadata schema {schema}, newer than this cosyedge "
                                    f"understands ({SCHEMA_VERSION}); upgrade cosyedge")
            states = [StateSpec(**s) for s in json.loads(meta.get(META_PREFIX + "state", "[]"))]
            io = json.loads(meta.get(META_PREFIX + "io", "{}"))
            contract = cls(
                input=get("input"),
                output=get("output"),
                sample_rate_hz=int(get("sample_rate_hz")),
                hop_samples=int(get("hop_samples")),
                total_stride=int(meta.get(META_PREFIX + "total_stride", get("hop_samples"))),
                delay_samples=int(meta.get(META_PREFIX + "delay_samples", "0")),
                states=states,
                name=meta.get(META_PREFIX + "name", "model"),
                inputs=[StreamIO(**i) for i in io.get("inputs", [])],
                outputs=[StreamIO(**o) for o in io.get("outputs", [])],
                proof=json.loads(meta.get(META_PREFIX + "proof", "{}")),
                attention=json.loads(meta.get(META_PREFIX + "attention", "[]")),
                max_stream_samples=int(meta.get(META_PREFIX + "max_stream_samples", "0")),
                task=meta.get(META_PREFIX + "task", ""),
            )
        except (ValueError, TypeError, AttributeError, json.JSONDecodeError) as err:
            raise ArtifactError(f"{where} has malformed cosyedge metadata ({err})") from None
        contract.validate(where)
        return contract

    def validate(self, where: str = "model") -> None:
        """Check the contract's numbers are sane.

        Raises:
            ArtifactError: sample rate, hop or total stride not positive; hop not a multiple of the total
                stride; delay negative or longer than 10 s; hop longer than :data:`MAX_HOP_S`; a state shape with
                a non-positive dimension, a state dtype cosyedge does not know, a non-finite initial value;
                states of more than :data:`MAX_STATE_BYTES_PER_STREAM` per stream; a waveform input/output
                (``kind`` ``"audio"``) whose ``frames_per_hop`` is not ``hop_samples`` ("the contract contradicts
                the graph"); a ``task`` not in :data:`~cosyedge.artifacts.task.TASKS`.
        """
        bad = None
        if self.task and self.task not in TASKS:
            bad = f"task {self.task!r} is not one of {', '.join(TASKS)}"
        elif self.sample_rate_hz <= 0 or self.hop_samples <= 0 or self.total_stride <= 0:
            bad = (f"sample_rate_hz {self.sample_rate_hz}, hop_samples {self.hop_samples} and total_stride "
                   f"{self.total_stride} must be positive")
        elif self.hop_samples % self.total_stride:
            bad = f"hop_samples {self.hop_samples} is not a multiple of total_stride {self.total_stride}"
        elif not 0 <= self.delay_samples <= 10 * self.sample_rate_hz:
            bad = f"delay_samples {self.delay_samples} is outside 0..{10 * self.sample_rate_hz} (10 s)"
        elif self.hop_samples > MAX_HOP_S * self.sample_rate_hz:
            bad = (f"hop_samples {self.hop_samples} is outside 1..{int(MAX_HOP_S * self.sample_rate_hz)} "
                   f"({MAX_HOP_S:g} s at {self.sample_rate_hz} Hz)")
        else:
            for s in self.states:
                if any(d != BATCH_DIM and (not isinstance(d, int) or d <= 0) for d in s.shape):
                    bad = f"state '{s.input}' has shape {s.shape} (dimensions must be positive integers or 'N')"
                    break
                if s.dtype not in _NP_DTYPES:
                    bad = f"state '{s.input}' has dtype {s.dtype!r} (one of {', '.join(_NP_DTYPES)})"
                    break
                if not isinstance(s.init, (int, float)) or isinstance(s.init, bool) or not np.isfinite(s.init):
                    bad = f"state '{s.input}' has initial value {s.init!r} (a finite number)"
                    break
        if bad:
            raise ArtifactError(f"{where} has invalid cosyedge metadata: {bad}")
        check_state_bytes([(s.input, s.shape, s.dtype) for s in self.states], f"{where} has invalid cosyedge metadata",
                          fix="a state this large is an edited or corrupt contract; re-run 'cosyedge streamify' or "
                              "'cosyedge adopt'")
        for io in list(self.inputs) + list(self.outputs):
            if io.kind == "audio" and io.frames_per_hop != self.hop_samples:
                raise ArtifactError(
                    f"{where}: the contract contradicts the graph: hop_samples {self.hop_samples} but the waveform "
                    f"'{io.name}' streams {io.frames_per_hop} samples per hop (cosyedge.io); re-run 'cosyedge "
                    f"streamify'")

    def check_graph(self, graph: Any, where: str = "model") -> None:
        """Check the contract against the graph's declared I/O shapes (a stream graph's ``cosyedge.*`` metadata
        may have been edited; ``run``, ``build`` and ``compare`` read the contract through :meth:`from_onnx`).

        Checked, for each streaming input/output of :attr:`inputs`/:attr:`outputs` and each state pair: the tensor
        exists, its rank, and every fixed (integer) dimension of the graph equals the contract's (a fixed time
        axis must hold a whole number of hops: ``frames_per_hop`` frames each); a state's declared element type is
        the contract's dtype.

        Args:
            graph (onnx.GraphProto): The model's main graph.
            where (str): The model, as the message names it.
        Raises:
            ArtifactError: ``"<where>: the contract contradicts the graph: ..."`` naming the tensor, the graph's
                shape and the contract's (exit 3).
        """
        def dims(v: Any) -> list:
            return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                    for d in v.type.tensor_type.shape.dim]

        declared = {v.name: v for v in list(graph.input) + list(graph.output)}
        checks = [(io.name, io.shape, io.time_axis, io.frames_per_hop) for io in list(self.inputs) + list(self.outputs)]
        checks += [(name, s.shape, None, None) for s in self.states for name in (s.input, s.output)]
        dtypes = {name: s.dtype for s in self.states for name in (s.input, s.output)}
        for name, shape, time_axis, fph in checks:
            v = declared.get(name)
            if v is None:
                raise ArtifactError(f"{where}: the contract contradicts the graph: it streams '{name}', which is not "
                                    f"a graph input or output; re-run 'cosyedge streamify'")
            if not v.type.tensor_type.HasField("shape"):
                continue
            got = dims(v)
            if name in dtypes and v.type.tensor_type.elem_type:
                from onnx import helper

                try:
                    declared_dt = np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)).name
                except (KeyError, TypeError, ValueError):  # an element type numpy has no dtype for
                    declared_dt = str(v.type.tensor_type.elem_type)
                if declared_dt != dtypes[name]:
                    raise ArtifactError(f"{where}: the contract contradicts the graph: state '{name}' is {declared_dt} "
                                        f"in the graph but the contract says {dtypes[name]}; re-run 'cosyedge "
                                        f"streamify' or 'cosyedge adopt'")
            bad = len(got) != len(shape)
            for axis, (g, w) in enumerate(zip(got, shape)):
                if bad or not isinstance(g, int) or w == BATCH_DIM:
                    continue
                if axis == time_axis:
                    bad = g % max(1, int(fph or 1)) != 0
                elif w != TIME_DIM and int(w) != g:
                    bad = True
            if bad:
                what = (f" ({fph} frame(s) per {self.hop_samples}-sample hop on axis {time_axis})"
                        if time_axis is not None else "")
                raise ArtifactError(f"{where}: the contract contradicts the graph: '{name}' has shape {got} in the "
                                    f"graph but the contract says {list(shape)}{what}; re-run 'cosyedge streamify'")

    @classmethod
    def from_onnx(cls, model: Any, where: str | None = None) -> "StreamContract":
        """Read the contract from an ONNX file path (str/Path) or ``onnx.ModelProto``; ``where`` names the model in
        messages (default: the path, or "ONNX model" for a ModelProto).

        Raises:
            ArtifactError: file missing/corrupt, metadata missing or invalid (:meth:`validate`), or, for a stream
                graph, metadata that contradicts the graph's declared I/O shapes (:meth:`check_graph`).
        """
        if isinstance(model, (str, Path)):
            where = where or str(model)
            model = load_onnx(model, load_external_data=False)
        where = where or "ONNX model"
        meta = {p.key: p.value for p in model.metadata_props}
        contract = cls.from_metadata(meta, where=where)
        if contract.is_streaming:
            contract.check_graph(model.graph, where)
            contract.fixed_chunk_of(model, where)
        return contract

    def write_to_onnx(self, model: Any) -> Any:
        """Set this contract into ``model.metadata_props`` (onnx.ModelProto), replacing old cosyedge keys.
        Returns the same ModelProto."""
        keep = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith(META_PREFIX)]
        del model.metadata_props[:]
        for k, v in keep + sorted(self.to_metadata().items()):
            p = model.metadata_props.add()
            p.key, p.value = k, v
        return model

    def chunk_samples(self, chunk_ms: float) -> int:
        """Convert a chunk length in ms to samples at :attr:`sample_rate_hz` (Hz).

        Args:
            chunk_ms (float): Chunk length, ms, in (0, :data:`MAX_CHUNK_MS`].
        Returns:
            int: samples per chunk, a multiple of :attr:`total_stride`.
        Raises:
            UsageError: ``chunk_ms`` is not finite, not positive, too long, not a whole number of samples (within
                0.05 sample, so the ms values cosyedge prints with 6 digits are taken back), or
                not a multiple of the total stride (the message gives the multiple in ms).
        """
        sample_rate_hz, total_stride = self.sample_rate_hz, self.total_stride
        chunk_ms = float(chunk_ms)
        step_ms = 1000.0 * total_stride / sample_rate_hz
        if not (0 < chunk_ms <= MAX_CHUNK_MS):  # also rejects NaN
            raise UsageError(f"--chunk-ms {chunk_ms:g}: give a positive multiple of {step_ms:g} ms up to "
                             f"{MAX_CHUNK_MS:g} ms")
        samples = chunk_ms * sample_rate_hz / 1000.0
        # printed ms values (6 significant digits, e.g. 3.62812 ms = 160 samples at 44.1 kHz) round-trip
        if abs(samples - round(samples)) > 0.05 or round(samples) < 1:
            raise UsageError(f"--chunk-ms {chunk_ms:g} is not a positive whole number of samples at {sample_rate_hz} "
                             "Hz")
        samples = int(round(samples))
        if samples % total_stride:
            raise UsageError(f"--chunk-ms {chunk_ms:g} ({plural(samples, 'sample')}) is not a multiple of the model's "
                             f"total stride {plural(total_stride, 'sample')} = {step_ms:g} ms (use {step_ms:g}, "
                             f"{2 * step_ms:g}, ... ms)")
        return samples
