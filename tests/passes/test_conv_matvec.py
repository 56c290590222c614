"""Pass conv_matvec: a strided one-frame conv over its whole input becomes the same matrix-vector MatMul (row blocks of
the weight when it is large), bit-identical at any batch; a stride-1, biased, dilated or multi-frame conv is left
alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from cosyedge.passes.conv_matvec import BLOCK_BYTES, block_rows, matvec_rewrite
from tests.passes.graphs import model, ops, run


def _conv(m_out: int, c: int, k: int, stride: int, bias: bool = False, length: int | None = None):
    rng = np.random.default_rng(m_out + k)
    inits = {"w": rng.standard_normal((m_out, c, k)).astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(m_out).astype(np.float32)
        ins.append("b")
    conv = helper.make_node("Conv", ins, ["y"], kernel_shape=[k], strides=[stride], name="analysis")
    return model([conv], {"x": ["N", c, length or k]}, ["y"], inits)


def test_block_rows_keep_a_block_in_l2():
    assert block_rows(322, 320) == 322  # 412 KB: whole
    assert block_rows(256, 1024) == 64 and 64 * 1024 * 4 <= BLOCK_BYTES
    assert block_rows(40, 100000) == 16


@pytest.mark.parametrize("m_out,c,k,stride", [(322, 1, 320, 160), (256, 1, 1024, 160), (40, 3, 90, 5)])
def test_whole_input_conv_becomes_a_matvec_with_equal_outputs(m_out, c, k, stride):
    m = _conv(m_out, c, k, stride)
    new, counts = matvec_rewrite(m, {"x": ["N", c, k]})
    assert counts == {"conv_matvec": 1} and "Conv" not in ops(new)
    assert ops(new).count("MatMul") == -(-m_out // block_rows(m_out, c * k))
    rng = np.random.default_rng(3)
    for n in (1, 7, 64):
        x = (rng.standard_normal((n, c, k)) * np.logspace(-6, 0, n)[:, None, None]).astype(np.float32)
        a, b = run(m, {"x": x})[0], run(new, {"x": x})[0]
        assert a.shape == b.shape == (n, m_out, 1) and np.array_equal(a, b), n


def test_stride_one_bias_or_several_frames_are_left_alone():
    for m, dims in ((_conv(32, 1, 64, 1), [1, 64]), (_conv(32, 1, 64, 8, bias=True), [1, 64]),
                    (_conv(32, 1, 64, 8, length=72), [1, 72])):
        assert matvec_rewrite(m, {"x": ["N", *dims]})[1] == {"conv_matvec": 0}
