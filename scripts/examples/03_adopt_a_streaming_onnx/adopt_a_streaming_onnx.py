#!/usr/bin/env python3
"""Example 03: adopt an ONNX that already streams (its own state inputs/outputs), then run it.

Graphs exported by their authors for streaming (GTCRN, DPDFNet, DTLN) carry their own state: they take
``(audio, cache)`` and return ``(enhanced, new_cache)``. This example writes such a graph with the ``onnx``
helper (no download, no PyTorch): a causal 5-tap FIR whose 4 past samples are the state ``cache`` ->
``new_cache`` (N, 1, 4), plus a leaky running mean ``h_in`` -> ``h_out`` (N, 1, 1) that mixes into the output.
``cosyedge adopt`` finds the pairs from their names, makes them batch-first ``state_in.NN``/``state_out.NN``,
proves the adopted graph against the graph's own state loop on real speech and writes a cosyedge stream ONNX;
``cosyedge run`` streams the bundled recording through it. Base install only. Exact command::

    python scripts/examples/03_adopt_a_streaming_onnx/adopt_a_streaming_onnx.py --out /tmp/ex03

Writes into --out: ``fir.onnx`` (the authors' graph), ``fir.stream.onnx`` (adopted) and ``enhanced.wav``.
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


def write_streaming_graph(path: Path) -> Path:
    """Write a graph with its own state I/O, as an author's streaming export would be.

    Args:
        path (Path): Output ``.onnx``.
    Returns:
        Path: ``path``. Inputs ``audio`` float32 (N, 1, T), ``cache`` (N, 1, 4), ``h_in`` (N, 1, 2); outputs
        ``enhanced`` (N, 1, T), ``new_cache`` (N, 1, 4), ``h_out`` (N, 1, 2). T is free (any hop count).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def f(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    def c(name, value, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)

    nodes = [
        helper.make_node("Concat", ["cache", "audio"], ["cat"], axis=2),            # (N, 1, 4 + T)
        helper.make_node("Slice", ["cat", "s4", "end", "ax"], ["new_cache"]),        # its last 4 samples
        helper.make_node("Conv", ["cat", "w1"], ["low"]),                            # 5-tap low-pass (N, 1, T)
        helper.make_node("Concat", ["h_in", "low"], ["cat2"], axis=2),               # (N, 1, 2 + T)
        helper.make_node("Slice", ["cat2", "s2", "end", "ax"], ["h_out"]),           # its last 2 samples
        helper.make_node("Conv", ["cat2", "w2"], ["enhanced"]),                      # 3-tap DC blocker
    ]
    inits = [c("w1", [[[0.05, -0.1, 0.2, 0.3, 0.5]]]), c("w2", [[[-0.25, -0.25, 0.5]]]),
             c("s4", [-4], np.int64), c("s2", [-2], np.int64), c("end", [1 << 62], np.int64), c("ax", [2], np.int64)]
    graph = helper.make_graph(nodes, "fir_with_cache",
                              [f("audio", ["N", 1, "T"]), f("cache", ["N", 1, 4]), f("h_in", ["N", 1, 2])],
                              [f("enhanced", ["N", 1, "T"]), f("new_cache", ["N", 1, 4]), f("h_out", ["N", 1, 2])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
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
    args.out = args.out or Path(tempfile.mkdtemp(prefix="cosyedge-ex03-"))
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["COSYEDGE_ENGINES_DIR"] = str(args.out / "engines")  # never ./engines
    src = write_streaming_graph(args.out / "fir.onnx")
    print(f"wrote {src} (its own states: cache -> new_cache, h_in -> h_out)")
    stream = args.out / "fir.stream.onnx"
    cosyedge("adopt", str(src), "-o", str(stream), "--sample-rate-hz", "16000", "--hop-samples", str(HOP),
             "--name", "fir")
    cosyedge("run", str(args.input), "-o", str(args.out / "enhanced.wav"), "--engine", str(stream))
    print(f"artifacts in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
