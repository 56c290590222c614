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
alone (else that "state" carries nothing). A ``check`` callable may add a comparison of its own (a recipe
compares against the author's reference loop).

Sources: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: loop-carried state variables, scan input
and output axes); k2-fsa/icefall ``onnx_pretrained-streaming.py`` (the state loop an already-streaming
export needs); breizhn/DTLN ``real_time_processing_onnx.py`` (packed LSTM states fed back per block).

Layout: :mod:`.pairs` (state pairs from names/metadata, :class:`AdoptedState`), :mod:`.canon` (stream I/O
layouts), :mod:`.batch` (batch axes, dynamic batch, the batch test), :mod:`.streams` (batch by a Scan over
streams), :mod:`.wrap` (renaming, Scan over hops); this module inspects the graph,
drives the steps (:func:`adopt_model`) and holds the stage and its function twin. The proof against the
graph's own state loop is :func:`cosyedge.surgery.proof.prove_against_loop`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    TIME_DIM,
    Stage,
    StateSpec,
    StreamContract,
    StreamIO,
    check_not_input,
    check_writable,
    load_onnx,
    resolve_artifact,
)
from cosyedge.errors import ArtifactError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.surgery import io, proof
from cosyedge.surgery.adopt import canon
from cosyedge.surgery.adopt.batch import _batch_test, _dynamic_batch
from cosyedge.surgery.adopt.pairs import AdoptedState, _decl_shape, find_state_pairs, parse_state_pairs
from cosyedge.surgery.adopt.streams import scan_over_streams
from cosyedge.surgery.adopt.wrap import _rename_and_wrap

gs = lazy_import("onnx_graphsurgeon")

ADOPT_ATOL = 1e-6
"""float: default proof tolerance (max abs error relative to max(1, peak |output|))."""
ADOPTED_META_KEY = "cosyedge.adopted"
"""str: metadata key of the adoption record (JSON: original state names and batch axes, batch mode)."""
PROOF_SECONDS = 3.0
"""float: seconds of real speech the proof streams."""
_ORT_TO_NP = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int64)": "int64", "tensor(int32)": "int32"}


@dataclasses.dataclass
class _Graph:
    audio: str
    outs: list
    states: list
    hop_fixed: bool


