"""FP16: a streaming FP32 ONNX -> an ONNX with FP16 compute and FP32 inputs, outputs and states.

The conversion uses ONNX Runtime's converter ``onnxruntime.transformers.float16.convert_float_to_float16``
(the maintained copy of onnxconverter-common's ``float16`` module; ships with onnxruntime, so no extra
dependency) with ``keep_io_types=True``: the audio input/output and every ``state_in.*``/``state_out.*``
stay float32, so the stream contract (state dtypes ``float32``) and every runtime keep working unchanged.

Nodes kept in FP32 (:func:`fp32_node_plan`, each with its reason, recorded in the result):

* overflow-prone op types (:data:`KEEP_FP32_OPS`: Log, Exp, Pow, Sqrt, Reciprocal, reductions,
  normalisation layers, ...) plus the converter's own default block list;
* the elementwise chain that computes their input, back to the nearest Conv/Gemm/MatMul: the bin power
  ``re^2 + im^2`` of a full-scale signal exceeds 65504 (the FP16 maximum) before the Log sees it, and
  ``re^2`` of quiet bins underflows to 0 in FP16;
* the elementwise chain right after them up to the next Conv/Gemm/MatMul (the feature normalisation:
  a log power of about -14 rounded to FP16 loses 3 significant bits);
* index-picking ops (:data:`DISCRETE_OPS`: ArgMax, ArgMin, TopK) and everything computing their input back to
  the nearest Conv, MatMul and Gemm included (a pitch search's argmax over an autocorrelation of bin powers:
  FP16 flips near-ties, and the powers overflow it at full scale);
* the boundary layers: the first Conv fed by the audio input and the last Conv before the audio output
  (1-channel analysis/synthesis filterbanks, where FP16 rounding of the signal itself is audible), with
  their ``Concat(state, x)`` and state ``Slice`` nodes;
* Convs that only copy samples or frames (one-hot weights, :func:`cosyedge.precision.qdq.is_copy_conv`, e.g. the
  pitch comb's framing taps), with their state ``Concat`` and ``Slice``: FP16 would round the audio they carry
  from chunk to chunk and save nothing;
* streamify's bookkeeping: every node computed from the tick counter state (pre-roll masks, recurrent start
  gates) and the recurrent ops (GRU, LSTM, RNN: their state carries FP16 rounding through the whole stream);
* any node named in ``exclude``.

The converter leaves FP16 round trips (``Cast(to=FP16) -> Cast(to=FP32)``) on edges between two FP32
nodes; :func:`strip_fp16_round_trips` removes them, so FP32 regions really compute in FP32 (measured on the
reference model: with every node blocked the converter's output was only 53.6 dB from FP32; after the
strip it is bit-exact).

Measured on the reference model and ``tests/data/speech_librivox_0890.wav`` (ONNX Runtime 1.32 CPU,
chunk 160): plain conversion 46.3 dB output SNR vs FP32 streaming; with the FP32 plan above 80.9 dB.
ONNX Runtime's CPU provider has no FP16 Conv kernel on x86: it inserts Casts and runs those Convs in FP32
(``InsertedPrecisionFreeCast_*`` nodes in the optimised graph), so on CPU the FP16 model mostly
measures FP16 *storage* rounding; TensorRT runs the FP16 regions in FP16.

A model whose compute sits in ``Scan`` bodies (an adopted model: DTLN, GTCRN, Silero VAD; Scan in Scan for a
batch-1 graph) is converted body by body (:mod:`cosyedge.precision.bodies`): each leaf body as a model of its own
with the rules above, its inputs and outputs (the Scan's states, audio slices and outputs) kept FP32 so the Casts sit
at the body's boundary and the states cross hops in FP32; measured on the demo recording: GTCRN 59.1 dB, DTLN
56.9 dB output SNR vs FP32, Silero VAD probabilities within 0.0023 (docs/bench/bench_adopted_precision.json).

After conversion every output (audio and every state) is scanned for non-finite values at chunk sizes
1x, 3x and 10x hop on real speech, silence and a full-scale signal (:func:`scan_nonfinite`), and the
output SNR vs the FP32 model is measured on real speech (:func:`output_snr_db`).

Sources: onnxconverter-common / onnxruntime ``float16.py`` (``convert_float_to_float16``:
``keep_io_types``, ``op_block_list``, ``node_block_list``); NVIDIA TensorRT developer guide, "Reduced
Precision" (keep overflow-prone layers in FP32).

The non-finite scan is :mod:`cosyedge.precision.fp16_scan`; the output SNR vs FP32 is the one of every build,
:mod:`cosyedge.precision.output_snr` (both re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    SourceModel,
    StreamContract,
    atomic_output,
    check_not_input,
    check_writable,
    load_onnx,
    with_portable_ir,
)
from cosyedge.errors import AccuracyError, ArtifactError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.precision.fp16_scan import (CHUNK_MULTIPLES, FP16_HINT, default_scan_signals,  # noqa: F401
                                          scan_nonfinite, scan_partners)
from cosyedge.precision.output_snr import _stream_output, output_snr_db  # noqa: F401 - re-exported
from cosyedge.precision.qdq import is_copy_conv
from cosyedge.artifacts import BOOKKEEPING

onnx = lazy_import("onnx")

PRECISION_KEY = "cosyedge.precision"
"""str: ONNX ``metadata_props`` key recording the precision (``fp16``)."""

KEEP_FP32_OPS = (
    "Log", "Exp", "Pow", "Sqrt", "Reciprocal", "Softplus", "Erf",
    "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "Softmax", "LogSoftmax",
    "LayerNormalization", "InstanceNormalization", "GroupNormalization", "BatchNormalization",
    "LpNormalization", "MeanVarianceNormalization", "CumSum", "STFT", "DFT",
)
"""tuple[str]: overflow/underflow-prone op types kept in FP32 (sums of squares, logs, norms)."""

RECURRENT_OPS = ("GRU", "LSTM", "RNN")
"""tuple[str]: kept in FP32: their state runs for the whole stream, and FP16 rounding of it accumulates."""

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""tuple[str]: ops that end the FP32 propagation around a kept op (they start a new FP16 region)."""

