#!/usr/bin/env python3
"""What per-row dynamic quantization costs a StreamPool of an ``ort_matmul`` INT8 model, and what it fixes.

An ``ort_matmul`` INT8 engine runs its GRU cells as ``com.microsoft.DynamicQuantizeMatMul`` (activation scale per
call). A :class:`~cosyedge.runtime.pool.StreamPool` of more than one stream rewrites them to quantize each stream's
row from its own range (:mod:`cosyedge.passes.dqmm_per_row`). This script measures, on one engine:

* ``independence``: the demo recording at 1 % level (a quiet stream) beside the same recording shifted and at 3x (a
  loud one) vs the quiet stream alone, SNR in dB, with the rewrite (``per_row``) and without (``as_stored``);
* ``tick_ms``: the median and p90 time of one tick (gather + run + scatter) at ``--streams`` streams of real speech,
  variants interleaved round by round (``per_row``, ``as_stored``, ``per_row``, ...) so background load hits both.

Example (NSNet2, about a minute)::

    cosyedge build --onnx nsnet2.stream.onnx --int8 --int8-placement ort_matmul -o /tmp/eng
    flock /tmp/bench.lock python scripts/benchmarks/bench_pool_dqmm.py \\
        --engine /tmp/eng/nsnet2-int8-ort_matmul-onnxruntime --json docs/bench/bench_pool_dqmm.json
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from _common import ROOT, machine
NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


@contextmanager
def _variant(per_row: bool):
    """Run the pools made inside with (``per_row``) or without the per-row rewrite."""
    import cosyedge.passes.dqmm_per_row as mod

    keep = mod.per_row_dynamic_quant
    if not per_row:
        mod.per_row_dynamic_quant = lambda model: 0
    try:
        yield
    finally:
        mod.per_row_dynamic_quant = keep


def _snr(ref: np.ndarray, y: np.ndarray) -> float:
    """SNR (dB) of ``y`` against ``ref``; inf when identical."""
    ref, y = ref.astype(np.float64), y.astype(np.float64)
    err = ((y - ref) ** 2).sum()
    return float("inf") if err == 0 else float(10 * np.log10((ref ** 2).sum() / err))


def _pool_run(model: Path, streams: list[np.ndarray], hop: int, max_streams: int) -> list[np.ndarray]:
    """Each stream's output through one StreamPool, one chunk of every stream per tick."""
    from cosyedge.runtime.pool import StreamPool

    n = min(len(s) for s in streams) // hop * hop
    with StreamPool(model, max_streams=max_streams) as p:
        ids = [p.join() for _ in streams]
        outs: dict[int, list] = {i: [] for i in ids}
        for k in range(0, n, hop):
            for i, s in zip(ids, streams):
                p.submit(i, s[k:k + hop])
            for i, y in p.tick().items():
                outs[i].append(y)
    return [np.concatenate(outs[i]) for i in ids]


def independence(model: Path, hop: int, x: np.ndarray) -> float:
    """SNR (dB) of the quiet stream beside a loud one vs alone (same pool size)."""
    quiet, loud = 0.01 * x, 3.0 * np.roll(x, 12345)
    alone = _pool_run(model, [quiet], hop, 4)[0]
    both = _pool_run(model, [quiet, loud], hop, 4)[0]
    return _snr(alone, both)


def tick_times(model: Path, hop: int, x: np.ndarray, streams: int, ticks: int, warmup: int) -> np.ndarray:
    """Tick times (ms) of a pool of ``streams`` streams of ``x`` at other offsets."""
    from cosyedge.runtime.pool import StreamPool

    with StreamPool(model, max_streams=streams) as p:
        ids = [p.join() for _ in range(streams)]
        out = []
        for t in range(warmup + ticks):
            k = (t * hop) % (len(x) - hop)
            for j, i in enumerate(ids):
                s = (k + 997 * j) % (len(x) - hop)
                p.submit(i, x[s:s + hop])
            t0 = time.perf_counter()
            p.tick()
            if t >= warmup:
                out.append(1e3 * (time.perf_counter() - t0))
    return np.asarray(out)


def main() -> None:
    """Parse the options, measure, print and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True, help="An ort_matmul INT8 engine folder or its model.onnx.")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from cosyedge.artifacts import StreamContract
    from cosyedge.audio import load_audio, to_model_input

    model = Path(args.engine)
    model = model / "model.onnx" if model.is_dir() else model
    c = StreamContract.from_onnx(model)
    x, sr = load_audio(NOISY)
    x = np.ascontiguousarray(to_model_input(x, sr, c.sample_rate_hz), np.float32)
    res: dict = {"engine": str(model), "streams": args.streams, "ticks": args.ticks, "rounds": args.rounds,
                 "machine": machine(), "independence_db": {}, "tick_ms": {}}
    for name, flag in (("per_row", True), ("as_stored", False)):
        with _variant(flag):
            db = independence(model, c.hop_samples, x)
            res["independence_db"][name] = "inf (bit-identical)" if db == float("inf") else round(db, 2)
    times: dict[str, list] = {"per_row": [], "as_stored": []}
    for _ in range(args.rounds):
        for name, flag in (("per_row", True), ("as_stored", False)):
            with _variant(flag):
                times[name].extend(tick_times(model, c.hop_samples, x, args.streams, args.ticks, args.warmup))
    for name, t in times.items():
        res["tick_ms"][name] = {"p50": round(float(np.median(t)), 4), "p90": round(float(np.percentile(t, 90)), 4)}
    res["tick_p50_ratio_per_row_vs_as_stored"] = round(res["tick_ms"]["per_row"]["p50"]
                                                       / res["tick_ms"]["as_stored"]["p50"], 3)
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
