"""ONNX Runtime's default INT8 (ort_matmul) quantizes one-step GRUs as dynamic INT8 cells; ``--exclude`` may name a GRU
to keep it float. A model whose only layers of that form are GRUs and 1x1 convs, all excluded, stays ort_matmul (every
layer float, nothing calibrated), as the user asked. Before, ort_matmul "found no layer of its form" there, the build
took the trt placement with the GRU still in --exclude, and trt refused it in one misleading line: "--exclude
'/gru/GRU' is not a quantizable op" (exit 2)."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

HOP = 160


class _ConvGru(nn.Module):
    """Conv (1 -> 16, stride 160, float: reads the audio) -> 1x1 conv -> GRU(16, 16) -> ConvTranspose (16 -> 1)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Conv1d(1, 16, 2 * HOP, stride=HOP)
        self.mid = nn.Conv1d(16, 16, 1)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.dec = nn.ConvTranspose1d(16, 1, 2 * HOP, stride=HOP)

    def forward(self, audio):
        h = torch.relu(self.mid(torch.relu(self.enc(nn.functional.pad(audio, (HOP, 0))))))
        h, _ = self.gru(h.transpose(1, 2))
        return self.dec(h.transpose(1, 2))[..., :audio.shape[-1]]


@pytest.fixture(scope="module")
def gru_full(tmp_path_factory):
    full = tmp_path_factory.mktemp("grux") / "gru.onnx"
    torch.onnx.export(_ConvGru().eval(), (torch.zeros(1, 1, 16 * HOP),), str(full), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}},
                      dynamo=False, opset_version=17)
    return full


def _stream(full, hop):
    from cosyedge.surgery.streamify import streamify

    out = full.with_name(f"gru{hop}.stream.onnx")
    streamify(full, out, sample_rate_hz=16000, hop_samples=hop)
    return out


@pytest.fixture(scope="module")
def gru_stream(gru_full):
    return _stream(gru_full, HOP)


def test_excluding_every_gru_and_conv_keeps_ort_matmul_and_calibrates_nothing(gru_stream, tmp_path, monkeypatch):
    from cosyedge.precision.int8 import int8_onnx

    monkeypatch.setenv("COSYEDGE_CALIB_DIR", str(tmp_path / "calib"))
    graph = onnx.load(str(gru_stream)).graph
    nodes = {n.op_type: n.name for n in graph.node if n.op_type == "GRU"}
    mid = [n.name for n in graph.node if n.name.startswith("/mid/")][0]
    rep = int8_onnx(gru_stream, tmp_path / "q.onnx", exclude=(nodes["GRU"], mid), placement="ort_matmul",
                    fallback_placement="trt")
    assert rep["placement"] == "ort_matmul" and rep["placement_note"] is None
    assert rep["calibrated"] is False and rep["quantized_nodes"] == []
    assert nodes["GRU"] in rep["excluded_nodes"] and mid in rep["excluded_nodes"]
    assert not (tmp_path / "calib").exists()
    # one GRU excluded, the conv left: ort_matmul quantizes the conv (as before)
    rep = int8_onnx(gru_stream, tmp_path / "r.onnx", exclude=(nodes["GRU"],), placement="ort_matmul",
                    fallback_placement="trt")
    assert rep["placement"] == "ort_matmul" and rep["calibrated"] is False
    assert [n.split("/batched_")[0] for n in rep["quantized_nodes"]] == [mid]  # its MatMul form


def test_excluding_a_gru_that_is_no_cell_falls_back_to_trt_without_refusing_it(gru_full, tmp_path):
    """At two frames per call (hop 320) nothing has the ort_matmul form (no one-step GRU, 2-frame convs): the build
    takes trt, where the excluded GRU is float anyway; it was passed on to trt's --exclude, which refused it."""
    from cosyedge.precision.int8 import int8_onnx
    from tests.precision import int8_fixtures as fx

    src = _stream(gru_full, 2 * HOP)
    gru = [n.name for n in onnx.load(str(src)).graph.node if n.op_type == "GRU"][0]
    rep = int8_onnx(src, tmp_path / "q.onnx", calib=fx.small_calibration_set(tmp_path), exclude=(gru,),
                    placement="ort_matmul", fallback_placement="trt")
    assert rep["placement"] == "trt" and rep["placement_requested"] == "ort_matmul" and rep["calibrated"] is True
    assert [n for n in rep["quantized_nodes"] if n.startswith("/mid/")] and gru not in rep["quantized_nodes"]