DISCRETE_OPS = ("ArgMax", "ArgMin", "TopK")
"""tuple[str]: ops that pick an index; kept in FP32 with their whole input chain back to the nearest Conv,
Gemm and MatMul included (FP16 rounding flips near-ties, and e.g. the reference model's pitch search
takes the argmax of an autocorrelation of bin powers that overflow FP16 at full scale)."""


TARGET_SNR_DB = 50.0
"""float: minimum output SNR (dB) of the FP16 model vs FP32 streaming on real speech."""

_FLOAT = 1
_FLOAT16 = 10


def _name_nodes(model: Any) -> None:
    """Give every unnamed node a unique name (node_block_list matches names)."""
    used = {n.name for n in model.graph.node if n.name}
    for i, n in enumerate(model.graph.node):
        if not n.name:
            name = f"{n.op_type}_{i}"
            while name in used:
                name += "_"
            n.name = name
            used.add(name)


def fp32_node_plan(model: Any, contract: StreamContract, keep_ops: Iterable[str] = KEEP_FP32_OPS,
                   exclude: Iterable[str] = ()) -> dict[str, str]:
    """Decide which nodes stay FP32 (see the module docstring for the rules).

    Args:
        model (onnx.ModelProto): Streaming FP32 model; every node must have a name.
        contract (StreamContract): Its stream contract (audio input/output names, states).
        keep_ops (Iterable[str]): Overflow-prone op types kept in FP32.
        exclude (Iterable[str]): Node names kept in FP32 on request.
    Returns:
        dict[str, str]: node name -> reason (``"op Log"``, ``"input of Log"``, ``"after Log"``, ``"op ArgMax"``,
        ``"input of ArgMax"``, ``"first conv"``, ``"last conv"``, ``"copy conv"``, ``"excluded"``, ``"positions"``: computed
        from a position counter alone, such as RoPE angles, whose integers float16 holds exactly only up to 2048), in
        graph order.
    Raises:
        UsageError: a name in ``exclude`` is not a node of the model.
    """
    g = model.graph
    nodes = list(g.node)
    names = {n.name for n in nodes}
    missing = [e for e in exclude if e not in names]
    if missing:
        close = sorted(names, key=lambda s: -sum(a == b for a, b in zip(s, missing[0])))[:3]
        raise UsageError(f"--exclude {missing[0]!r} is not a node of the model (node names look like {close})")
    producer = {o: n for n in nodes for o in n.output}
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    state_in = {s.input for s in contract.states}
    keep_ops = set(keep_ops)
    plan: dict[str, str] = {}

    def mark(n, why: str) -> None:
        plan.setdefault(n.name, why)

    def mark_inputs(n, stop_ops) -> None:
        """Mark what computes ``n``'s inputs, walking back until ``stop_ops``, graph inputs or marked nodes."""
        stack = [i for i in n.input if i in producer]
        while stack:
            p = producer[stack.pop()]
            if p.op_type in stop_ops or p.name in plan:
                continue
            mark(p, f"input of {n.op_type}")
            stack.extend(i for i in p.input if i in producer)

    for n in nodes:
        if n.op_type in DISCRETE_OPS:
            mark(n, f"op {n.op_type}")
            mark_inputs(n, ("Conv", "ConvTranspose"))  # through MatMul/Gemm, back to the nearest Conv
        if n.op_type in keep_ops:
            mark(n, f"op {n.op_type}")
            mark_inputs(n, WEIGHTED_OPS)  # the elementwise chain computing its input
            # forward: the elementwise chain after it, up to the next weighted op
            stack = list(n.output)
            while stack:
                for c in consumers.get(stack.pop(), []):
                    if c.op_type in WEIGHTED_OPS or c.name in plan:
                        continue
                    mark(c, f"after {n.op_type}")
                    stack.extend(c.output)

    # positions: what is computed from a position counter alone (angles of RoPE, sinusoidal encodings, table rows) stays
    # FP32 up to where it meets the data; float16 holds integers exactly only up to 2048 (20 s at 10 ms frames)
    pos = {s.input for s in contract.states if s.kind == "position"}
    if pos:
        inits = {i.name for i in g.initializer}
        data = {i.name for i in g.input if i.name not in pos and i.name not in inits}
        cone = set(pos)
        for n in nodes:
            if n.op_type in ("Shape", "Size"):
                continue
            ins = [i for i in n.input if i]
            if any(i in data for i in ins):
                data.update(n.output)
            elif any(i in cone for i in ins):
                mark(n, "positions")
                cone.update(n.output)

    def conv_with_state(conv, why: str) -> None:
        mark(conv, why)
        for i in conv.input[:1]:
            p = producer.get(i)
            if p is not None and p.op_type == "Concat" and any(x in state_in for x in p.input):
                mark(p, why + " state concat")
                for c in consumers.get(p.output[0], []):
                    if c.op_type == "Slice":
                        mark(c, why + " state slice")

    # first conv: walk forward from the audio input (every streaming input) to the first weighted op
    seen, stack = set(), list(dict.fromkeys([contract.input] + [i.name for i in contract.stream_inputs]))
    while stack:
        for c in consumers.get(stack.pop(), []):
            if c.name in seen:
                continue
            seen.add(c.name)
            if c.op_type in WEIGHTED_OPS:
                conv_with_state(c, "first conv")
            else:
                stack.extend(c.output)
    # last conv: walk backward from the audio output to the last weighted op
    seen, stack = set(), [contract.output]
    while stack:
        p = producer.get(stack.pop())
        if p is None or p.name in seen:
            continue
        seen.add(p.name)
        if p.op_type in WEIGHTED_OPS:
            conv_with_state(p, "last conv")
        else:
            mark(p, "after last conv")
            stack.extend(i for i in p.input if i in producer)
    # copies (one-hot weights): the audio they move stays FP32, in their state too
    inits = {t.name: t for t in g.initializer}
    for n in nodes:
        if is_copy_conv(n, inits):
            conv_with_state(n, "copy conv")
    # stream bookkeeping (streamify's tick counter: pre-roll masks, recurrent start gates): positions and
    # counts in FP16 would round (2049 ticks is not an FP16 number), and the gated ops mix them with data
    for n in nodes:
        if BOOKKEEPING in n.name:
            mark(n, "stream counter")
        if n.op_type in RECURRENT_OPS:
            mark(n, f"op {n.op_type}")
    for e in exclude:
        plan[e] = "excluded"
    order = {n.name: i for i, n in enumerate(nodes)}
    return dict(sorted(plan.items(), key=lambda kv: order[kv[0]]))


