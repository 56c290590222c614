"""Pass perm_gather: a Gather / GatherElements of a transposed, flattened window through constant indices reads the
untransposed window (a Slice; the index table dropped) with outputs equal bit for bit; picks that do not compose to a
range, or a table read by another node too, are left alone."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.perm_gather import gather_rewrite
from tests.passes.graphs import model, ops, run

F, H = 4, 5  # frames, samples per frame: W (N, F, H) time-major, X = Reshape(Transpose(W)) (N, F*H, 1) polyphase
K = F * H
I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _table() -> np.ndarray:
    """table[s] = F (s mod H) + s // H: X's index of sample s (the reference model's lag table)."""
    s = np.arange(K)
    return (F * (s % H) + s // H).astype(np.int64)


def _graph(pick: np.ndarray, table: np.ndarray, table_reader: bool = False):
    """W (N, F, H) -> Transpose -> Reshape (N, K, 1) = X; y = Gather(X, pick); z = GatherElements(X, table[lag +
    arange(H)]); optionally the table indices are an output too."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["wt", "shape"], ["x"]),
             helper.make_node("Gather", ["x", "pick"], ["y"], axis=1),
             helper.make_node("Cast", ["lag"], ["lagi"], to=7),
             helper.make_node("Add", ["lagi", "span"], ["j"]),
             helper.make_node("Gather", ["table", "j"], ["ix"], axis=0),
             helper.make_node("GatherElements", ["x", "ix"], ["z"], axis=1)]
    outs = ["y", "z"]
    if table_reader:
        nodes.append(helper.make_node("Cast", ["ix"], ["ixf"], to=1))
        outs.append("ixf")
    inits = {"shape": I64(-1, K, 1), "pick": pick, "span": np.arange(H, dtype=np.int64).reshape(1, H, 1),
             "table": table}
    return model(nodes, {"w": ["N", F, H], "lag": ["N", 1, 1]}, outs, inits)


def _feeds(n: int, rng) -> dict:
    return {"w": rng.standard_normal((n, F, H)).astype(np.float32),
            "lag": rng.integers(0, K - H + 1, (n, 1, 1)).astype(np.float32)}


def test_picks_of_the_window_in_time_order_read_it_untransposed():
    pick = _table()[K - 2 * H:]  # the last two frames, in time order
    m = _graph(pick, _table())
    new, counts = gather_rewrite(m, {"w": ["N", F, H], "lag": ["N", 1, 1]})
    assert counts == {"perm_gather": 2}
    assert ops(new).count("Gather") == 0 and "Transpose" not in ops(new) and "Slice" in ops(new)
    sl = next(n for n in new.graph.node if n.op_type == "Slice")
    starts = next(t for t in new.graph.initializer if t.name == sl.input[1])
    assert list(np.frombuffer(starts.raw_data, np.int64)) == [K - 2 * H]
    rng = np.random.default_rng(3)
    for n in (1, 4, 33):
        f = _feeds(n, rng)
        want, got = run(m, f), run(new, f)
        assert all(np.array_equal(a, b) for a, b in zip(want, got)) and np.abs(want[1]).max() > 0.1
        w = f["w"].reshape(n, K)  # time order: what the picks read
        lag = f["lag"].astype(np.int64).ravel()
        assert np.array_equal(got[1][:, :, 0], np.stack([w[i, lag[i]:lag[i] + H] for i in range(n)]))


def test_picks_out_of_time_order_or_a_shared_table_are_left_alone():
    dims = {"w": ["N", F, H], "lag": ["N", 1, 1]}
    rev = _table()[::-1].copy()  # both compose to descending runs: no Slice, no identity
    assert gather_rewrite(_graph(rev[:H], rev), dims)[1] == {"perm_gather": 0}
    m = _graph(_table()[:H], _table(), table_reader=True)  # the Gather becomes a Slice; the table stays (read twice)
    new, counts = gather_rewrite(m, dims)
    assert counts == {"perm_gather": 1} and ops(new).count("Gather") == 1 and "Transpose" in ops(new)
    f = _feeds(6, np.random.default_rng(4))
    assert all(np.array_equal(a, b) for a, b in zip(run(m, f), run(new, f)))
