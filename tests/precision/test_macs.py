"""An INT8 build says which share of the MACs per chunk runs in INT8, names the float
ops (a GRU included), warns below 50 % and records it in the manifest (``reports.int8.macs``)."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest
import torch
from torch import nn

from cosyedge.artifacts import StreamContract, sha256_file
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.macs import count_macs, mac_share, share_line
from tests.precision import int8_fixtures as fx

HOP = 160


class _BigGru(nn.Module):
    """Conv (1 -> 32, stride 160) -> 1x1 conv -> GRU(32, 128) -> 1x1 conv -> ConvTranspose (32 -> 1, stride 160).

    MACs per 160-sample chunk (one frame): enc 32*320 = 10240 (float: reads the audio), mid 32*32 = 1024 (INT8),
    GRU 3*128*(32+128) = 61440 (float), proj 128*32 = 4096 (INT8), dec 32*320 = 10240 (float: 1 output channel):
    87040 in all, 5120 in INT8 (5.88 %).
    """

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Conv1d(1, 32, 2 * HOP, stride=HOP)
        self.mid = nn.Conv1d(32, 32, 1)
        self.gru = nn.GRU(32, 128, batch_first=True)
        self.proj = nn.Conv1d(128, 32, 1)
        self.dec = nn.ConvTranspose1d(32, 1, 2 * HOP, stride=HOP)

    def forward(self, audio):
        h = torch.relu(self.enc(nn.functional.pad(audio, (HOP, 0))))
        h = torch.relu(self.mid(h))
        h, _ = self.gru(h.transpose(1, 2))
        y = self.dec(torch.relu(self.proj(h.transpose(1, 2))))
        return y[..., :audio.shape[-1]]


@pytest.fixture(scope="module")
def gru_stream(tmp_path_factory):
    from cosyedge.surgery.streamify import streamify

    d = tmp_path_factory.mktemp("macs")
    full = d / "gru.onnx"
    torch.onnx.export(_BigGru().eval(), (torch.zeros(1, 1, 16 * HOP),), str(full), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}},
                      dynamo=False, opset_version=17)
    out = d / "gru.stream.onnx"
    streamify(full, out, sample_rate_hz=16000, hop_samples=HOP)
    return out


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    return fx.small_calibration_set(tmp_path_factory.mktemp("calib"))


def _fake_amax(model_path, folder):
    """An amax cache of ``model_path`` with every activation amax 1.0: the Q/DQ structure (what the MAC share
    counts) does not depend on the calibrated values, so no calibration is needed."""
    from cosyedge.precision.qdq import activation_tensors

    m = onnx.load(str(model_path))
    p = folder / "fake.amax.json"
    p.write_text(json.dumps({"amax": {t: 1.0 for t in activation_tensors(m)},
                             "model": {"sha256": sha256_file(model_path), "name": "x"},
                             "calibration": {"manifest_sha256": "0" * 64, "utterances": 0}}))
    return p


def test_counts_per_op_of_the_gru_model(gru_stream):
    m = onnx.load(str(gru_stream))
    rows = [(r.name, r.op, r.macs, r.quantized) for r in count_macs(m, StreamContract.from_onnx(m))]
    assert rows == [("/enc/Conv", "Conv", 10240, False), ("/mid/Conv", "Conv", 1024, False),
                    ("/gru/GRU", "GRU", 61440, False), ("/proj/Conv", "Conv", 4096, False),
                    ("/dec/ConvTranspose", "ConvTranspose", 10240, False)]  # FP32: nothing behind DequantizeLinear
    assert mac_share(m, StreamContract.from_onnx(m))["share"] == 0.0


def test_int8_build_of_a_big_gru_model_reports_a_low_share_and_warns(gru_stream, calib, tmp_path, cli,
                                                                    warnings_seen):
    """The trt placement (TensorRT's rules; GRUs stay float): most MACs float, a warning. (ONNX Runtime's default,
    ort_matmul, quantizes the one-step GRU as a dynamic INT8 cell.)"""
    rc, out, err = cli("build", "--onnx", gru_stream, "--int8", "--int8-placement", "trt", "--calib", calib,
                       "--backend", "onnxruntime", "-o", tmp_path / "eng")
    assert rc == 0, err
    folder = tmp_path / "eng" / "gru-int8-trt-onnxruntime"
    macs = json.loads((folder / "manifest.json").read_text())["reports"]["int8"]["macs"]
    assert (macs["total"], macs["quantized"], macs["chunk_samples"]) == (87040, 5120, 160)
    assert macs["share"] == pytest.approx(5120 / 87040)
    assert [(f["op"], f["macs"]) for f in macs["float_ops"]] == [("GRU", 61440), ("Conv", 10240),
                                                                  ("ConvTranspose", 10240)]
    line = [r.getMessage() for r in warnings_seen if r.getMessage().startswith("INT8 covers")]
    assert line == ["INT8 covers 5.9 % of the 87 k MACs per chunk of 160 samples; float: GRU '/gru/GRU' (61.4 k MACs), "
                    "Conv '/enc/Conv' (10.2 k MACs), ConvTranspose '/dec/ConvTranspose' (10.2 k MACs) (below 50 %: "
                    "most of this INT8 build runs in float)"]


def test_the_bundled_reference_int8_share_and_manifest(tmp_path, warnings_seen):
    """The trt placement's share (its float first/last convs and the spectrum MatMul)."""
    from cosyedge.builders import build_engine
    from cosyedge.builders.config import BuildConfig, Calibration

    src = tmp_path / "reference.stream.onnx"
    shutil.copy(REFERENCE_STREAM_ONNX, src)
    folder = build_engine(src, backend="onnxruntime", out_dir=tmp_path / "eng", config=BuildConfig(
        precision="int8", calibration=Calibration(amax=_fake_amax(src, tmp_path)), placement="trt"))
    macs = json.loads((folder / "manifest.json").read_text())["reports"]["int8"]["macs"]
    assert macs["total"] == 1354624 and macs["chunk_samples"] == 160
    assert macs["share"] == pytest.approx(0.520, abs=0.005)  # measured: 52.0 % (FP32 Convs at both ends, a MatMul)
    assert macs["share"] == macs["quantized"] / macs["total"]
    assert {f["op"] for f in macs["float_ops"]} == {"Conv", "MatMul"}
    assert not [r for r in warnings_seen if r.getMessage().startswith("INT8 covers")]  # >= 50 %: no warning
    m = onnx.load(str(folder / "model.onnx"))
    assert share_line(mac_share(m, StreamContract.from_onnx(m))).startswith(
        "INT8 covers 52.0 % of the 1.35 M MACs per chunk of 160 samples; float: Conv '/lw_analysis/conv/Conv' "
        "(262 k MACs)")
