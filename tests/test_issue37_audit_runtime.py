"""Issue 37 newcomer re-audit, runtime findings: FP16 sessions that segfaulted ONNX Runtime (1), stream ONNX whose
metadata contradicts the graph (5), compare/check's default chunk (12), FP16 vs INT8 on a 2x upsampling model (15),
output clipping (13) and models with two waveform outputs (9).

Every model is built here with torch (tiny, random weights), exported with a dynamic time axis and made a stream
graph with ``streamify``. CLI runs go through a subprocess (a segfault must show up as exit -11, not kill pytest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tests.cli_errors import one_error_line  # noqa: E402

SR = 16000
HOP = 160
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


def _cli(tmp_path: Path, *argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``cosyedge ARGV`` in a subprocess (cwd ``tmp_path``, engines under ``tmp_path/engines``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               COSYEDGE_ENGINES_DIR=str(tmp_path / "engines"))
    return subprocess.run([sys.executable, "-m", "cosyedge.cli.main", *map(str, argv)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _export(model: nn.Module, path: Path, out_names=("enhanced",)) -> Path:
    torch.manual_seed(0)
    x = torch.randn(1, 1, 1920) * 0.1
    axes = {"audio": {0: "N", 2: "T"}, **{o: {0: "N", 2: "T"} for o in out_names}}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (x,), str(path), input_names=["audio"], output_names=list(out_names),
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    return path


def _stream(model: nn.Module, work: Path, name: str, out_names=("enhanced",), **kw) -> Path:
    from cosyedge.surgery.streamify import streamify

    src = _export(model, work / f"{name}.onnx", out_names)
    out = work / f"{name}.stream.onnx"
    streamify(src, out, sample_rate_hz=SR, hop_samples=kw.pop("hop", HOP), **kw)
    return out


# ------------------------------------------------------------------------------------------------ finding 1
class GruLinearNet(nn.Module):
    """Conv1d -> GRU -> nn.Linear -> sigmoid -> ConvTranspose1d: its FP16 ONNX made ONNX Runtime 1.32's
    ``NchwcTransformer`` segfault at session creation (ORT_ENABLE_ALL)."""

    def __init__(self, C: int = 24):
        super().__init__()
        self.enc = nn.Conv1d(1, C, 2 * HOP, stride=HOP)
        self.gru = nn.GRU(C, C, batch_first=True)
        self.g = nn.Linear(C, C)
        self.dec = nn.ConvTranspose1d(C, 1, 2 * HOP, stride=HOP)

    def forward(self, x):
        z = self.enc(F.pad(x, (HOP, 0)))
        h, _ = self.gru(z.transpose(1, 2))
        g = torch.sigmoid(self.g(h)).transpose(1, 2)
        return self.dec(z * g)[..., :-HOP]


@pytest.fixture(scope="module")
def gru_linear(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return _stream(GruLinearNet(), tmp_path_factory.mktemp("fp16crash"), "gru_linear")


def test_fp16_build_of_gru_linear_does_not_segfault(gru_linear, tmp_path):
    """build --fp16 exited 139 (SIGSEGV, no message, temp folder left); now it builds, the manifest records the
    session options, and run/compare/check load the FP16 model too."""
    p = _cli(tmp_path, "build", "--onnx", gru_linear, "--fp16", "--backend", "onnxruntime", "-q")
    assert p.returncode == 0, (p.returncode, p.stderr)
    engine = tmp_path / "engines" / "gru_linear-fp16-onnxruntime"
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["session"] == {"graph_optimization_level": "ORT_ENABLE_ALL",
                                   "disabled_optimizers": ["NchwcTransformer"]}
    assert [x.name for x in (tmp_path / "engines").iterdir()] == [engine.name]  # no temp folder left
    p = _cli(tmp_path, "run", DEMO / "noisy.wav", "-o", tmp_path / "y.wav", "--engine", engine, "-q")
    assert p.returncode == 0, p.stderr
    p = _cli(tmp_path, "compare", gru_linear, engine, "--no-pesq", "-q")
    assert p.returncode == 0, p.stderr
    p = _cli(tmp_path, "check", "--onnx", gru_linear, "--update-baseline", "--baseline", tmp_path / "b.json",
             "--precisions", "fp16", "--no-pesq", "-q")
    assert p.returncode == 0, p.stderr


def test_fp16_sessions_turn_off_nchwc_only(gru_linear, tmp_path):
    """session_from_onnx turns NchwcTransformer off for a model holding FP16 tensors and for nothing else."""
    import onnx

    from cosyedge.artifacts import StreamContract
    from cosyedge.precision.fp16 import fp16_model
    from cosyedge.runtime.ort import disabled_optimizers_for, holds_fp16, session_from_onnx

    m = onnx.load(str(gru_linear))
    m16, _ = fp16_model(m, StreamContract.from_onnx(gru_linear))
    assert holds_fp16(m16) and not holds_fp16(m) and not holds_fp16(gru_linear)
    assert disabled_optimizers_for(m16) == ("NchwcTransformer",) and disabled_optimizers_for(gru_linear) == ()
    path16 = tmp_path / "m16.onnx"
    onnx.save(m16, str(path16))
    sess = session_from_onnx(path16)  # segfaulted here before
    assert sess.get_session_options().get_session_config_entry(
        "optimization.disable_specified_optimizers") == "NchwcTransformer"
    with pytest.raises(RuntimeError, match="does not have configuration"):  # FP32: every pass stays on
        session_from_onnx(gru_linear).get_session_options().get_session_config_entry(
            "optimization.disable_specified_optimizers")


def test_failed_build_leaves_no_temp_folder(gru_linear, tmp_path, monkeypatch):
    """A build that fails normally (here: the smoke test) removes its temp folder, and the engines folder it made."""
    from cosyedge.builders import ort as bort
    from cosyedge.errors import ArtifactError

    def boom(*a, **k):
        raise ArtifactError("smoke test failed")

    monkeypatch.setattr(bort, "_smoke_test", boom)
    with pytest.raises(ArtifactError, match="smoke test failed"):
        bort.build_ort(gru_linear, out_dir=tmp_path / "engines", precision="fp16")
    assert not (tmp_path / "engines").exists()
    (tmp_path / "engines").mkdir()  # a folder that was there before is kept, empty
    with pytest.raises(ArtifactError, match="smoke test failed"):
        bort.build_ort(gru_linear, out_dir=tmp_path / "engines", precision="fp16")
    assert list((tmp_path / "engines").iterdir()) == []


# ------------------------------------------------------------------------------------------------ finding 5
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
    return _stream(CausalConvNet(), tmp_path_factory.mktemp("lies"), "conv")


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
        p = _cli(tmp_path, *argv)
        assert p.returncode == 3, (argv, p.returncode, p.stderr)
        assert want in one_error_line(p.stderr, last=False), p.stderr
    assert not (tmp_path / "y.wav").exists()


def test_compare_refuses_a_different_delay_or_io(conv_stream, tmp_path):
    """compare REF CAND where only delay_samples differs failed with 'IndexError: list index out of range'; now it
    names the field (exit 2); likewise a feature-style io field."""
    lie = _edit(conv_stream, tmp_path / "delay.onnx", delay_samples="480")
    p = _cli(tmp_path, "compare", conv_stream, lie, "--no-pesq")
    assert p.returncode == 2, p.stderr
    assert "differ in stream contract 'delay_samples': 480 vs reference 0" in one_error_line(p.stderr, last=False)
    lie = _edit(conv_stream, tmp_path / "delayf.onnx", io=_io("outputs", 0, delay_frames=16))
    p = _cli(tmp_path, "compare", conv_stream, lie, "--no-pesq")
    assert p.returncode == 2, p.stderr
    line = one_error_line(p.stderr, last=False)
    assert "differ in stream contract 'io.delay_frames' of 'enhanced': 16 vs reference 0" in line


# ------------------------------------------------------------------------------------------------ finding 12
class StridedNet(nn.Module):
    """(N, 1, T) -> (N, 1, T): strided conv encoder (stride ``hop``) and transposed-conv decoder."""

    def __init__(self, hop: int, C: int = 8):
        super().__init__()
        self.hop = hop
        self.enc = nn.Conv1d(1, C, 2 * hop, stride=hop)
        self.dec = nn.ConvTranspose1d(C, 1, 2 * hop, stride=hop)

    def forward(self, x):
        return self.dec(torch.tanh(self.enc(F.pad(x, (self.hop, 0)))))[..., :-self.hop]


def test_compare_check_default_chunk_is_a_multiple_of_the_hop(tmp_path):
    """hop 256 at 16 kHz: compare/check failed by default (exit 2, 'chunk of 1600 samples is not a positive multiple
    ... (use 256, 512, ...)'); now the default is 96 ms (1536 samples) and an explicit 100 ms is refused in ms."""
    torch.manual_seed(0)
    ref = _stream(StridedNet(256), tmp_path, "hop256", hop=256)
    p = _cli(tmp_path, "compare", ref, ref, "--no-pesq")
    assert p.returncode == 0, p.stderr
    assert "; 96 ms chunks;" in p.stdout, p.stdout
    p = _cli(tmp_path, "compare", ref, ref, "--no-pesq", "--chunk-ms", "100")
    assert p.returncode == 2
    assert one_error_line(p.stderr, last=False) == (
        "[!] --chunk-ms 100 (1600 samples) is not a multiple of the model's total stride 256 samples = 16 ms "
        "(use 16, 32, ... ms)")
    p = _cli(tmp_path, "check", "--onnx", ref, "--update-baseline", "--baseline", tmp_path / "b.json",
             "--precisions", "fp32", "--no-pesq", "-q")
    assert p.returncode == 0, p.stderr
    p = _cli(tmp_path, "check", "--onnx", ref, "--baseline", tmp_path / "b.json", "--precisions", "fp32", "--no-pesq",
             "-q")
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------------------------------------------ finding 13
class GainNet(nn.Module):
    """(N, 1, T) -> (N, 1, T): a causal conv, then x ``gain``."""

    def __init__(self, gain: float):
        super().__init__()
        self.gain = gain
        self.a = nn.Conv1d(1, 1, 3)
        with torch.no_grad():
            self.a.weight.zero_()
            self.a.weight[0, 0, -1] = 1.0
            self.a.bias.zero_()

    def forward(self, x):
        return self.a(F.pad(x, (2, 0))) * self.gain


def test_run_warns_when_the_output_clips(tmp_path):
    """A gain-20 model clipped ~38 % of the 16-bit output silently; now one warning line gives the share. The
    same model at gain 1 does not warn."""
    import soundfile as sf

    for gain, warns in ((20.0, True), (1.0, False)):
        model = _stream(GainNet(gain), tmp_path, f"gain{int(gain)}")
        out = tmp_path / f"y{int(gain)}.wav"
        p = _cli(tmp_path, "run", DEMO / "noisy.wav", "-o", out, "--engine", model)
        assert p.returncode == 0, p.stderr
        y, _ = sf.read(str(out))
        share = 100.0 * float(np.mean(np.abs(y) >= 0.999))
        lines = [ln for ln in p.stderr.splitlines() if "clips" in ln]
        if warns:
            assert share > 1.0 and len(lines) == 1, p.stderr
            assert f"output audio {out} clips: {share:.2f}% of samples at |y| >= 0.999" in lines[0], (share, lines)
        else:
            assert lines == [] and share < 0.01
