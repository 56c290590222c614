"""Precision on a streamed attention model (waveform in and out, a KV cache inside).

FP16 keeps the Softmax, its inputs (the score MatMul, the chunk mask's arithmetic) in FP32, outputs stay finite on
speech, silence and full scale, SNR vs FP32 high; INT8 quantizes the four projections (q, k, v, out) and leaves the
score MatMul, the Softmax, the weights @ values MatMul and the cache Concat in float; `compare` passes both; the
Triton repository carries the key, value and position (int64) states as implicit states; StreamPool keeps caches
and positions per stream (joins at different ticks, a reused slot); the TensorRT profile comes from the contract.
"""

from __future__ import annotations

import json

import numpy as np

import onnx
import pytest

from tests.precision import int8_fixtures as fx

torch = pytest.importorskip("torch")
nn = torch.nn
HOP = 160


class _AttnEnhancer(nn.Module):
    """Conv encoder (1 -> 32, window 320, hop 160, causal) -> sliding-window attention (16 frames) -> sigmoid mask ->
    ConvTranspose decoder."""

    def __init__(self, d=32, window=16, rope=False):
        super().__init__()
        torch.manual_seed(0)
        self.w, self.rope = window, rope
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d)))
        self.enc = nn.Conv1d(1, d, 2 * HOP, stride=HOP)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.dec = nn.ConvTranspose1d(d, 1, 2 * HOP, stride=HOP)

    def forward(self, audio):
        h = self.enc(nn.functional.pad(audio, (HOP, 0)))
        z = h.transpose(1, 2)
        i = torch.arange(z.shape[1])
        d = i[:, None] - i[None, :]
        q, k = self.q(z), self.k(z)
        if self.rope:  # rotate-half RoPE from arange(T)
            ang = torch.outer(i.float(), self.inv_freq)
            cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
            half = lambda x: torch.cat([-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]], -1)  # noqa: E731
            q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
        s = (q @ k.transpose(1, 2) / 5.0).masked_fill(~((d >= 0) & (d < self.w)), float("-inf"))
        y = self.o(torch.softmax(s, -1) @ self.v(z))
        return self.dec(torch.sigmoid(y).transpose(1, 2) * h)[..., HOP:HOP + audio.shape[-1]]


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    from cosyedge.surgery.streamify import streamify

    d = tmp_path_factory.mktemp("attn")
    full = d / "attn.onnx"
    torch.onnx.export(_AttnEnhancer().eval(), (torch.zeros(1, 1, 16 * HOP),), str(full), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                      dynamo=False, opset_version=17)
    out = d / "attn.stream.onnx"
    c = streamify(full, out, sample_rate_hz=16000, hop_samples=HOP)
    assert sorted(s.kind for s in c.states) == ["context", "key", "overlap", "position", "value"]
    return out


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    return fx.small_calibration_set(tmp_path_factory.mktemp("calib"))


def _report(folder, key):
    return json.loads((folder / "manifest.json").read_text())["reports"][key]


def test_fp16_keeps_softmax_and_the_mask_in_fp32(stream, tmp_path, cli):
    rc, out, err = cli("build", "--onnx", stream, "--fp16", "--backend", "onnxruntime", "-o", tmp_path / "eng")
    assert rc == 0, err
    folder = tmp_path / "eng" / "attn-fp16-onnxruntime"
    rep = _report(folder, "fp16")
    kept = rep["fp32_nodes"]
    assert "Softmax" in rep["keep_fp32_ops"]
    assert kept["/MatMul"] == "input of Softmax"  # the score MatMul
    assert any("attention_mask" in n for n in kept)  # the chunk mask's arithmetic
    assert all(s["finite"] for s in rep["scan"]) and {s["signal"] for s in rep["scan"]} >= {"speech", "silence",
                                                                                             "full_scale"}
    assert rep["snr_db_vs_fp32"] > 60
    m = onnx.load(str(folder / "model.onnx"))
    soft = [n for n in m.graph.node if n.op_type == "Softmax"]
    assert len(soft) == 1
    rc, out, err = cli("compare", stream, folder)
    assert rc == 0 and "PASS: fp16" in out, out + err


