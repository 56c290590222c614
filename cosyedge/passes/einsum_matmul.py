"""Pass ``einsum_matmul``: a one-frame grouped-linear ``Einsum`` becomes a batched ``MatMul`` (ONNX Runtime CPU).

**Grouped linear** ``Einsum("btgi,gih->btgh", x, W)`` with a constant ``W`` (g, i, h) (DeepFilterNet's
``GroupedLinearEinsum``): ONNX Runtime's Einsum kernel transposes and reshapes its operands on every call
(about 10-30 us per node on DeepFilterNet3). With one frame it is a batched ``MatMul``: ``x`` (N, 1, g, i) ->
(g, N, i) (a ``Reshape`` when N = 1, else ``Reshape`` + ``Transpose``), ``MatMul`` with ``W`` (g, i, h) ->
(g, N, h) -> (N, 1, g, h). :func:`einsum_matmul`.

Applied in memory by :class:`~cosyedge.runtime.ort.OrtStreamSession` and :class:`~cosyedge.runtime.pool.StreamPool`
(CPU provider; :data:`cosyedge.passes.SESSION_PASSES`, :data:`cosyedge.passes.POOL_PASSES`), never written into an
artifact, at any batch N. Outputs are not bit-identical (sums in another order): DeepFilterNet3 over the whole bundled
recording stays >= 120 dB from the unrewritten graph (``tests/passes/test_einsum_and_gru_rewrites.py``).

Sources: ONNX operator spec ``Einsum``, https://onnx.ai/onnx/operators/; DeepFilterNet ``df/modules.py``
``GroupedLinearEinsum``, https://github.com/Rikorose/DeepFilterNet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.passes.edit import copy_with, node_attrs, spliced
from cosyedge.passes.shapes import known_shapes

GROUPED_EQUATIONS = ("btgi,gih->btgh",)
"""tuple[str, ...]: Einsum equations (spaces removed) rewritten by :func:`einsum_matmul`."""


def einsum_matmul(model: Any, input_shapes: dict[str, list[int]], any_batch: bool = False) -> tuple[Any, int]:
    """Rewrite one-frame grouped-linear Einsums (:data:`GROUPED_EQUATIONS`, constant float32 ``W`` (g, i, h)) into a
    batched ``MatMul`` (see module docstring). Works on a copy.

    Args:
        model (onnx.ModelProto): The per-step model.
        input_shapes (dict[str, list[int]]): Concrete shape of every graph input (stream inputs and states).
        any_batch (bool): Write nodes valid at every batch size (``Reshape`` s with -1, the ``Transpose`` s kept),
            for a session whose batch varies per run (StreamPool); default: nodes for the batch of
            ``input_shapes`` (batch 1: ``Reshape`` s only).
    Returns:
        tuple[onnx.ModelProto, int]: The rewritten copy and the number of Einsums rewritten (0: unchanged copy).
    Raises:
        onnx.shape_inference.InferenceError: shape inference fails (callers skip the rewrite).
    """
    import onnx
    from onnx import helper, numpy_helper

    m, g, inits, nodes = copy_with(model, "Einsum")
    cands = []
    for idx, node in nodes:
        if len(node.input) != 2:
            continue
        eq = node_attrs(node).get("equation", b"")
        eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
        if eq not in GROUPED_EQUATIONS or node.input[1] not in inits or node.input[0] in inits:
            continue
        w = inits[node.input[1]]
        if w.data_type != onnx.TensorProto.FLOAT or len(w.dims) != 3:
            continue
        cands.append((idx, node, tuple(w.dims)))
    if not cands:
        return m, 0
    shapes = known_shapes(m, [n.input[0] for _, n, _ in cands], input_shapes)
    replace: dict[int, list] = {}
    new_inits: list = []
    for idx, node, (grp, i_len, h_len) in cands:
        xs = shapes.get(node.input[0])
        if xs is None or len(xs) != 4 or xs[1] != 1 or xs[2:] != (grp, i_len):
            continue
        batch = xs[0]
        base = f"{node.name or node.output[0]}/mm"
        t = lambda s: f"{base}/{s}"  # noqa: E731
        n_dim = -1 if any_batch else batch
        new_inits += [numpy_helper.from_array(np.asarray([n_dim, grp, i_len], np.int64), t("shape_in")),
                      numpy_helper.from_array(np.asarray([n_dim, 1, grp, h_len], np.int64), t("shape_out"))]
        if batch == 1 and not any_batch:  # (1, 1, g, i) -> (g, 1, i): the same bytes
            new_inits.append(numpy_helper.from_array(np.asarray([grp, 1, i_len], np.int64), t("shape_g")))
            nodes = [helper.make_node("Reshape", [node.input[0], t("shape_g")], [t("x")], name=t("x")),
                     helper.make_node("MatMul", [t("x"), node.input[1]], [t("y")], name=t("matmul")),
                     helper.make_node("Reshape", [t("y"), t("shape_out")], [node.output[0]], name=t("out"))]
        else:
            nodes = [helper.make_node("Reshape", [node.input[0], t("shape_in")], [t("x3")], name=t("x3")),
                     helper.make_node("Transpose", [t("x3")], [t("x")], name=t("x"), perm=[1, 0, 2]),
                     helper.make_node("MatMul", [t("x"), node.input[1]], [t("y")], name=t("matmul")),
                     helper.make_node("Transpose", [t("y")], [t("y3")], name=t("y3"), perm=[1, 0, 2]),
                     helper.make_node("Reshape", [t("y3"), t("shape_out")], [node.output[0]], name=t("out"))]
        replace[idx] = nodes
    return spliced(m, replace, new_inits)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`einsum_matmul` at ``target.shapes`` (batch-free nodes
    when ``target.any_batch``)."""
    out, n = einsum_matmul(model, target.shapes, any_batch=target.any_batch)
    return out, {"einsum_matmul": n}


__all__ = ["GROUPED_EQUATIONS", "einsum_matmul", "run"]
