"""check reuses an INT8 engine folder only when it holds what check would build. Where check's INT8 build calibrates
(here ONNX Runtime's default ort_matmul finds no layer of its form, so the build takes trt and calibrates), an engine
in that folder that was not calibrated (the user's own 'build --int8 --int8-placement ort_matmul': every layer float)
is rebuilt from the kept amax cache. Before, the rule "an uncalibrated engine reads no amax, so a kept amax does not
make it stale" reused it, and check gated an all-float "int8" engine (140 dB against a baseline of 44 dB: PASS)."""

from __future__ import annotations

import dataclasses
import json

import onnx

from cosyedge.artifacts import MANIFEST_NAME, StreamContract
from cosyedge.cli.main import main
from cosyedge.models import REFERENCE_STREAM_ONNX


def _two_hop_reference(folder):
    """The reference with its contract's hop doubled (320 samples): every conv computes 2 frames per call, so
    ort_matmul has no MatMul form for any of them (tests/precision/test_ort_matmul_hops.py)."""
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    dataclasses.replace(StreamContract.from_onnx(m), hop_samples=320, name="ref2hop").write_to_onnx(m)
    src = folder / "ref2hop.stream.onnx"
    onnx.save(m, str(src))
    return src


def test_check_rebuilds_an_uncalibrated_engine_where_its_build_calibrates(calib_dir, utt_dir, tmp_path):
    from cosyedge.precision.int8 import needs_calibration

    src = _two_hop_reference(tmp_path)
    assert needs_calibration(src, "ort_matmul")
    base, eng = tmp_path / "accuracy.json", tmp_path / "eng"
    argv = ["check", "--onnx", str(src), "--baseline", str(base), "--precisions", "int8", "--engines-dir", str(eng),
            "--utterances", str(utt_dir), "--no-pesq", "-q"]
    assert main([*argv, "--update-baseline", "--calib", str(calib_dir)]) == 0
    assert (tmp_path / "ref2hop.int8.amax.json").is_file()
    key = "teacher-forced/demo-late-noisy/enhanced/snr_db"
    measured = json.loads(base.read_text())["labels"]["int8"]["metrics"][key]
    assert measured < 100.0
    # the user's own build into check's folder: ort_matmul asked for by name quantizes nothing, calibrates nothing
    assert main(["build", "--onnx", str(src), "--int8", "--int8-placement", "ort_matmul", "-o", str(eng), "-q"]) == 0
    folder = eng / "ref2hop-int8-onnxruntime"
    assert json.loads((folder / MANIFEST_NAME).read_text())["reports"]["int8"]["calibrated"] is False
    report = tmp_path / "r.json"
    assert main([*argv, "--json", str(report)]) == 0
    m = json.loads((folder / MANIFEST_NAME).read_text())
    assert m["reports"]["int8"]["calibrated"] is True and m["reports"]["int8"]["placement"] == "trt"
    got = json.loads(report.read_text())["labels"]["int8"]["metrics"][key]
    assert abs(got["value"] - measured) < 1e-3, got
