"""The INT8 ``ort_matmul`` model takes any whole number of hops per call (its one-hop graph runs in a Scan over hops,
:mod:`cosyedge.passes.hop_scan`), and it is what ``cosyedge build --int8`` makes for ONNX Runtime by default.

Multi-hop calls equal one-hop calls bit for bit on real speech; ``run --chunk-ms 20/40``, ``compare`` (its default
100 ms chunks), ``check``, sessions and StreamPool run the default INT8 engine; the default placement is chosen per
backend (``ort_matmul`` for ONNX Runtime and Triton's Python backend, ``trt`` for TensorRT and Triton's
onnxruntime backend, ``trt`` with one info line for a model ort_matmul cannot take); an ort_matmul model written before
(one hop fixed) is still refused in one line at another chunk.

One INT8 engine is built for the module (16 one-second calibration recordings, ~10 s) through ``cosyedge.builders
.build`` with no placement; a second one (``--int8-placement ort_matmul``, backend auto on a machine made to look like
a TensorRT one) reuses its amax cache.
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


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record):
        self.lines.append((record.levelno, record.getMessage()))


def _build(cfg, backend, root, **kw):
    """(engine folder, log lines) of ``cosyedge.builders.build``."""
    import cosyedge.builders as builders

    lines = _Lines()
    log = logging.getLogger("cosyedge")
    log.addHandler(lines)
    old = log.level
    log.setLevel(logging.INFO)
    try:
        folder = builders.build(None, cfg, backend, out_dir=root / "engines", **kw)
    finally:
        log.removeHandler(lines)
        log.setLevel(old)
    return folder, lines.lines


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(engine folder, log lines of its build): a plain INT8 build for ONNX Runtime (no placement given)."""
    from cosyedge.builders.config import BuildConfig

    root = tmp_path_factory.mktemp("hops")
    calib = fx.small_calibration_set(root)
    return _build(BuildConfig.from_flags(int8=True, calib=str(calib)), "onnxruntime", root)


@pytest.fixture()
def eng(built, monkeypatch):
    """The engine folder, as a relative path (the messages name it as given)."""
    folder = built[0]
    monkeypatch.chdir(folder.parent.parent)
    return f"{folder.parent.name}/{folder.name}"


def _amax(folder):
    return json.loads((folder / "manifest.json").read_text())["reports"]["int8"]["amax_path"]


# ------------------------------------------------------------------------------------------------- default placement
def test_a_plain_int8_build_for_onnx_runtime_is_ort_matmul_in_the_plain_folder(built):
    folder, _ = built
    m = json.loads((folder / "manifest.json").read_text())
    assert folder.name == "reference-int8-onnxruntime"
    assert m["flags"]["int8_placement"] == "ort_matmul" and m["reports"]["int8"]["placement"] == "ort_matmul"
    # dynamic activations (the default): one DynamicQuantizeMatMul per quantized conv, inside the Scan body
    assert m["reports"]["int8"]["ort_fusion"]["fused"] == {"DynamicQuantizeMatMul": 24}
    assert m["reports"]["int8"]["activation_type"] == "uint8 per call"
    assert StreamContract.from_onnx(folder / "model.onnx").fixed_chunk_samples == 0  # any multiple of the hop
    assert m["reports"]["int8"]["output_snr_db"] > 40.0  # measured 44.6 dB (37.9 with calibrated static steps)


def test_default_placement_per_backend():
    from cosyedge.builders.names import default_placement

    assert default_placement("onnxruntime", REFERENCE_STREAM_ONNX) == ("ort_matmul", None)
    assert default_placement("triton-python", REFERENCE_STREAM_ONNX) == ("ort_matmul", None)
    assert default_placement("tensorrt", REFERENCE_STREAM_ONNX) == ("trt", None)
    assert default_placement("triton", REFERENCE_STREAM_ONNX) == ("trt", None)


def test_a_scan_body_model_defaults_to_trt_with_one_line(tmp_path):
    """An adopted model (its compute in a Scan over hops): ort_matmul is for flat graphs, so its ONNX Runtime default
    is trt, said why."""
    from cosyedge.builders.names import default_placement
    from cosyedge.surgery.adopt import adopt
    from tests.surgery.test_adopt import HOP, SR, packed_model

    out = tmp_path / "packed.stream.onnx"
    adopt(packed_model(tmp_path / "packed.onnx"), out, sample_rate_hz=SR, hop_samples=HOP)
    assert default_placement("onnxruntime", out) == (
        "trt", "INT8 placement trt: packed.stream.onnx keeps its compute in Scan bodies, which the ONNX Runtime "
               "default ort_matmul (flat graphs only) cannot take")
    assert default_placement("tensorrt", out) == ("trt", None)


