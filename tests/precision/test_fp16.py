"""FP16 conversion of the bundled reference model: accuracy on real speech, FP32 I/O and states, scans."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.audio import load_audio, to_model_input
from cosyedge.errors import AccuracyError, ArtifactError, UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.fp16 import (
    PRECISION_KEY,
    TARGET_SNR_DB,
    fp16_model,
    fp16_onnx,
    output_snr_db,
    scan_nonfinite,
)
from tests.helpers import models
from tests.precision.int8_fixtures import LIBRIVOX
from tests.reference_structure import PC_FRAMES_CONV, PC_POLY_CONV, reference_structure

REF = REFERENCE_STREAM_ONNX


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    x, sr = load_audio(LIBRIVOX)
    return to_model_input(x, sr, 16000)


@pytest.fixture(scope="module")
def fp16(tmp_path_factory, speech):
    out = tmp_path_factory.mktemp("fp16") / "reference.fp16.onnx"
    result = fp16_onnx(REF, out, speech=speech)
    return out, result


def test_snr_vs_fp32_on_real_speech(fp16, speech):
    path, result = fp16
    snr = output_snr_db(REF, path, speech)  # the whole LibriVox recording, chunk = one hop
    assert snr >= TARGET_SNR_DB, snr
    assert np.isfinite(snr) and snr < 200  # the model really changed (not a copy of the FP32 graph)
    assert result["snr_db_vs_fp32"] >= TARGET_SNR_DB
    # a larger chunk gives the same output up to FP16 noise
    assert output_snr_db(REF, path, speech[:16000], chunk_samples=1600) >= TARGET_SNR_DB


def test_fp32_io_states_and_fp16_compute(fp16):
    path, _ = fp16
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert {a.type for a in sess.get_inputs()} == {"tensor(float)"}
    assert {a.type for a in sess.get_outputs()} == {"tensor(float)"}
    m = onnx.load(str(path))
    inits = {t.name: t.data_type for t in m.graph.initializer}
    # estimator weights are FP16; the analysis (1-channel first conv) and synthesis weights stay FP32
    assert inits["blocks.0.conv.conv.weight"] == onnx.TensorProto.FLOAT16
    assert inits["out.weight"] == onnx.TensorProto.FLOAT16
    assert inits["analysis.conv.weight"] == onnx.TensorProto.FLOAT
    assert inits["synthesis.conv.conv.weight"] == onnx.TensorProto.FLOAT
    # the stream contract is preserved, precision recorded
    assert StreamContract.from_onnx(path) == StreamContract.from_onnx(REF)
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta[PRECISION_KEY] == "fp16"
    assert all(s.dtype == "float32" for s in StreamContract.from_onnx(path).states)


def test_fp32_plan_keeps_overflow_prone_chain_and_boundary_convs(fp16):
    _, result = fp16
    plan = result["fp32_nodes"]
    nodes = onnx.load(str(REF)).graph.node
    producer = {o: n for n in nodes for o in n.output}
    logs = [n for n in nodes if n.op_type == "Log"]
    assert logs and all(plan[n.name] == "op Log" for n in logs)  # one per feature window
    for log in logs:
        eps = producer[log.input[0]]  # re^2 + im^2 + eps, computed in FP32
        power = producer[next(i for i in eps.input if i in producer)]
        assert plan[eps.name].startswith("input of") and plan[power.name].startswith("input of"), (eps.name, power.name)
        sub = next(n for n in nodes if log.output[0] in n.input)  # minus the feature mean
        assert plan[sub.name] == "after Log"
    if reference_structure().pitch_comb:  # the pitch search: ArgMax over the autocorrelation MatMul, in FP32
        argmax = next(n for n in nodes if n.op_type == "ArgMax")
        matmul = producer[argmax.input[0]]
        assert plan[argmax.name] == "op ArgMax" and matmul.op_type == "MatMul"
        assert plan[matmul.name] == "input of ArgMax"
        assert plan[producer[next(i for i in matmul.input if i in producer)].name] == "input of ArgMax"
    assert plan["/analysis/conv/Conv"] == "first conv"
    assert plan["/analysis/conv/Conv/state_concat"] == "first conv state concat"
    assert plan["/synthesis/conv/conv/Conv"] == "last conv"
    assert not any(k.startswith("/blocks.") for k in plan)  # the estimator runs in FP16
    if reference_structure().pitch_comb:  # the comb's framing: a polyphase first conv and a copy with its state
        assert plan[PC_POLY_CONV] == "first conv"
        assert plan[PC_FRAMES_CONV] == "copy conv"
        assert plan[PC_FRAMES_CONV + "/state_concat"] == "copy conv state concat"
        assert plan[PC_FRAMES_CONV + "/state_slice"] == "copy conv state slice"


def test_the_framing_state_carries_the_audio_exactly_in_fp16(fp16, speech):
    """The pitch comb's framing state holds past audio samples: the FP16 model carries them bit-exact (a copy conv
    stays FP32), every other state within FP16 rounding."""
    if not reference_structure().pitch_comb:
        pytest.skip("the bundled model has no pitch comb")
    path, _ = fp16
    contract = StreamContract.from_onnx(REF)
    k = reference_structure().state_nodes.index(PC_FRAMES_CONV)
    outs = []
    for model in (REF, path):
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        feeds = {s.input: s.zeros(1) for s in contract.states}
        for i in range(40):  # 40 chunks of real speech, states carried
            feeds[contract.input] = speech[None, None, 160 * (100 + i):160 * (101 + i)].astype(np.float32)
            res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            feeds.update({s.input: res[s.output] for s in contract.states})
        outs.append(feeds[contract.states[k].input])
    assert np.abs(outs[0]).max() > 0.01 and np.array_equal(outs[0], outs[1])


def test_every_output_finite_at_every_chunk_size(fp16):
    _, result = fp16
    rows = result["scan"]
    assert {(r["signal"], r["chunk_samples"]) for r in rows} == {
        (s, c) for s in ("speech", "silence", "full_scale") for c in (160, 480, 1600)}
    assert all(r["finite"] and not r["bad_outputs"] for r in rows)
    peaks = {r["signal"]: r["peak"] for r in rows}
    assert peaks["silence"] == 0.0 and peaks["speech"] > 0.05 and peaks["full_scale"] > 0.01


def test_round_trip_casts_are_stripped(tmp_path, speech):
    """With every node kept FP32, the result must equal FP32 exactly: the converter alone rounds the
    edges between FP32 nodes to FP16 and back (output SNR measured 53.6 dB with the 6-block reference,
    61.1 dB with the 10-block one)."""
    from onnxruntime.transformers import float16

    model = onnx.load(str(REF))
    contract = StreamContract.from_onnx(REF)
    names = [n.name for n in model.graph.node]
    m16, plan = fp16_model(model, contract, exclude=names)
    assert set(plan) == set(names)
    onnx.save(m16, str(tmp_path / "all_fp32.onnx"))
    x = speech[:8000]
    assert output_snr_db(REF, tmp_path / "all_fp32.onnx", x) == float("inf")
    raw = float16.convert_float_to_float16(onnx.load(str(REF)), keep_io_types=True, node_block_list=names)
    onnx.save(raw, str(tmp_path / "raw.onnx"))
    # control: the plain converter really inserts FP16 round trips that change the output (FP16 rounding
    # noise, far from the exact 'inf' above); the figure itself depends on the model, not on our code
    assert sum(n.op_type == "Cast" for n in raw.graph.node) > 0
    raw_snr = output_snr_db(REF, tmp_path / "raw.onnx", x)
    assert np.isfinite(raw_snr) and raw_snr < 100.0, raw_snr


def test_scan_finds_nan(tmp_path):
    path = models.make_nan_model(tmp_path / "nan.onnx")
    x = np.linspace(-0.5, 0.5, 400, dtype=np.float32)
    rows = scan_nonfinite(path, {"ramp": x}, chunk_multiples=(1, 3))
    assert [r["chunk_samples"] for r in rows] == [4, 12]
    assert all(not r["finite"] and r["bad_outputs"] == {models.OUTPUT: 0} for r in rows)
    with pytest.raises(AccuracyError, match=r"NaN/Inf in 'enhanced' on speech"):
        fp16_onnx(path, tmp_path / "nan.fp16.onnx")
    assert not (tmp_path / "nan.fp16.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.onnx"]  # no temp file left


def test_bad_inputs(tmp_path):
    with pytest.raises(UsageError, match=r"--exclude 'nope' is not a node"):
        fp16_onnx(REF, tmp_path / "x.onnx", exclude=["nope"], check=False)
    stateless = models.make_stateless_model(tmp_path / "stateless.onnx")
    with pytest.raises(ArtifactError, match="cosyedge streamify"):
        fp16_onnx(stateless, tmp_path / "y.onnx")
    bare = tmp_path / "bare.onnx"
    m = onnx.load(str(stateless))
    del m.metadata_props[:]
    onnx.save(m, str(bare))
    with pytest.raises(ArtifactError, match="no cosyedge metadata"):
        fp16_onnx(bare, tmp_path / "z.onnx")
    assert not any((tmp_path / n).exists() for n in ("x.onnx", "y.onnx", "z.onnx"))


def test_exclude_keeps_a_node_fp32():
    model = onnx.load(str(REF))
    contract = StreamContract.from_onnx(REF)
    m16, plan = fp16_model(model, contract, exclude=["/blocks.2/conv/conv/Conv"])
    assert plan["/blocks.2/conv/conv/Conv"] == "excluded"
    inits = {t.name: t.data_type for t in m16.graph.initializer}
    assert inits["blocks.2.conv.conv.weight"] == onnx.TensorProto.FLOAT
    assert inits["blocks.1.conv.conv.weight"] == onnx.TensorProto.FLOAT16
    assert len(model.graph.initializer) == len(onnx.load(str(REF)).graph.initializer)  # input not modified
