"""Pass matvec_groups: a scaled matrix-vector MatMul run per stream becomes one GEMM per group of streams with outputs
equal bit for bit at any batch; a MatMul without the scalar Mul (another MLAS kernel) is left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cosyedge.passes.matvec_groups import group_rewrite, group_size
from tests.passes.graphs import model, ops, run


def _graph(k: int, scale, extra_reader: bool = False):
    rng = np.random.default_rng(k)
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"]), helper.make_node("MatMul", ["w", "xs"], ["y"])]
    outs = ["y"]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["xs"], ["z"]))
        outs.append("z")
    return model(nodes, {"x": ["N", k, 1]}, outs, {"s": np.asarray(scale, np.float32),
                                                     "w": rng.standard_normal((37, k)).astype(np.float32)})


def test_group_sizes_keep_k_in_one_mlas_block():
    assert [group_size(k) for k in (128, 256, 257, 320, 512, 513, 1024)] == [64, 64, 32, 32, 32, 16, 16]


@pytest.mark.parametrize("k", [320, 1000])
def test_grouped_gemm_equals_the_per_stream_products_bit_for_bit(k):
    m = _graph(k, 0.37)
    new, counts = group_rewrite(m, {"x": ["N", k, 1]})
    assert counts == {"matvec_groups": 1} and "Pad" in ops(new) and "Mul" in ops(new)
    rng = np.random.default_rng(2)
    for n in (1, 5, group_size(k), group_size(k) + 1, 64, 100):
        # streams from loud to near-silent: a different summation order would show in the quiet ones
        x = (rng.standard_normal((n, k, 1)) * np.logspace(-6, 0, n)[:, None, None]).astype(np.float32)
        a, b = run(m, {"x": x})[0], run(new, {"x": x})[0]
        assert a.shape == b.shape == (n, 37, 1) and np.array_equal(a, b), n


def test_unscaled_vector_scaled_or_shared_products_are_left_alone():
    vector = _graph(320, np.full((320, 1), 0.5))  # a (320, 1) scale: not one element
    assert group_rewrite(vector, {"x": ["N", 320, 1]})[1] == {"matvec_groups": 0}
    assert group_rewrite(_graph(320, 0.5, extra_reader=True), {"x": ["N", 320, 1]})[1] == {"matvec_groups": 0}
    assert group_rewrite(_graph(2048, 0.5), {"x": ["N", 2048, 1]})[1] == {"matvec_groups": 0}  # K beyond one block
    plain = model([helper.make_node("MatMul", ["w", "x"], ["y"])], {"x": ["N", 320, 1]}, ["y"],
                  {"w": np.ones((4, 320), np.float32)})
    assert group_rewrite(plain, {"x": ["N", 320, 1]})[1] == {"matvec_groups": 0}
