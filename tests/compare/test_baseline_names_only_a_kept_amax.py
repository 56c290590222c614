"""``check --update-baseline`` writes each INT8 label's ``amax``: the name of the calibration cache kept next to the
baseline. ONNX Runtime's default INT8 calibrates nothing and keeps no cache, so the label must name none (it named
``<model>.int8.amax.json``, a file that was never written: a user committing the baseline folder looked for it in
vain)."""

from __future__ import annotations

import json

from cosyedge.cli.main import main


def test_uncalibrated_int8_label_names_no_amax(ref_onnx, utt_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("COSYEDGE_CALIB_DIR", str(tmp_path / "calib"))
    path = tmp_path / "base" / "accuracy.json"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--update-baseline", "--precisions",
               "fp32,int8", "--engines-dir", str(tmp_path / "eng"), "--utterances", str(utt_dir), "--no-pesq", "-q"])
    assert rc == 0
    labels = json.loads(path.read_text())["labels"]
    assert labels["int8"]["amax"] is None and labels["fp32"]["amax"] is None
    assert sorted(p.name for p in path.parent.iterdir()) == ["accuracy.json"]  # no cache kept
    assert not (tmp_path / "calib").exists()
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--engines-dir", str(tmp_path / "eng"),
               "--utterances", str(utt_dir), "--no-pesq", "-q"])
    assert rc == 0
