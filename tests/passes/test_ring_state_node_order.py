"""Pass ring_state on a graph whose conv taps are read before the state Slice (the order of an INT8 ``ort_matmul``
engine's one-hop body): the ring graph stays topologically sorted (the ring write sits where the window's Concat
was, before every tap) and steps bit-identical to the shifted window past the ring's wrap."""

from __future__ import annotations

import numpy as np

from cosyedge.passes.ring_state import POS_INPUT, ring_rewrite, rings_of
from cosyedge.passes.state_layout import layout_rewrite
from tests.passes.graphs import run
from tests.passes.test_ring_state import _graph


def _unsorted(m) -> list[str]:
    """Inputs (list[str]) of ``m``'s nodes that no graph input, initializer or earlier node provides."""
    seen = {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer} | {""}
    late = []
    for n in m.graph.node:
        late += [f"{n.op_type}:{x}" for x in n.input if x not in seen]
        seen.update(n.output)
    return late


def test_ring_write_precedes_taps_read_before_the_state_slice():
    c, k, d = 3, 5, 4
    m, dims, p = _graph(c, k, d)
    nodes = list(m.graph.node)
    state = next(i for i, n in enumerate(nodes) if n.name == "state_slice")
    taps = next(i for i, n in enumerate(nodes) if n.name == "taps")
    nodes[state], nodes[taps] = nodes[taps], nodes[state]  # taps Slice first, then the state Slice
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    assert _unsorted(m) == []
    timed, _ = layout_rewrite(m, dims)
    ring, counts = ring_rewrite(timed, dims)
    r = p + 1
    assert counts == {"ring_state": 1} and rings_of(ring) == {"s": r}
    assert _unsorted(ring) == []  # onnx.checker: "Nodes in a graph must be topologically sorted" (GatherND before ScatterND)
    order = [n.op_type for n in ring.graph.node]
    assert order.index("ScatterND") < order.index("GatherND")
    rng = np.random.default_rng(3)
    n = 3
    window = np.zeros((n, c, p), np.float32)
    rb = np.zeros((n, r, c), np.float32)
    pos = np.array([0, 5, 2 * r - 1], np.int64)
    for step in range(3 * r + 1):
        x = rng.standard_normal((n, c, 1)).astype(np.float32)
        y, window = run(m, {"x": x, "s": window})
        y2, rb = run(ring, {"x": x, "s": rb, POS_INPUT: pos})
        pos = pos + 1
        assert np.array_equal(y2, y), step
    assert float(np.abs(y).max()) > 0.1
