"""SIGTERM is handled like Ctrl-C: unfinished outputs are removed, earlier files kept, exit
143, one line; a build removes temp folders that a killed writer of the same engine left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cosyedge.artifacts import OWNER_FILE, atomic_folder
from tests.helpers.cli_errors import one_error_line

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"

# cosyedge with the block writer held for 60 s at its first block, so SIGTERM lands mid-stream with the temp
# output file open
SLOW_WRITE = """
import sys, time
import cosyedge.audio as w
orig = w.IncrementalAudioWriter.write
def slow(self, y):
    if not self.frames:
        print("WRITING", flush=True)
        time.sleep(60)
    orig(self, y)
w.IncrementalAudioWriter.write = slow
from cosyedge.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_sigterm_while_run_writes_leaves_no_temp_file(tmp_path):
    out = tmp_path / "out.wav"
    out.write_bytes(b"earlier result")
    env = dict(os.environ, COSYEDGE_ENGINES_DIR=str(tmp_path / "engines"))
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "run", "-q", str(DEMO), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "WRITING"
    assert _hidden(tmp_path) != []  # the temp file exists now
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in one_error_line(err)
    assert _hidden(tmp_path) == [] and out.read_bytes() == b"earlier result"


def test_sigterm_during_build_removes_its_temp_folder(tmp_path):
    engines = tmp_path / "engines"
    proc = subprocess.Popen([sys.executable, "-m", "cosyedge.cli.main", "build", "-q", "--fp16", "-o", str(engines)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (engines.is_dir() and _hidden(engines)):
        time.sleep(0.02)
    assert engines.is_dir() and _hidden(engines), "the build never created its temp folder"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal landed: nothing to check
        pytest.skip("the build finished before SIGTERM arrived")
    assert proc.returncode == 143, err
    assert not engines.exists()  # the engines folder this build made goes with its temp folder


def test_a_build_removes_stale_temp_folders_of_its_own_name_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for name, pid in ((".eng.stale1", dead.pid), (".eng.live1", live.pid), (".other.stale2", dead.pid)):
            (tmp_path / name).mkdir()
            (tmp_path / name / OWNER_FILE).write_text(f"{pid}\n")
        (tmp_path / ".eng.old.x").mkdir()  # no owner file: not ours to judge
        with atomic_folder(tmp_path / "eng") as tmp:
            (tmp / "manifest.json").write_text("{}")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".eng.live1", ".eng.old.x", ".other.stale2", "eng"]
        assert sorted(p.name for p in (tmp_path / "eng").iterdir()) == ["manifest.json"]  # owner file not kept
    finally:
        live.kill()


@pytest.mark.parametrize("signal_exc, code, line", [("Terminated", 143, "[!] terminated (SIGTERM)"),
                                                     ("KeyboardInterrupt", 130, "[!] interrupted (Ctrl-C, SIGINT)")])
def test_an_error_caused_by_a_signal_is_its_exit_code_not_a_traceback(monkeypatch, capsys, signal_exc, code, line):
    """A signal that lands while a C extension initialises comes back as ``ImportError: initialization failed``
    caused by the signal's exception (seen with ``import onnxruntime`` in fp16_onnx), and a lazy import turns it
    into a DependencyError that calibration re-wraps ``from None`` (exit 3 'ONNX Runtime cannot load' was seen):
    both are the signal's exit code and its one line; an ImportError of its own stays a bug with its traceback."""
    from cosyedge.cli import main as m
    from cosyedge.errors import ArtifactError, DependencyError

    exc = m.Terminated if signal_exc == "Terminated" else KeyboardInterrupt

    def interrupted_import(*args, **kwargs):
        try:
            raise exc()
        except exc as sig:
            raise ImportError("initialization failed") from sig

    def wrapped(*args, **kwargs):
        try:
            try:
                interrupted_import()
            except ImportError as err:
                raise DependencyError(f"'onnxruntime' cannot be imported ({err})") from err
        except DependencyError as err:
            raise ArtifactError(f"ONNX Runtime cannot load the model for calibration: {err}") from None

    for fake in (interrupted_import, wrapped):
        monkeypatch.setattr(m.cli, "main", fake)
        assert m.main(["build"]) == code
        assert capsys.readouterr().err.strip() == m._INTERRUPTED[code]
        assert m._INTERRUPTED[code].startswith(line)

    def own_bug(*args, **kwargs):
        raise ImportError("a real bug")

    monkeypatch.setattr(m.cli, "main", own_bug)
    with pytest.raises(ImportError, match="a real bug"):
        m.main(["build"])
