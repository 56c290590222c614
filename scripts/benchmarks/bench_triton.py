"""Benchmark the bundled model served by a real Triton on CPU (``cosyedge serve`` of a ``--triton-backend python``
repository) against the same engine in process; writes docs/bench/triton.json. One run, three parts, side by side:

a. latency: one stream over loopback gRPC, round trip per chunk (request sent -> response received), p50/p99, beside
   the in-process per-chunk time (OrtStreamSession.push) of the same engine on the same chunks;
b. streams: clients in their own processes, each stream paced at one hop per hop duration; the largest stream count
   whose round-trip p99 stays under one hop, per core of server CPU time (tritonserver + its Python-backend stub,
   from /proc), beside in-process StreamPool streams per core (one thread; the largest count whose tick p99 stays
   under one hop); the mean batch from Triton's own metrics (nv_inference_request_success / nv_inference_exec_count);
c. soak: sequences joining and leaving (each a speech clip of 1-3 s, ended with END) for the rest of the time; server
   RSS sampled (after the first fifth: warm-up) and its growth, failed requests, every output checked against its
   solo in-process run (SNR >= 100 dB).

--seconds is the whole budget (default 900: a 10-minute soak); --seconds 20 is a smoke run. Run it on a quiet
machine: every number depends on what else runs.

    python scripts/benchmarks/bench_triton.py --seconds 900 --out docs/bench/triton.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine
sys.path.insert(0, str(ROOT))
HOP = 160
HOP_S = 0.010


def speech() -> np.ndarray:
    import soundfile as sf

    x, sr = sf.read(ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav", dtype="float32")
    assert sr == 16000
    return x


def proc_stats(pids: list[int]) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of the processes ``pids`` and all their descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    todo, seen = list(pids), set()
    cpu, rss = 0.0, 0
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += children.get(p, [])
        try:
            f = (Path("/proc") / str(p) / "stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(f[11]) + int(f[12])) / tick
            rss += int(f[21]) * page
        except (OSError, IndexError, ValueError):
            pass
    return cpu, rss


# ------------------------------------------------------------------------------ client processes
def _paced_streams(url: str, n: int, seconds: float, q, phase0: float) -> None:
    """A client process: ``n`` sequences, each on its own gRPC stream (one per sequence, as a real client has), sent
    one hop every 10 ms on an absolute schedule, sequence k offset by ``(phase0 + k / n)`` of a hop so the arrivals
    are spread, not synchronised; one thread sends on all of them, tritonclient's callbacks receive. Puts (round trips ms,
    failed sequences) on ``q``. One thread per stream (cosyedge's own client) costs the 2-core machine more CPU
    than the server, which would measure the clients."""
    import tritonclient.grpc as g

    x = speech()
    sent: dict[str, float] = {}
    lat: list[float] = []
    errors: set[int] = set()
    lock = threading.Lock()

    def done(result, error) -> None:
        t = time.perf_counter()
        if error is not None:
            with lock:
                if not errors:
                    print("client error:", str(error).splitlines()[0][:300], file=sys.stderr, flush=True)
                errors.add(1)
            return
        rid = result.get_response().id
        with lock:
            lat.append(1000 * (t - sent.pop(rid)))

    clients = [g.InferenceServerClient(url) for _ in range(n)]
    for c in clients:
        c.start_stream(callback=done)
    ids = [1 + (os.getpid() << 20) + k for k in range(n)]
    offs = [(k * 7919 * HOP) % (x.size - HOP) for k in range(n)]
    ins = [g.InferInput("audio", [1, 1, HOP], "FP32") for _ in range(n)]
    t0 = time.perf_counter() + 0.05
    steps = int(seconds / HOP_S)
    for step in range(steps):
        for k in range(n):
            t_k = t0 + (step + (phase0 + k / n) % 1.0) * HOP_S
            time.sleep(max(0.0, t_k - time.perf_counter()))
            ins[k].set_data_from_numpy(np.ascontiguousarray(x[offs[k]:offs[k] + HOP]).reshape(1, 1, HOP))
            offs[k] = (offs[k] + HOP) % (x.size - HOP)
            rid = f"{k}:{step}"
            with lock:
                sent[rid] = time.perf_counter()
            clients[k].async_stream_infer("reference", [ins[k]], request_id=rid, sequence_id=ids[k],
                                      sequence_start=step == 0, sequence_end=step == steps - 1)
    t_wait = time.perf_counter() + 10
    while sent and time.perf_counter() < t_wait:
        time.sleep(0.01)
    for c in clients:
        c.stop_stream()
        c.close()
    q.put((np.array(lat), len(errors) + (1 if sent else 0)))


def triton_streams(srv, n: int, seconds: float) -> dict:
    """``n`` paced streams in client processes (at most 32 sequences each, multiplexed) for ``seconds``."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    per = [min(32, n - i) for i in range(0, n, 32)]
    m0 = srv.metrics()
    c0, _ = proc_stats([srv.pid])
    t0 = time.perf_counter()
    ps = [ctx.Process(target=_paced_streams, args=(srv.grpc_url, k, seconds, q, i / len(per)))
          for i, k in enumerate(per)]
    for p in ps:
        p.start()
    got = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    wall = time.perf_counter() - t0
    c1, _ = proc_stats([srv.pid])
    m1 = srv.metrics()
    lat = np.concatenate([g[0] for g in got]) if got else np.zeros(0)
    done = m1["nv_inference_request_success"] - m0.get("nv_inference_request_success", 0)
    runs = m1["nv_inference_exec_count"] - m0.get("nv_inference_exec_count", 0)
    return {"streams": n, "requests": int(lat.size), "failed_streams": int(sum(g[1] for g in got)),
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
            "server_cores": (c1 - c0) / wall, "server_cpu_s": c1 - c0, "wall_s": wall,
            "mean_batch": done / runs if runs else None}


# ------------------------------------------------------------------------------ in process
def pool_tick_p99_ms(model: Path, n: int, ticks: int) -> float:
    from cosyedge.runtime.pool import StreamPool

    x = speech()
    with StreamPool(model, max_streams=n) as pool:
        ids = [pool.join() for _ in range(n)]
        for t in range(ticks):
            pool.push({sid: x[(t * n + k) * HOP % (x.size - HOP):][:HOP] for k, sid in enumerate(ids)})
        return float(np.percentile(pool.tick_latencies_ms[ticks // 5:], 99))


def largest(fits, lo: int, hi: int, t_end: float) -> tuple[int, list]:
    """The largest n in [lo, hi] with fits(n) -> (ok, record), doubling then bisecting, until ``t_end``."""
    runs, best, n = [], 0, lo
    top = hi + 1
    while n <= hi and time.monotonic() < t_end:
        ok, rec = fits(n)
        runs.append(rec)
        if ok:
            best = n
            n = n * 2 if top > hi else (n + top) // 2
        else:
            top = n
            n = (best + top) // 2
        if n <= best or n >= top:
            break
    return best, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--seconds", type=float, default=900.0, help="the whole run's budget (soak: what is left)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "triton.json")
    ap.add_argument("--max-streams", type=int, default=512, help="the most streams tried through Triton")
    args = ap.parse_args()
    if args.seconds < 10:
        ap.error("--seconds must be at least 10")
    from cosyedge.builders import build
    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array
    from cosyedge.serve.client import connect
    from cosyedge.serve.server import TritonServer

    t_start = time.monotonic()
    budget = args.seconds
    tmp = Path(tempfile.mkdtemp(prefix="bench-triton-"))
    repo = build_triton(REFERENCE_STREAM_ONNX, tmp, triton_backend="python", max_sequences=args.max_streams,
                        max_batch_size=min(args.max_streams, 256), idle_us=5_000_000)
    engine = build(REFERENCE_STREAM_ONNX, out_dir=tmp)
    x = speech()
    report: dict = {"machine": machine(), "seconds": budget}
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0) as srv:
        report["triton"] = srv.version
        # a. latency, 1 stream
        n = int(min(3000, max(300, 0.1 * budget / 0.002)))
        chunks = [np.ascontiguousarray(x[(k * HOP) % (x.size - HOP):][:HOP]).reshape(1, 1, HOP) for k in range(n)]
        model = connect(srv.grpc_url, "reference")
        with model() as s:
            for c in chunks:
                s.push(c)
            rt = s.latencies_ms[n // 10:]
        with OrtStreamSession(engine / "model.onnx") as s:
            for c in chunks:
                s.push(c)
            loc = s.latencies_ms[n // 10:]
        report["latency_1_stream"] = {
            "chunks": n, "round_trip_p50_ms": float(np.percentile(rt, 50)),
            "round_trip_p99_ms": float(np.percentile(rt, 99)),
            "in_process_p50_ms": float(np.percentile(loc, 50)), "in_process_p99_ms": float(np.percentile(loc, 99)),
            "goal_p50_ms": 2.0}
        print("latency:", report["latency_1_stream"], flush=True)
        # b. streams per core
        t_b = time.monotonic() + 0.4 * budget
        run_s = max(3.0, min(20.0, 0.4 * budget / 8))

        def fits_triton(k):
            r = triton_streams(srv, k, run_s)
            return (r["p99_ms"] is not None and r["p99_ms"] < 1000 * HOP_S and not r["failed_streams"]), r

        n_tri, runs = largest(fits_triton, 1, args.max_streams, t_b)
        best = next((r for r in runs if r["streams"] == n_tri), None)

        def fits_pool(k):
            p99 = pool_tick_p99_ms(engine / "model.onnx", k, 200)
            return p99 < 1000 * HOP_S, {"streams": k, "tick_p99_ms": p99}

        n_pool, pool_runs = largest(fits_pool, 1, 4096, time.monotonic() + 0.1 * budget)
        tri_per_core = n_tri / best["server_cores"] if best and best["server_cores"] else None
        report["streams_per_core"] = {
            "triton_streams": n_tri, "triton_server_cores": best["server_cores"] if best else None,
            "triton_streams_per_core": tri_per_core, "mean_batch": best["mean_batch"] if best else None,
            "in_process_streams_per_core": n_pool, "ratio": tri_per_core / n_pool if tri_per_core and n_pool else None,
            "goal_ratio": 0.5, "triton_runs": runs, "in_process_runs": pool_runs, "run_seconds": run_s}
        print("streams:", {k: v for k, v in report["streams_per_core"].items() if not k.endswith("runs")}, flush=True)
        # c. soak
        soak_s = max(5.0, budget - (time.monotonic() - t_start) - 5)
        clips = [x[o:o + L] for o, L in ((8000, 16000), (60000, 32000), (120000, 48000), (200000, 24000))]
        solo = []
        for c in clips:
            with OrtStreamSession(engine / "model.onnx") as s:
                solo.append(enhance_array(s, c))
        stop = time.monotonic() + soak_s
        stats = {"sequences": 0, "failed": 0, "worst_snr_db": float("inf")}
        lock = threading.Lock()

        def worker(k: int) -> None:
            rng = np.random.default_rng(k)
            while time.monotonic() < stop:
                i = int(rng.integers(len(clips)))
                try:
                    with model() as s:
                        y = enhance_array(s, clips[i])
                    d = y.astype(np.float64) - solo[i]
                    power = (solo[i].astype(np.float64) ** 2).sum()
                    snr = float("inf") if not d.any() else float(10 * np.log10(power / (d ** 2).sum()))
                    with lock:
                        stats["sequences"] += 1
                        stats["worst_snr_db"] = min(stats["worst_snr_db"], snr)
                except Exception:  # noqa: BLE001 - counted
                    with lock:
                        stats["failed"] += 1

        m0 = srv.metrics()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        rss = []
        while time.monotonic() < stop:
            rss.append((round(soak_s - (stop - time.monotonic()), 1), proc_stats([srv.pid])[1]))
            time.sleep(min(5.0, soak_s / 20))
        for t in threads:
            t.join()
        m1 = srv.metrics()
        warm = [r for t, r in rss if t >= soak_s / 5] or [rss[-1][1]]
        report["soak"] = {
            "seconds": soak_s, "concurrent": len(threads), "sequences": stats["sequences"],
            "failed_sequences": stats["failed"],
            "failed_requests": int(m1.get("nv_inference_request_failure", 0)
                                   - m0.get("nv_inference_request_failure", 0)),
            "worst_snr_vs_solo_db": stats["worst_snr_db"], "rss_after_warmup_mib": warm[0] / 2**20,
            "rss_end_mib": warm[-1] / 2**20, "rss_growth_pct": 100 * (max(warm) / warm[0] - 1),
            "rss_samples": [(t, r / 2**20) for t, r in rss], "goal": "10 min, >= 500 sequences, RSS growth <= 5 %"}
        print("soak:", {k: v for k, v in report["soak"].items() if k != "rss_samples"}, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
