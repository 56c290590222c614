"""``cosyedge compare REF ENGINE`` where ENGINE was built from another model is exit 2, one line,
as ``check --candidate`` says it (the one lineage check, :func:`cosyedge.compare.models.check_lineage`); a genuine
child, or a sibling built from the same model, still compares."""

from __future__ import annotations

import shutil

import pytest

from cosyedge.cli.main import main
from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX
from tests.helpers.cli_errors import one_error_line


@pytest.fixture(scope="module")
def foreign_engine(cmp_dir):
    """An FP32 ONNX Runtime engine of the bundled 2:4 fine-tuned model: same inputs, outputs and states as the
    reference, another model."""
    from cosyedge.builders import build_engine

    src = cmp_dir / "foreign" / "reference.sparse.stream.onnx"
    src.parent.mkdir(exist_ok=True)
    shutil.copy(REFERENCE_SPARSE_STREAM_ONNX, src)
    return build_engine(src, backend="onnxruntime", out_dir=cmp_dir / "foreign" / "engines", precision="fp32"), src


def _args(utt_dir):
    return ["--utterances", str(utt_dir), "--max-utterances", "1", "--no-pesq", "-q"]


def test_compare_refuses_an_engine_built_from_another_model(ref_onnx, foreign_engine, utt_dir, capsys):
    engine, src = foreign_engine
    assert main(["compare", str(ref_onnx), str(engine), *_args(utt_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    line = one_error_line(err)
    assert f"candidate {engine} was built from another model" in line and f"not from {ref_onnx}" in line


def test_check_candidate_says_it_in_the_same_words(ref_onnx, foreign_engine, utt_dir, tmp_path, capsys):
    engine, src = foreign_engine
    rc = main(["check", "--onnx", str(ref_onnx), "--precisions", "fp32", "--candidate", f"fp32={engine}",
               "--baseline", str(tmp_path / "b.json"), "--update-baseline", "--engines-dir", str(tmp_path / "e"),
               "--utterances", str(utt_dir), "--no-pesq", "-q"])
    assert rc == 2
    line = one_error_line(capsys)
    assert f"--candidate fp32={engine} was built from another model" in line and f"not from {ref_onnx}" in line
    assert not (tmp_path / "b.json").exists()


def test_compare_of_a_genuine_child_and_of_a_sibling_still_passes(ref_onnx, fp32_engine, cmp_dir, utt_dir, capsys):
    from cosyedge.builders import build_engine

    assert main(["compare", str(ref_onnx), str(fp32_engine), *_args(utt_dir)]) == 0
    assert "PASS: fp32 within tolerance on 1 utterance(s)" in capsys.readouterr().out
    sibling = build_engine(ref_onnx, backend="onnxruntime", out_dir=cmp_dir / "sibling", precision="fp32")
    assert main(["compare", str(fp32_engine), str(sibling), *_args(utt_dir)]) == 0  # REF an engine: its parent
    assert "PASS: fp32 within tolerance on 1 utterance(s)" in capsys.readouterr().out
