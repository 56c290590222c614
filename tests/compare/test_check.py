"""cosyedge check: baseline gate, exit codes (0 pass, 1 regression, 2 bad input), table, JSON, JUnit.

Baselines and engines are made in tmp folders (never the committed hash); utterances are 3 s pieces of
the demo recording after 10 s (``--utterances``), 100 ms chunks.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from cosyedge.artifacts import model_content_sha256, sha256_file
from cosyedge.cli.main import main
from cosyedge.compare.baseline import default_baseline_path, regression
from cosyedge.compare.check import run_check
from cosyedge.models import REFERENCE_STREAM_ONNX

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def baseline(cmp_dir, ref_onnx, engines, calib_dir, utt_dir, fp32_engine, int8_engine) -> Path:
    """fp32 + int8 baseline of the (copied) reference, written by the CLI's --update-baseline."""
    path = cmp_dir / "base" / "accuracy.json"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--update-baseline", "--precisions",
               "fp32,int8", "--engines-dir", str(engines), "--calib", str(calib_dir), "--utterances", str(utt_dir),
               "--no-pesq", "-q"])
    assert rc == 0
    return path


def test_update_baseline_then_check_passes(baseline, ref_onnx, engines, utt_dir, tmp_path, capsys):
    data = json.loads(baseline.read_text())
    assert data["kind"] == "cosyedge.accuracy-baseline" and set(data["labels"]) == {"fp32", "int8"}
    assert data["chunk_samples"] == 1600 and [u["name"] for u in data["utterances"]] == ["demo-late-clean",
                                                                                            "demo-late-noisy"]
    m = data["labels"]["int8"]["metrics"]
    assert 25.0 < m["teacher-forced/demo-late-noisy/enhanced/snr_db"] < 80.0
    assert data["labels"]["fp32"]["metrics"]["free-running/demo-late-noisy/enhanced/snr_db"] == 150.0
    # ONNX Runtime's INT8 takes its activation steps per call: no calibration to keep next to the baseline
    assert not (baseline.parent / "reference.int8.amax.json").exists()
    capsys.readouterr()
    js, ju = tmp_path / "r.json", tmp_path / "r.xml"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--engines-dir", str(engines),
               "--utterances", str(utt_dir), "--no-pesq", "--json", str(js), "--junit", str(ju)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASS: fp32, int8 within baseline tolerance" in out
    assert re.search(r"int8\s+teacher-forced\s+demo-late-noisy\s+\d+\.\d\d\s+\d+\.\d\d", out)
    rep = json.loads(js.read_text())
    assert rep["passed"] is True and rep["regressions"] == []
    suite = ET.parse(ju).getroot().find("testsuite")
    assert suite.get("tests") == "8" and suite.get("failures") == "0"


def test_int8_is_rebuilt_in_a_fresh_engines_folder_without_calibration_audio(baseline, ref_onnx, utt_dir, tmp_path):
    """A fresh engines folder (CI), no calibration set: INT8 is rebuilt, same figures."""
    rep = run_check(ref_onnx, baseline=baseline, precisions=["int8"], engines_dir=tmp_path / "eng",
                    utterances=_utts(utt_dir), pesq=False)
    assert rep["passed"], rep["regressions"]
    m = rep["labels"]["int8"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/snr_db"]
    assert m["value"] == pytest.approx(m["baseline"], abs=1e-4)



def test_users_own_int8_build_on_another_calibration_set_is_the_engine_check_gates(baseline, ref_onnx, utt_dir,
                                                                                    tmp_path):
    """A user's own 'cosyedge build --int8 --calib DIR' in the engines folder: ONNX Runtime's INT8 calibrates nothing,
    so it is the same engine as check's (not recalibrated, reused) and gives the baseline's figures."""
    from cosyedge.builders import build_engine
    from cosyedge.precision.calibset import make_calibration_set
    from tests.precision import int8_fixtures as fx

    rec = fx.write_recordings(tmp_path / "rec", count=16, seed=7, seconds=0.5)
    other = make_calibration_set(tmp_path / "calib", from_dir=rec).folder
    eng = tmp_path / "eng"
    mine = build_engine(ref_onnx, backend="onnxruntime", out_dir=eng, precision="int8", calib=other)
    before = json.loads((mine / "manifest.json").read_text())
    stamp = (mine / "manifest.json").stat().st_mtime_ns
    assert before["calibration_sha256"] is None and before["reports"]["int8"]["calibrated"] is False
    assert not list(other.glob("*.amax.json"))
    rep = run_check(ref_onnx, baseline=baseline, precisions=["int8"], engines_dir=eng,
                    utterances=_utts(utt_dir), pesq=False)
    assert (mine / "manifest.json").stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert rep["passed"], rep["regressions"]
    m = rep["labels"]["int8"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/snr_db"]
    assert m["value"] == pytest.approx(m["baseline"], abs=1e-4)


def test_missing_label_hint_keeps_the_baseline_labels(baseline, ref_onnx, engines, utt_dir, capsys):
    """--update-baseline rewrites the baseline with exactly --precisions: the hint for a label the baseline
    lacks must name the labels it already has, or following it drops them (and breaks the CI gate)."""
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "fp16",
               "--engines-dir", str(engines), "--utterances", str(utt_dir), "--no-pesq"])
    line = _one_line_error(capsys)
    assert rc == 2 and "has no entry for ['fp16']" in line
    assert "'cosyedge check --update-baseline --precisions fp32,int8,fp16'" in line


