"""A stream ONNX whose metadata contradicts its graph is refused in one line, and ``compare`` refuses
two models of different delay or I/O."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tests.helpers.cli_errors import one_error_line  # noqa: E402
from tests.helpers.cli import cosyedge_in_folder
from tests.helpers.torch_export import streamify_waveform

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


class CausalConvNet(nn.Module):
    """(N, 1, T) -> (N, 1, T): two causal convs (two context states)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(1, 8, 5)
        self.b = nn.Conv1d(8, 1, 3)

    def forward(self, x):
        return self.b(F.pad(torch.tanh(self.a(F.pad(x, (4, 0)))), (2, 0)))


@pytest.fixture(scope="module")
def conv_stream(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return streamify_waveform(CausalConvNet(), tmp_path_factory.mktemp("lies"), "conv")


def _edit(src: Path, dst: Path, **changes) -> Path:
    """Copy ``src`` with edited ``cosyedge.*`` metadata: key -> new value, or key -> callable(old) -> new."""
    import onnx

    m = onnx.load(str(src))
    for p in m.metadata_props:
        k = p.key[len("cosyedge."):]
        if k in changes:
            v = changes[k]
            p.value = v(p.value) if callable(v) else v
    onnx.save(m, str(dst))
    return dst


def _io(which: str, idx: int, **fields):
    def edit(v: str) -> str:
        io = json.loads(v)
        io[which][idx].update(fields)
        return json.dumps(io)
    return edit


def _state(idx: int, shape):
    def edit(v: str) -> str:
        st = json.loads(v)
        st[idx]["shape"] = shape
        return json.dumps(st)
    return edit


@pytest.mark.parametrize("case,changes,want", [
    ("hop80", {"hop_samples": "80"},
     "the contract contradicts the graph: hop_samples 80 but the waveform 'audio' streams 160 samples per hop"),
    ("hophuge", {"hop_samples": str(10 ** 12)},
     "invalid cosyedge metadata: hop_samples 1000000000000 is outside 1..160000 (10 s at 16000 Hz)"),
    ("out80", {"io": _io("outputs", 0, frames_per_hop=80)},
     "the contract contradicts the graph: hop_samples 160 but the waveform 'enhanced' streams 80 samples per hop"),
    ("state", {"state": _state(0, ["N", 1, 7])},
     "the contract contradicts the graph: 'state_in.00' has shape "),
])
def test_lying_metadata_is_refused_in_one_line(conv_stream, tmp_path, case, changes, want):
    """Edited metadata: run/build ended in a ValueError (broadcast) or a 3.64 TiB MemoryError traceback, exit 1;
    now run, build and compare refuse it in one line, exit 3."""
    lie = _edit(conv_stream, tmp_path / f"{case}.onnx", **changes)
    for argv in (["run", DEMO / "noisy.wav", "-o", tmp_path / "y.wav", "--engine", lie],
                 ["build", "--onnx", lie, "--backend", "onnxruntime"],
                 ["compare", conv_stream, lie, "--no-pesq"]):
        p = cosyedge_in_folder(tmp_path, *argv)
        assert p.returncode == 3, (argv, p.returncode, p.stderr)
        assert want in one_error_line(p.stderr, last=False), p.stderr
    assert not (tmp_path / "y.wav").exists()


def test_compare_refuses_a_different_delay_or_io(conv_stream, tmp_path):
    """compare REF CAND where only delay_samples differs failed with 'IndexError: list index out of range'; now it
    names the field (exit 2); likewise a feature-style io field."""
    lie = _edit(conv_stream, tmp_path / "delay.onnx", delay_samples="480")
    p = cosyedge_in_folder(tmp_path, "compare", conv_stream, lie, "--no-pesq")
    assert p.returncode == 2, p.stderr
    assert "differ in stream contract 'delay_samples': 480 vs reference 0" in one_error_line(p.stderr, last=False)
    lie = _edit(conv_stream, tmp_path / "delayf.onnx", io=_io("outputs", 0, delay_frames=16))
    p = cosyedge_in_folder(tmp_path, "compare", conv_stream, lie, "--no-pesq")
    assert p.returncode == 2, p.stderr
    line = one_error_line(p.stderr, last=False)
    assert "differ in stream contract 'io.delay_frames' of 'enhanced': 16 vs reference 0" in line
