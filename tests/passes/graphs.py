"""Small generated graphs for the pass tests: one node pattern, run in ONNX Runtime at any batch."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def model(nodes: list, inputs: dict, outputs: list, inits: dict, opset: int = 18) -> onnx.ModelProto:
    """A ModelProto (outputs of unknown shape): ``inputs`` name -> dims (``"N"`` for the batch), ``inits`` name ->
    np.ndarray."""
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """Outputs of ``m`` on ``feeds`` (ONNX Runtime CPU, one thread, default graph optimisation)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def ops(m: onnx.ModelProto) -> list[str]:
    """Op types of ``m``'s nodes, in order."""
    return [n.op_type for n in m.graph.node]
