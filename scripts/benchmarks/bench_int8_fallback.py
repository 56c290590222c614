#!/usr/bin/env python3
"""INT8 with measured float fallback (issue 40: INT8 >= 42 dB vs FP32 on real speech): reference, NSNet2, GTCRN.

Per model: the FP32 streaming ONNX (bundled reference; NSNet2 and GTCRN exported by their recipes into ``--work``),
its amax cache (reused when present in the calibration folder, else KL-calibrated on the first ``--calib-count``
utterances of the set, a subset folder written under ``--work``), then two INT8 models from that one cache: plain
(``int8_onnx``) and with the fallback (``int8_onnx(min_snr_db=--target)``: layers kept float until the output SNR vs
FP32 on the held-out bundled demo recording reaches the target; :mod:`cosyedge.precision.fallback`). Reported:

* the fallback's report (layers kept float with their measured SNR alone, final SNR on the demo, evaluations) and
  the quantized MAC share of both INT8 models;
* an independent check on the test set (``--testset``, made by scripts/data/make_testset.py; never used by the
  fallback): INT8 output SNR vs FP32 per noisy item (median and worst), both INT8 models;
* INT8/FP32 per-chunk latency (scripts/benchmarks/bench_precision.py ``--int8-onnx``, one run per INT8 model,
  interleaved
  rounds, under ``flock /tmp/bench.lock``): ``ratio`` = FP32 p50 / INT8 p50 (> 1: INT8 faster);
* reference only, ``--eval``: ``cosyedge eval`` of FP32 / INT8 / INT8+fallback on the test set (SI-SNR, PESQ-WB).

One command::

    COSYEDGE_CALIB_DIR=calib python scripts/benchmarks/bench_int8_fallback.py --eval \\
        --json docs/bench/bench_int8_fallback.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import BENCHMARKS, ROOT, machine
sys.path.insert(0, str(ROOT))


def subset_calib(calib: Path, count: int, work: Path):
    """The calibration set of ``calib`` limited to its first ``count`` utterances (a folder under ``work`` whose
    manifest lists them; the audio folder is a symlink), loaded."""
    from cosyedge.precision.calibset import load_calibration_set

    full = load_calibration_set(calib)
    if count >= len(full):
        return full
    out = work / f"calib{count}"
    out.mkdir(parents=True, exist_ok=True)
    m = dict(full.manifest)
    m["files"] = full.files[:count]
    m["count"] = count
    m["duration_s"] = round(sum(f["duration_s"] for f in m["files"]), 3)
    (out / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))
    if not (out / "audio").exists():
        (out / "audio").symlink_to((calib / "audio").resolve())
    return load_calibration_set(out)


def fp32_model(name: str, work: Path) -> Path:
    """The FP32 streaming ONNX of ``name`` (reference: bundled; else the recipe's export under ``work``)."""
    if name == "reference":
        from cosyedge.models import REFERENCE_STREAM_ONNX

        return Path(REFERENCE_STREAM_ONNX)
    from cosyedge.builders.named import recipe_stream_onnx

    return recipe_stream_onnx(name, work)


def testset_snr(fp32: Path, candidates: dict, testset: Path) -> dict:
    """INT8 output SNR vs FP32 (dB) on every noisy test-set item, streamed one hop per call: median and worst per
    candidate (label -> path)."""
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.artifacts import SourceModel
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import stream_array

    c = SourceModel.of(fp32).contract
    files = sorted((testset / "noisy").rglob("*.wav"))
    xs = []
    for f in files:
        a, sr = load_audio(f)
        xs.append(to_model_input(a, sr, c.sample_rate_hz))

    def run(path):
        with OrtStreamSession(path) as s:
            return [stream_array(s, x).astype(np.float64) for x in xs]

    ref = run(fp32)
    out = {"items": len(files)}
    for label, path in candidates.items():
        ys = run(path)
        snr = [10 * np.log10((r ** 2).sum() / max(((y - r) ** 2).sum(), 1e-300)) for y, r in zip(ys, ref)]
        worst = int(np.argmin(snr))
        out[label] = {"median_db": float(np.median(snr)), "worst_db": float(snr[worst]),
                      "worst_item": str(files[worst].relative_to(testset)), "mean_db": float(np.mean(snr))}
    return out


def latency(fp32: Path, int8: Path, args, work: Path) -> dict:
    """FP32 and INT8 per-chunk p50 of one scripts/benchmarks/bench_precision.py run (interleaved rounds, under flock)
    and the
    speed-up ``fp32_p50 / int8_p50`` (> 1: INT8 faster), as every bench here reports it."""
    out = work / f"lat-{int8.stem}.json"
    cmd = ["flock", "/tmp/bench.lock", sys.executable, str(BENCHMARKS / "bench_precision.py"), "--onnx",
           str(fp32), "--int8-onnx", str(int8), "--no-fp16", "--rounds", str(args.rounds), "--seconds",
           str(args.seconds), "--json", str(out)]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    rows = json.loads(out.read_text())["variants"]
    q = next(k for k in rows if k.startswith("int8"))
    f32, i8 = rows["fp32"]["latency_ms_p50"], rows[q]["latency_ms_p50"]
    return {"fp32_p50_ms": f32, "int8_p50_ms": i8, "int8_speedup_p50": f32 / i8,
            "snr_db_vs_fp32_librivox": rows[q]["snr_db_vs_fp32"], "rounds": args.rounds, "seconds": args.seconds}


def evaluate(models: dict, testset: Path, work: Path) -> dict:
    """``cosyedge eval`` of the labelled models on the test set (no baseline, no DNSMOS): overall SI-SNR and PESQ-WB
    per system."""
    out = work / "eval.json"
    cmd = [sys.executable, "-m", "cosyedge.cli.main", "eval", str(testset), "--no-baseline", "--no-dnsmos", "--json",
           str(out), "-q"]
    for label, path in models.items():
        cmd += ["--engine", f"{label}={path}"]
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    return summarize_eval(json.loads(out.read_text()), list(models))


def summarize_eval(report: dict, labels: list) -> dict:
    """Overall SI-SNR / PESQ-WB / STOI per system of a ``cosyedge eval`` JSON report, and each INT8 system's
    difference to ``fp32`` with the issue's pass rule (within 1 dB SI-SNR and 0.1 PESQ-WB)."""
    overall = report["summary"]["overall"]
    out = {"items": overall["n"], "systems": {k: {m: overall[k][m] for m in ("si_snr_db", "pesq_wb", "stoi")}
                                              for k in labels}}
    base = out["systems"]["fp32"]
    for k in labels[1:]:
        d_si = out["systems"][k]["si_snr_db"] - base["si_snr_db"]
        d_pesq = out["systems"][k]["pesq_wb"] - base["pesq_wb"]
        out["systems"][k].update(delta_si_snr_db=d_si, delta_pesq_wb=d_pesq,
                                 within_1db_0p1pesq=bool(d_si >= -1.0 and d_pesq >= -0.1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="reference,nsnet2,gtcrn")
    ap.add_argument("--target", type=float, default=42.0, help="fallback target, dB vs FP32")
    ap.add_argument("--calib", type=Path, default=Path(os.environ.get("COSYEDGE_CALIB_DIR") or "calib"))
    ap.add_argument("--calib-count", type=int, default=512,
                    help="utterances calibrated on for a model without an amax cache in --calib")
    ap.add_argument("--testset", type=Path, default=Path.home() / ".cache" / "cosyedge" / "testset")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cosyedge-bench-int8-fallback"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--eval", action="store_true", help="reference: cosyedge eval FP32 / INT8 / INT8+fallback")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from cosyedge.artifacts import SourceModel
    from cosyedge.precision.calibset import load_calibration_set
    from cosyedge.precision.int8 import int8_onnx

    args.work.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine(), "target_db": args.target,
              "calib": str(args.calib), "holdout": "bundled demo recording cosyedge/assets/demo/noisy.wav (17.29 s)",
              "testset": str(args.testset), "models": {}}
    for name in args.models.split(","):
        t0 = time.time()
        fp32 = fp32_model(name, args.work)
        src = SourceModel.of(fp32)
        cached = args.calib / f"{src.contract.name}.amax.json"
        if cached.is_file():
            cset, amax = load_calibration_set(args.calib), cached
        else:
            cset, amax = subset_calib(args.calib, args.calib_count, args.work), None
        plain_path = args.work / f"{name}.int8.onnx"
        fb_path = args.work / f"{name}.int8.fallback.onnx"
        plain = int8_onnx(src, plain_path, calib=cset, amax=amax)
        fb = int8_onnx(src, fb_path, calib=cset, amax=plain["amax_path"], min_snr_db=args.target)
        row = {"fp32": str(fp32), "calibration_utterances": plain["calibration_utterances"],
               "amax": plain["amax_path"],
               "plain": {"demo8s_snr_db": plain["output_snr_db"], "quantized_mac_share": plain["macs"]["share"],
                         "quantized_nodes": len(plain["quantized_nodes"])},
               "fallback": {**fb["fallback"], "demo8s_snr_db": fb["output_snr_db"],
                            "quantized_nodes": len(fb["quantized_nodes"])},
               "build_s": round(time.time() - t0, 1)}
        if args.testset.is_dir():
            row["testset_snr_vs_fp32"] = testset_snr(fp32, {"plain": plain_path, "fallback": fb_path}, args.testset)
        if not args.no_latency:
            row["latency"] = {"plain": latency(fp32, plain_path, args, args.work),
                              "fallback": latency(fp32, fb_path, args, args.work)}
        if args.eval and name == "reference" and args.testset.is_dir():
            row["eval"] = evaluate({"fp32": fp32, "int8": plain_path, "int8_fallback": fb_path}, args.testset,
                                   args.work)
        result["models"][name] = row
        print(json.dumps({name: {k: v for k, v in row.items() if k != "eval"}}, indent=1, default=str), flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
