"""cosyedge.compare: streamed teacher-forced / free-running comparison on real speech, mark-all bisection."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from cosyedge.compare import compare, load_compare_model
from cosyedge.compare.bisect import bisect_layers
from cosyedge.compare.core import ReferenceCache, snr_db
from cosyedge.compare.tolerances import SNR_CAP_DB, tolerance_for
from cosyedge.errors import UsageError
from tests.compare.conftest import QDQ_SCALE
from tests.reference_structure import reference_structure

CHUNK = 1600  # 100 ms


def test_identical_candidate_passes_with_exact_figures(ref_onnx, fp32_engine, utts):
    ref, cand = load_compare_model(ref_onnx), load_compare_model(fp32_engine)
    assert cand.label == "fp32" and cand.parent_sha256 == ref.model_sha256
    res = compare(ref, cand, utts, chunk=CHUNK)
    assert res["passed"] and res["failures"] == []
    for mode in ("teacher-forced", "free-running"):
        for entry in res["modes"][mode]["utterances"].values():
            assert set(entry["outputs"]) == {"enhanced", *reference_structure().state_outputs}
            for st in entry["outputs"].values():
                assert st["snr_db"] == SNR_CAP_DB and st["max_abs"] == 0.0
    audio = res["modes"]["free-running"]["utterances"]["demo-late-noisy"]["audio"]
    assert audio["against"] == "clean" and audio["si_snr_delta_db"] == 0.0
    if importlib.util.find_spec("pesq") is not None:  # the base install has no pesq: PESQ-WB is left out then
        assert audio["pesq_delta"] == 0.0 and 1.0 < audio["pesq_ref"] < 4.7



def test_noisy_only_utterances_gate_on_output_snr_not_on_a_self_score(ref_onnx, fp32_engine, drop_state, utts):
    """Without clean speech, SI-SNR/PESQ are scored against the reference output (a perfect self-score):
    an identical candidate must pass (it failed on a 150 dB vs ~105 dB SI-SNR 'drop'); a bad one still fails."""
    import dataclasses

    noisy_only = [dataclasses.replace(u, clean=None) for u in utts]
    ref = load_compare_model(ref_onnx)
    res = compare(ref, load_compare_model(fp32_engine), noisy_only, chunk=CHUNK, modes=("free-running",))
    audio = res["modes"]["free-running"]["utterances"]["demo-late-noisy"]["audio"]
    assert audio["against"] == "reference output" and audio["si_snr_cand_db"] > 90.0
    assert res["passed"] and res["failures"] == []
    bad = compare(ref, load_compare_model(drop_state), noisy_only, chunk=CHUNK, pesq=False, modes=("free-running",))
    assert not bad["passed"] and all("enhanced: SNR" in f for f in bad["failures"]), bad["failures"]


def test_teacher_forcing_feeds_real_recorded_states(ref_onnx, utts):
    """The states fed to the candidate are those the reference produced on real speech, never random."""
    ref = load_compare_model(ref_onnx)
    rec = ReferenceCache(ref, CHUNK).get(utts[0])
    first, later = rec.state_inputs[0], rec.state_inputs[5]
    assert all(not v.any() for v in first.values())  # zero state at stream start
    for s in ref.contract.states:  # chunk k is fed the state_out of chunk k-1
        np.testing.assert_array_equal(later[s.input][0], rec.outputs[s.output][4])
    assert any(np.abs(later[s.input]).max() > 1e-3 for s in ref.contract.states)


def test_fp16_within_default_tolerance(ref_onnx, engines, utts):
    from cosyedge.builders import build_engine

    cand = load_compare_model(build_engine(ref_onnx, backend="onnxruntime", out_dir=engines, precision="fp16"))
    res = compare(load_compare_model(ref_onnx), cand, utts, chunk=CHUNK, pesq=False)
    assert res["passed"], res["failures"]
    out = res["modes"]["teacher-forced"]["utterances"]["demo-late-noisy"]["outputs"]["enhanced"]
    assert 50.0 < out["snr_db"] < 120.0 and 0 < out["max_abs"] < tolerance_for("fp16").output_max_abs


def test_dropped_state_fails_and_names_the_states(ref_onnx, drop_state, utts):
    res = compare(load_compare_model(ref_onnx), load_compare_model(drop_state), utts, chunk=CHUNK, pesq=False)
    assert not res["passed"]
    tf = res["modes"]["teacher-forced"]["utterances"]["demo-late-noisy"]["outputs"]
    # a zero state against the real one: noise == signal -> exactly 0 dB
    assert tf["state_out.03"]["snr_db"] == pytest.approx(0.0, abs=1e-9)
    assert any("teacher-forced 'demo-late-noisy' state_out.03: state SNR 0.00 dB" in f for f in res["failures"])
    fr = res["modes"]["free-running"]["utterances"]["demo-late-noisy"]["outputs"]["enhanced"]
    assert fr["snr_db"] < 20.0
    assert any(f.startswith("free-running 'demo-late-noisy' enhanced: SNR") for f in res["failures"])


def test_swapped_states_fail_and_name_both_tensors(two_state, utts):
    ref_p, cand_p, (a, b) = two_state
    res = compare(load_compare_model(ref_p), load_compare_model(cand_p), utts, chunk=CHUNK, pesq=False)
    assert not res["passed"]
    named = " ".join(res["failures"])
    assert f"{a}: state SNR" in named and f"{b}: state SNR" in named
    tf = res["modes"]["teacher-forced"]["utterances"]["demo-late-noisy"]["outputs"]
    assert tf[a]["snr_db"] < 10.0 and tf[b]["snr_db"] < 10.0


def test_qdq_scale_x4_lowers_snr_and_bisection_names_its_tensor(int8_flat_engine, qdq_x4_flat, utts):
    good, bad = load_compare_model(int8_flat_engine), load_compare_model(qdq_x4_flat)
    assert bad.label == "int8"
    res = compare(good, bad, utts, chunk=CHUNK, pesq=False, modes=("teacher-forced",))
    out = res["modes"]["teacher-forced"]["utterances"]["demo-late-noisy"]["outputs"]["enhanced"]
    assert out["snr_db"] < 60.0  # visibly different from the build it was made from (check gates on this)
    bis = bisect_layers(good, bad, utts[0], chunk=CHUNK, seconds=1.0)
    jump = bis["first_jump"]
    assert jump is not None, bis["top_drops"][:3]
    # the first tensor whose error jumps is the output of the scaled Q/DQ pair's DequantizeLinear
    assert jump["op"] == "DequantizeLinear" and jump["node"].startswith(QDQ_SCALE.rsplit("/", 1)[0])
    assert jump["snr_in_db"] == SNR_CAP_DB and jump["snr_db"] < 40.0
    before = bis["tensors"][: bis["tensors"].index(jump)]
    assert before and all(r["snr_db"] == SNR_CAP_DB for r in before)


def test_bisection_int8_vs_fp32_starts_at_first_quantized_tensor(ref_onnx, int8_flat_engine, utts):
    bis = bisect_layers(load_compare_model(ref_onnx), load_compare_model(int8_flat_engine), utts[0], chunk=CHUNK,
                        seconds=0.5)
    assert bis["compared"] > 50 and bis["first_jump"] is not None
    assert bis["first_jump"]["drop_db"] >= 20.0 and bis["first_jump"]["snr_db"] < 40.0


def test_snr_db_definition():
    r = np.array([1.0, -1.0, 1.0, -1.0])
    assert snr_db(r, r) == SNR_CAP_DB
    assert snr_db(r, r * 0.9) == pytest.approx(20.0)
    assert snr_db(r, np.zeros(4)) == pytest.approx(0.0)
    assert np.isnan(snr_db(r, np.array([np.nan, 0, 0, 0])))


def test_incompatible_candidate_is_a_usage_error(ref_onnx, two_state, utts):
    with pytest.raises(UsageError, match="different inputs"):
        compare(load_compare_model(ref_onnx), load_compare_model(two_state[0]), utts, chunk=CHUNK)
