"""Layer bisection (``cosyedge compare --mark-all``): which tensor does the error start at?

Both models are loaded with every intermediate tensor marked as an output (Polygraphy
``ModifyOutputs(model, outputs=constants.MARK_ALL)``) and streamed **teacher-forced** over the first
``seconds`` of a real utterance: the candidate gets the reference's recorded states every chunk, so
each tensor's error is that of one step, not an accumulation. Only tensors present in both graphs, with
a floating-point type, are compared, by name (Q/DQ and FP16 casts add tensors of their own: those are
skipped; a Q/DQ graph keeps the original tensor names around the pairs it inserts).

For every compared tensor ``t`` (stacked over chunks): ``snr(t)`` = SNR of the candidate's values against
the reference's (dB, :func:`cosyedge.compare.core.snr_db`, capped at 150 dB = identical), and

``snr_in(t)`` = the lowest *effective* SNR among the inputs of the node producing ``t`` in the reference
graph, where the effective SNR of a compared tensor is its ``snr``, of a graph input 150 dB (both models
are fed the same values), and of a tensor missing from the candidate (renamed by a Cast or Q/DQ) the
lowest effective SNR among its own producer's inputs (looked through); initializers (weights) do not
count, so a node whose only changed input is its weight gets 150 dB,

``drop(t) = snr_in(t) - snr(t)``: the error this one node added, in dB.

**The error jumps at** the first tensor, in the reference graph's topological order, with
``drop(t) >= jump_db`` (default 20 dB) **and** ``snr(t) < floor_db`` (default 40 dB: tensors still above
it are accurate enough to be no cause). That tensor, its producing node and op type are reported, with
the full per-tensor table (``tensors``) and the largest drops (``top_drops``). FP16 rounding alone gives
about 60-75 dB per tensor (above the floor); an INT8 Q/DQ pair about 30-45 dB (so the first quantized
tensor is named when comparing INT8 with FP32; compare two INT8 builds to find a bad scale).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.artifacts import load_onnx
from cosyedge.compare.core import SNR_CAP_DB, ReferenceCache, stream, tensor_stats
from cosyedge.compare.models import CompareModel, check_compatible, reraise_runner_error
from cosyedge.compare.utterances import Utterance
from cosyedge.errors import UsageError
from cosyedge.log import LOG

JUMP_DB = 20.0
"""float: minimum SNR drop (dB) across one node for a jump."""

FLOOR_DB = 40.0
"""float: a tensor at or above this SNR (dB) is never the jump."""

_FLOAT_TYPES = {1, 10, 11, 16}  # onnx TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _graph_tables(model: Any) -> tuple[list[str], dict, set]:
    """(float tensor names in topological order of production, {tensor: (node name, op, inputs)}, graph inputs)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        types[v.name] = v.type.tensor_type.elem_type
    order, producer = [], {}
    for node in model.graph.node:
        for out in node.output:
            if out and types.get(out) in _FLOAT_TYPES:
                order.append(out)
                producer[out] = (node.name, node.op_type, [i for i in node.input if i])
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input if i.name not in inits}
    return order, producer, graph_inputs


def _all_producers(model: Any) -> dict:
    """{tensor: [input names of the node producing it]} for every node output (any dtype)."""
    return {out: [i for i in node.input if i] for node in model.graph.node for out in node.output if out}


