"""Issue 38 item 5: precision on a streamed attention model (waveform in and out, a KV cache inside).

FP16 keeps the Softmax, its inputs (the score MatMul, the chunk mask's arithmetic) in FP32, outputs stay finite on
speech, silence and full scale, SNR vs FP32 high; INT8 quantizes the four projections (q, k, v, out) and leaves the
score MatMul, the Softmax, the weights @ values MatMul and the cache Concat in float; `compare` passes both; the
Triton repository carries the key, value and position (int64) states as implicit states.
"""

from __future__ import annotations

import json

import onnx
import pytest

from tests.precision import int8_fixtures as fx

torch = pytest.importorskip("torch")
nn = torch.nn
HOP = 160


class _AttnEnhancer(nn.Module):
    """Conv encoder (1 -> 32, window 320, hop 160, causal) -> sliding-window attention (16 frames) -> sigmoid mask ->
    ConvTranspose decoder."""

    def __init__(self, d=32, window=16):
        super().__init__()
        torch.manual_seed(0)
        self.w = window
        self.enc = nn.Conv1d(1, d, 2 * HOP, stride=HOP)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.dec = nn.ConvTranspose1d(d, 1, 2 * HOP, stride=HOP)

    def forward(self, audio):
        h = self.enc(nn.functional.pad(audio, (HOP, 0)))
        z = h.transpose(1, 2)
        i = torch.arange(z.shape[1])
        d = i[:, None] - i[None, :]
        s = (self.q(z) @ self.k(z).transpose(1, 2) / 5.0).masked_fill(~((d >= 0) & (d < self.w)), float("-inf"))
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
    from cosyedge.precision.calibset import make_calibration_set

    d = tmp_path_factory.mktemp("calib")
    return make_calibration_set(d / "calib", from_dir=fx.write_recordings(d / "rec", count=16, seconds=1.0)).folder


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
