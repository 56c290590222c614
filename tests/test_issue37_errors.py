"""Issue 37, items 2, 4 and the errors of item 6: a full disk, an export into the package, and eight smaller
messages. Every failure is one ``[!]`` line with the README's exit code; nothing half-written is left."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf
from onnx import TensorProto, helper, numpy_helper

from cosyedge.cli.main import main
from tests.cli_errors import one_error_line
from tests import models

ROOT = Path(__file__).resolve().parents[1]
HOP = 160


def _tree(folder: Path) -> list[str]:
    """Every path under ``folder`` (hidden temp files and folders included), relative, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def _conv_onnx(path: Path, length: int | str = "T") -> Path:
    """A full-sequence model x (N, 1, T) -> Pad(2, 0) -> Conv(k=3) -> y (N, 1, T) (causal; streams with one
    state). ``length`` an int fixes the time axis of the input and the output (an export without dynamic axes)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 1, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 0, 2, 0, 0, 0], np.int64), "pads")]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
             helper.make_node("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3])]
    batch = "N" if isinstance(length, str) else 1
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, length])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _full_disk_onnx_save(monkeypatch, calls: list | None = None):
    """Make every ``onnx.save``/``onnx.save_model`` write half the model, then fail as a full disk does."""
    real = onnx.save_model

    def save(model, f, *args, **kwargs):
        if calls is not None:
            calls.append(str(f))
        data = model.SerializeToString()
        with open(f, "wb") as out:
            out.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(onnx, "save_model", save)
    monkeypatch.setattr(onnx, "save", save)
    return real


# ------------------------------------------------------------------------------------ item 2: a full disk
def test_write_error_names_the_cause_and_the_path(tmp_path):
    from cosyedge.artifacts import write_error
    from cosyedge.errors import ArtifactError

    err = write_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "e" / "m.onnx", "engine folder")
    assert isinstance(err, ArtifactError) and err.exit_code == 3
    assert str(err) == (f"writing engine folder {tmp_path}/e/m.onnx failed: no space left on device in {tmp_path}/e "
                        f"(free space there or write elsewhere; nothing half-written is left)")
    ro = write_error(OSError(errno.EROFS, "x"), tmp_path / "a.wav", left="")
    assert str(ro) == f"writing {tmp_path}/a.wav failed: read-only file system in {tmp_path} (write elsewhere)"


def test_build_fp16_onto_a_full_disk_is_one_line_exit_3_and_keeps_the_earlier_engine(delay_onnx, tmp_path,
                                                                                      monkeypatch, capsys):
    root = tmp_path / "engines"
    assert main(["build", "-q", "--fp16", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(root)]) == 0
    engine = root / "delay-fp16-onnxruntime"
    before = {p: (engine / p).read_bytes() for p in ("model.onnx", "manifest.json")}
    capsys.readouterr()
    calls: list = []
    _full_disk_onnx_save(monkeypatch, calls)
    rc = main(["build", "-q", "--fp16", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(root)])
    line = one_error_line(capsys)
    assert rc == 3 and calls, line
    assert line == (f"[!] writing engine folder {engine} failed: no space left on device in {root} (free space there "
                    f"or write elsewhere; nothing half-written is left)")
    assert _tree(root) == ["delay-fp16-onnxruntime", "delay-fp16-onnxruntime/manifest.json",
                           "delay-fp16-onnxruntime/model.onnx"]  # no temp folder, no half model
    assert {p: (engine / p).read_bytes() for p in before} == before


def test_build_fp32_onto_a_full_disk_leaves_no_folder(delay_onnx, tmp_path, monkeypatch, capsys):
    """An FP32 build copies the model file (shutil.copyfile): the disk fills there."""
    import shutil

    root = tmp_path / "engines"

    def copyfile(src, dst, **kwargs):
        Path(dst).write_bytes(Path(src).read_bytes()[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    assert main(["build", "-q", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(root)]) == 3
    assert "no space left on device" in one_error_line(capsys)
    assert _tree(root) == []


def test_streamify_onto_a_full_disk_is_one_line_exit_3_and_writes_nothing(tmp_path, monkeypatch, capsys):
    src = _conv_onnx(tmp_path / "conv.onnx")
    out = tmp_path / "out" / "conv.stream.onnx"
    _full_disk_onnx_save(monkeypatch)
    rc = main(["streamify", "-q", str(src), "-o", str(out), "--sample-rate-hz", "16000", "--hop-samples", "160"])
    line = one_error_line(capsys)
    assert rc == 3 and line == (f"[!] writing {out} failed: no space left on device in {out.parent} (free space "
                                f"there or write elsewhere; nothing half-written is left)")
    assert _tree(out.parent) == []


def test_run_onto_a_full_disk_names_the_cause_and_keeps_the_earlier_output(delay_onnx, tmp_path, monkeypatch, capsys):
    """libsndfile says only "System error."; the cause is C's errno right after the failed write."""
    sf.write(tmp_path / "in.wav", (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32), 16000)
    out = tmp_path / "out.wav"
    out.write_bytes(b"earlier result")

    def full_disk_write(self, data):
        sf._ffi.errno = errno.ENOSPC  # what write(2) left when libsndfile gave up
        raise sf.LibsndfileError(2)  # SF_ERR_SYSTEM: "System error."

    monkeypatch.setattr(sf.SoundFile, "write", full_disk_write)
    rc = main(["run", "-q", str(tmp_path / "in.wav"), "-o", str(out), "--engine", str(delay_onnx)])
    line = one_error_line(capsys)
    assert rc == 3 and line == (f"[!] writing {out} failed: no space left on device in {tmp_path} (free space there "
                                f"or write elsewhere)"), line
    assert out.read_bytes() == b"earlier result"
    assert _tree(tmp_path) == ["in.wav", "out.wav"]  # the partial .part file is gone


