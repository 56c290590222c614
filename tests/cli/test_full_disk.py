"""A full disk (ENOSPC) while build, streamify, run, calib make or export write: one ``[!]`` line naming the
cause and the path, exit 3, nothing half-written left, an earlier result kept."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers import models
from tests.helpers.files import full_disk_onnx_save, tree
from tests.helpers.graphs import conv_onnx

ROOT = Path(__file__).resolve().parents[2]
HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand: no torch, no training."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


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
    full_disk_onnx_save(monkeypatch, calls)
    rc = main(["build", "-q", "--fp16", "--backend", "onnxruntime", "--onnx", str(delay_onnx), "-o", str(root)])
    line = one_error_line(capsys)
    assert rc == 3 and calls, line
    assert f"writing engine folder {engine} failed: no space left on device" in line
    assert tree(root) == ["delay-fp16-onnxruntime", "delay-fp16-onnxruntime/manifest.json",
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
    assert tree(root) == []


def test_streamify_onto_a_full_disk_is_one_line_exit_3_and_writes_nothing(tmp_path, monkeypatch, capsys):
    src = conv_onnx(tmp_path / "conv.onnx")
    out = tmp_path / "out" / "conv.stream.onnx"
    full_disk_onnx_save(monkeypatch)
    rc = main(["streamify", "-q", str(src), "-o", str(out), "--sample-rate-hz", "16000", "--hop-samples", "160"])
    line = one_error_line(capsys)
    assert rc == 3 and f"writing {out} failed: no space left on device" in line, line
    assert tree(out.parent) == []


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
    assert rc == 3 and f"writing {out} failed: no space left on device" in line, line
    assert out.read_bytes() == b"earlier result"
    assert tree(tmp_path) == ["in.wav", "out.wav"]  # the partial .part file is gone


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
    assert f"writing calibration set {out} failed: no space left on device" in line
    assert not out.exists()


def _package_models() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((ROOT / "cosyedge" / "models").iterdir()) if p.is_file()}


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
    assert f"writing {out} failed: no space left on device" in one_error_line(capsys)
    assert tree(out.parent) == [] and _package_models() == before
