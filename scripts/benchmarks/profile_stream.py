#!/usr/bin/env python3
"""Profile one streaming ONNX chunk by chunk, paced (one chunk per 10 ms) vs back to back, per session option.

For each variant of ONNX Runtime session options (``--variants``), the model runs ``--chunks`` chunks of
real speech through IOBinding with ping-pong state buffers (as :class:`cosyedge.runtime.OrtStreamSession`
does), once back to back and once paced (sleep to the next 10 ms tick, as ``scripts/benchmarks/bench_stream.py``),
and reports p50/p99 of three clocks per chunk (ms): ``push`` (copy the chunk in + run + swap, i.e. the
Python around ONNX Runtime included), ``run`` (``run_with_iobinding`` alone) and, with ``--node-profile``,
ONNX Runtime's own per-node durations (``enable_profiling``; its JSON events ``cat == "Node"``, summed per
op type) so the extra paced time can be attributed to nodes. ``--touch-mb`` adds a control that is not
ONNX Runtime: summing a numpy array of that size (a memory-bound read like the model's weights) paced vs
back to back.

Command::

    python scripts/benchmarks/profile_stream.py --chunks 500 --json docs/bench/profile_stream.json

Sources: ONNX Runtime docs "Tune performance" (``session.intra_op.allow_spinning``,
``session.dynamic_block_base``, ``session.set_denormal_as_zero``, ``enable_profiling``,
``optimized_model_filepath``) and ``onnxruntime/core/session/onnxruntime_session_options_config_keys.h``.
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

from _common import ROOT
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "default": {},
    "spin0": {"config": {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}},
    "dynblock4": {"config": {"session.dynamic_block_base": "4"}},
    "daz": {"config": {"session.set_denormal_as_zero": "1"}},
    "noarena": {"enable_cpu_mem_arena": False},
    "nomempattern": {"enable_mem_pattern": False},
    "extended": {"level": "ORT_ENABLE_EXTENDED"},
    "basic": {"level": "ORT_ENABLE_BASIC"},
    "envalloc": {"config": {"session.use_env_allocators": "1"}},
    "fuse": {"fuse": True},
    "fuse_daz": {"fuse": True, "config": {"session.set_denormal_as_zero": "1"}},
}


def make_session(model: Path, variant: dict, profile: bool = False):
    """An ``onnxruntime.InferenceSession`` on ``model`` (one thread, sequential) with the options of ``variant``
    (a :data:`VARIANTS` value); ``profile`` turns on ``enable_profiling`` into a temporary folder."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 4
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, variant.get("level", "ORT_ENABLE_ALL"))
    for k in ("enable_cpu_mem_arena", "enable_mem_pattern"):
        if k in variant:
            setattr(so, k, variant[k])
    for k, v in variant.get("config", {}).items():
        so.add_session_config_entry(k, v)
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="cosyedge_prof_"), "ort")
    src: str | bytes = str(model)
    if variant.get("fuse"):
        import onnx

        from cosyedge.artifacts import StreamContract
        from cosyedge.passes.conv_sum import fuse_conv_sum

        c = StreamContract.from_onnx(model)
        shapes = {c.input: [1, 1, c.hop_samples], **{s.input: list(s.concrete_shape(1)) for s in c.states}}
        src = fuse_conv_sum(onnx.load(str(model)), shapes)[0].SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


