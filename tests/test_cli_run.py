"""``cosyedge run`` / ``cosyedge build`` end to end on tiny models: good files, bad files, bad paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import models

DATA = Path(__file__).parent / "data"
SPEECH = DATA / "speech_librivox_0890.wav"
DELAY = 160  # like the reference model: hop 160 at 16 kHz, delay 160


@pytest.fixture(scope="module")
def engine_onnx(tmp_path_factory):
    """Pure-delay model (hop 160, delay 160): after delay compensation, output == input."""
    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=DELAY, hop=160)


def _speech(seconds: float = 0.5) -> tuple[np.ndarray, int]:
    x, sr = sf.read(str(SPEECH), dtype="float32")
    return x[int(sr * 1.0): int(sr * (1.0 + seconds))], sr


def _assert_one_line_error(rc, err, code=None):
    assert rc != 0 if code is None else rc == code
    assert "Traceback" not in err
    bang = [line for line in err.splitlines() if line.startswith("[!]")]
    assert len(bang) == 1, err
    assert err.rstrip().splitlines()[-1] == bang[0]  # the error is the last line
    return bang[0]


# ---------------------------------------------------------------------------------------------- success
def test_run_16k_output_aligned_with_input(cli, engine_onnx, tmp_path):
    x, sr = _speech()
    sf.write(tmp_path / "in.wav", x, sr)
    rc, out, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav", "--engine", engine_onnx)
    assert rc == 0, err
    y, sr_out = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    assert sr_out == sr and y.shape == x.shape
    assert np.abs(y - x).max() <= 1 / 32768  # pure delay, compensated: identical up to PCM_16
    report = out.strip().splitlines()[-1]
    for word in ("RTF", "latency p50", "p99", "chunk 10 ms x 51", "delay 10 ms compensated"):
        assert word in report, report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "out.wav"]


@pytest.mark.parametrize("sr, channels", [(8000, 1), (48000, 2)])
def test_run_other_rates_and_channels(cli, engine_onnx, tmp_path, sr, channels):
    import soxr

    x16, _ = _speech(0.6)
    mono = soxr.resample(x16, 16000, sr).astype(np.float32)
    x = np.stack([mono, 0.5 * mono], axis=1) if channels == 2 else mono
    sf.write(tmp_path / "in.wav", x, sr, subtype="PCM_16")
    rc, out, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.flac", "--engine", engine_onnx,
                       "--chunk-ms", "20")
    assert rc == 0, err
    info = sf.info(str(tmp_path / "out.flac"))
    assert info.samplerate == sr and info.frames == x.shape[0] and info.channels == 1
    y, _ = sf.read(str(tmp_path / "out.flac"), dtype="float32")
    expect = x.mean(axis=1) if channels == 2 else x
    # identity model: only the two resamplings (model rate and back) separate output from the mono input
    mid = slice(sr // 50, -sr // 50)
    err_rms = np.sqrt(np.mean((y[mid] - expect[mid]) ** 2)) / np.sqrt(np.mean(expect[mid] ** 2))
    limit = 0.1 if sr == 48000 else 0.02  # 48 kHz speech loses its > 8 kHz band in the 16 kHz model
    assert err_rms < limit
    assert "chunk 20 ms" in out


def test_build_then_run_engine_folder(cli, engine_onnx, tmp_path):
    rc, out, err = cli("build", "--onnx", engine_onnx, "--backend", "onnxruntime", "-o", tmp_path / "engines")
    assert rc == 0, err
    folder = Path(out.strip().splitlines()[-1])
    assert folder == tmp_path / "engines" / "delay-fp32-onnxruntime"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model.onnx"]
    x, sr = _speech(0.3)
    sf.write(tmp_path / "in.wav", x, sr)
    rc, out, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav", "--engine", folder)
    assert rc == 0, err
    assert np.abs(sf.read(str(tmp_path / "out.wav"), dtype="float32")[0] - x).max() <= 1 / 32768


def test_build_auto_backend_logs_choice(cli, engine_onnx, tmp_path):
    from cosyedge._lazy import has_module

    if has_module("tensorrt"):
        pytest.skip("tensorrt is importable here")
    rc, out, err = cli("build", "--onnx", engine_onnx, "--name", "d", "-o", tmp_path)
    assert rc == 0 and out.strip().splitlines()[-1] == str(tmp_path / "d-fp32-onnxruntime")
    assert "backend auto -> onnxruntime (tensorrt is not importable)" in err
    rc, out, err = cli("build", "--onnx", engine_onnx, "--backend", "tensorrt", "-o", tmp_path)
    assert "TensorRT and an NVIDIA GPU" in _assert_one_line_error(rc, err, code=4)


# ---------------------------------------------------------------------------------------------- bad input
def _make_bad_input(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / "in.wav"
    if kind == "missing":
        return tmp_path / "does_not_exist.wav"
    if kind == "corrupt":
        path.write_bytes(np.random.default_rng(0).bytes(2048))
    elif kind == "empty":
        sf.write(path, np.zeros(0, np.float32), 16000)
    elif kind == "nan":
        x = np.zeros(1600, np.float32)
        x[[10, 20, 30]] = np.nan
        sf.write(path, x, 16000, subtype="FLOAT")
    return path


@pytest.mark.parametrize("kind, code, words", [
    ("missing", 3, "not found"),
    ("corrupt", 3, "cannot decode"),
    ("empty", 3, "no samples"),
    ("nan", 2, "3 NaN/Inf sample(s) of 1600 (first at sample 10"),
])
def test_run_bad_input(cli, engine_onnx, tmp_path, kind, code, words):
    src = _make_bad_input(kind, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out, err = cli("run", src, "-o", tmp_path / "out.wav", "--engine", engine_onnx)
    assert words in _assert_one_line_error(rc, err, code=code)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temp file


def test_failed_run_keeps_existing_output(cli, engine_onnx, tmp_path):
    out_path = tmp_path / "out.wav"
    out_path.write_bytes(b"previous result")
    src = _make_bad_input("corrupt", tmp_path)
    rc, _, err = cli("run", src, "-o", out_path, "--engine", engine_onnx)
    _assert_one_line_error(rc, err, code=3)
    assert out_path.read_bytes() == b"previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav", "out.wav"]


@pytest.mark.parametrize("kind, code", [("proc", 3), ("under_file", 3), ("folder", 3), ("extension", 2)])
def test_run_unwritable_output(cli, engine_onnx, tmp_path, kind, code):
    x, sr = _speech(0.2)
    sf.write(tmp_path / "in.wav", x, sr)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "dir.wav").mkdir()
    dest = {"proc": Path("/proc/x.wav"), "under_file": tmp_path / "file.txt" / "out.wav",
            "folder": tmp_path / "dir.wav", "extension": tmp_path / "out.mp4"}[kind]
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", dest, "--engine", engine_onnx)
    line = _assert_one_line_error(rc, err, code=code)
    assert str(dest) in line
    assert "START" not in err  # rejected before any processing
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_run_usage_errors(cli, engine_onnx, tmp_path):
    x, sr = _speech(0.2)
    sf.write(tmp_path / "in.wav", x, sr)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", engine_onnx, "--chunk-ms", "15")
    assert "multiple of the model's total stride 160" in _assert_one_line_error(rc, err, code=2)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", engine_onnx,
                     "--chunk-ms", "0.01")
    assert "whole number of samples" in _assert_one_line_error(rc, err, code=2)
    rc, _, err = cli("run", "mic")  # microphone: nothing to record or play (tests/realtime/ cover the rest)
    assert "nothing to do: give --output FILE, --save-input FILE and/or --monitor" in _assert_one_line_error(rc, err, code=2)
    rc, _, err = cli("run", tmp_path / "in.wav", "--engine", engine_onnx)
    assert "missing output" in _assert_one_line_error(rc, err, code=2)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", tmp_path / "nope")
    assert "engine not found" in _assert_one_line_error(rc, err, code=3)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", engine_onnx,
                     "--threads", "100000")
    assert "'--threads': 100000 is not in 1..256" in _assert_one_line_error(rc, err, code=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]


def test_run_model_producing_nan_writes_nothing(cli, tmp_path):
    bad_model = models.make_nan_model(tmp_path / "nan.onnx", hop=160)
    x, sr = _speech(0.2)
    sf.write(tmp_path / "in.wav", x, sr)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav", "--engine", bad_model)
    assert "produced" in _assert_one_line_error(rc, err, code=3)
    assert not (tmp_path / "out.wav").exists()


def test_subprocess_exit_code_and_no_traceback(engine_onnx, tmp_path):
    """The real console path: exit status from the process, one '[!]' line, no traceback."""
    bad = _make_bad_input("corrupt", tmp_path)
    p = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "run", str(bad), "-o", str(tmp_path / "o.wav"),
                        "--engine", str(engine_onnx)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 3
    _assert_one_line_error(p.returncode, p.stderr, code=3)
    assert not (tmp_path / "o.wav").exists()


def test_default_engine_run(cli, tmp_path, monkeypatch):
    from cosyedge.models import REFERENCE_STREAM_ONNX

    if not Path(REFERENCE_STREAM_ONNX).is_file():
        pytest.skip(f"bundled reference model not built yet ({REFERENCE_STREAM_ONNX})")
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    x, sr = _speech(1.0)
    sf.write(tmp_path / "in.wav", x, sr)
    rc, out, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav")
    assert rc == 0, err
    y, sr_out = sf.read(str(tmp_path / "out.wav"), dtype="float32")
    assert sr_out == sr and y.shape == x.shape and np.isfinite(y).all()
    assert (tmp_path / "engines" / os.listdir(tmp_path / "engines")[0] / "manifest.json").is_file()
    assert "RTF" in out


def test_default_engine_missing_is_one_line(cli, tmp_path, monkeypatch):
    import cosyedge.models

    monkeypatch.setattr(cosyedge.models, "REFERENCE_STREAM_ONNX", tmp_path / "absent.onnx")
    x, sr = _speech(0.2)
    sf.write(tmp_path / "in.wav", x, sr)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "out.wav")
    assert "bundled reference model" in _assert_one_line_error(rc, err, code=3)
    rc, _, err = cli("build")
    assert "bundled reference model" in _assert_one_line_error(rc, err, code=3)


def test_chunk_ms_nan_inf_huge_and_same_output_are_one_line(cli, engine_onnx, tmp_path):
    x, sr = _speech(0.2)
    sf.write(tmp_path / "in.wav", x, sr)
    for bad in ("nan", "inf", "1e9"):
        rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", engine_onnx,
                         "--chunk-ms", bad)
        assert "give a positive multiple of 10 ms" in _assert_one_line_error(rc, err, code=2)
    rc, _, err = cli("run", tmp_path / "in.wav", "-o", tmp_path / "in.wav", "--engine", engine_onnx)
    assert "is the input file" in _assert_one_line_error(rc, err, code=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.wav"]
