"""Attention masks are measured and classified from their values, never from names.

Pure numpy cases of :func:`cosyedge.surgery.masks.classify` (banded, chunked with n left chunks, unlimited forms, full,
other patterns, length-dependent patterns), then small attention models through ``cosyedge streamify``: the contract
records the attention site, the key/value caches and the state bytes; ``--attention-window`` bounds an unlimited
causal mask with the deviation reported; a chunked mask refuses a hop that is not a multiple of its chunk naming it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from cosyedge.surgery.masks import UNLIMITED, Pattern, classify, classify_one
from tests.helpers.cli_errors import one_error_line

torch = pytest.importorskip("torch")
nn = torch.nn


def _band(n, w):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (i - j >= 0) & (i - j < w)


def _chunks(n, c, left):
    ci, cj = np.arange(n)[:, None] // c, np.arange(n)[None, :] // c
    return (cj <= ci) & ((cj >= ci - left) if left >= 0 else True)


@pytest.mark.parametrize("w", [1, 2, 16, 250])
def test_banded_window_is_measured(w):
    p = classify([_band(700, w), _band(1100, w)])
    assert p == Pattern("banded", window=w)
    assert p.cache_frames == w - 1 and p.lookahead_frames == 0 and p.bounded


@pytest.mark.parametrize("c,left", [(4, 2), (25, 1), (16, 0), (50, 3)])
def test_chunked_with_left_chunks_is_measured(c, left):
    p = classify([_chunks(700, c, left), _chunks(1100, c, left)])
    assert p == Pattern("chunked", chunk=c, left=left)
    assert p.cache_frames == c * left and p.lookahead_frames == c - 1 and p.bounded


def test_unlimited_forms_are_named_and_bounded_by_a_window():
    causal = classify([_band(700, 700), _band(1100, 1100)])
    assert causal.kind == "causal" and not causal.bounded
    assert causal.bound(32) == Pattern("banded", window=32)
    chunked = classify([_chunks(700, 4, -1), _chunks(1100, 4, -1)])
    assert chunked == Pattern("chunked", chunk=4, left=UNLIMITED) and not chunked.bounded
    assert chunked.bound(32) == Pattern("chunked", chunk=4, left=8)


def test_a_window_longer_than_the_short_length_is_read_at_the_long_one():
    # 800 frames: causal at 701 frames, banded at 1103: one pattern, banded 800
    assert classify([_band(701, 800), _band(1103, 800)]) == Pattern("banded", window=800)
    assert classify([_band(701, 2000), _band(1103, 2000), _band(2207, 2000), _band(4409, 2000)]) == \
        Pattern("banded", window=2000)


def test_chunks_counted_from_the_sequence_end_are_refused():
    def end_chunks(n, c=4, left=2):
        ci = (np.arange(n) + (-n) % c) // c
        return (ci[None, :] <= ci[:, None]) & (ci[None, :] >= ci[:, None] - left)

    p = classify([end_chunks(701), end_chunks(1103)])
    assert p.kind == "other" and not p.bounded


def test_full_other_and_length_dependent_patterns_are_refused_by_name():
    assert classify_one(np.ones((50, 50), bool)).kind == "none"
    strided = _band(64, 64) & ((np.arange(64)[:, None] - np.arange(64)[None, :]) % 2 == 0)
    p = classify_one(strided)
    assert p.kind == "other" and "row 63 sees 32 scattered keys" in p.describe()
    blind = _band(32, 4) & ~np.eye(32, dtype=bool)
    assert "does not see its own frame" in classify_one(blind).describe()
    # a window that grows with the length (W = T / 2) is not one pattern
    p = classify([_band(700, 350), _band(1100, 550)])
    assert p.kind == "other" and "changes with the sequence length" in p.describe()


class _Attn(nn.Module):
    """One head, (N, T, C): scores masked by ``mask(T)``, softmax over keys, @ values."""

    def __init__(self, mask, d=8):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.mask = mask

    def forward(self, x):
        t = x.shape[1]
        s = self.q(x) @ self.k(x).transpose(1, 2)
        s = s.masked_fill(~self.mask(t), float("-inf"))
        return torch.softmax(s, -1) @ self.v(x)


def _tril(t):
    return torch.ones(t, t).tril().bool()


def _chunk4(t):
    c = torch.arange(t) // 4
    return (c[None, :] <= c[:, None]) & (c[None, :] >= c[:, None] - 1)


def _export(model, path):
    torch.onnx.export(model, (torch.randn(1, 30, 8),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}}, dynamo=False, opset_version=17)
    return path


def _meta(path):
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_cli_window_bounds_unlimited_causal_attention_and_reports_the_deviation(tmp_path, cli):
    src = _export(_Attn(_tril), tmp_path / "causal.onnx")
    rc, out, err = cli("streamify", str(src), str(tmp_path / "no.onnx"), "--sample-rate-hz", "16000", "--hop-samples",
                       "160")
    assert rc == 2
    line = one_error_line(err)
    assert "causal with unlimited left context" in line and "--attention-window" in line
    assert not (tmp_path / "no.onnx").exists()
    rc, out, err = cli("streamify", str(src), str(tmp_path / "w.onnx"), "--sample-rate-hz", "16000", "--hop-samples",
                       "160", "--attention-window", "12")
    assert rc == 0, err
    meta = _meta(tmp_path / "w.onnx")
    att = json.loads(meta["cosyedge.attention"])
    assert att[0]["pattern"].startswith("banded causal (sliding window of 12 frames)")
    assert att[0]["cache_frames"] == 11 and "unlimited" in att[0]["bounded_from"]
    proof = json.loads(meta["cosyedge.proof"])
    assert proof["max_abs"] < 1e-5
    dev = proof["attention_window"]
    assert dev["frames"] == [12] and dev["snr_db_vs_original"] < 60 and dev["max_abs_vs_original"] > 1e-3  # differs
    assert "not the original model" in err
    states = json.loads(meta["cosyedge.state"])
    kinds = sorted(s["kind"] for s in states)
    assert kinds == ["key", "position", "value"]
    key = next(s for s in states if s["kind"] == "key")
    assert key["shape"] == ["N", 8, 11]  # K^T (N, d, T): 11 cached frames
    assert int(meta["cosyedge.state_bytes"]) == 2 * 8 * 11 * 4 + 8
    assert f"state per stream: {2 * 8 * 11 * 4 + 8} bytes" in err


def test_cli_chunked_attention_needs_a_hop_of_whole_chunks(tmp_path, cli):
    src = _export(_Attn(_chunk4), tmp_path / "chunk.onnx")
    rc, out, err = cli("streamify", str(src), str(tmp_path / "c.onnx"), "--sample-rate-hz", "16000", "--hop-samples",
                       "160", "--frames-per-hop", "2")
    assert rc == 2
    line = one_error_line(err)
    assert "not a multiple of the model's total stride 4 frames" in line and "chunks of 4 frames" in line
    rc, out, err = cli("streamify", str(src), str(tmp_path / "c.onnx"), "--sample-rate-hz", "16000", "--hop-samples",
                       "160", "--frames-per-hop", "8")
    assert rc == 0, err
    att = json.loads(_meta(tmp_path / "c.onnx")["cosyedge.attention"])
    assert att[0]["cache_frames"] == 4 and att[0]["lookahead_frames"] == 3
    assert "chunked (chunks of 4 frames, 1 left chunk)" in att[0]["pattern"]
