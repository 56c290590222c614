"""Bool masks: a bool tensor over time shifted by a pad or a concat after a look-ahead, and banded attention windows
built from bool masks (``triu | tril``, a causal mask minus itself shifted, Xor), applied with ``masked_fill`` or
``torch.where``, stream exactly with both exporters.

The stream-start mask of a shifted tensor was a float ``Mul`` (``x * keep``), which a bool tensor does not have:
streamify failed inside with "rewritten graph fails ONNX shape inference/checker: ... Mul ... has unsupported type:
tensor(bool)". It is now a ``Where`` (``And`` for bool: ONNX Runtime has no bool Where), for every dtype
(:meth:`cosyedge.surgery.walker.Walker.mask_preroll`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosyedge.surgery import streamify
from tests.helpers import models_attention as ma
from tests.helpers.streams import chunked_equals_full
from tests.surgery.test_stream_start import EXPORTS, _export

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

W = 8
"""int: window of the banded attentions (frames, the query's own included)."""


class ShiftedBoolMask(nn.Module):
    """(N, 4, T) -> Conv1d(5, padding 2: two frames of look-ahead) -> a bool (N, 1, T) from the data, shifted two
    frames later twice (``F.pad`` of its uint8 cast, and ``cat`` of bool zeros), Or of both -> ``masked_fill(.., 0)``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(4, 4, 5, padding=2)

    def forward(self, x):
        h = self.c(x)
        m = h[:, :1] > 0
        by_pad = F.pad(m.to(torch.uint8), (2, 0))[..., :-2].bool()
        by_cat = torch.cat([torch.zeros(m.shape[0], 1, 2, dtype=torch.bool), m], -1)[..., :-2]
        return h.masked_fill(by_pad | by_cat, 0.0)


class BoolBand(ma._Proj):
    """Banded causal attention, query ``i`` sees keys ``i - W + 1 .. i``, its hidden set built from bool masks in one
    of several forms and applied as ``masked_fill(hidden, -inf)`` (``where``: ``torch.where(hidden, -inf, s)``)."""

    def __init__(self, form: str, **kw):
        super().__init__(**kw)
        self.form = form

    def attend(self, q, k, v, t):
        ones = torch.ones(t, t, dtype=torch.bool, device=q.device)
        causal = ones.tril()
        if self.form in ("triu_or_tril", "where"):
            hidden = ones.triu(1) | ones.tril(-W)
        elif self.form == "shifted":  # the causal mask minus itself shifted W frames down
            hidden = ~(causal & ~F.pad(causal, (0, 0, W, 0))[:t])
        elif self.form == "xor":
            hidden = ~(causal ^ ones.tril(-W))
        else:
            raise ValueError(self.form)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
        if self.form == "where":
            scores = torch.where(hidden, float("-inf"), scores)
        else:
            scores = scores.masked_fill(hidden, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


@pytest.mark.parametrize("dynamo,batch", EXPORTS)
def test_bool_mask_shifted_after_a_look_ahead_streams(tmp_path, dynamo, batch):
    src = _export(ShiftedBoolMask(), tmp_path / "m.onnx", (1, 4, 64), 2, dynamo, batch)
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert c.outputs[0].delay_frames == 2
    assert any(s.dtype == "bool" for s in c.states)  # the shifted mask's delay line
    x = np.random.default_rng(0).standard_normal((2 if batch == "N" else 1, 4, 1120)).astype(np.float32)
    assert chunked_equals_full(src, tmp_path / "m.stream.onnx", x, [1, 7, 160]) <= 1e-5


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("form", ["triu_or_tril", "shifted", "xor", "where"])
def test_banded_window_from_bool_masks_streams(tmp_path, form, dynamo):
    torch.manual_seed(0)
    src = ma.export(BoolBand(form).eval(), tmp_path / "b.onnx", dynamo=dynamo)
    c = streamify(src, tmp_path / "b.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert c.delay_samples == 0
    assert {"key", "value"} <= {s.kind for s in c.states}
    x = ma.speech_features(560)
    assert chunked_equals_full(src, tmp_path / "b.stream.onnx", x, [1, 7, 16]) <= 1e-4