def test_explicit_ort_matmul_with_auto_backend_on_a_tensorrt_machine_builds_for_onnx_runtime(built, tmp_path,
                                                                                           monkeypatch):
    import cosyedge.builders as builders
    from cosyedge.builders.config import BuildConfig

    monkeypatch.setattr(builders, "resolve_backend", lambda backend="auto": "tensorrt")
    cfg = BuildConfig.from_flags(int8=True, amax=_amax(built[0]), placement="ort_matmul")
    folder, lines = _build(cfg, "auto", tmp_path)
    assert folder.name == "reference-int8-onnxruntime"  # ort_matmul is ONNX Runtime's default: no suffix
    assert (logging.INFO, "backend auto -> onnxruntime instead: --int8-placement ort_matmul is ONNX Runtime's CPU "
                          "placement (TensorRT builds use trt)") in lines


def test_explicit_tensorrt_backend_still_refuses_ort_matmul(monkeypatch, capsys):
    import cosyedge.builders as builders

    monkeypatch.setattr(builders, "resolve_backend", lambda backend="auto": "tensorrt")
    rc = main(["build", "--int8", "--int8-placement", "ort_matmul", "--backend", "tensorrt"])
    line = refused(rc, capsys.readouterr().err, 2)
    assert "--int8-placement ort_matmul is for ONNX Runtime CPU" in line


def test_triton_onnxruntime_backend_refuses_ort_matmul(capsys):
    rc = main(["build", "--int8", "--int8-placement", "ort_matmul", "--backend", "triton"])
    line = refused(rc, capsys.readouterr().err, 2)
    assert "Triton builds use trt" in line and "--triton-backend python" in line


# ------------------------------------------------------------------------------------------------- hops per call
def _stream(model, x, chunk):
    from cosyedge.runtime import OrtStreamSession, stream_array

    with OrtStreamSession(model, chunk_samples=chunk) as s:
        return stream_array(s, x)


def test_multi_hop_calls_equal_one_hop_calls_on_real_speech(built):
    model = built[0] / "model.onnx"
    x = fx._read(fx.DEMO_NOISY)[: 160 * 700]  # 7 s of the noisy demo recording
    one = _stream(model, x, 160)
    assert np.isfinite(one).all() and np.abs(one).max() > 0.05
    for hops in (2, 4):
        assert np.array_equal(_stream(model, x, 160 * hops), one), hops


def test_the_scan_body_is_the_one_hop_graph_and_gives_the_same_numbers(built, tmp_path):
    """What the build wraps: the one-hop matmul-form graph (fixed time axis), run hop by hop with its states fed back,
    gives the multi-hop model's output bit for bit."""
    from cosyedge.passes.hop_scan import one_hop_body

    m = onnx.load(str(built[0] / "model.onnx"))
    body = one_hop_body(m)
    assert body is not None and not any(n.op_type == "Scan" for n in body.graph.node)
    path = tmp_path / "one_hop.onnx"
    onnx.save(body, str(path))
    assert StreamContract.from_onnx(path).fixed_chunk_samples == 160
    x = fx._read(fx.DEMO_NOISY)[: 160 * 300]
    assert np.array_equal(_stream(path, x, 160), _stream(built[0] / "model.onnx", x, 640))


