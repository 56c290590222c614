"""``streamify --time-axis`` refusals, each one line (exit 2), nothing written:

* an input of rank 1 (``lengths`` (N,) beside ``audio`` (N, 1, T)) or 0 has no time axis to pick: the line says so,
  as adopt's does (before: "time must be one of axes 1..0");
* the same input given twice (``--time-axis audio=1 --time-axis audio=2``) is refused like adopt's duplicates
  (before: the last one won silently)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper
from tests.helpers.cli_errors import refused


def _audio_and(tmp_path, shape):
    """audio (N, 1, T) -> enhanced = 0.5 * audio, beside an input 'lengths' of ``shape`` (passed through)."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["audio", "half"], ["enhanced"]), helper.make_node("Identity", ["lengths"], ["n"])],
        "twoin",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 1, "T"]),
         helper.make_tensor_value_info("lengths", TensorProto.INT64, shape)],
        [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["N", 1, "T"]),
         helper.make_tensor_value_info("n", TensorProto.INT64, shape)],
        [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    p = tmp_path / "twoin.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


@pytest.mark.parametrize("shape, axis, rank_says", [(["N"], 0, "rank 1: its only axis is the batch"),
                                                     (["N"], 1, "rank 1: its only axis is the batch"),
                                                     ([], 0, "rank 0: a scalar")])
def test_time_axis_of_an_input_without_one(cli, tmp_path, shape, axis, rank_says):
    src = _audio_and(tmp_path, shape)
    out = tmp_path / "out.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 160,
                      "--time-axis", f"lengths={axis}")
    assert rc == 2 and err.count("[!]") == 1 and "Traceback" not in err, err
    line = err.splitlines()[-1]
    assert f"--time-axis lengths={axis}: input 'lengths' {shape} has no time axis to pick ({rank_says})" in line
    assert "axes 1..0" not in line and not out.exists()


def test_time_axis_given_twice_is_refused(cli, tmp_path):
    src = _audio_and(tmp_path, ["N"])
    out = tmp_path / "out.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 160,
                      "--time-axis", "audio=1", "--time-axis", "audio=2")
    assert "--time-axis audio is given twice (1 and 2)" in refused(rc, err, 2)
    assert not out.exists()