def test_update_baseline_of_one_label_keeps_the_others(baseline, ref_onnx, engines, utt_dir, tmp_path):
    """Re-measuring one label rewrites that label only: the other labels of a baseline of the same model,
    utterances and chunk stay, so the CI gate keeps gating them."""
    path = tmp_path / "copy.json"
    shutil.copy(baseline, path)
    before = json.loads(path.read_text())["labels"]
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--update-baseline", "--precisions",
               "fp32", "--engines-dir", str(engines), "--utterances", str(utt_dir), "--no-pesq", "-q"])
    assert rc == 0
    after = json.loads(path.read_text())["labels"]
    assert set(after) == {"fp32", "int8"} and after["int8"] == before["int8"]
    # another chunk length: the old values no longer apply and are dropped
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--update-baseline", "--precisions",
               "fp32", "--engines-dir", str(engines), "--utterances", str(utt_dir), "--no-pesq", "-q",
               "--chunk-ms", "20"])
    assert rc == 0 and set(json.loads(path.read_text())["labels"]) == {"fp32"}


def _utts(d):
    from cosyedge.compare.utterances import utterances_from

    return utterances_from(d, 16000)


def test_qdq_scale_x4_fails_check_exit_1_naming_the_metric(baseline, ref_onnx, engines, utt_dir, qdq_x4, tmp_path,
                                                             capsys):
    ju = tmp_path / "r.xml"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "int8",
               "--candidate", f"int8={qdq_x4}", "--engines-dir", str(engines), "--utterances", str(utt_dir),
               "--no-pesq", "--junit", str(ju)])
    assert rc == 1
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("[!]")]
    assert len(lines) == 1 and "Traceback" not in cap.err
    assert lines[0].startswith("[!] accuracy regression: int8 ") and "SNR" in lines[0] and "< baseline" in lines[0]
    assert f"find the first tensor whose error jumps (int8): cosyedge compare {ref_onnx} {qdq_x4} --mark-all" in cap.out
    fails = [f for f in ET.parse(ju).getroot().iter("failure")]
    assert fails and any("state_out" in (f.text or "") or "enhanced/snr_db" in (f.text or "") for f in fails)


def test_dropped_state_fails_check_naming_the_state(baseline, ref_onnx, engines, utt_dir, drop_state, tmp_path,
                                                     capsys):
    js = tmp_path / "r.json"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "fp32",
               "--candidate", f"fp32={drop_state}", "--engines-dir", str(engines), "--utterances", str(utt_dir),
               "--no-pesq", "--json", str(js)])
    assert rc == 1
    _one_line_error(capsys)
    regs = json.loads(js.read_text())["regressions"]
    assert "fp32 teacher-forced/demo-late-noisy/state_out.03/snr_db: SNR 0.00 dB < baseline 150.00 dB - 1 dB" in regs


def test_swapped_states_fail_check_naming_both(two_state, utt_dir, tmp_path, capsys):
    ref_p, cand_p, (a, b) = two_state
    base = tmp_path / "two.json"
    args = ["check", "--onnx", str(ref_p), "--baseline", str(base), "--precisions", "fp32", "--engines-dir",
            str(tmp_path / "eng"), "--utterances", str(utt_dir), "--no-pesq"]
    assert main(args + ["--update-baseline"]) == 0
    capsys.readouterr()
    assert main(args + ["--candidate", f"fp32={cand_p}"]) == 1
    out = capsys.readouterr().out
    assert f"teacher-forced/demo-late-noisy/{a}/snr_db" in out and f"teacher-forced/demo-late-noisy/{b}/snr_db" in out


def test_baseline_of_another_model_is_exit_2(baseline, two_state, utt_dir, capsys):
    rc = main(["check", "--onnx", str(two_state[0]), "--baseline", str(baseline), "--utterances", str(utt_dir)])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "is for model 'reference' sha256" in line and "cosyedge check --update-baseline" in line


def _with_other_proof(src: Path, dest: Path) -> Path:
    """``src`` with another machine-measured ``cosyedge.proof``: the same model as exported on another CPU."""
    model = onnx.load(str(src))
    proof = next((p for p in model.metadata_props if p.key == "cosyedge.proof"), None)
    if proof is None:
        proof = model.metadata_props.add()
        proof.key = "cosyedge.proof"
    proof.value = '{"max_abs": 2.0e-06}'
    onnx.save(model, str(dest))
    assert sha256_file(dest) != sha256_file(src) and model_content_sha256(dest) == model_content_sha256(src)
    return dest


def _with_changed_weight(src: Path, dest: Path, delta: float) -> Path:
    """``src`` with ``delta`` added to the first value of its first initializer: another model."""
    model = onnx.load(str(src))
    w = model.graph.initializer[0]
    arr = numpy_helper.to_array(w).copy()
    arr.flat[0] += delta
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save(model, str(dest))
    return dest


def test_baseline_recognises_its_model_exported_on_another_cpu(ref_onnx, utt_dir, tmp_path):
    """CI broke when DeepFilterNet3's export, identical in graph and weights, recorded another proof error on an
    AVX-512 machine than on the AVX2 one the baseline was made on (``cosyedge.proof`` differs, so the file hash did).
    The baseline also records the hash without that key: such a file is accepted; a changed weight is not."""
    from cosyedge.compare.baseline import load_baseline
    from cosyedge.compare.models import load_compare_model
    from cosyedge.errors import UsageError

    good = _hand_baseline(ref_onnx, utt_dir, {"fp32": _LENIENT})
    other_cpu = _with_other_proof(ref_onnx, tmp_path / "other_cpu.onnx")
    good["model"]["content_sha256"] = model_content_sha256(other_cpu)
    base = _write(tmp_path / "base.json", good)
    with pytest.raises(UsageError):  # no content hash recorded: the file hash decides, as before
        load_baseline(_write(tmp_path / "old.json", {**good, "model": {k: v for k, v in good["model"].items()
                                                                        if k != "content_sha256"}}),
                      load_compare_model(other_cpu))
    assert good["model"]["sha256"] != sha256_file(other_cpu)
    load_baseline(base, load_compare_model(other_cpu))  # accepted: only the machine-measured proof differs
    changed = _with_changed_weight(other_cpu, tmp_path / "changed.onnx", 1.0)
    with pytest.raises(UsageError, match="the model changed"):
        load_baseline(base, load_compare_model(changed))