def test_stream_pool_on_the_default_int8_engine(built):
    """Two streams in one pool at 40 ms chunks: each within INT8 rounding of its own session (>= 50 dB; measured 59.8
    dB). With the default dynamic activations each layer's step comes from its input's own range: the pool's batched
    float ops round ~1e-7 otherwise than one session (as in any FP32 pool), which moves a step now and then, and the
    conv states carry it (with calibrated static steps the pool was bit-identical; INT8 itself is 44.6 dB from FP32
    here)."""
    from cosyedge.runtime import StreamPool

    model = built[0] / "model.onnx"
    x = fx._read(fx.DEMO_NOISY)[: 640 * 100]
    xs = [x, x[::-1].copy() * 0.3]
    want = [_stream(model, v, 640) for v in xs]
    with StreamPool(model, max_streams=2, chunk_samples=640) as p:
        ids = [p.join() for _ in xs]
        got = [[], []]
        for t in range(x.size // 640):
            out = p.push({i: v[t * 640:(t + 1) * 640] for i, v in zip(ids, xs)})
            for k, i in enumerate(ids):
                got[k].append(np.asarray(out[i]).reshape(-1).copy())
    for k in range(2):
        y = np.concatenate(got[k]).astype(np.float64)
        err = np.sum((y - want[k]) ** 2)
        snr = np.inf if err == 0 else 10 * np.log10(np.sum(want[k].astype(np.float64) ** 2) / err)
        assert snr >= 50.0, (k, snr)


@pytest.mark.parametrize("chunk_ms", [20, 40])
def test_run_with_chunks_of_several_hops(eng, tmp_path, chunk_ms):
    out = tmp_path / f"x{chunk_ms}.wav"
    rc = main(["run", str(fx.DEMO_NOISY), "-o", str(out), "--engine", eng, "--chunk-ms", str(chunk_ms)])
    assert rc == 0 and sf.info(str(out)).frames == 276640
    one = tmp_path / "x10.wav"
    assert main(["run", str(fx.DEMO_NOISY), "-o", str(one), "--engine", eng, "--chunk-ms", "10"]) == 0
    a, _ = sf.read(str(out), dtype="float32")
    b, _ = sf.read(str(one), dtype="float32")
    assert np.array_equal(a, b)


def test_compare_runs_the_default_chunk(eng, tmp_path, capsys):
    j = tmp_path / "c.json"
    rc = main(["compare", str(REFERENCE_STREAM_ONNX), eng, "--mode", "free-running", "--max-utterances", "1",
               "--no-pesq", "--json", str(j)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "takes exactly" not in cap.err
    res = json.loads(j.read_text())
    assert res["chunk_samples"] == 1600 and res["passed"]
    snr = res["modes"]["free-running"]["utterances"]["demo-noisy"]["outputs"]["enhanced"]["snr_db"]
    assert snr > 30.0  # INT8 vs FP32 on the noisy demo, free-running


def _pair(folder, seconds: float = 2.0):
    n = int(seconds * fx.SR)
    for sub, src in (("noisy", fx.DEMO_NOISY), ("clean", fx.DEMO_CLEAN)):
        (folder / sub).mkdir(parents=True)
        sf.write(str(folder / sub / "a.wav"), fx._read(src)[:n], fx.SR, subtype="FLOAT")
    return folder


def test_check_runs_a_default_int8_candidate_at_any_chunk(eng, tmp_path, capsys):
    utts = _pair(tmp_path / "utts")
    args = ["check", "--precisions", "int8", "--candidate", f"int8={eng}", "--update-baseline", "--no-pesq",
            "--utterances", str(utts)]
    for ms, samples in ((None, None), ("20", 320)):
        extra = ["--chunk-ms", ms] if ms else []
        b = tmp_path / f"b{ms}.json"
        rc = main(args + ["--baseline", str(b), "--json", str(tmp_path / f"r{ms}.json")] + extra)
        cap = capsys.readouterr()
        assert rc == 0, cap.err
        rep = json.loads((tmp_path / f"r{ms}.json").read_text())
        if samples:
            assert rep["chunk_samples"] == samples
        fr = rep["labels"]["int8"]["compare"]["modes"]["free-running"]["utterances"]["a"]["outputs"]["enhanced"]
        assert fr["snr_db"] > 30.0


# ------------------------------------------------------------------------------------------------- older engines
def test_a_one_hop_model_written_before_is_refused_at_another_chunk(built, tmp_path):
    """An ort_matmul model from before the Scan over hops (its input fixed at one hop): sessions and pools refuse
    another chunk in one line."""
    from cosyedge.passes.hop_scan import one_hop_body
    from cosyedge.runtime import OrtStreamSession, StreamPool

    bare = tmp_path / "old.int8.onnx"
    onnx.save(one_hop_body(onnx.load(str(built[0] / "model.onnx"))), str(bare))
    msg = rf"^{bare} takes exactly 160 samples \(10 ms\) per call, not 320 \(an ort_matmul INT8 build: one hop per call\)"
    with pytest.raises(UsageError, match=msg):
        OrtStreamSession(bare, chunk_samples=320)
    with pytest.raises(UsageError, match=msg.replace("320", "480")):
        StreamPool(bare, max_streams=2, chunk_samples=480)


# ------------------------------------------------------------------------------------------------- why float
def _two_hop_reference(tmp_path):
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    c = StreamContract.from_onnx(m)
    dataclasses.replace(c, hop_samples=320, name="ref2hop").write_to_onnx(m)
    src = tmp_path / "ref2hop.stream.onnx"
    onnx.save(m, str(src))
    return src


def test_two_frames_per_call_says_why_nothing_is_quantized(built, tmp_path, caplog):
    """The reference with its contract's hop doubled (320 samples: what 'streamify --hop-samples 320' gives a stride-160
    model): every conv computes 2 frames per call, so ort_matmul has no MatMul form for any of them."""
    from cosyedge.precision.int8 import int8_onnx

    src = _two_hop_reference(tmp_path)
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
    # the default (a build with no placement) takes trt there instead, in one info line
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cosyedge"):
        rep = int8_onnx(src, tmp_path / "d.onnx", calib=calib, placement="ort_matmul", fallback_placement="trt")
    assert rep["placement"] == "trt" and rep["placement_requested"] == "ort_matmul" and rep["quantized_nodes"]
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("INT8 placement trt:")]
    assert notes == [rep["placement_note"]] and "finds no layer of its form in ref2hop.stream.onnx" in notes[0]
