"""ONNX Runtime's default INT8 (``ort_matmul``, dynamic activations) calibrates nothing, so a ``--calib DIR`` given to
it is not read: the build says so in one warning line naming the folder (before, a user's ``--calib /nonexistent`` or a
typo in the folder name built without a word, and the manifest recorded a calibration folder that was never read);
a placement that calibrates still reads it."""

from __future__ import annotations

import json

from cosyedge.artifacts import MANIFEST_NAME
from cosyedge.cli.main import main


def test_build_int8_says_its_calib_folder_is_not_read(tmp_path, capsys):
    missing = tmp_path / "no-such-calib"
    rc = main(["build", "--int8", "--calib", str(missing), "--backend", "onnxruntime", "-o", str(tmp_path / "eng")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    warned = [ln for ln in cap.err.splitlines() if ln.startswith("[W]") and str(missing) in ln]
    assert len(warned) == 1 and "not read" in warned[0] and "--int8-placement trt" in warned[0], cap.err
    m = json.loads((tmp_path / "eng" / "reference-int8-onnxruntime" / MANIFEST_NAME).read_text())
    assert m["reports"]["int8"]["calibrated"] is False and m["calibration_sha256"] is None
    assert not missing.exists()


def test_build_int8_without_calib_warns_nothing_about_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COSYEDGE_CALIB_DIR", str(tmp_path / "calib"))
    rc = main(["build", "--int8", "--backend", "onnxruntime", "-o", str(tmp_path / "eng")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert not [ln for ln in cap.err.splitlines() if "calib" in ln and ln.startswith("[W]")], cap.err
    assert not (tmp_path / "calib").exists()


def test_trt_placement_still_reads_a_missing_calib_folder(tmp_path, capsys):
    missing = tmp_path / "no-such-calib"
    rc = main(["build", "--int8", "--int8-placement", "trt", "--calib", str(missing), "--backend", "onnxruntime",
               "-o", str(tmp_path / "eng")])
    err = capsys.readouterr().err
    assert rc == 3 and f"calibration folder {missing} does not exist" in err, err
