"""``compare``/``check`` default to a chunk that is a multiple of the model's hop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tests.helpers.cli_errors import one_error_line  # noqa: E402
from tests.helpers.cli import cosyedge_in_folder
from tests.helpers.torch_export import streamify_waveform


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
    ref = streamify_waveform(StridedNet(256), tmp_path, "hop256", hop=256)
    p = cosyedge_in_folder(tmp_path, "compare", ref, ref, "--no-pesq")
    assert p.returncode == 0, p.stderr
    assert "; 96 ms chunks;" in p.stdout, p.stdout
    p = cosyedge_in_folder(tmp_path, "compare", ref, ref, "--no-pesq", "--chunk-ms", "100")
    assert p.returncode == 2
    line = one_error_line(p.stderr, last=False)
    assert "--chunk-ms 100 (1600 samples) is not a multiple of the model's total stride 256 samples" in line
    p = cosyedge_in_folder(tmp_path, "check", "--onnx", ref, "--update-baseline", "--baseline", tmp_path / "b.json",
             "--precisions", "fp32", "--no-pesq", "-q")
    assert p.returncode == 0, p.stderr
    p = cosyedge_in_folder(tmp_path, "check", "--onnx", ref, "--baseline", tmp_path / "b.json", "--precisions", "fp32", "--no-pesq",
             "-q")
    assert p.returncode == 0, p.stderr
