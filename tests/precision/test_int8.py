"""INT8 on the bundled reference model: calibration set, amax cache, Q/DQ placement, accuracy, CLI errors.

The calibration set is 32 recordings made from the bundled audio (tests/precision/int8_fixtures.py), so
the tests run offline; accuracy is measured on demo audio that calibration never saw.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from cosyedge.artifacts import StreamContract, model_content_sha256, sha256_file
from cosyedge.cli.main import main
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision import calibrate as cal
from cosyedge.precision.calibset import MIN_FROM_FILES, load_calibration_set, make_calibration_set
from cosyedge.precision.int8 import int8_onnx
from cosyedge.precision.qdq import float_nodes, weighted_nodes
from cosyedge.runtime import OrtStreamSession, enhance_array
from tests.precision import int8_fixtures as fx
from tests.reference_structure import (
    BOUNDARY_CONVS,
    DECLARED_FLOAT,
    LW_ANALYSIS_CONV,
    PC_FRAMES_CONVS,
    reference_structure,
)
from tests.helpers.metrics import snr_db
from tests.helpers.cli_errors import one_error_line, refused

REF_NET = reference_structure()
"""Convs, states and blocks of the bundled model, from its weights' config (tests/reference_structure.py)."""


# ------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("int8")


@pytest.fixture(scope="module")
def recordings(work):
    d = fx.write_recordings(work / "recordings", count=32)
    expected = fx.write_bad_files(d)
    return d, expected


@pytest.fixture(scope="module")
def calib_set(work, recordings):
    d, _ = recordings
    assert main(["calib", "make", "--from", str(d), "--out", str(work / "calib")]) == 0
    return load_calibration_set(work / "calib")


@pytest.fixture(scope="module")
def model(work):
    p = work / "reference.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, p)
    return p


@pytest.fixture(scope="module")
def int8(work, model, calib_set):
    out = work / "reference.stream.int8.onnx"
    info = int8_onnx(model, out, calib=calib_set.folder)
    return out, info


def _qdq_pairs(model_path, quantized) -> int:
    """Q/DQ pairs int8_onnx should insert: one per quantized weight and one per distinct activation those nodes
    read (with the pitch comb /out and /pc_out read the same features and share one)."""
    data = {w.data for w in weighted_nodes(onnx.load(str(model_path))) if w.name in set(quantized)}
    return len(quantized) + len(data)


def _stream(path, x, chunk=None):
    with OrtStreamSession(path, chunk_samples=chunk) as s:
        return enhance_array(s, x)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture()
def log_lines():
    h = _Records()
    lg = logging.getLogger("cosyedge")
    old = lg.level
    lg.setLevel(logging.INFO)
    lg.addHandler(h)
    yield h.lines
    lg.removeHandler(h)
    lg.setLevel(old)


# ---------------------------------------------------------------------------------------- calibration set
def test_from_folder_counts_skipped_files(calib_set, recordings):
    _, expected = recordings
    m = calib_set.manifest
    assert len(calib_set) == 32 and m["count"] == 32
    assert m["skipped"]["unreadable"] == expected["unreadable"]
    assert m["skipped"]["wrong_rate"] == expected["wrong_rate"]
    assert m["skipped"]["non_finite"] == expected["non_finite"]
    for f in calib_set.files:
        assert sha256_file(calib_set.folder / f["file"]) == f["sha256"]
        assert f["duration_s"] == pytest.approx(1.5, abs=1e-3)
    assert (calib_set.folder / ".gitignore").read_text().strip().endswith("audio/")
    x = calib_set.read(0)
    assert x.dtype == np.float32 and x.size == 24000 and 0.3 < np.abs(x).max() <= 1.0


