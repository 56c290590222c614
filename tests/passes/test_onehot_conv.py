"""Pass onehot_conv: a one-frame conv whose weight rows are single taps of 1.0 becomes a Reshape/Gather of the window,
bit-identical; a conv with any other weight is left alone."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from cosyedge.passes.onehot_conv import onehot_indices, onehot_rewrite
from tests.passes.graphs import model, ops, run


def _taps(perm: bool, scale: float = 1.0, dilation: int = 1) -> onnx.ModelProto:
    """x (N, 6, L): depthwise conv, group 6, kernel 4, weight (24, 1, 4) picking one tap per output."""
    k = 4
    w = np.zeros((24, 1, k), np.float32)
    taps = np.random.default_rng(0).integers(0, k, 24) if perm else np.tile(np.arange(k), 6)
    w[np.arange(24), 0, taps] = 1.0
    w[5, 0, taps[5]] = scale
    length = dilation * (k - 1) + 1
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=6, kernel_shape=[k], dilations=[dilation], name="taps")
    return model([conv, helper.make_node("Relu", ["y"], ["z"])], {"x": ["N", 6, length]}, ["z"], {"w": w})


def _check_equal(old: onnx.ModelProto, new: onnx.ModelProto, length: int) -> None:
    rng = np.random.default_rng(1)
    for n in (1, 3, 64):
        x = rng.standard_normal((n, 6, length)).astype(np.float32)
        a, b = run(old, {"x": x})[0], run(new, {"x": x})[0]
        assert a.shape == b.shape == (n, 24, 1) and np.array_equal(a, b) and np.abs(a).max() > 0.5


def test_window_in_order_becomes_a_reshape():
    m = _taps(perm=False)
    new, counts = onehot_rewrite(m, {"x": ["N", 6, 4]})
    assert counts == {"onehot_conv": 1} and ops(new) == ["Reshape", "Relu"]
    _check_equal(m, new, 4)
    assert ops(m) == ["Conv", "Relu"]  # the input model is untouched


def test_permuted_dilated_taps_become_a_gather():
    m = _taps(perm=True, dilation=3)
    new, counts = onehot_rewrite(m, {"x": ["N", 6, 10]})
    assert counts == {"onehot_conv": 1} and ops(new) == ["Reshape", "Gather", "Reshape", "Relu"]
    _check_equal(m, new, 10)


def test_a_weight_of_another_value_or_two_taps_or_several_frames_is_left_alone():
    assert onehot_rewrite(_taps(perm=False, scale=0.5), {"x": ["N", 6, 4]})[1] == {"onehot_conv": 0}
    m = _taps(perm=False)
    assert onehot_rewrite(m, {"x": ["N", 6, 5]})[1] == {"onehot_conv": 0}  # 2 output frames
    w = np.zeros((3, 2, 2), np.float32)
    w[:, 0, 0] = 1.0
    w[1, 1, 1] = 1.0  # row 1 sums two taps
    assert onehot_indices(w, 2, 2, 1, 1) is None
    w[1, 1, 1] = 0.0
    assert onehot_indices(w, 2, 2, 1, 1).tolist() == [0, 0, 0]
