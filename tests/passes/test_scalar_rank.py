"""Pass scalar_rank: a one-element constant of Add/Sub/Mul/Div gets its partner's rank (same values, bit-identical
outputs); one that ONNX Runtime folds into a matrix product, or one with more elements, is left alone."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.scalar_rank import rank_rewrite
from tests.passes.graphs import model, run


def test_scalar_operands_get_the_rank_and_outputs_stay_bit_identical():
    nodes = [helper.make_node("Add", ["x", "eps"], ["a"]), helper.make_node("Mul", ["half", "a"], ["b"]),
             helper.make_node("Sub", ["b", "col"], ["c"]),  # (161, 1): not one element
             helper.make_node("Mul", ["c", "s"], ["d"]), helper.make_node("MatMul", ["w", "d"], ["y"])]
    inits = {"eps": np.float32(1e-3), "half": np.array([0.5], np.float32), "col": np.ones((161, 1), np.float32),
             "s": np.float32(0.25), "w": np.ones((4, 161), np.float32)}
    m = model(nodes, {"x": ["N", 161, 1]}, ["y", "c"], inits)
    new, counts = rank_rewrite(m, {"x": ["N", 161, 1]})
    assert counts == {"scalar_rank": 2}
    shapes = {t.name: list(t.dims) for t in new.graph.initializer}
    n = {x.output[0]: x for x in new.graph.node}
    assert shapes[n["a"].input[1]] == [1, 1, 1] and shapes[n["b"].input[0]] == [1, 1, 1]
    assert n["c"].input[1] == "col" and n["d"].input[1] == "s"  # vector constant; the scale of a MatMul
    x = np.random.default_rng(0).standard_normal((64, 161, 1)).astype(np.float32)
    for a, b in zip(run(m, {"x": x}), run(new, {"x": x})):
        assert np.array_equal(a, b) and np.abs(a).max() > 0.1