def test_generated_set_is_deterministic_and_records_snr(tmp_path):
    src = fx.BundledMixes()
    a = make_calibration_set(tmp_path / "a", count=6, seed=5, training_data=src)
    b = make_calibration_set(tmp_path / "b", count=6, seed=5, training_data=src)
    c = make_calibration_set(tmp_path / "c", count=6, seed=6, training_data=src)
    assert a.sha256 == b.sha256 != c.sha256
    assert [f["sha256"] for f in a.files] == [f["sha256"] for f in b.files]
    snrs = [f["snr_db"] for f in a.files]
    assert all(s is not None and -1.0 < s < 21.0 for s in snrs)  # the stand-in mixes at 0..20 dB
    durs = [f["duration_s"] for f in a.files]
    assert all(1.0 <= d <= 4.0 for d in durs) and len(set(durs)) > 1
    assert a.manifest["source"]["missing_corpora"] == {}  # the stand-in has every source
    src.missing = {"espeak": "speech corpus espeak unavailable: 'espeak-ng' not found on PATH"}
    d = make_calibration_set(tmp_path / "d", count=6, seed=5, training_data=src)
    assert d.manifest["source"]["missing_corpora"] == src.missing  # says why another machine's set differs
    assert d.sha256 != a.sha256


def test_too_few_recordings_is_an_error_and_keeps_the_old_set(tmp_path, calib_set, capsys):
    bad = tmp_path / "few"
    fx.write_recordings(bad, count=3)
    fx.write_bad_files(bad)
    out = tmp_path / "set"
    shutil.copytree(calib_set.folder, out)
    before = sha256_file(out / "manifest.json")
    rc = main(["calib", "make", "--from", str(bad), "--out", str(out)])
    line = refused(rc, capsys.readouterr().err, 2)
    assert f"--from {bad}: only 3 usable recording(s), need at least {MIN_FROM_FILES}" in line
    assert "(2 unreadable, 2 not 16000 Hz, 1 with NaN/Inf, 0 shorter than 0.1 s)" in line
    assert sha256_file(out / "manifest.json") == before
    assert len(load_calibration_set(out)) == 32  # the previous audio is intact (hashes checked on read)
    load_calibration_set(out).read(31)


def test_edited_calibration_file_is_detected(tmp_path, calib_set):
    out = tmp_path / "set"
    shutil.copytree(calib_set.folder, out)
    s = load_calibration_set(out)
    (out / s.files[4]["file"]).write_bytes((out / s.files[5]["file"]).read_bytes())
    with pytest.raises(ArtifactError, match="does not match its manifest sha256"):
        s.read(4)