def test_check_gates_the_same_model_exported_on_another_cpu(baseline, ref_onnx, utt_dir, tmp_path, capsys):
    """The whole gate, not only the model line: CI failed at each label's recorded parent (and would have at the
    INT8 amax cache) after the model line accepted DeepFilterNet3's AVX-512 export. The written baseline and amax
    cache record the content hash per label; a baseline from before that (content hash on the model line only)
    is accepted too; a changed weight is still refused."""
    other = _with_other_proof(ref_onnx, tmp_path / "other_cpu.onnx")
    data = json.loads(baseline.read_text())
    content = model_content_sha256(ref_onnx)
    assert data["model"]["content_sha256"] == content
    assert {lab: v["reference"]["content_sha256"] for lab, v in data["labels"].items()} == {"fp32": content,
                                                                                             "int8": content}
    engines = tmp_path / "engines"
    argv = ["--onnx", str(other), "--engines-dir", str(engines), "--utterances", str(utt_dir), "--no-pesq"]
    capsys.readouterr()
    rc = main(["check", "--baseline", str(baseline), *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "PASS: fp32, int8 within baseline tolerance" in out.out
    legacy_dir = tmp_path / "legacy"  # labels without content hashes, amax cache without one
    legacy_dir.mkdir()
    for lab in data["labels"].values():
        del lab["reference"]["content_sha256"]
    legacy = _write(legacy_dir / "accuracy.json", data)
    rc = main(["check", "--baseline", str(legacy), *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    changed = _with_changed_weight(other, tmp_path / "changed.onnx", 1.0)
    rc = main(["check", "--baseline", str(baseline), *argv[2:], "--onnx", str(changed)])
    assert rc == 2 and "the model changed" in _one_line_error(capsys)


def test_amax_cache_of_another_model_is_refused_by_content_too(ref_onnx, int8_flat_engine, tmp_path):
    from cosyedge.errors import ArtifactError
    from cosyedge.precision.calibrate import load_amax

    amax = Path(json.loads((int8_flat_engine / "manifest.json").read_text())["reports"]["int8"]["amax_path"])
    other = _with_other_proof(ref_onnx, tmp_path / "other_cpu.onnx")
    load_amax(amax, sha256_file(other), str(other), model_path=other)  # same content: accepted
    with pytest.raises(ArtifactError, match="calibrated for another model"):
        load_amax(amax, sha256_file(other), str(other))  # no model file given: the file hash decides
    model = onnx.load(str(other))
    model.doc_string = "edited"  # not machine-measured: another content hash
    onnx.save(model, str(tmp_path / "edited.onnx"))
    with pytest.raises(ArtifactError, match="calibrated for another model"):
        load_amax(amax, sha256_file(tmp_path / "edited.onnx"), "edited", model_path=tmp_path / "edited.onnx")


def test_candidate_with_other_inputs_outputs_is_exit_2(baseline, ref_onnx, engines, utt_dir, two_state, capsys):
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "fp32",
               "--candidate", f"fp32={two_state[0]}", "--engines-dir", str(engines), "--utterances", str(utt_dir)])
    assert rc == 2
    assert "have different inputs: missing in candidate" in _one_line_error(capsys)
    rc = main(["compare", str(ref_onnx), str(two_state[0]), "--utterances", str(utt_dir)])
    assert rc == 2
    assert "have different inputs" in _one_line_error(capsys)


def test_candidate_for_a_label_not_checked_is_exit_2(baseline, ref_onnx, engines, fp32_engine, utt_dir, capsys):
    """Found by a newcomer check: `--precisions fp32 --candidate int8=...` passed without looking at the int8
    engine at all."""
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "fp32",
               "--candidate", f"int8={fp32_engine}", "--engines-dir", str(engines), "--utterances", str(utt_dir),
               "--no-pesq"])
    assert rc == 2
    assert "is for a label this check does not run" in _one_line_error(capsys)


def _fake_trt_folder(src: Path, dest: Path) -> Path:
    """An engine folder whose manifest says TensorRT (plan bytes are not a real plan)."""
    from cosyedge.artifacts import sha256_file

    shutil.copytree(src, dest)
    (dest / "engine.plan").write_bytes(b"not a real plan")
    m = json.loads((dest / "manifest.json").read_text())
    m.update(backend="tensorrt", plan={"file": "engine.plan", "sha256": sha256_file(dest / "engine.plan")})
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


def test_engine_that_cannot_run_here_is_exit_2(baseline, ref_onnx, engines, fp32_engine, utt_dir, tmp_path, capsys):
    from cosyedge._lazy import has_module

    if has_module("tensorrt") and has_module("pycuda"):
        pytest.skip("TensorRT is installed here: a TensorRT engine can run")
    trt_dir = _fake_trt_folder(fp32_engine, tmp_path / "reference-fp32-tensorrt")
    rc = main(["compare", str(ref_onnx), str(trt_dir), "--utterances", str(utt_dir)])
    assert rc == 2
    assert "is a TensorRT engine and cannot run on this machine" in _one_line_error(capsys)
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--precisions", "fp32",
               "--candidate", f"fp32={trt_dir}", "--engines-dir", str(engines), "--utterances", str(utt_dir)])
    assert rc == 2
    assert "cannot run on this machine" in _one_line_error(capsys)


