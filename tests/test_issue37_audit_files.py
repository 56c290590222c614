"""Issue 37 newcomer re-audit, file-handling findings 2, 3, 4, 16 and 17: streamify's positional output, report
paths that are inputs, over-long file names, stdout on a full disk, bare ``cosyedge``, unreadable and read-only
files, antiphase stereo, and the engines cache in a read-only folder. Every failure is one ``[!]`` line with the
README's exit code and nothing the user had is lost."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.cli.main import main
from tests.cli_errors import one_error_line

HOP = 160


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _conv_onnx(path: Path) -> Path:
    """A full-sequence model x (N, 1, T) -> Pad(2, 0) -> Conv(k=3) -> y (N, 1, T) (causal; streams with one
    state), without cosyedge metadata."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 1, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 0, 2, 0, 0, 0], np.int64), "pads")]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
             helper.make_node("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "T"])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


STREAMIFY_ARGS = ["--sample-rate-hz", "16000", "--hop-samples", str(HOP), "-q"]


# ------------------------------------------------------------------ finding 2: streamify IN OUT never destroys OUT
def test_streamify_positional_output_refuses_a_full_sequence_onnx(tmp_path, capsys):
    """'streamify enc.onnx dec.onnx' (forgot -o; several files form one model) used to replace dec.onnx with enc's
    stream graph, exit 0."""
    enc, dec = _conv_onnx(tmp_path / "enc.onnx"), _conv_onnx(tmp_path / "dec.onnx")
    before = _sha(dec)
    assert main(["streamify", str(enc), str(dec), *STREAMIFY_ARGS]) == 2
    line = one_error_line(capsys)
    assert line == (f"[!] output {dec} (the last argument, no -o given) exists and is not a cosyedge stream ONNX (no "
                    f"cosyedge stream metadata): refusing to write over it; if it is one of the model's files, give "
                    f"the output with -o OUT.onnx; delete it first to replace it")
    assert _sha(dec) == before
    # with -o the same: an existing non-stream file is never written over
    assert main(["streamify", str(enc), "-o", str(dec), *STREAMIFY_ARGS]) == 2
    assert "[!] output -o " in one_error_line(capsys)
    assert _sha(dec) == before


def test_streamify_output_must_end_in_onnx(tmp_path, capsys):
    """'streamify enc.onnx notes.txt' replaced the notes with a protobuf; '-o x.txt' was accepted."""
    enc = _conv_onnx(tmp_path / "enc.onnx")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["streamify", str(enc), str(notes), *STREAMIFY_ARGS]) == 2
    assert one_error_line(capsys) == (f"[!] output {notes} (the last argument, no -o given): a stream ONNX file name "
                                       f"must end in .onnx (e.g. -o model.stream.onnx)")
    assert notes.read_text() == "my notes\n"
    assert main(["streamify", str(enc), "-o", str(tmp_path / "x.txt"), *STREAMIFY_ARGS]) == 2
    assert "must end in .onnx" in one_error_line(capsys)
    assert not (tmp_path / "x.txt").exists()


def test_streamify_replaces_its_own_stream_output(tmp_path, capsys):
    """An earlier stream ONNX (cosyedge stream metadata) is still replaced: rerunning streamify works, both forms."""
    enc = _conv_onnx(tmp_path / "enc.onnx")
    out = tmp_path / "enc.stream.onnx"
    assert main(["streamify", str(enc), str(out), *STREAMIFY_ARGS]) == 0
    assert main(["streamify", str(enc), str(out), *STREAMIFY_ARGS, "--name", "again"]) == 0
    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    assert meta["cosyedge.name"] == "again"
    assert main(["streamify", str(enc), "-o", str(out), *STREAMIFY_ARGS, "--name", "third"]) == 0
    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    assert meta["cosyedge.name"] == "third"
    # output == input keeps its own message
    assert main(["streamify", str(enc), str(enc), *STREAMIFY_ARGS]) == 2
    assert one_error_line(capsys) == f"[!] output {enc} is the input file: give another output path (the input is kept)"


