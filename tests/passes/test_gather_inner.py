"""Pass gather_inner: a GatherElements whose axis is followed only by size-1 axes gathers on its last axis (Reshapes
around) with outputs equal bit for bit at any batch; one with a longer axis after the gathered one, or already on its
last axis, is left alone."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.gather_inner import inner_rewrite
from tests.passes.graphs import model, ops, run


def _graph(inner: int = 1, axis: int = 1):
    """z = GatherElements(w (N, 12, inner), Cast(lag) + arange(5), axis) (a lag window per stream)."""
    nodes = [helper.make_node("Cast", ["lag"], ["lagi"], to=7), helper.make_node("Add", ["lagi", "span"], ["j"]),
             helper.make_node("GatherElements", ["w", "j"], ["z"], axis=axis)]
    span = np.arange(5, dtype=np.int64).reshape(1, 5, 1) + np.zeros((1, 1, inner), np.int64)
    return model(nodes, {"w": ["N", 12, inner], "lag": ["N", 1, 1]}, ["z"], {"span": span})


def test_a_gather_over_unit_axes_runs_on_its_last_axis_with_equal_outputs():
    m = _graph()
    new, counts = inner_rewrite(m, {"w": ["N", 12, 1], "lag": ["N", 1, 1]})
    assert counts == {"gather_inner": 1} and ops(new) == ["Cast", "Add", "Reshape", "Reshape", "GatherElements",
                                                         "Reshape"]
    assert next(n for n in new.graph.node if n.op_type == "GatherElements").attribute[0].i == 1
    rng = np.random.default_rng(2)
    for n in (1, 5, 64):
        f = {"w": rng.standard_normal((n, 12, 1)).astype(np.float32),
             "lag": rng.integers(-12, 8, (n, 1, 1)).astype(np.float32)}  # negative indices wrap alike
        want, got = run(m, f)[0], run(new, f)[0]
        assert got.shape == want.shape == (n, 5, 1) and np.array_equal(got, want)
        lag = f["lag"].astype(np.int64).ravel() % 12
        assert np.array_equal(got[:, 0, 0], f["w"][np.arange(n), lag, 0])


def test_a_longer_inner_axis_or_the_last_axis_is_left_alone():
    assert inner_rewrite(_graph(inner=3), {"w": ["N", 12, 3], "lag": ["N", 1, 1]})[1] == {"gather_inner": 0}
    assert inner_rewrite(_graph(axis=2), {"w": ["N", 12, 1], "lag": ["N", 1, 1]})[1] == {"gather_inner": 0}
