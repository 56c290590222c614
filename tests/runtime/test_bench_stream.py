"""scripts/benchmarks/bench_stream.py's paced mode: calls at their real-time deadlines, late ones counted, and the JSON
it writes (a short run on the bundled model; no timing is asserted beyond the pacing itself)."""

from __future__ import annotations

import json
import time

import numpy as np

from tests.scripts import load_script


def test_paced_calls_wait_for_their_deadlines_and_count_late_ones():
    bench = load_script("benchmarks/bench_stream")
    starts = []
    t0 = time.perf_counter()
    lat, late = bench.paced_latencies(lambda i: starts.append(time.perf_counter()), 10, 0.01)
    assert lat.shape == (10,) and late == 0 and np.all(lat >= 0)
    # call i starts no earlier than its deadline t0 + (i + 1) x 10 ms
    assert all(s - t0 >= (i + 1) * 0.01 - 1e-4 for i, s in enumerate(starts))
    lat, late = bench.paced_latencies(lambda i: time.sleep(0.02), 5, 0.01)  # each call overruns its period
    assert late == 4 and np.all(lat >= 19.0)


def test_bench_stream_writes_the_paced_block(tmp_path):
    bench = load_script("benchmarks/bench_stream")
    out = tmp_path / "b.json"
    assert bench.main(["--seconds", "0.5", "--paced-seconds", "0.2", "--warmup", "2", "--no-rnnoise",
                       "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    paced = r["cosyedge"]["paced"]
    assert paced["calls"] == 20 and paced["period_ms"] == 10.0
    assert 0 < paced["latency_ms_p50"] <= paced["latency_ms_p99"] <= paced["latency_ms_max"]
    assert r["cosyedge"]["chunks"] == 50
    assert bench.main(["--seconds", "0.2", "--paced-seconds", "0", "--no-rnnoise", "--json", str(out)]) == 0
    assert "paced" not in json.loads(out.read_text())["cosyedge"]


def test_bench_stream_push_copy_mode_writes_both_modes(tmp_path):
    """``--push-copy-json``: owned outputs vs ``push(copy=False)``, interleaved rounds, medians (a tiny run)."""
    bench = load_script("benchmarks/bench_stream")
    out = tmp_path / "push_copy.json"
    assert bench.main(["--seconds", "0.2", "--warmup", "2", "--push-copy-json", str(out), "--push-copy-rounds", "2",
                       "--push-copy-chunks", "5"]) == 0
    r = json.loads(out.read_text())["push_copy"]
    assert r["rounds"] == 2 and r["chunks_per_round"] == 5 and r["output_shape"] == [1, 1, 160]
    for mode in ("owned", "reuse"):
        assert r[mode]["pushes"] == 10 and len(r[mode]["round_medians_ms"]) == 2 and r[mode]["median_ms"] > 0
    assert r["ratio_owned_over_reuse"] > 0 and r["copy_alone_us"] > 0 and len(r["round_diffs_us"]) == 2
