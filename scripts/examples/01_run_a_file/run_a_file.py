#!/usr/bin/env python3
"""Example 01: enhance an audio file with the bundled reference model and check the result.

Streams the bundled noisy recording (LibriVox speech + real noise, 17.3 s, 16 kHz) through the bundled
reference model with ``cosyedge run`` (its ONNX Runtime engine is built into ``<out>/engines`` on first use),
then checks that the output has the input's rate and length and differs from it, and prints the RTF line.
Base install only (no PyTorch). Exact command::

    python scripts/examples/01_run_a_file/run_a_file.py --out /tmp/ex01

Writes into --out: ``enhanced.wav`` and ``engines/reference-fp32-onnxruntime/``.
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
    ap.add_argument("--input", type=Path, default=DEMO, help="audio file to enhance (wav/flac/ogg, any rate)")
    ap.add_argument("--chunk-ms", type=int, default=10, help="chunk length, a multiple of 10 ms")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex01-"))
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["COSYEDGE_ENGINES_DIR"] = str(args.out / "engines")  # never ./engines
    out = args.out / "enhanced.wav"
    cosyedge("run", str(args.input), "-o", str(out), "--chunk-ms", str(args.chunk_ms))

    import numpy as np
    import soundfile as sf

    x, sr_in = sf.read(str(args.input), dtype="float32")
    y, sr_out = sf.read(str(out), dtype="float32")
    x = x if x.ndim == 1 else x.mean(axis=1)
    assert sr_out == sr_in and y.shape == x.shape, (sr_in, sr_out, x.shape, y.shape)
    change = float(np.sqrt(np.mean((y - x) ** 2)))
    assert change > 1e-3, "the output equals the input"
    print(f"checked: {out} has the input's rate ({sr_out} Hz) and length ({y.size} samples); "
          f"RMS change vs input {change:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
