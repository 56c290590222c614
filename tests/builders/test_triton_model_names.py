"""A Triton model name is letters, digits, '_', '-' and '.' (not first): ``cosyedge build --backend triton`` refuses
any other ``--name`` in one line (exit 2) before writing anything (Triton's Python backend launches each model's stub
through an unquoted ``bash -c`` line holding its folder and instance name, so ``--name "a b"`` gave a repository
whose model never loads)."""

from __future__ import annotations

import pytest

from cosyedge.builders.names import check_triton_model_name
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX


@pytest.mark.parametrize("name", ["reference", "silero-vad", "reference-60b615af", "ref_2.1", "_x"])
def test_triton_names_accepted(name):
    assert check_triton_model_name(name) == name


@pytest.mark.parametrize("name", ["a b", "a/b", "", ".hidden", "-flag", "a'b", "a;b", "a$b", "é"])
def test_triton_names_refused(name):
    with pytest.raises(UsageError, match="cannot name a Triton model"):
        check_triton_model_name(name)


@pytest.mark.parametrize("backend", ["python", "onnxruntime"])
@pytest.mark.parametrize("name", ["a b", ".x", "a;b"])
def test_build_refuses_a_name_triton_cannot_load_in_one_line(cli, tmp_path, name, backend):
    rc, out, err = cli("build", "--onnx", REFERENCE_STREAM_ONNX, "--backend", "triton", "--triton-backend", backend,
                       "--name", name, "-o", tmp_path, "-q")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("[!] ") and "--name" in lines[0], err
    assert not list(tmp_path.iterdir())
