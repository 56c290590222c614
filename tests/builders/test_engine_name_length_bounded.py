"""A model name is a user argument that names the engine folder: ``build --name`` of 300 characters ended in exit 3
"File name too long" (the folder could not be made). Names are bounded up front at
:data:`cosyedge.artifacts.contract.MAX_NAME_BYTES` (100 UTF-8 bytes): exit 2, one line, nothing written."""

from __future__ import annotations

import pytest

from cosyedge.artifacts.contract import MAX_NAME_BYTES, check_name
from cosyedge.builders.names import check_engine_name
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX


def test_build_name_of_300_characters_is_exit_2(cli, tmp_path):
    engines = tmp_path / "engines"
    rc, out, err = cli("build", "--onnx", REFERENCE_STREAM_ONNX, "--name", "n" * 300, "-o", engines)
    assert rc == 2 and err.count("\n") == 1 and out == "", err
    assert err.startswith(f"[!] --name '{'n' * 24}'... is 300 characters; a model name holds at most 100 bytes")
    assert "File name too long" not in err and not engines.exists()


def test_streamify_and_adopt_name_bounded_too(cli, tmp_path):
    for cmd in (["streamify", REFERENCE_STREAM_ONNX, "-o", tmp_path / "o.stream.onnx"],
                ["adopt", REFERENCE_STREAM_ONNX, "-o", tmp_path / "o.stream.onnx", "--sample-rate-hz", "16000",
                 "--hop-samples", "160"]):
        rc, _o, err = cli(*cmd, "--name", "n" * 101)
        assert rc == 2 and "is 101 characters; a model name holds at most 100 bytes" in err, (cmd, err)
    assert not any(tmp_path.iterdir())


def test_the_bound_is_in_utf8_bytes():
    check_name("n" * MAX_NAME_BYTES)
    assert check_engine_name("n" * MAX_NAME_BYTES) == "n" * MAX_NAME_BYTES
    with pytest.raises(UsageError, match=r"is 51 characters, 102 bytes in UTF-8"):
        check_name("é" * 51)
    with pytest.raises(UsageError, match="engine name .* give a shorter one with --name"):
        check_engine_name("m" * 101)  # a name read from a model's metadata
