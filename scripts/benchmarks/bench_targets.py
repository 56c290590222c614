#!/usr/bin/env python3
"""Issue 40's CPU targets, every model, one run, side by side: runs the bench scripts and prints one table.

For each model named (``reference``, ``nsnet2``, ``dfn3``, ``gtcrn``; the recipes are exported on first use into
the engines folder, as ``cosyedge run --model`` does) this runs, one after another (never two timings at
once):

* ``scripts/benchmarks/bench_precision.py``: FP32 vs INT8 per chunk (one hop, ONNX Runtime CPU, 1 thread, interleaved
  rounds): INT8/FP32 speed ratio at p50 (``fp32_p50 / int8_p50``, target >= 1.3) and the INT8 output's SNR vs
  FP32 on real speech (target >= 42 dB);
* ``scripts/benchmarks/bench_int8_bound.py``: the same FP32 model with the ops INT8 quantizes made free: the most any
  INT8 kernel could gain (below 1.3, the INT8 target is out of reach whatever the kernels do);
* ``scripts/benchmarks/bench_stream.py``: the model vs RNNoise (pyrnnoise) on the same audio, normalised to ms per 10
  ms of
  audio, back to back and **paced** (one chunk per hop of wall clock, what a live stream sees): target paced
  p50 ratio <= 0.8;
* ``scripts/benchmarks/bench_streams.py`` (``--streams-models``, default the reference only: minutes per model):
  real-time
  StreamPool streams per core (target >= 60);
* ``scripts/benchmarks/bench_dfn3.py`` when present and ``dfn3`` is named: DeepFilterNet3's stream graph vs the official
  ``libdeepfilter.so`` per 10 ms hop (target <= 0.8).

Every child's full JSON is kept under ``runs`` in the output; the table (``targets``) has one row per
(model, target) with the measured value and whether it is met. Keep the machine otherwise idle.

Commands::

    python scripts/benchmarks/bench_targets.py --json docs/bench/bench_targets.json
    python scripts/benchmarks/bench_targets.py --models reference --seconds 3 --rounds 2    # a quick look

Exit status: 0 (1 with ``--strict`` when a target is missed); 2 on a bench script failing (its stderr tail
is printed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import BENCHMARKS, ROOT, machine
SCRIPTS = BENCHMARKS  # the benchmark scripts this one runs
MODELS = ("reference", "nsnet2", "dfn3", "gtcrn")
TARGETS = {
    "int8_speedup_p50": (">=", 1.3),
    "int8_snr_db_vs_fp32": (">=", 42.0),
    "int8_snr_db_vs_fp32_noisy": (">=", 42.0),
    "int8_speedup_bound": (None, None),  # an upper bound, reported beside the speed-up target
    "paced_p50_vs_rnnoise": ("<=", 0.8),
    "back_to_back_p50_vs_rnnoise": (None, None),  # reported beside the paced target, not a target
    "streams_per_core": (">=", 60.0),  # the target is the reference's
    "streams_per_core_info": (None, None),
    "dfn3_vs_libdeepfilter_p50": ("<=", 0.8),
    "dfn3_vs_libdeepfilter_paced_p50": ("<=", 0.8),
}


def stream_onnx(name: str) -> Path:
    """The FP32 streaming ONNX of ``name`` (the bundled reference, or the recipe exported on first use)."""
    if name == "reference":
        from cosyedge.models import REFERENCE_STREAM_ONNX

        return Path(REFERENCE_STREAM_ONNX)
    from cosyedge.builders.cache import writable_root
    from cosyedge.builders.named import STREAM_SUFFIX, recipe_stream_onnx

    root = writable_root(f"the {name}", lambda r: (r / f"{name}{STREAM_SUFFIX}").is_file())
    return recipe_stream_onnx(name, root)


def run_json(script: str, args: list[str], tmp: Path) -> dict:
    """Run ``scripts/<script>`` with ``args`` plus ``--json``; return its JSON. Raises RuntimeError on failure."""
    out = tmp / f"{script}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, str(SCRIPTS / script), *args, "--json", str(out)]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if not out.is_file():
        raise RuntimeError(f"{script} failed (rc {p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(out.read_text())


def row(model: str, key: str, value: float | None, how: str, variant: str | None = None) -> dict:
    """One table row: the target of ``key``, the measured ``value`` and whether it is met (``variant``: which
    build it was measured on, e.g. ``int8-ort_matmul``)."""
    op, target = TARGETS[key]
    met = None if value is None or op is None else (value >= target if op == ">=" else value <= target)
    return {"model": model, "target": key, "variant": variant, "want": f"{op} {target}" if op else "info",
            "measured": value,
            "met": met, "how": how}


def collect(names: list[str], streams_for: set[str], args, tmp: Path) -> dict[str, dict]:
    """Run every bench script for every model (one after another); return model -> {bench: its JSON}.
    Raises RuntimeError when a bench script fails."""
    runs: dict[str, dict] = {}
    for name in names:
        src = stream_onnx(name)
        runs[name] = r = {"onnx": str(src)}
        r["precision"] = run_json("bench_precision.py", [
            "--onnx", str(src), "--seconds", str(args.seconds), "--rounds", str(args.rounds),
            *args.precision_args.split()], tmp)
        r["int8_bound"] = run_json("bench_int8_bound.py", [
            "--onnx", str(src), "--seconds", str(args.seconds), "--rounds", str(args.rounds)], tmp)
        r["stream"] = run_json("bench_stream.py", [
            "--onnx", str(src), "--seconds", str(args.seconds), "--paced-seconds", str(args.paced_seconds)], tmp)
        if name in streams_for:
            r["streams"] = run_json("bench_streams.py", ["--model", str(src)], tmp)
        if name == "dfn3" and (SCRIPTS / "bench_dfn3.py").is_file():
            r["libdeepfilter"] = run_json("bench_dfn3.py", ["--onnx", str(src)], tmp)
    return runs


def model_rows(name: str, r: dict) -> list[dict]:
    """The table rows of one model from its bench JSONs (``collect``'s value for it)."""
    rows = []
    int8 = {k: v for k, v in r.get("precision", {}).get("variants", {}).items() if k.startswith("int8")}
    for k, i8 in sorted((int8 or {"int8": {}}).items()):
        rows.append(row(name, "int8_speedup_p50", i8.get("speedup_p50_vs_fp32"),
                        f"bench_precision {k}: fp32 p50 / int8 p50 per chunk", variant=k))
        rows.append(row(name, "int8_snr_db_vs_fp32", i8.get("snr_db_vs_fp32"),
                        f"bench_precision {k}: INT8 output vs FP32 output on clean read speech (LibriVox)", variant=k))
        demo = (i8.get("ort_fusion") or {}).get("demo_snr_db")
        if demo is not None:
            rows.append(row(name, "int8_snr_db_vs_fp32_noisy", demo,
                            f"bench_precision {k}: the same on the noisy demo recording (the build's output_snr_db)",
                            variant=k))
    if "int8_bound" in r:
        rows.append(row(name, "int8_speedup_bound", r["int8_bound"].get("int8_speedup_bound_quantized_ops"),
                        "bench_int8_bound: fp32 p50 / p50 with the Conv/Gemm/MatMul ops INT8 quantizes made free: "
                        "no INT8 kernel for them can beat it (below 1.3 the speed-up target needs more than those "
                        "ops; GRUs not freed; inside the leaf Scan bodies of an adopted model)"))
    ratio = r.get("stream", {}).get("ratio_vs_rnnoise", {})
    if "stream" in r:
        rows.append(row(name, "paced_p50_vs_rnnoise", ratio.get("paced_p50_per_10ms"),
                        "bench_stream: paced p50 per 10 ms of audio, model / RNNoise"))
        rows.append(row(name, "back_to_back_p50_vs_rnnoise", ratio.get("p50_per_10ms"),
                        "bench_stream: back-to-back p50 per 10 ms of audio, model / RNNoise"))
    if "streams" in r:
        rows.append(row(name, "streams_per_core" if name == "reference" else "streams_per_core_info",
                        r["streams"].get("streams_per_core"),
                        "bench_streams: streams with tick p99 <= one hop (10 ms; GTCRN 16 ms), 1 thread"))
    if "libdeepfilter" in r:
        shipped = r["libdeepfilter"].get("ratio_ours_over_libdf", {}).get("shipped", {})
        rows.append(row(name, "dfn3_vs_libdeepfilter_p50", shipped.get("p50"),
                        "bench_dfn3: stream graph / libdeepfilter.so per 10 ms hop, back to back"))
        rows.append(row(name, "dfn3_vs_libdeepfilter_paced_p50", shipped.get("paced_p50"),
                        "bench_dfn3: the same, paced (one hop per 10 ms)"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--streams-models", default="reference", help="models for bench_streams (slow); '' for none")
    ap.add_argument("--seconds", type=float, default=10.0, help="audio per round / per stream bench, s")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds in bench_precision")
    ap.add_argument("--paced-seconds", type=float, default=5.0, help="paced audio in bench_stream, s")
    ap.add_argument("--precision-args", default="--placements default,trt --no-fp16",
                    help="extra arguments for bench_precision.py (quoted; default: the default INT8 of an ONNX "
                         "Runtime build, int8-default, beside the trt placement)")
    ap.add_argument("--json", type=Path, default=None, help="write the table and every run here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="re-table the runs kept in an earlier --json output (no measuring)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        print(f"[!] unknown model(s) {', '.join(unknown)} (use {', '.join(MODELS)})", file=sys.stderr)
        return 2
    streams_for = {m for m in args.streams_models.split(",") if m}
    runs: dict[str, dict] = {}
    if args.from_json is not None:
        try:
            runs = json.loads(args.from_json.read_text())["runs"]
        except (OSError, ValueError, KeyError) as err:
            print(f"[!] cannot read the runs of {args.from_json}: {err}", file=sys.stderr)
            return 3
        names = [m for m in names if m in runs]
    else:
        with tempfile.TemporaryDirectory(prefix="bench-targets-") as t:
            try:
                runs = collect(names, streams_for, args, Path(t))
            except RuntimeError as err:
                print(f"[!] {err}", file=sys.stderr)
                return 2
    rows = [x for name in names for x in model_rows(name, runs[name])]
    print()
    print(f"{'model':10s} {'target':32s} {'build':16s} {'want':>9s} {'measured':>10s}  met")
    for x in rows:
        v = "n/a" if x["measured"] is None else f"{x['measured']:.3g}"
        print(f"{x['model']:10s} {x['target']:32s} {x['variant'] or '':16s} {x['want']:>9s} {v:>10s}  "
              f"{'-' if x['met'] is None else ('yes' if x['met'] else 'NO')}")
    if args.json:
        old = json.loads(args.from_json.read_text()) if args.from_json is not None else {}
        doc = {"machine": old.get("machine") or machine(),
               "settings": old.get("settings") or (vars(args) | {"json": str(args.json)}), "targets": rows,
               "runs": runs}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        part = args.json.with_suffix(".json.part")
        part.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        part.replace(args.json)
    missed = [x for x in rows if x["met"] is False]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