def strip_fp16_round_trips(model: Any) -> int:
    """Remove ``Cast(to=FP16) -> Cast(to=FP32)`` round trips of FP32 tensors, in place.

    The float16 converter types every edge FP16 and wraps FP32 (blocked) nodes in Casts, so an edge
    between two FP32 nodes is rounded to FP16 and back. Here consumers of the FP32 re-cast read the
    original FP32 tensor instead; a re-cast that is a graph output becomes an ``Identity``; a
    ``Cast(to=FP16)`` left without consumers is deleted.

    Args:
        model (onnx.ModelProto): Output of ``convert_float_to_float16``; modified in place.
    Returns:
        int: number of Cast nodes removed or turned into Identity.
    """
    g = model.graph
    nodes = list(g.node)  # one Python object per node for the whole pass: removal is by index, not id()
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(nodes):
        for i in n.input:
            consumers.setdefault(i, []).append(k)
    outputs = {o.name for o in g.output}

    def cast_to(n) -> int | None:
        if n.op_type != "Cast":
            return None
        return next((a.i for a in n.attribute if a.name == "to"), None)

    remove: set[int] = set()
    turned: set[int] = set()  # re-casts turned into Identity (graph outputs), not the model's own Identities
    rename: dict[str, str] = {}
    changed = 0
    for ka, a in enumerate(nodes):
        if cast_to(a) != _FLOAT16:
            continue
        src = a.input[0]
        users = consumers.get(a.output[0], [])
        for kb in users:
            b = nodes[kb]
            if cast_to(b) != _FLOAT:
                continue
            changed += 1
            if b.output[0] in outputs:
                b.op_type = "Identity"
                del b.attribute[:]
                b.input[0] = src
                turned.add(kb)
            else:
                rename[b.output[0]] = src
                remove.add(kb)
        if a.output[0] not in outputs and all(kb in remove or kb in turned for kb in users):
            remove.add(ka)
            changed += 1
    # the FP16 source of a round trip may itself be FP32 only after an earlier rename: resolve chains
    def resolve(name: str) -> str:
        while name in rename:
            name = rename[name]
        return name

    keep = [n for k, n in enumerate(nodes) if k not in remove]
    for n in keep:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = resolve(i)
    del g.node[:]
    g.node.extend(keep)
    vi = [v for v in g.value_info if v.name not in rename]
    del g.value_info[:]
    g.value_info.extend(vi)
    return changed


