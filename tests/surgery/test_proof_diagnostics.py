"""A quiet wrong model is refused (11), dynamo
exports whose value_info fixes the frame count prove (7), numeric arguments are bounded up front (6), a stride that
does not divide 64 is measured (10), waveforms without a channel axis (8)."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cosyedge.artifacts import StreamContract
from cosyedge.surgery import proof

HOP = 160


def _export(net: nn.Module, path, *, dims: int = 3, samples: int = 3200, dynamo: bool = False) -> None:
    """Export ``net`` (input (1, 1, T), or (1, T) when ``dims`` is 2, or (1, 2, T) when ``dims`` is 4 (stereo))
    with a dynamic time axis."""
    shape = {2: (1, samples), 3: (1, 1, samples), 4: (1, 2, samples)}[dims]
    axis = len(shape) - 1
    x = torch.zeros(*shape)
    torch.onnx.export(net.eval(), (x,), str(path), input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes=None if dynamo else {"audio": {axis: "T"}, "enhanced": {axis: "T"}},
                      dynamic_shapes=({axis: torch.export.Dim("T", min=HOP, max=10**6)},) if dynamo else None,
                      dynamo=dynamo, opset_version=17)


def _streamify(cli, src, out, *extra):
    return cli("streamify", "-q", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", str(HOP), *extra)


# ---------------------------------------------------------------- 11: a quiet wrong model
class _LengthScaled(nn.Module):
    """Analysis conv (stride one hop) -> scale by 1000 / T (depends on the chunk length: wrong when streamed) ->
    synthesis transposed conv; ``gain`` scales the output (1e-4: peak about 4e-6 on the demo speech)."""

    def __init__(self, gain: float):
        super().__init__()
        torch.manual_seed(0)
        self.gain = gain
        self.enc = nn.Conv1d(1, 8, 2 * HOP, stride=HOP)
        self.dec = nn.ConvTranspose1d(8, 1, 2 * HOP, stride=HOP)

    def forward(self, x):
        z = self.enc(F.pad(x, (HOP, 0)))
        return self.dec(z * (1000.0 / x.shape[-1]))[..., :-HOP] * self.gain


@pytest.mark.parametrize("gain", [1.0, 1e-4])
def test_a_chunk_length_dependent_model_is_refused_loud_or_quiet(tmp_path, cli, gain):
    """Before: the quiet one (full peak 3.7e-6, stream 400x louder) was 'proved' (exit 0, SNR -1.8 dB). The walker
    now evaluates every shape-only tensor at several chunk lengths, so the 1000 / T scale is refused by name before
    any proof runs, however quiet the output."""
    src, out = tmp_path / "scaled.onnx", tmp_path / "scaled.stream.onnx"
    _export(_LengthScaled(gain), src)
    rc, _out, err = _streamify(cli, src, out)
    assert rc == 2, err
    assert "cannot stream: 1 node blocks it: Mul node" in err
    assert "computed from the sequence length" in err and "a stream knows only its chunk's length" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_proof_refuses_a_quiet_stream_graph_that_is_wrong(tmp_path, cli):
    """The proof's second line of defence: a correct quiet stream graph (peak about 4e-6) made 1.5x louder after
    its output (max abs error far below an absolute 1e-4) fails, because the tolerance follows the output's level."""
    import numpy as np

    src, out = tmp_path / "quiet.onnx", tmp_path / "quiet.stream.onnx"
    _export(_QuietCausal(), src)
    rc, _out, err = _streamify(cli, src, out)
    assert rc == 0, err
    full, stream = onnx.load(str(src)), onnx.load(str(out))
    contract = StreamContract.from_onnx(out)
    g = stream.graph
    name = contract.stream_outputs[0].name
    producer = next(n for n in g.node if name in n.output)
    producer.output[list(producer.output).index(name)] = name + "_quiet"
    g.initializer.append(onnx.numpy_helper.from_array(np.array(1.5, np.float32), "loud"))
    g.node.append(onnx.helper.make_node("Mul", [name + "_quiet", "loud"], [name]))
    inputs = proof.proof_inputs(contract, 8 * HOP)
    facts = {name: (contract.stream_outputs[0].time_axis, 1, contract.stream_outputs[0].delay_frames)}
    right = proof.prove(full, onnx.load(str(out)), contract, inputs, [HOP], facts)
    wrong = proof.prove(full, stream, contract, inputs, [HOP], facts)
    assert right.ok and right.summary()["snr_db"] > 100
    peak = wrong.rows[0]["peak"]
    assert peak < 1e-4 and wrong.rows[0]["max_abs"] < 1e-4  # an absolute 1e-4 would have passed it
    assert not wrong.ok and wrong.summary()["snr_db"] < 10


