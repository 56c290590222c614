"""streamify's messages: the proof log in samples and seconds, feature inputs ticking in frames, an export
that fixed its time length, a model without metadata naming every missing value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers.graphs import conv_onnx


def test_the_proof_log_says_samples_and_seconds(tmp_path, capsys):
    import re

    src = conv_onnx(tmp_path / "conv.onnx")
    assert main(["streamify", str(src), "-o", str(tmp_path / "c.stream.onnx"), "--sample-rate-hz", "16000",
                 "--hop-samples", "160"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"proved on (\d+) samples \((\d+\.\d\d) s\) at chunks of \[1, 160\] samples: max abs error", err)
    assert m and "ticks" not in err, err
    assert f"{int(m.group(1)) / 16000:.2f}" == m.group(2)


def test_tick_unit_of_feature_inputs_is_frames():
    from types import SimpleNamespace

    from cosyedge.surgery.proof import tick_unit, ticks_seconds

    feat = SimpleNamespace(stream_inputs=[SimpleNamespace(kind="features", name="feat_erb", frames_per_hop=1)],
                           hop_samples=480, sample_rate_hz=48000)
    assert tick_unit(feat) == "frames of 'feat_erb'" and tick_unit(feat, short=True) == "frames"
    assert ticks_seconds(feat, 250) == 2.5


def _baked_reshape_onnx(path: Path) -> Path:
    """x (1, 1, T) -> Reshape to a fixed (1, 100, 160) -> Relu -> Reshape to a fixed (1, 1, 16000): what tracing
    ``x.reshape(1, 100, 160)`` exports even with dynamic axes declared."""
    inits = [numpy_helper.from_array(np.array([1, 100, 160], np.int64), "s1"),
             numpy_helper.from_array(np.array([1, 1, 16000], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["f"], name="frames"),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s2"], ["y"], name="back")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "T"])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_streamify_an_export_that_fixed_its_time_length(tmp_path, capsys):
    fixed = conv_onnx(tmp_path / "fixed.onnx", length=16000)
    out = tmp_path / "o.onnx"
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    assert main(["streamify", str(fixed), "-o", str(out)] + sr) == 2
    line = one_error_line(capsys)
    assert f"{fixed}: the export fixed the time length (input 'x' is [1, 1, 16000]" in line
    assert "export with a dynamic time axis" in line and "--time-axis x=2" in line
    # told which axis is time, the fixed dim is made symbolic and the proof decides
    assert main(["streamify", str(fixed), "-o", str(out), "--time-axis", "x=2"] + sr) == 0
    err = capsys.readouterr().err  # one line names the repair the proof ran on (tests/surgery/test_refusal_reasons.py)
    assert "input 'x' had its time axis 2 fixed at 16000 by the export" in err
    assert "the proof ran on a repaired copy" in err and "made them symbolic" in err
    out.unlink()
    baked = _baked_reshape_onnx(tmp_path / "baked.onnx")
    assert main(["streamify", str(baked), "-o", str(out)] + sr) == 2
    line = one_error_line(capsys)
    assert f"{baked}: the export fixed the time length (Reshape node 'frames'" in line
    assert "export with a dynamic time axis" in line
    assert not out.exists()


def test_streamify_without_metadata_names_every_missing_value(tmp_path, capsys):
    src = conv_onnx(tmp_path / "conv.onnx")
    assert main(["streamify", str(src), "-o", str(tmp_path / "o.onnx")]) == 2
    line = one_error_line(capsys)
    assert f"{src} has no cosyedge metadata" in line and "--sample-rate-hz N" in line and "--hop-samples N" in line
    assert main(["streamify", str(src), "-o", str(tmp_path / "o.onnx"), "--hop-samples", "160"]) == 2
    line = one_error_line(capsys)
    assert f"{src} has no cosyedge metadata" in line and "--sample-rate-hz N" in line
    assert "--hop-samples" not in line
