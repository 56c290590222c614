#!/usr/bin/env python3
"""Benchmark streaming cost: cosyedge's OrtStreamSession vs RNNoise on the same real speech, same run.

Measures the per-chunk latency (p50/p99, ms; perf_counter around each push) and the real-time factor
(RTF = processing time / audio duration) of a streaming ONNX model through ``OrtStreamSession``
(ONNX Runtime CPU, one thread, chunk 160 samples = 10 ms at 16 kHz), and of RNNoise (pyrnnoise; 48 kHz,
480-sample = 10 ms frames, the same audio resampled) frame by frame. Both are normalised to ms per
10 ms of audio for the ratio. Targets: p50 <= 0.5 ms per 10 ms chunk, RTF <= 0.05, and no slower than
RNNoise (p50 per 10 ms).

Paced (``--paced-seconds``, default 5 s, both engines, same run): each chunk/frame is pushed at its
real-time deadline (sleep until ``t0 + k x 10 ms``), as a live stream's worker gets them, instead of back
to back. Between two chunks the core idles about 9 ms, so caches and clocks are no longer warm: on a
virtual machine the per-chunk time can be several times the tight-loop one, for any model. Reported as
``paced`` (p50/p99, deadlines missed, ratio); the targets stay on the tight loop.

Push copy (``--push-copy-json FILE``, only this measurement): what ``push`` returning arrays the caller owns
(the default, a copy of each output) costs beside ``push(x, copy=False)`` (the session's reused buffers), one
session, the same chunks, interleaved rounds (ABBA order), per-push wall time (perf_counter around the call),
medians (``docs/bench/push_copy.json``).

Command (a few seconds of audio; the CPU should be otherwise idle for stable numbers)::

    python scripts/benchmarks/bench_stream.py --seconds 5 --json bench.json
    python scripts/benchmarks/bench_stream.py --onnx path/to/model.stream.onnx   # any streaming ONNX
    python scripts/benchmarks/bench_stream.py --push-copy-json docs/bench/push_copy.json   # owned outputs vs copy=False

Exit status: 0 (1 with ``--strict`` when a target is missed); 3 when the model is missing; 4 when
pyrnnoise is missing (``--no-rnnoise`` skips it).

Sources: pyrnnoise 0.4.5 ``pyrnnoise/rnnoise.py`` (``create``, ``process_mono_frame``, ``destroy``,
``FRAME_SIZE``, ``SAMPLE_RATE``: int16 frames of 480 samples at 48 kHz); k2-fsa/sherpa-onnx
``online-decode-files.py`` (RTF report).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine
DEFAULT_AUDIO = ROOT / "tests" / "data" / "speech_librivox_0890.wav"
TARGET_P50_MS = 0.5
TARGET_RTF = 0.05
TARGET_RATIO_VS_RNNOISE = 1.0


def percentiles(ms: np.ndarray) -> dict:
    return {"latency_ms_p50": float(np.percentile(ms, 50)), "latency_ms_p99": float(np.percentile(ms, 99)),
            "latency_ms_mean": float(ms.mean()), "latency_ms_max": float(ms.max())}


def looped(x: np.ndarray, n: int) -> np.ndarray:
    reps = -(-n // x.size)
    return np.tile(x, reps)[:n].astype(np.float32)


def bench_cosyedge(onnx_path: Path, audio: np.ndarray, chunk_samples: int, threads: int, warmup_chunks: int) -> dict:
    from cosyedge.artifacts import sha256_file
    from cosyedge.runtime import OrtStreamSession, stream_array

    session = OrtStreamSession(onnx_path, chunk_samples=chunk_samples, threads=threads)
    c = session.contract
    with session:
        zero = np.zeros((1, 1, chunk_samples), np.float32)
        for _ in range(warmup_chunks):
            session.push(zero)
        session.clear_latencies()
        y, st = stream_array(session, audio, return_stats=True)
        lat = session.latencies_ms[-st.chunks:]
    chunk_ms = 1000.0 * chunk_samples / c.sample_rate_hz
    out = {
        "model": str(onnx_path), "model_sha256": sha256_file(onnx_path), "name": c.name,
        "sample_rate_hz": c.sample_rate_hz, "chunk_samples": chunk_samples, "chunk_ms": chunk_ms,
        "delay_samples": c.delay_samples, "threads": threads, "chunks": st.chunks,
        "duration_s": st.duration_s, "elapsed_s": st.elapsed_s, "rtf": st.rtf, **percentiles(lat),
        "output_finite": bool(np.isfinite(y).all()),
    }
    out["ms_per_10ms_p50"] = out["latency_ms_p50"] * 10.0 / chunk_ms
    out["ms_per_10ms_p99"] = out["latency_ms_p99"] * 10.0 / chunk_ms
    return out


def paced_latencies(step, n: int, period_s: float) -> tuple[np.ndarray, int]:
    """Call ``step(i)`` for i < n, each at its deadline ``t0 + (i + 1) x period_s`` (sleeping until then, as a
    live stream's worker waits for audio); return the per-call times (ms, float64 (n,)) and how many calls
    started late (the previous one overran its period)."""
    lat = np.empty(n, np.float64)
    late = 0
    t_next = time.perf_counter()
    for i in range(n):
        t_next += period_s
        wait = t_next - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        else:
            late += 1
        t = time.perf_counter()
        step(i)
        lat[i] = (time.perf_counter() - t) * 1000.0
    return lat, late


def paced_summary(lat: np.ndarray, late: int, period_ms: float) -> dict:
    """p50/p99/mean/max (ms) of paced calls, plus ``late`` and the ms per 10 ms at p50/p99."""
    out = {**percentiles(lat), "calls": int(lat.size), "late": int(late), "period_ms": period_ms}
    out["ms_per_10ms_p50"] = out["latency_ms_p50"] * 10.0 / period_ms
    out["ms_per_10ms_p99"] = out["latency_ms_p99"] * 10.0 / period_ms
    return out


def bench_cosyedge_paced(onnx_path: Path, audio: np.ndarray, chunk_samples: int, threads: int,
                         warmup_chunks: int, seconds: float) -> dict:
    """The model pushed at real-time pace (one chunk per chunk duration) on ``seconds`` of ``audio``."""
    from cosyedge.runtime import OrtStreamSession

    session = OrtStreamSession(onnx_path, chunk_samples=chunk_samples, threads=threads)
    sr = session.contract.sample_rate_hz
    n = min(audio.size // chunk_samples, int(round(seconds * sr / chunk_samples)))
    chunks = audio[: n * chunk_samples].reshape(n, 1, 1, chunk_samples)
    with session:
        zero = np.zeros((1, 1, chunk_samples), np.float32)
        for _ in range(warmup_chunks):
            session.push(zero)
        lat, late = paced_latencies(lambda i: session.push(chunks[i], copy=False), n, chunk_samples / sr)
    return paced_summary(lat, late, 1000.0 * chunk_samples / sr)


def bench_push_copy(onnx_path: Path, audio: np.ndarray, chunk_samples: int, threads: int, warmup_chunks: int,
                    rounds: int, chunks_per_round: int) -> dict:
    """Per-push wall time with owned outputs (``push(x)``, the default) vs the opt-in ``push(x, copy=False)``.

    One session; every round pushes the same ``chunks_per_round`` chunks of ``audio`` from a reset state once in
    each mode, in ABBA order (round r starts with the owned mode when r is even), so drift and cache state hit both
    modes alike. Each call is timed with perf_counter (Python overhead included, as a caller sees it).

    Returns:
        dict: per mode the median, p99 and mean per push (ms, over every push of every round) and the per-round
        medians; the median of the per-round differences (owned - reuse, us) and the ratio of the medians; the
        cost of ``y.copy()`` alone on an output-shaped array (us, median of ``timeit`` repeats).
    """
    import timeit

    from cosyedge.runtime import OrtStreamSession

    session = OrtStreamSession(onnx_path, chunk_samples=chunk_samples, threads=threads)
    n = min(chunks_per_round, audio.size // chunk_samples)
    chunks = np.ascontiguousarray(audio[: n * chunk_samples].reshape(n, 1, 1, chunk_samples))
    times = {"owned": [], "reuse": []}
    with session:
        name = session.contract.output
        for i in range(warmup_chunks):
            session.push(chunks[i % n], copy=bool(i % 2))
        for r in range(rounds):
            order = ("owned", "reuse") if r % 2 == 0 else ("reuse", "owned")
            for mode in order:
                copy = mode == "owned"
                session.reset()
                lat = np.empty(n, np.float64)
                for i in range(n):
                    t = time.perf_counter()
                    session.push(chunks[i], copy=copy)
                    lat[i] = (time.perf_counter() - t) * 1000.0
                times[mode].append(lat)
        y = session.push(chunks[0], copy=False)[name]
        reps = timeit.Timer(y.copy).repeat(repeat=7, number=10000)
        copy_us = float(np.median(reps)) / 10000 * 1e6

    def summary(mode: str) -> dict:
        all_ms = np.concatenate(times[mode])
        return {"median_ms": float(np.median(all_ms)), "p99_ms": float(np.percentile(all_ms, 99)),
                "mean_ms": float(all_ms.mean()), "pushes": int(all_ms.size),
                "round_medians_ms": [round(float(np.median(x)), 5) for x in times[mode]]}

    owned, reuse = summary("owned"), summary("reuse")
    diffs_us = [1000.0 * (float(np.median(a)) - float(np.median(b))) for a, b in zip(times["owned"], times["reuse"])]
    return {"model": str(onnx_path), "chunk_samples": chunk_samples, "output_shape": list(y.shape),
            "output_dtype": str(y.dtype), "threads": threads, "rounds": rounds, "chunks_per_round": n,
            "order": "ABBA (even rounds owned first)", "timer": "perf_counter around each push call",
            "owned": owned, "reuse": reuse,
            "median_diff_us": float(np.median(diffs_us)), "round_diffs_us": [round(d, 3) for d in diffs_us],
            "ratio_owned_over_reuse": owned["median_ms"] / reuse["median_ms"],
            "copy_alone_us": copy_us}


def bench_rnnoise(audio: np.ndarray, sample_rate_hz: int, warmup_frames: int,
                  paced_seconds: float = 0.0) -> dict:
    import soxr
    from pyrnnoise.rnnoise import FRAME_SIZE, SAMPLE_RATE, create, destroy, process_mono_frame

    x48 = soxr.resample(audio, sample_rate_hz, SAMPLE_RATE, quality="HQ")
    pcm = (np.clip(x48, -1.0, 1.0) * 32767.0).astype(np.int16)
    frames = pcm.size // FRAME_SIZE
    pcm = pcm[: frames * FRAME_SIZE].reshape(frames, FRAME_SIZE)
    state = create()
    try:
        for i in range(min(warmup_frames, frames)):
            process_mono_frame(state, pcm[i])
    finally:
        destroy(state)
    state = create()  # fresh state for the timed pass, like the reset of our session
    lat = np.empty(frames, np.float64)
    try:
        t0 = time.perf_counter()
        for i in range(frames):
            t = time.perf_counter()
            process_mono_frame(state, pcm[i])
            lat[i] = (time.perf_counter() - t) * 1000.0
        elapsed = time.perf_counter() - t0
    finally:
        destroy(state)
    duration = frames * FRAME_SIZE / SAMPLE_RATE
    frame_ms = 1000.0 * FRAME_SIZE / SAMPLE_RATE
    out = {"impl": "pyrnnoise.rnnoise.process_mono_frame (ctypes, int16 in/out, one state)",
           "sample_rate_hz": SAMPLE_RATE, "frame_samples": FRAME_SIZE, "frame_ms": frame_ms, "frames": frames,
           "duration_s": duration, "elapsed_s": elapsed, "rtf": elapsed / duration, **percentiles(lat)}
    out["ms_per_10ms_p50"] = out["latency_ms_p50"] * 10.0 / frame_ms
    out["ms_per_10ms_p99"] = out["latency_ms_p99"] * 10.0 / frame_ms
    if paced_seconds > 0:
        n = min(frames, int(round(paced_seconds * SAMPLE_RATE / FRAME_SIZE)))
        state = create()
        try:
            for i in range(min(warmup_frames, frames)):
                process_mono_frame(state, pcm[i])
            lat, late = paced_latencies(lambda i: process_mono_frame(state, pcm[i]), n, FRAME_SIZE / SAMPLE_RATE)
        finally:
            destroy(state)
        out["paced"] = paced_summary(lat, late, frame_ms)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--onnx", type=Path, default=None,
                    help="streaming ONNX (default: bundled cosyedge/models/reference.stream.onnx)")
    ap.add_argument("--seconds", type=float, default=5.0, help="audio to stream (the speech file, looped), s")
    ap.add_argument("--audio", type=Path, default=DEFAULT_AUDIO, help="speech file")
    ap.add_argument("--chunk-samples", type=int, default=None,
                    help="chunk at the model rate, samples (default: one hop of the model, 10 ms for the reference)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads")
    ap.add_argument("--warmup", type=int, default=50, help="untimed warm-up chunks/frames")
    ap.add_argument("--no-rnnoise", action="store_true", help="skip the RNNoise baseline")
    ap.add_argument("--paced-seconds", type=float, default=5.0,
                    help="also push this much audio at real-time pace (one chunk per 10 ms), s; 0: skip")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--push-copy-json", type=Path, default=None,
                    help="only measure push with owned outputs vs push(copy=False) and write it here")
    ap.add_argument("--push-copy-rounds", type=int, default=20, help="interleaved rounds of the push-copy measurement")
    ap.add_argument("--push-copy-chunks", type=int, default=300, help="pushes per mode per round (push-copy)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)

    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.errors import CosyEdgeError
    from cosyedge.models import REFERENCE_STREAM_ONNX

    onnx_path = args.onnx or Path(REFERENCE_STREAM_ONNX)
    if not onnx_path.is_file():
        print(f"[!] model not found: {onnx_path} (the bundled reference is built by the training/export step; "
              f"pass --onnx MODEL.stream.onnx)", file=sys.stderr)
        return 3
    try:
        from cosyedge.artifacts import StreamContract

        contract = StreamContract.from_onnx(onnx_path)
        x, sr = load_audio(args.audio)
        speech = to_model_input(x, sr, contract.sample_rate_hz)
        audio = looped(speech, int(round(args.seconds * contract.sample_rate_hz)))
        args.chunk_samples = args.chunk_samples or contract.hop_samples
        if args.push_copy_json:
            return push_copy_main(args, onnx_path, audio, contract)
        ours = bench_cosyedge(onnx_path, audio, args.chunk_samples, args.threads, args.warmup)
        if args.paced_seconds > 0:
            ours["paced"] = bench_cosyedge_paced(onnx_path, audio, args.chunk_samples, args.threads, args.warmup,
                                                 args.paced_seconds)
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code

    rnn = None
    if not args.no_rnnoise:
        try:
            rnn = bench_rnnoise(audio, contract.sample_rate_hz, args.warmup, args.paced_seconds)
        except ImportError as err:
            print(f"[!] pyrnnoise is not importable ({err}); pip install pyrnnoise, or pass --no-rnnoise",
                  file=sys.stderr)
            return 4

    result = {
        "audio": {"path": str(args.audio), "seconds": audio.size / contract.sample_rate_hz, "looped": True},
        "machine": machine(),
        "cosyedge": ours,
        "rnnoise": rnn,
        "targets": {"latency_ms_p50_max": TARGET_P50_MS, "rtf_max": TARGET_RTF,
                    "ratio_vs_rnnoise_max": TARGET_RATIO_VS_RNNOISE},
    }
    passed = {"latency_p50": ours["latency_ms_p50"] <= TARGET_P50_MS, "rtf": ours["rtf"] <= TARGET_RTF}
    if rnn is not None:
        result["ratio_vs_rnnoise"] = {
            "p50_per_10ms": ours["ms_per_10ms_p50"] / rnn["ms_per_10ms_p50"],
            "p99_per_10ms": ours["ms_per_10ms_p99"] / rnn["ms_per_10ms_p99"],
            "rtf": ours["rtf"] / rnn["rtf"],
        }
        if "paced" in ours and "paced" in rnn:
            result["ratio_vs_rnnoise"]["paced_p50_per_10ms"] = (ours["paced"]["ms_per_10ms_p50"]
                                                                / rnn["paced"]["ms_per_10ms_p50"])
            result["ratio_vs_rnnoise"]["paced_p99_per_10ms"] = (ours["paced"]["ms_per_10ms_p99"]
                                                                / rnn["paced"]["ms_per_10ms_p99"])
        passed["vs_rnnoise"] = result["ratio_vs_rnnoise"]["p50_per_10ms"] <= TARGET_RATIO_VS_RNNOISE
    passed["all"] = all(passed.values())
    result["pass"] = passed

    print(f"audio: {result['audio']['seconds']:.2f} s of {args.audio.name} (looped); load avg "
          f"{result['machine']['loadavg_1min']:.2f} on {os.cpu_count()} CPUs")
    print(f"cosyedge {ours['name']} ({onnx_path.name}): chunk {ours['chunk_samples']} samples "
          f"({ours['chunk_ms']:g} ms), {ours['threads']} thread(s): p50 {ours['latency_ms_p50']:.4f} ms, "
          f"p99 {ours['latency_ms_p99']:.4f} ms, RTF {ours['rtf']:.4f}")
    if rnn is not None:
        r = result["ratio_vs_rnnoise"]
        print(f"rnnoise: frame {rnn['frame_samples']} samples at {rnn['sample_rate_hz']} Hz "
              f"({rnn['frame_ms']:g} ms): p50 {rnn['latency_ms_p50']:.4f} ms, p99 {rnn['latency_ms_p99']:.4f} ms, "
              f"RTF {rnn['rtf']:.4f}")
        print(f"ratio cosyedge/rnnoise per 10 ms: p50 {r['p50_per_10ms']:.3f}, p99 {r['p99_per_10ms']:.3f}, "
              f"RTF {r['rtf']:.3f}")
    if "paced" in ours:
        pc = ours["paced"]
        line = (f"paced (one chunk per {pc['period_ms']:g} ms, {pc['calls']} chunks): cosyedge p50 "
                f"{pc['latency_ms_p50']:.4f} ms, p99 {pc['latency_ms_p99']:.4f} ms, {pc['late']} late")
        if rnn is not None and "paced" in rnn:
            pr, r = rnn["paced"], result["ratio_vs_rnnoise"]
            line += (f"; rnnoise p50 {pr['latency_ms_p50']:.4f} ms, p99 {pr['latency_ms_p99']:.4f} ms, "
                     f"{pr['late']} late; ratio p50 {r['paced_p50_per_10ms']:.3f}, p99 {r['paced_p99_per_10ms']:.3f}")
        print(line)
    print("targets: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in passed.items()))
    if args.json:
        from cosyedge.artifacts import write_json

        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 1 if args.strict and not passed["all"] else 0


def push_copy_main(args, onnx_path: Path, audio: np.ndarray, contract) -> int:
    """``--push-copy-json``: measure :func:`bench_push_copy`, print one line, write the JSON."""
    from cosyedge.artifacts import write_json

    res = bench_push_copy(onnx_path, audio, args.chunk_samples, args.threads, args.warmup, args.push_copy_rounds,
                          args.push_copy_chunks)
    result = {"audio": {"path": str(args.audio), "seconds": audio.size / contract.sample_rate_hz, "looped": True},
              "machine": machine(), "push_copy": res}
    print(f"push {onnx_path.name}, {res['rounds']} rounds x {res['chunks_per_round']} pushes per mode: owned "
          f"median {res['owned']['median_ms'] * 1000:.2f} us, copy=False {res['reuse']['median_ms'] * 1000:.2f} us, "
          f"difference {res['median_diff_us']:.2f} us (ratio {res['ratio_owned_over_reuse']:.4f}); y.copy() alone "
          f"{res['copy_alone_us']:.2f} us")
    write_json(args.push_copy_json, result)
    print(f"wrote {args.push_copy_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
