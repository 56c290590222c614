#!/usr/bin/env python3
"""Example 02: export a small causal conv + GRU model of your own with PyTorch, streamify it, run it.

The model is a toy gain estimator on 10 ms frames (random weights: it shows the mechanics, it does not
enhance): a strided analysis conv (320-sample window, hop 160, causal: left-padded), a GRU over frames, a
sigmoid gain per channel and a transposed-conv synthesis (overlap-add). ``cosyedge streamify`` turns the conv's
past samples, the GRU's hidden state and the synthesis overlap into state inputs/outputs, proves
stream == full on real speech and prints the error; ``cosyedge run`` then streams the bundled recording
through it.

Needs the ``export`` extra (PyTorch). Exact command::

    python scripts/examples/02_streamify_your_onnx/streamify_your_onnx.py --out /tmp/ex02

Writes into --out: ``toy.onnx`` (full sequence), ``toy.stream.onnx`` (streaming) and ``enhanced.wav``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cosyedge.cli.main import main as main_cli

HERE = Path(__file__).resolve()
DEMO = HERE.parents[3] / "cosyedge" / "assets" / "demo" / "noisy.wav"
HOP = 160  # 10 ms at 16 kHz


def export_toy(path: Path, seed: int = 0) -> Path:
    """Export the toy model to a full-sequence ONNX with a dynamic batch and time axis.

    Args:
        path (Path): Output ``.onnx``.
        seed (int): torch seed of the random weights.
    Returns:
        Path: ``path``; input ``audio`` float32 (N, 1, T), output ``enhanced`` float32 (N, 1, T), T a multiple
        of 160.
    """
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Toy(nn.Module):
        def __init__(self, ch: int = 16):
            super().__init__()
            self.analysis = nn.Conv1d(1, ch, kernel_size=2 * HOP, stride=HOP)
            self.gru = nn.GRU(ch, ch, batch_first=True)
            self.gain = nn.Conv1d(ch, ch, kernel_size=1)
            self.synthesis = nn.ConvTranspose1d(ch, 1, kernel_size=2 * HOP, stride=HOP)

        def forward(self, audio):                      # (N, 1, T)
            x = F.pad(audio, (HOP, 0))                 # causal: the first frame sees 160 past zeros
            z = self.analysis(x)                       # (N, C, T / 160)
            h, _ = self.gru(z.transpose(1, 2))         # (N, T / 160, C)
            g = torch.sigmoid(self.gain(h.transpose(1, 2)))
            y = self.synthesis(z * g)                  # (N, 1, T + 160)
            return y[..., :-HOP]                       # causal crop: keep the first T samples

    import warnings

    torch.manual_seed(seed)
    model = Toy().eval()
    x = torch.randn(1, 1, 20 * HOP)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes on Slice folding and GRU batch sizes
        torch.onnx.export(model, (x,), str(path), input_names=["audio"], output_names=["enhanced"],
                          dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                          opset_version=17, dynamo=False)
    return path


def cosyedge(*args: str) -> None:
    """Run one ``cosyedge`` command in this process (:func:`cosyedge.cli.main.main`, the console entry point);
    stop with its exit code when it fails."""
    print("$ cosyedge " + " ".join(args), flush=True)
    rc = main_cli(list(args))
    if rc:
        sys.exit(rc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="output folder (created; default: a new temp dir)")
    ap.add_argument("--input", type=Path, default=DEMO, help="audio file to stream")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex02-"))
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["COSYEDGE_ENGINES_DIR"] = str(args.out / "engines")  # never ./engines
    full = export_toy(args.out / "toy.onnx")
    print(f"exported {full}")
    stream = args.out / "toy.stream.onnx"
    cosyedge("streamify", str(full), "-o", str(stream), "--sample-rate-hz", "16000", "--hop-samples", str(HOP),
             "--name", "toy")
    cosyedge("run", str(args.input), "-o", str(args.out / "enhanced.wav"), "--engine", str(stream))
    print(f"artifacts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