class PingPong:
    """IOBinding runner with ping-pong states (the OrtStreamSession scheme), for a fair per-variant timing."""

    def __init__(self, sess, contract, chunk: int):
        import onnxruntime as ort

        self.sess = sess
        self.x = np.zeros((1, 1, chunk), np.float32)
        self.y = np.zeros((1, 1, chunk), np.float32)
        self.states = ([s.zeros(1) for s in contract.states], [s.zeros(1) for s in contract.states])
        ov = lambda a: ort.OrtValue.ortvalue_from_numpy(a, "cpu", 0)  # noqa: E731
        self._keep = (ov(self.x), ov(self.y), [ov(a) for a in self.states[0]], [ov(a) for a in self.states[1]])
        self.bindings = []
        for k in (0, 1):
            b = sess.io_binding()
            b.bind_ortvalue_input(contract.input, self._keep[0])
            b.bind_ortvalue_output(contract.output, self._keep[1])
            for i, s in enumerate(contract.states):
                b.bind_ortvalue_input(s.input, self._keep[2 + k][i])
                b.bind_ortvalue_output(s.output, self._keep[3 - k][i])
            self.bindings.append(b)
        self.parity = 0
        self.run_ms: list[float] = []

    def push(self, chunk: np.ndarray) -> np.ndarray:
        """Run one chunk (float32 (1, 1, hop)); return the bound output buffer (overwritten by the next push)."""
        np.copyto(self.x, chunk)
        t = time.perf_counter()
        self.sess.run_with_iobinding(self.bindings[self.parity])
        self.run_ms.append((time.perf_counter() - t) * 1000.0)
        self.parity ^= 1
        return self.y


SPIN_S = 0.0
"""float: with ``--spin-us``, the paced loop sleeps until this long before each tick and busy-waits the rest
(keeps the core running; costs that much CPU per period)."""


def timed(step, n: int, period_s: float | None) -> np.ndarray:
    """Call ``step(i)`` for i < n back to back (``period_s`` None) or each at ``t0 + (i + 1) x period_s``;
    return the per-call times (ms, float64 (n,))."""
    lat = np.empty(n)
    t_next = time.perf_counter()
    for i in range(n):
        if period_s:
            t_next += period_s
            wait = t_next - time.perf_counter() - SPIN_S
            if wait > 0:
                time.sleep(wait)
            while time.perf_counter() < t_next:
                pass
        t = time.perf_counter()
        step(i)
        lat[i] = (time.perf_counter() - t) * 1000.0
    return lat


def pct(a) -> dict:
    """p50/p99/mean (ms, rounded to 0.1 us) of ``a``."""
    a = np.asarray(a, np.float64)
    return {"p50": round(float(np.percentile(a, 50)), 4), "p99": round(float(np.percentile(a, 99)), 4),
            "mean": round(float(a.mean()), 4)}


