"""streamify says the true reason: a ``lengths`` input that feeds a key-padding mask is refused for what it is (a
stream has no total length), not for lacking a time axis; an (N, T) waveform streams as (N, 1, T) instead of being
read as features and blamed on an output that "does not grow"; a graph that runs only at its trace length is
accepted only with one warning line naming the repair the proof ran on, and refused when the repair changes results.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cosyedge.artifacts import StreamContract
from cosyedge.errors import UsageError
from tests.helpers.cli_errors import refused

torch = pytest.importorskip("torch")

from tests.models_torch import WaveformNoChannel  # noqa: E402  (imports torch)

SR = 16000
EXPORTERS = [pytest.param(False, id="torchscript"), pytest.param(True, id="dynamo")]


def _streamify(cli, src, out, *extra, hop: int = 160):
    """``cosyedge streamify SRC -o OUT --sample-rate-hz 16000 --hop-samples HOP EXTRA...`` -> (rc, stdout, stderr)."""
    return cli("streamify", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", hop, *extra)


def _full(path, feeds: dict) -> np.ndarray:
    """The full-sequence graph ``path`` run once in ONNX Runtime: its first output."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


# ---------------------------------------------------------------- a lengths input: a stream has no total length
@pytest.mark.parametrize("dynamo", [pytest.param(False, id="torchscript"),
                                    pytest.param(True, id="dynamo", marks=pytest.mark.slow)])  # its export: ~17 s
def test_a_lengths_input_feeding_a_padding_mask_is_refused_for_the_length_it_needs(dynamo, tmp_path, cli):
    """WeNet's ``forward(xs, xs_lens)`` with ``~make_pad_mask(xs_lens)``: exit 2, one line saying that 'lengths' is a
    length per sequence feeding a padding mask and that a stream has no total length, with both fixes (no lengths
    input, or lengths from x.shape[1]); not the old 'has no symbolic axis ... give --time-axis lengths=AXIS'."""
    import tests.helpers.models_attention as M

    _, _, ax, _ = M.MODELS["wenet_lengths"]
    src = M.export(M.build("wenet_lengths"), tmp_path / "lengths.onnx", M.example_input(ax, lengths=True),
                   dynamo=dynamo, time_axis=ax)
    out = tmp_path / "lengths.stream.onnx"
    line = refused(*_streamify(cli, src, out, "--frames-per-hop", 4, hop=640)[::2], 2)
    assert "input 'lengths' (int64 ['N']) is a length per sequence compared with positions along time" in line
    assert "a stream has no total length" in line and "export without the 'lengths' input and its mask" in line
    assert "lengths computed from the input's shape (x.shape[1])" in line
    assert "--time-axis" not in line and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_the_lengths_model_exported_with_lengths_from_the_shape_streams(dynamo, tmp_path, cli):
    """The fix the refusal above names: :class:`WenetShapeLengths` (lengths = x.shape[1], the padding mask all True)
    streams; OrtStreamSession at 8 frames per push equals its full graph (1e-4) after the contract's delay."""
    import tests.helpers.models_attention as M
    from cosyedge.runtime.ort import OrtStreamSession

    _, _, ax, _ = M.MODELS["wenet_lengths"]
    torch.manual_seed(0)
    model = M.randomize_constants(M.WenetShapeLengths(pos="abs"), torch.Generator().manual_seed(1)).eval()
    src = M.export(model, tmp_path / "shape_lengths.onnx", M.example_input(ax), dynamo=dynamo, time_axis=ax)
    out = tmp_path / "shape_lengths.stream.onnx"
    rc, _o, err = _streamify(cli, src, out, "--frames-per-hop", 4, hop=640)
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    x = M.speech_features(96, ax, n=1)  # (1, 96, 16) log band energies of real speech
    want = _full(src, {"x": x})
    with OrtStreamSession(out, chunk_samples=640 * 2) as s:  # 8 frames per push
        got = np.concatenate([s.push({"x": np.ascontiguousarray(x[:, i:i + 8])})["y"].copy()
                              for i in range(0, 96, 8)], axis=1)
    d = c.outputs[0].delay_frames
    assert float(np.abs(got[:, d:] - want[:, :96 - d]).max()) <= 1e-4


