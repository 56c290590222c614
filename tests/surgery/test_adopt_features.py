"""adopt on graphs that take one frame of features per call: an already-streaming encoder over (N, 1, F) mel frames
with its caches is read as features (time axis 1, one frame per hop) from facts of the graph, not as a waveform
block of F samples; where both readings run, adopt refuses and names both choices.

The graphs are :class:`tests.models_torch.MelFrameStreamer` (a cached causal conv over frames, then a GRU), exported
with both torch exporters, with a symbolic and a fixed batch; the features are log band energies of real speech.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyedge.artifacts import StreamContract

torch = pytest.importorskip("torch")

SR, HOP, BANDS = 16000, 160, 16
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


def _graph(tmp_path: Path, *, dynamo: bool, batch: int | None, hidden: int = 24) -> Path:
    """Export a seeded :class:`MelFrameStreamer` over ``BANDS`` features: inputs mel (B, 1, 16), cache_conv
    (B, 16, 2), cache_gru (1, B, hidden); B symbolic ``N`` (``batch`` None) or fixed."""
    from tests.models_torch import MelFrameStreamer, export_in_child, export_one_frame

    path = tmp_path / f"mel_{'dynamo' if dynamo else 'ts'}_{batch or 'N'}.onnx"
    if dynamo:  # a dynamo GRU export poisons later ones in this process (export_in_child)
        export_in_child(f"torch.manual_seed(3); export_one_frame(MelFrameStreamer(feats={BANDS}, hidden={hidden}), "
                        f"{str(path)!r}, dynamo=True, batch={batch!r})")
        return path
    torch.manual_seed(3)
    export_one_frame(MelFrameStreamer(feats=BANDS, hidden=hidden), path, dynamo=dynamo, batch=batch)
    return path


def loop_by_hand(path: Path, mel: np.ndarray) -> np.ndarray:
    """The exported graph run by hand, one frame per call with its caches fed back (zeros at the start), each
    stream at batch 1: mel float32 (B, T, F) -> enc float32 (B, T, H)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shapes = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in sess.get_inputs()}
    res = []
    for b in range(mel.shape[0]):
        cc = np.zeros(shapes["cache_conv"], np.float32)
        cg = np.zeros(shapes["cache_gru"], np.float32)
        ys = []
        for t in range(mel.shape[1]):
            y, cc, cg = sess.run(None, {"mel": mel[b:b + 1, t:t + 1], "cache_conv": cc, "cache_gru": cg})
            ys.append(y)
        res.append(np.concatenate(ys, axis=1))
    return np.concatenate(res, axis=0)


def stream(path: Path, mel: np.ndarray, frames: int) -> np.ndarray:
    """mel float32 (B, T, F) pushed through an OrtStreamSession ``frames`` frames (hops) per chunk -> enc (B, T', H)
    (T' = whole chunks of T)."""
    from cosyedge.runtime.ort import OrtStreamSession

    b = mel.shape[0]
    with OrtStreamSession(path, chunk_samples=frames * HOP, batch=b) as s:
        return np.concatenate([s.push({"mel": np.ascontiguousarray(mel[:, i:i + frames])})["enc"].copy()
                               for i in range(0, mel.shape[1] - frames + 1, frames)], axis=1)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("batch", [None, 1], ids=["batch-N", "batch-1"])
def test_one_frame_of_mel_per_call_is_adopted_as_features_and_streams_exactly(dynamo, batch, tmp_path, cli):
    """(N, 1, 16) mel frames at a 160-sample hop (16 < 160: no waveform block) are adopted without --time-axis as
    features (time axis 1, one frame per hop); OrtStreamSession at 1 and 3 frames per chunk, batch 1 and 2, equals
    the graph run by hand frame by frame (max abs error <= 1e-6)."""
    from tests.helpers.models_attention import speech_features

    src = _graph(tmp_path, dynamo=dynamo, batch=batch)
    out = tmp_path / "enc.stream.onnx"
    rc, _o, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP)
    assert rc == 0, err
    assert "read as one frame of 16 features per call (time axis 1, one frame per hop)" in err
    assert "does not tell" not in err  # the caches' symbolic N is the batch of 'mel': told, not guessed
    c = StreamContract.from_onnx(out)
    (mel_io,) = c.stream_inputs
    assert (mel_io.name, mel_io.kind, mel_io.time_axis, mel_io.frames_per_hop) == ("mel", "features", 1, 1)
    assert not c.audio_in and c.proof["max_abs"] <= 1e-6
    mel = speech_features(48, time_axis=1, n=2)  # (2, 48, 16): two streams of real speech
    want = loop_by_hand(src, mel)
    for frames in (1, 3):
        got = stream(out, mel[:1], frames)
        assert got.shape == want[:1].shape and float(np.abs(got - want[:1]).max()) <= 1e-6, frames
    two = stream(out, mel, 3)
    assert float(np.abs(two - want).max()) <= 1e-6


