"""``cosyedge check --onnx mine.stream.onnx`` without ``--baseline`` reads and writes ``<model name>.accuracy.json``
beside the user's file, and one info line says where (before: the installed package's
``cosyedge/compare/baselines/``, unsaid); the bundled model keeps its committed baseline."""

from __future__ import annotations

import shutil

import pytest

from cosyedge.compare.baseline import BASELINE_DIR
from cosyedge.compare.check import default_baseline_for
from cosyedge.errors import ArtifactError
from cosyedge.models import REFERENCE_STREAM_ONNX


def test_default_baseline_paths(tmp_path):
    assert default_baseline_for(None, "reference") == BASELINE_DIR / "reference.accuracy.json"
    assert default_baseline_for(REFERENCE_STREAM_ONNX, "reference") == BASELINE_DIR / "reference.accuracy.json"
    assert default_baseline_for(tmp_path / "mine.stream.onnx", "mine") == tmp_path / "mine.accuracy.json"
    assert default_baseline_for("mine.stream.onnx", "mine").as_posix() == "mine.accuracy.json"  # the working folder


def test_check_of_a_users_model_reads_its_baseline_beside_it_and_says_so(tmp_path, monkeypatch, cli):
    import cosyedge.compare.check as check

    mine = tmp_path / "mine.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, mine)  # a user's copy: its contract name is still 'reference'
    read = []

    def load_baseline(path, ref):
        read.append(path)
        raise ArtifactError(f"baseline {path} not found")

    monkeypatch.setattr(check, "load_baseline", load_baseline)
    rc, _o, err = cli("check", "--onnx", mine, "--engines-dir", tmp_path / "engines", "--no-pesq")
    assert rc == 3, err
    assert read == [tmp_path / "reference.accuracy.json"]
    assert (f"[I] baseline: {tmp_path / 'reference.accuracy.json'} (the default beside {mine}; --baseline FILE to "
            "choose another)") in err.splitlines(), err
    assert not any(BASELINE_DIR == p.parent for p in read)


@pytest.mark.parametrize("given", [False, True])
def test_check_of_the_bundled_model_keeps_the_committed_baseline(given, tmp_path, monkeypatch, cli):
    import cosyedge.compare.check as check

    read = []

    def load_baseline(path, ref):
        read.append(path)
        raise ArtifactError(f"baseline {path} not found")

    monkeypatch.setattr(check, "load_baseline", load_baseline)
    args = ["--onnx", REFERENCE_STREAM_ONNX] if given else []
    rc, _o, err = cli("check", *args, "--engines-dir", tmp_path / "engines", "--no-pesq")
    assert rc == 3 and read == [BASELINE_DIR / "reference.accuracy.json"], err
    assert "committed with cosyedge for its bundled model" in err