def test_an_input_with_only_a_batch_axis_is_named_as_one_value_per_sequence(tmp_path, cli):
    """A float gain per sequence (N,) beside the waveform (N, 1, T): exit 2, 'one value per sequence, not a stream',
    not the '--time-axis gain=AXIS' advice (it has no axis to name)."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Unsqueeze", ["gain", "axes"], ["g3"]), helper.make_node("Mul", ["x", "g3"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, ["N", 1, "T"]), vi("gain", TensorProto.FLOAT, ["N"])],
                          [vi("y", TensorProto.FLOAT, ["N", 1, "T"])],
                          [helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])])
    src, out = tmp_path / "gain.onnx", tmp_path / "gain.stream.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(src))
    line = refused(*_streamify(cli, src, out)[::2], 2)
    assert "input 'gain' (float32 ['N']) has no axis but the batch: one value per sequence" in line
    assert "--time-axis" not in line and not out.exists()


# ---------------------------------------------------------------- an (N, T) waveform streams like (N, 1, T)
def _export_nt(path, dynamo: bool):
    """Export :class:`WaveformNoChannel` with input ``audio`` (N, T) and output ``enhanced`` (N, T), N and T
    dynamic."""
    x = torch.randn(2, 3200) * 0.1
    with torch.no_grad():
        if dynamo:
            shapes = ({0: torch.export.Dim("N"), 1: 160 * torch.export.Dim("K", min=2, max=2000)},)
            torch.onnx.export(WaveformNoChannel().eval(), (x,), str(path), input_names=["audio"],
                              output_names=["enhanced"], dynamic_shapes=shapes, dynamo=True, external_data=False)
        else:
            axes = {n: {0: "N", 1: "T"} for n in ("audio", "enhanced")}
            torch.onnx.export(WaveformNoChannel().eval(), (x,), str(path), input_names=["audio"],
                              output_names=["enhanced"], dynamic_axes=axes, dynamo=False, opset_version=17)
    return path


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_an_n_t_waveform_streams_as_a_waveform_and_runs(dynamo, tmp_path, cli):
    """(N, T) -> (N, T): streamed as (N, 1, T) in samples without an option (info line says so), kind audio in and
    out; OrtStreamSession at 160 and 480 samples and ``cosyedge run`` equal the full graph on the (N, T) samples;
    with --frames-per-hop 1 it is read as features as before and refused with the note naming --frames-per-hop."""
    import soundfile as sf

    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.surgery import proof

    src, out = _export_nt(tmp_path / "nt.onnx", dynamo), tmp_path / "nt.stream.onnx"
    rc, _o, err = _streamify(cli, src, out)
    assert rc == 0, err
    assert "is a waveform without a channel axis: streamed as (N, 1, T) in samples" in err
    c = StreamContract.from_onnx(out)
    assert c.is_audio and c.stream_inputs[0].shape == ["N", 1, "T"] and c.stream_outputs[0].shape == ["N", 1, "T"]
    x = proof.demo_audio(SR, 4800).reshape(1, -1)
    want = _full(src, {"audio": x})
    for chunk in (160, 480):
        with OrtStreamSession(out, chunk_samples=chunk) as s:
            got = np.concatenate([s.push(np.ascontiguousarray(x[:, None, i:i + chunk]))["enhanced"].copy()
                                  for i in range(0, x.shape[-1], chunk)], axis=-1)
        assert float(np.abs(got.reshape(-1) - want.reshape(-1)).max()) <= 1e-5, chunk
    wav, enh = tmp_path / "in.wav", tmp_path / "out.wav"
    sf.write(wav, x.reshape(-1), SR, subtype="FLOAT")
    rc, _o, err = cli("run", "-q", wav, "-o", enh, "--engine", out)
    assert rc == 0, err
    got, sr = sf.read(enh, dtype="float32")
    assert sr == SR and float(np.abs(got - want.reshape(-1)).max()) <= 1.5 / 32768
    line = refused(*_streamify(cli, src, tmp_path / "f.stream.onnx", "--frames-per-hop", 1)[::2], 2)
    assert "was read as features at 1 frame per hop" in line and "give --frames-per-hop 160" in line


# ---------------------------------------------------------------- a graph that runs only at its trace length
def test_a_graph_that_runs_only_at_its_trace_length_is_accepted_with_one_line_naming_the_repair(tmp_path, cli,
                                                                                               warnings_seen):
    """The dynamo export of :class:`tests.models_torch.ConvGruGain` at 960 samples fails in ONNX Runtime at other
    lengths; streamify proves a repaired copy (value_info dropped, output length made symbolic): exit 0 with exactly
    one warning line that names both repairs, the trace length and the copy's error there; the contract's proof
    records it; the stream equals the full graph at the trace length."""
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.surgery import proof

    from tests.models_torch import export_in_child

    src, out = tmp_path / "gru.onnx", tmp_path / "gru.stream.onnx"
    export_in_child(f"torch.onnx.export(ConvGruGain().eval(), (torch.randn(1, 1, 960) * 0.1,), {str(src)!r}, "
                    "input_names=['audio'], output_names=['enhanced'], dynamo=True, opset_version=18, "
                    "dynamic_shapes=({2: 80 * torch.export.Dim('K', min=2, max=2000)},))")
    rc, _o, err = _streamify(cli, src, out, hop=80)
    assert rc == 0, err
    lines = [r.getMessage() for r in warnings_seen if "trace length" in r.getMessage()]
    assert len(lines) == 1 and len([r for r in warnings_seen if str(src) in r.getMessage()]) == 1, lines
    assert "the graph as exported runs only at its trace length (960 samples)" in lines[0]
    assert "the proof ran on a repaired copy (dropped the exporter's intermediate shapes (value_info" in lines[0]
    assert "output 'enhanced' had its time axis 2 fixed at 960 by the export" in lines[0]
    assert "equal to the export at 960 samples (max abs error 0)" in lines[0]
    rec = StreamContract.from_onnx(out).proof["repaired"]
    assert rec["runs_only_at_ticks"] == 960 and rec["max_abs_vs_export"] == 0.0
    x = proof.demo_audio(8000, 960).reshape(1, 1, -1)
    want = _full(src, {"audio": x})
    with OrtStreamSession(out, chunk_samples=240) as s:
        got = np.concatenate([s.push(np.ascontiguousarray(x[..., i:i + 240]))["enhanced"].copy()
                              for i in range(0, 960, 240)], axis=-1)
    assert float(np.abs(got - want).max()) <= 1e-5


def _scale_graph(length: int | str, scale: float):
    """x (1, 1, length) float32 -> y = scale * x, opset 13."""
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g",
                          [vi("x", TensorProto.FLOAT, [1, 1, length])], [vi("y", TensorProto.FLOAT, [1, 1, length])],
                          [helper.make_tensor("k", TensorProto.FLOAT, [], [scale])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_repair_that_changes_results_is_refused():
    """:func:`check_repaired_copy` with a copy that computes 3x where the export (fixed at 640 samples) computes 2x:
    UsageError (exit 2) naming the trace length, the repair and the error; the same copy of 2x passes, returning
    the record."""
    from types import SimpleNamespace

    from cosyedge.artifacts import StreamIO
    from cosyedge.errors import UsageError
    from cosyedge.surgery.streamify import check_repaired_copy

    io = StreamIO("x", ["N", 1, "T"], "float32", 2, 160, 0, "audio")
    out = StreamIO("y", ["N", 1, "T"], "float32", 2, 160, 0, "audio")
    contract = StreamContract(input="x", output="y", sample_rate_hz=SR, hop_samples=160, total_stride=1,
                              delay_samples=0, states=[], name="m", inputs=[io], outputs=[out])
    sg = SimpleNamespace(repairs=[("input", "x", 2, 640)], probe_ticks=(512, 517), walker=SimpleNamespace(facts={}),
                         original_model=_scale_graph("T", 3.0))
    with pytest.raises(UsageError) as e:
        check_repaired_copy(_scale_graph(640, 2.0), sg, contract, where="m.onnx")
    msg = str(e.value)
    assert msg.startswith("m.onnx: the graph as exported runs only at its trace length (640 samples; at ")
    assert "the copy streamify repaired (input 'x' had its time axis 2 fixed at 640 by the export) differs from it " \
           "there (output 'y' max abs error" in msg and msg.endswith("nothing written")
    sg.original_model = _scale_graph("T", 2.0)
    rec = check_repaired_copy(_scale_graph(640, 2.0), sg, contract, where="m.onnx")
    assert rec == {"repairs": ["input 'x' had its time axis 2 fixed at 640 by the export"], "runs_only_at_ticks": 640,
                   "max_abs_vs_export": 0.0}


class _LengthFactor(torch.nn.Module):
    """(N, T, C): ``lin(x) * ((T % 2 == 1) | (T > 100))``: a factor computed from the length that is 1 at both probe
    lengths and at the proof's chunks of 1 and 3 frames, 0 at a chunk of 2."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        t = x.shape[1]
        return self.lin(x) * ((t % 2 == 1) | (t > 100)).float()


