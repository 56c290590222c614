"""INT8 float fallback driven by measured sensitivity (``int8_onnx(min_snr_db=...)``,
``cosyedge build --int8 --int8-min-snr``), on the bundled reference model.

Calibration: 8 utterances cut from the bundled speech before 10 s of the demo (:mod:`tests.precision.int8_fixtures`);
held-out speech: the demo recording after 10 s (7.29 s), never calibrated on."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest

from cosyedge.cli.main import main
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.fallback import check_min_snr
from cosyedge.runtime import OrtStreamSession, stream_array
from tests.helpers.cli_errors import refused
from tests.precision import int8_fixtures as fx


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(calibration set, amax cache path, held-out clip) shared by the tests of this module."""
    from cosyedge.precision.calibset import make_calibration_set
    from cosyedge.precision.int8 import int8_onnx

    tmp = tmp_path_factory.mktemp("fallback")
    cs = make_calibration_set(tmp / "calib", count=8, seed=0, training_data=fx.BundledMixes())
    r = int8_onnx(REFERENCE_STREAM_ONNX, tmp / "plain.onnx", calib=cs)
    return cs, r["amax_path"], fx.eval_pair()[0], r


def _snr(path, x: np.ndarray) -> float:
    """SNR (dB) of ``path`` vs the FP32 reference over ``x``, both streamed in 1 s chunks."""
    with OrtStreamSession(REFERENCE_STREAM_ONNX, chunk_samples=16000) as s:
        ref = stream_array(s, x).astype(np.float64)
    with OrtStreamSession(path, chunk_samples=16000) as s:
        y = stream_array(s, x).astype(np.float64)
    return float(10 * np.log10((ref ** 2).sum() / ((y - ref) ** 2).sum()))


@pytest.mark.slow
def test_fallback_reaches_a_reachable_target_with_the_fewest_layers(small, tmp_path):
    from cosyedge.precision.int8 import int8_onnx

    cs, amax, hold, plain = small
    r = int8_onnx(REFERENCE_STREAM_ONNX, tmp_path / "fb.onnx", calib=cs, amax=amax, min_snr_db=43.0, holdout=[hold])
    f = r["fallback"]
    assert 40.0 < f["initial_snr_db"] < 43.0  # measured 41.4 dB with every layer INT8
    assert f["met"] and f["final_snr_db"] >= 43.0  # measured 43.5 dB
    kept = [k["name"] for k in f["kept_float"]]
    # measured: 4 depthwise convs taken out, most sensitive first, one put back by the backward pass
    assert len(kept) == 3 and len(f["requantized"]) == 1
    assert len(f["sensitivity"]) == len(plain["quantized_nodes"]) == 24
    taken = kept + [k["name"] for k in f["requantized"]]
    assert min(f["sensitivity"], key=f["sensitivity"].get) in taken
    assert all(f["sensitivity"][t] < 55.0 for t in taken)  # on the full demo: 44-48 dB alone, 1x1 convs 54-69 dB
    for k in kept:
        assert r["excluded_nodes"][k].startswith("int8 fallback:") and k not in r["quantized_nodes"]
    assert len(r["quantized_nodes"]) == 24 - 3
    assert f["quantized_mac_share"] == r["macs"]["share"] < plain["macs"]["share"]
    # the written model measures what the search said, independently
    assert abs(_snr(tmp_path / "fb.onnx", hold) - f["final_snr_db"]) < 0.05
    # and no layer kept float could go back to INT8: each one back drops below the target
    for k in kept:
        others = [n for n in kept if n != k]
        path = tmp_path / f"back{kept.index(k)}.onnx"
        int8_onnx(REFERENCE_STREAM_ONNX, path, calib=cs, amax=amax, exclude=others)
        assert _snr(path, hold) < 43.0


@pytest.mark.slow
def test_an_unreachable_target_warns_and_still_writes_the_model(small, tmp_path, caplog):
    from cosyedge.precision.int8 import int8_onnx

    cs, amax, hold, _ = small
    out = tmp_path / "fb.onnx"
    with caplog.at_level(logging.WARNING):
        r = int8_onnx(REFERENCE_STREAM_ONNX, out, calib=cs, amax=amax, min_snr_db=200.0, holdout=[hold])
    f = r["fallback"]
    assert not f["met"] and out.is_file()
    assert len(f["kept_float"]) == 23 and len(r["quantized_nodes"]) == 1  # one layer always stays INT8
    assert r["quantized_nodes"] == [max(f["sensitivity"], key=f["sensitivity"].get)]  # the least sensitive one
    lines = [rec.getMessage() for rec in caplog.records if "cannot be met" in rec.getMessage()]
    assert len(lines) == 1 and "200.0 dB" in lines[0] and f"{100 * r['macs']['share']:.0f} % of the MACs INT8" in lines[0]
    onnx.checker.check_model(str(out))
    assert 60.0 < _snr(out, hold) < 200.0


@pytest.mark.parametrize("bad", ["nan", "-1", "inf", "x"])
def test_a_bad_target_is_one_line(bad, capsys):
    with pytest.raises(UsageError, match="int8-min-snr"):
        check_min_snr(bad)
    rc = main(["build", "--int8", "--int8-min-snr", bad])
    assert "--int8-min-snr must be" in refused(rc, capsys.readouterr().err, 2)
    rc = main(["calib", "int8", "--min-snr", bad, "-o", "x.onnx"])
    assert "must be" in refused(rc, capsys.readouterr().err, 2)


def test_a_bad_target_is_refused_before_calibrating(tmp_path):
    from cosyedge.precision.int8 import int8_onnx

    with pytest.raises(UsageError, match=r"finite SNR >= 0 dB.*nan"):
        int8_onnx(REFERENCE_STREAM_ONNX, tmp_path / "x.onnx", calib=tmp_path / "nothing", min_snr_db=float("nan"))
    assert not (tmp_path / "x.onnx").exists()


def test_the_target_needs_int8(capsys):
    rc = main(["build", "--fp16", "--int8-min-snr", "42"])
    assert "--int8-min-snr is only used by --int8 builds" in refused(rc, capsys.readouterr().err, 2)
    assert check_min_snr(None) is None and check_min_snr("42") == 42.0