# --------------------------------------------------- finding 3: a report path is never one of the command's inputs
@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand."""
    from tests import models

    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def _copy(src: Path, dest: Path) -> Path:
    dest.write_bytes(Path(src).read_bytes())
    return dest


def test_compare_json_refuses_the_reference_and_engine_files(tmp_path, delay_onnx, capsys):
    """'compare REF CAND --json REF' replaced the reference model with JSON, exit 0."""
    ref = _copy(delay_onnx, tmp_path / "ref.onnx")
    before = _sha(ref)
    assert main(["compare", str(ref), str(delay_onnx), "--no-pesq", "--json", str(ref)]) == 2
    assert one_error_line(capsys) == (f"[!] --json {ref} is the input {ref}: give another path for the report (the "
                                       f"input is kept)")
    assert _sha(ref) == before
    # another spelling of the candidate (a symlink) is the same file
    link = tmp_path / "link.json"
    link.symlink_to(delay_onnx)
    assert main(["compare", str(ref), str(delay_onnx), "--no-pesq", "--json", str(link)]) == 2
    assert one_error_line(capsys).startswith(f"[!] --json {link} is the input {delay_onnx}")
    # a file of an engine folder given as the candidate
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "manifest.json").write_text("{}")
    assert main(["compare", str(ref), str(eng), "--no-pesq", "--json", str(eng / "manifest.json")]) == 2
    assert one_error_line(capsys) == (f"[!] --json {eng / 'manifest.json'} is a file of the input folder {eng}: give "
                                       f"another path for the report (the input is kept)")
    assert (eng / "manifest.json").read_text() == "{}"


def test_check_reports_refuse_the_baseline_model_amax_and_engine_files(tmp_path, delay_onnx, capsys):
    """'check --junit <baseline>' replaced the committed baseline with JUnit XML; '--json <--onnx model>' likewise."""
    ref = _copy(delay_onnx, tmp_path / "ref.onnx")
    baseline = tmp_path / "bl.json"
    baseline.write_text('{"kind": "my baseline"}\n')
    amax = tmp_path / "delay.int8.amax.json"
    amax.write_text("{}\n")
    engines = tmp_path / "engines"
    (engines / "delay-fp16-onnxruntime").mkdir(parents=True)
    manifest = engines / "delay-fp16-onnxruntime" / "manifest.json"
    manifest.write_text("{}\n")
    base = ["check", "--onnx", str(ref), "--baseline", str(baseline), "--engines-dir", str(engines), "--no-pesq"]
    cases = [(["--junit", str(baseline)], f"[!] --junit {baseline} is the input {baseline}"),
             (["--json", str(ref)], f"[!] --json {ref} is the input {ref}"),
             (["--json", str(amax)], f"[!] --json {amax} is the input {amax}"),
             (["--junit", str(manifest)], f"[!] --junit {manifest} is a file of the input folder {manifest.parent}"),
             (["--json", str(tmp_path / "r"), "--junit", str(tmp_path / "." / "r")],
              f"[!] --json {tmp_path / 'r'} and --junit {tmp_path / '.' / 'r'} are the same file: give two paths")]
    for extra, start in cases:
        assert main(base + extra) == 2, extra
        assert one_error_line(capsys).startswith(start), extra
    assert baseline.read_text() == '{"kind": "my baseline"}\n'
    assert _sha(ref) == _sha(delay_onnx) and amax.read_text() == "{}\n" and manifest.read_text() == "{}\n"
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------- finding 4: a name over 255 bytes is one line, exit 3
LONG = "c" * 300


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
    enc = _conv_onnx(tmp_path / "enc.onnx")
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
    assert one_error_line(capsys) == ("[!] cannot use /x/secret.onnx: Permission denied (no permission: change the "
                                       "file's or its folder's permissions, or give another path)")
    fail(OSError(errno.ELOOP, "Too many levels of symbolic links", "a"))
    assert main(["build", "--backend", "onnxruntime"]) == 3
    assert one_error_line(capsys).startswith("[!] cannot use a: Too many levels of symbolic links (a symbolic link")
    fail(OSError(errno.EIO, "Input/output error"))
    with pytest.raises(OSError, match="Input/output error"):
        main(["build", "--backend", "onnxruntime"])
    assert build_cli  # imported so that the patch target exists


# --------------------------------------------------------------------------------------- finding 16: minor ones
def _cli(*args, **kwargs):
    """Run ``python -m cosyedge.cli.main ARGS`` (this checkout on PYTHONPATH); returns the CompletedProcess."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = kwargs.pop("env", None) or {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([*kwargs.pop("prefix", []), sys.executable, "-m", "cosyedge.cli.main", *args], env=env,
                          capture_output="stdout" not in kwargs, text=True, timeout=120, **kwargs)


def _wav(path: Path, channels: int = 1, seconds: float = 0.5, antiphase: bool = False) -> Path:
    import soundfile as sf

    rng = np.random.default_rng(1)
    x = (0.1 * rng.standard_normal((int(16000 * seconds), channels))).astype(np.float32)
    if antiphase:
        x[:, 1] = -x[:, 0]
    sf.write(path, x, 16000, subtype="FLOAT")
    return path


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_one_line_exit_3(tmp_path, delay_onnx):
    """'cosyedge run ... > /dev/full' ended in an OSError ENOSPC traceback (exit 1)."""
    wav = _wav(tmp_path / "in.wav")
    with open("/dev/full", "w") as full:
        res = _cli("run", str(wav), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx), "-q", stdout=full,
                   stderr=__import__("subprocess").PIPE)
    err = res.stderr
    assert res.returncode == 3, err
    assert err.splitlines() == ["[!] cannot write standard output: No space left on device"], err
    assert (tmp_path / "out.wav").is_file()  # the enhanced file was written before the report line failed
    with open("/dev/full", "w") as full:
        res = _cli("--version", stdout=full, stderr=__import__("subprocess").PIPE)
    assert res.returncode == 3 and res.stderr.splitlines() == [
        "[!] cannot write standard output: No space left on device"]