def fp16_model(model: Any, contract: StreamContract, *, exclude: Iterable[str] = (),
               keep_ops: Iterable[str] = KEEP_FP32_OPS) -> tuple[Any, dict[str, str]]:
    """Convert a streaming FP32 ``onnx.ModelProto`` to FP16 compute with FP32 I/O and states.

    Args:
        model (onnx.ModelProto): Streaming FP32 model (copied, not modified).
        contract (StreamContract): Its stream contract.
        exclude (Iterable[str]): Extra node names kept in FP32.
        keep_ops (Iterable[str]): Op types kept in FP32 (default :data:`KEEP_FP32_OPS`).
    Returns:
        tuple[onnx.ModelProto, dict[str, str]]: the converted model (contract and other metadata
        preserved, ``cosyedge.precision = fp16``) and the FP32 node plan (name -> reason).
    Raises:
        UsageError: unknown node in ``exclude``.
        ArtifactError: the converter fails on this model.
        DependencyError: onnxruntime (its ``transformers.float16`` module) is missing.
    """
    from cosyedge._lazy import require

    require("onnxruntime")
    from cosyedge.precision.bodies import has_subgraphs

    m = onnx.ModelProto()
    m.CopyFrom(model)
    meta = [(p.key, p.value) for p in m.metadata_props]
    if has_subgraphs(m):
        out, plan = _fp16_bodies(m, contract, exclude=exclude, keep_ops=keep_ops)
    else:
        _name_nodes(m)
        plan = fp32_node_plan(m, contract, keep_ops=keep_ops, exclude=exclude)
        out = _convert(m, plan, keep_ops)
    del out.metadata_props[:]
    for k, v in meta:
        if k != PRECISION_KEY:
            p = out.metadata_props.add()
            p.key, p.value = k, v
    p = out.metadata_props.add()
    p.key, p.value = PRECISION_KEY, "fp16"
    return out, plan


