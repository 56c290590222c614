"""streamify on a foreign graph that already streams (a fixed chunk in, a cache in, the next cache out) was refused
for its input without a time axis, suggesting ``--time-axis`` and never ``adopt``. When the graph's inputs pair with
its outputs as adopt pairs states (:func:`cosyedge.surgery.adopt.pairs.find_state_pairs`), the one refusal line says
the graph already streams and gives the ``cosyedge adopt`` command (exit 2, nothing written). A full-sequence graph
whose names happen to pair still streamifies."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def _graph(path, t, names):
    """enhanced = 0.5 * audio + 0.1 * cache; new_cache = audio (``names``: the cache's input and output names)."""
    cache_in, cache_out = names
    g = helper.make_graph(
        [helper.make_node("Mul", ["audio", "half"], ["a"]), helper.make_node("Mul", [cache_in, "tenth"], ["c"]),
         helper.make_node("Add", ["a", "c"], ["enhanced"]), helper.make_node("Identity", ["audio"], [cache_out])],
        "g",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 1, t]),
         helper.make_tensor_value_info(cache_in, TensorProto.FLOAT, ["N", 1, t])],
        [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["N", 1, t]),
         helper.make_tensor_value_info(cache_out, TensorProto.FLOAT, ["N", 1, t])],
        [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("tenth", TensorProto.FLOAT, [],
                                                                                         [0.1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_graph_that_already_streams_is_pointed_to_adopt(cli, tmp_path):
    src = _graph(tmp_path / "streaming.onnx", 160, ("cache", "new_cache"))
    out = tmp_path / "s.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 160)
    assert rc == 2 and err.count("[!]") == 1 and "Traceback" not in err, err
    line = err.splitlines()[-1]
    assert line.startswith(f"[!] {src} looks like a graph that already streams: its input cache pairs with output "
                           "new_cache"), line
    assert f"adopt this one instead: cosyedge adopt {src} -o {out} --sample-rate-hz 16000 --hop-samples 160" in line
    assert "(streamify's refusal: " in line and line.count(str(src)) == 2  # the reason is kept, without the path
    assert not out.exists()


def test_a_full_sequence_graph_whose_names_pair_still_streamifies(cli, tmp_path):
    src = _graph(tmp_path / "full.onnx", "T", ("x_in", "x_out"))
    out = tmp_path / "full.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", 16000, "--hop-samples", 160)
    assert rc == 0 and out.is_file(), err
    assert "already streams" not in err