def test_bare_cosyedge_prints_the_help(capsys):
    """A bare 'cosyedge' crammed the whole help into one '[!]' line; it is click's help now (stderr, exit 2)."""
    assert main([]) == 2
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert not any(line.startswith("[!]") for line in lines), cap.err
    assert lines[0] == "Usage: cosyedge [OPTIONS] COMMAND [ARGS]..."
    assert "Commands:" in lines and any(line.split()[:1] == ["streamify"] for line in lines)


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
    wav = _wav(tmp_path / "secret.wav")
    wav.chmod(0)
    prefix = _no_bypass_prefix(["cat", str(wav)])
    if prefix is None:
        pytest.skip("cannot make a file unreadable here (root without setpriv)")
    res = _cli("run", str(wav), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx), "-q", prefix=prefix)
    assert res.returncode == 3, res.stderr
    assert res.stderr.splitlines() == [f"[!] cannot read input audio {wav}: permission denied (mode 0000); make it "
                                       f"readable (chmod u+r)"]
    assert not (tmp_path / "out.wav").exists()


def test_read_only_output_is_kept(tmp_path, delay_onnx, capsys):
    """An existing 0444 output was replaced by the rename and became 0644; now it is kept and refused, as cp
    and a shell's '>' refuse it (exit 3)."""
    wav = _wav(tmp_path / "in.wav")
    out = tmp_path / "out.wav"
    out.write_bytes(b"keep me")
    out.chmod(0o444)
    assert main(["run", str(wav), "-o", str(out), "--engine", str(delay_onnx), "-q"]) == 3
    assert one_error_line(capsys) == (f"[!] cannot write {out}: the file is read-only (mode 0444), kept as it is; "
                                       f"make it writable (chmod u+w) or give another path")
    assert out.read_bytes() == b"keep me" and out.stat().st_mode & 0o777 == 0o444


def test_antiphase_stereo_warns_one_line(tmp_path, delay_onnx, capsys):
    """Stereo whose channels cancel in the mono mix was enhanced to silence without a word."""
    ap = _wav(tmp_path / "ap.wav", channels=2, antiphase=True)
    assert main(["run", str(ap), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    warns = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[W]")]
    assert warns == [f"[W] input audio {ap}: its 2 channels cancel when mixed to mono (the mix is silent: antiphase "
                     f"stereo?), so the model hears near silence; give one channel instead (e.g. 'sox in.wav "
                     f"left.wav remix 1') (processing anyway)"]
    plain = _wav(tmp_path / "st.wav", channels=2)  # uncorrelated channels: the mix is 3 dB down, no warning
    assert main(["run", str(plain), "-o", str(tmp_path / "o2.wav"), "--engine", str(delay_onnx)]) == 0
    assert "[W]" not in capsys.readouterr().err


# ------------------------------------------------- finding 17: the reference engine in a read-only working folder
def test_run_without_engine_in_a_read_only_folder_uses_the_user_cache(tmp_path):
    """'cosyedge run' without --engine built the bundled reference's engine under ./engines only: in a
    read-only working folder it failed (exit 3) though the output was writable. Now the engine goes to
    $XDG_CACHE_HOME/cosyedge/engines with one info line; when that cannot be written either, the line says
    which variable or flag to set."""
    wav = _wav(tmp_path / "in.wav")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    prefix = _no_bypass_prefix(["touch", str(ro / "probe")])
    if prefix is None:
        pytest.skip("cannot make a folder read-only here (root without setpriv)")
    env = {k: v for k, v in os.environ.items() if k != "COSYEDGE_ENGINES_DIR"}
    cache = tmp_path / "xdg"
    out = tmp_path / "out" / "o.wav"
    res = _cli("run", str(wav), "-o", str(out), prefix=prefix, cwd=ro, env={**env, "XDG_CACHE_HOME": str(cache),
                                                                           "PYTHONPATH": str(Path(__file__).parents[1])})
    assert res.returncode == 0, res.stderr
    assert (f"[I] {ro / 'engines'} is not writable: the reference engine goes to {cache / 'cosyedge' / 'engines'} "
            f"(set COSYEDGE_ENGINES_DIR to choose another folder)") in res.stderr.splitlines()
    assert (cache / "cosyedge" / "engines" / "reference-fp32-onnxruntime" / "manifest.json").is_file()
    assert out.is_file() and list(ro.iterdir()) == []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    res = _cli("run", str(wav), "-o", str(out), "-q", prefix=prefix, cwd=ro,
               env={**env, "XDG_CACHE_HOME": str(locked), "PYTHONPATH": str(Path(__file__).parents[1])})
    assert res.returncode == 3, res.stderr
    assert res.stderr.splitlines() == [f"[!] cannot write the reference engine in {ro / 'engines'} (not writable) nor "
                                       f"in {locked / 'cosyedge' / 'engines'}: set COSYEDGE_ENGINES_DIR to a writable "
                                       f"folder, or pass --engine PATH"]
