"""``cosyedge.train.nn.CausalConv1dUpsample``: the time pixel-shuffle follows its documented index map
``y[:, c, t*r + m] = conv(x)[:, c*r + m, t]`` for one output channel (the Transpose + Flatten path that exports
without Shape ops) and for several (the unflatten path)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cosyedge.train.nn import CausalConv1dUpsample  # noqa: E402


@pytest.mark.parametrize("c_out", [1, 3])
def test_pixel_shuffle_follows_the_index_map(c_out):
    torch.manual_seed(0)
    r, t = 4, 7
    up = CausalConv1dUpsample(5, c_out, r, kernel_size=2).eval()
    x = torch.randn(2, 5, t)
    with torch.no_grad():
        y, z = up(x), up.conv(x)
    assert y.shape == (2, c_out, t * r)
    want = torch.stack([z[:, c * r + m, i] for c in range(c_out) for i in range(t) for m in range(r)], dim=1)
    assert torch.equal(y.reshape(2, -1), want)
