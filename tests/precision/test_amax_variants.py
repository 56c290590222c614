"""Dense and 2:4-sparse INT8 builds of one model keep separate amax caches (no recalibration ping-pong)."""

from __future__ import annotations

import json

import pytest

from cosyedge.builders import build_engine
from cosyedge.builders.config import BuildConfig, Calibration
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.precision.int8_fixtures import write_recordings


@pytest.mark.slow
def test_dense_and_sparse_int8_keep_their_own_amax_cache(tmp_path, caplog):
    from cosyedge.cli.main import main

    rec = write_recordings(tmp_path / "rec", count=16)
    assert main(["calib", "make", "--from", str(rec), "--out", str(tmp_path / "calib")]) == 0
    calib = tmp_path / "calib"

    def build(sparse: bool):  # the trt placement calibrates (ONNX Runtime's default INT8 calibrates nothing)
        return build_engine(REFERENCE_STREAM_ONNX, backend="onnxruntime", out_dir=tmp_path / "engines",
                            config=BuildConfig(precision="int8", sparse=sparse, placement="trt",
                                               calibration=Calibration(set=calib)))

    dense = build(False)
    sparse = build(True)
    d_amax = json.loads((calib / "reference.amax.json").read_text())
    s_amax = json.loads((calib / "reference-sparse.amax.json").read_text())
    assert d_amax["model"]["sha256"] != s_amax["model"]["sha256"]
    assert (calib / "reference.calibration.cache").is_file() and (calib / "reference-sparse.calibration.cache").is_file()
    before = (calib / "reference.amax.json").stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level("INFO"):
        again = build(False)  # dense again: its cache is reused, not recomputed
    assert again == dense and sparse != dense
    assert (calib / "reference.amax.json").stat().st_mtime_ns == before
    assert not any("recalibrating" in r.getMessage() for r in caplog.records)
    manifest = json.loads((dense / "manifest.json").read_text())
    assert manifest["reports"]["int8"]["amax_path"].endswith("reference.amax.json")
