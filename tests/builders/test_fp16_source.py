"""An FP16 model given to ``build`` as its source is refused in one line."""

from __future__ import annotations

from tests.helpers.cli_errors import refused


def test_an_fp16_model_given_as_the_build_source_is_refused(tmp_path, cli):
    from cosyedge.models import REFERENCE_STREAM_ONNX

    rc, _o, err = cli("build", "--onnx", REFERENCE_STREAM_ONNX, "--fp16", "-q", "-o", tmp_path / "e")
    assert rc == 0, err
    fp16 = next((tmp_path / "e").glob("*-fp16-onnxruntime")) / "model.onnx"
    copy = tmp_path / "fl16.onnx"
    copy.write_bytes(fp16.read_bytes())
    for flags in ([], ["--fp16"], ["--int8"]):
        rc, _o, err = cli("build", "--onnx", copy, *flags, "-q", "-o", tmp_path / "e2")
        line = refused(rc, err, 2)
        assert f"{copy} already holds FP16 tensors" in line and "build from the FP32 stream ONNX" in line, flags
    assert not (tmp_path / "e2").exists() or not any((tmp_path / "e2").iterdir())