def _inspect(model: Any, pairs: list[tuple[str, str]], hop: int, batch_axes: dict, init: dict, kinds: dict,
             where: str) -> _Graph:
    ins = {i.name: i for i in model.graph.input}
    outs = {o.name: o for o in model.graph.output}
    elem = {**{n: v.type.tensor_type.elem_type for n, v in ins.items()},
            **{n: v.type.tensor_type.elem_type for n, v in outs.items()}}
    bad_in = [i for i, _ in pairs if i not in ins]
    bad_out = [o for _, o in pairs if o not in outs]
    if bad_in or bad_out:
        what = (f"state input{'s' if len(bad_in) > 1 else ''} {bad_in} not among the inputs {list(ins)}" if bad_in
                else f"state output{'s' if len(bad_out) > 1 else ''} {bad_out} not among the outputs {list(outs)}")
        raise UsageError(f"{where}: {what}")
    for side in (0, 1):
        names = [p[side] for p in pairs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise UsageError(f"{where}: '{dup[0]}' appears in several state pairs")
    for name in list(batch_axes) + list(init) + list(kinds):
        if name not in ins:
            raise UsageError(f"{where}: '{name}' (given for --batch-axis/--init) is not an input of the graph "
                             f"(inputs: {list(ins)})")
    rest_in = [n for n in ins if n not in {p[0] for p in pairs}]
    rest_out = [n for n in outs if n not in {p[1] for p in pairs}]
    if len(rest_in) != 1:
        raise UsageError(f"{where}: {'no input is' if not rest_in else f'inputs {rest_in} are'} left for the audio "
                         f"after the state pairs {[f'{a}={b}' for a, b in pairs]}: adopt streams one waveform input "
                         f"(N, 1, T); pair every state input with --state IN=OUT")
    if not rest_out:
        raise UsageError(f"{where}: every output is a state output: the graph has no audio output")
    audio = rest_in[0]
    a_shape = _decl_shape(ins[audio])
    if len(a_shape) != 3 or a_shape[1] != 1:
        raise UsageError(f"{where}: audio input '{audio}' has shape {a_shape}; adopt takes a waveform graph, audio "
                         f"(N, 1, T): wrap a features graph in a recipe (as cosyedge.recipes.dtln does)")
    if isinstance(a_shape[0], int) and a_shape[0] not in (0, 1):
        raise UsageError(f"{where}: audio input '{audio}' has a fixed batch of {a_shape[0]}: export it with batch 1 "
                         f"or a dynamic batch")
    t = a_shape[2]
    hop_fixed = isinstance(t, int) and t > 0
    if hop_fixed and t != hop:
        raise UsageError(f"{where}: audio input '{audio}' takes {t} samples per call, not hop_samples {hop}: give "
                         f"--hop-samples {t}")
    for o in rest_out:
        sh = _decl_shape(outs[o])
        if sh and len(sh) not in (1, 2, 3):
            raise UsageError(f"{where}: output '{o}' has shape {sh}; adopt streams outputs (N, C, T) with time last, "
                             f"or one value per call (N, C) / (N,)")
    states = []
    a_batch = a_shape[0] if isinstance(a_shape[0], str) and a_shape[0] != "?" else None
    for i, o in pairs:
        si, so = _decl_shape(ins[i]), _decl_shape(outs[o])
        if elem[i] != elem[o]:
            from onnx import helper

            raise UsageError(f"{where}: state pair {i}={o} has dtypes {helper.tensor_dtype_to_np_dtype(elem[i])} and "
                             f"{helper.tensor_dtype_to_np_dtype(elem[o])} (a state output feeds the next chunk's input: "
                             f"dtypes must be equal)")
        fixed = len(si) == len(so) and all(a == b for a, b in zip(si, so) if isinstance(a, int) and isinstance(b, int))
        if not fixed:
            raise UsageError(f"{where}: state pair {i}={o} has shapes {si} and {so} (a state output feeds the next "
                             f"chunk's input: shapes must be equal)")
        if i in batch_axes:
            ax = int(batch_axes[i])
            if not -len(si) <= ax < len(si):
                raise UsageError(f"{where}: --batch-axis {i}={ax} is outside the state's {len(si)} axes {si}")
            cands = [ax % len(si)]
        else:
            sym = [k for k, d in enumerate(si) if a_batch is not None and d == a_batch]
            ones = [k for k, d in enumerate(si) if d == 1 or isinstance(d, str)]
            cands = sym[:1] or ([0] if 0 in ones else []) + [k for k in ones if k != 0] or [None]
        states.append((AdoptedState(i, o, tuple(si), "float32", cands[0], float(init.get(i, 0.0)),
                                    kinds.get(i, "recurrent")), cands))
    return _Graph(audio, rest_out, states, hop_fixed)


class AdoptedOnnxFromOnnx(Stage):
    """Stage: an already-streaming ONNX (own state inputs/outputs) -> proved cosyedge stream ONNX (module doc).

    Args:
        onnx_in (str | Path | Stage): The graph: one audio input float32 (B, 1, T) (B = 1 or dynamic, T = the
            hop or dynamic), state inputs, outputs (B, C, T') or one value per call (B, C) / (B,), and the
            matching state outputs.
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

    Raises:
        UsageError: ambiguous / missing / unknown state pairs, pairs with different shapes or dtypes, no single
            waveform input, a state that carries nothing, outputs that do not depend on state, bad options.
        ArtifactError: the file is missing or corrupt, ONNX Runtime cannot run it (or on zero state), the
            output is not writable.
        AccuracyError: the adopted graph differs from the original state loop (or ``check`` refuses).
    """

    def __init__(self, onnx_in: Any, out: str | Path, *, state_pairs: Any = None, sample_rate_hz: int,
                 hop_samples: int, delay_samples: int = 0, name: str | None = None,
                 batch_axes: dict | None = None, init: dict | None = None, kinds: dict | None = None,
                 atol: float = ADOPT_ATOL, check: Callable | None = None, extra_metadata: dict | None = None):
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
                atol=self.atol, check=self.check)
            for k, v in self.extra_metadata.items():
                p = new.metadata_props.add()
                p.key, p.value = k, v
            io.save_model(new, self.out)
        self.contract = contract
        return self.out


