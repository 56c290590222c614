"""An INT8 ``ort_matmul`` engine takes one hop per call (its audio input's time axis
is fixed at 160 samples). ``run``/sessions/StreamPool refuse another chunk in one line (exit 2), ``compare``/``check``
follow the engine's chunk, ``build --int8-placement ort_matmul`` with backend auto falls back from TensorRT to ONNX
Runtime, and a model streamified with 2 conv frames per hop says why nothing gets quantized.

One INT8 engine is built for the module (16 one-second calibration recordings, ~10 s) through ``cosyedge.builders
.build`` with backend auto on a machine made to look like a TensorRT one (``resolve_backend`` patched).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import numpy as np
import onnx
import pytest
import soundfile as sf

from cosyedge.artifacts import StreamContract
from cosyedge.cli.main import main
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.helpers.cli_errors import refused
from tests.precision import int8_fixtures as fx

ENGINE_MSG = "engine {eng} takes exactly 160 samples (10 ms) per call, not {n}"  # the key phrase


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record):
        self.lines.append((record.levelno, record.getMessage()))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(engine folder, log lines of its build): INT8 ort_matmul, backend auto on a 'TensorRT machine', with
    --int8-min-snr 10 (met at once: the fallback measures once, keeps every layer INT8)."""
    import cosyedge.builders as builders
    from cosyedge.builders.config import BuildConfig

    root = tmp_path_factory.mktemp("fixed_chunk")
    calib = fx.small_calibration_set(root)
    cfg = BuildConfig.from_flags(int8=True, calib=str(calib), placement="ort_matmul", min_snr_db=10)
    lines = _Lines()
    log = logging.getLogger("cosyedge")
    log.addHandler(lines)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(builders, "resolve_backend", lambda backend="auto": "tensorrt")
            folder = builders.build(None, cfg, "auto", out_dir=root / "engines")
    finally:
        log.removeHandler(lines)
        log.setLevel(old)
    return folder, lines.lines


@pytest.fixture()
def eng(built, monkeypatch):
    """The engine folder, as a relative path (the messages name it as given)."""
    folder = built[0]
    monkeypatch.chdir(folder.parent.parent)
    return f"{folder.parent.name}/{folder.name}"


# ------------------------------------------------------------------------------------------------- R1
def test_auto_backend_on_a_tensorrt_machine_builds_ort_matmul_for_onnx_runtime(built):
    folder, lines = built
    manifest = json.loads((folder / "manifest.json").read_text())
    assert folder.name == "reference-int8-ort_matmul-minsnr10-onnxruntime" and manifest["backend"] == "onnxruntime"
    assert manifest["reports"]["int8"]["placement"] == "ort_matmul"
    assert (logging.INFO, "backend auto -> onnxruntime instead: --int8-placement ort_matmul is ONNX Runtime's CPU "
                          "placement (TensorRT builds use trt)") in lines


def test_explicit_tensorrt_backend_still_refuses_ort_matmul(monkeypatch, capsys):
    import cosyedge.builders as builders

    monkeypatch.setattr(builders, "resolve_backend", lambda backend="auto": "tensorrt")
    rc = main(["build", "--int8", "--int8-placement", "ort_matmul", "--backend", "tensorrt"])
    line = refused(rc, capsys.readouterr().err, 2)
    assert "--int8-placement ort_matmul is for ONNX Runtime CPU" in line


# ------------------------------------------------------------------------------------------------- R9 (labels)
def test_fallback_and_output_snr_lines_name_their_audio(built):
    _, lines = built
    fb = [m for _, m in lines if m.startswith("int8 fallback: ") and "layers kept float: " in m]
    out = [m for _, m in lines if m.startswith("int8: output SNR ")]
    assert len(fb) == 1 and "vs FP32 on held-out speech (17.3 s, bundled demo recording (noisy.wav))" in fb[0], fb
    assert len(out) == 1 and out[0].endswith("dB vs the FP32 model on noisy speech (the first 8 s of the demo "
                                             "recording)"), out
    # two figures on two lengths of audio, each said: both well above the target here
    assert float(fb[0].split()[2]) > 30.0 and float(out[0].split()[3]) > 30.0


# ------------------------------------------------------------------------------------------------- B2
def test_run_with_another_chunk_is_one_line_exit_2(eng, tmp_path, capsys):
    out = tmp_path / "x.wav"
    rc = main(["run", str(fx.DEMO_NOISY), "-o", str(out), "--engine", eng, "--chunk-ms", "20"])
    assert ENGINE_MSG.format(eng=eng, n=320) in refused(rc, capsys.readouterr().err, 2)
    assert not out.exists()
    rc = main(["run", str(fx.DEMO_NOISY), "-o", str(out), "--engine", eng])  # default: one hop per call
    assert rc == 0 and sf.info(str(out)).frames == 276640


