"""Adopt a graph that already streams (its own state inputs and outputs) into a cosyedge stream contract.

Many models are exported streaming by their authors (GTCRN, DPDFNet, DTLN): every call takes one step of
audio and the states of the previous call, and returns the output and the new states, often with the batch
on another axis than 0 or several states packed into one tensor. :func:`adopt` turns such a graph into a
cosyedge stream ONNX that ``build``, ``compare``, ``check``, ``run``, ``StreamPool`` and Triton take
unchanged:

* **State pairs** are given (``IN=OUT``) or found from the names (``x_in``/``x_out``, ``h_in``/``h_out``,
  ``cache``/``new_cache``, ``states_in``/``states_out``, a ``state``/``cache``/``hidden``-named input whose
  output is the only one with its shape, or a ``state_pairs`` entry in the model metadata); an ambiguous or
  missing pairing is refused in one line naming the candidates. Each pair must have equal shape and dtype.
  Also ``state``/``stateN``, ``h``/``hn``, ``c``/``cn`` (Silero); a size the graph leaves symbolic is learnt
  by running it once from zeros, else asked for (``--state NAME=SHAPE``).
* **Inputs** (:mod:`.layout`): a waveform (N, 1, T), or a block of L samples per call in any layout whose
  L - hop samples of context become a ``"context"`` state; features inputs (STFT/ERB frames, several, each
  with a time axis); constant side inputs fixed at adopt time (``consts``, Silero's ``sr``); anything else is
  refused in one line naming the input and the option.
* **Batch axis**: cosyedge states are batch-first (``["N", ...]``). The batch axis of each state is the one
  declared (``batch_axes``), else the one sharing the audio input's symbolic batch name, else its single
  axis of size 1 (several: tried one by one, kept when the batch test below passes). A state whose batch
  axis is elsewhere gets a ``Transpose`` on its way in and out, so the contract's state is ``(N, ...)``.
* **Dynamic batch**: a graph exported for batch 1 gets ``N`` on the batch axes of its inputs and outputs,
  and each ``Reshape`` to a constant shape starting with 1 gets ``-1`` there (identical at batch 1). The
  result must give, at batch 2, exactly what it gives each stream at batch 1 over many chunks of real
  speech. If not (a batch-1 constant deep inside, a state that folds the batch with another axis, as GTCRN's
  ``inter_cache`` (2, 1, B*33, 16)), the batch-1 graph is **batched by a Scan over streams** (:mod:`.streams`):
  an outer ONNX ``Scan`` over axis 0 of every streamed input and state runs the graph once per stream at batch
  1, each state stored ``(N, *its batch-1 shape)``; the same batch test must pass, and the log says so
  (``cosyedge.adopted`` says ``"batch": "scan over streams"`` and why the rewrite failed). Only if that fails too
  is the graph adopted **for batch 1 only**: its states and audio tensors keep a fixed batch of 1 (the contract
  still writes ``N``), so ``OrtStreamSession`` / ``cosyedge run`` work and ``StreamPool`` (more than one slot)
  and the Triton build refuse it in one line (``"batch": "fixed 1"``).
* **Outputs that are not audio**: an output of one value per call, ``(N, C)`` or ``(N,)`` (a VAD's speech
  probability), gets a ``Reshape`` to ``(N, C, 1)`` (:mod:`.canon`) and streams as a ``"features"`` output of one
  frame per hop (``StreamIO.frames_per_hop`` 1); the graph then runs hop by hop (Scan over hops). An output of
  ``hop`` samples per hop and one channel is ``"audio"``; the contract's ``output`` is the first audio output, else
  the first output (a VAD: its probability). Sessions return every output of such a model by name.
* **Chunks**: a graph whose audio input takes exactly one hop per call is wrapped in an ONNX ``Scan`` over
  the hops of a chunk (the states are the Scan's loop-carried values), so every chunk that is a multiple of
  the hop works; a graph with a dynamic time axis is kept as it is.
* States are renamed ``state_in.NN`` / ``state_out.NN`` (the original names are kept in the metadata
  ``cosyedge.adopted``), initial values are zeros unless given (the graph must run on them and give finite
  values).

**Proof before writing** (nothing is written when one fails): the adopted graph, streamed chunk by chunk
from its initial states on real speech (the bundled demo recording) at chunks of one hop and of three
hops, must equal the original graph run hop by hop with its own state loop (max abs error <= ``atol``
relative to max(1, peak), 1e-6 by default); zeroing every state before each chunk must change the output
(else the graph does not stream: its output does not depend on state), and so must zeroing each state
alone (else that "state" carries nothing), by more than max(1e-4, 100 atol) of the output's level
(:func:`cosyedge.surgery.proof.tolerance`: its peak, down to 1e-3, so a quiet output that streams is adopted).
A batch axis the user gives that keeps the graph from a dynamic batch where the axis the graph tells batches is
refused (:func:`blame_user_axes`). A ``check`` callable may add a comparison of its own (a recipe
compares against the author's reference loop).

Sources: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: loop-carried state variables, scan input
and output axes); k2-fsa/icefall ``onnx_pretrained-streaming.py`` (the state loop an already-streaming
export needs); breizhn/DTLN ``real_time_processing_onnx.py`` (packed LSTM states fed back per block).

Layout: :mod:`.pairs` (state pairs from names/metadata, :class:`AdoptedState`), :mod:`.canon` (stream I/O
layouts), :mod:`.batch` (batch axes, dynamic batch, the batch test), :mod:`.streams` (batch by a Scan over
streams), :mod:`.wrap` (renaming, Scan over hops); this module inspects the graph,
drives the steps (:func:`adopt_model`) and holds the stage and its function twin. The proof against the
graph's own state loop is :func:`cosyedge.surgery.proof.adopt.prove`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    Stage,
    StateSpec,
    StreamContract,
    StreamIO,
    check_name,
    check_not_input,
    check_writable,
    load_onnx,
    resolve_artifact,
)
from cosyedge.artifacts.task import to_write
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG, plural
from cosyedge.surgery import io, proof
from cosyedge.surgery.adopt import canon, feeds
from cosyedge.surgery.adopt.batch import _batch_test, _dynamic_batch, brief
from cosyedge.surgery.adopt.blame import blame_user_axes, misplaced_pairs, state_shape_example
from cosyedge.surgery.adopt.layout import check_states_fit, inspect_inputs, output_tensors
from cosyedge.surgery.adopt.pairs import (  # noqa: F401
    AdoptedState,
    _decl_shape,
    find_state_pairs,
    parse_state_pairs,
    split_state_args,
)
from cosyedge.surgery.adopt.streams import scan_over_streams
from cosyedge.surgery.adopt.wrap import _rename_and_wrap
from cosyedge.surgery.proof import adopt as adopt_proof

gs = lazy_import("onnx_graphsurgeon")

ADOPT_ATOL = 1e-6
"""float: default proof tolerance (max abs error relative to max(1, peak |output|))."""
ADOPTED_META_KEY = "cosyedge.adopted"
"""str: metadata key of the adoption record (JSON: original state names and batch axes, batch mode)."""
PROOF_SECONDS = 3.0
"""float: seconds of real speech the proof streams."""
_ORT_TO_NP = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int64)": "int64", "tensor(int32)": "int32"}


class AdoptedOnnxFromOnnx(Stage):
    """Stage: an already-streaming ONNX (own state inputs/outputs) -> proved cosyedge stream ONNX (module doc).

    Args:
        onnx_in (str | Path | Stage): The graph: one audio input float32 (B, 1, T) (B = 1 or dynamic, T = the
            hop or dynamic), or a block of L samples per call ((B, L), (B, 1, L), (L,)), or features inputs
            (several; a time axis each); state inputs; outputs (B, C, T'), features with a time axis, or one
            value per call (B, C) / (B,); and the matching state outputs.
        out (str | Path): Stream ONNX to write (atomically; nothing is written when a check fails).
        state_pairs (list[str] | list[tuple] | dict | None): ``"IN=OUT"`` pairs; the inputs not given are
            paired from the metadata and name conventions (:func:`find_state_pairs`).
        sample_rate_hz (int): Model sample rate (Hz).
        hop_samples (int): Samples per call of the graph (its step); chunks are multiples of it.
        delay_samples (int): Delay of the output behind the input (samples; e.g. DTLN's 384 = block - shift).
        name (str | None): Model name; default the file stem.
        batch_axes (dict[str, int] | None): Batch axis by original state input name, where the shapes do
            not tell.
        init (dict[str, float] | None): Initial value by original state input name (default 0).
        kinds (dict[str, str] | None): :attr:`StateSpec.kind` by original state input name (default
            ``"recurrent"``).
        atol (float): Proof tolerance relative to max(1, peak |output|).
        check (Callable | None): ``check(model, contract) -> dict``, run on the adopted ModelProto before
            writing; its dict is added to the contract's ``proof``; it raises AccuracyError to refuse.
        extra_metadata (dict[str, str] | None): ``metadata_props`` to add (a recipe's provenance).
        task (str | None): The contract's ``task`` (a recipe's); None: the source's ``cosyedge.task``, else guessed
            from the outputs (:func:`cosyedge.artifacts.task.to_write`); ``""``: none written.
        consts (dict[str, int | float] | None): Inputs fixed at adopt time, by name (Silero's ``{"sr": 16000}``):
            each becomes an initializer of the graph's dtype and shape.
        frame_samples (int | None): Samples per call of a waveform block input whose size the graph does not fix
            (Silero's (batch, sequence): 576); ``frame_samples - hop_samples`` of them are context, kept as a
            state (kind ``"context"``). Default: the block's fixed size, else the hop.
        time_axes (dict[str, int] | None): Time axis of a features input or output by name, where the shapes do
            not tell (default: the only symbolic axis, or the one that follows the frames of a call, or the only
            axis of size 1).
        proof_inputs (dict[str, np.ndarray] | None): Real inputs for the proof by features input name (batch 1,
            frames on the time axis; GTCRN: STFT frames of speech); default: demo speech laid out frame by frame.

    Raises:
        UsageError: ambiguous / missing / unknown state pairs, pairs with different shapes or dtypes, an input
            left unexplained (not a state, audio or features: give --const), a features input or output whose
            time axis cannot be told, a state shape the graph does not tell (give --state NAME=SHAPE), a state
            that carries nothing, outputs that do not depend on state (a given pair that holds the audio output is
            named), bad options: a sample rate, hop or delay outside streamify's bounds
            (:func:`cosyedge.surgery.streamify.check_numbers`), a ``--const`` value the input's dtype cannot hold
            exactly, a ``--time-axis`` outside the tensor's axes, a ``--state NAME=SHAPE`` that does not run or
            whose states exceed :data:`cosyedge.artifacts.contract.MAX_STATE_BYTES_PER_STREAM` per stream.
        ArtifactError: the file is missing or corrupt, ONNX Runtime cannot run it (or on zero state), its states
            (declared, or as run) exceed ``MAX_STATE_BYTES_PER_STREAM`` per stream, the output is not writable.
        AccuracyError: the adopted graph differs from the original state loop (or ``check`` refuses).
    """

    def __init__(self, onnx_in: Any, out: str | Path, *, state_pairs: Any = None, sample_rate_hz: int,
                 hop_samples: int, delay_samples: int = 0, name: str | None = None,
                 batch_axes: dict | None = None, init: dict | None = None, kinds: dict | None = None,
                 atol: float = ADOPT_ATOL, check: Callable | None = None, extra_metadata: dict | None = None,
                 consts: dict | None = None, frame_samples: int | None = None, time_axes: dict | None = None,
                 proof_inputs: dict | None = None, task: str | None = None):
        self.consts, self.frame_samples, self.task = dict(consts or {}), frame_samples, task
        self.time_axes, self.proof_inputs = dict(time_axes or {}), proof_inputs
        self.onnx_in, self.out = onnx_in, Path(out)
        self.state_pairs = state_pairs
        self.sample_rate_hz, self.hop_samples = sample_rate_hz, hop_samples
        self.delay_samples, self.name = delay_samples, name
        self.batch_axes, self.init, self.kinds = dict(batch_axes or {}), dict(init or {}), dict(kinds or {})
        self.atol, self.check, self.extra_metadata = float(atol), check, dict(extra_metadata or {})
        self.contract: StreamContract | None = None

    def call_impl(self) -> Path:
        """Adopt, prove and write now; returns the stream ONNX path (errors: class doc)."""
        check_writable(self.out)
        for key, v, lo in (("sample_rate_hz", self.sample_rate_hz, 1), ("hop_samples", self.hop_samples, 1),
                           ("delay_samples", self.delay_samples, 0)):
            if v is None or int(v) < lo:
                raise UsageError(f"{key} must be an integer >= {lo}, got {v} (CLI: --{key.replace('_', '-')} N)")
        _check_numbers(self.sample_rate_hz, self.hop_samples, self.delay_samples, self.frame_samples)
        from cosyedge.surgery.given import check_numbers

        check_numbers(atol=self.atol)
        check_name(self.name)
        src = resolve_artifact(self.onnx_in)
        check_not_input(src, self.out)
        model = load_onnx(src)
        where = str(src)
        with LOG.stage(f"adopt {src} -> {self.out}"):
            new, contract = adopt_model(
                model, where=where, state_pairs=self.state_pairs, sample_rate_hz=int(self.sample_rate_hz),
                hop_samples=int(self.hop_samples), delay_samples=int(self.delay_samples),
                name=self.name or io.model_stem(src, (".onnx", ".stream", ".streaming")),
                batch_axes=self.batch_axes, init=self.init, kinds=self.kinds,
                atol=self.atol, check=self.check, consts=self.consts, frame_samples=self.frame_samples,
                time_axes=self.time_axes, proof_inputs=self.proof_inputs, task=self.task)
            for k, v in self.extra_metadata.items():
                p = new.metadata_props.add()
                p.key, p.value = k, v
            io.save_model(new, self.out)
        self.contract = contract
        return self.out


def adopt_model(model: Any, *, where: str = "model", state_pairs: Any = None, sample_rate_hz: int, hop_samples: int,
                delay_samples: int = 0, name: str = "model", batch_axes: dict | None = None,
                init: dict | None = None, kinds: dict | None = None, atol: float = ADOPT_ATOL,
                check: Callable | None = None, consts: dict | None = None, frame_samples: int | None = None,
                time_axes: dict | None = None, proof_inputs: dict | None = None,
                task: str | None = None) -> tuple[Any, StreamContract]:
    """Adopt ``model`` in memory and prove it (module doc); nothing is written.

    Args:
        model (onnx.ModelProto): The already-streaming graph (weights inline).
        where (str): Name for messages.
        state_pairs, sample_rate_hz, hop_samples, delay_samples, batch_axes, init, kinds, atol, check, consts,
            frame_samples, time_axes, proof_inputs, task: see :class:`AdoptedOnnxFromOnnx`.
        name (str): Model name.
    Returns:
        tuple[onnx.ModelProto, StreamContract]: the adopted model (contract and ``cosyedge.adopted`` in its
        metadata) and its contract (``proof`` filled).
    Raises:
        UsageError, ArtifactError, AccuracyError: see :class:`AdoptedOnnxFromOnnx`.
    """
    _check_numbers(sample_rate_hz, hop_samples, delay_samples, frame_samples)
    hop = int(hop_samples)
    taken = [t for t in [i.name for i in model.graph.input] + [o.name for o in model.graph.output]
             if t.startswith(("state_in.", "state_out."))]
    meta = {p.key for p in model.metadata_props}
    if taken and "cosyedge.state" in meta:
        raise UsageError(f"{where} is already a cosyedge stream model (has '{taken[0]}'): nothing to adopt")
    time_axes = dict(time_axes or {})
    unfixed = model
    model = canon.fix_consts(model, dict(consts or {}), where)
    given, state_shapes = split_state_args(state_pairs)
    pairs = find_state_pairs(model, where, given=given)
    model, pairs, g = inspect_inputs(model, pairs, hop, frame_samples=frame_samples, time_axes=time_axes,
                                     batch_axes=dict(batch_axes or {}), init=dict(init or {}),
                                     kinds=dict(kinds or {}), state_shapes=state_shapes, where=where,
                                     consts=list(consts or {}))
    states = [s for s, _c in g.states]
    LOG.info("%s: %s %s, outputs %s, %d state pair(s): %s", where, "audio" if g.ins[0].kind == "audio" else
             "features", [t.name for t in g.ins], g.outs, len(states), ", ".join(f"{s.input}={s.output}" for s in states))
    ref_sess = _session(model, where, unfixed if consts else None, consts)
    # real shapes and zero-state check: one call of one hop at batch 1 (shapes the graph does not tell: by running)
    ort_in = {i.name: i for i in ref_sess.get_inputs()}
    ranked = {i.name for i in model.graph.input if i.type.tensor_type.HasField("shape")}
    declared = {s.input: list(s.shape) if s.input in ranked or s.input in state_shapes else None for s in states}
    # a size is told by the graph when fixed, or when it is the streamed input's symbolic batch (1 at batch 1)
    lead = next(i for i in model.graph.input if i.name == g.ins[0].name).type.tensor_type.shape.dim
    batch_sym = lead[0].dim_param if len(lead) and lead[0].dim_param not in ("", "?") else None
    unknown = {s.input for s in states if declared[s.input] is None
               or any((not isinstance(d, int) or d <= 0) and not (batch_sym and d == batch_sym) for d in s.shape)}
    for s in states:
        s.dtype = _ORT_TO_NP.get(ort_in[s.input].type, "float32")
        s.shape = tuple(1 if not isinstance(d, int) or d <= 0 else d for d in s.shape)
    feed1 = feeds.speech_feed(g.ins, sample_rate_hz, 1, proof_inputs)
    graph_decl = {i.name: _decl_shape(i) if i.name in ranked else None for i in model.graph.input}
    mine = {s.input: graph_decl[s.input] for s in states if s.input in state_shapes}
    try:
        first = _run_once(ref_sess, g, feed1, states, g.outs + [s.output for s in states], unknown, where, declared,
                          mine, batch_sym)
    except UsageError as err:  # a pair the user gave that holds another output is the first thing to fix
        head, fix = misplaced_pairs(model, given, g)
        if not head:
            raise
        detail = str(err).removeprefix(f"{where}: ")
        raise UsageError(f"{where}: {head} (running one hop so fails: {detail[:200]}): {fix}") from None
    for s in states:  # a state whose size the graph does not declare: the size its output has when run
        if tuple(first[s.output].shape) != tuple(s.shape) and s.input in unknown:
            s.shape = tuple(first[s.output].shape)
            check_states_fit(states, set(), where, "gives when run")
            first = _run_once(ref_sess, g, feed1, states, g.outs + [s.output for s in states], unknown, where,
                              declared, mine, batch_sym)
    for s in states:  # a scalar recurrent state is implausible: a rank-0 guess is asked for, not adopted
        if s.input in unknown and declared[s.input] is None and not s.shape and s.kind != "context":
            raise UsageError(f"{where}: the shape of state '{s.input}' cannot be told from the graph (of unknown "
                             f"rank; it runs as a scalar [], which a recurrent state hardly is): give it with "
                             f"--state {s.input}=SHAPE (all its sizes at batch 1, e.g. 1x64)")
    for s in states:
        if s.input in unknown and s.kind != "context":  # a guess that ran: say so (not for a state adopt made)
            LOG.info("%s: state '%s' has a shape the graph does not tell (%s): guessed %s, which runs; if it is "
                     "another, give --state %s=SHAPE", where, s.input, "unknown rank" if declared[s.input] is None
                     else f"declared {declared[s.input]}", list(s.shape), s.input)
    for s in states:
        got = first[s.output].shape
        if tuple(got) != tuple(s.shape):
            raise UsageError(f"{where}: state pair {s.input}={s.output} has shapes {list(s.shape)} and {list(got)} when "
                             f"run (a state output feeds the next chunk's input: shapes must be equal)")
    for o in g.outs + [s.output for s in states]:
        if not np.isfinite(first[o]).all():
            raise UsageError(f"{where}: output '{o}' is NaN/Inf on the first chunk from the initial state "
                             f"({'zeros' if all(s.init == 0 for s in states) else 'given values'}): give the initial "
                             f"values (--init NAME=VALUE)")
    second = None
    if any(t.dynamic_time for t in g.ins):
        second = _run_once(ref_sess, g, feeds.speech_feed(g.ins, sample_rate_hz, 2, proof_inputs), states, g.outs,
                           unknown, where, declared)
    outs, per_call = output_tensors({o.name: o for o in model.graph.output}, first, second, g, hop, time_axes, where)
    model, _ = canon.per_call_outputs_to_frames(model, per_call)
    if per_call:  # one value per call (a VAD's probability): (N, C, 1) per hop, so the graph runs hop by hop
        LOG.info("%s: outputs %s give one value per call: streamed as features, one frame per hop of %d samples",
                 where, sorted(per_call), hop)
        g.hop_fixed = True
        ref_sess = _session(model, where, unfixed if consts else None, consts)
    g.outs = outs
    init_vals = [(s.input, s.output, np.full(s.shape, s.init, dtype=s.dtype)) for s in states]
    hops = max(12, -(-int(PROOF_SECONDS * sample_rate_hz) // hop))
    feed = feeds.speech_feed(g.ins, sample_rate_hz, hops - hops % 3, proof_inputs)
    # the reference: the (canonical) graph, hop by hop, with its own state loop
    ref = adopt_proof.run_loop(ref_sess, g.ins, feed, 1, init_vals, g.outs)
    if not g.hop_fixed:  # a dynamic time axis: it must give at 3 hops per call what it gives hop by hop
        got = adopt_proof.run_loop(ref_sess, g.ins, feed, 3, init_vals, g.outs)
        for o in g.outs:
            mx, _snr, peak = proof.max_err(ref[o.name], got[o.name], same_shape=True)
            if not mx <= atol * max(1.0, peak):
                LOG.info("%s: takes any number of frames per call, but 3 hops per call differ from hop by hop ('%s' by "
                         "%.3g: context inside a call): run one hop per call (Scan over hops)", where, o.name, mx)
                g.hop_fixed = True
                break
    streamed_names = [t.name for t in g.ins + g.outs]
    dynamic, patched, why_fixed = True, 0, ""
    alternatives = [(k, c) for k, (_s, cands) in enumerate(g.states) for c in cands[1:]]
    adopted = None
    for alt in [None] + alternatives:
        if alt is not None:
            states[alt[0]].batch_axis = alt[1]
        if any(s.batch_axis is None for s in states):
            why_fixed = f"state '{next(s.input for s in states if s.batch_axis is None)}' has no axis of size 1"
            break
        dyn, patched = _dynamic_batch(model, streamed_names, states)
        cand = _rename_and_wrap(dyn, g.ins, g.outs, states, dynamic=True, scan=g.hop_fixed, hop=hop)
        why_fixed = _batch_test(cand, g.ins, g.outs, states, feed, atol)
        if not why_fixed:
            adopted = cand
            break
        if alt is not None:
            states[alt[0]].batch_axis = g.states[alt[0]][1][0]
    if adopted is None and g.user_axes:  # the user's batch axis, not the graph, may be what keeps it from batching
        blame_user_axes(model, g, states, streamed_names, feed, atol, hop, why_fixed, where)
    mode, c_states = "dynamic", states
    if adopted is None:  # batch by a Scan over streams: each stream runs the batch-1 graph
        for s, cands in g.states:
            s.batch_axis = cands[0]
        shapes = {t.name: [(t.frames if g.hop_fixed else -1) if k == t.time_axis else d for k, d in enumerate(t.shape)]
                  for t in g.ins + g.outs}
        try:
            streamed, st_states = scan_over_streams(model, shapes, states)
            cand = _rename_and_wrap(streamed, g.ins, g.outs, st_states, dynamic=True, scan=g.hop_fixed, hop=hop)
            why_scan = _batch_test(cand, g.ins, g.outs, st_states, feed, atol)
        except Exception as err:  # graphsurgeon / ONNX errors: keep the batch-1 fallback below
            why_scan = f"the Scan over streams fails ({brief(first_line(err))})"
        if not why_scan:
            LOG.info("%s: no dynamic batch (%s): batched by a Scan over streams (each stream runs the batch-1 graph; "
                     "states stored (N, *batch-1 shape)); batch 2 == two batch-1 streams", where, why_fixed)
            adopted, mode, c_states = cand, "scan over streams", st_states
        else:
            why_fixed = f"{why_fixed}; {why_scan}"
    if adopted is None:
        dynamic, mode = False, "fixed 1"
        adopted = _rename_and_wrap(model, g.ins, g.outs, states, dynamic=False, scan=g.hop_fixed, hop=hop)
        LOG.warning("%s: adopted for batch 1 only (%s): cosyedge run and OrtStreamSession work; StreamPool and "
                    "Triton refuse it (a fixed batch of 1)", where, why_fixed)
    contract = _contract(g, c_states, dynamic=dynamic, sample_rate_hz=sample_rate_hz, hop=hop,
                         delay_samples=delay_samples, name=name)
    contract.task = to_write(task, contract, {p.key: p.value for p in unfixed.metadata_props}, where)
    contract.write_to_onnx(adopted)
    adopted = io.finalize_model(adopted, where=where)
    try:
        contract.proof = adopt_proof.prove(adopted, contract, g.ins, g.outs, [(s.input, s.output) for s in states], ref,
                                     feed, atol, where)
    except UsageError as err:  # no state dependence: a pair the user gave may hold the audio output instead
        head, fix = misplaced_pairs(model, given, g)
        if not head:
            raise
        detail = str(err).removeprefix(f"{where}: ").removesuffix("; nothing written").removesuffix(
            ": this graph is not a streaming model")
        raise UsageError(f"{where}: {head} (fed back as the state, {detail}): {fix}; nothing written") from None
    if check is not None:
        contract.proof.update(check(adopted, contract) or {})
    contract.write_to_onnx(adopted)
    record = {"states": [{"input": s.input, "output": s.output, "state_in": c.input, "state_out": c.output,
                          "original_shape": list(s.shape), "kind": s.kind,
                          "batch_axis": s.batch_axis if mode != "scan over streams" else "stream",
                          "transposed": mode == "dynamic" and s.batch_axis not in (None, 0)}
                         for s, c in zip(states, contract.states)],
              "batch": mode, "why_fixed": why_fixed if mode != "dynamic" else "",
              "reshapes_made_dynamic": patched if mode == "dynamic" else 0, "scan_over_hops": g.hop_fixed,
              "consts": {k: v for k, v in (consts or {}).items()},
              "inputs": {t.name: {"kind": t.kind, "time_axis": t.time_axis, "frames_per_hop": t.frames} for t in g.ins},
              "outputs": {t.name: {"kind": t.kind, "time_axis": t.time_axis, "frames_per_hop": t.frames,
                                   "per_call": t.name in per_call} for t in g.outs}}
    keep = [(p.key, p.value) for p in adopted.metadata_props if p.key != ADOPTED_META_KEY]
    del adopted.metadata_props[:]
    for k, v in keep + [(ADOPTED_META_KEY, json.dumps(record, sort_keys=True))]:
        p = adopted.metadata_props.add()
        p.key, p.value = k, v
    LOG.info("adopted: %s (%s), batch %s, %s; proof: max abs error %.3g vs the graph's own state loop",
             plural(len(states), "state"), ", ".join(f"{c.input}{c.shape}" for c in contract.states),
             mode, "Scan over hops" if g.hop_fixed else "dynamic time axis", contract.proof["max_abs"])
    return adopted, contract


def _check_numbers(sample_rate_hz: Any, hop_samples: Any, delay_samples: Any, frame_samples: Any) -> None:
    """The bounds streamify puts on its numbers, up front (:func:`cosyedge.surgery.streamify.check_numbers`: what
    ``run`` and ``build`` accept of a contract, so nothing is written that they then refuse), and a frame of at most
    :data:`cosyedge.artifacts.contract.MAX_HOP_S` (its context is a state). Raises UsageError (exit 2)."""
    from cosyedge.artifacts.contract import MAX_HOP_S
    from cosyedge.surgery.given import check_numbers

    check_numbers(sample_rate_hz=sample_rate_hz, hop_samples=hop_samples, delay_samples=delay_samples)
    most = int(MAX_HOP_S * sample_rate_hz)
    if frame_samples is not None and (not isinstance(frame_samples, (int, np.integer))
                                      or not 1 <= frame_samples <= most):
        raise UsageError(f"frame_samples (--frame-samples) {frame_samples} must be an integer in 1..{most} samples "
                         f"({MAX_HOP_S:g} s at {sample_rate_hz} Hz)")


def _session(model: Any, where: str, unfixed: Any = None, consts: dict | None = None) -> Any:
    """ONNX Runtime session of ``model``. When it fails to load and ``unfixed`` (the graph before ``consts`` were
    fixed) loads, the const values are named as the likely cause (UsageError, exit 2); else ArtifactError."""
    try:
        return proof.session(model)
    except Exception as err:
        msg = first_line(err)
        if unfixed is not None:
            try:
                proof.session(unfixed)
            except Exception:  # noqa: BLE001 - the graph itself does not load: the file is to blame
                pass
            else:
                given = " ".join(f"--const {k}={v}" for k, v in (consts or {}).items())
                raise UsageError(f"{where} loads in ONNX Runtime without the consts but not with {given} ("
                                 f"{msg[:160]}): the const values are the likely cause (a value the graph does not "
                                 f"support, or one that does not fit --frame-samples/--hop-samples)") from None
        raise ArtifactError(f"ONNX Runtime cannot load {where} ({msg})") from None


def _run_once(sess: Any, g: Any, feed: dict, states: list[AdoptedState], outputs: list[str], unknown: set,
              where: str, declared: dict | None = None, given: dict | None = None,
              batch_sym: str | None = None) -> dict[str, np.ndarray]:
    """One call of the graph on ``feed`` from the initial states; outputs by name.

    A failure is blamed on the right shapes: a shape the user gave (``given``: the graph's declared shape by state
    input, ``None`` for an unknown rank) that fails where the graph runs with that state at its declared sizes (1 for
    a symbolic one) is named with the size the state's output then has (UsageError, exit 2); else a guessed shape
    (``unknown``: its rank or a size the graph does not declare; ``declared``: its declared shape by input name, None
    for an unknown rank) is asked for with ``--state NAME=SHAPE`` in a form adopt takes (N on the batch axis: the
    declared symbol ``batch_sym`` or ``N``); a failure with shapes all given names them (exit 2); one with every shape
    told by the graph is the file's (ArtifactError, exit 3).
    """
    feeds_ = {**feed, **{s.input: np.full(s.shape, s.init, dtype=s.dtype) for s in states}}
    names = [o.name for o in sess.get_outputs()]
    try:
        return dict(zip(names, sess.run(None, feeds_)))
    except Exception as err:
        msg = first_line(err)[:160]
        mine = [s for s in states if s.input in (given or {})]
        if mine:  # the user's shapes: does the graph run with them at its declared sizes?
            tried = {s.input: tuple(1 if not isinstance(d, int) or d <= 0 else d for d in given[s.input])
                     for s in mine if given[s.input] is not None}
            got = None
            if tried:
                retry = {**feeds_, **{s.input: np.full(tried[s.input], s.init, dtype=s.dtype) for s in mine
                                      if s.input in tried}}
                try:
                    got = dict(zip(names, sess.run(None, retry)))
                except Exception:  # noqa: BLE001 - it fails either way: named below with every shape in play
                    got = None
            if got is not None:
                bad = [s for s in mine if s.input in tried and s.output in got
                       and tuple(got[s.output].shape) != tuple(s.shape)] or [s for s in mine if s.input in tried]
                s = bad[0]
                want = "x".join(map(str, got[s.output].shape)) if s.output in got else None
                fix = (f"give --state {s.input}={want}, the shape its output '{s.output}' has when run" if want else
                       f"check --state {s.input}=SHAPE")
                raise UsageError(f"{where}: --state {s.input}={'x'.join(map(str, s.shape))} does not run ({msg}), "
                                 f"but the graph runs with '{s.input}' at its declared sizes {given[s.input]}: "
                                 f"{fix}") from None
        guess = [s for s in states if s.input in unknown and s.input not in (given or {})]
        told = ", ".join(f"--state {s.input}={'x'.join(map(str, s.shape))}" for s in mine)
        if guess and mine:  # either may be wrong: the user's shapes first, then the guess
            s = guess[0]
            decl = (declared or {}).get(s.input, list(s.shape))
            how = "does not declare its rank" if decl is None else f"declares {decl}"
            theirs = ", ".join(f"{m.input} {given[m.input]}" for m in mine)
            raise UsageError(f"{where}: running one hop with {told} (given) and state '{s.input}' as {list(s.shape)} "
                             f"(guessed: the graph {how}) fails ({msg[:120]}): check the shape"
                             f"{'s' if len(mine) > 1 else ''} given (the graph declares {theirs}), and give "
                             f"'{s.input}' with --state {s.input}=SHAPE if the guess is wrong "
                             f"({state_shape_example(s.input, decl, batch_sym)})") from None
        if guess:
            s = guess[0]
            decl = (declared or {}).get(s.input, list(s.shape))
            how = ("of unknown rank" if decl is None else f"declared {decl} with unknown sizes")
            raise UsageError(f"{where}: the shape of state '{s.input}' cannot be told from the graph ({how}; "
                             f"running it as {list(s.shape)} fails: {first_line(err)[:120]}): give it with --state "
                             f"{s.input}=SHAPE ({state_shape_example(s.input, decl, batch_sym)})") from None
        if mine:
            raise UsageError(f"{where}: running one hop with {told} fails ({msg}): check the shape"
                             f"{'s' if len(mine) > 1 else ''} given (the graph declares "
                             f"{', '.join(f'{s.input} {given[s.input]}' for s in mine)})") from None
        raise ArtifactError(f"ONNX Runtime fails on one hop of {where} ({first_line(err)})") from None


def _contract(g: Any, states: list[AdoptedState], *, dynamic: bool, sample_rate_hz: int, hop: int,
              delay_samples: int, name: str) -> StreamContract:
    from cosyedge.surgery.streamify import STATE_IN_PREFIX, STATE_OUT_PREFIX

    width = max(2, len(str(len(states) - 1)))
    b = BATCH_DIM  # a batch-1 graph declares 1 there: StreamPool and Triton refuse it, OrtStreamSession runs it
    specs = []
    for k, s in enumerate(states):
        shape = [b] + [int(d) for i, d in enumerate(s.shape) if i != s.batch_axis]
        specs.append(StateSpec(f"{STATE_IN_PREFIX}{k:0{width}d}", f"{STATE_OUT_PREFIX}{k:0{width}d}",
                               shape, s.dtype, f"adopted:{s.input}", float(s.init), s.kind))
    ios = [[StreamIO(t.name, t.contract_shape(), t.dtype, t.time_axis, t.frames, 0, t.kind) for t in ts]
           for ts in (g.ins, g.outs)]
    # the main output: the first waveform one, else the first (a VAD: its probability, one frame per hop)
    main = next((o.name for o in ios[1] if o.kind == "audio"), ios[1][0].name)
    return StreamContract(input=g.ins[0].name, output=main, sample_rate_hz=int(sample_rate_hz), hop_samples=hop,
                          total_stride=hop, delay_samples=int(delay_samples), states=specs, name=name,
                          inputs=ios[0], outputs=ios[1])


def adopt(in_onnx: Any, out_onnx: str | Path, *, state_pairs: Any = None, sample_rate_hz: int, hop_samples: int,
          delay_samples: int = 0, name: str | None = None, batch_axes: dict | None = None, init: dict | None = None,
          kinds: dict | None = None, atol: float = ADOPT_ATOL, check: Callable | None = None,
          extra_metadata: dict | None = None, consts: dict | None = None, frame_samples: int | None = None,
          time_axes: dict | None = None, proof_inputs: dict | None = None, task: str | None = None) -> StreamContract:
    """Function twin of :class:`AdoptedOnnxFromOnnx`: adopt an already-streaming ONNX, prove it, write it.

    Args:
        in_onnx (str | Path | Stage): The graph (see :class:`AdoptedOnnxFromOnnx`).
        out_onnx (str | Path): Stream ONNX to write.
        state_pairs (list[str] | dict | None): ``"IN=OUT"`` pairs; None: found from names and metadata.
        sample_rate_hz (int): Sample rate (Hz).
        hop_samples (int): Samples per call of the graph.
        delay_samples (int): Output delay behind the input (samples).
        name (str | None): Model name (default the file stem).
        batch_axes (dict[str, int] | None): Batch axis by original state input name.
        init (dict[str, float] | None): Initial value by original state input name (default 0).
        kinds (dict[str, str] | None): State kind by original state input name.
        atol (float): Proof tolerance relative to max(1, peak).
        check (Callable | None): Extra check ``check(model, contract) -> dict`` before writing.
        extra_metadata (dict[str, str] | None): Metadata to add.
        consts, frame_samples, time_axes, proof_inputs, task: see :class:`AdoptedOnnxFromOnnx`.
    Returns:
        StreamContract: the written contract (``proof`` filled; original names in ``cosyedge.adopted``).
    Raises:
        UsageError, ArtifactError, AccuracyError: see :class:`AdoptedOnnxFromOnnx`.
    """
    stage = AdoptedOnnxFromOnnx(in_onnx, out_onnx, state_pairs=state_pairs, sample_rate_hz=sample_rate_hz,
                                hop_samples=hop_samples, delay_samples=delay_samples, name=name,
                                batch_axes=batch_axes, init=init, kinds=kinds, atol=atol, check=check,
                                extra_metadata=extra_metadata, consts=consts, frame_samples=frame_samples,
                                time_axes=time_axes, proof_inputs=proof_inputs, task=task)
    stage()
    return stage.contract
