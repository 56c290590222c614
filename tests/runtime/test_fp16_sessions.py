"""FP16 sessions of a GRU + Linear model: the build no longer segfaults ONNX Runtime (NCHWc layout off, only
that), and a build that fails removes its temp folder. CLI runs go through a subprocess (a segfault must show up as
exit -11, not kill pytest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tests.helpers.cli import cosyedge_in_folder
from tests.helpers.torch_export import streamify_waveform

HOP = 160
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


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
    return streamify_waveform(GruLinearNet(), tmp_path_factory.mktemp("fp16crash"), "gru_linear")


def test_fp16_build_of_gru_linear_does_not_segfault(gru_linear, tmp_path):
    """build --fp16 exited 139 (SIGSEGV, no message, temp folder left); now it builds, the manifest records the
    session options, and run/compare/check load the FP16 model too."""
    p = cosyedge_in_folder(tmp_path, "build", "--onnx", gru_linear, "--fp16", "--backend", "onnxruntime", "-q")
    assert p.returncode == 0, (p.returncode, p.stderr)
    engine = tmp_path / "engines" / "gru_linear-fp16-onnxruntime"
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["session"] == {"graph_optimization_level": "ORT_ENABLE_ALL",
                                   "disabled_optimizers": ["NchwcTransformer"]}
    assert [x.name for x in (tmp_path / "engines").iterdir()] == [engine.name]  # no temp folder left
    p = cosyedge_in_folder(tmp_path, "run", DEMO / "noisy.wav", "-o", tmp_path / "y.wav", "--engine", engine, "-q")
    assert p.returncode == 0, p.stderr
    p = cosyedge_in_folder(tmp_path, "compare", gru_linear, engine, "--no-pesq", "-q")
    assert p.returncode == 0, p.stderr
    p = cosyedge_in_folder(tmp_path, "check", "--onnx", gru_linear, "--update-baseline", "--baseline", tmp_path / "b.json",
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
