"""One ``cosyedge build`` parses the source ONNX's stream contract and hashes it once.

``StreamContract.from_onnx`` and ``sha256_file`` are wrapped (in every module that imported them) by counters of
the calls whose argument is the source file; the ``--int8 --calib`` and ``--fp16 --sparse`` builds of a copy of
the bundled model must make one of each. (The other reads of the file, e.g. the INT8 step's full
``load_onnx`` with weights, are not contract parses or hashes; the hashes of the *derived* files, the
2:4-pruned temp ONNX, the INT8/FP16 ONNX and the engine's model, are of other files.)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import cosyedge.builders.ort  # noqa: F401 - imported before the counters wrap their sha256_file
import cosyedge.builders.prepare  # noqa: F401
import cosyedge.precision.calibrate  # noqa: F401
import cosyedge.precision.fp16  # noqa: F401
import cosyedge.precision.int8  # noqa: F401
import cosyedge.precision.sparsity  # noqa: F401
from cosyedge.artifacts import StreamContract, sha256_file
from cosyedge.cli.main import main
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.precision.int8_fixtures import write_recordings


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("source-model")


@pytest.fixture(scope="module")
def calib(work):
    rec = write_recordings(work / "rec", count=16)
    assert main(["calib", "make", "--from", str(rec), "--out", str(work / "calib")]) == 0
    return work / "calib"


@pytest.fixture()
def counted(monkeypatch, tmp_path):
    """Copy of the bundled model + counters of contract parses and hashes of that file."""
    src = tmp_path / "model.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, src)
    calls = {"from_onnx": 0, "sha256_file": 0}

    def is_src(x) -> bool:
        try:
            return Path(x).resolve() == src.resolve()
        except TypeError:  # a ModelProto
            return False

    real_from_onnx = StreamContract.from_onnx.__func__

    def from_onnx(cls, model):
        if is_src(model):
            calls["from_onnx"] += 1
        return real_from_onnx(cls, model)

    def sha(path, *args, **kwargs):
        if is_src(path):
            calls["sha256_file"] += 1
        return sha256_file(path, *args, **kwargs)

    monkeypatch.setattr(StreamContract, "from_onnx", classmethod(from_onnx))
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("cosyedge") and getattr(mod, "sha256_file", None) is sha256_file:
            monkeypatch.setattr(mod, "sha256_file", sha)
    monkeypatch.setenv("COSYEDGE_CALIB_DIR", str(tmp_path / "calib-default"))
    return src, calls


def test_int8_build_parses_and_hashes_the_source_once(counted, calib, tmp_path, capsys):
    src, calls = counted
    rc = main(["build", "--onnx", str(src), "--int8", "--calib", str(calib), "--backend", "onnxruntime",
               "-o", str(tmp_path / "engines")])
    assert rc == 0, capsys.readouterr().err
    assert calls == {"from_onnx": 1, "sha256_file": 1}


@pytest.mark.parametrize("flags", [["--fp16", "--sparse"], ["--fp16"]])
def test_fp16_build_parses_and_hashes_the_source_once(counted, tmp_path, capsys, flags):
    """Plain --fp16 too: its SNR check streams the source through an OrtStreamSession, which takes the
    SourceModel's contract instead of parsing the file again."""
    src, calls = counted
    rc = main(["build", "--onnx", str(src), *flags, "--backend", "onnxruntime", "-o", str(tmp_path / "engines")])
    assert rc == 0, capsys.readouterr().err
    assert calls == {"from_onnx": 1, "sha256_file": 1}
