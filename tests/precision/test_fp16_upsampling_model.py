"""A (N, 1, T) -> (N, 1, 2T) model (bandwidth extension) built with --int8 but was
refused by --fp16 ("its output is not a waveform"); the FP16 accuracy scan now streams any output, so both build."""

from __future__ import annotations

import json
import re

import torch
from torch import nn
from torch.nn import functional as F


class _Upsample2(nn.Module):
    def __init__(self, hop=160, c=8):
        super().__init__()
        torch.manual_seed(0)
        self.hop = hop
        self.enc = nn.Conv1d(1, c, 2 * hop, stride=hop)
        self.dec = nn.ConvTranspose1d(c, 1, 4 * hop, stride=2 * hop)

    def forward(self, x):
        return 0.3 * self.dec(torch.tanh(self.enc(F.pad(x, (self.hop, 0)))))[..., : -2 * self.hop]


def test_fp16_builds_a_model_whose_output_runs_at_twice_the_rate(tmp_path, cli):
    src, stream = tmp_path / "up2.onnx", tmp_path / "up2.stream.onnx"
    x = torch.randn(1, 1, 1600) * 0.1
    torch.onnx.export(_Upsample2().eval(), (x,), str(src), input_names=["audio"], output_names=["wide"],
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "wide": {0: "N", 2: "T2"}}, dynamo=False)
    rc, _o, err = cli("streamify", "-q", src, "-o", stream, "--sample-rate-hz", "16000", "--hop-samples", "160")
    assert rc == 0, err
    rc, _o, err = cli("build", "--onnx", stream, "--fp16", "--backend", "onnxruntime", "-o", tmp_path / "e")
    assert rc == 0, err
    snr = float(re.search(r"output SNR ([0-9.]+) dB vs FP32", err).group(1))
    assert snr > 60.0, err
    manifest = json.loads((tmp_path / "e" / "up2-fp16-onnxruntime" / "manifest.json").read_text())
    assert manifest["precision"] == "fp16"
