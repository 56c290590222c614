"""A stream graph whose output time axis the export fixed is repaired by streamify, and the proof
runs every chunk as ``cosyedge run`` does (outputs bound at the contract's shapes), so a graph that proves runs."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf
import torch
from torch import nn

from cosyedge.artifacts import StreamContract
from cosyedge.errors import ArtifactError
from cosyedge.runtime.ort import OrtStreamSession
from cosyedge.surgery import proof
from tests.models_torch import CausalTap3
from tests.helpers.cli_errors import one_error_line

streamify_mod = importlib.import_module("cosyedge.surgery.streamify")

T = 16000


_Causal = CausalTap3  # a causal 3-tap conv: (1, 1, T) -> (1, 1, T)


def _fixed_output_model(path: Path) -> nn.Module:
    """Export :class:`_Causal` with a dynamic input time axis and the output's time axis fixed at 16000 (what
    ``dynamo=True`` with ``dynamic_shapes`` on the input only produced in the issue)."""
    net = _Causal().eval()
    x = torch.zeros(1, 1, T)
    torch.onnx.export(net, (x,), str(path), input_names=["audio"], output_names=["enhanced"],
                      dynamic_axes={"audio": {2: "T"}}, dynamo=False, opset_version=17)
    m = onnx.load(str(path))
    d = m.graph.output[0].type.tensor_type.shape.dim[2]
    d.Clear()
    d.dim_value = T
    onnx.save(m, str(path))
    return net


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _streamify(cli, src: Path, out: Path):
    return cli("streamify", "-q", src, "-o", out, "--sample-rate-hz", "16000", "--hop-samples", "160")


def test_fixed_output_time_axis_is_repaired_proved_and_runs(tmp_path, cli, warnings_seen):
    src, out = tmp_path / "fixed.onnx", tmp_path / "fixed.stream.onnx"
    net = _fixed_output_model(src)
    rc, _out, err = _streamify(cli, src, out)
    assert rc == 0, err
    msgs = [r.getMessage() for r in warnings_seen]
    assert f"{src}: output 'enhanced' had its time axis 2 fixed at 16000 by the export; made it symbolic in the " \
           "stream graph so that every chunk length runs" in msgs
    m = onnx.load(str(out))
    assert _dims(next(o for o in m.graph.output if o.name == "enhanced"))[2] == "T_enhanced"
    contract = StreamContract.from_onnx(out)
    assert contract.proof["chunks_ticks"] == [1, 160]

    # the Python API run uses (OrtStreamSession) streams it, at one hop and at 3 hops, equal to the full graph
    x = proof.demo_audio(16000, 4800).reshape(1, 1, -1)
    with torch.no_grad():
        full = net(torch.from_numpy(x)).numpy()
    for chunk in (160, 480):
        with OrtStreamSession(out, chunk_samples=chunk) as sess:
            y = np.concatenate([sess.push(x[..., i:i + chunk])["enhanced"].copy() for i in range(0, x.shape[-1], chunk)],
                               axis=-1)
        assert y.shape == full.shape
        assert float(np.abs(y - full).max()) <= 1e-6, chunk

    # and 'cosyedge run' on a file: rc 0, its 16-bit output equals the full graph's output
    wav, enh = tmp_path / "in.wav", tmp_path / "out.wav"
    sf.write(wav, x.reshape(-1), 16000, subtype="FLOAT")
    rc, _o, err = cli("run", "-q", wav, "-o", enh, "--engine", out, "--chunk-ms", "20")
    assert rc == 0, err
    got, sr = sf.read(enh, dtype="float32")
    assert sr == 16000 and got.shape == (4800,)
    assert float(np.abs(got - full.reshape(-1)).max()) <= 1.5 / 32768


def test_the_proof_runs_chunks_as_run_does_and_catches_a_fixed_output(tmp_path, cli):
    """The stream graph with the fixed output put back: the proof's chunk runner fails on it (as 'run' did), where
    a plain ``sess.run`` (the earlier proof) streamed it without a word."""
    src, out = tmp_path / "fixed.onnx", tmp_path / "fixed.stream.onnx"
    _fixed_output_model(src)
    assert _streamify(cli, src, out)[0] == 0
    m = onnx.load(str(out))
    d = next(o for o in m.graph.output if o.name == "enhanced").type.tensor_type.shape.dim[2]
    d.Clear()
    d.dim_value = T
    contract = StreamContract.from_onnx(m)
    x = {"audio": proof.demo_audio(16000, 960).reshape(1, 1, -1)}
    with pytest.raises(ArtifactError) as e:
        proof.stream_run(m, contract, x, 160, {"enhanced": (2, 1)})
    assert str(e.value) == ("ONNX Runtime cannot run the stream graph on a chunk of 160 samples (RuntimeError: Error "
                            "in execution: Got invalid dimensions for output: enhanced for the following indices), as "
                            "'cosyedge run' and 'build' would run it; nothing written")
    # and 'cosyedge run' fails on it the same way
    bad = tmp_path / "bad.stream.onnx"
    onnx.save(m, str(bad))
    wav = tmp_path / "in.wav"
    sf.write(wav, x["audio"].reshape(-1), 16000)
    rc, _o, err = cli("run", "-q", wav, "-o", tmp_path / "o.wav", "--engine", bad)
    assert rc == 3 and "Got invalid dimensions for output: enhanced" in err


def test_streamify_without_the_repair_refuses_in_one_line(tmp_path, cli, monkeypatch):
    """Were the time axis not repaired, the proof (not 'run', later) refuses the graph: exit 3, one line, no file."""
    monkeypatch.setattr(streamify_mod, "_free_time_dims", lambda *a, **k: None)
    src, out = tmp_path / "fixed.onnx", tmp_path / "fixed.stream.onnx"
    _fixed_output_model(src)
    rc, _o, err = _streamify(cli, src, out)
    assert rc == 3
    line = one_error_line(err)
    assert f"{src}: ONNX Runtime cannot run the stream graph on a chunk of 1 sample" in line
    assert "invalid dimensions for output: enhanced" in line and "nothing written" in line
    assert not out.exists()


def test_proof_chunks_cover_the_stride_the_hop_and_a_larger_chunk():
    from cosyedge.surgery.streamify import proof_chunks

    assert proof_chunks(160, 160) == [160, 480]
    assert proof_chunks(80, 160) == [80, 160, 240]
    assert proof_chunks(1, 160) == [1, 160]
    assert proof_chunks(4, 4) == [4, 12]
