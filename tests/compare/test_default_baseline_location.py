"""``cosyedge check --onnx mine.stream.onnx`` without ``--baseline`` reads and writes ``mine.stream.accuracy.json``
beside the user's file (named after the file: two adopted models in one folder share their metadata name 'stream',
and ``--update-baseline`` of one silently overwrote the other's ``stream.accuracy.json``), and one info line says
where (before: the installed package's ``cosyedge/compare/baselines/``, unsaid); the bundled model keeps its committed
baseline. An update that replaces a baseline recorded for another model says so in one warning line."""

from __future__ import annotations

import shutil

import pytest

from cosyedge.compare.baseline import BASELINE_DIR
from cosyedge.compare.check import default_baseline_for
from cosyedge.errors import ArtifactError
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.helpers.cli_errors import one_error_line


def test_default_baseline_paths(tmp_path):
    assert default_baseline_for(None, "reference") == BASELINE_DIR / "reference.accuracy.json"
    assert default_baseline_for(REFERENCE_STREAM_ONNX, "reference") == BASELINE_DIR / "reference.accuracy.json"
    assert default_baseline_for(tmp_path / "mine.stream.onnx", "mine") == tmp_path / "mine.stream.accuracy.json"
    assert default_baseline_for("mine.stream.onnx", "mine").as_posix() == "mine.stream.accuracy.json"  # working folder
    assert default_baseline_for(tmp_path / "h5.ONNX", "stream") == tmp_path / "h5.accuracy.json"


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
    assert read == [tmp_path / "mine.stream.accuracy.json"]
    assert (f"[I] baseline: {tmp_path / 'mine.stream.accuracy.json'} (the default beside {mine}; --baseline FILE to "
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


def test_two_models_of_one_metadata_name_in_one_folder_have_their_own_baselines(tmp_path):
    """mine.stream.onnx and h5.onnx, both adopted (metadata name 'stream'): two default baselines, not one."""
    a, b = default_baseline_for(tmp_path / "mine.stream.onnx", "stream"), default_baseline_for(tmp_path / "h5.onnx",
                                                                                                   "stream")
    assert a != b and (a.name, b.name) == ("mine.stream.accuracy.json", "h5.accuracy.json")


def _stopped_at_the_build(monkeypatch):
    """``check --update-baseline`` up to its first build, which fails: nothing is measured or written."""
    import cosyedge.compare.check as check

    def ensure_engine(*args, **kwargs):
        raise ArtifactError("stopped before the build (test)")

    monkeypatch.setattr(check, "ensure_engine", ensure_engine)


def test_update_baseline_says_when_it_replaces_another_models_baseline(tmp_path, monkeypatch, cli):
    import json

    mine = tmp_path / "mine.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, mine)
    base = tmp_path / "shared.accuracy.json"
    other = json.loads((BASELINE_DIR / "reference.accuracy.json").read_text())
    other["model"].update(name="stream", path="h5.onnx")  # another model's baseline, recorded here
    base.write_text(json.dumps(other))
    before = base.read_bytes()
    _stopped_at_the_build(monkeypatch)
    rc, _o, err = cli("check", "--onnx", mine, "--baseline", base, "--update-baseline", "--precisions", "fp16",
                      "--engines-dir", tmp_path / "engines", "--no-pesq")
    assert rc == 3 and "stopped before the build" in one_error_line(err), err
    warned = [line for line in err.splitlines() if line.startswith("[W]")]
    assert len(warned) == 1 and (f"--update-baseline replaces {base}, the baseline recorded for another model "
                                 "('stream', h5.onnx") in warned[0], err
    assert "give --baseline FILE to keep both" in warned[0]
    assert base.read_bytes() == before  # nothing measured, nothing replaced


def test_update_baseline_of_the_same_model_does_not_warn(tmp_path, monkeypatch, cli):
    import json

    mine = tmp_path / "reference.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, mine)
    base = tmp_path / "reference.stream.accuracy.json"
    base.write_text((BASELINE_DIR / "reference.accuracy.json").read_text())
    assert json.loads(base.read_text())["model"]["path"] == mine.name
    _stopped_at_the_build(monkeypatch)
    rc, _o, err = cli("check", "--onnx", mine, "--update-baseline", "--precisions", "fp16", "--engines-dir",
                      tmp_path / "engines", "--no-pesq")
    assert rc == 3 and not [line for line in err.splitlines() if line.startswith("[W]")], err


def test_a_baseline_of_another_model_says_the_update_replaces_it(two_state, cli, tmp_path):
    base = tmp_path / "reference.accuracy.json"
    base.write_text((BASELINE_DIR / "reference.accuracy.json").read_text())
    before = base.read_bytes()
    rc, out, err = cli("check", "--onnx", two_state[0], "--baseline", base, "--engines-dir", tmp_path / "engines",
                       "--no-pesq")
    assert rc == 2 and err.count("\n") == 1 and err.startswith("[!] "), err
    assert "is for model 'reference' sha256" in err and "the model changed, or the baseline is another model's" in err
    assert (f"cosyedge check --update-baseline --onnx {two_state[0]} --baseline {base} replaces the stored baseline"
            in err)
    assert base.read_bytes() == before and not (tmp_path / "engines").exists()
