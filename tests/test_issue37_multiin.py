"""Issue 37 item 1: models with several inputs (``audio`` and ``ref``, both (N, 1, T) waveforms) through every
stage: build at every precision and for Triton, compare/check, StreamPool; ``run`` and TensorRT refuse them in one
line (exit 2), and feature inputs are refused by name wherever cosyedge has to make feeds from audio.

The model is built here with torch (a conv reading both inputs, two inner convs INT8 and 2:4 can work on, a last
conv), exported with a dynamic time axis and made a stream graph with ``streamify``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cosyedge.errors import UsageError  # noqa: E402

SR = 16000
HOP = 160
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


class TwoInNet(nn.Module):
    """(audio, ref) float32 (N, 1, T) each -> enhanced (N, 1, T); causal convs only."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv1d(2, 16, 3)
        self.mid = nn.Conv1d(16, 16, 3)
        self.mid2 = nn.Conv1d(16, 16, 1)
        self.dec = nn.Conv1d(16, 1, 1)

    def forward(self, audio, ref):
        h = torch.relu(self.enc(F.pad(torch.cat([audio, ref], 1), (2, 0))))
        h = torch.relu(self.mid(F.pad(h, (2, 0))))
        h = torch.relu(self.mid2(h))
        return self.dec(h)


def _speech(seconds: float, offset_s: float = 0.0, which: str = "noisy") -> np.ndarray:
    from cosyedge.audio import load_audio, to_model_input

    x, sr = load_audio(DEMO / f"{which}.wav")
    x = to_model_input(x, sr, SR)
    a = int(offset_s * SR)
    return np.ascontiguousarray(x[a:a + int(seconds * SR)], np.float32)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("multiin")


@pytest.fixture(scope="module")
def twoin(work) -> tuple[Path, nn.Module]:
    """(streaming ONNX of :class:`TwoInNet`, the torch model)."""
    from cosyedge.surgery.streamify import streamify

    torch.manual_seed(0)
    model = TwoInNet().eval()
    x = torch.randn(1, 1, 1600) * 0.1
    path = work / "twoin.onnx"
    torch.onnx.export(model, (x, x), str(path), input_names=["audio", "ref"], output_names=["enhanced"],
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "ref": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                      dynamo=False, opset_version=17)
    out = work / "twoin.stream.onnx"
    streamify(path, out, sample_rate_hz=SR, hop_samples=HOP)
    return out, model


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------------------------ feeds and run
def test_feeds_follow_the_contract(twoin):
    from cosyedge.artifacts import StreamContract
    from cosyedge.runtime import feeds

    c = StreamContract.from_onnx(twoin[0])
    assert feeds.primary_input(c).name == "audio" and [i.name for i in feeds.partner_inputs(c)] == ["ref"]
    sigs = [np.full(5, k, np.float32) for k in range(3)]
    assert [float(v[0]) for v in feeds.pick_partners(c, sigs, 2).values()] == [0.0]  # the next one, cyclically
    f = feeds.full_inputs(c, np.ones(8, np.float32), {"ref": np.arange(3, dtype=np.float32)})
    assert f["audio"].shape == f["ref"].shape == (1, 1, 8) and f["ref"][0, 0].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    with pytest.raises(UsageError, match=r"give one signal for each of \['ref'\].*missing \['ref'\]"):
        feeds.full_inputs(c, np.ones(8, np.float32))


def test_stream_array_takes_partners_and_equals_the_torch_model(twoin):
    from cosyedge.runtime import OrtStreamSession, stream_array

    path, model = twoin
    a, r = _speech(1.0), _speech(1.0, 5.0)
    with torch.no_grad():
        want = model(torch.from_numpy(a[None, None]), torch.from_numpy(r[None, None])).numpy()[0, 0]
    with OrtStreamSession(path, chunk_samples=480) as s:
        y = stream_array(s, a, partners={"ref": r})
        with pytest.raises(UsageError, match=r"missing \['ref'\]"):
            stream_array(s, a)
    assert float(np.abs(y - want).max()) < 1e-5


def test_run_refuses_a_multi_input_model_in_one_line(twoin, tmp_path, cli):
    out = tmp_path / "out.wav"
    rc, _, err = cli("run", DEMO / "noisy.wav", "-o", out, "--engine", twoin[0])
    line = _one_line(err)
    assert rc == 2 and not out.exists()
    assert "cannot run on an audio file" in line and "it takes 2 inputs and an audio file is one waveform" in line
    assert (f"cosyedge.runtime.OrtStreamSession('{twoin[0]}').push({{'audio': float32 (1, 1, 160), "
            f"'ref': float32 (1, 1, 160)}})") in line
    assert "cosyedge.runtime.stream_array(session, audio, partners={'ref': ref})" in line