def test_int8_without_kept_calibration_is_exit_2_saying_what_to_run(baseline, ref_onnx, utt_dir, tmp_path, capsys,
                                                                    monkeypatch):
    """No amax cache next to the baseline: fine where the INT8 build calibrates nothing (the reference on ONNX
    Runtime); exit 2 saying what to run where it would calibrate (e.g. a model with Scan bodies: placement trt)."""
    import cosyedge.precision.int8 as int8_mod

    other = tmp_path / "b" / "accuracy.json"
    other.parent.mkdir()
    shutil.copy(baseline, other)  # same model, no reference.int8.amax.json next to it
    argv = ["check", "--onnx", str(ref_onnx), "--baseline", str(other), "--precisions", "int8",
            "--engines-dir", str(tmp_path / "eng"), "--utterances", str(utt_dir), "--no-pesq"]
    assert int8_mod.needs_calibration(ref_onnx, "ort_matmul") is False
    assert int8_mod.needs_calibration(ref_onnx, "trt") is True
    assert main(argv) == 0
    capsys.readouterr()
    monkeypatch.setattr(int8_mod, "needs_calibration", lambda *a, **k: True)
    rc = main([a if a != str(tmp_path / "eng") else str(tmp_path / "eng2") for a in argv])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "no INT8 calibration for 'int8'" in line and "cosyedge check --update-baseline" in line


def test_bad_options_are_exit_2(ref_onnx, utt_dir, capsys):
    assert main(["check", "--precisions", "int4"]) == 2
    assert "unknown precision 'int4'" in _one_line_error(capsys)
    assert main(["check", "--candidate", "nolabel"]) == 2
    assert "LABEL=PATH" in _one_line_error(capsys)
    assert main(["compare", str(ref_onnx), str(ref_onnx), "--chunk-ms", "7"]) == 2
    assert "--chunk-ms 7 (112 samples) is not a multiple of the model's total stride 160 samples = 10 ms" in \
        _one_line_error(capsys)


def test_regression_rules():
    assert regression("snr_db", 40.0, 41.5) == "SNR 40.00 dB < baseline 41.50 dB - 1 dB"
    assert regression("snr_db", 40.6, 41.5) is None
    assert regression("snr_db", 120.0, 150.0) is None  # float32-exact either way
    assert regression("max_abs", 0.016, 0.01) is not None and regression("max_abs", 0.014, 0.01) is None
    assert regression("pesq", 3.30, 3.40) is not None and regression("pesq", 3.36, 3.40) is None
    assert regression("si_snr_db", float("nan"), 5.0) == "is NaN"


def test_committed_baseline_is_well_formed():
    """The committed baseline of the bundled model (its hash changes with the model: not asserted here)."""
    path = default_baseline_path("reference")
    data = json.loads(path.read_text())
    assert data["kind"] == "cosyedge.accuracy-baseline" and re.fullmatch(r"[0-9a-f]{64}", data["model"]["sha256"])
    assert set(data["labels"]) >= {"fp16", "int8-sparse"}
    assert (path.parent / data["labels"]["int8-sparse"]["amax"]).is_file()
    # the sparse label is measured against the committed 2:4 fine-tuned model, the others against the model
    from cosyedge.artifacts import sha256_file
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX

    assert data["labels"]["int8-sparse"]["reference"]["sha256"] == sha256_file(REFERENCE_SPARSE_STREAM_ONNX)
    assert data["labels"]["fp16"]["reference"]["sha256"] == data["model"]["sha256"]
    assert data["model"]["sha256"] == sha256_file(REFERENCE_STREAM_ONNX)
    assert data["regenerate"] == "cosyedge check --update-baseline"


def test_ci_runs_check_for_fp16_and_int8_sparse_after_the_tests():
    lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    i_test = next(i for i, ln in enumerate(lines) if "pytest" in ln)
    i_check = next(i for i, ln in enumerate(lines) if ln.startswith("cosyedge check"))
    assert i_test < i_check and "--precisions fp16,int8-sparse" in lines[i_check]


@pytest.fixture(scope="module")
def sparse_parent_onnx(cmp_dir, ref_onnx) -> Path:
    """A stand-in for a 2:4 fine-tuned model: the reference pruned 2:4, then its pruned weights scaled by 1.05
    (the pattern stays 2:4), so it differs from what pruning the reference on the fly gives."""
    from cosyedge.precision.sparsity import sparsify_onnx

    pruned = cmp_dir / "pruned.onnx"
    rep = sparsify_onnx(ref_onnx, pruned)
    m = onnx.load(str(pruned))
    names = {layer["weight"] for layer in rep["layers"] if layer["eligible"]}
    scaled = 0
    for t in m.graph.initializer:
        if t.name in names:
            w = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array((w * 1.05).astype(w.dtype), t.name))
            scaled += 1
    assert scaled >= 10
    p = cmp_dir / "finetuned.sparse.stream.onnx"
    onnx.save(m, str(p))
    return p


def test_sparse_labels_are_built_from_and_compared_with_the_sparse_parent(ref_onnx, sparse_parent_onnx, engines,
                                                                           utt_dir, tmp_path, capsys):
    """With --sparse-onnx, fp32-sparse is the parent itself (pruning a 2:4 model changes nothing): exact
    against the parent, and the baseline records the parent's hash. Without it the same label is the
    reference pruned on the fly, far from the dense reference. A baseline measured against one parent
    refuses a check against the other (exit 2)."""
    from cosyedge.artifacts import sha256_file

    with_parent, on_the_fly = tmp_path / "with.json", tmp_path / "fly.json"
    common = ["--onnx", str(ref_onnx), "--precisions", "fp32-sparse", "--engines-dir", str(tmp_path / "eng"),
              "--utterances", str(utt_dir), "--no-pesq", "-q"]
    assert main(["check", *common, "--baseline", str(with_parent), "--update-baseline",
                 "--sparse-onnx", str(sparse_parent_onnx)]) == 0
    entry = json.loads(with_parent.read_text())["labels"]["fp32-sparse"]
    assert entry["reference"] == {"path": sparse_parent_onnx.name, "sha256": sha256_file(sparse_parent_onnx),
                                  "content_sha256": model_content_sha256(sparse_parent_onnx)}
    assert entry["metrics"]["free-running/demo-late-noisy/enhanced/snr_db"] == 150.0
    assert main(["check", *common, "--baseline", str(on_the_fly), "--update-baseline"]) == 0
    entry = json.loads(on_the_fly.read_text())["labels"]["fp32-sparse"]
    assert entry["reference"]["sha256"] == sha256_file(ref_onnx)
    assert 5.0 < entry["metrics"]["free-running/demo-late-noisy/enhanced/snr_db"] < 40.0
    assert main(["check", *common, "--baseline", str(with_parent), "--sparse-onnx", str(sparse_parent_onnx)]) == 0
    capsys.readouterr()
    assert main(["check", *common, "--baseline", str(with_parent)]) == 2
    line = _one_line_error(capsys)
    assert "measured 'fp32-sparse' against another FP32 model" in line and "--sparse-onnx" in line


