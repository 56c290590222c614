"""``cosyedge compare REF CAND`` takes the more exact model (the FP32 reference) first: an FP16 engine given as REF
(the arguments swapped) exited 1 "fp32 candidate ... outside tolerance", an accuracy regression that is none. Now exit
2, one line saying the arguments may be swapped, nothing written. ``check`` refuses any non-FP32 reference, as before;
compare still takes two builds of one precision (an INT8 engine against an INT8 variant, test_cli_compare.py)."""

from __future__ import annotations

import pytest

from cosyedge.errors import UsageError


@pytest.fixture(scope="module")
def fp16_engine(ref_onnx, tmp_path_factory):
    from cosyedge.builders import build_engine

    return build_engine(ref_onnx, backend="onnxruntime", out_dir=tmp_path_factory.mktemp("fp16"),
                        precision="fp16")


def test_an_fp16_reference_is_refused_as_swapped_arguments(cli, ref_onnx, fp16_engine, tmp_path):
    js = tmp_path / "out.json"
    rc, out, err = cli("compare", fp16_engine, ref_onnx, "--no-pesq", "--json", js)
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("[!] ") and "Traceback" not in err
    assert (f"the reference {fp16_engine} is a fp16 model, less exact than the fp32 candidate {ref_onnx}: the "
            "arguments may be swapped") in err
    assert f"cosyedge compare {ref_onnx} {fp16_engine}" in err  # the command in the right order
    assert out == "" and not js.exists()


def test_check_refuses_a_non_fp32_reference_as_before(cli, fp16_engine, tmp_path):
    rc, out, err = cli("check", "--onnx", fp16_engine / "model.onnx", "--baseline", tmp_path / "b.json")
    assert rc == 2 and err.count("\n") == 1, err
    assert "is a fp16 model; give the FP32 streaming ONNX" in err and not (tmp_path / "b.json").exists()


def test_library_check_reference(ref_onnx, fp16_engine):
    from cosyedge.compare.models import check_reference, load_compare_model

    ref, fp16 = load_compare_model(ref_onnx), load_compare_model(fp16_engine)
    check_reference(ref, fp16)  # the right order passes
    check_reference(fp16, fp16)  # two builds of one precision
    with pytest.raises(UsageError, match="may be swapped"):
        check_reference(fp16, ref)
    with pytest.raises(UsageError, match="give the FP32 streaming ONNX"):
        check_reference(fp16)  # check: FP32 only