def test_run_without_an_errno_keeps_libsndfiles_text(delay_onnx, tmp_path, monkeypatch, capsys):
    sf.write(tmp_path / "in.wav", np.zeros(1600, np.float32), 16000)

    def failing_write(self, data):
        sf._ffi.errno = 0
        raise sf.LibsndfileError(3)  # not a system error: "Supported file format but file is malformed."

    monkeypatch.setattr(sf.SoundFile, "write", failing_write)
    assert main(["run", "-q", str(tmp_path / "in.wav"), "-o", str(tmp_path / "o.wav"), "--engine",
                 str(delay_onnx)]) == 3
    assert one_error_line(capsys).startswith(f"[!] writing {tmp_path}/o.wav failed (")


def test_calib_make_onto_a_full_disk_names_the_set_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    rec = tmp_path / "rec"
    rec.mkdir()
    rng = np.random.default_rng(0)
    for i in range(16):
        sf.write(rec / f"{i}.wav", (0.1 * rng.standard_normal(3200)).astype(np.float32), 16000)
    out = tmp_path / "set"
    real = Path.write_bytes

    def write_bytes(self, data):
        if str(self).startswith(str(out)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    assert main(["calib", "make", "-q", "--from", str(rec), "--out", str(out)]) == 3
    line = one_error_line(capsys)
    assert line == (f"[!] writing calibration set {out} failed: no space left on device in {tmp_path} (free space "
                    f"there or write elsewhere; nothing half-written is left)")
    assert not out.exists()


# ------------------------------------------------------------------------- item 6e: build -o <a file>
def test_build_o_a_file_says_o_must_be_a_folder(delay_onnx, tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for target, found in ((f, "it is a file"), (f / "sub", f"{f} is a file")):
        rc = main(["build", "--onnx", str(delay_onnx), "--backend", "onnxruntime", "-o", str(target)])
        line = one_error_line(capsys)
        assert rc == 3 and line == (f"[!] -o {target} must be a folder (the engines root, which receives the engine "
                                    f"folder), but {found}: give a folder path"), line
    assert f.read_text() == "mine" and _tree(tmp_path) == ["notes.txt"]


# ------------------------------------------------------------- item 4: export never writes into the package
def _package_models() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((ROOT / "cosyedge" / "models").iterdir()) if p.is_file()}


def test_export_without_o_writes_into_the_current_folder_not_the_package(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from cosyedge.artifacts import StreamContract

    before = _package_models()
    monkeypatch.chdir(tmp_path)
    assert main(["export", "-q"]) == 0
    assert _package_models() == before  # the bundled reference.stream.onnx keeps its bytes
    out = tmp_path / "reference.stream.onnx"
    assert _tree(tmp_path) == ["reference.stream.onnx"]
    c = StreamContract.from_onnx(out)
    assert c.is_streaming and c.sample_rate_hz == 16000 and c.hop_samples == 160
    assert main(["export", "--help"]) == 0
    assert "Default: ./reference.stream.onnx for the reference" in " ".join(capsys.readouterr().out.split())


def test_export_onto_a_full_disk_is_one_line_exit_3(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "full" / "r.stream.onnx"
    real = onnx.save_model

    def save(model, f, *args, **kwargs):  # only the destination's disk is full (the temp full graph is written)
        if Path(f).parent != out.parent:
            return real(model, f, *args, **kwargs)
        Path(f).write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(onnx, "save_model", save)
    monkeypatch.setattr(onnx, "save", save)
    before = _package_models()
    assert main(["export", "-q", "-o", str(out)]) == 3
    assert one_error_line(capsys) == (f"[!] writing {out} failed: no space left on device in {out.parent} (free space "
                                       f"there or write elsewhere; nothing half-written is left)")
    assert _tree(out.parent) == [] and _package_models() == before


# ------------------------------------------------------------------ item 6a: --threads above the CPU count
def test_threads_above_the_cpu_count_warns_in_one_line(delay_onnx, tmp_path, monkeypatch, warnings_seen):
    from cosyedge.cli import options

    monkeypatch.setattr(options, "available_cpus", lambda: 2)
    sf.write(tmp_path / "in.wav", np.zeros(3200, np.float32), 16000)
    args = ["run", str(tmp_path / "in.wav"), "-o", str(tmp_path / "out.wav"), "--engine", str(delay_onnx)]
    assert main(args + ["--threads", "64"]) == 0
    warned = [r.getMessage() for r in warnings_seen if "--threads" in r.getMessage()]
    assert warned == ["--threads 64 is more than the 2 CPU cores this process can use: ONNX Runtime's threads "
                      "then wait on each other (64 on 2 cores ran 25x slower than 1 thread); give --threads 2 or less"]
    warnings_seen.clear()
    assert main(args + ["--threads", "2", "-q"]) == 0
    assert not [r for r in warnings_seen if "--threads" in r.getMessage()]


def test_every_threads_option_warns_above_the_cpu_count():
    import click

    from cosyedge.cli.main import cli
    from cosyedge.cli.options import warn_threads_above_cpus

    seen = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), path + [name])
            return
        for p in cmd.params:
            if p.name == "threads":
                seen.append((" ".join(path), p.callback is warn_threads_above_cpus))

    walk(cli, [])
    assert {"run", "compare", "eval", "calib amax", "calib int8"} <= {c for c, _ in seen}, seen
    assert all(ok for _, ok in seen), seen


# ------------------------------------------------------------- item 6b: out of range is not "clipped"
def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[W]")]


def test_float_samples_far_above_full_scale_are_out_of_range_with_the_peak(delay_onnx, tmp_path, capsys):
    x = (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    x[100] = 1e6
    x[200:300] = 9e5
    sf.write(tmp_path / "big.wav", x, 16000, subtype="FLOAT")
    assert main(["run", str(tmp_path / "big.wav"), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    assert [w for w in _warnings(capsys) if w.startswith("[W] input audio")] == [
        f"[W] input audio {tmp_path / 'big.wav'} is out of range: peak |x| = 1e+06, 101 sample(s) (0.63%) above 2, "
        "full scale being 1.0 (float samples on another scale? e.g. integer values: divide by 32768); processing "
        "anyway"]


def test_genuine_clipping_is_still_called_clipped(delay_onnx, tmp_path, capsys):
    x = (0.1 * np.random.default_rng(0).standard_normal(16000)).astype(np.float32)
    x[::5] = 1.0
    sf.write(tmp_path / "clip.wav", x, 16000, subtype="FLOAT")
    assert main(["run", str(tmp_path / "clip.wav"), "-o", str(tmp_path / "o.wav"), "--engine", str(delay_onnx)]) == 0
    assert [w for w in _warnings(capsys) if w.startswith("[W] input audio")] == [
        f"[W] input audio {tmp_path / 'clip.wav'} looks clipped: 20.00% of samples at "
                                 f"|x| >= 0.999 (processing anyway)"]


# ---------------------------------------------------------- item 6c: a folder where an .onnx file is expected
def test_a_folder_given_as_the_onnx_says_so(delay_onnx, tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    for args in (["streamify", str(folder), "-o", str(tmp_path / "o.onnx")] + sr,
                 ["streamify", str(folder), str(tmp_path / "o.onnx")] + sr,
                 ["build", "--backend", "onnxruntime", "--onnx", str(folder), "-o", str(tmp_path / "e")]):
        assert main(args) == 3
        assert one_error_line(capsys) == f"[!] {folder} is a folder, expected an .onnx file"
    assert main(["build", "-q", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(tmp_path / "e")]) == 0
    engine = tmp_path / "e" / "delay-fp32-onnxruntime"
    capsys.readouterr()
    assert main(["streamify", str(engine), "-o", str(tmp_path / "o.onnx")] + sr) == 3
    assert one_error_line(capsys) == (f"[!] {engine} is a folder (an engine folder from 'cosyedge build'), "
                                       f"expected an .onnx file")
    assert not (tmp_path / "o.onnx").exists()


# ------------------------------------------------------------ item 6d: --calib that does not exist
def test_calib_that_does_not_exist_says_so(delay_onnx, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    args = ["build", "--int8", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(tmp_path / "e")]
    assert main(args + ["--calib", str(missing)]) == 3
    assert one_error_line(capsys) == (f"[!] calibration folder {missing} does not exist (make one: 'cosyedge calib "
                                       f"make --out {missing}', or give the folder of an existing set)")
    missing.mkdir()
    assert main(args + ["--calib", str(missing)]) == 3
    assert one_error_line(capsys) == (f"[!] calibration folder {missing} has no manifest.json (make one: 'cosyedge "
                                       f"calib make --out {missing}')")
    assert _tree(tmp_path / "e") == [] if (tmp_path / "e").exists() else True


# ---------------------------------------------------- item 6f: the proof's length has a unit and a duration
def test_the_proof_log_says_samples_and_seconds(tmp_path, capsys):
    import re

    src = _conv_onnx(tmp_path / "conv.onnx")
    assert main(["streamify", str(src), "-o", str(tmp_path / "c.stream.onnx"), "--sample-rate-hz", "16000",
                 "--hop-samples", "160"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"proved on (\d+) samples \((\d+\.\d\d) s\) at chunks of \[1, 160\] samples: max abs error", err)
    assert m and "ticks" not in err, err
    assert f"{int(m.group(1)) / 16000:.2f}" == m.group(2)


def test_tick_unit_of_feature_inputs_is_frames():
    from types import SimpleNamespace

    from cosyedge.surgery.proof import tick_unit, ticks_seconds

    feat = SimpleNamespace(stream_inputs=[SimpleNamespace(kind="features", name="feat_erb", frames_per_hop=1)],
                           hop_samples=480, sample_rate_hz=48000)
    assert tick_unit(feat) == "frames of 'feat_erb'" and tick_unit(feat, short=True) == "frames"
    assert ticks_seconds(feat, 250) == 2.5


# --------------------------------------------------- item 6g: an export that fixed its time length
def _baked_reshape_onnx(path: Path) -> Path:
    """x (1, 1, T) -> Reshape to a fixed (1, 100, 160) -> Relu -> Reshape to a fixed (1, 1, 16000): what tracing
    ``x.reshape(1, 100, 160)`` exports even with dynamic axes declared."""
    inits = [numpy_helper.from_array(np.array([1, 100, 160], np.int64), "s1"),
             numpy_helper.from_array(np.array([1, 1, 16000], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["f"], name="frames"),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s2"], ["y"], name="back")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "T"])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


HINT = ("export with a dynamic time axis: dynamic_axes={'x': {2: 'T'}, 'y': {2: 'T'}} (torch.onnx.export) or "
        "dynamo=True with dynamic_shapes={'x': {2: torch.export.Dim('T')}}")


def test_streamify_an_export_that_fixed_its_time_length(tmp_path, capsys):
    fixed = _conv_onnx(tmp_path / "fixed.onnx", length=16000)
    out = tmp_path / "o.onnx"
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    assert main(["streamify", str(fixed), "-o", str(out)] + sr) == 2
    assert one_error_line(capsys) == (f"[!] {fixed}: the export fixed the time length (input 'x' is [1, 1, 16000], "
                                       f"no input has a dynamic axis); {HINT}, or give its time axis (--time-axis x=2) "
                                       "to stream it as exported (that axis is made symbolic and the proof checks it)")
    # told which axis is time, the fixed dim is made symbolic (issue 37 item 3's repair) and the proof decides
    assert main(["streamify", str(fixed), "-o", str(out), "--time-axis", "x=2"] + sr) == 0
    err = capsys.readouterr().err  # one line names the repair the proof ran on (tests/surgery/test_refusal_reasons.py)
    assert "input 'x' had its time axis 2 fixed at 16000 by the export" in err
    assert "the proof ran on a repaired copy" in err and "made them symbolic" in err
    out.unlink()
    baked = _baked_reshape_onnx(tmp_path / "baked.onnx")
    assert main(["streamify", str(baked), "-o", str(out)] + sr) == 2
    assert one_error_line(capsys) == (f"[!] {baked}: the export fixed the time length (Reshape node 'frames' asks "
                                       f"for shape {{1,100,160}} at any input length); {HINT}, and shapes computed "
                                       f"from the input (x.reshape(1, -1, 160), not fixed numbers)")
    assert not out.exists()


# --------------------------------------------- item 6h: every missing required value named at once
def test_streamify_without_metadata_names_every_missing_value(tmp_path, capsys):
    src = _conv_onnx(tmp_path / "conv.onnx")
    assert main(["streamify", str(src), "-o", str(tmp_path / "o.onnx")]) == 2
    assert one_error_line(capsys) == (f"[!] {src} has no cosyedge metadata: give sample_rate_hz= (CLI: "
                                       f"--sample-rate-hz N) and hop_samples= (CLI: --hop-samples N)")
    assert main(["streamify", str(src), "-o", str(tmp_path / "o.onnx"), "--hop-samples", "160"]) == 2
    assert one_error_line(capsys) == (f"[!] {src} has no cosyedge metadata: give sample_rate_hz= (CLI: "
                                       f"--sample-rate-hz N)")
