#!/usr/bin/env python3
"""Soak test: an hour of real audio through the streaming runtime, latency and memory per block, and their slope.

Three soaks, one after the other, each over ``--minutes`` of audio (default 60) cut into blocks of
``--block-minutes`` (default 6, so 10 blocks):

* ``session``: one :class:`~cosyedge.runtime.ort.OrtStreamSession` (the bundled reference, one thread,
  10 ms chunks) pushed back to back: per block the p50/p99 of the per-chunk ``push`` latency (ms) and the
  process's resident memory at the block's end (MiB, ``/proc/self/status`` VmRSS).
* ``pool``: a :class:`~cosyedge.runtime.pool.StreamPool` serving ``--streams`` (32) streams at once, one
  batched run per tick; the same minutes of audio in total, spread over the streams, which come and go as a
  server's do: each stream lasts 5 to 30 s of audio (seeded), then leaves and a new one joins its slot
  (the slot is reset). Per block: p50/p99 tick latency (ms) and RSS.
* ``run``: ``cosyedge run`` on a generated file of ``--minutes`` of 44.1 kHz stereo speech (16-bit WAV,
  written block by block into a temp folder, deleted afterwards) in a child process: its peak RSS (MiB,
  ``RUSAGE_CHILDREN``; target < 200 MiB for an hour) and wall time.

The audio is real speech: the bundled demo recording, repeated (each pool stream starts at another offset).
For every per-block series the JSON gives the least-squares slope per hour, the change it implies over
the whole run, the residual noise (standard deviation around the line) and ``flat``: the change is within
twice the noise, or under 2 % of the series' median (latency) / 8 MiB (RSS); a series that falls is flat (a soak
looks for growth). Run it on an otherwise idle
machine: on a shared CPU the latency noise is larger, not the slope.

Example (about 12 minutes on 2 cores)::

    python scripts/benchmarks/bench_soak.py --json docs/bench/bench_soak.json
Quick check (seconds)::

    python scripts/benchmarks/bench_soak.py --minutes 1 --block-minutes 0.2 --no-run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine

DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
MODEL = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
RUN_RSS_TARGET_MIB = 200.0
FLAT_LATENCY_FRACTION = 0.02
FLAT_RSS_MIB = 8.0


def rss_mib() -> float:
    """Resident memory of this process now, MiB (Linux /proc; ru_maxrss elsewhere)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def speech(rate_hz: int, multiple: int) -> np.ndarray:
    """The demo recording at ``rate_hz``, mono float32, trimmed to a multiple of ``multiple`` samples."""
    import soundfile as sf
    import soxr

    x, sr = sf.read(str(DEMO), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if sr != rate_hz:
        x = soxr.resample(x, sr, rate_hz).astype(np.float32)
    return np.ascontiguousarray(x[: x.size - x.size % multiple])


def trend(values: list[float], block_s: float, flat_abs: float) -> dict:
    """Least-squares line through per-block values: slope per hour, change over the run, residual noise, flat."""
    y = np.asarray(values, np.float64)
    t_h = (np.arange(y.size) + 0.5) * block_s / 3600.0
    if y.size < 3:
        return {"slope_per_hour": None, "change_over_run": None, "noise": None, "flat": None}
    slope, icpt = np.polyfit(t_h, y, 1)
    noise = float(np.std(y - (slope * t_h + icpt), ddof=2))
    change = float(slope * (t_h[-1] - t_h[0]))
    # a soak looks for growth (leaks, drift upward); a series that falls (warm-up fading) is flat
    return {"slope_per_hour": float(slope), "change_over_run": change, "noise": noise,
            "flat": bool(change <= max(2.0 * noise, flat_abs))}


def summarise(blocks: list[dict], block_s: float, what: str) -> dict:
    """Trends of p50, p99 (latency, ms) and RSS (MiB) over ``blocks``."""
    out = {}
    for key in ("p50_ms", "p99_ms"):
        vals = [b[key] for b in blocks]
        out[key] = trend(vals, block_s, FLAT_LATENCY_FRACTION * float(np.median(vals)))
    out["rss_mib"] = trend([b["rss_mib"] for b in blocks], block_s, FLAT_RSS_MIB)
    out["flat"] = all(v["flat"] is not False for v in out.values() if isinstance(v, dict))
    print(f"{what}: " + ", ".join(f"{k} {v['change_over_run']:+.4g} over the run (noise {v['noise']:.3g})"
                                  for k, v in out.items() if isinstance(v, dict) and v["noise"] is not None)
          + f" -> {'flat' if out['flat'] else 'NOT flat'}", flush=True)
    return out


def soak_session(minutes: float, block_minutes: float) -> dict:
    """One OrtStreamSession, back to back, for ``minutes`` of audio."""
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(MODEL, threads=1) as s:
        c, sr = s.chunk_samples, s.contract.sample_rate_hz
        x = speech(sr, c).reshape(-1, 1, 1, c)
        per_block = int(round(block_minutes * 60 * sr / c))
        n_blocks = int(round(minutes / block_minutes))
        blocks, k, t0 = [], 0, time.perf_counter()
        for b in range(n_blocks):
            s.clear_latencies()
            for _ in range(per_block):
                s.push(x[k % x.shape[0]], copy=False)  # output unused: no copy
                k += 1
            lat = s.latencies_ms
            blocks.append({"block": b, "chunks": int(lat.size), "p50_ms": float(np.percentile(lat, 50)),
                           "p99_ms": float(np.percentile(lat, 99)), "rss_mib": round(rss_mib(), 2)})
            print(f"session block {b}: p50 {blocks[-1]['p50_ms']:.4f} ms p99 {blocks[-1]['p99_ms']:.4f} ms rss "
                  f"{blocks[-1]['rss_mib']:.1f} MiB", flush=True)
        wall = time.perf_counter() - t0
    return {"chunk_ms": 1000.0 * c / sr, "chunks": k, "audio_s": k * c / sr, "wall_s": round(wall, 1),
            "blocks": blocks, "trend": summarise(blocks, block_minutes * 60, "session")}


def soak_pool(minutes: float, block_minutes: float, streams: int, seed: int = 0) -> dict:
    """A StreamPool with ``streams`` streams at once, joining and leaving, ``minutes`` of audio in total."""
    from cosyedge.runtime.pool import StreamPool

    rng = np.random.default_rng(seed)
    with StreamPool(MODEL, max_streams=streams, threads=1) as pool:
        c, sr = pool.chunk_samples, pool.contract.sample_rate_hz
        x = speech(sr, c).reshape(-1, c)
        ticks_per_block = int(round(block_minutes * 60 * sr / c / streams))
        n_blocks = int(round(minutes / block_minutes))

        def new_stream():
            return {"id": pool.join(), "pos": int(rng.integers(x.shape[0])),
                    "left": int(rng.uniform(5.0, 30.0) * sr / c)}

        live = [new_stream() for _ in range(streams)]
        blocks, done, joined, t0 = [], 0, streams, time.perf_counter()
        for b in range(n_blocks):
            pool.clear_latencies()
            for _ in range(ticks_per_block):
                out = pool.push({st["id"]: x[st["pos"] % x.shape[0]] for st in live})
                assert len(out) == len(live)
                done += len(live)
                for i, st in enumerate(live):
                    st["pos"] += 1
                    st["left"] -= 1
                    if st["left"] <= 0:  # the stream ends; a new caller takes the slot
                        pool.leave(st["id"])
                        live[i] = new_stream()
                        joined += 1
            lat = pool.tick_latencies_ms
            blocks.append({"block": b, "ticks": int(lat.size), "p50_ms": float(np.percentile(lat, 50)),
                           "p99_ms": float(np.percentile(lat, 99)), "rss_mib": round(rss_mib(), 2),
                           "streams_started": joined})
            print(f"pool block {b}: tick p50 {blocks[-1]['p50_ms']:.3f} ms p99 {blocks[-1]['p99_ms']:.3f} ms rss "
                  f"{blocks[-1]['rss_mib']:.1f} MiB, {joined} streams so far", flush=True)
        wall = time.perf_counter() - t0
    if joined == streams:
        print(f"pool: no stream ended ({minutes * 60 / streams:.1f} s of audio per slot, streams last 5-30 s): "
              f"the joins and leaves were not exercised; give more --minutes", flush=True)
    return {"streams_at_once": streams, "streams_started": joined, "churn": joined > streams,
            "chunk_ms": 1000.0 * c / sr,
            "chunks": done, "audio_s": done * c / sr, "wall_s": round(wall, 1),
            "stream_length_s": [5.0, 30.0], "blocks": blocks, "trend": summarise(blocks, block_minutes * 60, "pool")}


def soak_run(minutes: float) -> dict:
    """``cosyedge run`` on a generated ``minutes``-long 44.1 kHz stereo WAV: the child's peak RSS and time."""
    import soundfile as sf

    rate = 44100
    x = speech(rate, 1)
    st = np.stack([x, 0.5 * x[::-1]], axis=1)
    n = int(minutes * 60 * rate)
    with tempfile.TemporaryDirectory(prefix="cosyedge-soak-") as tmp:
        src, dst = Path(tmp) / "long.wav", Path(tmp) / "out.wav"
        with sf.SoundFile(str(src), "w", rate, 2, subtype="PCM_16") as f:
            written = 0
            while written < n:
                k = min(st.shape[0], n - written)
                f.write(st[:k])
                written += k
        env = dict(os.environ, COSYEDGE_ENGINES_DIR=str(Path(tmp) / "engines"))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "run", "-q", "--engine", str(MODEL),
                               str(src), "-o", str(dst)], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
        info = sf.info(str(dst)) if proc.returncode == 0 else None
    result = {"input": f"{minutes:g} min, {rate} Hz stereo PCM_16 WAV", "exit_code": proc.returncode,
              "wall_s": round(wall, 1), "peak_rss_mib": round(peak, 1), "target_peak_rss_mib": RUN_RSS_TARGET_MIB,
              "met": peak < RUN_RSS_TARGET_MIB and proc.returncode == 0,
              "output_frames": info.frames if info else None, "input_frames": n, "report": proc.stdout.strip()}
    print(f"run: {result['input']} in {wall:.0f} s, peak RSS {peak:.1f} MiB (target < {RUN_RSS_TARGET_MIB:g})"
          + ("" if proc.returncode == 0 else f", exit {proc.returncode}: {proc.stderr.strip()[-300:]}"), flush=True)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="minutes of audio per soak")
    ap.add_argument("--block-minutes", type=float, default=6.0, help="minutes of audio per reported block")
    ap.add_argument("--streams", type=int, default=32, help="StreamPool streams at once")
    ap.add_argument("--no-run", action="store_true", help="skip the cosyedge run soak")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if not 0 < args.block_minutes <= args.minutes:
        ap.error("--block-minutes must be in (0, --minutes]")

    result = {"benchmark": "soak", "model": str(MODEL.relative_to(ROOT)), "minutes": args.minutes,
              "block_minutes": args.block_minutes,
              "flat_rule": f"slope x run <= max(2 x residual noise, {FLAT_LATENCY_FRACTION:.0%} of the median "
                           f"latency or {FLAT_RSS_MIB:g} MiB RSS) (growth only)"}
    result["session"] = soak_session(args.minutes, args.block_minutes)
    result["pool"] = soak_pool(args.minutes, args.block_minutes, args.streams)
    result["run"] = soak_run(args.minutes) if not args.no_run else {"skipped": "--no-run"}
    result["machine"] = machine()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