def test_sparse_parent_of_another_model_or_contract_is_exit_2(baseline, ref_onnx, engines, utt_dir, two_state,
                                                               tmp_path, capsys):
    args = ["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--engines-dir", str(engines),
            "--utterances", str(utt_dir), "--no-pesq", "--precisions", "fp32-sparse"]
    assert main([*args, "--sparse-onnx", str(two_state[0])]) == 2
    line = _one_line_error(capsys)
    assert "--sparse-onnx: " in line and "is model 'two_state', the reference is 'reference'" in line
    m = onnx.load(str(two_state[0]))  # the same model named 'reference': its states and inputs still differ
    for prop in m.metadata_props:
        if prop.key == "cosyedge.name":
            prop.value = "reference"
    renamed = tmp_path / "renamed.onnx"
    onnx.save(m, str(renamed))
    assert main([*args, "--sparse-onnx", str(renamed)]) == 2
    line = _one_line_error(capsys)
    assert "--sparse-onnx does not fit the reference" in line and "different inputs" in line
    assert main([*args, "--sparse-onnx", str(tmp_path / "missing.onnx")]) == 3  # a missing file
    line = _one_line_error(capsys)
    assert f"--sparse-onnx {tmp_path / 'missing.onnx'} not found" in line
    # a dense-only check never resolves the sparse parent
    assert main([*args[:-2], "--precisions", "fp32", "--sparse-onnx", str(two_state[0])]) == 0


def test_bundled_model_checks_sparse_labels_against_its_fine_tuned_sibling(ref_onnx):
    from cosyedge.compare.engines import sparse_parent
    from cosyedge.compare.models import load_compare_model
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX

    bundled = load_compare_model(REFERENCE_STREAM_ONNX)
    assert sparse_parent(bundled).model_path.resolve() == REFERENCE_SPARSE_STREAM_ONNX.resolve()
    copied = load_compare_model(ref_onnx)  # not the bundled path: no sibling, sparse builds prune it on the fly
    assert sparse_parent(copied) is copied


def test_bundled_sparse_model_fits_a_copy_of_the_bundled_model_with_another_proof(tmp_path):
    """A copy of the bundled dense model that differs only in the machine-measured proof (another CPU's export)
    is the parent the bundled sparse model records: --sparse-onnx with it is accepted; a changed weight is the
    stale case and is refused."""
    from cosyedge.compare.engines import sparse_parent
    from cosyedge.compare.models import load_compare_model
    from cosyedge.errors import UsageError
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX

    other = load_compare_model(_with_other_proof(REFERENCE_STREAM_ONNX, tmp_path / "other_cpu.onnx"))
    got = sparse_parent(other, REFERENCE_SPARSE_STREAM_ONNX)
    assert got.model_path.resolve() == REFERENCE_SPARSE_STREAM_ONNX.resolve()
    changed = _with_changed_weight(tmp_path / "other_cpu.onnx", tmp_path / "changed.onnx", 1e-3)
    with pytest.raises(UsageError, match="was fine-tuned from another dense model"):
        sparse_parent(load_compare_model(changed), REFERENCE_SPARSE_STREAM_ONNX)


def test_bundled_sparse_model_records_the_bundled_dense_model_as_its_parent():
    """A dense retrain without a new sparse fine-tune leaves a stale sparse model: this fails then."""
    from cosyedge.artifacts import sha256_file
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX
    from cosyedge.precision.sparsity import dense_parent_sha256

    assert dense_parent_sha256(REFERENCE_SPARSE_STREAM_ONNX) == sha256_file(REFERENCE_STREAM_ONNX)


def test_sparse_parent_fine_tuned_from_another_dense_model_is_exit_2(baseline, ref_onnx, sparse_parent_onnx,
                                                                     engines, utt_dir, tmp_path, capsys):
    from cosyedge.artifacts import sha256_file
    from cosyedge.compare.engines import sparse_parent
    from cosyedge.compare.models import load_compare_model
    from cosyedge.precision.sparsity import dense_parent_sha256, stamp_dense_parent

    assert dense_parent_sha256(sparse_parent_onnx) is None  # nothing recorded: accepted as before
    stale = tmp_path / "stale.sparse.stream.onnx"
    shutil.copy(sparse_parent_onnx, stale)
    other_dense = tmp_path / "older-dense.stream.onnx"
    m = onnx.load(str(ref_onnx))
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(m.graph.initializer[0]) * 0.5,
                                                            m.graph.initializer[0].name))
    onnx.save(m, str(other_dense))
    before = numpy_helper.to_array(onnx.load(str(stale)).graph.initializer[3])
    assert stamp_dense_parent(stale, other_dense) == sha256_file(other_dense) == dense_parent_sha256(stale)
    assert (numpy_helper.to_array(onnx.load(str(stale)).graph.initializer[3]) == before).all()  # weights kept
    args = ["check", "--onnx", str(ref_onnx), "--baseline", str(baseline), "--engines-dir", str(engines),
            "--utterances", str(utt_dir), "--no-pesq", "--precisions", "fp32-sparse", "--sparse-onnx", str(stale)]
    assert main(args) == 2
    line = _one_line_error(capsys)
    assert (f"--sparse-onnx: {stale} was fine-tuned from another dense model "
            f"(SHA-256 {sha256_file(other_dense)[:12]}, the reference {ref_onnx} is {sha256_file(ref_onnx)[:12]})"
            in line and "scripts/training/finetune_sparse.py" in line)
    stamp_dense_parent(stale, ref_onnx)  # fine-tuned from the reference: accepted
    ref = load_compare_model(ref_onnx)
    assert sparse_parent(ref, stale).model_path == stale


