#!/usr/bin/env python3
"""Benchmark KL calibration: wall time and peak memory of calibrating a streaming ONNX on a calibration set.

Runs :func:`cosyedge.precision.calibrate.calibrate` with ``force=True`` (always recomputes; the amax cache
and TensorRT calibration cache are rewritten) and writes a JSON report: utterances, audio minutes,
calibration time (s), peak RSS of this process (MiB, ``resource.getrusage`` ``ru_maxrss``), threads, model
and manifest hashes, plus the targets (<= 600 s on 2 cores, <= 2048 MiB peak RSS for 2048 utterances).
Make the set first (``cosyedge calib make --count 2048 --out calib``), or pass ``--make-set``: the set is then
made here, by ``cosyedge calib make`` in a child process, and its wall time and peak RSS are reported too
(``set_generation``; target <= 1024 MiB peak RSS for 2048 utterances; ``data_cache`` says whether the
training corpora were already cached, else the time includes fetching and decoding them).

Command (CPU-heavy: a few minutes on 2 cores; run it niced when the machine is shared)::

    nice -n 10 python scripts/benchmarks/bench_calib.py --calib calib --json docs/bench/bench_calib.json
    python scripts/benchmarks/bench_calib.py --onnx path/to/model.stream.onnx --calib calib --threads 2

Exit status: 0 (1 with ``--strict`` when a target is missed); 3 when the model or set is missing.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from _common import ROOT, machine
TARGET_TIME_S = 600.0
TARGET_RSS_MIB = 2048.0
TARGET_SET_RSS_MIB = 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--onnx", default=str(ROOT / "cosyedge" / "models" / "reference.stream.onnx"),
                    help="FP32 streaming ONNX")
    ap.add_argument("--calib", default=str(ROOT / "calib"), help="calibration set folder (with manifest.json)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    ap.add_argument("--json", default=None, help="write the report here (default: stdout only)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--make-set", action="store_true",
                    help="make the 2048-utterance set into --calib first (cosyedge calib make), timed and measured")
    args = ap.parse_args(argv)
    made = make_set(Path(args.calib)) if args.make_set else None
    if made is not None and made.get("exit_code"):
        print(f"[!] cosyedge calib make failed (exit {made['exit_code']})", file=sys.stderr)
        return made["exit_code"]

    from cosyedge.errors import CosyEdgeError
    from cosyedge.log import LOG
    from cosyedge.precision.calibrate import calibrate
    from cosyedge.precision.calibset import load_calibration_set

    LOG.configure(0)
    try:
        cset = load_calibration_set(args.calib)
        t0 = time.perf_counter()
        amax_path = calibrate(args.onnx, cset, threads=args.threads, force=True)
        elapsed = time.perf_counter() - t0
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code
    amax = json.loads(Path(amax_path).read_text())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    report = {
        "benchmark": "calibration",
        "method": amax["params"]["method"],
        "utterances": len(cset),
        "audio_min": round(cset.duration_s / 60, 2),
        "calibration_time_s": round(elapsed, 2),
        "peak_rss_mib": round(peak_mib, 1),
        "threads": args.threads,
        "tensors": len(amax["amax"]),
        "chunk_samples": amax["params"]["chunk_samples"],
        "model_sha256": amax["model"]["sha256"],
        "calibration_manifest_sha256": cset.sha256,
        "amax_path": str(amax_path),
        "targets": {"calibration_time_s": TARGET_TIME_S, "peak_rss_mib": TARGET_RSS_MIB,
                    "set_generation_peak_rss_mib": TARGET_SET_RSS_MIB},
        "met": {"time": elapsed <= TARGET_TIME_S, "rss": peak_mib <= TARGET_RSS_MIB},
        "set_generation": made,
        "machine": machine(),
    }
    if made is not None:
        report["met"]["set_rss"] = made["peak_rss_mib"] <= TARGET_SET_RSS_MIB
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    if args.strict and not all(report["met"].values()):
        return 1
    return 0


def make_set(folder: Path) -> dict:
    """Run ``cosyedge calib make --count 2048 --out FOLDER`` in a child process: wall time (s), its peak RSS
    (MiB, ``RUSAGE_CHILDREN``), and whether the training corpora were cached before (``data_cache``)."""
    import subprocess

    from cosyedge.data.sources import data_dir

    corpora = data_dir() / "corpora"
    warm = corpora.is_dir() and any(corpora.glob("*.npy"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "calib", "make", "-q", "--count", "2048",
                           "--out", str(folder)], cwd=ROOT)
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return {"utterances": 2048, "time_s": round(elapsed, 2), "peak_rss_mib": round(peak, 1),
            "data_cache": "warm" if warm else "cold", "exit_code": proc.returncode}


if __name__ == "__main__":
    sys.exit(main())
