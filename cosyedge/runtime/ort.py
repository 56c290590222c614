"""ONNX Runtime backend of :class:`~cosyedge.runtime.base.StreamSession` (CPU first).

Every buffer is allocated once in :meth:`OrtStreamSession.activate_impl` and bound with IOBinding to
``OrtValue`` objects that wrap those numpy arrays (on CPU ``OrtValue.ortvalue_from_numpy`` shares the
array's memory, so ONNX Runtime reads and writes them in place: no per-chunk allocation). States are
**ping-pong** buffers: set A feeds ``state_in.*`` while ``state_out.*`` is written into set B, then the
roles swap. One buffer is never bound as both input and output of one run (docs/design.md, export facts).

Source: ONNX Runtime docs, "I/O Binding" (onnxruntime.ai/docs/performance/tune-performance/iobinding.html)
and Python API ``InferenceSession.io_binding``, ``IOBinding.bind_ortvalue_input/bind_ortvalue_output``,
``InferenceSession.run_with_iobinding``; k2-fsa/icefall ``onnx_pretrained-streaming.py`` (state loop).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import SourceModel, StreamContract
from cosyedge.errors import ArtifactError, first_line
from cosyedge.log import LOG
from cosyedge.passes import SESSION_OPTIONAL, SESSION_PASSES
from cosyedge.runtime.base import DEFAULT_MAX_LATENCY_RECORDS, StreamSession

ort = lazy_import("onnxruntime")

MAX_THREADS = 256
"""int: upper bound for ``threads`` (ONNX Runtime allocates a pool per session; absurd values exhaust memory)."""

_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}

FP16_DISABLED_OPTIMIZERS = ("NchwcTransformer",)
"""tuple[str, ...]: ONNX Runtime graph transformers turned off for a model holding FP16 tensors. ONNX Runtime
1.32's ``NchwcTransformer`` (a level-3, ``ORT_ENABLE_ALL`` layout pass) segfaults at session creation on the
FP16 ONNX of Conv1d -> GRU -> Linear -> sigmoid -> ConvTranspose (the FP16 stage keeps the convolutions and
the GRU in FP32, ONNX Runtime casts the MatMul/Sigmoid back to FP32, and the NCHWc pass then crashes the
process). Every other ``ORT_ENABLE_ALL`` transformer stays on. Passed as the session config entry
``optimization.disable_specified_optimizers`` (recorded in an FP16 engine's manifest, ``session``)."""

_DISABLE_OPTIMIZERS_KEY = "optimization.disable_specified_optimizers"

REWRITES = SESSION_PASSES
"""tuple[str, ...]: the graph passes (:mod:`cosyedge.passes`) :class:`OrtStreamSession` applies in memory on the CPU
provider by default, in order: :data:`cosyedge.passes.SESSION_PASSES` (``conv_sum``, ``dft_fft``,
``einsum_matmul``)."""

OPTIONAL_REWRITES = SESSION_OPTIONAL
"""tuple[str, ...]: passes applied only when named in ``rewrites``: :data:`cosyedge.passes.SESSION_OPTIONAL`
(``gru_cell``)."""


def holds_fp16(model: Any) -> bool:
    """Whether an ONNX model holds FP16 tensors (an FP16 initializer, Constant, Cast to FP16, graph input/output
    or value_info), i.e. is the kind of model that gets :data:`FP16_DISABLED_OPTIMIZERS`.

    Args:
        model (onnx.ModelProto | bytes | str | Path): The model (a path is read without external data).
    Returns:
        bool: True when any FP16 tensor is found in the main graph or a subgraph.
    Raises:
        ArtifactError: the path is missing or not an ONNX file.
    """
    import onnx

    from cosyedge.artifacts.files import load_onnx

    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not hasattr(model, "graph"):
        model = load_onnx(model, load_external_data=False)
    f16 = onnx.TensorProto.FLOAT16

    def graph_has(g: Any) -> bool:
        if any(t.data_type == f16 for t in g.initializer):
            return True
        if any(v.type.tensor_type.elem_type == f16 for v in list(g.input) + list(g.output) + list(g.value_info)):
            return True
        for n in g.node:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to" and a.i == f16:
                    return True
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == f16:
                    return True
                if a.type == onnx.AttributeProto.GRAPH and graph_has(a.g):
                    return True
                if a.type == onnx.AttributeProto.GRAPHS and any(graph_has(x) for x in a.graphs):
                    return True
        return False

    return graph_has(model.graph)


def disabled_optimizers_for(model: Any) -> tuple[str, ...]:
    """The ONNX Runtime graph transformers :func:`session_from_onnx` turns off for ``model``:
    :data:`FP16_DISABLED_OPTIMIZERS` when it :func:`holds_fp16`, else none (an FP32 or INT8 model keeps every
    ``ORT_ENABLE_ALL`` pass, so its outputs do not change).

    Args:
        model (onnx.ModelProto | bytes | str | Path): The model.
    Returns:
        tuple[str, ...]: transformer names (empty for a model without FP16 tensors).
    """
    return FP16_DISABLED_OPTIMIZERS if holds_fp16(model) else ()


def session_from_onnx(model_or_path: Any, *, threads: int | None = 1, inter_threads: int | None = 1,
                      providers: list[str] | None = None, optimize: bool = True,
                      log_severity: int | None = 4, disabled_optimizers: Any = None) -> Any:
    """Create an ``onnxruntime.InferenceSession``: the one place in cosyedge that does (outside the builders).

    Every option is passed explicitly by the caller so that each caller keeps its own effective
    settings (outputs are bit-identical to the hand-written sessions this replaces). Execution is
    sequential (ONNX Runtime's default ``ORT_SEQUENTIAL``).

    Args:
        model_or_path (onnx.ModelProto | bytes | str | Path): The model: an in-memory ``ModelProto``
            (serialised here), its serialised bytes, or a path to an ``.onnx`` file.
        threads (int | None): ``intra_op_num_threads``; ``None`` leaves ONNX Runtime's default (0 = all
            cores). Defaults to 1.
        inter_threads (int | None): ``inter_op_num_threads``; ``None`` leaves ONNX Runtime's default.
            Defaults to 1.
        providers (list[str] | None): Execution providers; ``None`` means ``["CPUExecutionProvider"]``.
        optimize (bool): ``True`` keeps ``ORT_ENABLE_ALL`` graph optimisation (ONNX Runtime's default);
            ``False`` sets ``ORT_DISABLE_ALL`` (needed when intermediate tensors are marked as outputs:
            fusions would rename or remove them).
        log_severity (int | None): ``log_severity_level`` (3 = error, 4 = fatal only, so errors come back
            as one line); ``None`` leaves ONNX Runtime's default (2 = warning). Defaults to 4.
        disabled_optimizers (Iterable[str] | None): ONNX Runtime graph transformers to turn off (session config
            entry ``optimization.disable_specified_optimizers``); ``None`` (default) means
            :func:`disabled_optimizers_for` the model (``NchwcTransformer`` for a model holding FP16 tensors,
            whose ``ORT_ENABLE_ALL`` session otherwise segfaults on some graphs; nothing otherwise).
    Returns:
        onnxruntime.InferenceSession: The session.
    Raises:
        DependencyError: onnxruntime is not installed.
        Exception: ONNX Runtime's own exception types when it cannot load the model; callers turn them
            into their one-line ``ArtifactError``/``UsageError`` (the message differs by caller).
    Source: NVIDIA/TensorRT Polygraphy ``backend/onnxrt/loader.py`` (``SessionFromOnnx``, one factory).
    """
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    if inter_threads is not None:
        so.inter_op_num_threads = int(inter_threads)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if log_severity is not None:
        so.log_severity_level = int(log_severity)
    if disabled_optimizers is None:
        disabled_optimizers = disabled_optimizers_for(model_or_path) if optimize else ()
    if disabled_optimizers:
        so.add_session_config_entry(_DISABLE_OPTIMIZERS_KEY, ";".join(disabled_optimizers))
    if hasattr(model_or_path, "SerializeToString"):
        src: Any = model_or_path.SerializeToString()
    elif isinstance(model_or_path, (bytes, bytearray)):
        src = bytes(model_or_path)
    else:
        src = str(model_or_path)
    return ort_session(src, so, list(providers) if providers else ["CPUExecutionProvider"])


_IR_REFUSED = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


def ort_session(src: Any, so: Any, providers: list[str]) -> Any:
    """``onnxruntime.InferenceSession(src, so, providers)``; a model whose IR version is newer than this ONNX Runtime
    reads is loaded again with the IR version it needs (:func:`~cosyedge.artifacts.portable_ir_version`).

    onnx 1.23 writes IR 14 into every model it makes, onnxruntime 1.23.2 (an aarch64 Python 3.10's, JetPack 6) reads
    up to IR 11; the model's opsets need far less (cosyedge's own: IR 8). Nothing else changes: the file stays as it
    is.

    Args:
        src (bytes | str): Serialised model or path.
        so (onnxruntime.SessionOptions): Session options.
        providers (list[str]): Execution providers.
    Returns:
        onnxruntime.InferenceSession
    Raises:
        Exception: ONNX Runtime's own, when the model needs more than it reads or fails for another reason.
    """
    try:
        return ort.InferenceSession(src, sess_options=so, providers=providers)
    except Exception as err:  # noqa: BLE001 - onnxruntime raises its own exception types
        m = _IR_REFUSED.search(str(err))
        if m is None:
            raise
        import onnx

        from cosyedge.artifacts import portable_ir_version

        model = onnx.load_from_string(src) if isinstance(src, bytes) else onnx.load(src)
        need, have = portable_ir_version(model), int(m.group(2))
        if need > have:
            raise
        LOG.debug("ONNX IR version %s is newer than onnxruntime %s reads (%d): loaded as IR %d (its opsets and types "
                  "need IR %d)", m.group(1), ort.__version__, have, have, need)
        model.ir_version = have
        return ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=providers)