def test_dense_and_sparse_labels_in_one_run_each_use_their_parent(ref_onnx, sparse_parent_onnx, fp32_engine,
                                                                  utt_dir, tmp_path, capsys):
    """fp32 against the reference and fp32-sparse against the sparse parent, in one run: both exact (each
    cache belongs to its parent); a --candidate built from another model is exit 2; updating only fp32 on a
    baseline whose fp32-sparse was measured against another parent drops that stale label."""
    from cosyedge.artifacts import sha256_file

    path, js = tmp_path / "mixed.json", tmp_path / "r.json"
    common = ["--onnx", str(ref_onnx), "--baseline", str(path), "--engines-dir", str(tmp_path / "eng"),
              "--utterances", str(utt_dir), "--no-pesq", "-q"]
    assert main(["check", *common, "--update-baseline", "--precisions", "fp32,fp32-sparse",
                 "--sparse-onnx", str(sparse_parent_onnx), "--json", str(js)]) == 0
    rep = json.loads(js.read_text())
    assert rep["labels"]["fp32"]["reference_sha256"] == sha256_file(ref_onnx)
    assert rep["labels"]["fp32-sparse"]["reference_sha256"] == sha256_file(sparse_parent_onnx)
    for lab in ("fp32", "fp32-sparse"):
        assert rep["labels"][lab]["metrics"]["free-running/demo-late-noisy/enhanced/snr_db"]["value"] == 150.0
    capsys.readouterr()
    assert main(["check", *common, "--precisions", "fp32-sparse", "--candidate", f"fp32-sparse={fp32_engine}",
                 "--sparse-onnx", str(sparse_parent_onnx)]) == 2  # an engine of the dense reference
    assert "was built from another model" in _one_line_error(capsys)
    assert main(["check", *common, "--update-baseline", "--precisions", "fp32"]) == 0  # no sparse parent now
    assert set(json.loads(path.read_text())["labels"]) == {"fp32"}


@pytest.mark.parametrize("text", ["", ",", " , "])
def test_empty_precisions_are_refused_not_defaulted(text, capsys):
    """`--precisions ""` once ran the whole default check; every empty list is a one-line exit 2."""
    assert main(["check", "--precisions", text]) == 2
    assert "--precisions is empty" in _one_line_error(capsys)


def test_missing_or_unreadable_baseline_is_exit_3(tmp_path, capsys):
    """A --baseline file that is missing, not JSON or not a baseline is a bad file (exit 3), before any build."""
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, words in (("missing.json", "not found; create it"), ("text.json", "is not valid JSON"),
                        ("list.json", "is not a cosyedge accuracy baseline")):
        assert main(["check", "--precisions", "fp16", "--baseline", str(tmp_path / name), "--no-pesq",
                     "--engines-dir", str(tmp_path / "engines")]) == 3
        assert words in _one_line_error(capsys)
    assert not (tmp_path / "engines").exists()


def _hand_baseline(ref_onnx: Path, utt_dir: Path, labels: dict) -> dict:
    """A well-formed baseline of the (copied) reference on ``utt_dir``, written by hand: ``labels`` maps a label to
    its metrics (lenient values: an FP32 engine passes them)."""
    from cosyedge.artifacts import SCHEMA_VERSION, sha256_file

    sha = sha256_file(ref_onnx)
    return {"kind": "cosyedge.accuracy-baseline", "schema_version": SCHEMA_VERSION, "cosyedge_version": "0.1.0",
            "model": {"name": "reference", "path": ref_onnx.name, "sha256": sha},
            "utterances": [u.describe() for u in _utts(utt_dir)], "chunk_samples": 1600,
            "labels": {lab: {"reference": {"path": ref_onnx.name, "sha256": sha}, "metrics": dict(m), "amax": None}
                       for lab, m in labels.items()}}


_LENIENT = {"teacher-forced/demo-late-noisy/enhanced/max_abs": 1.0}


def _malformed(data: dict, what: str) -> dict:
    data = json.loads(json.dumps(data))
    key = next(iter(_LENIENT))
    if what == "no labels":
        del data["labels"]
    elif what == "labels not an object":
        data["labels"] = ["fp32"]
    elif what == "labels empty":
        data["labels"] = {}
    elif what == "metrics a string":
        data["labels"]["fp32"]["metrics"] = "snr 40 dB"
    elif what == "metric a string":
        data["labels"]["fp32"]["metrics"][key] = "1.0"
    elif what == "metric NaN":
        data["labels"]["fp32"]["metrics"][key] = float("nan")
    elif what == "metric Infinity":
        data["labels"]["fp32"]["metrics"][key] = float("inf")
    elif what == "metric true":
        data["labels"]["fp32"]["metrics"][key] = True
    elif what == "label entry not an object":
        data["labels"]["fp32"] = "fp32"
    elif what == "no metrics":
        del data["labels"]["fp32"]["metrics"]
    elif what == "unknown label":
        data["labels"]["int4"] = data["labels"]["fp32"]
    elif what == "reference not an object":
        data["labels"]["fp32"]["reference"] = "reference.stream.onnx"
    elif what == "model a string":
        data["model"] = "reference"
    elif what == "utterances not a list":
        data["utterances"] = {"demo": "x"}
    elif what == "utterance without sha256":
        del data["utterances"][0]["sha256"]
    elif what == "chunk_samples a string":
        data["chunk_samples"] = "1600"
    elif what == "future schema_version":
        data["schema_version"] = 99
    return data


