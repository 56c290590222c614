#!/usr/bin/env python3
"""Benchmark precision variants of a streaming model on ONNX Runtime CPU: FP32 vs FP16 vs INT8, same run.

For each variant (FP32 = the input streaming ONNX; FP16 from :func:`cosyedge.precision.fp16.fp16_onnx`;
INT8 Q/DQ from ``cosyedge.precision.int8.int8_onnx`` when that module is present; with ``--sparse`` also
the 2:4-pruned FP32 and INT8+2:4 models) the same real speech is streamed through an
:class:`~cosyedge.runtime.ort.OrtStreamSession` (one thread by default, chunk = one hop), in
``--rounds`` interleaved rounds so background load hits every variant alike. Reported per variant:
per-chunk latency p50/p99/mean (ms, perf_counter around each push), RTF, the ratio to FP32
(``fp32_p50 / variant_p50``: > 1 is faster), and the output SNR vs the FP32 streaming output (dB).
Target (issue 4): INT8 at least 1.3x faster than FP32 at p50.

Commands (short audio; keep the CPU otherwise idle for stable numbers)::

    python scripts/benchmarks/bench_precision.py --seconds 5 --json bench_precision.json
    python scripts/benchmarks/bench_precision.py --int8-onnx model.int8.onnx       # a prebuilt INT8 model
    python scripts/benchmarks/bench_precision.py --calib calib --sparse            # INT8 from this calibration set

Without ``--int8-onnx`` the INT8 model is made with the default calibration set (``$COSYEDGE_CALIB_DIR``
or ``./calib``; made, 2048 utterances, when missing: minutes) or ``--calib DIR``; the amax cache is reused
when it matches. ``--no-int8`` skips INT8.

Q/DQ placements side by side (issue 40: which INT8 pays on ONNX Runtime x86 CPU)::

    python scripts/benchmarks/bench_precision.py --onnx m.stream.onnx --placements trt,ort_matmul --bias-correction \
        --amax calib/m.amax.json --no-fp16 --json docs/bench/bench_precision_int8_ort.json

makes one INT8 model per placement (``int8-<placement>``; with ``--bias-correction`` also ``int8-ort_matmul-bc``)
from one amax cache and prints, per variant, p50, the ratio to FP32, the SNR vs FP32 and ONNX Runtime's fused /
unfused counts and quantized MAC share (:func:`cosyedge.precision.ort_fusion.ort_fusion_report`).

The placement ``default`` is what ``cosyedge build --int8`` gives an ONNX Runtime engine with no
``--int8-placement`` (:func:`cosyedge.builders.names.default_placement`: ``ort_matmul``, or ``trt`` for a model
with Scan bodies or one where ort_matmul finds nothing of its form), reported as ``int8-default``::

    python scripts/benchmarks/bench_precision.py --onnx m.stream.onnx --placements default,trt --no-fp16

``--chunk-samples`` times chunks of several hops (the p50 is then per chunk; divide by the hops for per hop).

Exit status: 0 (1 with ``--strict`` when the INT8 speed target is missed); 3 when the model is missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine
DEFAULT_AUDIO = ROOT / "tests" / "data" / "speech_librivox_0890.wav"
TARGET_INT8_SPEEDUP = 1.3


def stream(session, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stream x (T,) through an active session from zero state; return (output (T,), latencies ms)."""
    from cosyedge.runtime import stream_array

    session.clear_latencies()
    y, st = stream_array(session, x, return_stats=True)
    return y, session.latencies_ms[-st.chunks:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--onnx", type=Path, default=None, help="streaming FP32 ONNX (default: bundled reference)")
    ap.add_argument("--audio", type=Path, default=DEFAULT_AUDIO, help="real speech to stream")
    ap.add_argument("--seconds", type=float, default=5.0, help="audio per round (the file is looped or cut)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    ap.add_argument("--chunk-samples", type=int, default=None, help="default: one hop")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=50, help="zero chunks pushed before timing")
    ap.add_argument("--int8-onnx", type=Path, default=None, help="prebuilt INT8 Q/DQ streaming ONNX")
    ap.add_argument("--calib", type=Path, default=None, help="calibration set folder for INT8")
    ap.add_argument("--no-int8", action="store_true", help="skip INT8")
    ap.add_argument("--no-fp16", action="store_true", help="skip FP16")
    ap.add_argument("--min-snr", type=float, default=None,
                    help="with --placements: also one variant per placement built with --int8-min-snr this (dB)")
    ap.add_argument("--placements", default=None,
                    help="comma-separated Q/DQ placements (trt, ort, ort_matmul, default: what 'cosyedge build "
                         "--int8' picks for ONNX Runtime): one INT8 variant each")
    ap.add_argument("--bias-correction", action="store_true", help="with ort_matmul: also the bias-corrected model")
    ap.add_argument("--amax", type=Path, default=None, help="amax cache of the model (skips calibration)")
    ap.add_argument("--sparse", action="store_true", help="also the 2:4-pruned FP32 and INT8 models (no fine-tune)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when INT8 misses the 1.3x target")
    args = ap.parse_args(argv)

    from cosyedge.artifacts import StreamContract, sha256_file
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.errors import CosyEdgeError, UsageError
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.precision.fp16 import fp16_onnx
    from cosyedge.runtime import OrtStreamSession

    src = args.onnx or Path(REFERENCE_STREAM_ONNX)
    if not src.is_file():
        print(f"[!] model not found: {src}", file=sys.stderr)
        return 3
    tmp = Path(tempfile.mkdtemp(prefix="bench-precision-"))
    notes: dict = {}
    try:
        contract = StreamContract.from_onnx(src)
        x, sr = load_audio(args.audio)
        speech = to_model_input(x, sr, contract.sample_rate_hz)
        n = int(round(args.seconds * contract.sample_rate_hz))
        audio = np.resize(speech, n).astype(np.float32)
        variants: dict[str, Path] = {"fp32": src}
        if not args.no_fp16:
            t = time.perf_counter()
            fp16_onnx(src, tmp / "fp16.onnx")
            notes["fp16_build_s"] = time.perf_counter() - t
            variants["fp16"] = tmp / "fp16.onnx"
        if args.sparse:
            from cosyedge.precision.sparsity import sparsify_onnx

            sparsify_onnx(src, tmp / "fp32-sparse.onnx")
            variants["fp32-sparse"] = tmp / "fp32-sparse.onnx"
        fusion: dict = {}
        if args.placements and not args.no_int8:
            from cosyedge.precision.int8 import int8_onnx

            runs = [(p.strip(), False, None) for p in args.placements.split(",") if p.strip()]
            if args.bias_correction and ("ort_matmul", False, None) in runs:
                runs.append(("ort_matmul", True, None))
            if args.min_snr is not None:
                runs += [(pl, False, args.min_snr) for pl, bc, _ in list(runs) if not bc]
            for pl, bc, min_snr in runs:
                key = f"int8-{pl}" + ("-bc" if bc else "") + (f"-minsnr{min_snr:g}" if min_snr is not None else "")
                fallback = None
                if pl == "default":  # what a plain 'cosyedge build --int8' gives an ONNX Runtime engine
                    from cosyedge.builders.names import default_placement

                    pl, why = default_placement("onnxruntime", src)
                    fallback = "trt" if pl == "ort_matmul" else None
                    notes[f"{key}_placement"] = pl + (f" ({why})" if why else "")
                t = time.perf_counter()
                try:
                    info = int8_onnx(src, tmp / f"{key}.onnx", calib=args.calib, amax=args.amax, placement=pl,
                                     bias_correction=bc, min_snr_db=min_snr, fallback_placement=fallback)
                except UsageError as err:  # e.g. ort_matmul asked of a Scan-body model: that variant is skipped
                    notes[key] = f"skipped: {err}"
                    print(f"{key} {notes[key]}", file=sys.stderr)
                    continue
                notes[f"{key}_build_s"] = time.perf_counter() - t
                fusion[key] = {"placement": info["placement"], "fused": info["ort_fusion"]["fused"],
                               "unfused_weighted": len(info["ort_fusion"]["unfused_weighted"]),
                               "qdq_left": info["ort_fusion"]["qdq_left"],
                               "fused_mac_share": info["ort_fusion"]["fused_mac_share"],
                               "quantized_mac_share": info["macs"]["share"],
                               "quantized_nodes": len(info["quantized_nodes"]),
                               "kept_float": info["excluded_nodes"],
                               "demo_snr_db": info["output_snr_db"]}
                variants[key] = tmp / f"{key}.onnx"
        elif not args.no_int8:
            if args.int8_onnx is not None:
                variants["int8"] = args.int8_onnx
            else:
                try:
                    from cosyedge.precision.int8 import int8_onnx
                except CosyEdgeError as err:
                    notes["int8"] = f"skipped: {err}"
                    print(f"INT8 {notes['int8']}", file=sys.stderr)
                else:
                    t = time.perf_counter()
                    info = int8_onnx(src, tmp / "int8.onnx", calib=args.calib)
                    notes["int8_build_s"] = time.perf_counter() - t
                    notes["int8_calibration"] = {k: info.get(k) for k in (
                        "calibration_manifest_sha256", "calibration_utterances", "amax_path")}
                    variants["int8"] = tmp / "int8.onnx"
                    if args.sparse:
                        int8_onnx(variants["fp32-sparse"], tmp / "int8-sparse.onnx", calib=args.calib)
                        variants["int8-sparse"] = tmp / "int8-sparse.onnx"

        chunk = args.chunk_samples or contract.hop_samples
        sessions = {k: OrtStreamSession(p, chunk_samples=chunk, threads=args.threads) for k, p in variants.items()}
        lat: dict[str, list] = {k: [] for k in variants}
        outs: dict[str, np.ndarray] = {}
        for s in sessions.values():
            s.activate()
            zero = np.zeros((1, 1, chunk), np.float32)
            for _ in range(args.warmup):
                s.push(zero)
        t_all = time.perf_counter()
        for _ in range(max(1, args.rounds)):
            for k, s in sessions.items():
                y, ms = stream(s, audio)
                lat[k].append(ms)
                outs[k] = y
        wall = time.perf_counter() - t_all
        for s in sessions.values():
            s.deactivate()
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)

    ref = outs["fp32"].astype(np.float64)
    chunk_ms = 1000.0 * chunk / contract.sample_rate_hz
    rows = {}
    for k in variants:
        ms = np.concatenate(lat[k])
        err = float(((outs[k] - ref) ** 2).sum())
        rows[k] = {
            "model": str(variants[k]) if k in ("fp32",) or args.int8_onnx else k,
            "latency_ms_p50": float(np.percentile(ms, 50)), "latency_ms_p99": float(np.percentile(ms, 99)),
            "latency_ms_mean": float(ms.mean()), "chunks": int(ms.size),
            "rtf": float(ms.sum() / 1000.0 / (ms.size * chunk_ms / 1000.0)),
            "snr_db_vs_fp32": float("inf") if err == 0 else float(10 * np.log10((ref ** 2).sum() / err)),
            "output_finite": bool(np.isfinite(outs[k]).all()),
            **({"ort_fusion": fusion[k]} if k in fusion else {}),
        }
    base = rows["fp32"]
    for k, r in rows.items():
        r["speedup_p50_vs_fp32"] = base["latency_ms_p50"] / r["latency_ms_p50"]
        r["speedup_p99_vs_fp32"] = base["latency_ms_p99"] / r["latency_ms_p99"]
        r["speedup_mean_vs_fp32"] = base["latency_ms_mean"] / r["latency_ms_mean"]
    int8_rows = [k for k in rows if k.startswith("int8") and "sparse" not in k]
    best = max(int8_rows, key=lambda k: rows[k]["speedup_p50_vs_fp32"]) if int8_rows else None
    int8_pass = rows[best]["speedup_p50_vs_fp32"] >= TARGET_INT8_SPEEDUP if best else None
    result = {
        "audio": {"path": str(args.audio), "seconds_per_round": n / contract.sample_rate_hz, "rounds": args.rounds},
        "model": {"path": str(src), "sha256": sha256_file(src), "name": contract.name},
        "chunk_samples": chunk, "chunk_ms": chunk_ms, "threads": args.threads, "wall_s": wall,
        "machine": machine(),
        "variants": rows, "notes": notes,
        "targets": {"int8_speedup_p50_min": TARGET_INT8_SPEEDUP, "int8_pass": int8_pass, "int8_best": best},
    }
    print(f"audio: {args.rounds} x {n / contract.sample_rate_hz:.2f} s of {args.audio.name}, chunk {chunk} samples "
          f"({chunk_ms:g} ms), {args.threads} thread(s), load avg {result['machine']['loadavg_1min']:.2f}")
    print(f"{'variant':20s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'x p50':>6s} {'x mean':>6s} {'SNR dB':>7s} "
          f"{'fused':>6s} {'unfused':>7s} {'MAC q%':>6s}")
    for k, r in rows.items():
        f = r.get("ort_fusion")
        extra = (f" {sum(f['fused'].values()):6d} {f['unfused_weighted']:7d} {100 * (f['fused_mac_share'] or 0):6.1f}"
                 if f else "")
        print(f"{k:20s} {r['latency_ms_p50']:8.4f} {r['latency_ms_p99']:8.4f} {r['latency_ms_mean']:8.4f} "
              f"{r['speedup_p50_vs_fp32']:6.2f} {r['speedup_mean_vs_fp32']:6.2f} {r['snr_db_vs_fp32']:7.1f}{extra}")
    if int8_pass is not None:
        print(f"target INT8 >= {TARGET_INT8_SPEEDUP}x FP32 at p50 (best: {best}): {'PASS' if int8_pass else 'FAIL'}")
    if args.json:
        from cosyedge.artifacts import write_json

        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 1 if args.strict and int8_pass is False else 0


if __name__ == "__main__":
    sys.exit(main())
