"""Stage 2 (streamify) on a user's own model and on hand-built ONNX graphs (refusals, errors, metadata)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.surgery import streamify
from tests.helpers.cli_errors import one_error_line

ATOL = 1e-5


# ---------------------------------------------------------------- hand-built 1-D conv graphs (no torch)
def _conv_model(path: Path, *, pad_node: dict | None = None, conv_pads=(2, 0), kernel=3, dilation=1,
                mid_node=None, pad_consumer: str | None = None, opset=18) -> Path:
    """x (N, 1, T) -> [Pad] -> Conv(1 -> 2, kernel, dilation, conv_pads) -> Conv 1x1 -> y (N, 1, T').

    ``pad_node``: dict(pads=[...], mode=..., value=..., name=...) adds a Pad before the first Conv;
    ``pad_consumer``: an elementwise op (e.g. "Relu") inserted between that Pad and the Conv;
    ``mid_node``: a node mapping "h" -> "h2" inserted between the two Convs.
    """
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((2, 1, kernel)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((1, 2, 1)).astype(np.float32), "w2")]
    nodes, x = [], "x"
    if pad_node is not None:
        inits.append(numpy_helper.from_array(np.array(pad_node["pads"], dtype=np.int64), "pads"))
        inputs = ["x", "pads"]
        if "value" in pad_node:
            inits.append(numpy_helper.from_array(np.array(pad_node["value"], dtype=np.float32), "pad_value"))
            inputs.append("pad_value")
        nodes.append(helper.make_node("Pad", inputs, ["xp"], name=pad_node.get("name", "the_pad"),
                                      mode=pad_node.get("mode", "constant")))
        x = "xp"
        if pad_consumer:
            nodes.append(helper.make_node(pad_consumer, ["xp"], ["xq"], name=f"{pad_consumer.lower()}_on_pad"))
            x = "xq"
    nodes.append(helper.make_node("Conv", [x, "w1"], ["h"], name="conv_a", kernel_shape=[kernel],
                                  dilations=[dilation], pads=list(conv_pads)))
    if mid_node is not None:
        nodes.append(mid_node)
    nodes.append(helper.make_node("Conv", ["h2" if mid_node else "h", "w2"], ["y"], name="conv_b", kernel_shape=[1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "T"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, str(path))
    return path


SR = {"sample_rate_hz": 8000, "hop_samples": 1}


def test_hand_built_both_forms_stream_exactly(tmp_path):
    import onnxruntime as ort

    from tests.helpers.streams import run_streaming

    x = np.random.default_rng(3).standard_normal((2, 1, 60)).astype(np.float32)
    for form, kwargs in {"conv_pads": dict(conv_pads=(4, 0), dilation=2),
                         "pad_node": dict(pad_node={"pads": [0, 0, 4, 0, 0, 0]}, conv_pads=(0, 0), dilation=2),
                         "both": dict(pad_node={"pads": [0, 0, 3, 0, 0, 0], "value": 0.0}, conv_pads=(1, 0),
                                      dilation=2)}.items():
        src = _conv_model(tmp_path / f"{form}.onnx", **kwargs)
        c = streamify(src, tmp_path / f"{form}.stream.onnx", **SR)
        assert [(s.input, s.output, s.shape, s.node) for s in c.states] == [
            ("state_in.00", "state_out.00", ["N", 1, 4], "conv_a")], form
        full = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for chunk in (1, 5, 20):
            y = run_streaming(tmp_path / f"{form}.stream.onnx", c, x, chunk)
            assert y.shape == full.shape and np.abs(y - full).max() <= ATOL, (form, chunk)
        ops = [n.op_type for n in onnx.load(str(tmp_path / f"{form}.stream.onnx")).graph.node]
        assert "Pad" not in ops and ops.count("Concat") == 1 and ops.count("Slice") == 1


def _full_and_stream(src, out, x, chunk, contract):
    import onnxruntime as ort

    from tests.helpers.streams import run_streaming

    full = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return full, run_streaming(out, contract, x, chunk)


@pytest.mark.parametrize("kwargs, delay", [
    (dict(conv_pads=(1, 1)), 1),  # symmetric 'same' pad, not chomped: one frame of look-ahead
    (dict(conv_pads=(0, 2)), 2),  # right pad only
    (dict(conv_pads=(0, 0)), 2),  # valid conv
    (dict(pad_node={"pads": [0, 0, 0, 0, 0, 2]}, conv_pads=(0, 0)), 2),  # causal_type='right'
    (dict(pad_node={"pads": [0, 0, 1, 0, 0, 1]}, conv_pads=(0, 0)), 1),
    (dict(pad_node={"pads": [0, 0, 3, 0, 0, 0]}, conv_pads=(0, 0)), 0),  # over-padded: one frame early
    # a pad, a per-frame op, then the conv: still causal (the pad's frames pass through Relu as frames)
    (dict(pad_node={"pads": [0, 0, 2, 0, 0, 0]}, conv_pads=(0, 0), pad_consumer="Relu"), 0),
    (dict(mid_node=helper.make_node("MaxPool", ["h"], ["h2"], name="pool", kernel_shape=[2])), 1),
    # no time context at all (1x1 convs): streams as it is, with a warning
    (dict(conv_pads=(0, 0), kernel=1), 0),
    # DeepFilterNet's pad_feat: F.pad(x, (-2, 2)) crops two frames at the start (a look-ahead of two)
    (dict(pad_node={"pads": [0, 0, -2, 0, 0, 2]}, conv_pads=(2, 0)), 2),
])
def test_look_ahead_becomes_delay_and_streams_exactly(tmp_path, kwargs, delay):
    """Look-ahead (right pads, un-chomped symmetric pads, valid convs and pools) is no longer refused: the
    stream output comes ``delay`` frames later and equals the full output shifted by it."""
    src = _conv_model(tmp_path / "m.onnx", **kwargs)
    c = streamify(src, tmp_path / "out.onnx", **SR)
    assert c.delay_samples == delay and c.outputs[0].delay_frames == delay
    assert c.proof["max_abs"] <= 1e-5 and c.proof["chunks_ticks"] == [1, 3]
    x = np.random.default_rng(5).standard_normal((1, 1, 90)).astype(np.float32)
    for chunk in (1, 9):
        full, y = _full_and_stream(src, tmp_path / "out.onnx", x, chunk, c)
        n = min(full.shape[-1], y.shape[-1] - delay)
        assert np.abs(y[..., delay:delay + n] - full[..., :n]).max() <= ATOL, (kwargs, chunk)
        if delay:  # without the shift it does not match: the delay is real
            assert np.abs(y[..., :n] - full[..., :n]).max() > 0.1


@pytest.mark.parametrize("kwargs, match", [
    (dict(pad_node={"pads": [0, 0, 2, 0, 0, 0], "mode": "reflect"}, conv_pads=(0, 0)),
     r"Pad node 'the_pad': pads time in 'reflect' mode"),
    (dict(pad_node={"pads": [0, 0, 2, 0, 0, 0], "value": 1.0}, conv_pads=(0, 0)),
     r"Pad node 'the_pad': left-pads time with a value other than 0"),
    (dict(mid_node=helper.make_node("LpNormalization", ["h"], ["h2"], name="norm", axis=2)),
     r"1 node blocks it: LpNormalization node 'norm': works along the time axis 2"),
])
def test_unstreamable_refused_naming_the_node(tmp_path, kwargs, match):
    src = _conv_model(tmp_path / "m.onnx", **kwargs)
    with pytest.raises(UsageError, match=match):
        streamify(src, tmp_path / "out.onnx", **SR)
    assert not (tmp_path / "out.onnx").exists()


def test_missing_metadata_names_the_option(tmp_path):
    src = _conv_model(tmp_path / "m.onnx")
    with pytest.raises(UsageError, match=r"no cosyedge metadata: give sample_rate_hz= \(CLI: --sample-rate-hz"):
        streamify(src, tmp_path / "out.onnx")
    with pytest.raises(UsageError, match=r"hop_samples= \(CLI: --hop-samples"):
        streamify(src, tmp_path / "out.onnx", sample_rate_hz=16000)
    assert not (tmp_path / "out.onnx").exists()


def test_missing_corrupt_or_unwritable_is_artifact_error(tmp_path):
    with pytest.raises(ArtifactError, match="ONNX file not found"):
        streamify(tmp_path / "none.onnx", tmp_path / "out.onnx", **SR)
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07not a protobuf\xff\xff")
    with pytest.raises(ArtifactError, match="cannot read ONNX file"):
        streamify(tmp_path / "junk.onnx", tmp_path / "out.onnx", **SR)
    # external weights whose .data file is gone
    model = onnx.load(str(_conv_model(tmp_path / "m.onnx")))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(ArtifactError, match="ext.onnx"):
        streamify(tmp_path / "ext.onnx", tmp_path / "out.onnx", **SR)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match="not a folder"):
        streamify(tmp_path / "m.onnx", tmp_path / "file" / "out.onnx", **SR)
    assert not (tmp_path / "out.onnx").exists()


def test_metadata_round_trip_and_single_file(tmp_path):
    src = _conv_model(tmp_path / "m.onnx", conv_pads=(4, 0), dilation=2)
    c = streamify(src, tmp_path / "m.stream.onnx", sample_rate_hz=24000, hop_samples=3, delay_samples=5,
                  name="mine")
    assert c == StreamContract.from_onnx(tmp_path / "m.stream.onnx")
    assert (c.input, c.output, c.sample_rate_hz, c.hop_samples, c.total_stride, c.delay_samples, c.name) == (
        "x", "y", 24000, 3, 1, 5, "mine")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.stream.onnx"]
    with pytest.raises(UsageError, match="already streaming"):
        streamify(tmp_path / "m.stream.onnx", tmp_path / "again.onnx")
    # without arguments for them, name defaults to the file stem and delay to 0
    c2 = streamify(src, tmp_path / "m2.stream.onnx", sample_rate_hz=24000, hop_samples=3)
    assert c2.name == "m" and c2.delay_samples == 0


# ---------------------------------------------------------------- a user's own PyTorch model
@pytest.fixture(scope="module")
def user_model():
    torch = pytest.importorskip("torch")
    from tests import models_torch

    torch.manual_seed(0)
    return models_torch, models_torch.UserCausalNet().eval()


def test_user_model_streams_exactly(user_model, tmp_path):
    import torch

    mt, model = user_model
    mt.export_plain(model, tmp_path / "user.onnx", dynamo=False)  # no cosyedge metadata, input x, output y
    c = streamify(tmp_path / "user.onnx", tmp_path / "user.stream.onnx", sample_rate_hz=8000, hop_samples=2)
    assert (c.input, c.output, c.total_stride, c.name) == ("x", "y", 2, "user")
    assert [(s.shape[1], s.shape[2]) for s in c.states] == mt.user_state_frames()
    names = [s.input for s in c.states] + [s.output for s in c.states]
    assert not [(a, b) for a in names for b in names if a != b and b.startswith(a)]
    x = np.random.default_rng(4).standard_normal((2, 1, 240)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    for chunk in (2, 6, 40):
        y = mt.run_streaming(tmp_path / "user.stream.onnx", c, x, chunk)
        err = float(np.abs(y - ref).max())
        print(f"user model chunk={chunk}: max abs err {err:.2e}")
        assert y.shape == ref.shape and err <= ATOL


def test_odd_chunk_is_silently_truncated_by_onnx_so_check_chunk_refuses_it(user_model, tmp_path):
    import onnxruntime as ort

    mt, model = user_model
    mt.export_plain(model, tmp_path / "user.onnx", dynamo=False)
    c = streamify(tmp_path / "user.onnx", tmp_path / "user.stream.onnx", sample_rate_hz=8000, hop_samples=2)
    feed = {"x": np.zeros((1, 1, 3), np.float32), **{s.input: s.zeros(1) for s in c.states}}
    # The full graph truncates 3 samples to 2 without a word (docs/design.md); the stream graph sizes its time
    # pixel shuffle from the chunk's ticks, so ONNX Runtime fails deep inside instead: check_chunk says why first.
    with pytest.raises(Exception, match="cannot be reshaped"):
        ort.InferenceSession(str(tmp_path / "user.stream.onnx"), providers=["CPUExecutionProvider"]).run(["y"], feed)
    with pytest.raises(UsageError, match=r"chunk of 3 samples .* total stride 2 samples \(use 2, 4, \.\.\.\)"):
        c.check_chunk(3)
    with pytest.raises(UsageError, match="hop_samples 3 is not a multiple of the model's total stride 2"):
        streamify(tmp_path / "user.onnx", tmp_path / "bad.onnx", sample_rate_hz=8000, hop_samples=3)


def test_user_look_ahead_models_stream_with_their_delay(user_model, tmp_path):
    """A 'same'-padded conv looks one sample ahead, a right pad two: both stream, that much later."""
    mt, _ = user_model
    for net, name, delay in ((mt.SamePadNet(), "same", 1), (mt.RightPadNet(), "right", 2)):
        mt.export_plain(net, tmp_path / f"{name}.onnx")
        c = streamify(tmp_path / f"{name}.onnx", tmp_path / f"{name}.stream.onnx", sample_rate_hz=8000,
                      hop_samples=1)
        assert c.delay_samples == delay, name


# ---------------------------------------------------------------- CLI
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cosyedge.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_streamify_unstreamable_exits_2_one_line(tmp_path):
    src = _conv_model(tmp_path / "m.onnx", mid_node=helper.make_node("LpNormalization", ["h"], ["h2"], name="norm",
                                                                      axis=2))
    out = tmp_path / "m.stream.onnx"
    res = _cli("streamify", "-q", str(src), str(out), "--sample-rate-hz", "16000", "--hop-samples", "160")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("[!] ") and "LpNormalization node 'norm'" in res.stderr
    assert "Traceback" not in res.stderr and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no temp file left either


def test_cli_streamify_ok(tmp_path):
    src = _conv_model(tmp_path / "m.onnx")
    res = _cli("streamify", str(src), str(tmp_path / "s.onnx"), "--sample-rate-hz", "16000", "--hop-samples", "160",
               "--name", "cli")
    assert res.returncode == 0, res.stderr
    assert "FINISH streamify" in res.stderr
    assert StreamContract.from_onnx(tmp_path / "s.onnx").name == "cli"


@pytest.mark.parametrize("spelling", ["same", "dot", "link"])
def test_cli_streamify_refuses_to_overwrite_its_input(tmp_path, spelling):
    """`streamify m.onnx m.onnx` (any spelling of the same file) once replaced the input with the streaming
    model; now it is a one-line exit 2 and the input is kept byte for byte."""
    src = _conv_model(tmp_path / "m.onnx")
    before = src.read_bytes()
    out = {"same": src, "dot": tmp_path / "." / "m.onnx", "link": tmp_path / "link.onnx"}[spelling]
    if spelling == "link":
        out.symlink_to(src)
    res = _cli("streamify", "-q", str(src), str(out), "--sample-rate-hz", "16000", "--hop-samples", "160")
    assert res.returncode == 2, res.stderr
    assert f"output {out} is the input file" in one_error_line(res.stderr)
    assert src.read_bytes() == before