def ortvalue(a: np.ndarray) -> Any:
    """An ``onnxruntime.OrtValue`` on CPU sharing the memory of ``a`` (np.ndarray, C-contiguous): ONNX Runtime
    reads an input, or writes an output, in place."""
    return ort.OrtValue.ortvalue_from_numpy(a, "cpu", 0)


def bind_ortvalues(binding: Any, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
    """Bind ``inputs`` and ``outputs`` (``OrtValue`` by tensor name) to ``binding`` (``onnxruntime.IOBinding``).

    Outputs are bound preallocated: ONNX Runtime writes into them and, at ``run_with_iobinding``, checks each
    against the shape the model declares for that output, failing with "Got invalid dimensions for output:
    NAME" when a fixed dimension there differs (a time axis an export left at a fixed length). This is how
    :class:`OrtStreamSession` (``cosyedge run``, ``build``) runs every chunk; the streamify proof runs through
    it too (:class:`BoundRunner`), so a graph that proves is a graph that runs.
    """
    for name, v in inputs.items():
        binding.bind_ortvalue_input(name, v)
    for name, v in outputs.items():
        binding.bind_ortvalue_output(name, v)


def chunk_output_buffers(contract: StreamContract, sess: Any, chunk_samples: int, batch: int = 1,
                         outputs: list | None = None) -> dict[str, np.ndarray]:
    """Zeroed output buffers of one chunk, shaped as :class:`OrtStreamSession` binds them.

    Args:
        contract (StreamContract): The stream contract.
        sess (onnxruntime.InferenceSession): The session (gives each output's declared dtype).
        chunk_samples (int): Samples in the chunk (a multiple of the total stride); each output gets
            ``frames_per_hop * chunk_samples // hop_samples`` frames on its time axis.
        batch (int): Streams per chunk (the ``"N"`` axis).
        outputs (list[StreamIO] | None): Streaming outputs to allocate; default every one of the contract.
    Returns:
        dict[str, np.ndarray]: by output name, shape ``StreamIO.concrete_shape(batch, frames)``, the
        session's declared dtype (float32 when not one of float32/float16/float64/int64/int32).
    """
    declared = {o.name: o for o in sess.get_outputs()}
    hop = contract.hop_samples
    return {o.name: np.zeros(o.concrete_shape(batch, o.frames(chunk_samples, hop)),
                             dtype=_ORT_DTYPES.get(declared[o.name].type, np.float32))
            for o in (contract.stream_outputs if outputs is None else outputs)}


class BoundRunner:
    """Run a session call after call as :class:`OrtStreamSession` runs its chunks: inputs copied into
    preallocated arrays and outputs written into preallocated buffers, all bound once with IOBinding
    (:func:`bind_ortvalues`), so ONNX Runtime validates every output's declared shape against its buffer.
    One binding per distinct set of feed shapes (a shorter last chunk gets its own).

    Args:
        sess (onnxruntime.InferenceSession): The session.
        output_buffers (Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]): Given the first feeds of a
            shape, the output buffers to bind by name (e.g. :func:`chunk_output_buffers` plus the state
            outputs); only these outputs are computed.

    Calling it with ``feeds`` (dict[str, np.ndarray], every model input by name) returns a fresh copy of
    every bound output (dict[str, np.ndarray]); it raises ONNX Runtime's own exception types (e.g. "Got
    invalid dimensions for output: NAME"), which callers turn into their one-line error.
    """

    def __init__(self, sess: Any, output_buffers: Any):
        self._sess = sess
        self._alloc = output_buffers
        self._bound: dict = {}

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds``; returns copies of the outputs (see the class doc)."""
        key = tuple((k, np.shape(v), np.asarray(v).dtype.str) for k, v in feeds.items())
        got = self._bound.get(key)
        if got is None:
            ins = {k: np.array(v, order="C", copy=True) for k, v in feeds.items()}
            outs = self._alloc(feeds)
            ovs = ({k: ortvalue(v) for k, v in ins.items()}, {k: ortvalue(v) for k, v in outs.items()})
            binding = self._sess.io_binding()
            bind_ortvalues(binding, *ovs)
            got = self._bound[key] = (binding, ins, outs, ovs)  # the OrtValues live as long as the binding
        binding, ins, outs, _ovs = got
        for k, v in feeds.items():
            np.copyto(ins[k], v)
        self._sess.run_with_iobinding(binding)
        return {k: v.copy() for k, v in outs.items()}


class OrtStreamSession(StreamSession):
    """Stream a cosyedge streaming ONNX model through ONNX Runtime, one chunk per :meth:`push`.

    ``__init__`` only reads the ONNX metadata (the stream contract); ONNX Runtime is imported and the
    ``InferenceSession`` created in :meth:`activate` (``with session:``).

    Args:
        model_path (str | Path | SourceModel): Streaming ONNX file (a :class:`~cosyedge.artifacts.SourceModel`
            reuses its parsed contract) (``state_in.*``/``state_out.*`` and cosyedge
            metadata, i.e. the output of ``cosyedge streamify``), or the ``model.onnx`` of an engine.
        chunk_samples (int | None): Samples per chunk, a positive multiple of the model's total stride.
            Defaults to one hop (160 samples = 10 ms for the reference model).
        batch (int): Independent streams per push (axis ``N``). Defaults to 1.
        threads (int): ONNX Runtime intra- and inter-op threads, 1..:data:`MAX_THREADS`. Defaults to 1.
        providers (list[str] | None): Execution providers; defaults to ``["CPUExecutionProvider"]``.
        max_latency_records (int): Size of the per-chunk latency ring buffer.
        rewrites (Iterable[str] | None): The graph passes to apply in memory before the session is made (CPU
            provider, models without external data), one name per pass (its only switch); ``None`` (default) means
            :data:`REWRITES`; ``()`` none; :data:`OPTIONAL_REWRITES` only when named. ``conv_sum`` folds residual
            ``Conv -> Add`` pairs into ``FusedConv`` (:mod:`cosyedge.passes.conv_sum`; 141 dB from the unfused graph
            on the reference), ``dft_fft`` replaces a one-frame windowed DFT ``Conv``/``ConvTranspose`` by an FFT
            (:mod:`cosyedge.passes.dft_fft`), ``einsum_matmul`` a one-frame grouped-linear ``Einsum`` by a batched
            ``MatMul`` (:mod:`cosyedge.passes.einsum_matmul`), ``gru_cell`` a one-step GRU by its cell
            (:mod:`cosyedge.passes.gru_cell`); on DeepFilterNet3 each keeps >= 120 dB vs the unrewritten graph.
    Raises:
        ArtifactError: file missing/corrupt, cosyedge metadata missing, or no state pairs (not streamified).
        UsageError: bad ``chunk_samples``, ``batch`` or ``threads``.
    """

    def __init__(self, model_path: str | Path, chunk_samples: int | None = None, batch: int = 1,
                 threads: int = 1, providers: list[str] | None = None,
                 max_latency_records: int = DEFAULT_MAX_LATENCY_RECORDS, rewrites: Any = None):
        from cosyedge.errors import UsageError

        self.model_path = Path(model_path)  # a SourceModel is os.PathLike
        self._source = SourceModel.of(model_path)
        contract = self._source.contract  # a SourceModel passed in keeps its parsed contract
        contract.require_streaming(self.model_path)
        super().__init__(contract, chunk_samples=chunk_samples, batch=batch,
                         max_latency_records=max_latency_records)
        if not 1 <= int(threads) <= MAX_THREADS:
            raise UsageError(f"threads must be between 1 and {MAX_THREADS}, got {threads}")
        self.threads = int(threads)
        self.providers = list(providers) if providers else ["CPUExecutionProvider"]
        self.rewrites = tuple(REWRITES if rewrites is None else rewrites)
        unknown = sorted(set(self.rewrites) - set(REWRITES) - set(OPTIONAL_REWRITES))
        if unknown:
            raise UsageError(f"unknown rewrites {unknown}; choose from {list(REWRITES + OPTIONAL_REWRITES)}")
        self.rewritten: dict[str, int] = {}
        """dict[str, int]: nodes each pass replaced in the last :meth:`activate` (pass name -> count; a pass that
        failed is left out; empty when none ran or the rewritten graph did not load)."""
        self._sess = None

    # ------------------------------------------------------------------ activation
    def activate_impl(self) -> None:
        """Create the ``InferenceSession`` (sequential execution, ``threads`` intra/inter-op threads),
        check its inputs/outputs against the contract, allocate and bind all buffers, zero the state.

        Raises:
            ArtifactError: ONNX Runtime cannot load the model, or its inputs/outputs disagree with
                the contract (missing name, wrong state rank or size).
            DependencyError: onnxruntime is not installed.
        """
        c = self.contract
        model, tmp = self._fused_model()
        disabled = disabled_optimizers_for(self._source.proto)

        def load(src: Any) -> Any:
            return session_from_onnx(src, threads=self.threads, inter_threads=self.threads,
                                     providers=self.providers, log_severity=4, disabled_optimizers=disabled)

        try:
            try:
                sess = load(model)
            except Exception as err:
                if tmp is None:
                    raise
                LOG.warning_once(f"{self.model_path}: ONNX Runtime cannot load the graph rewritten by "
                                 f"{sorted(k for k, v in self.rewritten.items() if v)} ({first_line(err)}); "
                                 f"running the stored graph")
                self.rewritten = {}
                sess = load(self.model_path)
        except Exception as err:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
            raise ArtifactError(f"ONNX Runtime cannot load {self.model_path}: {first_line(err)}") from None
        finally:
            if tmp is not None:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)

        inputs = {i.name: i for i in sess.get_inputs()}
        outputs = {o.name: o for o in sess.get_outputs()}
        self._audio = c.is_audio
        io_in = c.stream_inputs if not self._audio else [i for i in c.stream_inputs if i.name == c.input]
        io_out = c.stream_outputs if not self._audio else [o for o in c.stream_outputs if o.name == c.output]
        want_in = [i.name for i in io_in] + [s.input for s in c.states]
        want_out = [o.name for o in io_out] + [s.output for s in c.states]
        for name in want_in:
            if name not in inputs:
                raise ArtifactError(f"{self.model_path}: contract input '{name}' is not a model input "
                                    f"(model inputs: {sorted(inputs)}); re-run 'cosyedge streamify'")
        extra = sorted(set(inputs) - set(want_in))
        if extra:
            raise ArtifactError(f"{self.model_path}: model inputs {extra} are not in the stream contract "
                                f"(re-run 'cosyedge streamify')")
        for name in want_out:
            if name not in outputs:
                raise ArtifactError(f"{self.model_path}: contract output '{name}' is not a model output "
                                    f"(model outputs: {sorted(outputs)}); re-run 'cosyedge streamify'")
        for s in c.states:
            self._check_state_shape(s, inputs[s.input].shape, "input")
            self._check_state_shape(s, outputs[s.output].shape, "output")
        for io, arg in [(i, inputs[i.name]) for i in io_in] + [(o, outputs[o.name]) for o in io_out]:
            self._check_io_shape(io, arg.shape)

        def dtype_of(arg) -> type:
            return _ORT_DTYPES.get(arg.type, np.float32)

        self._xs = {i.name: np.zeros(self.input_shape(i), dtype=dtype_of(inputs[i.name])) for i in io_in}
        self._ys = chunk_output_buffers(c, sess, self.chunk_samples, self.batch, io_out)
        self._x = self._xs.get(c.input)
        self._y = self._ys.get(c.output)
        # a model whose output is not float32 (FP16 engines) is returned in this float32 buffer (reused too)
        self._y32 = (np.zeros(self._y.shape, np.float32) if self._y is not None and self._y.dtype != np.float32
                     else self._y)
        # ping-pong state buffers: _states[k][i] is set k (0 = A, 1 = B) of state i
        self._states = ([s.zeros(self.batch) for s in c.states], [s.zeros(self.batch) for s in c.states])

        self._ov_xs = {k: ortvalue(a) for k, a in self._xs.items()}
        self._ov_ys = {k: ortvalue(a) for k, a in self._ys.items()}
        self._ov_states = ([ortvalue(a) for a in self._states[0]], [ortvalue(a) for a in self._states[1]])
        # binding k reads states from set k and writes the new states into set 1 - k
        self._bindings = [sess.io_binding(), sess.io_binding()]
        for k, b in enumerate(self._bindings):
            self._bind(b, k)
        # Bound CPU OrtValues are read in place by the CPU provider; other providers copy inputs at
        # bind time (ONNX Runtime I/O Binding docs), so there every input is re-bound before each run.
        self._rebind = any(p != "CPUExecutionProvider" for p in sess.get_providers())
        self._parity = 0
        self._sess = sess
        LOG.debug("ORT session %s: providers %s, chunk %d, batch %d, %d state pair(s)", self.model_path,
                  sess.get_providers(), self.chunk_samples, self.batch, len(c.states))

    @property
    def fused_nodes(self) -> int:
        """int: ``Conv -> Add`` pairs folded into ``FusedConv`` by the last :meth:`activate` (0: none)."""
        return self.rewritten.get("conv_sum", 0)

    def _fused_model(self) -> tuple[Any, Any]:
        """The model to load and a temporary folder to remove after loading (or None): the path, or (CPU
        provider, no external data, something rewritten by the passes :attr:`rewrites`, or a Scan over hops run one
        hop per call, whose one-hop body is loaded without the Scan: :mod:`cosyedge.passes.hop_scan`, the same
        numbers without the Scan's per-call cost) the rewritten copy saved into a temporary folder with its weights as external data, so that no serialised copy of the weights is
        held in Python memory. A pass that fails is skipped (one warning line), the others still apply."""
        self.rewritten = {}
        if not self.rewrites or self.providers != ["CPUExecutionProvider"]:
            return self.model_path, None
        import tempfile

        from cosyedge.passes import Target, apply_passes, passes

        try:
            import onnx

            proto = self._source.proto
            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
                return self.model_path, None
            from cosyedge.passes.hop_scan import one_hop_body

            # one hop per call of a Scan over hops (an INT8 ort_matmul model): its one-hop body, without the Scan
            body = one_hop_body(proto) if self.chunk_samples == self.contract.hop_samples else None
            shapes = {i.name: list(self.input_shape(i)) for i in self.contract.stream_inputs}
            shapes.update({s.input: list(s.concrete_shape(self.batch)) for s in self.contract.states})
            model, done = apply_passes(body or proto, Target(shapes), passes(self.rewrites), where=str(self.model_path))
            counts = {name: sum(c.values()) for name, c in done.items()}
            if not any(counts.values()) and body is None:
                return self.model_path, None
            tmp = Path(tempfile.mkdtemp(prefix="cosyedge_fused_"))
            onnx.save_model(model, str(tmp / "model.onnx"), save_as_external_data=True,
                            all_tensors_to_one_file=True, location="weights.bin", size_threshold=1024)
        except Exception as err:  # a full disk: run the model as it is
            LOG.warning_once(f"{self.model_path}: graph passes not applied ({first_line(err)}); running the stored "
                             f"graph")
            return self.model_path, None
        self.rewritten = counts
        return tmp / "model.onnx", tmp

    def _check_state_shape(self, s, model_shape, kind: str) -> None:
        want = s.concrete_shape(self.batch)
        if len(model_shape) != len(want):
            raise ArtifactError(
                f"{self.model_path}: state {kind} '{s.input if kind == 'input' else s.output}' has rank "
                f"{len(model_shape)} in the model but the contract says shape {s.shape}; re-run 'cosyedge streamify'"
            )
        for axis, (m, w) in enumerate(zip(model_shape, want)):
            if isinstance(m, int) and axis != s.batch_axis and m != w:
                raise ArtifactError(
                    f"{self.model_path}: state {kind} of '{s.input}' has shape {list(model_shape)} in the model "
                    f"but the contract says {s.shape}; re-run 'cosyedge streamify'"
                )

    def _check_io_shape(self, io, model_shape) -> None:
        want = io.concrete_shape(self.batch, io.frames(self.chunk_samples, self.contract.hop_samples))
        bad = len(model_shape) != len(want) or any(
            isinstance(m, int) and m != w and d not in ("N", "T") for m, w, d in zip(model_shape, want, io.shape))
        if bad:
            raise ArtifactError(f"{self.model_path}: '{io.name}' has shape {list(model_shape)} in the model but the "
                                f"contract says {io.shape}; re-run 'cosyedge streamify'")

    def _bind(self, binding, k: int) -> None:
        states = self.contract.states
        bind_ortvalues(binding, {**self._ov_xs, **{s.input: self._ov_states[k][i] for i, s in enumerate(states)}},
                       {**self._ov_ys, **{s.output: self._ov_states[1 - k][i] for i, s in enumerate(states)}})

    def deactivate_impl(self) -> None:
        """Drop the session, bindings and buffers."""
        self._sess = None
        self._bindings = self._ov_states = self._states = self._ov_xs = self._ov_ys = None
        self._x = self._y = self._y32 = self._xs = self._ys = None

    def reset_impl(self) -> None:
        """Fill both ping-pong sets with the initial state values (zeros) and restart at set A."""
        for bufs in self._states:
            for s, a in zip(self.contract.states, bufs):
                a.fill(s.init)
        self._parity = 0

    # ------------------------------------------------------------------ streaming
    def push_impl(self, chunk: np.ndarray) -> dict[str, np.ndarray]:
        """Copy ``chunk`` into the bound input buffer, run, swap the state sets.

        Returns:
            dict[str, np.ndarray]: ``{contract.output: (batch, 1, chunk_samples) float32}``, the preallocated
            output buffer (a preallocated float32 buffer it is cast into when the model output has another
            dtype); for a multi-input model every streaming output's buffer by name. Reused by the next chunk:
            :meth:`push` copies them unless called with ``copy=False``.
        """
        if isinstance(chunk, dict):
            for name, a in chunk.items():
                np.copyto(self._xs[name], a, casting="same_kind")
        else:
            np.copyto(self._x if self._audio else next(iter(self._xs.values())), chunk, casting="same_kind")
        b = self._bindings[self._parity]
        if self._rebind:
            self._bind(b, self._parity)
        try:
            self._sess.run_with_iobinding(b)
        except Exception as err:  # onnxruntime's own exception types
            raise ArtifactError(f"ONNX Runtime failed on {self.model_path}: {first_line(err)}") from None
        self._parity ^= 1
        if not self._audio:
            return dict(self._ys)
        if self._y32 is not self._y:
            np.copyto(self._y32, self._y, casting="unsafe")
        return {self.contract.output: self._y32}

    def state_impl(self) -> dict[str, np.ndarray]:
        """Copies of the current states (the set the next push reads) by state input name."""
        return {s.input: a.copy() for s, a in zip(self.contract.states, self._states[self._parity])}

    @property
    def ping_pong_buffers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """list[tuple[np.ndarray, np.ndarray]]: per state pair, its (set A, set B) buffers (distinct
        arrays, never aliased). For tests and debugging; empty when inactive."""
        if not self.is_active:
            return []
        return list(zip(self._states[0], self._states[1]))


@dataclasses.dataclass
class OrtEngine:
    """A loaded ONNX Runtime engine: a factory of :class:`~cosyedge.runtime.ort.OrtStreamSession`.

    Attributes:
        model_path (Path): Streaming ONNX run by the sessions.
        contract (StreamContract): Its stream contract.
        folder (Path | None): Engine folder, or None for a bare ``.onnx``.
        manifest (dict | None): The validated manifest, or None for a bare ``.onnx``.
        source (SourceModel | None): The model as read when the engine was loaded
            (:class:`cosyedge.runtime.engine.ReadModel`): its sessions reuse that read instead of reading
            ``model_path`` again; None: each session reads ``model_path``.
    """

    model_path: Path
    contract: StreamContract
    folder: Path | None = None
    manifest: dict | None = None
    source: SourceModel | None = dataclasses.field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        """The engine as the messages name it: its folder, or its bare ``.onnx``."""
        return str(self.folder or self.model_path)

    def __call__(self, chunk_samples: int | None = None, batch: int = 1, threads: int = 1,
                 providers: list[str] | None = None, max_latency_records: int | None = None):
        """Return a new inactive :class:`~cosyedge.runtime.ort.OrtStreamSession` on this engine.

        Args:
            chunk_samples (int | None): Samples per chunk (defaults to one hop).
            batch (int): Streams per push.
            threads (int): ONNX Runtime threads.
            providers (list[str] | None): Execution providers (defaults to CPU).
            max_latency_records (int | None): Per-chunk latencies kept (default
                :data:`~cosyedge.runtime.base.DEFAULT_MAX_LATENCY_RECORDS`).
        """
        model = self.model_path if self.source is None else self.source
        return OrtStreamSession(model, chunk_samples=chunk_samples, batch=batch, threads=threads, providers=providers,
                                max_latency_records=max_latency_records or DEFAULT_MAX_LATENCY_RECORDS)

    session = __call__