def test_the_tolerance_is_relative_to_the_output_level():
    assert proof.tolerance(2.0, 1e-4) == pytest.approx(2e-4)
    assert proof.tolerance(0.5, 1e-4) == pytest.approx(5e-5)  # was 1e-4 (max(1, peak))
    assert proof.tolerance(3.7e-6, 1e-4) == pytest.approx(1e-7)  # the floor: 60 dB below full scale
    assert proof.tolerance(0.0, 1e-4) == pytest.approx(1e-7)


class _QuietCausal(nn.Module):
    """A correct streaming model with a quiet output: causal conv, gain 1e-4."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv1d(1, 4, 5)
        self.d = nn.Conv1d(4, 1, 3)

    def forward(self, x):
        return self.d(F.pad(torch.tanh(self.c(F.pad(x, (4, 0)))), (2, 0))) * 1e-4


def test_a_quiet_correct_model_still_proves(tmp_path, cli):
    src, out = tmp_path / "quiet.onnx", tmp_path / "quiet.stream.onnx"
    _export(_QuietCausal(), src)
    rc, _out, err = _streamify(cli, src, out)
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    assert c.proof["snr_db"] > 100


# ---------------------------------------------------------------- 7: dynamo exports whose value_info fixes the frames
from tests.models_torch import ConvGruGain as _ConvGruLinear  # noqa: E402  (the shared model)


@pytest.fixture(scope="module")
def dynamo_gru(tmp_path_factory):
    """A dynamo export of :class:`_ConvGruLinear` at 12 frames (960 samples): value_info holds (1, 12, 24) for the
    GRU and Linear outputs, the output is fixed at (1, 1, 960)."""
    path = tmp_path_factory.mktemp("dyn") / "gru.dy.onnx"
    torch.onnx.export(_ConvGruLinear().eval(), (torch.randn(1, 1, 960) * 0.1,), str(path), input_names=["audio"],
                      output_names=["enhanced"], dynamic_shapes=({2: 80 * torch.export.Dim("K", min=2, max=2000)},),
                      dynamo=True, opset_version=18)
    m = onnx.load(str(path))
    assert any([d.dim_value for d in v.type.tensor_type.shape.dim] == [1, 12, 24] for v in m.graph.value_info)
    return path


def test_a_dynamo_export_with_fixed_value_info_streams_and_proves(tmp_path, cli, dynamo_gru):
    """Before: exit 3, 'ONNX Runtime cannot run the full-sequence graph (Fail: [ONNXRuntimeError] ... Reshape node.
    Name:'gemm_input_reshape' ... requested shape:{12,24})' (about 400 characters, no path, no hint)."""
    out = tmp_path / "gru.stream.onnx"
    rc, _o, err = cli("streamify", "-q", dynamo_gru, "-o", out, "--sample-rate-hz", "8000", "--hop-samples", "80")
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    assert c.proof["max_abs"] < 1e-6 and c.proof["chunks_ticks"] == [80, 240]


def test_an_ort_failure_in_the_proof_is_one_line_with_the_path_and_a_hint(tmp_path, cli, dynamo_gru):
    """The proof's full-sequence run, given the export as it is (value_info kept): ONNX Runtime's fused Gemm reshape
    fails; the message is the fixed-length one (exit 2) with the path and the export hint, not ORT's 400 characters."""
    from cosyedge.errors import UsageError

    out = tmp_path / "gru.stream.onnx"
    assert cli("streamify", "-q", dynamo_gru, "-o", out, "--sample-rate-hz", "8000", "--hop-samples", "80")[0] == 0
    stream, c = onnx.load(str(out)), StreamContract.from_onnx(out)
    x = {"audio": proof.demo_audio(8000, 2400).reshape(1, 1, -1)}
    with pytest.raises(UsageError) as e:
        proof.prove(onnx.load(str(dynamo_gru)), stream, c, x, [80], {"enhanced": (2, 1, 0)}, where=str(dynamo_gru))
    msg = str(e.value)
    assert msg.startswith(f"{dynamo_gru}: the export fixed the time length (Reshape node 'gemm_input_reshape' asks "
                          "for shape {12,24} at any input length); export with a dynamic time axis: ")
    assert "onnxruntime_src" not in msg and "\n" not in msg