_FIELDS = {"no labels": "'labels'", "labels not an object": "'labels'", "labels empty": "'labels' is empty", "metrics a string": "'labels.fp32.metrics'",
           "metric a string": f"'labels.fp32.metrics.{next(iter(_LENIENT))}'",
           "metric NaN": f"'labels.fp32.metrics.{next(iter(_LENIENT))}'",
           "metric Infinity": f"'labels.fp32.metrics.{next(iter(_LENIENT))}'",
           "metric true": f"'labels.fp32.metrics.{next(iter(_LENIENT))}'",
           "label entry not an object": "'labels.fp32'", "no metrics": "'labels.fp32.metrics'",
           "unknown label": "'labels.int4'", "reference not an object": "'labels.fp32.reference'",
           "model a string": "'model'", "utterances not a list": "'utterances'",
           "utterance without sha256": "'utterances[0].sha256'", "chunk_samples a string": "'chunk_samples'",
           "future schema_version": "'schema_version' 99"}


@pytest.mark.parametrize("what", list(_FIELDS))
def test_malformed_baseline_is_one_line_exit_3_naming_the_field(what, ref_onnx, utt_dir, tmp_path, capsys):
    """A baseline that is JSON but malformed died with a KeyError/AttributeError/TypeError traceback and
    exit 1 (read by CI as an accuracy regression), and a NaN metric silently left the gate. The baseline is
    validated when loaded: one line naming the file and the field, exit 3, before any engine is built."""
    from cosyedge.compare.baseline import load_baseline
    from cosyedge.compare.models import load_compare_model

    good = _hand_baseline(ref_onnx, utt_dir, {"fp32": _LENIENT})
    load_baseline(_write(tmp_path / "good.json", good), load_compare_model(ref_onnx))  # the hand-made one is valid
    path = _write(tmp_path / "bad.json", _malformed(good, what))
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(path), "--engines-dir", str(tmp_path / "eng"),
               "--utterances", str(utt_dir), "--no-pesq"])
    line = _one_line_error(capsys)
    assert rc == 3, line
    assert line.startswith(f"[!] baseline {path}: ") and _FIELDS[what] in line, line
    assert "cosyedge check --update-baseline" in line
    assert not (tmp_path / "eng").exists()


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))  # NaN/Infinity are written as the JSON extensions Python reads back
    return path


def test_update_baseline_refuses_to_write_a_non_finite_metric(ref_onnx, utt_dir, tmp_path):
    """A NaN measured by --update-baseline was written as null, which no later check gates: refused instead."""
    from cosyedge.compare.baseline import _write_baseline
    from cosyedge.compare.models import load_compare_model
    from cosyedge.errors import UsageError

    ref = load_compare_model(ref_onnx)
    key = "free-running/demo-late-noisy/enhanced/pesq"
    report = {"labels": {"fp32": {"reference": str(ref_onnx), "reference_sha256": ref.model_sha256,
                                  "metrics": {key: {"value": float("nan")}}}}, "parents": {}}
    path = tmp_path / "b.json"
    with pytest.raises(UsageError, match=rf"cannot write baseline {re.escape(str(path))}: 'fp32' {key} is NaN"):
        _write_baseline(path, ref, _utts(utt_dir), 1600, report)
    assert not path.exists()


def _edited_engine(src: Path, dest: Path, **fields) -> Path:
    """A copy of engine folder ``src`` whose manifest has ``fields`` changed (model.onnx and its hash kept)."""
    shutil.copytree(src, dest)
    m = json.loads((dest / "manifest.json").read_text())
    m.update(fields)
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


def test_candidate_must_be_what_its_label_says(ref_onnx, fp32_engine, utt_dir, tmp_path, capsys):
    """'--candidate fp16=<an FP32 engine folder>' passed the fp16 gate. The label is checked against the
    engine's manifest (precision, sparse; a schema newer than this cosyedge is exit 3) and against the ONNX's
    own precision markers (FP16 initializers/casts, Q/DQ nodes), before anything is built or compared."""
    from cosyedge.artifacts import SCHEMA_VERSION

    base = _write(tmp_path / "b.json", _hand_baseline(ref_onnx, utt_dir, {lab: _LENIENT for lab in
                                                                         ("fp32", "fp16", "fp32-sparse", "int8")}))
    eng = tmp_path / "eng"

    def check(label, cand):
        rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(base), "--precisions", label,
                   "--candidate", f"{label}={cand}", "--engines-dir", str(eng), "--utterances", str(utt_dir),
                   "--no-pesq"])
        return rc, _one_line_error(capsys)

    rc, line = check("fp16", fp32_engine)
    assert rc == 2 and f"--candidate fp16={fp32_engine}: its manifest says precision 'fp32'" in line, line
    rc, line = check("fp32-sparse", fp32_engine)
    assert rc == 2 and f"--candidate fp32-sparse={fp32_engine}: its manifest says dense (sparse: false)" in line, line
    # a manifest edited to say fp16 over an FP32 model.onnx: the ONNX content contradicts the label
    said_fp16 = _edited_engine(fp32_engine, tmp_path / "said-fp16", precision="fp16")
    rc, line = check("fp16", said_fp16)
    assert rc == 2 and f"--candidate fp16={said_fp16}: " in line and "holds no FP16 tensor" in line, line
    rc, line = check("fp16", ref_onnx)  # a bare FP32 ONNX: no precision metadata, FP32 content
    assert rc == 2 and f"--candidate fp16={ref_onnx}: " in line and "holds no FP16 tensor" in line, line
    rc, line = check("int8", ref_onnx)
    assert rc == 2 and "has no QuantizeLinear/DequantizeLinear nodes" in line, line
    future = _edited_engine(fp32_engine, tmp_path / "future", schema_version=SCHEMA_VERSION + 1)
    rc, line = check("fp32", future)
    assert rc == 3 and f"schema_version {SCHEMA_VERSION + 1}, newer than this cosyedge understands" in line, line
    assert not eng.exists()  # refused before any build