def node_profile(path: str, skip: int) -> dict:
    """Per-run sums from an ORT profile JSON: model_run duration and node durations by op type (ms, p50)."""
    ev = json.load(open(path))
    runs = [e for e in ev if e.get("name") == "model_run"]
    nodes = [e for e in ev if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    runs = runs[skip:]
    by_run: list[collections.Counter] = []
    j = 0
    nodes.sort(key=lambda e: e["ts"])
    for r in runs:
        c = collections.Counter()
        t0, t1 = r["ts"], r["ts"] + r["dur"]
        while j < len(nodes) and nodes[j]["ts"] < t0:
            j += 1
        while j < len(nodes) and nodes[j]["ts"] <= t1:
            c[nodes[j]["args"].get("op_name", "?")] += nodes[j]["dur"] / 1000.0
            j += 1
        by_run.append(c)
    ops = sorted({k for c in by_run for k in c})
    kern = [sum(c.values()) for c in by_run]
    return {"model_run_ms": pct([r["dur"] / 1000.0 for r in runs]), "kernels_ms": pct(kern),
            "by_op_p50_ms": {k: round(float(np.median([c[k] for c in by_run])), 4) for k in ops}}


def main(argv=None) -> int:
    """Run the variants (see the module doc); print one line per variant; exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx", type=Path, default=None)
    ap.add_argument("--chunks", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--variants", default="default", help=f"comma list of {sorted(VARIANTS)}")
    ap.add_argument("--node-profile", action="store_true", help="also a profiled pass (enable_profiling)")
    ap.add_argument("--touch-mb", type=float, default=0.0, help="memory-read control of this many MB")
    ap.add_argument("--spin-us", type=float, default=0.0, help="paced: busy-wait this long before each tick")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    global SPIN_S
    SPIN_S = args.spin_us * 1e-6

    from cosyedge.artifacts import StreamContract
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.models import REFERENCE_STREAM_ONNX

    model = args.onnx or Path(REFERENCE_STREAM_ONNX)
    c = StreamContract.from_onnx(model)
    chunk = c.hop_samples
    x, sr = load_audio(ROOT / "tests" / "data" / "speech_librivox_0890.wav")
    x = to_model_input(x, sr, c.sample_rate_hz)
    n = args.chunks
    chunks = np.resize(x, n * chunk).astype(np.float32).reshape(n, 1, 1, chunk)
    period = chunk / c.sample_rate_hz
    out: dict = {"model": str(model), "chunks": n, "spin_us": args.spin_us, "period_ms": period * 1000, "loadavg": os.getloadavg()[0],
                 "variants": {}}
    ref_y = None
    for name in args.variants.split(","):
        var = VARIANTS[name]
        res = {}
        for mode, p in (("back_to_back", None), ("paced", period)):
            r = PingPong(make_session(model, var), c, chunk)
            for _ in range(args.warmup):
                r.push(np.zeros((1, 1, chunk), np.float32))
            r.run_ms.clear()
            ys = []
            lat = timed(lambda i: ys.append(r.push(chunks[i]).copy()), n, p)
            res[mode] = {"push_ms": pct(lat), "run_ms": pct(r.run_ms)}
            if mode == "back_to_back":
                y = np.concatenate(ys, axis=-1)
                if ref_y is None:
                    ref_y = y
                err = float(np.sum((y - ref_y).astype(np.float64) ** 2))
                res["vs_default"] = {"max_abs": float(np.abs(y - ref_y).max()),
                                     "snr_db": float("inf") if err == 0 else
                                     float(10 * np.log10(np.sum(ref_y.astype(np.float64) ** 2) / err))}
            if args.node_profile:
                s = make_session(model, var, profile=True)
                r = PingPong(s, c, chunk)
                for _ in range(args.warmup):
                    r.push(np.zeros((1, 1, chunk), np.float32))
                timed(lambda i: r.push(chunks[i]), n, p)
                res[mode]["ort_profile"] = node_profile(s.end_profiling(), args.warmup)
        out["variants"][name] = res
        b, q = res["back_to_back"], res["paced"]
        print(f"{name:13s} b2b push p50 {b['push_ms']['p50']:.4f} run {b['run_ms']['p50']:.4f} | paced push p50 "
              f"{q['push_ms']['p50']:.4f} run {q['run_ms']['p50']:.4f} p99 {q['push_ms']['p99']:.4f} | "
              f"vs default {res['vs_default']['max_abs']:.2e}", flush=True)
        if args.node_profile:
            for mode in ("back_to_back", "paced"):
                pr = res[mode]["ort_profile"]
                top = sorted(pr["by_op_p50_ms"].items(), key=lambda kv: -kv[1])[:6]
                print(f"   {mode}: model_run p50 {pr['model_run_ms']['p50']:.4f} kernels {pr['kernels_ms']['p50']:.4f}"
                      f" top {top}", flush=True)
    if args.touch_mb:
        a = np.ones(int(args.touch_mb * 2**20 / 4), np.float32)
        out["touch"] = {"mb": args.touch_mb, **{m: pct(timed(lambda i: a.sum(), n, p))
                                                for m, p in (("back_to_back", None), ("paced", period))}}
        v = [np.ones(256, np.float32) for _ in range(4)]

        def small(_i):
            for _ in range(100):
                np.add(v[0], v[1], out=v[2])
                np.multiply(v[2], v[3], out=v[1])
        out["small_ops"] = {"what": "200 numpy ufunc calls on 1 KB arrays (dispatch-bound, in L1)",
                            **{m: pct(timed(small, n, p)) for m, p in (("back_to_back", None), ("paced", period))}}
        print(f"small ops: b2b p50 {out['small_ops']['back_to_back']['p50']:.4f} paced p50 "
              f"{out['small_ops']['paced']['p50']:.4f}")
        print(f"touch {args.touch_mb} MB: b2b p50 {out['touch']['back_to_back']['p50']:.4f} paced p50 "
              f"{out['touch']['paced']['p50']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