def test_fp16_keeps_rope_angles_in_fp32(tmp_path, cli):
    """RoPE's angles (positions x inv_freq, cos, sin) are computed from the int64 position counter alone: they stay
    FP32 (float16 holds integers exactly only up to 2048, so a stream past 20 s would lose its positions); the
    position counter is cast to float32, never float16; the join with the data (q * cos) may be FP16."""
    from cosyedge.surgery.streamify import streamify

    full = tmp_path / "rope.onnx"
    torch.onnx.export(_AttnEnhancer(rope=True).eval(), (torch.zeros(1, 1, 16 * HOP),), str(full),
                      input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}}, dynamo=False,
                      opset_version=17)
    streamify(full, tmp_path / "rope.stream.onnx", sample_rate_hz=16000, hop_samples=HOP)
    rc, out, err = cli("build", "--onnx", tmp_path / "rope.stream.onnx", "--fp16", "--backend", "onnxruntime",
                       "-o", tmp_path / "eng")
    assert rc == 0, err
    folder = tmp_path / "eng" / "rope-fp16-onnxruntime"
    kept = _report(folder, "fp16")["fp32_nodes"]
    m = onnx.load(str(folder / "model.onnx"))
    trig = [n for n in m.graph.node if n.op_type in ("Cos", "Sin")]
    assert trig and all(kept.get(n.name) == "positions" for n in trig), [(n.name, kept.get(n.name)) for n in trig]
    producer = {o: n for n in m.graph.node for o in n.output}
    for n in trig:  # walk back to the Cast of the int64 positions: it casts to FLOAT (1), not FLOAT16 (10)
        stack, casts = list(n.input), []
        while stack:
            p = producer.get(stack.pop())
            if p is None:
                continue
            if p.op_type == "Cast":
                casts.append(next(a.i for a in p.attribute if a.name == "to"))
            stack.extend(p.input)
        assert casts and 10 not in casts, casts


def test_int8_quantizes_the_projections_only(stream, calib, tmp_path, cli):
    rc, out, err = cli("build", "--onnx", stream, "--int8", "--calib", calib, "--backend", "onnxruntime",
                       "-o", tmp_path / "eng")
    assert rc == 0, err
    folder = tmp_path / "eng" / "attn-int8-onnxruntime"
    rep = _report(folder, "int8")
    assert sorted(rep["quantized_nodes"]) == ["/k/MatMul", "/o/MatMul", "/q/MatMul", "/v/MatMul"]
    m = onnx.load(str(folder / "model.onnx"))
    producer = {o: n for n in m.graph.node for o in n.output}
    for n in m.graph.node:  # Softmax, the score and value MatMuls and the cache Concats read float, not DQ outputs
        if n.op_type in ("Softmax", "Concat") or (n.op_type == "MatMul" and n.name not in rep["quantized_nodes"]):
            assert all(producer.get(i) is None or producer[i].op_type != "DequantizeLinear" for i in n.input), n.name
    rc, out, err = cli("compare", stream, folder)
    assert rc == 0 and "PASS: int8" in out, out + err


def test_triton_repository_carries_the_caches_as_implicit_states(stream, tmp_path, cli):
    rc, out, err = cli("build", "--onnx", stream, "--backend", "triton", "-o", tmp_path / "eng")
    assert rc == 0, err
    cfg = (tmp_path / "eng" / "attn-fp32-triton" / "attn" / "config.pbtxt").read_text()
    m = onnx.load(str(stream))
    states = json.loads({p.key: p.value for p in m.metadata_props}["cosyedge.state"])
    for s in states:
        assert f'input_name: "{s["input"]}"' in cfg
    pos = next(s for s in states if s["kind"] == "position")
    block = cfg[cfg.index(f'input_name: "{pos["input"]}"'):][:200]
    assert "TYPE_INT64" in block


def test_streampool_keeps_caches_and_positions_per_stream(stream):
    """Streams that join at different ticks (one reusing a freed slot) share batches; each equals its solo run, so the
    key/value caches and the position counter are per stream, and a reused slot starts from zeros."""
    from tests.helpers.streams import session_outputs, staggered_pool_outputs

    chunk, n = HOP, 60
    rng = np.random.default_rng(7)
    xs = [(0.1 * rng.standard_normal(n * chunk)).astype(np.float32) for _ in range(3)]
    starts = {0: 0, 1: 11, 2: 45}  # stream 2 joins after stream 0 left (at tick 40): it reuses slot 0
    ends = {0: 40, 1: 11 + n, 2: 45 + n}
    got, batches = staggered_pool_outputs(stream, xs, chunk, starts, ends, max_streams=2)
    assert batches > 30
    solo = session_outputs(stream, [xs[0][:40 * chunk], xs[1], xs[2]], chunk)
    for k in range(3):
        y = got[k]
        assert y.shape == solo[k].shape
        assert np.abs(y - solo[k]).max() < 1e-5, k


def test_tensorrt_profile_comes_from_the_contract(stream):
    """The TensorRT optimization profile (built from the contract, no TensorRT needed) gives every cache its exact
    shape with only N ranging, and the position counter (N, 1)."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.builders.trt import check_onnx_against_profile, profile_from_contract

    m = onnx.load(str(stream))
    c = StreamContract.from_onnx(m)
    prof = profile_from_contract(c, max_batch=8, opt_batch=2)
    check_onnx_against_profile(m, c, prof)
    for s in c.states:
        mn, opt, mx = prof[s.input]
        assert mn == tuple([1] + s.shape[1:]) and opt == tuple([2] + s.shape[1:]) and mx == tuple([8] + s.shape[1:])
    key = next(s for s in c.states if s.kind == "key")
    assert key.shape == ["N", 32, 15]  # K^T (N, d, T): 15 frames of a 16-frame window
    pos = next(s for s in c.states if s.kind == "position")
    assert pos.shape == ["N", 1] and pos.dtype == "int64"
