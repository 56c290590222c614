"""INT8 variants of the bundled reference model (placement, bias correction,
minimum SNR) each get their own engine folder and manifest flags (the default placement, ort_matmul on ONNX Runtime,
gets no folder-name part), replacing another variant says so in one line,
``check`` never reuses one, the INT8 report names the final path, bias correction reports its measured effect, and no
build starts from a model that already holds Q/DQ. One small calibration (4 utterances, about 7 s), then amax reuse."""

from __future__ import annotations

import json
import shutil

import pytest

from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.helpers.cli_errors import refused


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    from cosyedge.precision.calibset import DemoMix, make_calibration_set

    return make_calibration_set(tmp_path_factory.mktemp("calib") / "calib", count=4, seed=0,
                                training_data=DemoMix()).folder


@pytest.fixture(scope="module")
def engines(tmp_path_factory, calib):
    """An engines root holding the default INT8 engine (ort_matmul) and the trt one (built through the CLI)."""
    from cosyedge.cli.main import main

    root = tmp_path_factory.mktemp("eng")
    for extra in ([], ["--int8-placement", "trt"]):
        assert main(["build", "-q", "--int8", "--calib", str(calib), "-o", str(root), *extra]) == 0
    return root


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_each_variant_has_its_folder_and_flags(engines):
    plain, trt = engines / "reference-int8-onnxruntime", engines / "reference-int8-trt-onnxruntime"
    flags = {k: _manifest(plain)["flags"][k] for k in ("int8_placement", "bias_correction", "int8_min_snr")}
    assert flags == {"int8_placement": "ort_matmul", "bias_correction": False, "int8_min_snr": None}
    m = _manifest(plain)
    assert m["reports"]["int8"]["placement"] == "ort_matmul" and m["reports"]["int8"]["placement_note"] is None
    assert _manifest(trt)["flags"]["int8_placement"] == "trt" and _manifest(trt)["reports"]["int8"]["placement"] == "trt"
    # the report names the final model, not the temp folder it was written in
    assert m["reports"]["int8"]["output"] == str(plain / "model.onnx")
    assert _manifest(trt)["reports"]["int8"]["output"] == str(trt / "model.onnx")


def test_folder_names_of_variants():
    from cosyedge.builders.names import engine_folder_name, int8_variant

    assert engine_folder_name("reference", "int8", variant=int8_variant("int8", "ort_matmul")) == \
        "reference-int8-onnxruntime"
    assert engine_folder_name("reference", "int8", variant=int8_variant("int8")) == "reference-int8-trt-onnxruntime"
    assert engine_folder_name("reference", "int8", "tensorrt", variant=int8_variant("int8")) == "reference-int8-tensorrt"
    assert engine_folder_name("reference", "int8", "triton", variant=int8_variant("int8")) == "reference-int8-triton"
    assert engine_folder_name("reference", "int8", "triton-python", variant=int8_variant("int8", "ort_matmul")) == \
        "reference-int8-triton-python"
    # a model whose default is trt (Scan bodies) names the trt engine plainly
    assert engine_folder_name("gtcrn", "int8", variant=int8_variant("int8"), plain_placement="trt") == \
        "gtcrn-int8-onnxruntime"
    v = int8_variant("int8", "trt", True, 42.0)
    assert engine_folder_name("reference", "int8", sparse=True, variant=v) == \
        "reference-int8-sparse-trt-biascorr-minsnr42-onnxruntime"
    assert int8_variant("fp16", "ort_matmul") == {}
    assert engine_folder_name("reference", "fp16", variant=int8_variant("fp16")) == "reference-fp16-onnxruntime"


def test_replacing_another_variant_is_one_warning_line(engines, calib, tmp_path, cli):
    # a folder written before ort_matmul became ONNX Runtime's default: the trt engine under the default name
    root = tmp_path / "eng"
    shutil.copytree(engines / "reference-int8-trt-onnxruntime", root / "reference-int8-onnxruntime")
    rc, out, err = cli("build", "--int8", "--calib", calib, "-o", root)
    assert rc == 0, err
    warned = [line for line in err.splitlines() if line.startswith("[W]") and "other flags" in line]
    assert len(warned) == 1 and "holds an INT8 engine built with other flags" in warned[0], err
    assert "(--int8-placement trt -> ort_matmul); replacing it" in warned[0], warned
    assert _manifest(root / "reference-int8-onnxruntime")["flags"]["int8_placement"] == "ort_matmul"


