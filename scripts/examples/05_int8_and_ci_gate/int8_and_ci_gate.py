#!/usr/bin/env python3
"""Example 05: FP16 and INT8 builds of the bundled model, a comparison, and an accuracy gate of your own.

Steps, all on ONNX Runtime (CPU):
1. Cut 16 one-second clips of the bundled recording into ``<out>/recordings`` (stand-ins for your own
   16 kHz recordings) and make a calibration set of them: ``cosyedge calib make --from``.
2. ``cosyedge build --fp16``, ``cosyedge build --int8`` (ONNX Runtime's INT8: each activation step taken per
   call, nothing calibrated) and ``cosyedge build --int8 --int8-placement trt --calib`` (the Q/DQ placement TensorRT
   builds from, KL-calibrated on the set; it runs on ONNX Runtime too) into ``<out>/engines``.
3. ``cosyedge compare`` the FP16 engine with the FP32 stream ONNX on real speech (exit 1 outside tolerance).
4. ``cosyedge check --update-baseline`` writes ``<out>/reference.accuracy.json``; ``cosyedge check`` against it
   is the CI gate (exit 1 on a regression). Its INT8 label is ONNX Runtime's INT8, which needs no calibration
   audio in CI (a model whose INT8 build calibrates keeps its amax cache next to the baseline instead).
Base install only. Exact command::

    python scripts/examples/05_int8_and_ci_gate/int8_and_ci_gate.py --out /tmp/ex05

A 16-clip calibration set from one recording is enough to show the mechanics; for a real deployment use
``cosyedge calib make`` (2048 generated utterances) or hundreds of your own recordings.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cosyedge.cli.main import main as main_cli

HERE = Path(__file__).resolve()
ROOT = HERE.parents[3]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
REFERENCE = ROOT / "cosyedge" / "models" / "reference.stream.onnx"


def cosyedge(*args: str) -> None:
    """Run one ``cosyedge`` command in this process (:func:`cosyedge.cli.main.main`, the console entry point);
    stop with its exit code when it fails."""
    print("$ cosyedge " + " ".join(args), flush=True)
    rc = main_cli(list(args))
    if rc:
        sys.exit(rc)


def cut_clips(src: Path, folder: Path, count: int) -> Path:
    """Write ``count`` one-second mono clips of ``src`` (16 kHz) as ``clipNN.wav``.

    Args:
        src (Path): 16 kHz audio file at least ``count`` seconds long.
        folder (Path): Output folder (created).
        count (int): Number of clips (``cosyedge calib make --from`` needs at least 16).
    Returns:
        Path: ``folder``.
    """
    import soundfile as sf

    x, sr = sf.read(str(src), dtype="float32")
    x = x if x.ndim == 1 else x.mean(axis=1)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        sf.write(str(folder / f"clip{i:02d}.wav"), x[i * sr:(i + 1) * sr], sr)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="output folder (created; default: a new temp dir)")
    ap.add_argument("--clips", type=int, default=16, help="one-second calibration clips cut from the demo")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex05-"))
    args.out.mkdir(parents=True, exist_ok=True)
    engines = args.out / "engines"
    os.environ["COSYEDGE_ENGINES_DIR"] = str(engines)  # never ./engines
    rec = cut_clips(DEMO, args.out / "recordings", args.clips)
    calib = args.out / "calib"
    cosyedge("calib", "make", "--from", str(rec), "--out", str(calib))
    cosyedge("build", "--fp16", "-o", str(engines))
    cosyedge("build", "--int8", "-o", str(engines))
    cosyedge("build", "--int8", "--int8-placement", "trt", "--calib", str(calib), "-o", str(engines))
    cosyedge("compare", str(REFERENCE), str(engines / "reference-fp16-onnxruntime"),
             "--json", str(args.out / "compare-fp16.json"))
    baseline = args.out / "reference.accuracy.json"
    cosyedge("check", "--precisions", "fp16,int8", "--baseline", str(baseline), "--update-baseline",
             "--engines-dir", str(engines))
    cosyedge("check", "--precisions", "fp16,int8", "--baseline", str(baseline), "--engines-dir", str(engines),
             "--json", str(args.out / "accuracy.json"))
    print(f"artifacts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
