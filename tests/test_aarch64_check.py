"""scripts/benchmarks/check_aarch64.sh and scripts/benchmarks/aarch64_jobs.py: the emulated aarch64 check (not run
here: about an hour).

What runs here: the script's refusal when the host lacks a tool (one line, exit 4), the comparison of outputs, and
the committed report (docs/bench/aarch64.json) against the table in docs/jetson.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.scripts import load_script
from tests.helpers.cli_errors import one_error_line

ROOT = Path(__file__).resolve().parents[1]
CHECK_SH = ROOT / "scripts" / "benchmarks" / "check_aarch64.sh"
REPORT = ROOT / "docs" / "bench" / "aarch64.json"


@pytest.fixture(scope="module")
def jobs():
    return load_script("benchmarks/aarch64_jobs")


def _path_without(tmp_path: Path, *absent: str) -> str:
    """A PATH holding links to the tools the script's first lines use, minus ``absent``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "uname", "python3", "sha256sum", "apt-get", "dpkg-deb", "sed", "id", "cat"):
        found = sys.executable if tool == "python3" else shutil.which(tool)
        if found and tool not in absent:
            (bin_dir / tool).write_text(f'#!/bin/sh\nexec "{found}" "$@"\n')
            (bin_dir / tool).chmod(0o755)
    return str(bin_dir)


