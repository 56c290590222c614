#!/usr/bin/env python3
"""Server CPU per request through the real Triton (Python backend): cosyedge's model vs an echo model with the same
config, i.e. the floor that Triton 2.51's gRPC front end, its sequence batcher and the Python backend's stub IPC cost
whatever the model does. Writes docs/bench/triton-floor.json.

Two repositories of the bundled model are built with the same flags (``build --backend triton --triton-backend
python``, oldest strategy, no queue delay); in the second, ``model.py`` is replaced by an echo (each request's chunk
copied back, the same tensor exchange as cosyedge's stub) and its manifest removed. Both servers run at once (an idle
server costs nothing); for each stream count the two take turns for ``--rounds`` rounds, each ``--seconds`` of paced
streams from client processes (``bench_triton.triton_streams``: one hop per 10 ms per stream). Reported per
(model, streams): the median over rounds of server CPU ms per request (tritonserver and its stubs, from /proc), the
mean batch (Triton's own metrics), p50/p99 round trip; and the bound the echo's CPU puts on real-time streams per
core: ``10 ms / (echo CPU ms per request)``, which no model code can pass.

    python scripts/benchmarks/bench_triton_floor.py --json docs/bench/triton-floor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _common import machine

ECHO_MODEL_PY = '''"""Echo: each request's chunk back as the output (bench_triton_floor.py: the Python backend's floor)."""
import triton_python_backend_utils as pb_utils

from cosyedge.serve.model import output_tensor, tensor_array, tensor_exchange


class TritonPythonModel:
    def initialize(self, args):
        self.exchange = tensor_exchange()

    def execute(self, requests):
        out = []
        for r in requests:
            a = tensor_array(pb_utils.get_input_tensor_by_name(r, "audio"), self.exchange)
            out.append(pb_utils.InferenceResponse([output_tensor(pb_utils, "enhanced", a, self.exchange)]))
        return out
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--streams", default="1,4,8", help="paced stream counts")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds per (model, streams, round)")
    ap.add_argument("--rounds", type=int, default=3, help="turns per stream count")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import bench_triton as bt

    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.serve.server import TritonServer

    counts = [int(s) for s in args.streams.split(",") if s.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    repos = {}
    for kind in ("cosyedge", "echo"):
        repos[kind] = build_triton(REFERENCE_STREAM_ONNX, tmp / kind, triton_backend="python", max_sequences=256,
                                   max_batch_size=256, idle_us=5_000_000, max_queue_delay_us=0)
    (repos["echo"] / "manifest.json").unlink()
    (repos["echo"] / "reference" / "1" / "model.py").write_text(ECHO_MODEL_PY)
    runs: dict = {k: {n: [] for n in counts} for k in repos}
    with TritonServer(repos["cosyedge"], http_port=0, grpc_port=0, metrics_port=0) as a, \
            TritonServer(repos["echo"], http_port=0, grpc_port=0, metrics_port=0) as b:
        servers = {"cosyedge": a, "echo": b}
        for n in counts:
            for r in range(args.rounds):
                for kind in (("cosyedge", "echo") if r % 2 == 0 else ("echo", "cosyedge")):
                    got = bt.triton_streams(servers[kind], n, args.seconds)
                    got["cpu_ms_per_request"] = (1000 * got["server_cpu_s"] / got["requests"]
                                                 if got["requests"] else None)
                    runs[kind][n].append(got)
                    print(kind, n, {k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()},
                          flush=True)
    table = {}
    for kind, per in runs.items():
        for n, rs in per.items():
            med = lambda key: statistics.median(x[key] for x in rs if x[key] is not None)  # noqa: E731
            table.setdefault(kind, {})[n] = {
                "cpu_ms_per_request": med("cpu_ms_per_request"), "mean_batch": med("mean_batch"),
                "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"),
                "cpu_ms_per_request_rounds": [round(x["cpu_ms_per_request"], 4) for x in rs]}
    floor = min(v["cpu_ms_per_request"] for v in table["echo"].values())
    result = {"machine": machine(), "settings": vars(args) | {"json": str(args.json)},
              "table": table, "echo_floor_cpu_ms_per_request": floor,
              "streams_per_core_bound_from_floor": 10.0 / floor,
              "how": "server CPU (tritonserver + stubs, /proc) per request at paced streams; the echo model does no "
                     "work, so its CPU per request is what serving one 10 ms chunk costs before any model code"}
    for kind in table:
        for n, v in table[kind].items():
            print(f"{kind:9s} {n:3d} streams: {v['cpu_ms_per_request']:.3f} ms CPU/request, batch "
                  f"{v['mean_batch']:.2f}, p50 {v['p50_ms']:.2f} ms")
    print(f"floor {floor:.3f} ms/request -> at most {10.0 / floor:.1f} real-time streams per core")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
