#!/usr/bin/env python3
"""Benchmark streaming cost: cosyedge's OrtStreamSession vs RNNoise on the same real speech, same run.

Measures the per-chunk latency (p50/p99, ms; perf_counter around each push) and the real-time factor
(RTF = processing time / audio duration) of a streaming ONNX model through ``OrtStreamSession``
(ONNX Runtime CPU, one thread, chunk 160 samples = 10 ms at 16 kHz), and of RNNoise (pyrnnoise; 48 kHz,
480-sample = 10 ms frames, the same audio resampled) frame by frame. Both are normalised to ms per
10 ms of audio for the ratio. Targets: p50 <= 0.5 ms per 10 ms chunk, RTF <= 0.05, and no slower than
RNNoise (p50 per 10 ms).

Command (a few seconds of audio; the CPU should be otherwise idle for stable numbers)::

    python scripts/bench_stream.py --seconds 5 --json bench.json
    python scripts/bench_stream.py --onnx path/to/model.stream.onnx   # any streaming ONNX

Exit status: 0 (1 with ``--strict`` when a target is missed); 3 when the model is missing; 4 when
pyrnnoise is missing (``--no-rnnoise`` skips it).

Sources: pyrnnoise 0.4.5 ``pyrnnoise/rnnoise.py`` (``create``, ``process_mono_frame``, ``destroy``,
``FRAME_SIZE``, ``SAMPLE_RATE``: int16 frames of 480 samples at 48 kHz); k2-fsa/sherpa-onnx
``online-decode-files.py`` (RTF report).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_AUDIO = REPO / "tests" / "data" / "speech_librivox_0890.wav"
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


def bench_rnnoise(audio: np.ndarray, sample_rate_hz: int, warmup_frames: int) -> dict:
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
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--onnx", type=Path, default=None,
                    help="streaming ONNX (default: bundled cosyedge/models/reference.stream.onnx)")
    ap.add_argument("--seconds", type=float, default=5.0, help="audio to stream (the speech file, looped), s")
    ap.add_argument("--audio", type=Path, default=DEFAULT_AUDIO, help="speech file")
    ap.add_argument("--chunk-samples", type=int, default=160, help="chunk at the model rate, samples")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads")
    ap.add_argument("--warmup", type=int, default=50, help="untimed warm-up chunks/frames")
    ap.add_argument("--no-rnnoise", action="store_true", help="skip the RNNoise baseline")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
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
        ours = bench_cosyedge(onnx_path, audio, args.chunk_samples, args.threads, args.warmup)
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code

    rnn = None
    if not args.no_rnnoise:
        try:
            rnn = bench_rnnoise(audio, contract.sample_rate_hz, args.warmup)
        except ImportError as err:
            print(f"[!] pyrnnoise is not importable ({err}); pip install pyrnnoise, or pass --no-rnnoise",
                  file=sys.stderr)
            return 4

    import onnxruntime

    result = {
        "audio": {"path": str(args.audio), "seconds": audio.size / contract.sample_rate_hz, "looped": True},
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "loadavg_1min": os.getloadavg()[0],
                    "onnxruntime": onnxruntime.__version__, "python": platform.python_version()},
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
    print("targets: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in passed.items()))
    if args.json:
        from cosyedge.artifacts import write_json

        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 1 if args.strict and not passed["all"] else 0


if __name__ == "__main__":
    sys.exit(main())
