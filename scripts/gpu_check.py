#!/usr/bin/env python
"""GPU check: build FP32, FP16, INT8 and INT8 + 2:4-sparse TensorRT engines of the reference model through
the Python API, stream a real recording through each and through ONNX Runtime FP32, and print one table:

    engine | SNR vs ORT FP32 (dB) | max |err| | wall p50/p99 ms (plain) | wall p50/p99 ms (CUDA graph)
           | GPU p50 ms | streams at real time | sparse layers picked/eligible

* SNR: output of the engine vs the ONNX Runtime FP32 stream of the same audio, both streamed chunk by chunk
  with their own carried state (free-running), ``10 log10(sum ref^2 / sum (ref - y)^2)``.
* Latency: per-chunk ``push`` wall time (pinned H2D -> enqueue -> D2H -> sync), batch 1, with and without
  CUDA-graph replay; GPU time from CUDA events.
* Streams at real time: the largest batch B in 1, 2, 4, ..., max batch whose per-chunk p99 wall time
  (CUDA graphs) stays under the chunk duration, i.e. B independent streams each served in real time.

Run on a machine with an NVIDIA GPU, TensorRT, pycuda and cuda-python:

    python scripts/gpu_check.py --engines-dir /tmp/gpu-check --json gpu_check.json

Without TensorRT (or pycuda) it checks what it can and says what it skipped, in one table (``stand_in``):

* the same stream graph run by PyTorch (``cosyedge.runtime.torch_graph.TorchGraph``) on the CUDA device as the
  compute stand-in: SNR vs ONNX Runtime FP32 on the CPU, per-chunk p50/p99 with the states kept on the device
  in a ping-pong pair (outputs written into the other set, never copied to the host), and the same under
  ``torch.cuda.graph`` replay;
* pinned host buffers and async H2D/D2H copies on a stream (cuda-python ``cudaMallocHost`` /
  ``cudaMemcpyAsync``), the bytes checked;
* CUDA graph capture through cuda-python (``cudaStreamBeginCapture`` ... ``cudaGraphLaunch``) of the copy
  sequence, replayed and checked, and the launch time;

then exits 0 when every check that ran passed (4 when not even PyTorch CUDA is there). ``--stand-in-device
cpu`` runs the PyTorch part on the CPU (a dry run of the script where no GPU exists; the CUDA checks are then
reported as skipped).
INT8 needs the calibration set (``cosyedge calib make``) or ``--calib DIR``; ``--calib-count`` trades
calibration time for accuracy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Kept on purpose (issue 36): this script is run as ``python scripts/gpu_check.py`` from a checkout on a GPU
# machine where cosyedge may not be installed (sys.path[0] is then scripts/), so it imports the checkout's package.
sys.path.insert(0, str(ROOT))

CONFIGS = [("fp32", False), ("fp16", False), ("int8", False), ("int8", True)]


def _positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (np.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"give a positive number of seconds, not {text!r}")
    return v


def snr_db(ref: np.ndarray, y: np.ndarray) -> float:
    """Output SNR (dB) of ``y`` against ``ref`` (same shape, float); inf when identical."""
    err = np.sum((ref.astype(np.float64) - y) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / err))


def time_pushes(session, x: np.ndarray, chunks: int) -> dict:
    """Push ``chunks`` chunks of ``x`` (batch, T) through an active session; wall and GPU ms percentiles."""
    c = session.chunk_samples
    session.reset()
    session.clear_latencies()
    n0 = len(session.gpu_latencies_ms)
    for i in range(chunks):
        j = (i * c) % max(1, x.shape[1] - c)
        session.push(np.ascontiguousarray(x[:, None, j:j + c]), copy=False)
    wall = session.latencies_ms[-chunks:]
    gpu = session.gpu_latencies_ms[n0:][-chunks:]
    return {"p50_ms": float(np.percentile(wall, 50)), "p99_ms": float(np.percentile(wall, 99)),
            "gpu_p50_ms": float(np.percentile(gpu, 50)) if gpu.size else float("nan")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--onnx", default=None, help="Streaming FP32 ONNX (default: bundled reference model).")
    p.add_argument("--audio", default=str(ROOT / "cosyedge/assets/demo/noisy.wav"), help="Recording to stream.")
    p.add_argument("--engines-dir", default="engines/gpu-check", help="Where the engines are built.")
    p.add_argument("--calib", default=None, help="INT8 calibration folder (default: the calibration set).")
    p.add_argument("--calib-count", type=int, default=2048, help="INT8 calibration utterances.")
    p.add_argument("--max-batch", type=int, default=16, help="Largest batch of the optimization profile.")
    p.add_argument("--chunks", type=int, default=2000, help="Chunks timed per latency measurement.")
    p.add_argument("--only", nargs="*", default=None, help="Subset, e.g. fp32 int8+sparse.")
    p.add_argument("--json", default=None, help="Write the results as JSON here.")
    p.add_argument("--stand-in-seconds", type=_positive_seconds, default=None,
                   help="Without TensorRT: stream only the first S seconds through the PyTorch stand-in.")
    p.add_argument("--stand-in-device", default=None, choices=["cpu", "cuda"],
                   help="Without TensorRT: device of the PyTorch stand-in (default cuda when available; cpu: dry run).")
    args = p.parse_args(argv)

    from cosyedge.errors import CosyEdgeError
    from cosyedge.log import LOG

    LOG.configure(0)
    try:
        from cosyedge.runtime.trt import require_stack

        trt, cuda = require_stack("run the GPU check")
    except CosyEdgeError as err:
        print(f"[i] TensorRT engines skipped: {str(err).split('; or use --backend')[0]}", flush=True)
        return stand_in(args, reason=str(err))
    try:
        return run(args, trt, cuda)
    except CosyEdgeError as err:
        print(f"[!] {err}", file=sys.stderr)
        return err.exit_code


def _percentiles(ms: list[float]) -> str:
    return f"{np.percentile(ms, 50):.3f}/{np.percentile(ms, 99):.3f}"


def stand_in(args, reason: str) -> int:
    """No TensorRT: the checks listed in the module docstring; one table; exit 0 when all that ran passed."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import stream_array

    reason = reason.split("; or use --backend")[0]  # that hint is for cosyedge build, not this script
    rows = [("TensorRT engines (fp32, fp16, int8, int8+sparse)", "skipped", reason)]
    try:
        import torch
    except ImportError:
        rows.append(("PyTorch stand-in", "skipped", "torch not importable"))
        print(_rows_table(rows))
        return 4
    cuda_ok = torch.cuda.is_available()
    if args.stand_in_device == "cuda" and not cuda_ok:
        rows.append(("PyTorch stand-in", "skipped", "--stand-in-device cuda but torch sees no CUDA device"))
        print(_rows_table(rows))
        return 4
    device = args.stand_in_device or ("cuda" if cuda_ok else None)
    if device is None:
        rows.append(("PyTorch stand-in", "skipped", "no CUDA device (give --stand-in-device cpu for a dry run)"))
        print(_rows_table(rows))
        return 4
    onnx_path = Path(args.onnx or REFERENCE_STREAM_ONNX)
    c = StreamContract.from_onnx(onnx_path)
    x, sr = load_audio(args.audio)
    xm = to_model_input(x, sr, c.sample_rate_hz).astype(np.float32)
    if args.stand_in_seconds:
        xm = xm[: int(args.stand_in_seconds * c.sample_rate_hz)]
    with OrtStreamSession(onnx_path) as s:
        ref = stream_array(s, xm)
    results = {"device": device, "cuda": cuda_ok, "model": onnx_path.name}
    if cuda_ok:
        results["gpu"] = torch.cuda.get_device_name(0)
    print(f"stand-in on {results.get('gpu', device)}: model {onnx_path.name}, audio {xm.size / c.sample_rate_hz:.1f} s",
          flush=True)
    for name, fn in (("stream graph on PyTorch", _check_torch_graph), ("pinned buffers + async copies", _check_copies),
                     ("CUDA graph capture (cuda-python)", _check_cudart_graph)):
        try:
            status, detail, data = fn(args, torch, device, onnx_path, c, xm, ref)
        except Exception as err:  # noqa: BLE001 - a failed check is a row, not a crash
            status, detail, data = "FAIL", f"{type(err).__name__}: {str(err).splitlines()[0][:100]}", {}
        rows.append((name, status, detail))
        results[name] = {"status": status, "detail": detail, **data}
        print(f"{name}: {status} {detail}", flush=True)
    print()
    print(_rows_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"stand_in": results, "rows": rows}, indent=2) + "\n")
    return 1 if any(r[1] == "FAIL" for r in rows) else 0


