"""A time axis given with ``--time-axis`` is honoured: where the export fixed it, streamify makes it symbolic as asked
and says so in an info line naming the axis as given, without the advice to re-export with a dynamic time axis (before:
a warning that it was "made symbolic", then "re-export with a dynamic time axis", the axis just given; and for an (N, T)
waveform the line named axis 2 of the (N, 1, T) copy). Without ``--time-axis`` the refusal of a fixed length offers
it. An (N, T) waveform whose output length the export fixed with the input's is streamed as a waveform out as well.
Counts in the summary line read "1 state", "1 sample" (no "1 states"). Torch-free: the model is built with onnx.helper.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.cli_errors import refused


def _fixed_waveform_conv(path: Path, length: int = 16000) -> Path:
    """audio (1, length) -> Unsqueeze (1, 1, length) -> left pad 2 -> Conv k=3 -> Squeeze -> enhanced (1, length): a
    causal filter exported at a fixed length (no dynamic axis)."""
    w = numpy_helper.from_array(np.array([[[0.5, -0.25, 0.75]]], np.float32), "w")
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    pads = numpy_helper.from_array(np.array([0, 0, 2, 0, 0, 0], np.int64), "pads")
    nodes = [helper.make_node("Unsqueeze", ["audio", "ax"], ["x3"], name="chan"),
             helper.make_node("Pad", ["x3", "pads"], ["xp"], name="pad"),
             helper.make_node("Conv", ["xp", "w"], ["y3"], name="conv"),
             helper.make_node("Squeeze", ["y3", "ax"], ["enhanced"], name="unchan")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, length])],
                              [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, [1, length])],
                              [w, ax, pads])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


SR = ["--sample-rate-hz", "16000", "--hop-samples", "160"]


def test_a_given_time_axis_is_made_symbolic_as_asked(tmp_path, cli):
    from cosyedge.artifacts import StreamContract

    src, out = _fixed_waveform_conv(tmp_path / "fixed.onnx"), tmp_path / "fixed.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, *SR, "--time-axis", "audio=1")
    assert rc == 0, err
    assert "[W]" not in err and "re-export" not in err, err
    line = next(x for x in err.splitlines() if "repaired copy" in x)
    assert line.startswith("[I] ") and "as --time-axis asked" in line, line
    assert "input 'audio' had its time axis 1 fixed at 16000 by the export (--time-axis audio=1)" in line, line
    assert "the stream graph runs at every chunk length" in line
    c = StreamContract.from_onnx(out)
    assert [o.kind for o in c.stream_outputs] == ["audio"]  # its fixed output is a waveform too, (N, 1, T)
    assert "[I] 1 state, total stride 1 sample, delay 0 samples (0 from the graph)" in err, err


def test_a_fixed_time_length_without_time_axis_offers_it(tmp_path, cli):
    src, out = _fixed_waveform_conv(tmp_path / "fixed.onnx"), tmp_path / "fixed.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, *SR)
    line = refused(rc, err, 2)
    assert "the export fixed the time length (input 'audio' is [1, 16000], no input has a dynamic axis)" in line
    assert line.endswith("or give its time axis (--time-axis audio=1) to stream it as exported (that axis is made "
                         "symbolic and the proof checks it)"), line
    assert not out.exists()
