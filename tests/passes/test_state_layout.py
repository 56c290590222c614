"""Pass state_layout: a conv state carried (N, C, P) becomes (N, P, C) in the graph (inputs, outputs, the window), with
outputs equal bit for bit once the states are fed transposed; the layout is recorded in the metadata; a state read by
another node too, or of one channel, is left alone."""

from __future__ import annotations

import numpy as np
from onnx import helper

from cosyedge.passes.state_layout import layout_of, layout_rewrite
from tests.passes.graphs import model, ops, run

C, P = 4, 6
I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _graph(c: int = C, extra_reader: bool = False):
    """x (N, c, 1), s (N, c, P): window W = Concat(s, x); taps W[..., 0:7:3] -> Reshape -> MatMul; ReduceMax(W);
    state_out = W[..., -P:]."""
    rng = np.random.default_rng(c)
    nodes = [helper.make_node("Concat", ["s", "x"], ["w"], axis=-1, name="state_concat"),
             helper.make_node("Slice", ["w", "m_p", "big", "last"], ["s_out"], name="state_slice"),
             helper.make_node("Slice", ["w", "zero", "span", "two", "step"], ["taps"], name="taps"),
             helper.make_node("Reshape", ["taps", "flat"], ["tf"]), helper.make_node("MatMul", ["tf", "wt"], ["y"]),
             helper.make_node("ReduceMax", ["w", "two"], ["peak"], keepdims=0)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["s"], ["ns"]))
    inits = {"m_p": I64(-P), "big": I64(1 << 62), "last": I64(-1), "zero": I64(0), "span": I64(7), "two": I64(2),
             "step": I64(3), "flat": I64(-1, c * 3), "wt": rng.standard_normal((c * 3, 5)).astype(np.float32)}
    outs = ["y", "peak", "s_out"] + (["ns"] if extra_reader else [])
    return model(nodes, {"x": ["N", c, 1], "s": ["N", c, P]}, outs, inits)


def test_state_goes_time_major_with_equal_outputs():
    m = _graph()
    new, counts = layout_rewrite(m, {"x": ["N", C, 1], "s": ["N", C, P]})
    assert counts == {"state_layout": 1} and layout_of(new) == {"s": [0, 2, 1]} and layout_of(m) == {}
    dims = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
            for v in list(new.graph.input) + list(new.graph.output)}
    assert dims["s"] == ["N", P, C]  # (the output is declared without a shape here; the pool test covers it)
    assert ops(new).count("Transpose") >= 2 and "Concat" in ops(new)
    rng = np.random.default_rng(5)
    for n in (1, 3, 17):
        x = rng.standard_normal((n, C, 1)).astype(np.float32)
        s = rng.standard_normal((n, C, P)).astype(np.float32)
        want = run(m, {"x": x, "s": s})
        got = run(new, {"x": x, "s": np.ascontiguousarray(s.transpose(0, 2, 1))})
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert np.array_equal(got[2], want[2].transpose(0, 2, 1)) and np.abs(want[0]).max() > 0.1


def test_a_shared_or_one_channel_state_is_left_alone():
    assert layout_rewrite(_graph(extra_reader=True), {"x": ["N", C, 1], "s": ["N", C, P]})[1] == {"state_layout": 0}
    assert layout_rewrite(_graph(c=1), {"x": ["N", 1, 1], "s": ["N", 1, P]})[1] == {"state_layout": 0}
