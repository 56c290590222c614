"""Pass ring_state: a dilated conv's time-major state becomes a ring of P + 1 frames and a position input; stepping
the ring graph (streams at different positions, past the ring's wrap) gives every output bit-identical to the original
graph stepped with its shifted window, and the ring turned back equals that window; windows read by anything but
time-axis Slices, read mostly, of several frames per tick, or not time-major are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cosyedge.passes import POOL_PASSES
from cosyedge.passes.base import IO_LAYOUT_PASSES
from cosyedge.passes.ring_state import POS_INPUT, ring_rewrite, rings_of
from cosyedge.passes.state_layout import layout_rewrite
from tests.passes.graphs import model, ops, run

I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _graph(c: int, k: int, d: int, with_x: bool = True, extra_reader: bool = False, frames: int = 1):
    """x (N, c, frames), s (N, c, P = (k-1) d): W = Concat(s, x); taps W[..., 0:P+1:d] (without the current frame
    when not ``with_x``) -> Reshape -> MatMul -> y; state_out = W[..., frames:]."""
    p = (k - 1) * d
    rng = np.random.default_rng(c * 100 + k * 10 + d)
    end = p + 1 if with_x else p
    taps = len(range(0, end, d))
    nodes = [helper.make_node("Concat", ["s", "x"], ["w"], axis=-1, name="state_concat"),
             helper.make_node("Slice", ["w", "t", "big", "last"], ["s_out"], name="state_slice"),
             helper.make_node("Slice", ["w", "zero", "end", "last", "step"], ["taps"], name="taps"),
             helper.make_node("Reshape", ["taps", "flat"], ["tf"]), helper.make_node("MatMul", ["tf", "wt"], ["y"])]
    if extra_reader:
        nodes.append(helper.make_node("ReduceMax", ["w", "last"], ["peak"], keepdims=0))
    inits = {"t": I64(frames), "big": I64(1 << 62), "last": I64(-1), "zero": I64(0), "end": I64(end),
             "step": I64(d), "flat": I64(-1, c * taps), "wt": rng.standard_normal((c * taps, 5)).astype(np.float32)}
    outs = ["y", "s_out"] + (["peak"] if extra_reader else [])
    dims = {"x": ["N", c, frames], "s": ["N", c, p]}
    return model(nodes, dims, outs, inits), dims, p


@pytest.mark.parametrize("c,k,d,with_x", [(4, 3, 2, True), (3, 2, 8, True), (5, 4, 3, True), (2, 3, 5, False)])
def test_ring_steps_bit_identical_to_the_shifted_window(c, k, d, with_x):
    m, dims, p = _graph(c, k, d, with_x)
    timed, n_layout = layout_rewrite(m, dims)
    ring, counts = ring_rewrite(timed, dims)
    r = p + 1
    assert n_layout == {"state_layout": 1} and counts == {"ring_state": 1} and rings_of(ring) == {"s": r}
    assert POS_INPUT in [i.name for i in ring.graph.input] and {"ScatterND", "GatherND"} <= set(ops(ring))
    assert "Concat" not in ops(ring) or ops(ring).count("Concat") == 1  # the shared write index only
    rng = np.random.default_rng(7)
    n = 4
    window = np.zeros((n, c, p), np.float32)  # the original graph's state, (N, C, P)
    rb = np.zeros((n, r, c), np.float32)  # the ring, (N, R, C)
    pos = np.array([0, 3, r - 1, 1000], np.int64)  # streams at other positions: a zero ring is zero at any
    peak = 0.0
    for step in range(3 * r + 2):  # past the wrap, several times
        x = (rng.standard_normal((n, c, 1)) * (1 + step % 3)).astype(np.float32)
        y, window = run(m, {"x": x, "s": window})
        y2, rb = run(ring, {"x": x, "s": rb, POS_INPUT: pos})
        pos = pos + 1
        assert np.array_equal(y2, y), step
        peak = max(peak, float(np.abs(y).max()))
        back = rb[np.arange(n)[:, None], (pos[:, None] + 1 + np.arange(p)[None, :]) % r]  # (N, P, C), oldest first
        assert np.array_equal(back.transpose(0, 2, 1), window), step
    assert peak > 0.1


def test_windows_it_cannot_ring_are_left_alone():
    for kwargs, why in (({"extra_reader": True}, "another reader of the window"),
                        ({"d": 1}, "taps read the whole window"),
                        ({"frames": 2}, "two frames per tick")):
        args = {"c": 4, "k": 3, "d": 4, **kwargs}
        m, dims, _ = _graph(**args)
        timed, _ = layout_rewrite(m, dims)
        new, counts = ring_rewrite(timed, dims)
        assert counts == {"ring_state": 0} and new is timed and rings_of(new) == {}, why
    m, dims, _ = _graph(4, 3, 4)
    assert ring_rewrite(m, dims)[1] == {"ring_state": 0}  # not time-major (no state_layout before it)


def test_ring_state_runs_in_the_pool_after_state_layout_only():
    assert POOL_PASSES.index("state_layout") < POOL_PASSES.index("ring_state")
    assert "ring_state" in IO_LAYOUT_PASSES  # never inside a Scan body: the pool binds only the top graph's states