def _convert(m: Any, plan: dict[str, str], keep_ops: Iterable[str]) -> Any:
    """``m`` (onnx.ModelProto, one graph) converted to FP16 with FP32 I/O, the ``plan``'s nodes and ``keep_ops``
    blocked, FP16 round trips stripped (:func:`strip_fp16_round_trips`), nodes in topological order.

    Raises:
        ArtifactError: the converter fails on this model.
    """
    from onnxruntime.transformers import float16

    try:
        out = float16.convert_float_to_float16(
            m, keep_io_types=True,
            op_block_list=sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(keep_ops)),
            node_block_list=list(plan),
        )
    except Exception as err:  # the converter raises ValueError/KeyError/onnx errors
        raise ArtifactError(f"FP16 conversion failed: {first_line(err)}") from None
    strip_fp16_round_trips(out)
    from cosyedge.precision.bodies import toposort

    # the converter appends its Casts at the end; ONNX requires producers first (the checker refused the flat FP16
    # engines: "Nodes in a graph must be topologically sorted"); ONNX Runtime sorts for itself, so they ran
    toposort(out.graph)
    return out


def _fp16_bodies(m: Any, contract: StreamContract, *, exclude: Iterable[str],
                 keep_ops: Iterable[str]) -> tuple[Any, dict[str, str]]:
    """FP16 inside the Scan bodies of ``m`` (an adopted model: the compute sits in a Scan over hops, and for a
    batch-1 graph a Scan over streams in it), in place; returns ``(m, plan)``.

    Each leaf body (:func:`cosyedge.precision.bodies.leaf_bodies`) is converted as a model of its own with the
    flat rules: its :func:`fp32_node_plan` is made with the body's roles (the body input carrying the audio, the
    body output carrying ``contract.output``, the body inputs/outputs carrying the states), and its inputs and
    outputs stay FP32 (``keep_io_types``), so the Scan's state variables and scan inputs/outputs keep their
    dtypes, the states cross hops in FP32 and the Casts sit at the body's boundary. The graphs around the bodies
    (adopt's Reshape/Identity plumbing) are left FP32.

    Raises:
        UsageError: a name in ``exclude`` is in no body.
        ArtifactError: the converter fails on a body.
    """
    from cosyedge.precision.bodies import body_model, leaf_bodies, put_body

    exclude = list(exclude)
    bodies = leaf_bodies(m, contract)
    names = {n.name for b in bodies for n in b.graph.node}
    missing = [e for e in exclude if e not in names]
    if missing:
        close = sorted(names, key=lambda s: -sum(a == b for a, b in zip(s, missing[0])))[:3]
        raise UsageError(f"--exclude {missing[0]!r} is not a node of the model (node names look like {close})")
    plan: dict[str, str] = {}
    for b in bodies:
        bm = body_model(m, b.graph)
        _name_nodes(bm)
        own = {n.name for n in bm.graph.node}
        bplan = fp32_node_plan(bm, b.contract, keep_ops=keep_ops, exclude=[e for e in exclude if e in own])
        put_body(b.attr, _convert(bm, bplan, keep_ops).graph, b.graph)
        plan.update(bplan)
    return m, plan


# ---------------------------------------------------------------------------------------------- stage
def _has_fp16(graph: Any) -> bool:
    """bool: ``graph`` (onnx.GraphProto) or a Scan body in it holds an FP16 initializer or a Cast to FP16."""
    import onnx

    from cosyedge.precision.bodies import iter_graphs

    f16 = onnx.TensorProto.FLOAT16
    for g in iter_graphs(graph):
        if any(t.data_type == f16 for t in g.initializer):
            return True
        if any(n.op_type == "Cast" and any(a.name == "to" and a.i == f16 for a in n.attribute) for n in g.node):
            return True
    return False