def _rows_table(rows) -> str:
    head = ("check", "result", "detail")
    lines = [head, *rows]
    widths = [max(len(str(r[i])) for r in lines) for i in range(2)]
    return "\n".join(f"{str(r[0]).ljust(widths[0])}  {str(r[1]).ljust(widths[1])}  {r[2]}" for r in lines)


def _check_torch_graph(args, torch, device, onnx_path, c, xm, ref):
    """The stream graph on ``device``, states on the device in a ping-pong pair; SNR vs ORT; p50/p99; CUDA graph."""
    from cosyedge.runtime.torch_graph import TorchGraph

    tg = TorchGraph(onnx_path, device)
    hop = c.hop_samples
    n = xm.size // hop
    sets = [{st.input: torch.zeros([1, *st.shape[1:]], device=device) for st in c.states} for _ in range(2)]
    xin = torch.zeros((1, 1, hop), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def step(k):  # states of set k in, new states written into set 1 - k (never leave the device)
        out = tg.run({c.input: xin, **sets[k]})
        for st in c.states:
            sets[1 - k][st.input].copy_(out[st.output])
        return out[c.output]

    ys, lat = [], []
    xs = torch.from_numpy(xm[: n * hop].reshape(n, 1, 1, hop)).pin_memory() if device.startswith("cuda") else \
        torch.from_numpy(xm[: n * hop].reshape(n, 1, 1, hop))
    with torch.inference_mode():
        for i in range(n):
            t0 = time.perf_counter()
            xin.copy_(xs[i], non_blocking=True)
            y = step(i % 2)
            ys.append(y.to("cpu", non_blocking=False).reshape(-1))
            sync()
            lat.append(1000.0 * (time.perf_counter() - t0))
    y = torch.cat(ys).numpy()
    snr = snr_db(ref[: y.size], y)
    data = {"snr_db": snr, "max_abs_err": float(np.abs(ref[: y.size] - y).max()), "p50_p99_ms": _percentiles(lat),
            "chunks": n}
    detail = f"SNR {snr:.1f} dB vs ORT FP32, p50/p99 {data['p50_p99_ms']} ms per {1000 * hop / c.sample_rate_hz:g} ms"
    if device.startswith("cuda"):  # the same steps replayed from one torch.cuda.graph per parity
        graphs = []
        with torch.inference_mode():
            for k in (0, 1):
                for _ in range(3):  # warm-up on a side stream, as torch.cuda.graph's docs ask
                    step(k)
                torch.cuda.synchronize()
            for s in sets:
                for t in s.values():
                    t.zero_()
            outs = []
            for k in (0, 1):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    outs.append(step(k))
                graphs.append(g)
            for s in sets:
                for t in s.values():
                    t.zero_()
            ys2, lat2 = [], []
            for i in range(n):
                t0 = time.perf_counter()
                xin.copy_(xs[i], non_blocking=True)
                graphs[i % 2].replay()
                ys2.append(outs[i % 2].to("cpu").reshape(-1).clone())
                torch.cuda.synchronize()
                lat2.append(1000.0 * (time.perf_counter() - t0))
        y2 = torch.cat(ys2).numpy()
        data["graph_snr_db"] = snr_db(ref[: y2.size], y2)
        data["graph_p50_p99_ms"] = _percentiles(lat2)
        detail += f"; CUDA graph: SNR {data['graph_snr_db']:.1f} dB, p50/p99 {data['graph_p50_p99_ms']} ms"
    ok = snr > 60.0 and data.get("graph_snr_db", 100.0) > 60.0
    return ("ok" if ok else "FAIL"), detail, data


def _cudart_or_skip():
    from cosyedge.runtime.trt import _cuda_check, _cudart

    return _cudart(), _cuda_check


def _check_copies(args, torch, device, onnx_path, c, xm, ref):
    """cudaMallocHost pinned buffers, cudaMemcpyAsync H2D then D2H on a stream; bytes compared."""
    if not device.startswith("cuda"):
        return "skipped", "no CUDA device", {}
    cudart, check = _cudart_or_skip()
    import ctypes

    nbytes = c.hop_samples * 4 * 64
    src = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    h_in = check(cudart.cudaMallocHost(nbytes))[0]
    h_out = check(cudart.cudaMallocHost(nbytes))[0]
    d_buf = check(cudart.cudaMalloc(nbytes))[0]
    stream = check(cudart.cudaStreamCreate())[0]
    try:
        ctypes.memmove(int(h_in), src.ctypes.data, nbytes)
        ctypes.memset(int(h_out), 0, nbytes)
        k = cudart.cudaMemcpyKind
        lat = []
        for _ in range(200):
            t0 = time.perf_counter()
            check(cudart.cudaMemcpyAsync(d_buf, h_in, nbytes, k.cudaMemcpyHostToDevice, stream))
            check(cudart.cudaMemcpyAsync(h_out, d_buf, nbytes, k.cudaMemcpyDeviceToHost, stream))
            check(cudart.cudaStreamSynchronize(stream))
            lat.append(1000.0 * (time.perf_counter() - t0))
        got = np.frombuffer(ctypes.string_at(int(h_out), nbytes), np.float32)
        same = bool(np.array_equal(got, src))
    finally:
        cudart.cudaStreamDestroy(stream)
        cudart.cudaFree(d_buf)
        cudart.cudaFreeHost(h_in)
        cudart.cudaFreeHost(h_out)
    return ("ok" if same else "FAIL"), f"{nbytes} B round trip {'exact' if same else 'CORRUPT'}, p50/p99 " \
        f"{_percentiles(lat)} ms", {"bytes": nbytes, "p50_p99_ms": _percentiles(lat), "exact": same}


def _check_cudart_graph(args, torch, device, onnx_path, c, xm, ref):
    """Capture H2D + D2H copies into a CUDA graph through cuda-python, replay it, check the bytes each time."""
    if not device.startswith("cuda"):
        return "skipped", "no CUDA device", {}
    cudart, check = _cudart_or_skip()
    import ctypes

    nbytes = c.hop_samples * 4
    h_in = check(cudart.cudaMallocHost(nbytes))[0]
    h_out = check(cudart.cudaMallocHost(nbytes))[0]
    d_buf = check(cudart.cudaMalloc(nbytes))[0]
    stream = check(cudart.cudaStreamCreate())[0]
    graph = exe = None
    try:
        k = cudart.cudaMemcpyKind
        check(cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        check(cudart.cudaMemcpyAsync(d_buf, h_in, nbytes, k.cudaMemcpyHostToDevice, stream))
        check(cudart.cudaMemcpyAsync(h_out, d_buf, nbytes, k.cudaMemcpyDeviceToHost, stream))
        graph = check(cudart.cudaStreamEndCapture(stream))[0]
        try:
            exe = check(cudart.cudaGraphInstantiate(graph, 0))[0]
        except TypeError:
            exe = check(cudart.cudaGraphInstantiate(graph, b"", 0))[0]
        rng = np.random.default_rng(1)
        bad, lat = 0, []
        for _ in range(200):  # new bytes in the same pinned buffer each replay: the graph reads them live
            src = rng.standard_normal(nbytes // 4).astype(np.float32)
            ctypes.memmove(int(h_in), src.ctypes.data, nbytes)
            t0 = time.perf_counter()
            check(cudart.cudaGraphLaunch(exe, stream))
            check(cudart.cudaStreamSynchronize(stream))
            lat.append(1000.0 * (time.perf_counter() - t0))
            bad += not np.array_equal(np.frombuffer(ctypes.string_at(int(h_out), nbytes), np.float32), src)
    finally:
        if exe is not None:
            cudart.cudaGraphExecDestroy(exe)
        if graph is not None:
            cudart.cudaGraphDestroy(graph)
        cudart.cudaStreamDestroy(stream)
        cudart.cudaFree(d_buf)
        cudart.cudaFreeHost(h_in)
        cudart.cudaFreeHost(h_out)
    return ("ok" if bad == 0 else "FAIL"), f"200 replays, {bad} wrong, launch+sync p50/p99 {_percentiles(lat)} ms", \
        {"replays": 200, "wrong": bad, "p50_p99_ms": _percentiles(lat)}


def run(args, trt, cuda) -> int:
    from cosyedge.artifacts import StreamContract
    from cosyedge.audio import load_audio, to_model_input
    from cosyedge.builders import build_engine
    from cosyedge.builders.cache import load_or_rebuild as load_trt_engine
    from cosyedge.errors import CosyEdgeError
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import stream_array
    from cosyedge.runtime.trt import device_info

    onnx_path = Path(args.onnx or REFERENCE_STREAM_ONNX)
    contract = StreamContract.from_onnx(onnx_path)
    x, sr = load_audio(args.audio)
    xm = to_model_input(x, sr, contract.sample_rate_hz).astype(np.float32)
    chunk_ms = 1000.0 * contract.hop_samples / contract.sample_rate_hz
    with OrtStreamSession(onnx_path) as s:
        ref = stream_array(s, xm)
    gpu = device_info(cuda)
    print(f"TensorRT {trt.__version__} on {gpu['name']} (sm {gpu['compute_capability']}); model {onnx_path.name}, "
          f"chunk {chunk_ms:g} ms, audio {xm.size / contract.sample_rate_hz:.1f} s", flush=True)
    rows = []
    for precision, sparse in CONFIGS:
        label = precision + ("+sparse" if sparse else "")
        if args.only and label not in args.only:
            continue
        row = {"engine": label}
        try:
            t0 = time.perf_counter()
            folder = build_engine(onnx_path, backend="tensorrt", out_dir=args.engines_dir, precision=precision,
                                  sparse=sparse, calib=args.calib, calib_count=args.calib_count)
            row["build_s"] = time.perf_counter() - t0
            eng = load_trt_engine(folder)
            layers = eng.manifest.get("layers", {})
            row["sparse_picked"] = len(layers.get("sparse_picked", []))
            row["sparse_eligible"] = len(layers.get("sparse_eligible", []))
            with eng() as s:
                y = stream_array(s, xm)
            row["snr_db"] = snr_db(ref, y)
            row["max_abs_err"] = float(np.abs(ref - y).max())
            row["finite"] = bool(np.isfinite(y).all())
            x1 = xm[None, :]
            with eng(cuda_graph=False) as s:
                row["plain"] = time_pushes(s, x1, args.chunks)
            with eng(cuda_graph=True) as s:
                row["graph"] = time_pushes(s, x1, args.chunks)
            streams, b = 0, 1
            while b <= min(args.max_batch, int(eng.manifest.get("max_batch", 1))):
                xb = np.repeat(x1, b, axis=0)
                with eng(batch=b, cuda_graph=True) as s:
                    t = time_pushes(s, xb, max(200, args.chunks // 4))
                if t["p99_ms"] > chunk_ms:
                    break
                streams, b = b, b * 2
            row["streams_real_time"] = streams
        except CosyEdgeError as err:
            row["error"] = str(err)
        rows.append(row)
        print(_line(row), flush=True)
    print()
    print(_table(rows, chunk_ms))
    if args.json:
        Path(args.json).write_text(json.dumps({"tensorrt": trt.__version__, "gpu": gpu, "chunk_ms": chunk_ms,
                                               "rows": rows}, indent=2) + "\n")
    return 1 if any("error" in r for r in rows) else 0


def _line(r: dict) -> str:
    if "error" in r:
        return f"{r['engine']}: [!] {r['error']}"
    return f"{r['engine']}: SNR {r['snr_db']:.1f} dB, graph p99 {r['graph']['p99_ms']:.3f} ms"


def _table(rows: list, chunk_ms: float) -> str:
    head = ("engine", "SNR dB", "max|err|", "plain p50/p99 ms", "graph p50/p99 ms", "GPU p50 ms",
            f"streams @{chunk_ms:g} ms", "sparse picked/elig.")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append((r["engine"], "error: " + r["error"][:60], "", "", "", "", "", ""))
            continue
        lines.append((r["engine"], f"{r['snr_db']:.1f}", f"{r['max_abs_err']:.2e}",
                      f"{r['plain']['p50_ms']:.3f}/{r['plain']['p99_ms']:.3f}",
                      f"{r['graph']['p50_ms']:.3f}/{r['graph']['p99_ms']:.3f}", f"{r['graph']['gpu_p50_ms']:.3f}",
                      str(r["streams_real_time"]), f"{r['sparse_picked']}/{r['sparse_eligible']}"))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in lines)


if __name__ == "__main__":
    sys.exit(main())