# ------------------------------------------------------------------------------------- Q/DQ structure
def test_qdq_model_structure(int8, model):
    out, info = int8
    m = onnx.load(str(out))
    fp = onnx.load(str(model))
    contract = StreamContract.from_onnx(m)
    assert contract.states == StreamContract.from_onnx(fp).states  # stream metadata kept
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["cosyedge.precision"] == "int8" and meta["cosyedge.parent_sha256"] == sha256_file(model)

    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    fp_inits = {t.name: numpy_helper.to_array(t) for t in fp.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    consumers = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    kept = float_nodes(fp, contract.input, contract.output)
    # the boundary convs, the declared float-only projection and, with long-window features, /lw_analysis, with the
    # pitch comb its framing convs (the polyphase split reads the audio input through one channel, the taps copy it)
    assert set(kept) == set(REF_NET.float_convs) == (set(BOUNDARY_CONVS) | set(DECLARED_FLOAT)
                                                     | ({LW_ANALYSIS_CONV} if REF_NET.lw_window else set())
                                                     | (set(PC_FRAMES_CONVS) if REF_NET.pitch_comb else set()))
    assert info["excluded_nodes"] == kept
    quantized = [w for w in weighted_nodes(fp) if w.name not in kept]
    assert [w.name for w in quantized] == REF_NET.int8_convs  # every conv of the graph but the float ones above
    assert info["quantized_nodes"] == sorted(REF_NET.int8_convs)
    nodes = {n.name: n for n in m.graph.node}
    n_pairs = 0
    for w in quantized:
        conv = nodes[w.name]
        # weight: int8 initializer -> per-channel DQ on axis 0 (output channels) with zero point 0
        wdq = producer[conv.input[1]]
        assert wdq.op_type == "DequantizeLinear"
        axis = {a.name: a.i for a in wdq.attribute}["axis"]
        wq, ws, wz = (inits[i] for i in wdq.input)
        assert axis == 0 and wq.dtype == np.int8 and ws.shape == (w.out_channels,)
        assert wz.dtype == np.int8 and not wz.any()
        w32 = fp_inits[w.weight]
        assert np.all(np.abs(wq.astype(np.float32) * ws[:, None, None] - w32) <= ws[:, None, None] / 2 + 1e-7)
        assert np.abs(wq).max() == 127
        # bias stays float, unchanged
        if len(conv.input) > 2:
            np.testing.assert_array_equal(inits[conv.input[2]], fp_inits[conv.input[2]])
            assert inits[conv.input[2]].dtype == np.float32
        # activation: DQ(Q(x)) with a scalar scale = amax / 127, zero point 0
        adq = producer[conv.input[0]]
        q = producer[adq.input[0]]
        assert adq.op_type == "DequantizeLinear" and q.op_type == "QuantizeLinear"
        assert inits[q.input[1]].shape == () and inits[q.input[2]].dtype == np.int8 and inits[q.input[2]] == 0
        assert q.input[0] == w.data
        n_pairs += 1
    assert n_pairs == len(REF_NET.int8_convs) and info["qdq_pairs"] == _qdq_pairs(model, REF_NET.int8_convs)

    # exactly one Q/DQ on each state Concat feeding a quantized conv; the state Slice reads the float Concat
    concats = [n for n in m.graph.node if n.op_type == "Concat" and any(i.startswith("state_in.") for i in n.input)]
    assert sorted(i for cat in concats for i in cat.input if i.startswith("state_in.")) == REF_NET.state_inputs
    for cat in concats:
        users = consumers[cat.output[0]]
        qs = [u for u in users if u.op_type == "QuantizeLinear"]
        feeds_kept = any(u.name in kept for u in users)
        assert len(qs) == (0 if feeds_kept else 1), cat.name
        assert any(u.op_type == "Slice" for u in users)
        if qs:
            assert {u.op_type for u in users} == {"QuantizeLinear", "Slice"}
    # no Q/DQ around the kept convs: float weight initializer, float data input
    for name in kept:
        assert nodes[name].input[1] in inits and inits[nodes[name].input[1]].dtype == np.float32
        assert nodes[name].input[0] not in producer or producer[nodes[name].input[0]].op_type != "DequantizeLinear"


def test_int8_streaming_accuracy_vs_fp32(int8, model):
    out, _ = int8
    noisy, clean = fx.eval_pair()
    y32 = _stream(model, noisy)
    y8 = _stream(out, noisy)
    snr = snr_db(y32, y8)
    print(f"INT8 vs FP32 streaming output SNR: {snr:.2f} dB")
    assert snr >= 30.0
    # a 100 ms chunk streams the same INT8 model to the same output, up to rare one-step rounding flips
    # where a value sits on a quantization boundary (accumulation order differs with the chunk length)
    y8_big = _stream(out, noisy, chunk=1600)
    snr_chunks = snr_db(y8, y8_big)
    print(f"INT8 10 ms vs 100 ms chunks: {snr_chunks:.1f} dB")
    assert snr_chunks >= 45.0 and snr_db(y32, y8_big) >= 30.0
    pesq = pytest.importorskip("pesq")
    p32 = pesq.pesq(16000, clean, y32, "wb")
    p8 = pesq.pesq(16000, clean, y8, "wb")
    print(f"PESQ-WB FP32 {p32:.3f}, INT8 {p8:.3f}, drop {p32 - p8:.3f}")
    assert p32 - p8 <= 0.1


def test_exclude_keeps_node_in_float(work, model, calib_set):
    out = work / "excl.int8.onnx"
    info = int8_onnx(model, out, calib=calib_set.folder, exclude=["/blocks.2/proj/Conv"])
    assert info["excluded_nodes"]["/blocks.2/proj/Conv"] == "excluded by the user"
    assert info["qdq_pairs"] == _qdq_pairs(model, set(REF_NET.int8_convs) - {"/blocks.2/proj/Conv"})
    assert sorted(info["quantized_nodes"]) == sorted(set(REF_NET.int8_convs) - {"/blocks.2/proj/Conv"})
    m = onnx.load(str(out))
    conv = next(n for n in m.graph.node if n.name == "/blocks.2/proj/Conv")
    inits = {t.name: t for t in m.graph.initializer}
    assert conv.input[1] in inits and inits[conv.input[1]].data_type == onnx.TensorProto.FLOAT
    fp_conv = next(n for n in onnx.load(str(model)).graph.node if n.name == "/blocks.2/proj/Conv")
    assert conv.input[0] == fp_conv.input[0]  # the float tensor tanh(a) * sigmoid(b), no DQ


# ------------------------------------------------------------------------------------ amax cache + TRT
@pytest.mark.slow
def test_amax_cache_reused_and_recomputed(work, model, calib_set, recordings, log_lines, monkeypatch):
    calls = []
    real = cal.collect_amax
    monkeypatch.setattr(cal, "collect_amax", lambda *a, **k: calls.append(1) or real(*a, **k))
    d = work / "cache"
    shutil.copytree(calib_set.folder, d, ignore=shutil.ignore_patterns("*.amax.json", "*.cache"))
    s = load_calibration_set(d)
    p = cal.calibrate(model, s)
    assert len(calls) == 1 and p == d / "reference.amax.json"
    data = json.loads(p.read_text())
    assert data["model"]["sha256"] == sha256_file(model)
    assert data["calibration"]["manifest_sha256"] == sha256_file(d / "manifest.json") == s.sha256
    amax, mx = data["amax"], data["max"]
    assert set(amax) == set(cal_tensors(model))
    assert all(0 < amax[t] <= mx[t] * (1 + 1e-6) for t in amax)

    assert cal.calibrate(model, s) == p and len(calls) == 1
    assert any("reused" in ln for ln in log_lines)

    # another model (one bias changed): recomputed, keyed by the new hash
    m = onnx.load(str(model))
    b = next(t for t in m.graph.initializer if t.name == "out.bias")
    arr = numpy_helper.to_array(b).copy()
    arr[0] += 0.01
    b.CopyFrom(numpy_helper.from_array(arr, "out.bias"))
    other = work / "other" / "reference.stream.onnx"
    other.parent.mkdir(exist_ok=True)
    onnx.save(m, str(other))
    cal.calibrate(other, s)
    assert len(calls) == 2 and any("model sha256 changed" in ln for ln in log_lines)
    assert json.loads(p.read_text())["model"]["sha256"] == sha256_file(other)

    # another calibration set (different seed subset): recomputed
    rec, _ = recordings
    s2 = make_calibration_set(d, from_dir=rec, count=20, seed=1)
    assert s2.sha256 != s.sha256
    cal.calibrate(other, s2)
    assert len(calls) == 3 and any("calibration manifest sha256 changed" in ln for ln in log_lines)
    assert json.loads(p.read_text())["calibration"]["manifest_sha256"] == s2.sha256


def cal_tensors(model):
    from cosyedge.precision.qdq import activation_tensors, calibration_tensors

    m = onnx.load(str(model))
    acts, every = activation_tensors(m), calibration_tensors(m)
    conv_outputs = [n.output[0] for n in m.graph.node if n.op_type == "Conv"]
    assert len(conv_outputs) == len(REF_NET.conv_nodes)
    assert every[:len(acts)] == acts and sorted(every[len(acts):]) == sorted(conv_outputs)  # + the Conv outputs
    return every


def test_trt_calibration_cache_format(int8, calib_set, tmp_path):
    _, info = int8
    amax = json.loads(open(info["amax_path"]).read())["amax"]
    header, back = cal.read_trt_cache(info["trt_calibration_cache"])
    assert header.startswith("TRT-") and header.endswith("-EntropyCalibration2")
    for t, a in amax.items():
        assert back[t] == pytest.approx(a, rel=1e-6)
    # the inputs of each state Concat carry the Concat output's amax (TensorRT shares the scale)
    extra = set(back) - set(amax)
    assert set(REF_NET.state_inputs) <= extra
    # the audio input: an alias of the analysis Concat, or (with the pitch comb, whose polyphase conv reads it
    # directly) calibrated itself
    assert "audio" in (set(amax) if REF_NET.pitch_comb else extra)
    b = REF_NET.n_blocks - 1  # the last block: its input is the previous block's output
    cat = f"/blocks.{b}/conv/conv/Conv/state_concat_output"
    assert back[f"state_in.{REF_NET.block_state(b):02d}"] == pytest.approx(amax[cat], rel=1e-6)
    concat = next(n for n in onnx.load(str(REFERENCE_STREAM_ONNX)).graph.node if n.output[0] == cat)
    block_in = next(i for i in concat.input if not i.startswith("state_in."))  # block b - 1's residual sum
    assert block_in.startswith(f"/blocks.{b - 1}/")
    assert back[block_in] == pytest.approx(amax[cat], rel=1e-6)
    p = cal.write_trt_cache(tmp_path / "c.cache", {"x": 127.0, "y:1": 2.0 * 127}, trt_version="8.6.1")
    assert p.read_text().splitlines() == ["TRT-8601-EntropyCalibration2", "x: 3f800000", "y:1: 40000000"]
    cal.write_trt_cache(p, {"x": 1.0}, trt_version="10.3.0")
    assert p.read_text().splitlines()[0] == "TRT-100300-EntropyCalibration2"
    with pytest.raises(UsageError):
        cal.trt_version_number("ten")


# ------------------------------------------------------------------------------------ ConvTranspose axis
def test_conv_transpose_weights_use_axis_1(tmp_path):
    import onnx_graphsurgeon as gs

    from cosyedge.precision import qdq

    rng = np.random.default_rng(0)
    x = gs.Variable("x", np.float32, (1, 4, 50))
    w1 = gs.Constant("w1", (rng.standard_normal((8, 4, 3)) * np.linspace(0.1, 2, 8)[:, None, None]).astype(np.float32))
    w2 = gs.Constant("w2", (rng.standard_normal((8, 6, 1)) * np.linspace(0.1, 2, 6)[None, :, None]).astype(np.float32))
    h = gs.Variable("h", np.float32)
    y = gs.Variable("y", np.float32, (1, 6, 48))
    g = gs.Graph(nodes=[gs.Node("Conv", "conv", inputs=[x, w1], outputs=[h]),
                        gs.Node("ConvTranspose", "deconv", inputs=[h, w2], outputs=[y])],
                 inputs=[x], outputs=[y], opset=17)
    fp = gs.export_onnx(g)
    nodes = {w.name: w for w in qdq.weighted_nodes(fp)}
    assert (nodes["conv"].axis, nodes["conv"].out_channels) == (0, 8)
    assert (nodes["deconv"].axis, nodes["deconv"].in_channels, nodes["deconv"].out_channels) == (1, 8, 6)
    xin = rng.standard_normal((1, 4, 50)).astype(np.float32)
    href = ort.InferenceSession(fp.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xin})[0]
    amax = {"x": float(np.abs(xin).max())}
    # h is internal: take its amax (max |h|) from a run of the first conv alone
    g1 = gs.import_onnx(fp)
    g1.outputs = [g1.tensors()["h"].to_variable(dtype=np.float32)]
    amax["h"] = float(np.abs(ort.InferenceSession(gs.export_onnx(g1.cleanup()).SerializeToString(),
                                                  providers=["CPUExecutionProvider"]).run(None, {"x": xin})[0]).max())
    report = g.insert_qdq(amax, list(nodes.values()))
    g.cleanup().toposort()
    assert report["weights"] == {"conv": 0, "deconv": 1} and report["qdq_pairs"] == 4
    m = gs.export_onnx(g)
    dq = {n.name: n for n in m.graph.node if n.op_type == "DequantizeLinear"}
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert inits[dq["deconv/weight_DequantizeLinear"].input[1]].shape == (6,)
    assert {a.name: a.i for a in dq["deconv/weight_DequantizeLinear"].attribute}["axis"] == 1
    y8 = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xin})[0]
    assert snr_db(href, y8) > 30.0