def test_sessions_and_pool_refuse_before_running(built, tmp_path):
    from cosyedge.runtime import OrtStreamSession, StreamPool

    folder = built[0]
    with pytest.raises(UsageError) as e:
        OrtStreamSession(folder / "model.onnx", chunk_samples=320)
    assert ENGINE_MSG.format(eng=folder, n=320) in str(e.value)
    with pytest.raises(UsageError) as e:
        StreamPool(folder / "model.onnx", max_streams=2, chunk_samples=480)
    assert ENGINE_MSG.format(eng=folder, n=480) in str(e.value)
    bare = tmp_path / "x.int8.onnx"  # the ONNX alone (what 'calib int8 --placement ort_matmul' writes)
    shutil.copy(folder / "model.onnx", bare)
    c = StreamContract.from_onnx(bare)
    assert c.fixed_chunk_samples == 160
    with pytest.raises(UsageError, match=rf"^{bare} takes exactly 160 samples \(10 ms\) per call, not 480 "):
        c.check_chunk(480)
    assert StreamContract.from_onnx(REFERENCE_STREAM_ONNX).fixed_chunk_samples == 0  # FP32: any multiple of 160
    with OrtStreamSession(bare) as s:  # one hop per call runs
        y = s.push(np.zeros((1, 1, 160), np.float32))["enhanced"]
    assert y.shape == (1, 1, 160)


# ------------------------------------------------------------------------------------------------- B1
def test_compare_follows_the_engines_chunk(eng, tmp_path, capsys):
    j = tmp_path / "c.json"
    rc = main(["compare", str(REFERENCE_STREAM_ONNX), eng, "--mode", "free-running", "--max-utterances", "1",
               "--no-pesq", "--json", str(j)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert (f"[I] engine {eng} (an ort_matmul INT8 build: one hop per call) takes exactly 160 samples per call: "
            f"comparing in 10 ms chunks (not the default 100 ms)") in cap.err.splitlines()
    res = json.loads(j.read_text())
    assert res["chunk_samples"] == 160 and res["passed"]
    snr = res["modes"]["free-running"]["utterances"]["demo-noisy"]["outputs"]["enhanced"]["snr_db"]
    assert snr > 30.0  # measured 40.4 dB (INT8 vs FP32 on the noisy demo, free-running)


def test_compare_with_an_incompatible_chunk_is_one_line(eng, capsys):
    rc = main(["compare", str(REFERENCE_STREAM_ONNX), eng, "--chunk-ms", "100", "--no-pesq"])
    err = capsys.readouterr().err
    assert ENGINE_MSG.format(eng=eng, n=1600) in refused(rc, err, 2)
    assert "Note:" not in err and "START compare" not in err  # refused before anything runs


def _pair(folder, seconds: float = 2.0):
    n = int(seconds * fx.SR)
    for sub, src in (("noisy", fx.DEMO_NOISY), ("clean", fx.DEMO_CLEAN)):
        (folder / sub).mkdir(parents=True)
        sf.write(str(folder / sub / "a.wav"), fx._read(src)[:n], fx.SR, subtype="FLOAT")
    return folder


def test_check_follows_a_candidates_chunk(eng, tmp_path, capsys):
    utts = _pair(tmp_path / "utts")
    args = ["check", "--precisions", "int8", "--candidate", f"int8={eng}", "--update-baseline", "--no-pesq",
            "--utterances", str(utts), "--baseline"]
    rc = main(args + [str(tmp_path / "b.json"), "--json", str(tmp_path / "r.json")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["chunk_samples"] == 160 and json.loads((tmp_path / "b.json").read_text())["chunk_samples"] == 160
    fr = rep["labels"]["int8"]["compare"]["modes"]["free-running"]["utterances"]["a"]["outputs"]["enhanced"]
    assert fr["snr_db"] > 30.0
    rc = main(args + [str(tmp_path / "b2.json"), "--chunk-ms", "20"])
    assert ENGINE_MSG.format(eng=eng, n=320) in refused(rc, capsys.readouterr().err, 2)
    assert not (tmp_path / "b2.json").exists()


# ------------------------------------------------------------------------------------------------- R9 (why float)
def test_two_frames_per_call_says_why_nothing_is_quantized(built, tmp_path, caplog):
    """The reference with its contract's hop doubled (320 samples: what 'streamify --hop-samples 320' gives a stride-160
    model): every conv computes 2 frames per call, so ort_matmul has no MatMul form for any of them."""
    from cosyedge.precision.int8 import int8_onnx

    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    c = StreamContract.from_onnx(m)
    dataclasses.replace(c, hop_samples=320, name="ref2hop").write_to_onnx(m)
    src = tmp_path / "ref2hop.stream.onnx"
    onnx.save(m, str(src))
    calib = tmp_path / "calib"  # the module's 16 recordings; this model is calibrated anew (its own amax cache)
    shutil.copytree(built[0].parent.parent / "calib", calib)
    with caplog.at_level(logging.INFO, logger="cosyedge"):
        rep = int8_onnx(src, tmp_path / "q.onnx", calib=calib, placement="ort_matmul")
    assert rep["quantized_nodes"] == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
              and r.getMessage().startswith("Q/DQ placement ort_matmul")]
    assert warned == ["Q/DQ placement ort_matmul quantizes one-frame convs only: at one hop (320 samples) per call, 25 "
                      "convs compute 2 frames each, so 25 of 25 weighted layers stay float; use placement trt (build "
                      "--int8-placement trt), or streamify with a hop of one conv frame (--hop-samples 160)"]
