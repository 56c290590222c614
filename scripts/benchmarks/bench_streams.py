#!/usr/bin/env python3
"""Real-time streams served per CPU core by a StreamPool (ONNX Runtime, CPU).

For a stream count N, N streams of real speech are pushed through one :class:`StreamPool` (one
batched run per tick, one chunk per stream per tick, ``--threads`` ONNX Runtime threads); the tick
latency (gather + run + scatter, ms) is recorded over ``--ticks`` ticks after ``--warmup`` ticks.
N serves real time when the p99 tick latency is <= ``--max-p99-ms`` (default: one chunk's duration, 10 ms for
the reference model, 16 ms for GTCRN: every stream's chunk is done before the next one arrives). The largest such N
(doubling, then bisection) divided by ``--threads`` is ``streams_per_core``.

Run it on an otherwise idle machine; on a shared CPU the figure is a lower bound.

Example (full run, about a minute):
    python scripts/benchmarks/bench_streams.py --json docs/bench/bench_streams.json
Quick check (a few seconds):
    python scripts/benchmarks/bench_streams.py --ticks 50 --warmup 5 --max-streams 32
The rewritten pool against the graph as stored, alternating step by step (GTCRN: one batched body against the Scan
over streams; the JSON says which ran: ``batched_streams``, ``rewritten``, and ``without_rewrite`` for the other):
    python scripts/benchmarks/bench_streams.py --model engines/gtcrn.stream.onnx --compare-scan
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


def measure(model: Path, n: int, ticks: int, warmup: int, threads: int, chunk_samples: int | None,
            batch_rewrite: bool = True) -> dict:
    """Run N streams for warmup + ticks ticks; return tick latency p50/p99/max (ms) and the chunk period (ms)."""
    with StreamPool(model, max_streams=n, threads=threads, chunk_samples=chunk_samples,
                    batch_rewrite=batch_rewrite) as pool:
        c, sr = pool.chunk_samples, pool.contract.sample_rate_hz
        audio = load_speech(n, (ticks + warmup) * c, sr)
        ids = [pool.join() for _ in range(n)]
        for t in range(ticks + warmup):
            if t == warmup:
                pool.clear_latencies()
            sl = slice(t * c, (t + 1) * c)
            out = pool.push({sid: audio[i, sl] for i, sid in enumerate(ids)})
            assert len(out) == n
        lat = pool.tick_latencies_ms
    return {"streams": n, "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "max_ms": float(lat.max()), "chunk_ms": 1000.0 * c / sr, "ticks": int(lat.size)}


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
    ap.add_argument("--compare-scan", action="store_true",
                    help="also measure the graph as stored (batch_rewrite=False: for a batch-1 graph adopted as a Scan "
                         "over streams, each stream alone), alternating with the rewritten form step by step; "
                         "written under 'without_rewrite'")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.max_p99_ms is None:
        from cosyedge.artifacts import StreamContract

        c = StreamContract.from_onnx(args.model)
        args.max_p99_ms = 1000.0 * (args.chunk_samples or c.hop_samples) / c.sample_rate_hz

    def search(rewrite: bool, label: str, out: list):
        """The stream-count search of one form, one measurement per step (a generator, so that two forms can
        alternate: each step of one form is measured between steps of the other on the same machine)."""
        rows, cache = [], {}

        def ok(n: int) -> bool:
            if n not in cache:
                r = measure(args.model, n, args.ticks, args.warmup, args.threads, args.chunk_samples,
                            batch_rewrite=rewrite)
                r["real_time"] = r["p99_ms"] <= args.max_p99_ms
                cache[n] = r
                rows.append(r)
                print(f"{label}streams {n:5d}: tick p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  max "
                      f"{r['max_ms']:7.3f} ms  {'real time' if r['real_time'] else 'too slow'}", flush=True)
            return cache[n]["real_time"]

        best, n = 0, 1
        while n <= args.max_streams:  # doubling
            good = ok(n)
            yield
            if not good:
                break
            best, n = n, n * 2
        lo, hi = best, min(n, args.max_streams + 1)
        while hi - lo > 1 and lo > 0:  # bisection between the last good and the first bad count
            mid = (lo + hi) // 2
            good = ok(mid)
            yield
            lo, hi = (mid, hi) if good else (lo, mid)
        with StreamPool(args.model, max_streams=2, batch_rewrite=rewrite) as pool:
            rewritten = pool.rewritten  # passes applied, e.g. batch_gemm's GEMMs, batch_streams' batched body
        out.append({
            "streams_per_core": lo / args.threads,
            "max_streams": lo,
            "batch_rewrite": rewrite,
            "batched_streams": bool(rewritten.get("scan_batched")),  # a Scan over streams ran as one batched body
            "rewritten": rewritten,
            "rows": sorted(rows, key=lambda r: r["streams"]),
        })

    forms = [(not args.no_rewrite, "")] + ([(False, "scan: ")] if args.compare_scan else [])
    found: list[list] = [[] for _ in forms]
    live = [search(rw, label, res) for (rw, label), res in zip(forms, found)]
    while live:  # alternate the forms step by step
        for g in list(live):
            try:
                next(g)
            except StopIteration:
                live.remove(g)
    main_form = found[0][0]
    best, rows = main_form["max_streams"], main_form["rows"]
    result = {
        "streams_per_core": main_form["streams_per_core"],
        "max_streams": best,
        "threads": args.threads,
        "max_p99_ms": args.max_p99_ms,
        "chunk_ms": rows[0]["chunk_ms"] if rows else None,
        "model": str(args.model),
        "batch_rewrite": main_form["batch_rewrite"],
        "batched_streams": main_form["batched_streams"],
        "rewritten": main_form["rewritten"],
        "ticks": args.ticks,
        "warmup": args.warmup,
        "rows": rows,
        "machine": machine(),
    }
    if args.compare_scan:
        result["without_rewrite"] = found[1][0]  # measured alternately with the above
        print(f"without rewrite: streams_per_core {result['without_rewrite']['streams_per_core']:g}")
    print(f"streams_per_core {result['streams_per_core']:g} (max {best} real-time streams at p99 tick <= "
          f"{args.max_p99_ms:g} ms on {args.threads} thread(s))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
