"""Chunked attention below its chunk: a hop shorter than the attention's chunk is refused with a message that names
both ways to stream it (a hop of whole chunks with no delay, or one frame per hop with ``chunk - 1`` frames of
delay per attention layer, ``attention_per_frame=True`` / ``--attention-per-frame``); both stream exactly.

The model: (N, T, 8) features -> Conv1d(stride 2) front end -> one attention head whose mask is WeNet's chunk mask
(chunks of 4 frames, one left chunk) -> Linear. Both exporters, symbolic batch.
"""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.surgery import streamify
from tests.helpers.streams import chunked_equals_full
from tests.surgery.test_stream_start import _export

torch = pytest.importorskip("torch")
nn = torch.nn

CHUNK = 4
"""int: the attention's chunk (frames at half the input's rate)."""


class StridedChunkAttention(nn.Module):
    """(N, T, 8) -> causal Conv1d(8, 8, 2, stride 2) -> (N, T/2, 8) -> single-head attention masked to chunks of
    :data:`CHUNK` frames with one left chunk (``masked_fill(~mask, -inf)``) -> Linear."""

    def __init__(self, d: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.front = nn.Conv1d(d, d, 2, stride=2)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        h = self.front(x.transpose(1, 2)).transpose(1, 2)
        c = torch.arange(h.shape[1]) // CHUNK
        mask = (c[None, :] <= c[:, None]) & (c[None, :] >= c[:, None] - 1)
        s = (self.q(h) @ self.k(h).transpose(1, 2)).masked_fill(~mask, float("-inf"))
        return self.o(torch.softmax(s, -1) @ self.v(h))


@pytest.mark.parametrize("dynamo", [False, True])
def test_hop_below_the_chunk_names_both_choices_and_whole_chunks_stream(tmp_path, dynamo):
    src = _export(StridedChunkAttention(), tmp_path / "a.onnx", (1, 64, 8), 1, dynamo, "N")
    with pytest.raises(UsageError) as err:  # one attention frame (2 input frames) per hop
        streamify(src, tmp_path / "a1.onnx", sample_rate_hz=16000, hop_samples=320, frames_per_hop=2)
    line = str(err.value)
    assert "not a multiple of the model's total stride 8 frames (use 8)" in line
    assert f"chunks of {CHUNK} frames at 1/2 of the input's rate" in line
    assert f"a hop of whole chunks ({CHUNK} frames), which streams it with no delay" in line
    assert f"one frame per hop, where each query waits for the end of its chunk: {CHUNK - 1} frames of delay per " \
        "chunked attention layer (give --attention-per-frame" in line
    c = streamify(src, tmp_path / "a8.onnx", sample_rate_hz=16000, hop_samples=1280, frames_per_hop=8)
    assert c.delay_samples == 0
    x = np.random.default_rng(0).standard_normal((2, 320, 8)).astype(np.float32)
    assert chunked_equals_full(src, tmp_path / "a8.onnx", x, [8, 16, 40]) <= 1e-5


@pytest.mark.parametrize("dynamo,batch", [(False, "N"), (True, "N"), (False, 1), (True, 1), (False, 2), (True, 2)])
def test_per_frame_chunked_attention_waits_for_the_chunk_end(tmp_path, dynamo, batch):
    src = _export(StridedChunkAttention(), tmp_path / "a.onnx", (1, 64, 8), 1, dynamo, batch)
    c = streamify(src, tmp_path / "a2.onnx", sample_rate_hz=16000, hop_samples=320, frames_per_hop=2,
                  attention_per_frame=True)
    assert c.total_stride == 320 and c.outputs[0].delay_frames == CHUNK - 1  # one attention frame per hop
    assert c.proof["lookahead"]["measured_samples"] == c.delay_samples == (CHUNK - 1) * 320
    key = next(s for s in c.states if s.kind == "key")
    assert key.shape[-1] == CHUNK + 2 * (CHUNK - 1)  # one left chunk, and the queries' lag on both sides
    x = np.random.default_rng(0).standard_normal((1 if batch == 1 else 2, 336, 8)).astype(np.float32)
    assert chunked_equals_full(src, tmp_path / "a2.onnx", x, [2, 6, 16]) <= 1e-5


@pytest.mark.parametrize("name,time_axis", [("wenet_conformer_rel", 1), ("nemo_fastconformer_chunked_abs", 2)])
def test_per_frame_conformer_pays_the_chunk_per_layer(tmp_path, name, time_axis):
    """Two chunked layers (chunks of 4, two left chunks) at one frame per hop: 3 frames of delay per layer (6), while
    the model looks 3 frames ahead (whole chunks of 4 keep 0 delay); exact at chunks of 1, 7 and 16 frames."""
    from tests.helpers import models_attention as ma

    src = ma.export(ma.build(name), tmp_path / "c.onnx", example=ma.example_input(time_axis, 64), time_axis=time_axis)
    c = streamify(src, tmp_path / "c1.onnx", sample_rate_hz=16000, hop_samples=160, attention_per_frame=True)
    assert c.outputs[0].delay_frames == 2 * (CHUNK - 1)
    assert c.proof["lookahead"]["measured_samples"] == (CHUNK - 1) * 160
    assert chunked_equals_full(src, tmp_path / "c1.onnx", ma.speech_features(336, time_axis), [1, 7, 16]) <= 1e-5


def test_cli_attention_per_frame(tmp_path, cli):
    import json

    import onnx

    src = _export(StridedChunkAttention(), tmp_path / "a.onnx", (1, 64, 8), 1, False, "N")
    out = tmp_path / "a.stream.onnx"
    rc, _, err = cli("streamify", src, str(out), "--sample-rate-hz", "16000", "--hop-samples", "320",
                     "--frames-per-hop", "2", "--attention-per-frame")
    assert rc == 0, err
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    att = json.loads(meta["cosyedge.attention"])
    assert att[0]["per_frame_lead_frames"] == CHUNK - 1 and att[0]["delay_frames"] == CHUNK - 1