# ---------------------------------------------------------------------------------------- CLI bad input
def test_cli_int8_end_to_end(work, model, calib_set, capsys):
    out = work / "cli.int8.onnx"
    rc = main(["calib", "int8", "--onnx", str(model), "--calib", str(calib_set.folder), "-o", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and lines[-1] == str(out) and f"{_qdq_pairs(model, REF_NET.int8_convs)} Q/DQ pairs" in lines[-2]
    assert main(["calib", "amax", "--onnx", str(model), "--calib", str(calib_set.folder)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(calib_set.folder / "reference.amax.json")


def test_cli_model_without_metadata(work, calib_set, capsys):
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    del m.metadata_props[:]
    bare = work / "bare.onnx"
    onnx.save(m, str(bare))
    out = work / "bare.int8.onnx"
    rc = main(["calib", "int8", "--onnx", str(bare), "--calib", str(calib_set.folder), "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1
    assert err[0].startswith(f"[!] {bare} has no cosyedge metadata 'cosyedge.input'")
    assert not out.exists()


def test_cli_amax_cache_from_another_model(work, model, calib_set, capsys):
    foreign = work / "foreign.amax.json"
    data = json.loads((calib_set.folder / "reference.amax.json").read_text()) if (
        calib_set.folder / "reference.amax.json").exists() else None
    if data is None:
        data = json.loads(cal.calibrate(model, calib_set).read_text())
    assert data["model"]["content_sha256"] == model_content_sha256(model)  # recorded with the file hash
    data["model"]["sha256"] = "0" * 64
    data["model"]["content_sha256"] = "1" * 64  # another model: another graph or weights too
    data["model"]["name"] = "someone-else"
    foreign.write_text(json.dumps(data))
    out = work / "foreign.int8.onnx"
    out.write_bytes(b"previous artifact")
    rc = main(["calib", "int8", "--onnx", str(model), "--amax", str(foreign), "-o", str(out)])
    line = refused(rc, capsys.readouterr().err, 3)
    assert f"amax cache {foreign} was calibrated for another model" in line and f"not {model}" in line
    assert out.read_bytes() == b"previous artifact"  # nothing half-written, nothing lost


@pytest.mark.parametrize("args, code, text", [
    (["--exclude", "/no/such/Conv"], 2, "--exclude '/no/such/Conv': no node of that name"),
    (["--exclude", "/blocks.0/Add"], 2, "--exclude '/blocks.0/Add' is not a quantizable op"),
    (["--calib", "{work}/nowhere"], 3, "calibration folder {work}/nowhere does not exist"),  # a missing file
])
def test_cli_bad_arguments(work, model, calib_set, capsys, args, code, text):
    args = [a.replace("{work}", str(work)) for a in args]
    if "--calib" not in args:
        args += ["--calib", str(calib_set.folder)]
    out = work / "bad.int8.onnx"
    rc = main(["calib", "int8", "--onnx", str(model), "-o", str(out)] + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == code and len(err) == 1 and err[0].startswith("[!] " + text.replace("{work}", str(work)))
    assert not out.exists()


def test_cli_make_bad_arguments(tmp_path, capsys):
    rc = main(["calib", "make", "--from", str(tmp_path / "none"), "--out", str(tmp_path / "c")])
    assert rc == 2
    assert f"--from {tmp_path / 'none'}: not a folder of recordings" in one_error_line(capsys)
    assert main(["calib", "make", "--count", "0", "--out", str(tmp_path / "c")]) == 2
    assert "'--count': 0 is not in the range 1<=x<=100000" in capsys.readouterr().err.strip()
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_model_declared_float_nodes(tmp_path):
    """``cosyedge.int8_keep_float`` in the ONNX metadata keeps those nodes in float like --exclude; the
    bundled model declares its log-feature projection; bad metadata is a one-line ArtifactError."""
    import onnx

    from cosyedge.errors import ArtifactError
    from cosyedge.precision.qdq import KEEP_FLOAT_KEY, declared_float_nodes, float_nodes

    ref = onnx.load(str(REFERENCE_STREAM_ONNX))
    assert declared_float_nodes(ref) == ["/inp/Conv"]
    kept = float_nodes(ref, "audio", "enhanced")
    assert kept["/inp/Conv"].startswith("declared by the model")
    for p in ref.metadata_props:
        if p.key == KEEP_FLOAT_KEY:
            p.value = "[1, 2]"
    with pytest.raises(ArtifactError, match=KEEP_FLOAT_KEY):
        float_nodes(ref, "audio", "enhanced")
    stripped = onnx.load(str(REFERENCE_STREAM_ONNX))
    keep = [p for p in stripped.metadata_props if p.key != KEEP_FLOAT_KEY]
    del stripped.metadata_props[:]
    stripped.metadata_props.extend(keep)
    assert "/inp/Conv" not in float_nodes(stripped, "audio", "enhanced")


def test_calib_make_in_place_does_not_count_the_previous_set(tmp_path):
    """``calib make --from D --out D`` twice: the second run must not take the first set's audio/ as input."""
    d = fx.write_recordings(tmp_path / "rec", count=20)
    assert main(["calib", "make", "--from", str(d), "--out", str(d), "-q"]) == 0
    first = load_calibration_set(d)
    assert main(["calib", "make", "--from", str(d), "--out", str(d), "-q"]) == 0
    second = load_calibration_set(d)
    assert len(first.files) == len(second.files) == 20
    assert not any(f["source"].startswith("audio/") for f in second.manifest["files"])
    # nothing of the set itself (manifest, amax/calibration caches) is counted as an unreadable recording,
    # so the manifest, and the hash that keys the amax cache, stays the same
    (d / "reference.amax.json").write_text("{}")
    (d / "reference.calibration.cache").write_text("x")
    assert main(["calib", "make", "--from", str(d), "--out", str(d), "-q"]) == 0
    third = load_calibration_set(d)
    assert third.manifest["skipped"]["unreadable"] == 0 and third.sha256 == second.sha256


@pytest.mark.parametrize("weight,bias,copy", [
    (np.eye(4, dtype=np.float32)[:, :, None], None, True),  # 1x1 identity: a copy
    (np.eye(4, dtype=np.float32)[:, :, None], np.zeros(4, np.float32), True),  # zero bias: still a copy
    (np.eye(4, dtype=np.float32)[:, :, None], np.full(4, 0.1, np.float32), False),  # a bias adds something
    (2.0 * np.eye(4, dtype=np.float32)[:, :, None], None, False),  # a gain of 2 is a weight, not a copy
    (np.ones((4, 4, 1), np.float32), None, False),  # a sum of 4 inputs
])
def test_float_nodes_keeps_copy_convs_in_float(weight, bias, copy):
    """A fixed conv with one-hot weights (one 1.0 per output channel, no bias) only moves samples: INT8 keeps it
    in float with the reason 'copy (one-hot weights)'; any other weight or a bias is quantized as usual."""
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.full((4, 4, 1), 0.5, np.float32), "w0")]
    inputs = ["h", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        inputs.append("b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w0"], ["h"], name="first", pads=[0, 0]),  # reads the audio: float anyway
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Conv", ["r", *inputs[1:]], ["c"], name="probe"),
         helper.make_node("Relu", ["c"], ["c2"], name="relu2"),
         helper.make_node("Conv", ["c2", "w0"], ["y"], name="last")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], inits)
    reasons = float_nodes(helper.make_model(graph), "x", "y")
    assert reasons.get("probe") == ("copy (one-hot weights)" if copy else None)
    assert reasons["first"] == "first conv (reads the audio input)" and reasons["last"].startswith("last conv")
