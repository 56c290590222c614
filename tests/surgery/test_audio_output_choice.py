"""A graph with two waveform outputs (a mask and the enhanced signal) must not have
'run' write the mask without a word: streamify picks the estimate, warns naming both, and --audio-output chooses."""

from __future__ import annotations

import numpy as np
import soundfile as sf
import torch
from torch import nn

from cosyedge.artifacts import StreamContract
from tests.helpers.cli_errors import one_error_line


class _MaskAndEnhanced(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(1, 1, 3)

    def forward(self, audio):
        mask = torch.sigmoid(self.c(nn.functional.pad(audio, (2, 0))))
        return mask, mask * audio


def _export(path):
    x = torch.randn(1, 1, 1600) * 0.1
    torch.onnx.export(_MaskAndEnhanced().eval(), (x,), str(path), input_names=["audio"],
                      output_names=["mask", "enhanced"], dynamo=False,
                      dynamic_axes={"audio": {2: "T"}, "mask": {2: "T"}, "enhanced": {2: "T"}})


def test_two_waveform_outputs_stream_the_estimate_and_say_so(tmp_path, cli, warnings_seen):
    src, out = tmp_path / "two.onnx", tmp_path / "two.stream.onnx"
    _export(src)
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    rc, _o, err = cli("streamify", src, "-o", out, *sr)
    assert rc == 0, err
    assert StreamContract.from_onnx(out).output == "enhanced"
    msgs = [r.getMessage() for r in warnings_seen]
    assert (f"{src}: 2 waveform outputs ['mask', 'enhanced']; 'run' writes 'enhanced' (choose another with "
            "--audio-output NAME)") in msgs

    # run writes the enhanced signal (mask * input), not the mask
    x = (0.3 * np.sin(np.arange(4800) / 7.0)).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 16000, subtype="FLOAT")
    rc, _o, err = cli("run", "-q", tmp_path / "in.wav", "-o", tmp_path / "o.wav", "--engine", out)
    assert rc == 0, err
    y, _sr = sf.read(tmp_path / "o.wav", dtype="float32")
    assert np.all(np.abs(y) <= np.abs(x) + 1.5 / 32768)  # |mask * x| <= |x|; the mask itself is ~0.5 where x ~ 0
    assert float(np.abs(y[np.abs(x) < 1e-3]).max()) < 2e-3

    # --audio-output chooses, without a warning
    warnings_seen.clear()
    out2 = tmp_path / "mask.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out2, *sr, "--audio-output", "mask")
    assert rc == 0, err
    assert StreamContract.from_onnx(out2).output == "mask"
    assert not [r for r in warnings_seen if "waveform outputs" in r.getMessage()]


def test_audio_output_that_is_not_an_output_is_exit_2(tmp_path, cli):
    src, out = tmp_path / "two.onnx", tmp_path / "two.stream.onnx"
    _export(src)
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", "160",
                      "--audio-output", "nope")
    assert rc == 2
    assert f"--audio-output 'nope' is not an output of {src}" in one_error_line(err)
    assert not out.exists()


class _NoiseAndSpeech(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(1, 1, 3)

    def forward(self, audio):
        noise = self.c(nn.functional.pad(audio, (2, 0)))
        return noise, audio - noise


def test_a_noise_estimate_is_not_taken_for_the_speech_and_an_empty_name_is_refused(tmp_path, cli, warnings_seen):
    src, out = tmp_path / "ns.onnx", tmp_path / "ns.stream.onnx"
    x = torch.randn(1, 1, 1600) * 0.1
    torch.onnx.export(_NoiseAndSpeech().eval(), (x,), str(src), input_names=["audio"],
                      output_names=["noise_est", "speech"], dynamo=False,
                      dynamic_axes={"audio": {2: "T"}, "noise_est": {2: "T"}, "speech": {2: "T"}})
    sr = ["--sample-rate-hz", "16000", "--hop-samples", "160"]
    rc, _o, err = cli("streamify", src, "-o", out, *sr)
    assert rc == 0, err
    assert StreamContract.from_onnx(out).output == "speech"
    assert any("'run' writes 'speech'" in r.getMessage() for r in warnings_seen)
    rc, _o, err = cli("streamify", src, "-o", tmp_path / "e.stream.onnx", *sr, "--audio-output", "")
    assert rc == 2
    assert f"--audio-output '' is not an output of {src}" in one_error_line(err)
