#!/usr/bin/env python3
"""Where a StreamPool tick goes: ONNX Runtime's per-op-type time per batched run, Python around it, and the roofline.

For each pass list (``--variants``, e.g. ``base`` = :data:`cosyedge.passes.POOL_PASSES_BASE`, ``default`` =
:data:`cosyedge.passes.POOL_PASSES`, or a ``+``-joined list of pass names), one :class:`StreamPool` of ``--streams``
streams runs real speech (one chunk per stream per tick, one ONNX Runtime thread) with ONNX Runtime profiling on
(``SessionOptions.enable_profiling``; the pool's own session options otherwise). The variants run **interleaved**
in one process (``--block`` ticks of each in turn, ``--rounds`` times), so a busy shared CPU slows all alike; their
ratio is the figure to trust there. Reported per variant:

* ``tick_ms`` (p50/p99: the pool's own clock, gather + run + scatter), ``run_ms`` (ORT's ``model_run`` event),
  ``python_ms_p50`` (tick - run: the pool's Python per tick), ``submit_ms_p50`` (the ``submit`` calls of a tick, not
  in ``tick_ms``);
* ``nodes_per_run`` (kernels ORT ran per tick, after its own fusions) and ``by_op`` (ms per run, mean, and share of
  the kernels' time, per op type); ``outside_matmul_conv_share``: the share of kernel time outside
  Conv/MatMul/Gemm/FusedMatMul/FusedConv;
* ``roofline``: MACs per stream per tick (:func:`cosyedge.precision.macs.count_macs` on the stored graph), the
  GFLOP/s achieved (2 x MACs x streams / tick p50), and one core's measured FP32 GEMM rate (ORT MatMul 512^3, one
  thread) for scale.

``--check`` also asserts that every variant's outputs equal the first variant's bit for bit.

Command::

    python scripts/benchmarks/profile_pool.py --streams 64 --variants base,default --check \
        --json docs/bench/roofline_reference.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine

sys.path.insert(0, str(ROOT))

MAC_KERNELS = ("Conv", "MatMul", "Gemm", "FusedMatMul", "FusedConv")
"""tuple[str, ...]: kernel op types that hold the arithmetic (the rest is bookkeeping and elementwise work)."""


def pass_list(spec: str):
    """The pass names of a variant: ``base``, ``default`` or ``name+name+...``."""
    from cosyedge.passes import POOL_PASSES, POOL_PASSES_BASE

    return {"base": POOL_PASSES_BASE, "default": POOL_PASSES}.get(spec) or tuple(spec.split("+"))


def profiled_pool(model: Path, n: int, passes, prefix: str):
    """An active StreamPool of ``n`` slots whose session profiles into ``prefix`` (the pool's options otherwise)."""
    import onnxruntime as ort

    import cosyedge.runtime.ort as ort_mod
    from cosyedge.runtime.pool import StreamPool

    real = ort_mod.ort_session

    def profiling(src, so, providers):
        so.enable_profiling = True
        so.profile_file_prefix = prefix
        return ort.InferenceSession(src, so, providers=providers)

    ort_mod.ort_session = profiling
    try:
        return StreamPool(model, max_streams=n, passes=passes).activate()
    finally:
        ort_mod.ort_session = real


def kernel_profile(path: str, skip_runs: int) -> dict:
    """Per-run kernel times from an ORT profile JSON, its first ``skip_runs`` runs left out."""
    ev = json.load(open(path))
    runs = sorted((e for e in ev if e.get("name") == "model_run"), key=lambda e: e["ts"])[skip_runs:]
    t0 = runs[0]["ts"] if runs else 0
    nodes = sorted((e for e in ev if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
                    and e["ts"] >= t0), key=lambda e: e["ts"])
    by, per_node = collections.Counter(), collections.Counter()
    for e in nodes:
        by[e["args"].get("op_name", "?")] += e["dur"]
        per_node[e["name"][: -len("_kernel_time")]] += e["dur"]
    r = max(len(runs), 1)
    kern = sum(by.values())
    return {"runs": len(runs), "run_ms": [x["dur"] / 1000.0 for x in runs], "nodes_per_run": len(nodes) / r,
            "kernels_ms_per_run": kern / r / 1000.0,
            "by_op": {k: {"ms": round(v / r / 1000.0, 4), "share": round(v / kern, 4)} for k, v in by.most_common()},
            "outside_matmul_conv_share": round(1 - sum(v for k, v in by.items() if k in MAC_KERNELS) / kern, 4),
            "top_nodes_ms": {k: round(v / r / 1000.0, 4) for k, v in per_node.most_common(12)}}


def gemm_peak_gflops() -> float:
    """One core's FP32 GEMM rate (GFLOP/s): ORT MatMul 512 x 512 x 512, one thread, best of 20."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "g",
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, [512, 512]) for k in "ab"],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [512, 512])])
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    s = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
                             so, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    best = np.inf
    for _ in range(20):
        t = time.perf_counter()
        s.run(None, {"a": a, "b": a})
        best = min(best, time.perf_counter() - t)
    return 2 * 512 ** 3 / best / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "cosyedge" / "models" / "reference.stream.onnx")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--variants", default="base,default", help="comma list: base, default or name+name+...")
    ap.add_argument("--block", type=int, default=50, help="ticks of one variant before switching")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--streams-per-core", type=float, default=None,
                    help="also give the GFLOP/s at this many real-time streams per core (e.g. a bench_streams result)")
    ap.add_argument("--check", action="store_true", help="assert every variant's outputs equal the first's")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import onnx

    from cosyedge.artifacts import StreamContract
    from cosyedge.precision.macs import count_macs
    from bench_streams import load_speech

    n, c = args.streams, StreamContract.from_onnx(args.model)
    hop = c.hop_samples
    ticks = args.warmup + args.block * args.rounds
    audio = load_speech(n, ticks * hop, c.sample_rate_hz)
    names = args.variants.split(",")
    tmp = tempfile.mkdtemp(prefix="cosyedge_pool_prof_")
    pools = {v: profiled_pool(args.model, n, pass_list(v), os.path.join(tmp, v)) for v in names}
    ids = {v: [p.join() for _ in range(n)] for v, p in pools.items()}
    pos, submit = dict.fromkeys(names, 0), {v: [] for v in names}
    outs = {v: [] for v in names}

    def tick(v: str) -> None:
        p, t = pools[v], pos[v]
        s0 = time.perf_counter()
        for i, sid in enumerate(ids[v]):
            p.submit(sid, audio[i, t * hop:(t + 1) * hop])
        submit[v].append((time.perf_counter() - s0) * 1000.0)
        o = p.tick()
        if args.check:
            outs[v].append(np.stack([o[sid] for sid in ids[v]]))
        pos[v] += 1

    for v in names:
        for _ in range(args.warmup):
            tick(v)
        pools[v].clear_latencies()
        submit[v].clear()
    for _ in range(args.rounds):
        for v in names:
            for _ in range(args.block):
                tick(v)
    macs = sum(r.macs for r in count_macs(onnx.load(str(args.model)), c))
    peak = gemm_peak_gflops()
    result = {"model": str(args.model), "streams": n, "threads": 1, "interleaved": {"block": args.block,
              "rounds": args.rounds, "warmup": args.warmup}, "variants": {}}
    for v in names:
        p = pools[v]
        lat = p.tick_latencies_ms
        path = p._sess.end_profiling()
        prof = kernel_profile(path, args.warmup)
        run_ms = prof.pop("run_ms")
        tick_p50 = float(np.percentile(lat, 50))
        result["variants"][v] = {
            "passes": list(pass_list(v)), "rewritten": p.rewritten,
            "tick_ms": {"p50": round(tick_p50, 4), "p99": round(float(np.percentile(lat, 99)), 4)},
            "run_ms_p50": round(float(np.median(run_ms)), 4),
            "python_ms_p50": round(tick_p50 - float(np.median(run_ms)), 4),
            "submit_ms_p50": round(float(np.median(submit[v])), 4),
            **prof,
            "gflops_achieved": round(2 * macs * n / (tick_p50 / 1000.0) / 1e9, 2),
        }
        p.deactivate()
        r = result["variants"][v]
        print(f"{v:10s} tick p50 {r['tick_ms']['p50']:.3f} ms p99 {r['tick_ms']['p99']:.3f} | run {r['run_ms_p50']:.3f}"
              f" | python {r['python_ms_p50']:.3f} | submit {r['submit_ms_p50']:.3f} | nodes/run "
              f"{r['nodes_per_run']:.0f} | outside MatMul/Conv {100 * r['outside_matmul_conv_share']:.1f} % | "
              f"{r['gflops_achieved']:.1f} GFLOP/s", flush=True)
        print("           " + ", ".join(f"{k} {d['ms']:.3f}" for k, d in list(r["by_op"].items())[:8]))
    base = result["variants"][names[0]]["tick_ms"]["p50"]
    for v in names[1:]:
        result["variants"][v]["speedup_p50_vs_" + names[0]] = round(base / result["variants"][v]["tick_ms"]["p50"], 3)
    result["roofline"] = {"macs_per_stream_per_tick": int(macs), "flop_per_stream_per_second": 2 * macs * 1000 // 10,
                          "gemm_peak_gflops_1_core_measured": round(peak, 1)}
    if args.streams_per_core:
        g = 2 * macs * args.streams_per_core * (c.sample_rate_hz / hop) / 1e9
        result["roofline"].update({"streams_per_core": args.streams_per_core, "gflops_at_streams_per_core": round(g, 2),
                                   "share_of_gemm_peak": round(g / peak, 3)})
    if args.check:
        ref = np.concatenate(outs[names[0]], axis=1)
        for v in names[1:]:
            got = np.concatenate(outs[v], axis=1)
            assert np.array_equal(got, ref), f"{v}: max abs {np.abs(got - ref).max()} vs {names[0]}"
        result["outputs_bit_identical"] = True
    result["machine"] = machine()
    print(json.dumps(result["roofline"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
