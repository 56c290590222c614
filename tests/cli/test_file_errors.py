"""File handling of the CLI: over-long file names, path errors only for path errnos, stdout on a full disk,
unreadable inputs, read-only outputs, a read-only working folder (the engines cache moves to the user cache).
Every failure is one ``[!]`` line with the README's exit code and nothing the user had is lost."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers.cli import cosyedge_subprocess
from tests.helpers.graphs import conv_onnx
from tests.helpers.audio import noise_wav

HOP = 160

STREAMIFY_ARGS = ["--sample-rate-hz", "16000", "--hop-samples", str(HOP), "-q"]

LONG = "c" * 300


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand."""
    from tests.helpers import models

    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def _long_name_line(capsys, shown: str) -> None:
    """Assert the one ``[!]`` line of an over-long name (shortened in the middle, with its length in bytes)."""
    line = one_error_line(capsys)
    assert line.startswith("[!] cannot "), line
    assert "File name too long" in line or "(File name too long)" in line, line
    assert shown in line, line


@pytest.mark.parametrize("case", ["run-input", "run-output", "streamify-o", "build-onnx", "build-o", "compare-json",
                                  "engines-dir"])
def test_file_name_over_255_bytes_is_one_line_exit_3(tmp_path, delay_onnx, monkeypatch, capsys, case):
    """An OSError ENAMETOOLONG from Path.is_dir/exists/open used to be a traceback, exit 1."""
    import soundfile as sf

    wav = tmp_path / "in.wav"
    sf.write(wav, np.zeros(1600, np.float32), 16000)
    enc = conv_onnx(tmp_path / "enc.onnx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    args = {"run-input": ["run", f"{LONG}.wav", "-o", "out.wav", "--engine", str(delay_onnx)],
            "run-output": ["run", str(wav), "-o", f"out/{LONG}.wav", "--engine", str(delay_onnx)],
            "streamify-o": ["streamify", str(enc), "-o", f"{LONG}.onnx", *STREAMIFY_ARGS],
            "build-onnx": ["build", "--onnx", f"{LONG}.onnx", "--backend", "onnxruntime"],
            "build-o": ["build", "--onnx", str(delay_onnx), "--backend", "onnxruntime", "-o", f"out/{LONG}"],
            "compare-json": ["compare", str(delay_onnx), str(delay_onnx), "--no-pesq", "--json", f"{LONG}.json"],
            "engines-dir": ["run", str(wav), "-o", "out.wav"]}[case]
    if case == "engines-dir":
        monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / LONG))
    assert main(args) == 3
    _long_name_line(capsys, "c" * 20)
    # nothing written (build -o may leave its empty parent folder 'out')
    assert sorted(p.name for p in tmp_path.rglob("*") if not p.is_dir()) == ["enc.onnx", "in.wav"]


def test_path_errors_only_for_path_errnos(monkeypatch, capsys):
    """The CLI's handler turns only ENAMETOOLONG, ELOOP and EACCES into one line (exit 3); any other OSError
    (a bug, a broken device) keeps its traceback."""
    import errno

    import cosyedge.cli.build as build_cli

    def fail(err):
        def boom(*a, **k):
            raise err
        monkeypatch.setattr("cosyedge.builders.build", boom)

    fail(PermissionError(errno.EACCES, "Permission denied", "/x/secret.onnx"))
    assert main(["build", "--backend", "onnxruntime"]) == 3
    line = one_error_line(capsys)
    assert "cannot use /x/secret.onnx: Permission denied" in line and "no permission" in line
    fail(OSError(errno.ELOOP, "Too many levels of symbolic links", "a"))
    assert main(["build", "--backend", "onnxruntime"]) == 3
    assert one_error_line(capsys).startswith("[!] cannot use a: Too many levels of symbolic links (a symbolic link")
    fail(OSError(errno.EIO, "Input/output error"))
    with pytest.raises(OSError, match="Input/output error"):
        main(["build", "--backend", "onnxruntime"])
    assert build_cli  # imported so that the patch target exists


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_one_line_exit_3(tmp_path, delay_onnx):
    """'cosyedge run ... > /dev/full' ended in an OSError ENOSPC traceback (exit 1)."""
    wav = noise_wav(tmp_path / "in.wav")
    with open("/dev/full", "w") as full:
        res = cosyedge_subprocess("run", str(wav), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx), "-q", stdout=full,
                   stderr=__import__("subprocess").PIPE)
    err = res.stderr
    assert res.returncode == 3, err
    assert "cannot write standard output: No space left on device" in one_error_line(err)
    assert (tmp_path / "out.wav").is_file()  # the enhanced file was written before the report line failed
    with open("/dev/full", "w") as full:
        res = cosyedge_subprocess("--version", stdout=full, stderr=__import__("subprocess").PIPE)
    assert res.returncode == 3 and "cannot write standard output" in one_error_line(res.stderr)


