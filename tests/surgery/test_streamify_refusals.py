"""streamify refuses in one line: a full-sequence graph that is not finite on speech (named as such, not as
a stream mismatch), an output inside an engine folder; ``--frames-per-hop`` on a waveform model is bounded and said
to be ignored."""

from __future__ import annotations

import torch
from torch import nn
from tests.helpers.cli_errors import refused


class _Log(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(1, 1, 3)

    def forward(self, audio):
        return torch.log(self.c(nn.functional.pad(audio, (2, 0))))


def test_a_full_graph_that_gives_nan_on_speech_is_named(tmp_path, cli):
    src, out = tmp_path / "log.onnx", tmp_path / "log.stream.onnx"
    x = torch.rand(1, 1, 1600) + 0.5
    torch.onnx.export(_Log().eval(), (x,), str(src), input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}}, dynamo=False)
    rc, _o, err = cli("streamify", "-q", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", "160")
    assert rc == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"[!] {src}: the full-sequence graph itself gives NaN/Inf in output 'enhanced' on the "
                           "proof's real speech (")
    assert "nothing written" in line and not out.exists()


def test_streamify_never_writes_into_an_engine_folder(tmp_path, cli):
    from cosyedge.models import REFERENCE_STREAM_ONNX

    rc, _o, err = cli("build", "--onnx", REFERENCE_STREAM_ONNX, "-q", "-o", tmp_path / "e")
    assert rc == 0, err
    folder = next((tmp_path / "e").glob("*-fp32-onnxruntime"))
    before = (folder / "model.onnx").read_bytes()
    src = tmp_path / "log.onnx"
    torch.onnx.export(_Log().eval(), (torch.rand(1, 1, 1600) + 0.5,), str(src), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}}, dynamo=False)
    rc, _o, err = cli("streamify", src, "-o", folder / "model.onnx", "--sample-rate-hz", "16000", "--hop-samples", "160")
    line = refused(rc, err, 2)
    assert f"output -o {folder / 'model.onnx'} is inside the engine folder {folder}" in line
    assert (folder / "model.onnx").read_bytes() == before


def test_frames_per_hop_on_a_waveform_model_is_said_to_be_ignored(tmp_path, cli, warnings_seen):
    src, out = tmp_path / "log.onnx", tmp_path / "c.stream.onnx"

    from tests.models_torch import CausalTap3

    torch.onnx.export(CausalTap3().eval(), (torch.randn(1, 1, 1600),), str(src), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {2: "T"}, "enhanced": {2: "T"}}, dynamo=False)
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", "160",
                      "--frames-per-hop", "100000000")  # more frames than samples per hop: refused up front
    assert rc == 2 and "--frames-per-hop) 100000000 must be in 1..160" in err and not out.exists()
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", "160",
                      "--frames-per-hop", "4")
    assert rc == 0, err
    assert (f"{src}: frames_per_hop 4 ignored: input 'audio' [1, 1, 'T'] is a waveform, chunked in "
            "samples (160 per hop); frames_per_hop is for feature inputs") in [r.getMessage() for r in warnings_seen]
