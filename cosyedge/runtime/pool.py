"""Serve many concurrent streams of one model: one batched ONNX Runtime run per tick, one state slot each.

:class:`StreamPool` keeps every state in a **slot store** laid out batch-first, shape
``(max_streams, *state_shape_without_N)`` (or the graph's time-major order after pass ``state_layout``);
slot ``i`` belongs to one stream from :meth:`~StreamPool.join`
to :meth:`~StreamPool.leave`. A tick takes one pending chunk from every stream that has one
(``m`` streams), gathers their states into the model's layout for batch ``m`` (the batch axis ``N``
may be anywhere in a state's shape: the store is batch-first and the gather/scatter moves the axis),
runs the model once on ``(m, 1, chunk_samples)`` and scatters the new states back to the same slots.
Streams that had no chunk keep their state untouched; a slot is reset to the initial state when a new
stream joins it, so state never leaks from one stream to another. The joined streams always hold slots
``0..k-1``: a stream joins the lowest free slot, and when one leaves, the stream in the highest slot moves into
its slot (one copy of that stream's states), so churn does not push the pool off the copy-free path.

The slot stores are **ping-pong** pairs (set A, set B) with a per-slot parity telling which set holds
the slot's current state. In the steady state of a server (the ``m`` streams of a tick sit in consecutive slots
``a..a+m-1`` with equal parity, and every state is batch-first: all streams of a tick from slot 0, or the few
streams of a server whose clients send at different moments) the model reads set ``p`` rows ``a:a+m`` and
writes set ``1-p``'s same rows in place: no copy at all. Otherwise (slots not consecutive, parities differ, a
batch axis elsewhere) the states are gathered into batch buffers and the new states
scattered back. Buffers are allocated once for ``max_streams``; batch ``m`` binds views of their first
``m`` rows (IOBinding objects are cached per ``m``), so a tick allocates nothing but the returned
output copy (none with ``tick(copy=False)``).

With ``max_streams`` > 1 the session runs the graph rewritten by the passes :data:`cosyedge.passes.POOL_PASSES`, above
all ``batch_gemm`` (:func:`cosyedge.passes.batch_gemm.batch_rewrite`):
ONNX Runtime's CPU Conv runs a one-frame convolution as one matrix-vector product per stream; rewritten, each
is one GEMM per tick (the reference model at 64 streams: 10.3 -> 7.3 ms per run, 60 -> 73 real-time streams per
core, ``docs/bench/bench_streams.json``). A graph that only runs at batch 1 and was adopted as a Scan over streams
(GTCRN: each stream alone inside the model) runs as one batched body (pass ``batch_streams``,
:mod:`cosyedge.passes.batch_streams`: constant reshapes and folded batch axes given the batch, proved equal to the
Scan on real speech before the session is made; GTCRN at 64 streams 3-4x faster per tick). An ``ort_matmul`` INT8 model's ``DynamicQuantizeMatMul`` GRU cells (activation
scale per call) are rewritten to quantize each stream's row from its own range
(pass ``dqmm_per_row``, :mod:`cosyedge.passes.dqmm_per_row`), so no stream's volume sets another's quantization
step (a stream stays within rounding of itself alone: about 50 dB for a GRU model, where a flipped INT8 rounding step is carried on).
Then the per-tick cuts, each keeping every output bit-identical: ``onehot_conv`` (a conv that only copies taps becomes a
reshape/gather), ``conv_matvec`` and ``matvec_groups`` (the matrix products ``batch_gemm`` keeps per stream, run
through the same MLAS arithmetic with less set-up, the weight L2-resident, or one GEMM per group of streams),
``scalar_rank`` (one-element constants given full rank: ONNX Runtime's rank-0 broadcast is 25x slower) and
``state_layout`` (conv states carried time-major, (N, P, C): the slot stores then hold that layout and
:meth:`~StreamPool.state` turns it back), then on the time-major graph ``perm_gather`` (picks of a transposed,
flattened window through constant indices read the window as it is: a Slice, the index table dropped),
``gather_inner`` (a GatherElements over trailing unit axes on its last axis: 8x less time in ONNX Runtime),
``reshape_chain`` (chains of re-shaping ops as one Reshape or none) and ``ring_state`` (a dilated conv's time-major
state as a ring of ``P + 1`` frames: the pool binds its input and output to the same rows, so ONNX Runtime's ScatterND
writes the new frame in place instead of the graph shifting the window by two copies; the pool keeps each slot's
position (frames run, bound as the graph input ``cosyedge_ring_pos``), resets it when a stream joins, moves it with
the stream and turns the ring back into the window in :meth:`~StreamPool.state`). The reference at 64 streams, one thread,
interleaved on a shared CPU: about 2x less time per tick (``docs/bench/roofline_reference.json``), then
``perm_gather``, ``gather_inner`` and ``reshape_chain`` about 7 % less kernel time, ``ring_state`` about 11 % less tick
time at 128 streams (Slice + Concat 2.2 -> 0.3 ms); ``passes=`` picks other lists
(:data:`cosyedge.passes.POOL_PASSES_BASE`: the pool before the cuts).

Source: ONNX Runtime "I/O Binding" (onnxruntime.ai/docs/performance/tune-performance/iobinding.html);
dynamic batching of stateful streams as in NVIDIA Triton's sequence batcher with implicit state
(docs.nvidia.com/deeplearning/triton-inference-server, "Stateful Models", oldest strategy).
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.runtime.base import LatencyLog
from cosyedge.runtime.ort import session_from_onnx

ort = lazy_import("onnxruntime")

DEFAULT_MAX_STREAMS = 64
"""int: slots allocated by default."""
DEFAULT_MAX_PENDING = 16
"""int: chunks a stream may queue before its oldest is dropped (160 ms at 10 ms chunks)."""
MAX_OFFSET_BINDINGS = 256
"""int: in-place IOBindings kept for batches that do not start at slot 0 (least recently used dropped)."""
MAX_TICK_RECORDS = 1 << 14
"""int: per-tick latencies kept (ring buffer)."""

class StreamPool:
    """Batch the chunks of up to ``max_streams`` independent streams into one model run per tick.

    Life cycle::

        pool = StreamPool("model.stream.onnx", max_streams=64)
        with pool:                          # InferenceSession and buffers
            a, b = pool.join(), pool.join() # stream ids; zero state
            pool.submit(a, chunk_a)         # float32 (chunk_samples,)
            pool.submit(b, chunk_b)
            out = pool.tick()               # {a: (chunk_samples,), b: (chunk_samples,)}, one run, batch 2
            pool.leave(a)                   # out[a], out[b] are yours (tick(copy=False): the pool's buffers)

    ``join``/``leave``/``submit``/``tick`` are thread-safe (one lock; a tick holds it while it runs).
    A caller holding the chunks of many streams as one array runs them in one call, checked once for the batch
    (``submit`` costs about 8 us per chunk in Python: 1.2 ms of a 150-stream tick)::

        y = pool.push_many([a, b], x)       # x: float32 (2, chunk_samples) -> y: (2, chunk_samples), row i = ids[i]

    A model with several streaming inputs (e.g. ``audio`` and ``ref``, each (N, 1, T)) or feature inputs takes a
    dict per stream and gives one back::

        out = pool.push({a: {"audio": x_a, "ref": r_a}, b: {"audio": x_b, "ref": r_b}})  # x, r: (chunk_samples,)
        y_a = out[a]["enhanced"]                                                     # (chunk_samples,)

    Args:
        model_path (str | Path): Streaming ONNX (``state_in.*``/``state_out.*`` and cosyedge metadata),
            or the ``model.onnx`` of an ONNX Runtime engine folder. Its batch axis must be dynamic.
        max_streams (int): Slots (concurrent streams), >= 1.
        chunk_samples (int | None): Samples per chunk, a multiple of the total stride; default one hop.
        threads (int): ONNX Runtime intra-op threads (>= 1).
        providers (list[str] | None): Execution providers; default ``["CPUExecutionProvider"]``.
        max_pending (int): Chunks a stream may queue; older ones are dropped (counted) beyond it.
        batch_rewrite (bool): With ``max_streams`` > 1, run the graph with its one-frame convolutions and
            matrix-vector MatMuls rewritten as batched GEMMs (pass ``batch_gemm``: the weight is read once per
            tick, not once per stream; outputs equal to rounding), a batch-1 graph adopted as a Scan over streams
            (GTCRN) as one batched body (pass ``batch_streams``, proved against the Scan on real speech when the pool
            starts, else the Scan with one warning line), and an adopted model's Scan over the hops of a one-hop
            chunk as its body (pass ``scan_once``). ``False`` runs the
            graph :class:`~cosyedge.runtime.ort.OrtStreamSession` runs (its in-memory rewrites), so each stream's
            output is bit-identical to a local session's alone, and for the bundled model's INT8 graph at any
            batch too (its convs and GEMMs run in integers); FP32 at batch > 1 is 126-142 dB from it (ONNX Runtime's
            float kernels round a batch differently).
        passes (Sequence[str] | None): With ``batch_rewrite``, the graph passes to apply in order (names of
            :data:`cosyedge.passes.PASSES`; a pass's switch is its name listed or not); None: :data:`cosyedge.passes.
            POOL_PASSES`. ``dqmm_per_row`` (correctness) is applied even when not listed. E.g.
            :data:`cosyedge.passes.POOL_PASSES_BASE` runs the pool as it was before the bit-identical per-tick cuts.
    Attributes:
        input_shapes (dict[str, tuple[int, ...]]): Per streaming input, the shape of one stream's chunk (without the
            batch axis), e.g. ``{"audio": (1, 160), "ref": (1, 160)}``.
        output_shapes (dict[str, tuple[int, ...]]): The same for every streaming output.
        rewritten (dict[str, int]): After :meth:`activate`, the nodes the passes replaced, by kind (empty when none
            applied; a pass that failed is said in one warning line and the graph runs without it).
    Raises:
        ArtifactError: model missing/corrupt, no cosyedge metadata, no states.
        UsageError: bad ``max_streams``, ``chunk_samples``, ``threads`` or ``max_pending``; an unknown pass name; an
            input or output whose batch axis is not the first.
    """

    def __init__(self, model_path: str | Path, max_streams: int = DEFAULT_MAX_STREAMS,
                 chunk_samples: int | None = None, threads: int = 1, providers: list[str] | None = None,
                 max_pending: int = DEFAULT_MAX_PENDING, batch_rewrite: bool = True, passes=None):
        self.batch_rewrite = bool(batch_rewrite)
        from cosyedge.passes import PASSES

        if isinstance(passes, str):  # one pass named alone (not its letters)
            passes = (passes,)
        unknown = [p for p in (passes or ()) if p not in PASSES]
        if unknown:
            raise UsageError(f"unknown graph pass(es) {unknown}; known: {sorted(PASSES)}")
        self.passes = None if passes is None else tuple(passes)
        self.rewritten: dict[str, int] = {}
        self.model_path = Path(model_path)
        c = StreamContract.from_onnx(self.model_path)
        c.require_streaming(self.model_path)
        self.contract = c
        self._samples: dict[int, int] = {}  # samples submitted per stream (the contract's max_stream_samples)
        self.chunk_samples = int(c.hop_samples if chunk_samples is None else chunk_samples)
        c.check_chunk(self.chunk_samples)
        # one waveform in, one out: chunks are arrays (the historical path); else a dict per stream (see submit)
        self._audio = c.is_audio
        self._ios_in = ([i for i in c.stream_inputs if i.name == c.input] if self._audio else c.stream_inputs)
        self._ios_out = ([o for o in c.stream_outputs if o.name == c.output] if self._audio else c.stream_outputs)
        for io in self._ios_in + self._ios_out:
            if list(io.shape)[:1] != ["N"]:
                raise UsageError(f"{self.model_path}: StreamPool stacks streams on axis 0, but '{io.name}' has shape "
                                 f"{io.shape} (batch axis 'N' elsewhere); stream it with one OrtStreamSession per "
                                 f"stream")
        from cosyedge.runtime.feeds import is_waveform

        hop = c.hop_samples
        # per-stream shapes (without the batch axis) of every streaming input and output, for one chunk
        self.input_shapes = {i.name: i.concrete_shape(1, i.frames(self.chunk_samples, hop))[1:] for i in self._ios_in}
        self.output_shapes = {o.name: o.concrete_shape(1, o.frames(self.chunk_samples, hop))[1:]
                              for o in self._ios_out}
        self._wave_in = {i.name for i in self._ios_in if is_waveform(i, c)}
        self._wave_out = {o.name for o in self._ios_out if is_waveform(o, c)}
        for name, v, lo in (("max_streams", max_streams, 1), ("threads", threads, 1), ("max_pending", max_pending, 1)):
            if int(v) < lo:
                raise UsageError(f"{name} must be >= {lo}, got {v}")
        self.max_streams = int(max_streams)
        self.threads = int(threads)
        self.max_pending = int(max_pending)
        self.providers = list(providers) if providers else ["CPUExecutionProvider"]
        self.axes = [s.batch_axis for s in c.states]  # raises ArtifactError for a state without "N"
        self._layout: list = [None] * len(c.states)  # per state: the graph's axes order after state_layout, or None
        self._ring: list = [None] * len(c.states)  # per state: its ring frames R after ring_state, or None
        self._ring_pos: str | None = None  # the graph input of the streams' positions (ring_state), or None
        self.is_active = False
        self._lock = threading.RLock()
        self._sess = None
        self._next_id = 0
        self._slot_of: dict[int, int] = {}
        self._pending: dict[int, collections.deque] = {}
        self.dropped: dict[int, int] = {}
        self._free: list[int] = []
        self._lat = LatencyLog(MAX_TICK_RECORDS)
        self.ticks = 0
        self.inplace_ticks = 0  # ticks that ran on the slot stores without copying any state
        self.chunks_run = 0

    # ------------------------------------------------------------------ life cycle
    def activate(self) -> StreamPool:
        """Create the ONNX Runtime session and every buffer (slot stores, batch buffers).

        Raises:
            ArtifactError: ONNX Runtime cannot load the model, or its inputs/outputs disagree with the contract.
            DependencyError: onnxruntime is missing.
        """
        if self.is_active:
            return self
        c = self.contract
        graph = self._graph()
        try:
            sess = session_from_onnx(graph, threads=self.threads, inter_threads=1, providers=self.providers,
                                     log_severity=3)
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own exception types
            if not self.rewritten:
                raise ArtifactError(f"ONNX Runtime cannot load {self.model_path}: {first_line(err)}") from None
            # a rewritten graph ONNX Runtime refuses: the stored one, said in one line (as a pass that fails)
            LOG.warning(f"stream pool: {self.model_path} rewritten by {sorted(self.rewritten)} does not load in ONNX "
                        f"Runtime ({first_line(err)}): running the graph as stored")
            self.rewritten, self._layout = {}, [None] * len(c.states)
            self._ring, self._ring_pos = [None] * len(c.states), None
            try:
                sess = session_from_onnx(self.model_path, threads=self.threads, inter_threads=1,
                                         providers=self.providers, log_severity=3)
            except Exception as err2:  # noqa: BLE001
                raise ArtifactError(f"ONNX Runtime cannot load {self.model_path}: {first_line(err2)}") from None
        names_in = {i.name for i in sess.get_inputs()}
        names_out = {o.name for o in sess.get_outputs()}
        missing = [n for n in list(self.input_shapes) + [s.input for s in c.states] if n not in names_in]
        missing += [n for n in list(self.output_shapes) + [s.output for s in c.states] if n not in names_out]
        if missing:
            raise ArtifactError(f"{self.model_path}: contract names {missing} are not model inputs/outputs; "
                                f"re-run 'cosyedge streamify'")
        if self.max_streams > 1:
            for arg in sess.get_inputs():
                spec = next((s for s in c.states if s.input == arg.name), None)
                axis = spec.batch_axis if spec is not None else 0 if arg.name in self.input_shapes else None
                if axis is not None and len(arg.shape) > axis and arg.shape[axis] == 1:
                    raise ArtifactError(f"{self.model_path} takes one stream per run (input '{arg.name}' has shape "
                                        f"{list(arg.shape)}, a fixed batch of 1; 'cosyedge adopt' records why in "
                                        f"cosyedge.adopted): StreamPool batches streams; give each stream its own "
                                        f"OrtStreamSession, or use max_streams=1")
        cap = self.max_streams
        # slot stores, batch-first, ping-pong: _sets[q][k][slot] is set q of the slot's state k (model layout
        # minus the N axis); _parity[slot] says which set is current
        set_a = [self._zeros(k, cap) for k in range(len(c.states))]
        # a ring state (ring_state) is written in place: both sets are one array
        self._sets = (set_a, [a if r else self._zeros(k, cap) for k, (a, r) in enumerate(zip(set_a, self._ring))])
        self._parity = np.zeros(cap, np.int8)
        self._pos = np.zeros(cap, np.int64)  # frames each slot's stream has run (ring_state positions)
        self._pos_m = np.zeros(cap, np.int64)  # the gathered slots' positions (general tick)
        self._all_first = all(ax == 0 for ax in self.axes)
        self._init = [self._zeros(k, 1)[0] for k in range(len(c.states))]
        # batch buffers in the model's layout; batch-first states bind prefix views, others per-m buffers
        def dtype(io) -> np.dtype:
            return np.dtype(np.float32 if self._audio else io.dtype)

        self._xs = {i.name: np.zeros((cap,) + self.input_shapes[i.name], dtype(i)) for i in self._ios_in}
        self._ys = {o.name: np.zeros((cap,) + self.output_shapes[o.name], dtype(o)) for o in self._ios_out}
        self._x, self._y = self._xs.get(c.input), self._ys.get(c.output)  # (cap, 1, chunk_samples) for audio
        self._sin = [self._zeros(k, cap) if ax == 0 else None for k, ax in enumerate(self.axes)]
        # a ring state (ring_state) is written in place: it has no output buffer of its own (_binding binds its input)
        self._sout = [self._zeros(k, cap) if ax == 0 and not r else None
                      for k, (ax, r) in enumerate(zip(self.axes, self._ring))]
        self._per_m: dict = {}
        self._offset_keys: collections.OrderedDict = collections.OrderedDict()  # LRU of bindings not from slot 0
        self._free = list(range(cap))
        self._sess = sess
        self.is_active = True
        LOG.debug("stream pool %s: %d slots, chunk %d, %d state(s), batch axes %s", self.model_path, cap,
                  self.chunk_samples, len(c.states), self.axes)
        return self

    def _graph(self):
        """The model for the session: the path, or the ModelProto rewritten by passes (:mod:`cosyedge.passes`).
        With ``batch_rewrite`` (and more than one slot): :data:`cosyedge.passes.POOL_PASSES` (``dft_fft`` and
        ``einsum_matmul`` on the CPU provider without external data, then ``batch_gemm``, then ``dqmm_per_row``).
        Without it, or with one slot: the passes :class:`~cosyedge.runtime.ort.OrtStreamSession` applies
        (:data:`cosyedge.passes.SESSION_PASSES`, ``conv_sum`` included, in its order), so a stream's output is
        bit-identical to the local session's (an INT8 graph with ``conv_sum`` in one and not the other: 61 dB apart on
        loud speech, a flipped rounding step carried by the state); then, with more than one slot, ``dqmm_per_row``
        (always, for correctness: one stream's activation range never changes another's output)."""
        from cosyedge.passes import PASSES, POOL_PASSES, SESSION_PASSES, Target, apply_passes, passes

        self.rewritten = {}
        onnx = lazy_import("onnx")
        model = onnx.load(str(self.model_path))
        unwrapped = {}
        if self.chunk_samples == self.contract.hop_samples:  # a Scan over hops at one hop: its body, without the Scan
            from cosyedge.passes.hop_scan import one_hop_body

            body = one_hop_body(model)
            if body is not None:
                model, unwrapped = body, {"one_hop_body": 1}
        cpu = self.providers == ["CPUExecutionProvider"] and not any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
        # concrete shapes at batch 2 (one slot: 1) for the passes' checks (the nodes they write hold for any batch);
        # symbolic batch for batch_gemm
        batch = 1 if self.max_streams == 1 else 2
        shapes = {name: [batch, *shape] for name, shape in self.input_shapes.items()}
        shapes.update({s.input: list(s.concrete_shape(batch)) for s in self.contract.states})
        dims = {name: ["N", *shape] for name, shape in self.input_shapes.items()}
        dims.update({s.input: list(s.shape) for s in self.contract.states})
        if self.batch_rewrite and self.max_streams > 1:
            names = list(POOL_PASSES if self.passes is None else self.passes)
            names += [] if "dqmm_per_row" in names else ["dqmm_per_row"]
        else:  # the graph OrtStreamSession runs, then (more than one slot) dqmm_per_row
            names = list(SESSION_PASSES) + (["dqmm_per_row"] if self.max_streams > 1 else [])
        model, done = apply_passes(model, Target(shapes, dims, any_batch=self.max_streams > 1), passes(names),
                                   where=f"stream pool: {self.model_path}", cpu=cpu)
        counts = {k: v for name, c in done.items() if PASSES[name].report(c) for k, v in c.items() if v}
        from cosyedge.precision.bodies import iter_graphs

        left = sum(n.op_type == "DynamicQuantizeMatMul" for g in iter_graphs(model.graph) for n in g.node)
        if left and self.max_streams > 1:
            LOG.warning_once(f"stream pool: {self.model_path} keeps {left} DynamicQuantizeMatMul (no constant "
                             f"int8 weight with zero point 0): their activation scale spans every stream of a "
                             f"tick, so a loud stream changes a quiet one's output slightly")
        counts.update(unwrapped)
        from cosyedge.passes.ring_state import POS_INPUT, rings_of
        from cosyedge.passes.state_layout import layout_of

        layout = layout_of(model) if counts else {}
        self._layout = [layout.get(st.input) for st in self.contract.states]
        rings = rings_of(model) if counts else {}
        self._ring = [rings.get(st.input) for st in self.contract.states]
        self._ring_pos = POS_INPUT if rings else None
        if not counts:
            return self.model_path
        self.rewritten = counts
        LOG.debug("stream pool %s: rewrites %s", self.model_path, self.rewritten)
        return model

    def deactivate(self) -> None:
        """Release the session and buffers; every stream is dropped."""
        with self._lock:
            self._sess = None
            self._per_m = {}
            self._offset_keys.clear()
            self._sets = self._sin = self._sout = None
            self._x = self._y = self._xs = self._ys = None
            self._slot_of.clear()
            self._pending.clear()
            self.is_active = False

    def __enter__(self) -> StreamPool:
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    # ------------------------------------------------------------------ streams
    @property
    def streams(self) -> list[int]:
        """list[int]: ids of the joined streams, in join order."""
        return list(self._slot_of)

    def join(self) -> int:
        """Add a stream with the initial (zero) state; returns its id (int, never reused).

        Raises:
            UsageError: the pool is inactive or all ``max_streams`` slots are taken.
        """
        with self._lock:
            self._check_active("join()")
            if not self._free:
                raise UsageError(f"stream pool is full ({self.max_streams} streams); leave() one or create the "
                                 f"pool with a larger max_streams")
            self._free.sort()
            slot = self._free.pop(0)  # lowest free slot keeps the active slots compact
            for store, init in zip(self._sets[self._parity[slot]], self._init):
                store[slot] = init
            self._pos[slot] = 0
            sid = self._next_id
            self._next_id += 1
            self._slot_of[sid] = slot
            self._pending[sid] = collections.deque()
            self.dropped[sid] = 0
            return sid

    def leave(self, sid: int) -> None:
        """Remove stream ``sid``; its queued chunks are discarded and its slot freed.

        Raises:
            UsageError: unknown stream id.
        """
        with self._lock:
            slot = self._slot(sid)
            del self._slot_of[sid], self._pending[sid]
            self._samples.pop(sid, None)
            self.dropped.pop(sid, None)
            last = max(self._slot_of.values(), default=-1)
            if last > slot:
                # keep the active slots compact (0..k-1), so that the steady state after a stream leaves still
                # runs in place: the stream in the highest slot moves into the freed one (its rows, one copy)
                moved = next(s for s, v in self._slot_of.items() if v == last)
                q = self._parity[last]
                for store in self._sets[q]:
                    store[slot] = store[last]
                self._parity[slot] = q
                self._pos[slot] = self._pos[last]
                self._slot_of[moved] = slot
                slot = last
            self._free.append(slot)

    def submit(self, sid: int, chunk: np.ndarray | dict) -> None:
        """Queue one chunk of stream ``sid`` for the next tick.

        Args:
            sid (int): Stream id from :meth:`join`.
            chunk (np.ndarray | dict[str, np.ndarray]): float32 PCM (chunk_samples,) (or (1, 1, chunk_samples)),
                finite. For a model that does not map one waveform to one waveform (several inputs, e.g.
                ``audio`` and ``ref``, or features): a dict with one array per streaming input, of the shape
                :attr:`input_shapes` gives (its shape without the batch axis, e.g. (1, chunk_samples); a waveform
                input also takes (chunk_samples,)), of the input's dtype.
        Raises:
            UsageError: unknown id, wrong shape/dtype, NaN/Inf samples; an array for a multi-input model (or a
                dict for a one-input one), a missing or unknown input name. When more than ``max_pending``
                chunks wait, the oldest is dropped and counted in ``dropped[sid]`` (not an error).
        """
        if not self._audio or isinstance(chunk, dict):
            item = self._check_feeds(sid, chunk)
        else:
            chunk = np.asarray(chunk)
            if chunk.dtype != np.float32:
                raise UsageError(f"chunk dtype is {chunk.dtype}, expected float32")
            if chunk.size != self.chunk_samples or chunk.ndim not in (1, 3):
                raise UsageError(f"chunk shape is {chunk.shape}, expected ({self.chunk_samples},)")
            if not np.isfinite(chunk).all():
                raise UsageError(f"chunk of stream {sid} holds NaN/Inf samples")
            item = chunk.reshape(-1).copy()
        with self._lock:
            self._slot(sid)
            done = self._samples.get(sid, 0) + self.chunk_samples
            self.contract.check_stream_length(done, f"stream {sid}", "leave() it and join() a new stream")
            self._samples[sid] = done
            q = self._pending[sid]
            if len(q) >= self.max_pending:
                q.popleft()
                self.dropped[sid] += 1
                LOG.warning_once(f"stream pool: stream {sid} queued more than {self.max_pending} chunks; "
                                 f"dropping its oldest (the pool is slower than real time)")
            q.append(item)

    def pending(self, sid: int) -> int:
        """int: chunks queued for stream ``sid``."""
        with self._lock:
            self._slot(sid)
            return len(self._pending[sid])

    # ------------------------------------------------------------------ running
    def tick(self, copy: bool = True) -> dict[int, np.ndarray]:
        """Run one chunk of every stream that has one queued, in one batched model run.

        Args:
            copy (bool): ``True`` (default): every returned array is the caller's (rows of one new copy of the
                batch, no two sharing memory; safe to keep across ticks). ``False``: opt in to views of the
                pool's preallocated output buffers (no copy): they are overwritten by the next tick (from any
                thread) and released by :meth:`deactivate`, so use or copy the values before the next tick.
        Returns:
            dict[int, np.ndarray | dict[str, np.ndarray]]: stream id -> float32 (chunk_samples,) output; for a
            model that does not map one waveform to one waveform, stream id -> {output name: array} with every
            streaming output (a waveform output as (chunk_samples,), others of :attr:`output_shapes`, of the
            output's dtype). Owned arrays unless ``copy=False``. Empty when nothing was queued.
        Raises:
            UsageError: the pool is inactive.
        """
        with self._lock:
            self._check_active("tick()")
            ready = sorted((self._slot_of[sid], sid) for sid, q in self._pending.items() if q)
            m = len(ready)
            if not m:
                return {}
            t0 = time.perf_counter()
            slots = np.fromiter((s for s, _ in ready), dtype=np.intp, count=m)
            for i, (_, sid) in enumerate(ready):
                item = self._pending[sid].popleft()
                if self._audio:
                    self._x[i, 0] = item
                else:
                    for name, a in item.items():
                        self._xs[name][i] = a
            self._run_slots(slots, m)
            if self._audio:  # one copy of the batch (copy=False: the buffer); each stream gets its own row of it
                out = dict(zip((sid for _, sid in ready), self._y[:m, 0].copy() if copy else self._y[:m, 0]))
            else:
                ys = {k: y[:m].copy() if copy else y[:m] for k, y in self._ys.items()}
                out = {sid: {k: (y[i, 0] if k in self._wave_out else y[i]) for k, y in ys.items()}
                       for i, (_, sid) in enumerate(ready)}
            ms = (time.perf_counter() - t0) * 1000.0
            self._lat.add(ms)
            self.ticks += 1
            self.chunks_run += m
            return out

    def push_many(self, sids, chunks: np.ndarray) -> np.ndarray:
        """Run one chunk of each stream in ``sids`` in one tick, the chunks given as the rows of one array: the batched
        form of :meth:`push` for a caller that holds them together (a server's gathered requests, a benchmark), with
        the checks :meth:`submit` makes per chunk made once for the batch and no per-stream queue. The model run and
        every output are those of :meth:`push` with the same chunks.

        Args:
            sids (Sequence[int]): m distinct stream ids from :meth:`join` (any order; m may be 0).
            chunks (np.ndarray): float32 (m, chunk_samples), finite; row i is stream ``sids[i]``'s chunk.
        Returns:
            np.ndarray: float32 (m, chunk_samples), a new array: row i is stream ``sids[i]``'s output.
        Raises:
            UsageError: the pool is inactive; a model that does not map one waveform to one waveform (use
                :meth:`push` with a dict per stream); ids not a sequence; wrong dtype or shape (a ragged list too),
                NaN/Inf samples (naming the streams); an unknown or repeated id; a stream with chunks queued by
                :meth:`submit` (:meth:`tick` them first: a tick runs one chunk per stream); a stream past the
                contract's length limit.
        """
        c = self.chunk_samples
        if not self._audio:
            raise UsageError(f"push_many() takes one waveform per stream; {self.model_path} streams inputs "
                             f"{sorted(self.input_shapes)}: use push() with a dict per stream")
        try:
            m = len(sids)
        except TypeError:
            raise UsageError(f"push_many() takes a sequence of stream ids, got {type(sids).__name__}") from None
        try:
            x = np.asarray(chunks)
        except ValueError as e:  # a ragged list of rows
            raise UsageError(f"chunks is not one (m, {c}) array: {first_line(e, with_type=False)}") from None
        if x.dtype != np.float32:
            raise UsageError(f"chunks dtype is {x.dtype}, expected float32")
        if x.shape != (m, c):
            raise UsageError(f"chunks shape is {x.shape}, expected ({m}, {c}): one row of {c} samples per stream id")
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            ids = list(sids)  # a set or dict keys of ids cannot be indexed
            bad = [ids[i] for i in np.flatnonzero(~finite)[:5]]
            raise UsageError(f"chunks of stream(s) {bad} hold NaN/Inf samples")
        with self._lock:
            self._check_active("push_many()")
            if not m:
                return np.empty((0, c), np.float32)
            slots = np.fromiter((self._slot(sid) for sid in sids), dtype=np.intp, count=m)
            if np.unique(slots).size != m:
                raise UsageError("push_many(): a stream id appears more than once (one chunk per stream per tick)")
            queued = [sid for sid in sids if self._pending[sid]]
            if queued:
                raise UsageError(f"push_many(): stream(s) {queued[:5]} have chunks queued by submit(); tick() them "
                                 f"first (a tick runs one chunk per stream)")
            done = [self._samples.get(sid, 0) + c for sid in sids]
            if self.contract.max_stream_samples and max(done) > self.contract.max_stream_samples:
                for sid, n in zip(sids, done):  # the first stream past the model's position table, named
                    self.contract.check_stream_length(n, f"stream {sid}", "leave() it and join() a new stream")
            self._samples.update(zip(sids, done))
            t0 = time.perf_counter()
            order = np.argsort(slots, kind="stable")
            self._x[:m, 0] = x[order]
            self._run_slots(slots[order], m)
            out = np.empty((m, c), np.float32)
            out[order] = self._y[:m, 0]
            self._lat.add((time.perf_counter() - t0) * 1000.0)
            self.ticks += 1
            self.chunks_run += m
            return out

    def push(self, chunks: dict[int, np.ndarray], copy: bool = True) -> dict[int, np.ndarray]:
        """Submit one chunk per stream and run one tick (:meth:`submit` + :meth:`tick`).

        Args:
            chunks (dict[int, np.ndarray | dict[str, np.ndarray]]): stream id -> float32 (chunk_samples,), or for a
                multi-input model stream id -> {input name: array} (:meth:`submit`).
            copy (bool): ``True`` (default): the returned arrays are the caller's; ``False``: views of the pool's
                output buffers, overwritten by the next tick (:meth:`tick`).
        Returns:
            dict[int, np.ndarray | dict[str, np.ndarray]]: outputs of every stream that ran this tick (:meth:`tick`).
        """
        with self._lock:
            for sid, ch in chunks.items():
                self.submit(sid, ch)
            return self.tick(copy=copy)

    def state(self, sid: int) -> dict[str, np.ndarray]:
        """Copies of stream ``sid``'s states by state input name, each in the model layout with batch 1."""
        with self._lock:
            slot = self._slot(sid)
            out = {}
            for s, ax, perm, ring, store in zip(self.contract.states, self.axes, self._layout, self._ring,
                                                self._sets[self._parity[slot]]):
                a = store[slot]
                if ring:  # ring rows in rotation order -> the window, oldest frame first
                    a = a[(self._pos[slot] + 1 + np.arange(ring - 1)) % ring]
                a = np.expand_dims(a, ax)
                out[s.input] = (a if perm is None else a.transpose(np.argsort(perm))).copy()
            return out

    @property
    def tick_latencies_ms(self) -> np.ndarray:
        """np.ndarray: float64 (K,), wall time of the last K ticks in ms (gather + run + scatter), oldest first."""
        return self._lat.values()

    def clear_latencies(self) -> None:
        """Forget the recorded tick latencies."""
        self._lat.clear()

    # ------------------------------------------------------------------ helpers
    def _check_active(self, what: str) -> None:
        if not self.is_active:
            raise UsageError(f"{what} on an inactive stream pool: call activate() first or use 'with pool:'")

    def _slot(self, sid: int) -> int:
        try:
            return self._slot_of[sid]
        except (KeyError, TypeError):  # TypeError: an unhashable id (a list, an array)
            raise UsageError(f"unknown stream id {sid} (joined: {sorted(self._slot_of)})") from None

    def _run_slots(self, slots: np.ndarray, m: int) -> None:
        """Run the model on the first ``m`` rows of the input buffers as the streams in ``slots`` (intp (m,), sorted,
        distinct): in place where the slots are contiguous and share a parity (the steady state), else gathered;
        then advance their positions."""
        first = int(slots[0])
        contiguous = bool(slots[-1] - first == m - 1)  # slots first..first+m-1 (sorted, distinct)
        par = self._parity[slots]
        p = int(par[0])
        if contiguous and self._all_first and (par == p).all():
            # steady state: read set p rows first:first+m, write set 1-p's same rows in place, flip the parity
            self._sess.run_with_iobinding(self._binding_inplace(first, m, p))
            self._parity[first:first + m] = 1 - p
            self.inplace_ticks += 1
        else:
            self._run_gathered(m, slots, par, bool((par == p).all()))
        self._pos[slots] += 1

    def _run_gathered(self, m: int, slots: np.ndarray, par: np.ndarray, uniform: bool) -> None:
        """General tick: gather the slots' current states into the batch-``m`` buffers (model layout),
        run, scatter the new states back into the same sets (parities unchanged)."""
        binding, sin_m, sout_m = self._binding(m)
        p = int(par[0])
        self._pos_m[:m] = self._pos[slots]
        ones = None if uniform else np.flatnonzero(par == 1)
        for k, ax in enumerate(self.axes):
            if uniform:
                src = self._sets[p][k][:m] if slots[-1] == m - 1 and slots[0] == 0 else self._sets[p][k][slots]
            else:
                src = self._sets[0][k][slots]
                src[ones] = self._sets[1][k][slots[ones]]
            dst = sin_m[k] if ax == 0 else np.moveaxis(sin_m[k], ax, 0)
            dst[...] = src
        self._sess.run_with_iobinding(binding)
        for k, ax in enumerate(self.axes):
            new = sout_m[k] if ax == 0 else np.moveaxis(sout_m[k], ax, 0)
            if uniform:
                if slots[-1] == m - 1 and slots[0] == 0:
                    self._sets[p][k][:m] = new
                else:
                    self._sets[p][k][slots] = new
            else:
                for q in (0, 1):
                    rows = np.flatnonzero(par == q)
                    self._sets[q][k][slots[rows]] = new[rows]

    def _zeros(self, k: int, n: int) -> np.ndarray:
        """State ``k``'s initial value for ``n`` streams in the slot stores' layout: batch-first (the model's layout
        with its batch axis moved first), or the layout a ``state_layout`` rewrite gave the graph (contiguous)."""
        s, ax, perm = self.contract.states[k], self.axes[k], self._layout[k]
        z = s.zeros(n)
        z = np.ascontiguousarray(np.moveaxis(z, ax, 0) if perm is None else z.transpose(perm))
        if self._ring[k]:  # (n, R, C): the ring_state rewrite's ring of R = P + 1 frames, every row the initial value
            z = np.full((n, self._ring[k]) + z.shape[2:], s.init, z.dtype)
        return z

    def _ov(self, a: np.ndarray):
        return ort.OrtValue.ortvalue_from_numpy(a, "cpu", 0)

    def _bind_audio(self, b, m: int, keep: list) -> None:
        """Bind the first ``m`` rows of every streaming input and output buffer (audio: the one of each)."""
        for name, a in self._xs.items():
            keep.append(self._ov(a[:m]))
            b.bind_ortvalue_input(name, keep[-1])
        for name, a in self._ys.items():
            keep.append(self._ov(a[:m]))
            b.bind_ortvalue_output(name, keep[-1])

    def _check_feeds(self, sid: int, feeds) -> dict[str, np.ndarray]:
        """One stream's chunk of a multi-input model, checked: {input name: array of :attr:`input_shapes`} (copies).

        Raises:
            UsageError: not a dict (or a dict for a one-input model), a missing/unknown name, wrong shape, dtype,
                NaN/Inf values.
        """
        want = self.input_shapes
        if not isinstance(feeds, dict):
            raise UsageError(f"{self.model_path} streams inputs {list(want)}: submit a dict of arrays by name per "
                             f"stream, e.g. {{{', '.join(f'{k!r}: {v}' for k, v in want.items())}}}")
        if self._audio:
            raise UsageError(f"{self.model_path} streams one waveform: submit a float32 ({self.chunk_samples},) array, "
                             f"not a dict")
        missing, extra = sorted(set(want) - set(feeds)), sorted(set(feeds) - set(want))
        if missing or extra:
            raise UsageError(f"stream {sid}: submit() needs exactly the inputs {sorted(want)}: missing {missing}, "
                             f"unknown {extra}")
        out = {}
        for io in self._ios_in:
            a = np.asarray(feeds[io.name])
            shape = want[io.name]
            ok = a.shape in (shape, (1,) + shape) or (io.name in self._wave_in and a.shape == (self.chunk_samples,))
            if not ok:
                raise UsageError(f"stream {sid}: input '{io.name}' has shape {a.shape}, expected {shape}"
                                 + (f" or ({self.chunk_samples},)" if io.name in self._wave_in else ""))
            if a.dtype != np.dtype(io.dtype):
                raise UsageError(f"stream {sid}: input '{io.name}' dtype is {a.dtype}, expected {io.dtype}")
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise UsageError(f"stream {sid}: input '{io.name}' holds NaN/Inf values")
            out[io.name] = a.reshape(shape).copy()
        return out

    def _binding_inplace(self, first: int, m: int, p: int):
        """IOBinding for batch ``m`` reading set ``p`` rows ``first:first+m`` and writing set 1-p's same rows (only
        when every state is batch-first: the rows are then contiguous views). Cached: bindings from slot 0 always
        (the steady state), others in a cache of the :data:`MAX_OFFSET_BINDINGS` last used (a server whose streams
        send at different moments ticks a few streams at a time, anywhere in the slots)."""
        key = ("inplace", first, m, p)
        got = self._per_m.get(key)
        if got is not None:
            if first:
                self._offset_keys.move_to_end(key)
            return got[0]
        b, keep = self._sess.io_binding(), []
        self._bind_audio(b, m, keep)
        rows = slice(first, first + m)
        for s, a_in, a_out in zip(self.contract.states, self._sets[p], self._sets[1 - p]):
            keep += [self._ov(a_in[rows]), self._ov(a_out[rows])]
            b.bind_ortvalue_input(s.input, keep[-2])
            b.bind_ortvalue_output(s.output, keep[-1])
        if self._ring_pos:
            keep.append(self._ov(self._pos[rows]))
            b.bind_ortvalue_input(self._ring_pos, keep[-1])
        self._per_m[key] = (b, keep)  # the OrtValues must outlive the binding
        if first:
            self._offset_keys[key] = None
            if len(self._offset_keys) > MAX_OFFSET_BINDINGS:
                del self._per_m[self._offset_keys.popitem(last=False)[0]]
        return b

    def _binding(self, m: int):
        """IOBinding for batch ``m`` (cached) over the gather buffers, and the state input/output arrays
        (model layout) it reads/writes."""
        got = self._per_m.get(m)
        if got is not None:
            return got[:3]
        c = self.contract
        sin = [a[:m] if a is not None else s.zeros(m) for s, a in zip(c.states, self._sin)]
        sout = [a_in if r else a[:m] if a is not None else s.zeros(m)  # a ring is written in place
                for s, a, a_in, r in zip(c.states, self._sout, sin, self._ring)]
        b, keep = self._sess.io_binding(), []
        self._bind_audio(b, m, keep)
        for s, a_in, a_out in zip(c.states, sin, sout):
            keep += [self._ov(a_in), self._ov(a_out)]
            b.bind_ortvalue_input(s.input, keep[-2])
            b.bind_ortvalue_output(s.output, keep[-1])
        if self._ring_pos:
            keep.append(self._ov(self._pos_m[:m]))
            b.bind_ortvalue_input(self._ring_pos, keep[-1])
        self._per_m[m] = (b, sin, sout, keep)
        return b, sin, sout
