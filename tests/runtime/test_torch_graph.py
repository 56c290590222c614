"""The PyTorch stand-in of scripts/gpu_check.py: the same stream graph as ONNX Runtime, chunk by chunk,
states carried, on real speech; ops it does not know are refused by name; the script's no-TensorRT path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.audio import load_audio
from cosyedge.errors import UsageError
from cosyedge.runtime.ort import OrtStreamSession

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


@pytest.mark.slow
def test_torch_stand_in_streams_like_onnx_runtime():
    torch = pytest.importorskip("torch")
    from cosyedge.runtime.torch_graph import TorchGraph

    c = StreamContract.from_onnx(REFERENCE)
    tg = TorchGraph(REFERENCE, "cpu")
    x, _ = load_audio(DEMO)
    x = x[16000:16000 + 300 * 160, 0]  # 3 s of speech, 300 chunks
    states = {s.input: torch.zeros([1, *s.shape[1:]]) for s in c.states}
    got = []
    for i in range(0, x.size, 160):
        out = tg.run({c.input: torch.from_numpy(x[None, None, i:i + 160].copy()), **states})
        states = {s.input: out[s.output] for s in c.states}
        got.append(out[c.output][0, 0].numpy())
    with OrtStreamSession(REFERENCE) as s:
        want = np.concatenate([s.push(x[None, None, i:i + 160])[c.output][0, 0].copy() for i in range(0, x.size, 160)])
    y = np.concatenate(got)
    assert np.abs(want).max() > 0.05  # real output, not silence
    assert np.abs(y - want).max() < 2e-5
    zero = tg.run({c.input: torch.from_numpy(x[None, None, -160:].copy()),
                   **{s.input: torch.zeros([1, *s.shape[1:]]) for s in c.states}})[c.output][0, 0].numpy()
    assert np.abs(zero - want[-160:]).max() > 1e-3  # the carried state matters: the check can fail


def test_torch_stand_in_refuses_ops_it_does_not_know(tmp_path):
    pytest.importorskip("torch")
    import onnx
    from onnx import TensorProto, helper

    from cosyedge.runtime.torch_graph import TorchGraph

    g = helper.make_graph([helper.make_node("Erf", ["x"], ["y"]), helper.make_node("Softsign", ["y"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    with pytest.raises(UsageError, match=r"cannot run op\(s\) Erf, Softsign \(it knows Add, ArgMax"):
        TorchGraph(helper.make_model(g), "cpu")


@pytest.mark.slow
def test_gpu_check_without_tensorrt_runs_the_stand_in_and_says_what_it_skipped(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "gc.json"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--stand-in-device", "cpu",
                        "--stand-in-seconds", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {row[0]: row[1] for row in json.loads(out.read_text())["rows"]}
    assert rows["TensorRT engines (fp32, fp16, int8, int8+sparse)"] == "skipped"
    assert rows["stream graph on PyTorch"] == "ok"
    assert rows["pinned buffers + async copies"] == "skipped" and rows["CUDA graph capture (cuda-python)"] == "skipped"
    data = json.loads(out.read_text())["stand_in"]["stream graph on PyTorch"]
    assert data["snr_db"] > 60 and data["chunks"] == 200
