#!/usr/bin/env python
"""GPU check: build FP32, FP16, INT8 and INT8 + 2:4-sparse TensorRT engines of the reference model through
the Python API, stream a real recording through each and through ONNX Runtime FP32, and print one table:

    engine | SNR vs ORT FP32 (dB) | max |err| | wall p50/p99 ms (plain) | wall p50/p99 ms (CUDA graph)
           | GPU p50 ms | streams at real time | sparse layers picked/eligible

* SNR: output of the engine vs the ONNX Runtime FP32 stream of the same audio, both streamed chunk by chunk
  with their own carried state (free-running), ``10 log10(sum ref^2 / sum (ref - y)^2)``.
* Latency: per-chunk ``push`` wall time (pinned H2D -> enqueue -> D2H -> sync), batch 1, with and without
  CUDA-graph replay; GPU time from CUDA events.
* Streams at real time: the largest batch B in 1, 2, 4, ..., max batch whose per-chunk p99 wall time
  (CUDA graphs) stays under the chunk duration, i.e. B independent streams each served in real time.

Run on a machine with an NVIDIA GPU, TensorRT, pycuda and cuda-python:

    python scripts/gpu_check.py --engines-dir /tmp/gpu-check --json gpu_check.json

On a machine without them it prints one line naming what is missing and exits with code 4.
INT8 needs the calibration set (``cosyedge calib make``) or ``--calib DIR``; ``--calib-count`` trades
calibration time for accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = [("fp32", False), ("fp16", False), ("int8", False), ("int8", True)]


def snr_db(ref: np.ndarray, y: np.ndarray) -> float:
    """Output SNR (dB) of ``y`` against ``ref`` (same shape, float); inf when identical."""
    err = np.sum((ref.astype(np.float64) - y) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / err))


def time_pushes(session, x: np.ndarray, chunks: int) -> dict:
    """Push ``chunks`` chunks of ``x`` (batch, T) through an active session; wall and GPU ms percentiles."""
    c = session.chunk_samples
    session.reset()
    session.clear_latencies()
    n0 = len(session.gpu_latencies_ms)
    for i in range(chunks):
        j = (i * c) % max(1, x.shape[1] - c)
        session.push(np.ascontiguousarray(x[:, None, j:j + c]))
    wall = session.latencies_ms[-chunks:]
    gpu = session.gpu_latencies_ms[n0:][-chunks:]
    return {"p50_ms": float(np.percentile(wall, 50)), "p99_ms": float(np.percentile(wall, 99)),
            "gpu_p50_ms": float(np.percentile(gpu, 50)) if gpu.size else float("nan")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--onnx", default=None, help="Streaming FP32 ONNX (default: bundled reference model).")
    p.add_argument("--audio", default=str(ROOT / "cosyedge/assets/demo/noisy.wav"), help="Recording to stream.")
    p.add_argument("--engines-dir", default="engines/gpu-check", help="Where the engines are built.")
    p.add_argument("--calib", default=None, help="INT8 calibration folder (default: the calibration set).")
    p.add_argument("--calib-count", type=int, default=2048, help="INT8 calibration utterances.")
    p.add_argument("--max-batch", type=int, default=16, help="Largest batch of the optimization profile.")
    p.add_argument("--chunks", type=int, default=2000, help="Chunks timed per latency measurement.")
    p.add_argument("--only", nargs="*", default=None, help="Subset, e.g. fp32 int8+sparse.")
    p.add_argument("--json", default=None, help="Write the results as JSON here.")
    args = p.parse_args(argv)

    from cosyedge.errors import CosyEdgeError
    from cosyedge.log import LOG

    LOG.configure(0)
    try:
        from cosyedge.runtime.trt import require_stack

        trt, cuda = require_stack("run the GPU check")
        return run(args, trt, cuda)
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code


def run(args, trt, cuda) -> int:
    from cosyedge.artifacts import StreamContract
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.build import build_engine
    from cosyedge.build.trt import load_trt_engine
    from cosyedge.errors import CosyEdgeError
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import stream_array
    from cosyedge.runtime.trt import device_info

    onnx_path = Path(args.onnx or REFERENCE_STREAM_ONNX)
    contract = StreamContract.from_onnx(onnx_path)
    x, sr = load_audio(args.audio)
    xm = to_model_input(x, sr, contract.sample_rate_hz).astype(np.float32)
    chunk_ms = 1000.0 * contract.hop_samples / contract.sample_rate_hz
    with OrtStreamSession(onnx_path) as s:
        ref = stream_array(s, xm)
    gpu = device_info(cuda)
    print(f"TensorRT {trt.__version__} on {gpu['name']} (sm {gpu['compute_capability']}); model {onnx_path.name}, "
          f"chunk {chunk_ms:g} ms, audio {xm.size / contract.sample_rate_hz:.1f} s", flush=True)
    rows = []
    for precision, sparse in CONFIGS:
        label = precision + ("+sparse" if sparse else "")
        if args.only and label not in args.only:
            continue
        row = {"engine": label}
        try:
            t0 = time.perf_counter()
            folder = build_engine(onnx_path, backend="tensorrt", out_dir=args.engines_dir, precision=precision,
                                  sparse=sparse, calib=args.calib, calib_count=args.calib_count)
            row["build_s"] = time.perf_counter() - t0
            eng = load_trt_engine(folder)
            layers = eng.manifest.get("layers", {})
            row["sparse_picked"] = len(layers.get("sparse_picked", []))
            row["sparse_eligible"] = len(layers.get("sparse_eligible", []))
            with eng() as s:
                y = stream_array(s, xm)
            row["snr_db"] = snr_db(ref, y)
            row["max_abs_err"] = float(np.abs(ref - y).max())
            row["finite"] = bool(np.isfinite(y).all())
            x1 = xm[None, :]
            with eng(cuda_graph=False) as s:
                row["plain"] = time_pushes(s, x1, args.chunks)
            with eng(cuda_graph=True) as s:
                row["graph"] = time_pushes(s, x1, args.chunks)
            streams, b = 0, 1
            while b <= min(args.max_batch, int(eng.manifest.get("max_batch", 1))):
                xb = np.repeat(x1, b, axis=0)
                with eng(batch=b, cuda_graph=True) as s:
                    t = time_pushes(s, xb, max(200, args.chunks // 4))
                if t["p99_ms"] > chunk_ms:
                    break
                streams, b = b, b * 2
            row["streams_real_time"] = streams
        except CosyEdgeError as err:
            row["error"] = str(err)
        rows.append(row)
        print(_line(row), flush=True)
    print()
    print(_table(rows, chunk_ms))
    if args.json:
        Path(args.json).write_text(json.dumps({"tensorrt": trt.__version__, "gpu": gpu, "chunk_ms": chunk_ms,
                                               "rows": rows}, indent=2) + "\n")
    return 1 if any("error" in r for r in rows) else 0


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['engine']}: [!] {r['error']}"
    return f"{r['engine']}: SNR {r['snr_db']:.1f} dB, graph p99 {r['graph']['p99_ms']:.3f} ms"


def _table(rows: list, chunk_ms: float) -> str:
    head = ("engine", "SNR dB", "max|err|", "plain p50/p99 ms", "graph p50/p99 ms", "GPU p50 ms",
            f"streams @{chunk_ms:g} ms", "sparse picked/elig.")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append((r["engine"], "error: " + r["error"][:60], "", "", "", "", "", ""))
            continue
        lines.append((r["engine"], f"{r['snr_db']:.1f}", f"{r['max_abs_err']:.2e}",
                      f"{r['plain']['p50_ms']:.3f}/{r['plain']['p99_ms']:.3f}",
                      f"{r['graph']['p50_ms']:.3f}/{r['graph']['p99_ms']:.3f}", f"{r['graph']['gpu_p50_ms']:.3f}",
                      str(r["streams_real_time"]), f"{r['sparse_picked']}/{r['sparse_eligible']}"))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in lines)


if __name__ == "__main__":
    sys.exit(main())