def test_a_factor_computed_from_the_length_is_refused_not_proved_by_luck(tmp_path):
    """A value without a time axis computed from the sequence length multiplies the stream: refused naming it and its
    value at a chunk of 2 frames (the probes and the proof's chunk lengths all give the full graph's value)."""
    from cosyedge.surgery import streamify

    src = tmp_path / "lf.onnx"
    torch.onnx.export(_LengthFactor().eval(), (torch.randn(1, 100, 8),), str(src), input_names=["x"],
                      output_names=["y"], dynamo=False, opset_version=17,
                      dynamic_axes={"x": {0: "N", 1: "T"}, "y": {0: "N", 1: "T"}})
    with pytest.raises(UsageError, match=r"which is computed from the sequence length: \[0\.0\] at a chunk of 2 frames, "
                                         r"\[1\.0\] on the whole sequence"):
        streamify(src, tmp_path / "lf.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not (tmp_path / "lf.stream.onnx").exists()


class _BatchMix(torch.nn.Module):
    """Waveform (N, 1, T): a causal conv, then ``h - h.mean(0)`` (a statistic over the batch)."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv1d(1, 1, 3)

    def forward(self, x):
        h = self.c(torch.nn.functional.pad(x, (2, 0)))
        return h - h.mean(0, keepdim=True)


def test_a_model_that_mixes_the_batch_rows_is_refused(tmp_path):
    """A symbolic-batch model whose rows see each other would mix StreamPool's users: streamify refuses it (exit 5)
    naming the batch statistic; nothing is written."""
    from cosyedge.errors import AccuracyError
    from cosyedge.surgery import streamify

    src = tmp_path / "mix.onnx"
    torch.onnx.export(_BatchMix().eval(), (torch.randn(2, 1, 640),), str(src), input_names=["audio"],
                      output_names=["enhanced"], dynamo=False, opset_version=17,
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}})
    with pytest.raises(AccuracyError, match="the model mixes the streams of a batch: output 'enhanced' row 0 .*"
                                            "a statistic over the batch"):
        streamify(src, tmp_path / "mix.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert not (tmp_path / "mix.stream.onnx").exists()