def adopt_model(model: Any, *, where: str = "model", state_pairs: Any = None, sample_rate_hz: int, hop_samples: int,
                delay_samples: int = 0, name: str = "model", batch_axes: dict | None = None,
                init: dict | None = None, kinds: dict | None = None, atol: float = ADOPT_ATOL,
                check: Callable | None = None) -> tuple[Any, StreamContract]:
    """Adopt ``model`` in memory and prove it (module doc); nothing is written.

    Args:
        model (onnx.ModelProto): The already-streaming graph (weights inline).
        where (str): Name for messages.
        state_pairs, sample_rate_hz, hop_samples, delay_samples, batch_axes, init, kinds, atol, check: see
            :class:`AdoptedOnnxFromOnnx`.
        name (str): Model name.
    Returns:
        tuple[onnx.ModelProto, StreamContract]: the adopted model (contract and ``cosyedge.adopted`` in its
        metadata) and its contract (``proof`` filled).
    Raises:
        UsageError, ArtifactError, AccuracyError: see :class:`AdoptedOnnxFromOnnx`.
    """
    hop = int(hop_samples)
    taken = [t for t in [i.name for i in model.graph.input] + [o.name for o in model.graph.output]
             if t.startswith(("state_in.", "state_out."))]
    meta = {p.key for p in model.metadata_props}
    if taken and "cosyedge.state" in meta:
        raise UsageError(f"{where} is already a cosyedge stream model (has '{taken[0]}'): nothing to adopt")
    pairs = find_state_pairs(model, where, given=parse_state_pairs(state_pairs))
    g = _inspect(model, pairs, hop, dict(batch_axes or {}), dict(init or {}), dict(kinds or {}), where)
    states = [s for s, _c in g.states]
    LOG.info("%s: audio '%s', outputs %s, %d state pair(s): %s", where, g.audio, g.outs, len(states),
             ", ".join(f"{s.input}={s.output}" for s in states))
    try:
        ref_sess = proof.session(model)
    except Exception as err:
        raise ArtifactError(f"ONNX Runtime cannot load {where} ({first_line(err)})") from None
    # real shapes and zero-state check: one chunk at batch 1
    ort_in = {i.name: i for i in ref_sess.get_inputs()}
    for s in states:
        s.dtype = _ORT_TO_NP.get(ort_in[s.input].type, "float32")
        s.shape = tuple(1 if not isinstance(d, int) or d <= 0 else d for d in s.shape)
    x = proof.demo_audio_rows(sample_rate_hz, hop * max(12, -(-int(PROOF_SECONDS * sample_rate_hz) // hop)))
    x = x[..., : hop * (x.shape[-1] // (3 * hop)) * 3]
    init_vals = [(s.input, s.output, np.full(s.shape, s.init, dtype=s.dtype)) for s in states]
    first = proof.run_state_loop(ref_sess, g.audio, x[..., :hop], hop, init_vals, g.outs + [s.output for s in states])
    model, per_call = canon.per_call_outputs_to_frames(model, {o: first[o].ndim for o in g.outs})
    if per_call:  # one value per call (a VAD's probability): (N, C, 1) per hop, so the graph runs hop by hop
        LOG.info("%s: outputs %s give one value per call: streamed as features, one frame per hop of %d samples",
                 where, per_call, hop)
        g.hop_fixed = True
        ref_sess = proof.session(model)
        first = proof.run_state_loop(ref_sess, g.audio, x[..., :hop], hop, init_vals,
                                     g.outs + [s.output for s in states])
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
    out_frames, out_channels = {}, {}
    for o in g.outs:
        if first[o].ndim != 3:
            raise UsageError(f"{where}: output '{o}' has shape {list(first[o].shape)}; adopt streams outputs (N, C, T)")
        out_frames[o] = int(first[o].shape[-1])
        out_channels[o] = int(first[o].shape[1])
    # the reference: the original graph, hop by hop, with its own state loop
    ref = proof.run_state_loop(ref_sess, g.audio, x, hop, init_vals, g.outs)
    dynamic, patched, why_fixed = True, 0, ""
    alternatives = [(k, c) for k, (_s, cands) in enumerate(g.states) for c in cands[1:]]
    tried = [None] + alternatives
    adopted = None
    for alt in tried:
        if alt is not None:
            states[alt[0]].batch_axis = alt[1]
        if any(s.batch_axis is None for s in states):
            why_fixed = f"state '{next(s.input for s in states if s.batch_axis is None)}' has no axis of size 1"
            break
        dyn, patched = _dynamic_batch(model, g.audio, g.outs, states)
        cand = _rename_and_wrap(dyn, g.audio, g.outs, states, dynamic=True, scan=g.hop_fixed, hop=hop,
                                out_frames=out_frames)
        why_fixed = _batch_test(cand, g, states, out_frames, x, hop, atol)
        if not why_fixed:
            adopted = cand
            break
        if alt is not None:
            states[alt[0]].batch_axis = g.states[alt[0]][1][0]
    mode, c_states = "dynamic", states
    if adopted is None:  # batch by a Scan over streams: each stream runs the batch-1 graph
        for s, cands in g.states:
            s.batch_axis = cands[0]
        shapes = {g.audio: (1, 1, hop if g.hop_fixed else -1),
                  **{o: (1, out_channels[o], out_frames[o] if g.hop_fixed else -1) for o in g.outs}}
        try:
            streamed, st_states = scan_over_streams(model, shapes, states)
            cand = _rename_and_wrap(streamed, g.audio, g.outs, st_states, dynamic=True, scan=g.hop_fixed, hop=hop,
                                    out_frames=out_frames)
            why_scan = _batch_test(cand, g, st_states, out_frames, x, hop, atol)
        except Exception as err:  # graphsurgeon / ONNX errors: keep the batch-1 fallback below
            why_scan = f"the Scan over streams fails ({first_line(err)})"
        if not why_scan:
            LOG.info("%s: no dynamic batch (%s): batched by a Scan over streams (each stream runs the batch-1 graph; "
                     "states stored (N, *batch-1 shape)); batch 2 == two batch-1 streams", where, why_fixed)
            adopted, mode, c_states = cand, "scan over streams", st_states
        else:
            why_fixed = f"{why_fixed}; {why_scan}"
    if adopted is None:
        dynamic, mode = False, "fixed 1"
        adopted = _rename_and_wrap(model, g.audio, g.outs, states, dynamic=False, scan=g.hop_fixed, hop=hop,
                                   out_frames=out_frames)
        LOG.warning("%s: adopted for batch 1 only (%s): cosyedge run and OrtStreamSession work; StreamPool and "
                    "Triton refuse it (a fixed batch of 1)", where, why_fixed)
    contract = _contract(g, c_states, out_frames, out_channels, dynamic=dynamic, sample_rate_hz=sample_rate_hz, hop=hop,
                         delay_samples=delay_samples, name=name)
    contract.write_to_onnx(adopted)
    adopted = io.finalize_model(adopted, where=where)
    contract.proof = proof.prove_against_loop(adopted, contract, g.audio, g.outs, [(s.input, s.output) for s in states],
                                              ref, x, hop, atol, where)
    if check is not None:
        contract.proof.update(check(adopted, contract) or {})
    contract.write_to_onnx(adopted)
    record = {"states": [{"input": s.input, "output": s.output, "state_in": c.input, "state_out": c.output,
                          "original_shape": list(s.shape),
                          "batch_axis": s.batch_axis if mode != "scan over streams" else "stream",
                          "transposed": mode == "dynamic" and s.batch_axis not in (None, 0)}
                         for s, c in zip(states, contract.states)],
              "batch": mode, "why_fixed": why_fixed if mode != "dynamic" else "",
              "reshapes_made_dynamic": patched if mode == "dynamic" else 0, "scan_over_hops": g.hop_fixed}
    keep = [(p.key, p.value) for p in adopted.metadata_props if p.key != ADOPTED_META_KEY]
    del adopted.metadata_props[:]
    for k, v in keep + [(ADOPTED_META_KEY, json.dumps(record, sort_keys=True))]:
        p = adopted.metadata_props.add()
        p.key, p.value = k, v
    LOG.info("adopted: %d states (%s), batch %s, %s; proof: max abs error %.3g vs the graph's own state loop",
             len(states), ", ".join(f"{c.input}{c.shape}" for c in contract.states),
             mode, "Scan over hops" if g.hop_fixed else "dynamic time axis",
             contract.proof["max_abs"])
    return adopted, contract


def _contract(g: _Graph, states: list[AdoptedState], out_frames: dict, out_channels: dict, *, dynamic: bool, sample_rate_hz: int,
              hop: int, delay_samples: int, name: str) -> StreamContract:
    from cosyedge.surgery.streamify import STATE_IN_PREFIX, STATE_OUT_PREFIX

    width = max(2, len(str(len(states) - 1)))
    b = BATCH_DIM  # a batch-1 graph declares 1 there: StreamPool and Triton refuse it, OrtStreamSession runs it
    specs = []
    for k, s in enumerate(states):
        shape = [b] + [int(d) for i, d in enumerate(s.shape) if i != s.batch_axis]
        specs.append(StateSpec(f"{STATE_IN_PREFIX}{k:0{width}d}", f"{STATE_OUT_PREFIX}{k:0{width}d}",
                               shape, s.dtype, f"adopted:{s.input}", float(s.init), s.kind))
    audio_io = StreamIO(g.audio, [b, 1, TIME_DIM], "float32", 2, hop, 0, "audio")
    outs = []
    for o in g.outs:
        f = out_frames[o]
        kind = "audio" if f == hop and out_channels[o] == 1 else "features"
        outs.append(StreamIO(o, [b, out_channels[o], TIME_DIM], "float32", 2, f, 0, kind))
    # the main output: the first waveform one, else the first (a VAD: its probability, one frame per hop)
    audio_out = next((o.name for o in outs if o.kind == "audio"), outs[0].name)
    return StreamContract(input=g.audio, output=audio_out, sample_rate_hz=int(sample_rate_hz), hop_samples=hop,
                          total_stride=hop, delay_samples=int(delay_samples), states=specs, name=name,
                          inputs=[audio_io], outputs=outs)


def adopt(in_onnx: Any, out_onnx: str | Path, *, state_pairs: Any = None, sample_rate_hz: int, hop_samples: int,
          delay_samples: int = 0, name: str | None = None, batch_axes: dict | None = None, init: dict | None = None,
          kinds: dict | None = None, atol: float = ADOPT_ATOL, check: Callable | None = None,
          extra_metadata: dict | None = None) -> StreamContract:
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
    Returns:
        StreamContract: the written contract (``proof`` filled; original names in ``cosyedge.adopted``).
    Raises:
        UsageError, ArtifactError, AccuracyError: see :class:`AdoptedOnnxFromOnnx`.
    """
    stage = AdoptedOnnxFromOnnx(in_onnx, out_onnx, state_pairs=state_pairs, sample_rate_hz=sample_rate_hz,
                                hop_samples=hop_samples, delay_samples=delay_samples, name=name,
                                batch_axes=batch_axes, init=init, kinds=kinds, atol=atol, check=check,
                                extra_metadata=extra_metadata)
    stage()
    return stage.contract