def test_check_does_not_reuse_another_variant(engines):
    """check's freshness rule: the default variant only (a trt engine in check's folder, e.g. one built before
    ort_matmul became ONNX Runtime's default, is rebuilt, and the build's warning line says so)."""
    from cosyedge.artifacts import sha256_file
    from cosyedge.builders.cache import label_fresh

    digest = sha256_file(REFERENCE_STREAM_ONNX)
    plain = engines / "reference-int8-onnxruntime"
    assert label_fresh(plain, digest, "int8")
    assert not label_fresh(engines / "reference-int8-trt-onnxruntime", digest, "int8")
    assert label_fresh(engines / "reference-int8-trt-onnxruntime", digest, "int8", placement="trt")


def test_placement_hint_is_a_build_line_only(engines, calib, tmp_path, cli, caplog):
    """'cosyedge build' names --int8-placement ort_matmul for a trt-placement ONNX Runtime engine; the build API
    (what check calls) does not; the default build (ort_matmul) gets no hint."""
    import logging

    from cosyedge.builders import build_engine
    from cosyedge.builders.config import BuildConfig, Calibration

    rc, out, err = cli("build", "--int8", "--calib", calib, "-o", tmp_path / "d")
    assert rc == 0, err
    assert not [line for line in err.splitlines() if "is the CPU placement" in line]
    rc, out, err = cli("build", "--int8", "--int8-placement", "trt", "--calib", calib, "-o", tmp_path / "a")
    assert rc == 0, err
    hint = [line for line in err.splitlines() if "--int8-placement ort_matmul is the CPU placement" in line]
    assert len(hint) == 1 and hint[0].startswith("[I] placement trt is TensorRT's: ONNX Runtime CPU runs 24 of its")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cosyedge"):
        build_engine(REFERENCE_STREAM_ONNX, backend="onnxruntime", out_dir=tmp_path / "b",
                     config=BuildConfig(precision="int8", calibration=Calibration(set=calib), placement="trt"))
    assert [r for r in caplog.records if r.getMessage().startswith("engine: ")]  # the build logged, no hint
    assert not [r for r in caplog.records if "CPU placement" in r.getMessage()]


def test_bias_correction_reports_its_measured_effect(engines, calib, cli):
    rc, out, err = cli("build", "--int8", "--bias-correction", "--calib", calib, "-o", engines)
    assert rc == 0, err
    folder = engines / "reference-int8-biascorr-onnxruntime"
    rep = _manifest(folder)["reports"]["int8"]
    bc = rep["bias_correction"]
    without = _manifest(engines / "reference-int8-onnxruntime")["reports"]["int8"]["output_snr_db"]
    # the uncorrected SNR is the plain ort_matmul engine's (same amax), the corrected one the engine's own
    assert bc["snr_db_without"] == pytest.approx(without, abs=0.01)
    assert bc["snr_db_with"] == pytest.approx(rep["output_snr_db"], abs=0.01)
    assert bc["delta_db"] == pytest.approx(bc["snr_db_with"] - bc["snr_db_without"], abs=0.02)
    assert 30.0 < bc["snr_db_with"] < 60.0 and 30.0 < bc["snr_db_without"] < 60.0
    line = [x for x in err.splitlines() if "bias correction" in x and "dB without" in x]
    assert len(line) == 1
    if bc["delta_db"] < 0:
        assert line[0].startswith("[W] int8: bias correction lowered the output SNR vs FP32 on the demo recording: ")
    else:
        assert line[0].startswith("[I] int8: bias correction: output SNR vs FP32 on the demo recording ")
    assert f"{bc['snr_db_with']:.1f} dB with it, {bc['snr_db_without']:.1f} dB without" in line[0]


@pytest.mark.parametrize("args", [[], ["--fp16"], ["--int8"], ["--backend", "triton"], ["--backend", "tensorrt"],
                                  ["--sparse"]])
def test_a_build_from_an_int8_model_is_refused(engines, args, tmp_path, cli):
    """One source check for every precision and backend (TensorRT is refused before TensorRT is looked for)."""
    model = engines / "reference-int8-onnxruntime" / "model.onnx"
    rc, out, err = cli("build", "--onnx", model, *args, "-o", tmp_path)
    line = refused(rc, err, 2)
    assert f"{model} already holds Q/DQ nodes" in line and "build from its FP32 parent" in line
    assert not any(tmp_path.iterdir())