def fp16_onnx(fp32_stream_onnx: Any, out_path: str | Path, *, exclude: Iterable[str] = (),
              keep_ops: Iterable[str] = KEEP_FP32_OPS, check: bool = True, min_snr_db: float | None = None,
              speech: np.ndarray | None = None) -> dict:
    """Write the FP16 version of a streaming FP32 ONNX and check it.

    Args:
        fp32_stream_onnx (str | Path | Stage | SourceModel): Streaming FP32 ONNX (``cosyedge streamify``
            output); a SourceModel's contract and SHA-256 are reused (what a build passes).
        out_path (str | Path): Destination ``.onnx`` (written atomically).
        exclude (Iterable[str]): Node names kept in FP32.
        keep_ops (Iterable[str]): Op types kept in FP32 (default :data:`KEEP_FP32_OPS`).
        check (bool): Scan for non-finite outputs (1x/3x/10x hop; speech, silence, full scale) and
            measure the output SNR vs FP32 on speech. Defaults to True.
        min_snr_db (float | None): Raise :class:`AccuracyError` below this SNR (dB); None = report only.
        speech (np.ndarray | None): float32 (T,) speech at the model rate for the checks; defaults to
            the bundled demo recording.
    Returns:
        dict: manifest fields: ``precision`` (``"fp16"``), ``converter``, ``fp32_nodes`` (name -> reason),
        ``snr_db_vs_fp32`` (float | None), ``scan`` (rows of :func:`scan_nonfinite`), ``parent_sha256``,
        ``seconds``.
    Raises:
        ArtifactError: input missing/corrupt, no cosyedge state metadata, conversion failure, output
            not writable.
        AccuracyError: a non-finite output in the scan, or SNR below ``min_snr_db``.
        UsageError: unknown node in ``exclude``; nothing would run in FP16 (the compute sits in If/Loop bodies,
            which the conversion does not enter; Scan bodies are converted, :func:`fp16_model`); ``check`` on a model with an input that is not
            a waveform (the scan feeds audio; :data:`FP16_HINT`). A model with several waveform inputs is scanned
            with :func:`scan_partners` on the other inputs.
    """
    import onnxruntime

    t0 = time.perf_counter()
    source = SourceModel.of(fp32_stream_onnx)
    src = source.path
    out_path = check_writable(out_path)
    check_not_input(src, out_path)
    contract = source.contract
    contract.require_streaming(src)
    model = load_onnx(src)
    with LOG.stage(f"fp16 {src.name} -> {out_path}"):
        m16, plan = fp16_model(model, contract, exclude=exclude, keep_ops=keep_ops)
        subgraphs = sorted({n.op_type for n in model.graph.node
                            if any(a.type == onnx.AttributeProto.GRAPH for a in n.attribute)})
        if subgraphs and not _has_fp16(m16.graph):  # e.g. compute only in If/Loop bodies (Scan bodies are entered)
            raise UsageError(f"fp16: nothing in {src} would run in FP16: its compute sits inside "
                             f"{'/'.join(subgraphs)} bodies and the FP16 stage enters Scan bodies only (not If/Loop, "
                             f"nor bodies reading outer tensors) or keeps all of it FP32; an 'fp16' engine would be "
                             f"the FP32 model under another label (build it without --fp16)")
        with atomic_output(out_path) as tmp:
            onnx.save(with_portable_ir(m16), str(tmp))  # IR its opsets need: older readers load it
            result = {
                "precision": "fp16",
                "converter": f"onnxruntime.transformers.float16 (onnxruntime {onnxruntime.__version__})",
                "fp32_nodes": plan,
                "keep_fp32_ops": sorted(set(keep_ops)),
                "exclude": list(exclude),
                "parent_sha256": source.sha256,
                "snr_db_vs_fp32": None,
                "scan": [],
            }
            if check:
                from cosyedge.runtime.feeds import require_waveform_inputs

                require_waveform_inputs(contract, str(src), "the FP16 scan", FP16_HINT)
                signals = default_scan_signals(contract.sample_rate_hz, speech=speech)
                rows = scan_nonfinite(tmp, signals)
                result["scan"] = rows
                bad = [r for r in rows if not r["finite"]]
                if bad:
                    r = bad[0]
                    name, chunk = next(iter(r["bad_outputs"].items()))
                    raise AccuracyError(
                        f"FP16 model gives NaN/Inf in '{name}' on {r['signal']} at chunk {r['chunk_samples']} "
                        f"(chunk #{chunk}); keep the offending nodes in FP32 with --exclude NODE"
                    )
                snr = output_snr_db(source, tmp, signals["speech"],
                                    partners=scan_partners(contract, signals)["speech"] or None)
                result["snr_db_vs_fp32"] = snr
                LOG.info("fp16: %d node(s) kept in FP32, output SNR %.1f dB vs FP32 on speech, all outputs "
                         "finite (%d scans)", len(plan), snr, len(rows))
                if min_snr_db is not None and snr < min_snr_db:
                    raise AccuracyError(f"FP16 output SNR {snr:.1f} dB vs FP32 is below {min_snr_db:g} dB; "
                                        f"keep sensitive nodes in FP32 with --exclude NODE")
    result["seconds"] = time.perf_counter() - t0
    return result


__all__ = [
    "KEEP_FP32_OPS",
    "TARGET_SNR_DB",
    "default_scan_signals",
    "fp16_model",
    "fp16_onnx",
    "fp32_node_plan",
    "output_snr_db",
    "scan_nonfinite",
    "strip_fp16_round_trips",
]
