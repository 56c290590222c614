"""What FP16, 2:4 and INT8 cost on the adopted third-party models (issue 39 item 3): GTCRN, DTLN, Silero VAD.

For each model the recipe is exported (``cosyedge export NAME``), then FP16 (:func:`cosyedge.precision.fp16.fp16_onnx`),
2:4 (:func:`cosyedge.precision.sparsity.sparsify_onnx`, magnitude pruning without fine-tuning) and 2:4 then FP16 are
written, and INT8 (:func:`cosyedge.precision.int8.int8_onnx`: Q/DQ inside the Scan bodies, calibrated on
:func:`calib_set`). Each variant is streamed one hop per call over the bundled demo recording
(``cosyedge/assets/demo/noisy.wav``, 16 kHz, 17.29 s) from zero state with ONNX Runtime CPU (1 thread):

* enhancers: output SNR (dB) vs the FP32 stream, ``10 log10(sum y^2 / sum (y' - y)^2)``;
* Silero VAD: max abs speech-probability difference vs FP32, hops whose side of 0.5 changes, and whether the
  speech segments (Silero's rule, :func:`cosyedge.vad.stream.detect_file`) change;
* latency: median and p90 wall time of one push (one hop) in ms, over the whole file after 20 warm-up pushes.

Usage: ``PYTHONPATH=. python scripts/benchmarks/bench_adopted_precision.py [--out
docs/bench/bench_adopted_precision.json]
[--models gtcrn dtln silero-vad]``. Run it alone (timings). Needs the recipes' wheels (extras gtcrn, dtln, vad).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine
NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def stream(path: Path, x: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """(output concatenated over hops as float64 (T',), per-push seconds) of ``path`` streamed over ``x``."""
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(path, threads=1) as s:
        c = s.contract
        hop = c.hop_samples
        n = -(-x.size // hop)
        xp = np.zeros(n * hop, np.float32)
        xp[:x.size] = x
        ys, times = [], []
        for i in range(n):
            t0 = time.perf_counter()
            y = s.push(xp[i * hop:(i + 1) * hop].reshape(1, 1, hop), copy=False)[c.output]
            times.append(time.perf_counter() - t0)
            ys.append(np.array(y, np.float64).ravel())
    return np.concatenate(ys), times


def snr_db(ref: np.ndarray, y: np.ndarray) -> float:
    """float: SNR (dB) of ``y`` vs ``ref``; inf when equal."""
    err = float(((y - ref) ** 2).sum())
    return float("inf") if err == 0 else float(10 * np.log10(float((ref ** 2).sum()) / err))


def variants(name: str, src: Path, tmp: Path) -> dict:
    """dict label -> (path or None, notes dict) of the precision variants of ``src``."""
    from cosyedge.errors import CosyEdgeError
    from cosyedge.precision.fp16 import fp16_onnx
    from cosyedge.precision.int8 import int8_onnx
    from cosyedge.precision.sparsity import sparsify_onnx

    out: dict = {"fp32": (src, {})}
    f16 = tmp / f"{name}.fp16.onnx"
    r = fp16_onnx(src, f16, check=False)
    out["fp16"] = (f16, {"fp32_nodes": len(r["fp32_nodes"])})
    sp = tmp / f"{name}.sparse.onnx"
    try:
        rep = sparsify_onnx(src, sp)
        s = rep["summary"]
        note = {"pruned_layers": f"{s['pruned']}/{s['layers']}",
                "zero_fraction_all_weights": round(s["zero_fraction_all"], 4)}
        out["fp32-sparse"] = (sp, note)
        sp16 = tmp / f"{name}.sparse.fp16.onnx"
        fp16_onnx(sp, sp16, check=False)
        out["fp16-sparse"] = (sp16, note)
    except CosyEdgeError as err:
        out["fp32-sparse"] = (None, {"refused": str(err)})
    q8 = tmp / f"{name}.int8.onnx"
    try:
        r = int8_onnx(src, q8, calib=calib_set(tmp / "calib"))
        out["int8"] = (q8, {"quantized_nodes": len(r["quantized_nodes"]),
                            "float_weighted_nodes": len(r["excluded_nodes"]),
                            "int8_mac_share": round(r["macs"]["share"], 3)})
    except CosyEdgeError as err:
        out["int8"] = (None, {"refused": str(err)})
    return out


CALIB_CLIPS = 32
"""int: clips of the INT8 calibration set (:func:`calib_set`)."""


def calib_set(folder: Path):
    """The INT8 calibration set (made once per run): :data:`CALIB_CLIPS` seeded cuts of the clean demo speech
    (``clean.wav``) plus white noise at 0.01 RMS; the measurement runs on ``noisy.wav``, which is not in it."""
    from cosyedge.precision.calibset import DemoMix, load_calibration_set, make_calibration_set

    if (folder / "manifest.json").is_file():
        return load_calibration_set(folder)
    return make_calibration_set(folder, count=CALIB_CLIPS, seed=0, training_data=DemoMix())


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the JSON; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "bench_adopted_precision.json"))
    ap.add_argument("--models", nargs="+", default=["gtcrn", "dtln", "silero-vad"])
    args = ap.parse_args(argv)
    import onnxruntime

    from cosyedge.audio import load_audio
    from cosyedge.cli.main import main as cli
    from cosyedge.vad.stream import detect_file

    x, sr = load_audio(NOISY)
    x = np.ascontiguousarray(x[:, 0], np.float32)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-adopted-") as td:
        tmp = Path(td)
        for name in args.models:
            src = tmp / f"{name}.stream.onnx"
            if cli(["export", "-q", name, "-o", str(src)]) != 0:
                rows.append({"model": name, "error": "export failed (wheel missing?)"})
                continue
            vs = variants(name, src, tmp)
            ref, _ = stream(src, x)
            ref_segs = detect_file(NOISY, src)["segments"] if name == "silero-vad" else None
            for label, (path, note) in vs.items():
                row = {"model": name, "precision": label, **note}
                if path is not None:
                    y, times = stream(path, x)
                    t = np.array(times[20:]) * 1e3
                    row.update({"latency_ms_median": round(float(np.median(t)), 4),
                                "latency_ms_p90": round(float(np.percentile(t, 90)), 4), "hops": len(times)})
                    if name == "silero-vad":
                        segs = detect_file(NOISY, path)["segments"]
                        row.update({"max_abs_prob_diff": round(float(np.abs(y - ref).max()), 6),
                                    "hops_flipped_at_0.5": int(((y > 0.5) != (ref > 0.5)).sum()),
                                    "segments_changed": segs != ref_segs, "segments": len(segs)})
                    else:
                        snr = snr_db(ref, y)
                        row["snr_db_vs_fp32"] = round(snr, 2) if np.isfinite(snr) else None  # None: bit-exact
                rows.append(row)
                print(json.dumps(row), flush=True)
    doc = {"what": "issue 39 item 3: reduced precisions on adopted (Scan-body) models, vs their FP32 stream",
           "audio": "cosyedge/assets/demo/noisy.wav (16 kHz, 17.29 s), one hop per push, zero initial state",
           "runtime": f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, 1 thread",
           "machine": machine(),
           "notes": ["2:4 is magnitude pruning without fine-tuning (what `cosyedge build --sparse` does)",
                     "ONNX Runtime's CPU provider has no FP16 kernels for most ops: it casts around them, so CPU FP16 "
                     "latency measures the casts, not FP16 arithmetic (TensorRT runs FP16 on a GPU)",
                     f"INT8: KL calibration inside the Scan bodies on {CALIB_CLIPS} seeded clips of the clean demo "
                     "speech plus white noise (not the measured noisy.wav); Q/DQ inside the leaf body (weights per "
                     "channel, activations per tensor), STFT bases (<recipe>_dsp/), first/last and 1-channel convs, "
                     "GRU/LSTM float. ONNX Runtime CPU runs the Q/DQ around float kernels where it cannot fuse them "
                     "inside a Scan body, so CPU INT8 latency measures that, not INT8 arithmetic"],
           "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(doc, indent=2) + "\n")
    tmp_out.replace(out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
