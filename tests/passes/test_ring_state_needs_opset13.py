"""Pass ring_state writes opset-13 forms (Unsqueeze with an axes input, GatherND batch_dims): a time-major model of an
older default-domain opset is left as it is (ONNX Runtime refused the rewritten opset-11 graph, and the pool then ran
without any of its passes, no longer bit-identical to the pool without ring_state); the same graph at opset 13 rings."""

from __future__ import annotations

from cosyedge.passes.ring_state import MIN_OPSET, ring_rewrite, rings_of
from cosyedge.passes.state_layout import layout_rewrite
from tests.passes.test_ring_state import _graph


def _at(version: int):
    m, dims, p = _graph(4, 3, 4)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = version
    timed, n = layout_rewrite(m, dims)
    assert n == {"state_layout": 1}
    return timed, dims, p


def test_an_older_opset_keeps_its_shifted_window():
    assert MIN_OPSET == 13
    for version in (11, 12):
        timed, dims, _ = _at(version)
        new, counts = ring_rewrite(timed, dims)
        assert counts == {"ring_state": 0} and new is timed and rings_of(new) == {}, version
    timed, dims, p = _at(13)
    new, counts = ring_rewrite(timed, dims)
    assert counts == {"ring_state": 1} and rings_of(new) == {"s": p + 1}