def test_trimmed_or_made_up_baseline_metrics_are_named_not_gated(ref_onnx, fp32_engine, utt_dir, tmp_path, capsys):
    """A hand-trimmed baseline (fewer metric keys) or one with a made-up key passed silently: both are named on
    NOT GATED lines (and in the JSON report); the metrics that are in the baseline are still gated."""
    made_up = "free-running/demo-late-noisy/enhanced/made_up"
    base = _write(tmp_path / "b.json", _hand_baseline(ref_onnx, utt_dir, {"fp32": {**_LENIENT, made_up: 1.0}}))
    js = tmp_path / "r.json"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(base), "--candidate", f"fp32={fp32_engine}",
               "--utterances", str(utt_dir), "--no-pesq", "--engines-dir", str(tmp_path / "eng"), "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0, out
    notes = [ln for ln in out.splitlines() if ln.startswith("NOT GATED fp32: ")]
    assert len(notes) == 2, out
    assert re.search(r"\d+ measured metric\(s\) have no baseline value and were not gated", notes[0])
    assert notes[1].startswith(f"NOT GATED fp32: 1 baseline metric(s) were not measured by this check (e.g. {made_up}")
    assert "2 NOT GATED note(s) above" in out.splitlines()[-1]
    assert len(json.loads(js.read_text())["not_gated"]) == 2


def test_baseline_tolerances_are_applied(ref_onnx, int8_engine, utt_dir, tmp_path, capsys):
    """The baseline's 'tolerances' field was written but never read. It sets the gate: an INT8 output SNR fails
    against a baseline 1.5 dB above it with the default 1 dB and passes with 2 dB (the table says so); a negative
    or unknown tolerance is a malformed baseline (exit 3)."""
    key = "teacher-forced/demo-late-noisy/enhanced/snr_db"
    common = dict(candidates={"int8": int8_engine}, utterances=_utts(utt_dir), pesq=False, engines_dir=tmp_path / "e")
    rep = run_check(ref_onnx, baseline=_write(tmp_path / "m.json", _hand_baseline(ref_onnx, utt_dir, {"int8": _LENIENT})),
                    **common)
    snr = rep["labels"]["int8"]["metrics"][key]["value"]
    assert 25.0 < snr < 80.0 and rep["tolerances"]["snr_db"] == 1.0
    data = _hand_baseline(ref_onnx, utt_dir, {"int8": {key: snr + 1.5}})
    rep = run_check(ref_onnx, baseline=_write(tmp_path / "d.json", data), **common)
    assert not rep["passed"] and rep["regressions"][0].startswith(f"int8 {key}: SNR")
    data["tolerances"] = {"snr_db": 2.0}
    js = tmp_path / "r.json"
    rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(_write(tmp_path / "t2.json", data)),
               "--candidate", f"int8={int8_engine}", "--utterances", str(utt_dir), "--no-pesq",
               "--engines-dir", str(tmp_path / "e"), "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0 and "tolerances from the baseline: snr_db 2 (cosyedge's 1)" in out, out
    assert json.loads(js.read_text())["tolerances"]["snr_db"] == 2.0
    for tols, field in (({"snr_db": -1}, "'tolerances.snr_db' must be a finite number >= 0"),
                        ({"snr": 1.0}, "'tolerances.snr' is not a tolerance")):
        data["tolerances"] = tols
        rc = main(["check", "--onnx", str(ref_onnx), "--baseline", str(_write(tmp_path / "t.json", data)),
                   "--utterances", str(utt_dir), "--no-pesq", "--engines-dir", str(tmp_path / "eng")])
        line = _one_line_error(capsys)
        assert rc == 3 and field in line, line


def test_vacuous_utterances_directory_baseline_and_empty_onnx_are_named(ref_onnx, tmp_path, capsys):
    """Newcomer findings: --update-baseline accepted one 10-sample wav (it gates nothing); a directory as --baseline
    said 'not found'; a 0-byte .onnx said 'has no cosyedge metadata'. Each is now one line naming the problem."""
    import numpy as np
    import soundfile as sf

    from tests.eval.conftest import DEMO_CLEAN

    x, sr = sf.read(str(DEMO_CLEAN), dtype="float32")
    for name, sig, words in (("short", x[16000:16010], "is 0.001 s long; a check needs at least 1 s"),
                             ("silent", np.zeros(32000, np.float32), "is silent")):
        d = tmp_path / name
        for sub in ("noisy", "clean"):
            (d / sub).mkdir(parents=True)
            sf.write(str(d / sub / "a.wav"), sig, sr, subtype="FLOAT")
        rc = main(["check", "--onnx", str(ref_onnx), "--update-baseline", "--precisions", "fp32", "--baseline",
                   str(tmp_path / f"{name}.json"), "--utterances", str(d), "--no-pesq",
                   "--engines-dir", str(tmp_path / "eng")])
        line = _one_line_error(capsys)
        assert rc == 3 and words in line, line
        assert not (tmp_path / f"{name}.json").exists()
    (tmp_path / "bdir").mkdir()
    rc = main(["check", "--onnx", str(ref_onnx), "--precisions", "fp16", "--baseline", str(tmp_path / "bdir"),
               "--no-pesq", "--engines-dir", str(tmp_path / "eng")])
    line = _one_line_error(capsys)
    assert rc == 3 and "is a directory, not a baseline JSON file" in line, line
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    rc = main(["check", "--onnx", str(empty), "--precisions", "fp16", "--no-pesq", "--engines-dir",
               str(tmp_path / "eng")])
    line = _one_line_error(capsys)
    assert rc == 3 and f"ONNX file {empty} is empty (0 bytes)" in line, line