def bisect_layers(ref: CompareModel, cand: CompareModel, utt: Utterance, *, chunk: int | None = None,
                  seconds: float = 2.0, jump_db: float = JUMP_DB, floor_db: float = FLOOR_DB,
                  threads: int = 1, top: int = 10) -> dict:
    """Find the first tensor whose error jumps (see module docstring for the definition).

    Args:
        ref (CompareModel): Reference (ONNX or ONNX Runtime engine).
        cand (CompareModel): Candidate (ONNX or ONNX Runtime engine; FP16, Q/DQ INT8...).
        utt (Utterance): Real speech; its first ``seconds`` are used (and of its partner signals, for a model with
            several waveform inputs; without them the utterance is its own partner).
        chunk (int | None): Samples per chunk (default one hop).
        seconds (float): Audio streamed (s); every tensor of every chunk is kept in memory.
        jump_db (float): Minimum SNR drop across a node (dB).
        floor_db (float): Tensors at or above this SNR (dB) are not jumps.
        threads (int): ONNX Runtime threads.
        top (int): Entries in ``top_drops``.
    Returns:
        dict: ``first_jump`` (None or ``{"tensor", "node", "op", "snr_db", "snr_in_db", "drop_db",
        "max_abs"}``), ``top_drops`` (list of the same, largest drop first), ``tensors`` (every
        compared tensor in topological order), ``compared``/``skipped`` counts, the thresholds and
        ``seconds``.
    Raises:
        UsageError: incompatible models, TensorRT engines, no tensor in common, a model fails to run.
    """
    check_compatible(ref, cand)
    for m in (ref, cand):
        if m.backend != "onnxruntime":
            raise UsageError(f"--mark-all needs ONNX models or ONNX Runtime engines; {m.path} is {m.backend} "
                             f"(give its {m.model_path})")
    chunk = chunk or ref.contract.hop_samples
    n = max(chunk, round(seconds * utt.sample_rate_hz) // chunk * chunk)
    from cosyedge.compare.utterances import with_partners

    # partners of a multi-input model: the utterance's own (the next one of the compared set), else itself
    short = with_partners([utt], ref.contract, str(ref.path), "cosyedge compare --mark-all")[0].head(n)
    ref_model = load_onnx(ref.model_path)
    cand_model = load_onnx(cand.model_path)
    order, producer, graph_inputs = _graph_tables(ref_model)
    cand_order, _, _ = _graph_tables(cand_model)
    common = [t for t in order if t in set(cand_order)]
    if not common:
        raise UsageError(f"{cand.path} and {ref.path} share no intermediate float tensor names to compare")
    skipped = len(order) - len(common)
    from cosyedge.passes.hop_scan import one_hop_body

    hidden = [m.path for m, g in ((ref, ref_model), (cand, cand_model)) if one_hop_body(g) is not None]
    if hidden:  # an INT8 ort_matmul engine: its layers run in the body of a Scan over hops, out of mark-all's reach
        LOG.warning(f"{hidden[0]} runs its layers in the body of a Scan over hops (INT8 placement ort_matmul): "
                    f"--mark-all compares its outer tensors only; build with --int8-placement trt to bisect layer by "
                    f"layer")
    keep = set(common)
    with LOG.stage(f"mark-all bisection on {seconds:g} s of '{utt.name}' ({len(common)} tensors in both)"):
        # The reference's own states (from a plain run) drive both marked models.
        states = ReferenceCache(ref, chunk, threads).get(short).state_inputs
        recs = []
        for who, name in ((ref, "reference-marked"), (cand, "candidate-marked")):
            runner = who.runner(name, mark_all=True, threads=threads)
            try:
                with runner:
                    recs.append(stream(who, runner, short, chunk, forced_states=states, outputs=keep))
            except UsageError:
                raise
            except Exception as err:  # noqa: BLE001 - onnxruntime/polygraphy raise their own exception types
                raise reraise_runner_error(err, who, "with all tensors marked") from None
    r_out, c_out = recs[0].outputs, recs[1].outputs
    snr: dict[str, float] = {}
    all_producers = _all_producers(ref_model)

    def effective(name: str, depth: int = 0) -> float | None:
        if name in snr:
            return snr[name]
        if name in graph_inputs:
            return SNR_CAP_DB
        if name not in all_producers or depth > 64:
            return None  # initializer / constant
        vals = [v for v in (effective(i, depth + 1) for i in all_producers[name]) if v is not None]
        return min(vals) if vals else None

    rows = []
    for t in common:
        if t not in r_out or t not in c_out or r_out[t].shape != c_out[t].shape:
            continue
        st = tensor_stats(r_out[t], c_out[t].astype(np.float32))
        node, op, inputs = producer[t]
        ins = [v for v in (effective(i) for i in inputs) if v is not None]
        snr_in = min(ins) if ins else SNR_CAP_DB
        snr[t] = st["snr_db"]
        rows.append({"tensor": t, "node": node, "op": op, "snr_db": round(st["snr_db"], 3),
                     "snr_in_db": round(snr_in, 3), "drop_db": round(snr_in - st["snr_db"], 3),
                     "max_abs": st["max_abs"], "mean_abs": st["mean_abs"]})
    first = next((r for r in rows if r["drop_db"] >= jump_db and r["snr_db"] < floor_db), None)
    tops = sorted(rows, key=lambda r: -r["drop_db"])[:top]
    return {"first_jump": first, "top_drops": tops, "tensors": rows, "compared": len(rows), "skipped": skipped,
            "jump_db": jump_db, "floor_db": floor_db, "seconds": n / utt.sample_rate_hz, "utterance": utt.name,
            "chunk_samples": chunk,
            "definition": "drop = min SNR of the producing node's compared inputs - SNR of the tensor; first "
                          "tensor in topological order with drop >= jump_db and SNR < floor_db"}


__all__ = ["FLOOR_DB", "JUMP_DB", "bisect_layers"]