def test_ort_reason_keeps_the_node_and_the_status_message():
    text = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Name:'gemm_"
            "input_reshape' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:91 "
            "onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, onnxruntime::TensorShapeVector&"
            ", bool) input_shape_size == requested_shape_size was false. The input tensor cannot be reshaped to the "
            "requested shape. Input shape:{1,402,24}, requested shape:{12,24}\n")
    assert proof.ort_reason(RuntimeError(text)) == (
        "Reshape node 'gemm_input_reshape': The input tensor cannot be reshaped to the requested shape. Input "
        "shape:{1,402,24}, requested shape:{12,24}")
    assert proof.ort_reason(ValueError("first\nsecond")) == "ValueError: first"


# ---------------------------------------------------------------- 6: numeric arguments bounded up front
@pytest.mark.parametrize("args, line", [
    (["--sample-rate-hz", "1000000000000", "--hop-samples", "160"],
     "sample_rate_hz (--sample-rate-hz) 1000000000000 must be an integer in 1000..384000 Hz"),
    (["--sample-rate-hz", "999", "--hop-samples", "160"],
     "sample_rate_hz (--sample-rate-hz) 999 must be an integer in 1000..384000 Hz"),
    (["--sample-rate-hz", "16000", "--hop-samples", "10000000"],
     "hop_samples (--hop-samples) 10000000 must be an integer in 1..16000 samples (1 s at 16000 Hz)"),
    (["--sample-rate-hz", "16000", "--hop-samples", "160", "--delay-samples", "99999999999"],
     "delay_samples (--delay-samples) 99999999999 must be an integer in 0..160000 samples (10 s at 16000 Hz)"),
    (["--sample-rate-hz", "16000", "--hop-samples", "160", "--atol", "nan"],
     "atol (--atol) nan must be a finite number in (0, 1] (the proof tolerance, relative to the output's peak)"),
    (["--sample-rate-hz", "16000", "--hop-samples", "160", "--atol", "0"],
     "Invalid value for '--atol': 0.0 is not in the range 0<x<=1. (see 'cosyedge streamify --help')"),
])
def test_streamify_bounds_its_numbers_up_front(tmp_path, cli, args, line):
    """Before: a 1e12 Hz rate ended in a MemoryError traceback (exit 1), a 1e7 hop was OOM-killed, a 1e11 delay was
    written (exit 0) and refused later by run/build, atol nan gave exit 5 'differs'."""
    src, out = tmp_path / "quiet.onnx", tmp_path / "quiet.stream.onnx"
    _export(_QuietCausal(), src)
    rc, _o, err = cli("streamify", "-q", src, "-o", out, *args)
    assert (rc, err.strip().splitlines()) == (2, [f"[!] {line}"])
    assert not out.exists()


def test_the_bounds_also_hold_for_the_python_api(tmp_path):
    from cosyedge.errors import UsageError
    from cosyedge.surgery.streamify import streamify

    with pytest.raises(UsageError, match=r"^hop_samples \(--hop-samples\) 8001 must be an integer in 1..8000 "):
        streamify(tmp_path / "missing.onnx", tmp_path / "o.onnx", sample_rate_hz=8000, hop_samples=8001)
    with pytest.raises(UsageError, match=r"^atol \(--atol\) inf must be a finite number"):
        streamify(tmp_path / "missing.onnx", tmp_path / "o.onnx", sample_rate_hz=8000, hop_samples=80,
                  atol=float("inf"))


# ---------------------------------------------------------------- 10: strides that do not divide the probe quantum
class _Strided(nn.Module):
    """Encoder conv of stride ``s`` (kernel 2s, causal) -> 3-tap causal conv -> transposed conv of stride ``s``."""

    def __init__(self, s: int):
        super().__init__()
        torch.manual_seed(0)
        self.s = s
        self.enc = nn.Conv1d(1, 8, 2 * s, stride=s)
        self.mix = nn.Conv1d(8, 8, 3)
        self.dec = nn.ConvTranspose1d(8, 1, 2 * s, stride=s)

    def forward(self, x):
        z = torch.tanh(self.enc(F.pad(x, (self.s, 0))))
        return 0.5 * self.dec(self.mix(F.pad(z, (2, 0))))[..., :-self.s]