def test_run_on_an_audio_file_refuses_the_features_model_in_one_line(tmp_path, cli):
    """``cosyedge run`` on a WAV with an adopted one-frame features model: exit 2, one line, nothing written."""
    from tests.helpers.cli_errors import refused

    out = tmp_path / "enc.stream.onnx"
    rc, _o, err = cli("adopt", _graph(tmp_path, dynamo=False, batch=None), "-o", out, "--sample-rate-hz", SR,
                      "--hop-samples", HOP)
    assert rc == 0, err
    rc, _o, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "o.wav", "--engine", out)
    line = refused(rc, err, 2)
    assert "cannot run on an audio file" in line and not (tmp_path / "o.wav").exists()


def test_a_frame_of_at_least_a_hop_is_refused_naming_both_readings_and_either_option_adopts(tmp_path, cli):
    """(N, 1, 16) at a 16-sample hop is a one-hop waveform block or a frame of 16 features; its output (N, 1, 8) is
    no waveform at the hop: exit 2 naming --time-axis mel=1 and --frame-samples 16, nothing written; with
    --time-axis mel=1 it is adopted as features (exact), with --frame-samples 16 as a waveform block. With an output
    (N, 1, 24), more than the hop, the refusal names --time-axis mel=1 as well."""
    from tests.helpers.cli_errors import refused
    from tests.helpers.models_attention import speech_features

    src = _graph(tmp_path, dynamo=False, batch=None, hidden=8)
    out = tmp_path / "enc.stream.onnx"
    base = ("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", BANDS)
    line = refused(*cli(*base)[::2], 2)
    assert "is a waveform block of 16 samples (one hop) or one frame of 16 features per call" in line
    assert "--time-axis mel=1" in line and "--frame-samples 16" in line and not out.exists()
    rc, _o, err = cli(*base, "--time-axis", "mel=1")
    assert rc == 0, err
    c = StreamContract.from_onnx(out)
    assert c.stream_inputs[0].kind == "features" and c.stream_inputs[0].time_axis == 1
    mel = speech_features(12, time_axis=1, n=1)
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(out, chunk_samples=4 * BANDS) as s:
        got = np.concatenate([s.push({"mel": np.ascontiguousarray(mel[:, i:i + 4])})["enc"].copy()
                              for i in range(0, 12, 4)], axis=1)
    assert float(np.abs(got - loop_by_hand(src, mel)).max()) <= 1e-6
    rc, _o, err = cli(*base, "--frame-samples", BANDS)
    assert rc == 0, err
    assert StreamContract.from_onnx(out).audio_in  # a waveform in; its output (N, 1, 8) stays features
    wide = _graph(tmp_path, dynamo=False, batch=None, hidden=24)
    line = refused(*cli("adopt", wide, "-o", tmp_path / "w.onnx", "--sample-rate-hz", SR, "--hop-samples",
                        BANDS)[::2], 2)
    assert "output 'enc' gives 24 samples per call" in line and "--time-axis mel=1" in line


def test_a_waveform_block_shorter_than_the_hop_names_both_fixes(tmp_path, cli):
    """A 2-D block (N, 16) at a 160-sample hop cannot be a waveform block of the hop nor carries a time axis:
    exit 2 naming --hop-samples 16 and, for one frame of features, an (N, 1, 16) export with --time-axis."""
    import onnx
    from onnx import TensorProto, helper

    from tests.helpers.cli_errors import refused

    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    nodes = [helper.make_node("Add", ["x", "h_in"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", ["N", 16]), vi("h_in", ["N", 16])], [vi("y", ["N", 16]),
                                                                                     vi("h_out", ["N", 16])])
    src = tmp_path / "flat.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(src))
    line = refused(*cli("adopt", src, "-o", tmp_path / "o.onnx", "--sample-rate-hz", SR, "--hop-samples", HOP)[::2],
                   2)
    assert "takes 16 samples per call" in line and "give --hop-samples 16 if it is a waveform block" in line
    assert "export it as (N, 1, 16) and give --time-axis x=1" in line


def test_a_fixed_batch_of_two_is_refused_in_one_line(tmp_path, cli):
    """The encoder exported at a fixed batch of 2 (mel (2, 1, 16)): exit 2 naming the batch and the export fix
    (was exit 3 with ONNX Runtime's 'Got invalid dimensions for input: mel'); nothing written."""
    from tests.helpers.cli_errors import refused

    out = tmp_path / "enc.stream.onnx"
    line = refused(*cli("adopt", _graph(tmp_path, dynamo=False, batch=2), "-o", out, "--sample-rate-hz", SR,
                        "--hop-samples", HOP)[::2], 2)
    assert "features input 'mel' has a fixed batch of 2 ([2, 1, 16]): export it with batch 1 or a dynamic batch" \
        in line and not out.exists()
