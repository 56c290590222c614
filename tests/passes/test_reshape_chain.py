"""Pass reshape_chain: ops that only re-shape a tensor run as one Reshape (or none when the chain ends in its start's
shape), outputs equal bit for bit at any batch; a Transpose that reorders axes longer than 1, or a link read twice,
ends a chain."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.reshape_chain import chain_rewrite
from tests.passes.graphs import model, ops, run

I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _graph(perm=(0, 2, 1), extra_reader: bool = False):
    """x (N, 6) -> Reshape (N, 6, 1) -> Transpose(perm) -> Flatten -> Unsqueeze (N, 1, 6) = y (an output);
    a (N, 1, 4) -> Reshape (N, 4, 1) -> Transpose (N, 1, 4) -> Neg = z (back to its start's shape: no node left);
    c (N, 3, 1) -> Transpose (N, 1, 3) -> Neg = v (a lone Transpose of a unit axis: a Reshape)."""
    nodes = [helper.make_node("Reshape", ["x", "col"], ["x1"]),
             helper.make_node("Transpose", ["x1"], ["x2"], perm=perm),
             helper.make_node("Flatten", ["x2"], ["x3"]), helper.make_node("Unsqueeze", ["x3", "one"], ["y"]),
             helper.make_node("Reshape", ["a", "col4"], ["a1"]),
             helper.make_node("Transpose", ["a1"], ["a2"], perm=[0, 2, 1]), helper.make_node("Neg", ["a2"], ["z"]),
             helper.make_node("Transpose", ["c"], ["c1"], perm=[0, 2, 1]), helper.make_node("Neg", ["c1"], ["v"])]
    outs = ["y", "z", "v"]
    if extra_reader:
        nodes.append(helper.make_node("Abs", ["x2"], ["w"]))
        outs.append("w")
    inits = {"col": I64(-1, 6, 1), "col4": I64(-1, 4, 1), "one": I64(1)}
    return model(nodes, {"x": ["N", 6], "a": ["N", 1, 4], "c": ["N", 3, 1]}, outs, inits)


DIMS = {"x": ["N", 6], "a": ["N", 1, 4], "c": ["N", 3, 1]}


def _same(m, new) -> None:
    rng = np.random.default_rng(1)
    for n in (1, 7):
        f = {"x": rng.standard_normal((n, 6)).astype(np.float32),
             "a": rng.standard_normal((n, 1, 4)).astype(np.float32),
             "c": rng.standard_normal((n, 3, 1)).astype(np.float32)}
        want, got = run(m, f), run(new, f)
        assert all(u.shape == v.shape and np.array_equal(u, v) for u, v in zip(want, got))
        assert np.array_equal(got[0], f["x"][:, None, :]) and np.array_equal(got[1], -f["a"])
        assert np.array_equal(got[2], -f["c"].transpose(0, 2, 1))


def test_reshaping_chains_run_as_one_reshape_or_none():
    m = _graph()
    new, counts = chain_rewrite(m, DIMS)
    assert counts == {"reshape_chain": 7} and ops(new) == ["Reshape", "Neg", "Reshape", "Neg"]
    assert new.graph.node[0].output[0] == "y" and new.graph.node[1].input[0] == "a"
    _same(m, new)


def test_a_real_transpose_or_a_shared_link_ends_the_chain():
    m = _graph(perm=(1, 0, 2))  # moves the batch axis past the 6: data moves; only Flatten + Unsqueeze merge
    new, counts = chain_rewrite(m, DIMS)
    assert counts == {"reshape_chain": 5} and ops(new)[:2] == ["Reshape", "Transpose"]
    f = {"x": np.arange(18, dtype=np.float32).reshape(3, 6), "a": np.ones((3, 1, 4), np.float32),
         "c": np.ones((3, 3, 1), np.float32)}
    assert all(np.array_equal(u, v) for u, v in zip(run(m, f), run(new, f)))
    m = _graph(extra_reader=True)  # x2 read twice: Reshape+Transpose and Flatten+Unsqueeze merge apart
    new, counts = chain_rewrite(m, DIMS)
    assert counts == {"reshape_chain": 7} and ops(new).count("Reshape") == 3 and "Transpose" not in ops(new)
    _same(m, new)
