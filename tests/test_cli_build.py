"""``cosyedge build [--fp16 | --int8] [--sparse]``: folder names, manifests, last line, errors, atomicity,
and ``cosyedge run --engine`` on the built folders (bundled reference model, real speech)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf
from onnx import numpy_helper

from cosyedge.artifacts import MANIFEST_NAME, sha256_file
from cosyedge.runtime.engine import load_engine
from cosyedge.cli.main import main
from cosyedge.errors import ArtifactError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.sparsity import check_2to4
from tests.helpers import models
from tests.precision.int8_fixtures import LIBRIVOX
from tests.reference_structure import reference_structure
from tests.helpers.metrics import snr_db
from tests.helpers.cli_errors import one_error_line

REF = REFERENCE_STREAM_ONNX
REF_NET = reference_structure()  # convs/blocks of the bundled model, from its weights' config
LAST_BLOCK = REF_NET.n_blocks - 1
HAS_INT8 = importlib.util.find_spec("cosyedge.precision.int8") is not None


def _build(capsys, *args):
    rc = main(["build", *map(str, args)])
    cap = capsys.readouterr()
    return rc, cap.out.strip().splitlines(), cap.err


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="module")
def fp32_out(tmp_path_factory):
    """The FP32 reference enhancing the LibriVox recording through 'cosyedge run' (bundled model)."""
    out = tmp_path_factory.mktemp("run") / "fp32.wav"
    assert main(["run", str(LIBRIVOX), "-o", str(out), "--engine", str(REF)]) == 0
    return sf.read(str(out), dtype="float32")[0]


def test_fp16_build_and_run(engines, capsys, tmp_path, fp32_out):
    rc, out, err = _build(capsys, "--fp16", "--backend", "onnxruntime", "-o", engines)
    assert rc == 0, err
    folder = engines / "reference-fp16-onnxruntime"
    assert out[-1] == str(folder)
    assert not [p for p in engines.iterdir() if p.name.startswith(".")]  # no temp folder left
    m = json.loads((folder / MANIFEST_NAME).read_text())
    assert m["stage"] == "build" and m["backend"] == "onnxruntime"
    assert m["precision"] == "fp16" and m["sparse"] is False and m["calibration_sha256"] is None
    assert m["flags"] == {"backend": "onnxruntime", "precision": "fp16", "fp16": True, "int8": False, "sparse": False,
                          "exclude": [], "calib": None, "calib_count": None}
    assert m["model"]["sha256"] == sha256_file(folder / "model.onnx") != sha256_file(REF)
    assert m["parent_sha256"] == sha256_file(REF)
    assert {"onnxruntime", "onnx", "numpy"} <= set(m["tools"])
    assert m["reports"]["fp16"]["snr_db_vs_fp32"] >= 50.0
    assert all(r["finite"] for r in m["reports"]["fp16"]["scan"])
    # 'cosyedge run --engine <fp16 folder>' runs it; its output is within 50 dB of FP32
    wav = tmp_path / "fp16.wav"
    assert main(["run", str(LIBRIVOX), "-o", str(wav), "--engine", str(folder)]) == 0
    y = sf.read(str(wav), dtype="float32")[0]
    assert y.shape == fp32_out.shape and np.isfinite(y).all()
    assert 50.0 <= snr_db(fp32_out, y) < 150.0


def test_fp32_and_sparse_builds(engines, capsys):
    rc, out, _ = _build(capsys, "--backend", "onnxruntime", "-o", engines)
    assert rc == 0 and out[-1] == str(engines / "reference-fp32-onnxruntime")
    m = json.loads((engines / "reference-fp32-onnxruntime" / MANIFEST_NAME).read_text())
    assert m["precision"] == "fp32" and m["model"]["sha256"] == sha256_file(REF) and m["reports"] == {}

    rc, out, _ = _build(capsys, "--sparse", "--exclude", "/out/Conv", "--backend", "onnxruntime", "-o", engines)
    folder = engines / "reference-fp32-sparse-onnxruntime"
    assert rc == 0 and out[-1] == str(folder)
    m = json.loads((folder / MANIFEST_NAME).read_text())
    assert m["sparse"] is True and m["flags"]["exclude"] == ["/out/Conv"]
    rows = {r["node"]: r for r in m["reports"]["sparsity"]["layers"]}
    assert rows["/out/Conv"]["reason"] == "excluded"
    assert m["reports"]["sparsity"]["summary"]["pruned"] == len(REF_NET.sparse_eligible) - 1  # all but /out/Conv
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(folder / "model.onnx")).graph.initializer}
    assert check_2to4(w[f"blocks.{LAST_BLOCK}.conv.conv.weight"], 1) and not check_2to4(w["out.weight"], 1)
    engine = load_engine(folder)
    assert engine.manifest["sparse"] is True
    # a model swapped behind the manifest's back: the message gives the full rebuild command
    (folder / "model.onnx").write_bytes(REF.read_bytes())
    with pytest.raises(ArtifactError, match=r"stale or corrupt.*cosyedge build --onnx .* --sparse --backend onnxruntime'"):
        load_engine(folder)


@pytest.mark.skipif(not HAS_INT8, reason="cosyedge.precision.int8 is not in this tree (INT8 helper not merged)")
def test_int8_sparse_build_and_run(engines, capsys, tmp_path, fp32_out, monkeypatch):
    from tests.precision.int8_fixtures import write_recordings

    monkeypatch.setenv("COSYEDGE_CALIB_DIR", str(tmp_path / "calib-default"))
    rec = write_recordings(tmp_path / "rec", count=24)
    assert main(["calib", "make", "--from", str(rec), "--out", str(tmp_path / "calib")]) == 0
    capsys.readouterr()
    rc, out, err = _build(capsys, "--int8", "--sparse", "--calib", tmp_path / "calib", "--backend", "onnxruntime",
                          "-o", engines)
    assert rc == 0, err
    folder = engines / "reference-int8-sparse-onnxruntime"
    assert out[-1] == str(folder)
    m = json.loads((folder / MANIFEST_NAME).read_text())
    assert m["precision"] == "int8" and m["sparse"] is True and m["flags"]["calib"] == str(tmp_path / "calib")
    from cosyedge.precision.calibset import load_calibration_set

    # ONNX Runtime's default INT8 takes each activation step per call: nothing calibrated, no default set made
    assert m["calibration_sha256"] is None and m["reports"]["int8"]["calibrated"] is False
    assert m["reports"]["int8"]["amax_path"] is None and not (tmp_path / "calib-default").exists()
    assert not list((tmp_path / "calib").glob("*.amax.json"))
    from cosyedge.precision.bodies import iter_graphs

    assert m["reports"]["int8"]["placement"] == "ort_matmul"  # ONNX Runtime's default
    graphs = list(iter_graphs(onnx.load(str(folder / "model.onnx")).graph))  # its INT8 graph runs in a Scan over hops
    assert sum(n.op_type == "DynamicQuantizeMatMul" for g in graphs for n in g.node) > 0
    # sparsify then quantize: the int8 weights of its DynamicQuantizeMatMuls keep the 2:4 pattern; a conv's MatMul weight
    # (C*K, M) is its (M, C, K) weight transposed
    q = {t.name: numpy_helper.to_array(t) for g in graphs for t in g.initializer
         if t.data_type == onnx.TensorProto.INT8 and "/batched_" in t.name}
    big = [v.reshape(96, v.shape[0] // 96, v.shape[1]).transpose(2, 0, 1) for v in q.values()
           if v.ndim == 2 and v.shape[0] % 96 == 0]
    assert big and all(check_2to4(v, 1) for v in big)
    wav = tmp_path / "int8.wav"
    assert main(["run", str(LIBRIVOX), "-o", str(wav), "--engine", str(folder)]) == 0
    y = sf.read(str(wav), dtype="float32")[0]
    snr = snr_db(fp32_out, y)
    assert np.isfinite(y).all() and 10.0 < snr < 40.0, snr  # 2:4 without fine-tune: about 20 dB from dense
    # the TensorRT placement calibrates, on the set given
    rc, out, err = _build(capsys, "--int8", "--sparse", "--int8-placement", "trt", "--calib", tmp_path / "calib",
                          "--backend", "onnxruntime", "-o", engines)
    assert rc == 0, err
    m = json.loads((Path(out[-1]) / MANIFEST_NAME).read_text())
    assert m["calibration_sha256"] == load_calibration_set(tmp_path / "calib").sha256
    assert m["reports"]["int8"]["calibrated"] is True and m["reports"]["int8"]["calibration_utterances"] == 24
    assert not (tmp_path / "calib-default").exists()


def test_int8_with_fp16_is_a_usage_error(tmp_path, capsys):
    rc, out, err = _build(capsys, "--int8", "--fp16", "-o", tmp_path / "e")
    assert rc == 2 and out == []
    assert "--int8 and --fp16 are mutually exclusive" in one_error_line(err)
    assert not (tmp_path / "e").exists()
    rc, _, err = _build(capsys, "--exclude", "/Log", "-o", tmp_path / "e")
    assert rc == 2 and "--exclude applies to --fp16, --int8 or --sparse" in err
    rc, _, err = _build(capsys, "--fp16", "--calib", tmp_path, "-o", tmp_path / "e")
    assert rc == 2 and "--calib is only used by --int8" in err
    assert not (tmp_path / "e").exists() or not any((tmp_path / "e").iterdir())


def test_onnx_without_state_metadata(tmp_path, capsys):
    bare = tmp_path / "bare.onnx"
    m = onnx.load(str(models.make_stateless_model(tmp_path / "stateless.onnx")))
    del m.metadata_props[:]
    onnx.save(m, str(bare))
    for path, want in ((bare, "has no cosyedge metadata 'cosyedge.input'"),
                       (tmp_path / "stateless.onnx", "has no streaming state")):
        for flags in ([], ["--fp16"], ["--sparse"]):
            rc, out, err = _build(capsys, "--onnx", path, *flags, "-o", tmp_path / "e")
            errors = [ln for ln in err.splitlines() if ln.startswith("[!] ")]
            assert rc == 3 and out == [] and len(errors) == 1 and want in errors[0]
    assert not (tmp_path / "e").exists() or not any((tmp_path / "e").iterdir())


def test_failed_build_leaves_nothing_and_keeps_previous(tmp_path, capsys):
    root = tmp_path / "e"
    nan = models.make_nan_model(tmp_path / "nan.onnx")
    # FP32 passes the one-zero-chunk build check; FP16 fails its scan on speech (Sqrt of negative samples)
    rc, out, _ = _build(capsys, "--onnx", nan, "--backend", "onnxruntime", "-o", root)
    assert rc == 0
    before = sha256_file(root / "nan-fp32-onnxruntime" / MANIFEST_NAME)
    rc, out, err = _build(capsys, "--onnx", nan, "--fp16", "--backend", "onnxruntime", "-o", root)
    assert rc == 5 and out == [] and "NaN/Inf in 'enhanced'" in err
    assert sorted(p.name for p in root.iterdir()) == ["nan-fp32-onnxruntime"]  # no fp16 folder, no temp folder
    assert sha256_file(root / "nan-fp32-onnxruntime" / MANIFEST_NAME) == before


def test_tensorrt_backend_message_without_tensorrt(tmp_path, capsys):
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    rc, out, err = _build(capsys, "--fp16", "--backend", "tensorrt", "-o", tmp_path / "e")
    assert rc == 4 and "needs TensorRT and an NVIDIA GPU" in err and out == []
    assert not (tmp_path / "e").exists()


def test_fp16_sparse_keeps_the_pattern(engines, capsys):
    rc, out, err = _build(capsys, "--fp16", "--sparse", "--backend", "onnxruntime", "-o", engines)
    folder = engines / "reference-fp16-sparse-onnxruntime"
    assert rc == 0 and out[-1] == str(folder), err
    assert "without fine-tuning; the fine-tuned 2:4 model is --onnx" in err and "reference.sparse.stream.onnx" in err
    m = json.loads((folder / MANIFEST_NAME).read_text())
    assert m["reports"]["sparsity"]["summary"]["pruned"] == len(REF_NET.sparse_eligible)
    assert m["reports"]["fp16"]["snr_db_vs_fp32"] > 0
    model = onnx.load(str(folder / "model.onnx"))
    w = {t.name: (t.data_type, numpy_helper.to_array(t)) for t in model.graph.initializer}
    dtype, blk = w[f"blocks.{LAST_BLOCK}.proj.weight"]
    assert dtype == onnx.TensorProto.FLOAT16 and check_2to4(blk, 1) and np.count_nonzero(blk) == blk.size // 2


def _retrained(tmp_path):
    """A retrained dense reference: the bundled ONNX with one weight scaled (same name, no dense-parent record)."""
    m = onnx.load(str(REF))
    w = m.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * 0.5, w.name))
    path = tmp_path / "retrained.stream.onnx"
    onnx.save(m, str(path))
    return path


def test_rebuilding_a_folder_from_another_model_warns_and_name_keeps_both(tmp_path, capsys):
    """A retrained dense model carries the same name, so without --name it lands in the old engine's folder: the
    build says so (nothing silently replaced) and --name keeps both. (The 2:4 fine-tuned model no longer lands
    there: it records its dense parent and gets a folder of its own, see the next test.)"""
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX

    root = tmp_path / "e"
    rc, out, err = _build(capsys, "--onnx", REF, "--backend", "onnxruntime", "-o", root)
    assert rc == 0 and "another model" not in err
    rc, out, err = _build(capsys, "--onnx", REF, "--backend", "onnxruntime", "-o", root)  # same model again: quiet
    assert rc == 0 and "another model" not in err
    retrained = _retrained(tmp_path)
    rc, out, err = _build(capsys, "--onnx", retrained, "--backend", "onnxruntime", "-o", root)
    dense = root / "reference-fp32-onnxruntime"
    assert rc == 0 and out[-1] == str(dense)
    assert (f"{dense} holds an engine built from another model (sha256 {sha256_file(REF)[:12]}...)" in err
            and "pass --name to keep both" in err)
    rc, out, err = _build(capsys, "--onnx", REF, "--backend", "onnxruntime", "-o", root)
    rc2, out2, _ = _build(capsys, "--onnx", retrained, "--backend", "onnxruntime", "-o", root,
                          "--name", "reference-retrained")
    assert rc == rc2 == 0 and out2[-1] == str(root / "reference-retrained-fp32-onnxruntime")
    assert json.loads((dense / MANIFEST_NAME).read_text())["parent_sha256"] == sha256_file(REF)
    rc, out, err = _build(capsys, "--onnx", REFERENCE_SPARSE_STREAM_ONNX, "--backend", "onnxruntime", "-o", root)
    assert rc == 0 and out[-1] == str(root / f"reference-{sha256_file(REFERENCE_SPARSE_STREAM_ONNX)[:8]}-fp32-onnxruntime")
    assert "another model" not in err
    assert json.loads((dense / MANIFEST_NAME).read_text())["parent_sha256"] == sha256_file(REF)


def test_dense_and_fine_tuned_sparse_parents_never_share_an_engine_folder(tmp_path, capsys):
    """'cosyedge build --int8 --sparse' on the bundled dense model and check's build of the fine-tuned
    sparse model both wrote reference-int8-sparse-onnxruntime and replaced each other. The fine-tuned model records
    its dense parent (cosyedge.dense_parent_sha256), so its engines are <name>-<sha256[:8]>-...; check builds and
    reuses that folder too."""
    from cosyedge.builders.names import engine_folder_name, engine_model_name
    from cosyedge.compare.baseline import default_baseline_path
    from cosyedge.compare.engines import ensure_engine, sparse_parent
    from cosyedge.compare.models import load_compare_model
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX

    sha8 = sha256_file(REFERENCE_SPARSE_STREAM_ONNX)[:8]
    assert engine_model_name("reference", REF) == "reference"
    assert engine_model_name("reference", REFERENCE_SPARSE_STREAM_ONNX) == f"reference-{sha8}"
    root = tmp_path / "e"
    rc, out, err = _build(capsys, "--sparse", "--backend", "onnxruntime", "-o", root)  # dense, pruned on the fly
    dense = root / "reference-fp32-sparse-onnxruntime"
    assert rc == 0 and out[-1] == str(dense), err
    rc, out, err = _build(capsys, "--onnx", REFERENCE_SPARSE_STREAM_ONNX, "--sparse", "--backend", "onnxruntime",
                          "-o", root)
    fine_tuned = root / f"reference-{sha8}-fp32-sparse-onnxruntime"
    assert rc == 0 and out[-1] == str(fine_tuned) and "another model" not in err, err
    # check's builds of the sparse labels: the fine-tuned model's folder (reused here), never the dense one
    ref = load_compare_model(REF)
    sparse = sparse_parent(ref)
    before = sha256_file(fine_tuned / MANIFEST_NAME)
    got = ensure_engine(sparse, "fp32-sparse", root, baseline=default_baseline_path(), update=False, calib=None,
                        derived=True)
    assert got == fine_tuned and sha256_file(fine_tuned / MANIFEST_NAME) == before  # reused, not rebuilt
    if HAS_INT8:  # INT8 from the committed amax cache of the bundled baseline: no calibration audio
        got = ensure_engine(sparse, "int8-sparse", root, baseline=default_baseline_path(), update=False, calib=None,
                            derived=True)
        assert got == root / f"reference-{sha8}-int8-sparse-onnxruntime"
        assert got.name != engine_folder_name("reference", "int8", "onnxruntime", True)
        assert json.loads((got / MANIFEST_NAME).read_text())["parent_sha256"] == sha256_file(REFERENCE_SPARSE_STREAM_ONNX)
    for folder, parent in ((dense, REF), (fine_tuned, REFERENCE_SPARSE_STREAM_ONNX)):
        assert json.loads((folder / MANIFEST_NAME).read_text())["parent_sha256"] == sha256_file(parent)
    # an unstamped sparse parent given to check (--sparse-onnx) gets the hashed name too (derived=True)
    assert engine_model_name("reference", REF, derived=True) == f"reference-{sha256_file(REF)[:8]}"
