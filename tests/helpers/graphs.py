"""Small full-sequence ONNX graphs written by hand (no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def conv_onnx(path: Path, length: int | str = "T") -> Path:
    """A full-sequence model x (N, 1, T) -> Pad(2, 0) -> Conv(k=3) -> y (N, 1, T) (causal; streams with one
    state), without cosyedge metadata. ``length`` an int fixes the time axis of the input and the output (an
    export without dynamic axes) and the batch at 1."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 1, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 0, 2, 0, 0, 0], np.int64), "pads")]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"], name="pad"),
             helper.make_node("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3])]
    batch = "N" if isinstance(length, str) else 1
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, length])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path
