"""Pass ``gru_cell``: a one-step ``GRU`` becomes its cell, two ``MatMul`` s and elementwise ops.

**GRU** with one time step (``seq_length`` 1, forward, default activations, no clip): written as its cell,
``gx = x W^T + Wb``, ``gh = h R^T + Rb`` (two ``MatMul`` + ``Add``, which ONNX Runtime fuses into ``Gemm``),
``z, r = sigmoid(gx_zr + gh_zr)``, ``n = tanh(gx_n + r * gh_n)`` (``linear_before_reset`` 1; with 0,
``n = tanh(gx_n + (r * h) Rn^T + Rbn)``), ``h' = n + z * (h - n)``. :func:`gru_cell`. In FP32 this is the same
arithmetic as ONNX Runtime's GRU kernel in another order; its point is that the two products become ordinary MatMuls
with a constant 2-D weight, which the INT8 paths (``com.microsoft.DynamicQuantizeMatMul``,
:mod:`cosyedge.precision.qdq_matmul`) can take.

Off by default in :class:`~cosyedge.runtime.ort.OrtStreamSession` (:data:`cosyedge.passes.SESSION_OPTIONAL`: in FP32
about 3 % slower per hop on DeepFilterNet3 than ONNX Runtime's GRU kernel); the INT8 ``ort_matmul`` build writes it
into the model (:data:`cosyedge.passes.MATMUL_FORM_PASSES`). Nodes valid at any batch N. DeepFilterNet3 over the whole
bundled recording stays >= 120 dB from the unrewritten graph (``tests/passes/test_einsum_and_gru_rewrites.py``).

Source: ONNX operator spec ``GRU`` (gate order z, r, h; ``linear_before_reset``), https://onnx.ai/onnx/operators/.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.passes.edit import copy_with, node_attrs, spliced
from cosyedge.passes.shapes import known_shapes


def gru_cell(model: Any, input_shapes: dict[str, list[int]]) -> tuple[Any, int]:
    """Rewrite one-step forward GRUs into their cell (two ``MatMul`` s and elementwise ops; see module docstring).
    Works on a copy.

    Only GRUs with constant float32 ``W`` (1, 3H, I), ``R`` (1, 3H, H), optional ``B`` (1, 6H), an ``initial_h``, ``layout`` 0, direction forward, default activations, no clip, and
    ``X`` of shape (1, N, I) at ``input_shapes`` are rewritten. Outputs ``Y`` (1, 1, N, H) and ``Y_h`` (1, N, H)
    keep their names. The nodes are valid at every batch size (``Reshape`` s with -1). A ``sequence_lens`` input
    (int32 (N,), 0 or 1 here: a streamified gate, e.g. NSNet2's) zeroes ``Y`` and ``Y_h`` of the streams where it
    is 0, as ONNX Runtime's GRU kernel does (measured; the graph around it restores the state).

    Args:
        model (onnx.ModelProto): The per-step model.
        input_shapes (dict[str, list[int]]): Concrete shape of every graph input.
    Returns:
        tuple[onnx.ModelProto, int]: The rewritten copy and the number of GRUs rewritten.
    Raises:
        onnx.shape_inference.InferenceError: shape inference fails (callers skip the rewrite).
    """
    import onnx
    from onnx import helper, numpy_helper

    m, g, inits, nodes = copy_with(model, "GRU")
    cands = []
    for idx, node in nodes:
        at = node_attrs(node)
        ins = list(node.input) + [""] * (6 - len(node.input))
        if (at.get("direction", b"forward") not in (b"forward", "forward") or at.get("layout", 0) != 0
                or "clip" in at or "activations" in at or not ins[5]
                or any(ins[k] not in inits for k in (1, 2)) or (ins[3] and ins[3] not in inits)):
            continue
        if any(inits[ins[k]].data_type != onnx.TensorProto.FLOAT for k in (1, 2)):
            continue
        cands.append((idx, node, ins, at))
    if not cands:
        return m, 0
    shapes = known_shapes(m, [c[2][0] for c in cands], input_shapes)
    replace: dict[int, list] = {}
    new_inits: list = []
    for idx, node, ins, at in cands:
        w = numpy_helper.to_array(inits[ins[1]])
        r = numpy_helper.to_array(inits[ins[2]])
        hid = int(at.get("hidden_size", r.shape[-1]))
        xs = shapes.get(ins[0])
        if (w.ndim != 3 or w.shape[0] != 1 or w.shape[1] != 3 * hid or r.shape != (1, 3 * hid, hid)
                or xs is None or len(xs) != 3 or xs[0] != 1 or xs[2] != w.shape[2]):
            continue
        b = (numpy_helper.to_array(inits[ins[3]]).reshape(6 * hid) if ins[3]
             else np.zeros(6 * hid, np.float32)).astype(np.float32)
        lbr = int(at.get("linear_before_reset", 0))
        base = f"{node.name or node.output[0]}/cell"
        t = lambda s: f"{base}/{s}"  # noqa: E731
        cst = {"w_t": np.ascontiguousarray(w[0].T), "wb": b[:3 * hid],
               "split_zrn": np.asarray([2 * hid, hid], np.int64), "split_zr": np.asarray([hid, hid], np.int64),
               "shape_x": np.asarray([-1, w.shape[2]], np.int64), "shape_h": np.asarray([-1, hid], np.int64),
               "shape_y": np.asarray([1, 1, -1, hid], np.int64), "shape_yh": np.asarray([1, -1, hid], np.int64)}
        mk = helper.make_node
        nodes = [mk("Reshape", [ins[0], t("shape_x")], [t("x")], name=t("x")),
                 mk("Reshape", [ins[5], t("shape_h")], [t("h")], name=t("h")),
                 mk("MatMul", [t("x"), t("w_t")], [t("gx0")], name=t("x_proj")),
                 mk("Add", [t("gx0"), t("wb")], [t("gx")], name=t("x_bias"))]
        if lbr:
            cst.update({"r_t": np.ascontiguousarray(r[0].T), "rb": b[3 * hid:]})
            nodes += [mk("MatMul", [t("h"), t("r_t")], [t("gh0")], name=t("h_proj")),
                      mk("Add", [t("gh0"), t("rb")], [t("gh")], name=t("h_bias")),
                      mk("Split", [t("gx"), t("split_zrn")], [t("gx_zr"), t("gx_n")], name=t("gx_split"), axis=1),
                      mk("Split", [t("gh"), t("split_zrn")], [t("gh_zr"), t("gh_n")], name=t("gh_split"), axis=1),
                      mk("Add", [t("gx_zr"), t("gh_zr")], [t("zr0")], name=t("zr_sum")),
                      mk("Sigmoid", [t("zr0")], [t("zr")], name=t("zr")),
                      mk("Split", [t("zr"), t("split_zr")], [t("z"), t("r")], name=t("zr_split"), axis=1),
                      mk("Mul", [t("r"), t("gh_n")], [t("rn")], name=t("reset")),
                      mk("Add", [t("gx_n"), t("rn")], [t("n0")], name=t("n_sum"))]
        else:
            cst.update({"r_zr_t": np.ascontiguousarray(r[0, :2 * hid].T), "rb_zr": b[3 * hid:5 * hid],
                        "r_n_t": np.ascontiguousarray(r[0, 2 * hid:].T), "rb_n": b[5 * hid:]})
            nodes += [mk("MatMul", [t("h"), t("r_zr_t")], [t("gh0")], name=t("h_proj")),
                      mk("Add", [t("gh0"), t("rb_zr")], [t("gh_zr")], name=t("h_bias")),
                      mk("Split", [t("gx"), t("split_zrn")], [t("gx_zr"), t("gx_n")], name=t("gx_split"), axis=1),
                      mk("Add", [t("gx_zr"), t("gh_zr")], [t("zr0")], name=t("zr_sum")),
                      mk("Sigmoid", [t("zr0")], [t("zr")], name=t("zr")),
                      mk("Split", [t("zr"), t("split_zr")], [t("z"), t("r")], name=t("zr_split"), axis=1),
                      mk("Mul", [t("r"), t("h")], [t("rh")], name=t("reset")),
                      mk("MatMul", [t("rh"), t("r_n_t")], [t("hn0")], name=t("hn_proj")),
                      mk("Add", [t("hn0"), t("rb_n")], [t("hn")], name=t("hn_bias")),
                      mk("Add", [t("gx_n"), t("hn")], [t("n0")], name=t("n_sum"))]
        outs = list(node.output) + [""] * (2 - len(node.output))
        nodes += [mk("Tanh", [t("n0")], [t("n")], name=t("n")),
                  mk("Sub", [t("h"), t("n")], [t("hmn")], name=t("h_minus_n")),
                  mk("Mul", [t("z"), t("hmn")], [t("zd")], name=t("z_mix")),
                  mk("Add", [t("n"), t("zd")], [t("h_new")], name=t("h_new"))]
        y_src = yh_src = t("h_new")
        if ins[4]:  # sequence_lens (N,): where 0, ONNX Runtime's GRU writes Y = 0 and Y_h = 0: the same here
            cst.update({"zero_len": np.asarray(0, np.int32), "shape_mask": np.asarray([-1, 1], np.int64),
                        "zero_y": np.zeros((1, hid), np.float32)})
            nodes += [mk("Greater", [ins[4], t("zero_len")], [t("live0")], name=t("live0")),
                      mk("Reshape", [t("live0"), t("shape_mask")], [t("live")], name=t("live")),
                      mk("Where", [t("live"), t("h_new"), t("zero_y")], [t("y_kept")], name=t("y_kept"))]
            y_src = yh_src = t("y_kept")
        if outs[0]:
            nodes.append(mk("Reshape", [y_src, t("shape_y")], [outs[0]], name=t("y")))
        if outs[1]:
            nodes.append(mk("Reshape", [yh_src, t("shape_yh")], [outs[1]], name=t("y_h")))
        new_inits += [numpy_helper.from_array(np.asarray(v), t(k)) for k, v in cst.items()]
        replace[idx] = nodes
    return spliced(m, replace, new_inits)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`gru_cell` at ``target.shapes``."""
    out, n = gru_cell(model, target.shapes)
    return out, {"gru_cell": n}


__all__ = ["gru_cell", "run"]
