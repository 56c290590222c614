"""A StreamPool tick of an ``ort_matmul`` INT8 model (``DynamicQuantizeMatMul`` GRU cells, one
activation scale per call) quantizes each stream's row from its own range, so no stream's output depends on the
others (:mod:`cosyedge.passes.dqmm_per_row`)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.passes.dqmm_per_row import per_row_dynamic_quant


def _dqmm_model(k: int = 16, n: int = 8, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "B"),
             numpy_helper.from_array(rng.uniform(0.001, 0.01, n).astype(np.float32), "bs"),
             numpy_helper.from_array(np.zeros(n, np.int8), "bzp"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")]
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "bs", "bzp", "bias"], ["Y"], name="dq",
                            domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["N", k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _run(model: onnx.ModelProto, a: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"A": a})[0]


def test_each_row_is_quantized_as_if_alone():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 16)).astype(np.float32)
    a[0] *= 1e-3                # a quiet row
    a[1] *= 30.0                # a loud one
    a[2] = 0.0                  # all zero: scale 1
    a[3] = np.abs(a[3])         # all positive: zero point 0
    a[4] = -np.abs(a[4])        # all negative: zero point 255
    model = _dqmm_model()
    alone = np.concatenate([_run(model, a[i:i + 1]) for i in range(len(a))])
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert per_row_dynamic_quant(rewritten) == 1
    assert not any(n.op_type == "DynamicQuantizeMatMul" for n in rewritten.graph.node)
    assert np.array_equal(_run(rewritten, a), alone)  # bit-identical to ORT's kernel on each row alone
    # the stored node at batch 6: one range for all rows, the quiet row is ruined
    batched = _run(model, a)
    err = np.abs(batched[0] - alone[0]).max() / np.abs(alone[0]).max()
    assert err > 1e-3, err


def test_a_nonzero_weight_zero_point_is_left_alone():
    model = _dqmm_model()
    model.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.ones(8, np.int8), "bzp"))
    assert per_row_dynamic_quant(model) == 0
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeMatMul"]


def _gru_stream(d):
    """The torch GRU test model (tests/precision/test_macs.py) exported and streamified into folder ``d``."""
    torch = pytest.importorskip("torch")
    from cosyedge.surgery.streamify import streamify
    from tests.precision.test_macs import HOP, _BigGru

    full, src = d / "gru.onnx", d / "gru.stream.onnx"
    torch.onnx.export(_BigGru().eval(), (torch.zeros(1, 1, 16 * HOP),), str(full), input_names=["audio"],
                      output_names=["enhanced"], dynamo=False, opset_version=17,
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}})
    streamify(full, src, sample_rate_hz=16000, hop_samples=HOP)
    return src


@pytest.fixture(scope="module")
def gru_int8(tmp_path_factory):
    """The torch GRU test model (tests/precision/test_macs.py) quantized with placement ort_matmul: its
    one-step GRU becomes a cell of two DynamicQuantizeMatMul, and its two other weighted layers one each (dynamic
    activations, the placement's default)."""
    from cosyedge.precision.int8 import int8_onnx
    from tests.precision import int8_fixtures as fx

    d = tmp_path_factory.mktemp("dqmm")
    src = _gru_stream(d)
    out = d / "gru.int8.onnx"
    int8_onnx(src, out, calib=fx.small_calibration_set(d), placement="ort_matmul")
    from cosyedge.precision.bodies import iter_graphs

    graphs = list(iter_graphs(onnx.load(str(out)).graph))  # the cell runs in the Scan over hops
    assert sum(n.op_type == "DynamicQuantizeMatMul" for g in graphs for n in g.node) == 4
    return out


def _pool(model, streams, max_streams=4):
    from cosyedge.runtime.pool import StreamPool

    hop = 160
    n = min(len(s) for s in streams) // hop * hop
    with StreamPool(model, max_streams=max_streams) as p:
        ids = [p.join() for _ in streams]
        outs = {i: [] for i in ids}
        for k in range(0, n, hop):
            for i, s in zip(ids, streams):
                p.submit(i, s[k:k + hop])
            for i, y in p.tick().items():
                outs[i].append(y)
        rewritten = dict(p.rewritten)
    return [np.concatenate(outs[i]) for i in ids], rewritten


def test_a_quiet_stream_beside_a_loud_one_equals_it_alone(gru_int8, monkeypatch):
    from tests.precision import int8_fixtures as fx

    x = fx._read(fx.DEMO_NOISY)[: 16000 * 4]
    quiet, loud = 0.01 * x, 3.0 * np.roll(x, 12345)
    (alone,), done = _pool(gru_int8, [quiet])
    assert done.get("dqmm_per_row") == 4  # the GRU cell's two and the two other layers'
    (beside, _), _ = _pool(gru_int8, [quiet, loud])
    assert np.array_equal(beside, alone)
    # without the rewrite the loud stream's range is the quiet one's too (the audit's 54.9 dB on NSNet2)
    import cosyedge.passes.dqmm_per_row as mod

    monkeypatch.setattr(mod, "per_row_dynamic_quant", lambda model: 0)
    (mixed, _), _ = _pool(gru_int8, [quiet, loud])
    snr = 10 * np.log10((alone.astype(np.float64) ** 2).sum() / ((mixed - alone).astype(np.float64) ** 2).sum())
    assert snr < 80.0, snr  # measured 53.9 dB


def test_the_int8_fallback_weighs_the_gru_cells_too(tmp_path):
    """``--int8-min-snr`` with placement ort_matmul: the one-step GRU (a DynamicQuantizeMatMul cell, no amax) is a
    fallback candidate like the convs: measured alone, and kept float when the target needs it."""
    from cosyedge.precision.int8 import int8_onnx
    from tests.precision import int8_fixtures as fx

    src = _gru_stream(tmp_path)
    grus = [n.name for n in onnx.load(str(src)).graph.node if n.op_type == "GRU"]
    assert len(grus) == 1
    info = int8_onnx(src, tmp_path / "gru.int8.onnx", calib=fx.small_calibration_set(tmp_path),
                     placement="ort_matmul", min_snr_db=200.0)
    fb = info["fallback"]
    assert grus[0] in fb["sensitivity"] and np.isfinite(fb["sensitivity"][grus[0]])
    assert not fb["met"] and fb["final_snr_db"] > fb["initial_snr_db"]
    n_dqmm = sum(n.op_type == "DynamicQuantizeMatMul" for n in onnx.load(str(tmp_path / "gru.int8.onnx")).graph.node)
    floated = {k["name"] for k in fb["kept_float"]}
    # every layer but one is float at an unreachable target: the GRU is either float (no cell kernels left) or the
    # single least sensitive layer kept INT8 (its two cell kernels)
    # (a non-GRU layer kept INT8 is one DynamicQuantizeMatMul: dynamic activations, the default)
    assert (grus[0] in floated and n_dqmm in (0, 1)) or (grus[0] not in floated and n_dqmm == 2)
    if grus[0] in floated:
        assert info["excluded_nodes"][grus[0]].startswith("int8 fallback: ")