def _no_bypass_prefix(probe: list[str]) -> list[str] | None:
    """The command prefix under which file permissions hold: none for a normal user; for root, setpriv dropping
    the capabilities that bypass them. None when the command ``probe`` (expected to fail on permissions) still
    succeeds under it (root without setpriv, a container that refuses it)."""
    import shutil
    import subprocess

    drop = "-dac_override,-dac_read_search,-fowner"
    prefix = [shutil.which("setpriv") or "setpriv", "--bounding-set", drop, "--inh-caps", drop] if os.geteuid() == 0 \
        else []
    try:
        res = subprocess.run([*prefix, *probe], capture_output=True, timeout=30)
    except OSError:
        return None
    return prefix if res.returncode != 0 and b"Permission denied" in res.stderr else None


def test_unreadable_input_says_permission_denied(tmp_path, delay_onnx):
    """A mode-000 input said "cannot decode ... (System error.); is it a valid wav/flac/ogg file?"."""
    wav = noise_wav(tmp_path / "secret.wav")
    wav.chmod(0)
    prefix = _no_bypass_prefix(["cat", str(wav)])
    if prefix is None:
        pytest.skip("cannot make a file unreadable here (root without setpriv)")
    res = cosyedge_subprocess("run", str(wav), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx), "-q", prefix=prefix)
    assert res.returncode == 3, res.stderr
    line = one_error_line(res.stderr)
    assert f"cannot read input audio {wav}: permission denied" in line and "chmod u+r" in line
    assert not (tmp_path / "out.wav").exists()


def test_read_only_output_is_kept(tmp_path, delay_onnx, capsys):
    """An existing 0444 output was replaced by the rename and became 0644; now it is kept and refused, as cp
    and a shell's '>' refuse it (exit 3)."""
    wav = noise_wav(tmp_path / "in.wav")
    out = tmp_path / "out.wav"
    out.write_bytes(b"keep me")
    out.chmod(0o444)
    assert main(["run", str(wav), "-o", str(out), "--engine", str(delay_onnx), "-q"]) == 3
    line = one_error_line(capsys)
    assert f"cannot write {out}: the file is read-only" in line and "chmod u+w" in line
    assert out.read_bytes() == b"keep me" and out.stat().st_mode & 0o777 == 0o444


def test_run_without_engine_in_a_read_only_folder_uses_the_user_cache(tmp_path):
    """'cosyedge run' without --engine built the bundled reference's engine under ./engines only: in a
    read-only working folder it failed (exit 3) though the output was writable. Now the engine goes to
    $XDG_CACHE_HOME/cosyedge/engines with one info line; when that cannot be written either, the line says
    which variable or flag to set."""
    wav = noise_wav(tmp_path / "in.wav")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    prefix = _no_bypass_prefix(["touch", str(ro / "probe")])
    if prefix is None:
        pytest.skip("cannot make a folder read-only here (root without setpriv)")
    env = {k: v for k, v in os.environ.items() if k != "COSYEDGE_ENGINES_DIR"}
    cache = tmp_path / "xdg"
    out = tmp_path / "out" / "o.wav"
    res = cosyedge_subprocess("run", str(wav), "-o", str(out), prefix=prefix, cwd=ro, env={**env, "XDG_CACHE_HOME": str(cache),
                                                                           "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 0, res.stderr
    assert (f"[I] {ro / 'engines'} is not writable: the reference engine goes to {cache / 'cosyedge' / 'engines'} "
            f"(set COSYEDGE_ENGINES_DIR to choose another folder)") in res.stderr.splitlines()
    assert (cache / "cosyedge" / "engines" / "reference-fp32-onnxruntime" / "manifest.json").is_file()
    assert out.is_file() and list(ro.iterdir()) == []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    res = cosyedge_subprocess("run", str(wav), "-o", str(out), "-q", prefix=prefix, cwd=ro,
               env={**env, "XDG_CACHE_HOME": str(locked), "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 3, res.stderr
    line = one_error_line(res.stderr)
    assert f"cannot write the reference engine in {ro / 'engines'} (not writable)" in line
    assert "COSYEDGE_ENGINES_DIR" in line
