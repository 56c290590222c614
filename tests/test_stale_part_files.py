"""``cosyedge run FILE -o OUT`` writes OUT through a hidden part file beside it; a run killed with SIGKILL cannot
remove its part file, so the next writer of the same OUT deletes the part files of processes that no longer run
(and keeps those of live ones)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
MODEL = ROOT / "cosyedge" / "models" / "reference.stream.onnx"  # a streaming .onnx runs as it is: nothing built


def parts(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f".{name}.*.part*"))


def kill_when_writing(cmd: list[str], folder: Path, name: str, timeout_s: float = 120.0) -> None:
    """Start ``cmd``, SIGKILL it as soon as its part file of ``folder/name`` exists (and has grown past the
    header), reap it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end and p.poll() is None:
            found = parts(folder, name)
            if found and found[0].stat().st_size > 4096:
                break
            time.sleep(0.005)
        assert p.poll() is None, f"the run ended before it was killed: {p.stderr.read()}"
        p.send_signal(signal.SIGKILL)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == -signal.SIGKILL


def test_a_run_killed_with_sigkill_leaves_a_part_file_that_the_next_run_of_the_output_removes(cli, tmp_path):
    x, sr = sf.read(DEMO, dtype="float32")
    long = tmp_path / "long.wav"
    sf.write(long, np.tile(x, 6), sr)  # about 100 s: the run is still writing when it is killed
    out = tmp_path / "out" / "clean.wav"
    out.parent.mkdir()
    kill_when_writing([sys.executable, "-m", "cosyedge.cli.main", "run", str(long), "-o", str(out), "--engine",
                       str(MODEL), "-q"],
                      out.parent, out.name)
    stale = parts(out.parent, out.name)
    assert len(stale) == 1 and not out.exists()
    assert f".{out.name}." in stale[0].name and stale[0].name.endswith(".part.wav")
    # a part file of a live process (this one) and one of unknown form are kept
    live = out.parent / f".{out.name}.{os.getpid()}-{stale[0].name.split('-')[1]}-abc.part.wav"
    live.write_bytes(b"x")
    odd = out.parent / f".{out.name}.handmade.part.wav"
    odd.write_bytes(b"x")
    rc, _, err = cli("run", DEMO, "-o", out, "--engine", MODEL, "-q")
    assert rc == 0, err
    assert not stale[0].exists() and live.exists() and odd.exists()
    assert sf.info(str(out)).frames == sf.info(str(DEMO)).frames


def test_remove_stale_parts_checks_the_pid_and_the_host(tmp_path):
    from cosyedge.audio import _host_tag, remove_stale_parts

    out = tmp_path / "a.wav"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = _host_tag()
    other = "000000" if host != "000000" else "111111"
    files = {name: tmp_path / name for name in (f".a.wav.{dead.pid}-{host}-q1.part.wav",    # dead here: removed
                                                 f".a.wav.{os.getpid()}-{host}-q2.part.wav",  # alive: kept
                                                 f".a.wav.{dead.pid}-{other}-q3.part.wav",   # another machine's
                                                 f".b.wav.{dead.pid}-{host}-q4.part.wav")}   # another output's
    for f in files.values():
        f.write_bytes(b"x")
    removed = remove_stale_parts(out)
    assert [p.name for p in removed] == [f".a.wav.{dead.pid}-{host}-q1.part.wav"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(list(files)[1:])