@pytest.mark.parametrize("s, hop, line", [
    (3, 160, "hop_samples 160 is not a multiple of the model's total stride 3 samples (use 159, or 480 to keep a "
             "multiple of 160)"),
    (3, 1600, "hop_samples 1600 is not a multiple of the model's total stride 3 samples (use 1599, or 4800 to keep a "
              "multiple of 1600)"),
    (256, 160, "hop_samples 160 is not a multiple of the model's total stride 256 samples (use 256, or 1280 to keep "
               "a multiple of 160)"),
])
def test_a_stride_not_dividing_the_probes_is_measured(tmp_path, cli, s, hop, line):
    """Before: stride 3 read as 'total stride 1600 (use 1600)' at hop 160 and '8000 (use 8000)' at hop 1600;
    stride 256 as '800 (use 800)'."""
    src = tmp_path / "strided.onnx"
    _export(_Strided(s), src, samples=3 * 512)
    rc, _o, err = cli("streamify", "-q", src, "-o", tmp_path / "o.onnx", "--sample-rate-hz", "16000",
                      "--hop-samples", str(hop))
    assert (rc, err.strip().splitlines()) == (2, [f"[!] {line}"])


@pytest.mark.parametrize("hop", [159, 480])
def test_the_suggested_hops_prove(tmp_path, cli, hop):
    src, out = tmp_path / "s3.onnx", tmp_path / "s3.stream.onnx"
    _export(_Strided(3), src, samples=3 * 512)
    rc, _o, err = cli("streamify", "-q", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", str(hop))
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    assert c.total_stride == 3 and c.proof["max_abs"] < 1e-5


# ---------------------------------------------------------------- 8: waveforms without a channel axis
class _Waveform2d(nn.Module):
    """(N, T) or (N, 2, T) (``stereo``) waveform in and out through :class:`_LengthScaled`-like analysis/synthesis
    (stride one hop, no length dependence)."""

    def __init__(self, stereo: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.stereo = stereo
        c = 2 if stereo else 1
        self.enc = nn.Conv1d(c, 8, 2 * HOP, stride=HOP)
        self.dec = nn.ConvTranspose1d(8, c, 2 * HOP, stride=HOP)

    def forward(self, x):
        y = self.dec(self.enc(F.pad(x if self.stereo else x[:, None], (HOP, 0))))[..., :-HOP]
        return y if self.stereo else y[:, 0]


@pytest.mark.parametrize("stereo, shape", [(True, "['N', 2, 'T']")])
def test_a_waveform_without_a_channel_axis_names_frames_per_hop(tmp_path, cli, stereo, shape):
    """Before: only 'graph output ... does not grow with the input length (... math.ceil/int ...)' (exit 2), which
    sent the user to the export; --frames-per-hop 160 streams it. A mono (N, T) waveform now streams as (N, 1, T)
    without an option (tests/surgery/test_refusal_reasons.py)."""
    src, out = tmp_path / "w.onnx", tmp_path / "w.stream.onnx"
    torch.onnx.export(_Waveform2d(stereo).eval(), (torch.zeros(1, 2, 3200) if stereo else torch.zeros(1, 3200),),
                      str(src), input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes={n: {0: "N", 2 if stereo else 1: "T"} for n in ("audio", "enhanced")},
                      dynamo=False, opset_version=17)
    rc, _o, err = _streamify(cli, src, out)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1
    assert lines[0].endswith(f"; note: input 'audio' {shape} was read as features at 1 frame per hop (only (N, 1, T) "
                             "is read as a waveform, and (N, T) when --frames-per-hop is not given): if it is a "
                             "waveform (N, T) or (N, channels, T), give --frames-per-hop 160 (its samples per hop)")
    rc, _o, err = _streamify(cli, src, out, "--frames-per-hop", "160")
    assert rc == 0, err
    assert StreamContract.from_onnx(out).proof["max_abs"] < 1e-5


@pytest.mark.parametrize("axis", ["2", "-1"])
def test_time_axis_given_on_a_mono_waveform_keeps_it_a_waveform(tmp_path, cli, axis):
    """Before: --time-axis audio=2 on an (N, 1, T) model of stride 16 read it as features: 'frames_per_hop 1 is not
    a multiple of the model's total stride 16 frames (use 16)' (exit 2)."""
    src, out = tmp_path / "s16.onnx", tmp_path / "s16.stream.onnx"
    _export(_Strided(16), src)
    rc, _o, err = _streamify(cli, src, out, "--time-axis", f"audio={axis}")
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    assert (c.inputs[0].kind, c.inputs[0].frames_per_hop, c.total_stride) == ("audio", 160, 16)
