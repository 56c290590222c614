#!/usr/bin/env python3
"""Example 06: a Triton model repository (built and checked on CPU) and a TensorRT engine (where TensorRT is).

Triton: ``cosyedge build --backend triton --instance-kind cpu`` writes ``<out>/engines/reference-fp32-triton/``
(``reference/config.pbtxt`` with a sequence batcher and one implicit state per state pair,
``reference/1/model.onnx``, ``manifest.json``); the build itself runs a batch of streams against each stream
alone. This script then checks the files and prints the ``tritonserver`` and ``cosyedge run --server``
commands (a Triton server cannot run here).
TensorRT: where the ``tensorrt`` module imports, ``cosyedge build --backend tensorrt --fp16`` and
``cosyedge run`` on the engine; elsewhere it prints that command and skips (``cosyedge`` would exit 4).
Base install only (``tritonclient`` is used when installed, to parse the config). Exact command::

    python scripts/examples/06_tensorrt_and_triton/tensorrt_and_triton.py --out /tmp/ex06
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from cosyedge.cli.main import main as main_cli

HERE = Path(__file__).resolve()
ROOT = HERE.parents[3]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


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
    ap.add_argument("--max-sequences", type=int, default=64, help="concurrent streams per Triton instance")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex06-"))
    args.out.mkdir(parents=True, exist_ok=True)
    engines = args.out / "engines"
    os.environ["COSYEDGE_ENGINES_DIR"] = str(engines)  # never ./engines

    cosyedge("build", "--backend", "triton", "--instance-kind", "cpu", "--max-sequences", str(args.max_sequences),
             "-o", str(engines))
    repo = engines / "reference-fp32-triton"
    config = (repo / "reference" / "config.pbtxt").read_text()
    assert (repo / "reference" / "1" / "model.onnx").is_file() and (repo / "manifest.json").is_file()
    assert "sequence_batching" in config and "state" in config, config
    print(f"Triton repository {repo}: config.pbtxt has a sequence batcher with implicit states. Serve and stream:\n"
          f"  docker run --rm -p 8000:8000 -p 8001:8001 -v {repo}:/models "
          f"nvcr.io/nvidia/tritonserver:<yy.mm>-py3 tritonserver --model-repository=/models\n"
          f"  cosyedge run {DEMO} -o enhanced.wav --server localhost:8001\n"
          f"On CPU, without Docker: cosyedge build --backend triton --triton-backend python -o {engines} && "
          f"cosyedge serve {engines / 'reference-fp32-triton-python'} (pip install 'cosyedge[serve]')")

    trt_cmd = ("build", "--backend", "tensorrt", "--fp16", "-o", str(engines))
    if importlib.util.find_spec("tensorrt") is None:
        print("TensorRT: skipped (the tensorrt module is not installed here). On an NVIDIA GPU machine with "
              "pip install 'cosyedge[trt]':\n  cosyedge " + " ".join(trt_cmd) + "\n  cosyedge run "
              f"{DEMO} -o enhanced.wav --engine {engines / 'reference-fp16-tensorrt'}")
    else:
        cosyedge(*trt_cmd)
        cosyedge("run", str(DEMO), "-o", str(args.out / "enhanced-trt.wav"),
                 "--engine", str(engines / "reference-fp16-tensorrt"))
    print(f"artifacts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
