#!/usr/bin/env python3
"""Upper bound on what INT8 can gain per chunk on ONNX Runtime CPU: the model with its weighted layers made free.

INT8 only speeds up the weighted ops it quantizes (Conv, ConvTranspose, Gemm, MatMul with a constant weight:
:func:`cosyedge.precision.qdq.weighted_nodes`; GRUs, which the ``ort_matmul`` placement also quantizes as
``DynamicQuantizeMatMul`` cells, are not freed here, so for a GRU model the bound is that of the other placements); everything else (activations, gates, state Concat/Slice, the
recipe's DSP, GRUs) runs as before. Here every such op is replaced by a near-free op with the same output
shape (its input cut to one channel / one feature by a ``Slice``, then the same op with a weight of that one
channel: the node count grows by one ``Slice`` per op, the multiply-adds drop by the input width), and the
model is timed against the FP32 original through the same :class:`~cosyedge.runtime.ort.OrtStreamSession`
(one hop per push, one thread, the session's in-memory rewrites on), in interleaved rounds on real speech. The
ratio ``fp32_p50 / free_p50`` bounds the INT8/FP32 speed-up from above, for any quantized kernel: even INT8
layers that cost nothing cannot beat it (Amdahl's law: G. Amdahl, "Validity of the single processor approach
to achieving large scale computing capabilities", AFIPS 1967). The free model's output is meaningless and is
not compared.

Commands::

    python scripts/benchmarks/bench_int8_bound.py --json docs/bench/bench_int8_bound.json            # the reference
    python scripts/benchmarks/bench_int8_bound.py --onnx engines/nsnet2.stream.onnx --json nsnet2-bound.json

An adopted model (compute in Scan bodies, e.g. GTCRN) gets the same treatment inside its leaf bodies.

Exit status: 0; 3 when the model is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine
DEFAULT_AUDIO = ROOT / "tests" / "data" / "speech_librivox_0890.wav"


def free_weighted_ops(model, only=None):
    """Return (copy of ``model`` with every weighted op replaced by a near-free one, replaced names, kept names).

    ``only`` (set of node names | None): replace only these (e.g. the nodes cosyedge's INT8 quantizes).

    Conv / ConvTranspose with ``group`` 1: input channels cut to 1 (``Slice`` axis 1), weight of one input
    channel. MatMul (constant B (K, N)) and Gemm (no transA): input features cut to 1 (last axis), weight
    (1, N). Anything else (grouped convs) is kept and named in the third list.
    """
    import onnx
    from onnx import helper, numpy_helper

    from cosyedge.precision.qdq import weighted_nodes

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    targets = {w.name: w for w in weighted_nodes(m) if only is None or w.name in only}
    dims = {t.name: tuple(t.dims) for t in g.initializer}
    nodes, inits, replaced, kept = [], [], [], []
    for n in g.node:
        w = targets.get(n.name) if n.name else None
        if w is None:
            nodes.append(n)
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        shape = dims[w.weight]
        base = f"{n.name}/free"
        if n.op_type in ("Conv", "ConvTranspose"):
            if int(a.get("group", 1)) != 1:
                kept.append(n.name)
                nodes.append(n)
                continue
            axis = 1
            new_w = ((shape[0], 1) + shape[2:]) if n.op_type == "Conv" else ((1,) + shape[1:])
        elif n.op_type == "Gemm":
            axis = 1
            new_w = (1, shape[0]) if int(a.get("transB", 0)) else (1, shape[1])
        else:  # MatMul (K, N)
            axis = -1
            new_w = (1, shape[1])
        inits += [numpy_helper.from_array(np.array([0], np.int64), f"{base}/starts"),
                  numpy_helper.from_array(np.array([1], np.int64), f"{base}/ends"),
                  numpy_helper.from_array(np.array([axis], np.int64), f"{base}/axes"),
                  numpy_helper.from_array(np.full(new_w, 0.01, np.float32), f"{base}/weight")]
        nodes.append(helper.make_node("Slice", [n.input[0], f"{base}/starts", f"{base}/ends", f"{base}/axes"],
                                      [f"{base}/x"], name=f"{base}/slice"))
        op = helper.make_node(n.op_type, [f"{base}/x", f"{base}/weight", *n.input[2:]], list(n.output), name=base)
        op.attribute.extend(x for x in n.attribute if not (n.op_type == "Gemm" and x.name == "transB"))
        nodes.append(op)
        replaced.append(n.name)
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    keep = [t for t in g.initializer if t.name in used]  # the replaced weights go
    del g.initializer[:]
    g.initializer.extend(keep + inits)
    return m, replaced, kept


def free_in_bodies(model, contract, quantized_only: bool):
    """:func:`free_weighted_ops` in every leaf Scan body of an adopted model (a copy): (model, replaced, kept,
    kept-float reasons of the INT8 stage); ``quantized_only``: only the ops the INT8 stage quantizes
    (:func:`cosyedge.precision.int8_bodies.body_plans`)."""
    import onnx

    from cosyedge.precision.bodies import put_body
    from cosyedge.precision.int8_bodies import body_plans

    m = onnx.ModelProto()
    m.CopyFrom(model)
    replaced, kept, float_kept = [], [], {}
    for p in body_plans(m, contract):
        only = {w.name for w in p.quantize} if quantized_only else None
        freed, r, k = free_weighted_ops(p.model, only)
        put_body(p.body.attr, freed.graph, p.body.graph)
        replaced += r
        kept += k
        float_kept.update(p.kept)
    return m, replaced, kept, float_kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", type=Path, default=None, help="FP32 streaming ONNX (default: bundled reference)")
    ap.add_argument("--audio", type=Path, default=DEFAULT_AUDIO, help="real speech to stream")
    ap.add_argument("--seconds", type=float, default=5.0, help="audio per round (looped or cut)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import onnx

    from cosyedge.artifacts import StreamContract, sha256_file
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.runtime import OrtStreamSession, stream_array

    src = args.onnx or Path(REFERENCE_STREAM_ONNX)
    if not src.is_file():
        print(f"[!] model not found: {src}", file=sys.stderr)
        return 3
    contract = StreamContract.from_onnx(src)
    x, sr = load_audio(args.audio)
    audio = np.resize(to_model_input(x, sr, contract.sample_rate_hz),
                      int(round(args.seconds * contract.sample_rate_hz))).astype(np.float32)
    from cosyedge.precision.bodies import has_subgraphs
    from cosyedge.precision.qdq import select_nodes

    model = onnx.load(str(src))
    if has_subgraphs(model):  # an adopted model: the weighted ops sit in its leaf Scan bodies
        free, replaced, kept, _ = free_in_bodies(model, contract, quantized_only=False)
        free_q, replaced_q, kept_q, float_kept = free_in_bodies(model, contract, quantized_only=True)
    else:
        quantized, float_kept = select_nodes(model, [i.name for i in contract.stream_inputs], contract.output)
        free, replaced, kept = free_weighted_ops(model)
        free_q, replaced_q, kept_q = free_weighted_ops(model, {w.name for w in quantized})
    with tempfile.TemporaryDirectory(prefix="int8-bound-") as t:
        paths = {"free_weighted_ops": Path(t) / "free.onnx", "free_int8_ops": Path(t) / "free_q.onnx"}
        onnx.save(free, str(paths["free_weighted_ops"]))
        onnx.save(free_q, str(paths["free_int8_ops"]))
        sessions = {"fp32": OrtStreamSession(src), **{k: OrtStreamSession(p) for k, p in paths.items()}}
        lat: dict[str, list] = {k: [] for k in sessions}
        for s in sessions.values():
            s.activate()
        for _ in range(max(1, args.rounds)):
            for k, s in sessions.items():
                s.clear_latencies()
                _, st = stream_array(s, audio, return_stats=True)
                lat[k].append(float(np.median(s.latencies_ms[-st.chunks:])))
        for s in sessions.values():
            s.deactivate()
    fp32, zero = float(np.median(lat["fp32"])), float(np.median(lat["free_weighted_ops"]))
    zero_q = float(np.median(lat["free_int8_ops"]))
    doc = {"model": {"path": str(src), "sha256": sha256_file(src), "name": contract.name},
           "chunk_samples": contract.hop_samples, "weighted_ops_replaced": len(replaced),
           "weighted_ops_kept": kept, "fp32_p50_ms": fp32, "free_weighted_ops_p50_ms": zero,
           "int8_speedup_bound": fp32 / zero, "int8_speedup_target": 1.3,
           "int8_quantized_ops": len(replaced_q), "int8_float_ops": float_kept,
           "free_int8_ops_p50_ms": zero_q, "int8_speedup_bound_quantized_ops": fp32 / zero_q,
           "rounds_p50_ms": lat,
           "machine": machine(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{contract.name}: FP32 p50 {fp32:.4f} ms per hop; with its {len(replaced)} weighted ops free "
          f"{zero:.4f} ms: INT8 can gain at most {fp32 / zero:.2f}x (target 1.3x)"
          + (f"; {len(kept)} grouped convs kept" if kept else "")
          + f"; with the {len(replaced_q)} ops cosyedge's INT8 quantizes free {zero_q:.4f} ms: at most "
            f"{fp32 / zero_q:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        part = args.json.with_suffix(".json.part")
        part.write_text(json.dumps(doc, indent=2) + "\n")
        part.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
