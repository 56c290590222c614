"""``cosyedge run`` warns in one line when the output clips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tests.helpers.cli import cosyedge_in_folder
from tests.helpers.torch_export import streamify_waveform

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


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
        model = streamify_waveform(GainNet(gain), tmp_path, f"gain{int(gain)}")
        out = tmp_path / f"y{int(gain)}.wav"
        p = cosyedge_in_folder(tmp_path, "run", DEMO / "noisy.wav", "-o", out, "--engine", model)
        assert p.returncode == 0, p.stderr
        y, _ = sf.read(str(out))
        share = 100.0 * float(np.mean(np.abs(y) >= 0.999))
        lines = [ln for ln in p.stderr.splitlines() if "clips" in ln]
        if warns:
            assert share > 1.0 and len(lines) == 1, p.stderr
            assert f"output audio {out} clips: {share:.2f}% of samples at |y| >= 0.999" in lines[0], (share, lines)
        else:
            assert lines == [] and share < 0.01
