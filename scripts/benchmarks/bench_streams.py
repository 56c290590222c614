#!/usr/bin/env python3
"""Real-time streams served per CPU core by a StreamPool (ONNX Runtime, CPU).

For a stream count N, N streams of real speech are pushed through one :class:`StreamPool` (one
batched run per tick, one chunk per stream per tick, ``--threads`` ONNX Runtime threads); the tick
latency (gather + run + scatter, ms) is recorded over ``--ticks`` ticks after ``--warmup`` ticks.
N serves real time when the p99 tick latency is <= ``--max-p99-ms`` (default: one chunk's duration, 10 ms for
the reference model, 16 ms for GTCRN: every stream's chunk is done before the next one arrives). The largest such N
(doubling, then bisection) divided by ``--threads`` is ``streams_per_core``.

Run it on an otherwise idle machine; on a shared CPU the figure is a lower bound.

``--passes`` names the pool's graph passes (``default``: :data:`cosyedge.passes.POOL_PASSES`; ``base``:
:data:`cosyedge.passes.POOL_PASSES_BASE`, the pool before its bit-identical per-tick cuts; or ``name+name+...``).
Several, comma-separated (``--passes base,default``), are measured side by side: at every stream count each runs in
turn, ``--block`` ticks at a time, in one process, so a busy CPU slows them alike; each gets its own
``streams_per_core`` and the JSON the ratio.

Example (full run, about a minute):
    python scripts/benchmarks/bench_streams.py --json docs/bench/bench_streams.json
Quick check (a few seconds):
    python scripts/benchmarks/bench_streams.py --ticks 50 --warmup 5 --max-streams 32
Old vs new passes, interleaved:
    python scripts/benchmarks/bench_streams.py --passes base,default --json /tmp/ab.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from cosyedge.runtime.pool import StreamPool

from _common import ROOT, machine

SPEECH = ROOT / "tests" / "data" / "speech_librivox_0890.wav"


def load_speech(n_streams: int, samples: int, rate_hz: int) -> np.ndarray:
    """float32 (n_streams, samples): real speech (the test recording, resampled), each stream at another offset."""
    import soundfile as sf
    import soxr

    x, sr = sf.read(str(SPEECH), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if sr != rate_hz:
        x = soxr.resample(x, sr, rate_hz).astype(np.float32)
    reps = int(np.ceil((samples + n_streams * 997) / x.size)) + 1
    x = np.tile(x, reps)
    return np.stack([x[i * 997: i * 997 + samples] for i in range(n_streams)])


def pass_list(spec: str):
    """The pool's pass names for ``spec``: ``default`` (None: the pool's own), ``base`` or ``name+name+...``."""
    from cosyedge.passes import POOL_PASSES_BASE

    if spec == "default":
        return None
    return POOL_PASSES_BASE if spec == "base" else tuple(spec.split("+"))


def measure(model: Path, n: int, ticks: int, warmup: int, threads: int, chunk_samples: int | None,
            batch_rewrite: bool = True, variants: tuple = ("default",), block: int = 50) -> dict:
    """Run N streams for warmup + ticks ticks through one pool per variant (pass list), the variants in turn
    ``block`` ticks at a time; return per variant the tick latency p50/p99/max (ms) and the chunk period (ms)."""
    pools = {v: StreamPool(model, max_streams=n, threads=threads, chunk_samples=chunk_samples,
                           batch_rewrite=batch_rewrite, passes=pass_list(v)).activate() for v in variants}
    try:
        first = pools[variants[0]]
        c, sr = first.chunk_samples, first.contract.sample_rate_hz
        audio = load_speech(n, (ticks + warmup) * c, sr)
        ids = {v: [p.join() for _ in range(n)] for v, p in pools.items()}

        def run(v: str, t: int) -> None:
            sl = slice(t * c, (t + 1) * c)
            out = pools[v].push({sid: audio[i, sl] for i, sid in enumerate(ids[v])})
            assert len(out) == n

        for v in variants:
            for t in range(warmup):
                run(v, t)
            pools[v].clear_latencies()
        for t0 in range(warmup, warmup + ticks, block):
            for v in variants:
                for t in range(t0, min(t0 + block, warmup + ticks)):
                    run(v, t)
        res = {}
        for v, p in pools.items():
            lat = p.tick_latencies_ms
            res[v] = {"streams": n, "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
                      "max_ms": float(lat.max()), "chunk_ms": 1000.0 * c / sr, "ticks": int(lat.size)}
        return res if len(variants) > 1 else res[variants[0]]
    finally:
        for p in pools.values():
            p.deactivate()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "cosyedge" / "models" / "reference.stream.onnx",
                    help="streaming ONNX (or engine model.onnx)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (= cores used)")
    ap.add_argument("--chunk-samples", type=int, default=None, help="chunk length (default: one hop)")
    ap.add_argument("--ticks", type=int, default=500, help="measured ticks per stream count")
    ap.add_argument("--warmup", type=int, default=20, help="ticks discarded per stream count")
    ap.add_argument("--max-p99-ms", type=float, default=None,
                    help="real-time bound on the p99 tick latency (default: one chunk's duration)")
    ap.add_argument("--max-streams", type=int, default=1024, help="largest stream count tried")
    ap.add_argument("--no-rewrite", action="store_true",
                    help="run the graph as stored (StreamPool batch_rewrite=False: one matrix-vector product per "
                         "stream and conv)")
    ap.add_argument("--passes", default="default",
                    help="the pool's graph passes: default, base or name+name+...; a comma list measures several "
                         "interleaved")
    ap.add_argument("--block", type=int, default=50, help="with several --passes: ticks of one before the next")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    variants = tuple(args.passes.split(","))
    from cosyedge.passes import PASSES

    bad = [p for v in variants for p in (pass_list(v) or ()) if p not in PASSES]
    if bad:
        print(f"[!] --passes: unknown pass(es) {bad}; known: default, base, or '+'-joined names of {sorted(PASSES)}",
              file=sys.stderr)
        return 2
    if args.max_p99_ms is None:
        from cosyedge.artifacts import StreamContract

        c = StreamContract.from_onnx(args.model)
        args.max_p99_ms = 1000.0 * (args.chunk_samples or c.hop_samples) / c.sample_rate_hz
    if len(variants) > 1:
        return compare(args, variants)

    rows, cache = [], {}

    def ok(n: int) -> bool:
        if n not in cache:
            r = measure(args.model, n, args.ticks, args.warmup, args.threads, args.chunk_samples,
                        batch_rewrite=not args.no_rewrite, variants=variants)
            r["real_time"] = r["p99_ms"] <= args.max_p99_ms
            cache[n] = r
            rows.append(r)
            print(f"streams {n:5d}: tick p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  max "
                  f"{r['max_ms']:7.3f} ms  {'real time' if r['real_time'] else 'too slow'}", flush=True)
        return cache[n]["real_time"]

    best, n = 0, 1
    while n <= args.max_streams and ok(n):  # doubling
        best, n = n, n * 2
    lo, hi = best, min(n, args.max_streams + 1)
    while hi - lo > 1 and lo > 0:  # bisection between the last good and the first bad count
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    best = lo
    with StreamPool(args.model, max_streams=2, batch_rewrite=not args.no_rewrite,
                    passes=pass_list(variants[0])) as pool:
        rewritten = pool.rewritten  # nodes run as batched GEMMs
    result = {
        "streams_per_core": best / args.threads,
        "max_streams": best,
        "threads": args.threads,
        "max_p99_ms": args.max_p99_ms,
        "chunk_ms": rows[0]["chunk_ms"] if rows else None,
        "model": str(args.model),
        "batch_rewrite": not args.no_rewrite,
        "passes": variants[0],
        "rewritten": rewritten,
        "ticks": args.ticks,
        "warmup": args.warmup,
        "rows": sorted(rows, key=lambda r: r["streams"]),
        "machine": machine(),
    }
    print(f"streams_per_core {result['streams_per_core']:g} (max {best} real-time streams at p99 tick <= "
          f"{args.max_p99_ms:g} ms on {args.threads} thread(s))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def compare(args, variants: tuple) -> int:
    """Streams per core of several pass lists measured interleaved (each stream count runs them all in turn)."""
    cache: dict[int, dict] = {}

    def at(n: int) -> dict:
        if n not in cache:
            cache[n] = measure(args.model, n, args.ticks, args.warmup, args.threads, args.chunk_samples,
                               batch_rewrite=not args.no_rewrite, variants=variants, block=args.block)
            print(f"streams {n:5d}: " + " | ".join(f"{v} p50 {r['p50_ms']:7.3f} p99 {r['p99_ms']:7.3f}"
                                                   for v, r in cache[n].items()), flush=True)
        return cache[n]

    best = {}
    for v in variants:
        ok = lambda n: at(n)[v]["p99_ms"] <= args.max_p99_ms  # noqa: E731
        lo, n = 0, 1
        while n <= args.max_streams and ok(n):
            lo, n = n, n * 2
        hi = min(n, args.max_streams + 1)
        while hi - lo > 1 and lo > 0:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        best[v] = lo
    result = {"passes": list(variants), "streams_per_core": {v: best[v] / args.threads for v in variants},
              "ratio_vs_first": {v: round(best[v] / max(best[variants[0]], 1), 3) for v in variants},
              "threads": args.threads, "max_p99_ms": args.max_p99_ms, "model": str(args.model), "ticks": args.ticks,
              "warmup": args.warmup, "block": args.block,
              "rows": {str(n): r for n, r in sorted(cache.items())}, "machine": machine()}
    for v in variants:
        with StreamPool(args.model, max_streams=2, batch_rewrite=not args.no_rewrite, passes=pass_list(v)) as pool:
            result.setdefault("rewritten", {})[v] = pool.rewritten
    print("streams_per_core " + ", ".join(f"{v} {best[v] / args.threads:g}" for v in variants)
          + f" (interleaved, p99 tick <= {args.max_p99_ms:g} ms, {args.threads} thread(s))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