def test_missing_host_tools_are_named_in_one_line(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    env = dict(os.environ, PATH=_path_without(tmp_path, "apt-get", "dpkg-deb"),
               COSYEDGE_AARCH64_CACHE=str(tmp_path / "cache"))
    p = subprocess.run([shutil.which("bash"), str(CHECK_SH)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 4, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[!] check_aarch64.sh needs: "), p.stderr
    assert "apt-get (apt)" in lines[0] and "dpkg-deb (dpkg)" in lines[0] and "python3" not in lines[0]
    assert not (tmp_path / "cache").exists()  # nothing was written before the refusal


@pytest.mark.parametrize("args", [["--ort"], ["--ort", "--cpu", "cortex-a57"], ["--jobs", ""]])
def test_option_without_its_value_is_refused_in_one_line(args):
    p = subprocess.run(["bash", str(CHECK_SH), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"{args[0]} needs a value" in one_error_line(p.stderr), p.stderr


def test_refusal_line_does_not_end_with_its_exit_code(tmp_path):
    env = dict(os.environ, PATH=_path_without(tmp_path, "apt-get", "dpkg-deb"),
               COSYEDGE_AARCH64_CACHE=str(tmp_path / "cache"))
    p = subprocess.run(["bash", str(CHECK_SH)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 4 and not p.stderr.strip().endswith(" 4"), p.stderr


def test_unknown_argument_is_refused_in_one_line():
    p = subprocess.run(["bash", str(CHECK_SH), "--frobnicate"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "unknown argument '--frobnicate'" in one_error_line(p.stderr)


def _write_sides(tmp_path: Path, name: str, a, b) -> Path:
    for side, data in (("x86_64", a), ("aarch64", b)):
        (tmp_path / side).mkdir(exist_ok=True)
        path = tmp_path / side / name
        if isinstance(data, np.ndarray):
            sf.write(path, data, 16000, subtype="FLOAT")
        else:
            path.write_text(json.dumps(data))
    return tmp_path


def test_audio_outputs_are_compared_bit_exact_or_by_snr(jobs, tmp_path):
    x = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
    _write_sides(tmp_path, "main.wav", x, x)
    r = jobs.compare_job("main", {"main.wav": "audio"}, tmp_path)["main.wav"]
    assert r["bit_exact"] and r["snr_db"] is None and r["max_abs"] == 0.0
    y = x + np.float32(1e-4) * np.sign(x)
    _write_sides(tmp_path, "main.wav", x, y)
    r = jobs.compare_job("main", {"main.wav": "audio"}, tmp_path)["main.wav"]
    assert not r["bit_exact"] and 59 < r["snr_db"] < 61 and r["max_abs"] == pytest.approx(1e-4, rel=1e-3)
    assert "SNR 60.0 dB" in jobs.line("main", "main.wav", r)


def test_int8_outputs_also_report_their_snr_against_fp32_per_side(jobs, tmp_path):
    x = np.random.default_rng(1).standard_normal(16000).astype(np.float32) * 0.1
    q = x + np.float32(1e-3) * np.sign(x)  # about 40 dB from FP32
    _write_sides(tmp_path, "main.wav", x, x)
    _write_sides(tmp_path, "int8-trt.wav", q, q)
    r = jobs.compare_job("int8-trt", {"int8-trt.wav": "audio"}, tmp_path)["int8-trt.wav"]
    assert r["bit_exact"] and 39 < r["snr_vs_fp32_db_x86_64"] == r["snr_vs_fp32_db_aarch64"] < 41


def test_missing_output_names_the_side(jobs, tmp_path):
    (tmp_path / "x86_64").mkdir()
    sf.write(tmp_path / "x86_64" / "pool.npy.wav", np.zeros(10, np.float32), 16000)
    np.save(tmp_path / "x86_64" / "pool.npy", np.zeros((4, 10), np.float32))
    r = jobs.compare_job("pool", {"pool.npy": "audio"}, tmp_path)["pool.npy"]
    assert r == {"error": "missing on aarch64"}


def test_vad_segments_and_gate_verdicts_are_compared(jobs, tmp_path):
    seg = {"segments": [{"start": 0.5, "end": 2.0}, {"start": 3.0, "end": 4.25}]}
    moved = {"segments": [{"start": 0.5, "end": 2.032}, {"start": 3.0, "end": 4.25}]}
    _write_sides(tmp_path, "vad.json", seg, moved)
    r = jobs.compare_job("vad", {"vad.json": "segments"}, tmp_path)["vad.json"]
    assert r["segments_aarch64"] == 2 and not r["same_segments"] and r["max_boundary_diff_ms"] == 32.0
    row = {"label": "fp16", "mode": "free-running", "utterance": "demo-noisy", "status": "ok"}
    _write_sides(tmp_path, "check.json", {"passed": True, "regressions": [], "rows": [dict(row, snr_db=60.0)]},
                 {"passed": False, "regressions": ["fp16 ..."], "rows": [dict(row, snr_db=40.0, status="FAIL")]})
    r = jobs.compare_job("check", {"check.json": "check"}, tmp_path)["check.json"]
    assert r["passed_x86_64"] and not r["passed_aarch64"]
    assert r["rows"]["fp16/free-running/demo-noisy"]["snr_db_aarch64"] == 40.0
    assert "gate x86-64 PASS, aarch64 FAIL" in jobs.line("check", "check.json", r)
    no_base = "fp16: no baseline for this platform, not gated: ..."  # check's NO BASELINE line (exit 2)
    _write_sides(tmp_path, "check.json", {"passed": True, "regressions": [], "rows": [dict(row, snr_db=60.0)]},
                 {"passed": False, "regressions": [], "no_baseline": [{"label": "fp16", "line": no_base}],
                  "rows": [dict(row, snr_db=50.0, status="NO BASELINE")]})
    r = jobs.compare_job("check", {"check.json": "check"}, tmp_path)["check.json"]
    assert r["no_baseline_aarch64"] == [no_base] and r["regressions_aarch64"] == []
    assert "gate x86-64 PASS, aarch64 PASS, NO BASELINE FOR fp16" in jobs.line("check", "check.json", r)


def test_committed_report_covers_every_job_on_both_sides(jobs):
    report = json.loads(REPORT.read_text())
    assert tuple(report["jobs"]) == jobs.JOBS
    assert report["versions"]["aarch64"]["machine"] == "aarch64" and report["versions"]["x86_64"]["machine"] == "x86_64"
    for side in ("onnxruntime", "numpy", "onnx", "cosyedge"):
        assert report["versions"]["aarch64"][side] == report["versions"]["x86_64"][side], side
    for job, entry in report["jobs"].items():
        for side in jobs.SIDES:
            assert entry[side]["rc"] in (0, 1, 2), (job, side, entry[side])
        assert entry["outputs"] and not any("error" in r for r in entry["outputs"].values()), (job, entry["outputs"])


def test_jetson_doc_carries_the_committed_report(jobs):
    doc = (ROOT / "docs" / "jetson.md").read_text()
    assert jobs.table(json.loads(REPORT.read_text())) in doc
