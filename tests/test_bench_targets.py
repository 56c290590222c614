"""scripts/benchmarks/bench_targets.py: the target table logic and its refusals (the timings themselves are benchmarks,
never asserted here)."""

from __future__ import annotations

import json

from tests.scripts import load_script
from tests.helpers.cli_errors import one_error_line


def test_rows_judge_each_target_in_its_direction():
    bench = load_script("benchmarks/bench_targets")
    assert bench.row("reference", "int8_speedup_p50", 1.31, "")["met"] is True
    assert bench.row("reference", "int8_speedup_p50", 0.94, "")["met"] is False
    assert bench.row("reference", "paced_p50_vs_rnnoise", 0.72, "")["met"] is True
    assert bench.row("dfn3", "dfn3_vs_libdeepfilter_p50", 0.81, "")["met"] is False
    assert bench.row("gtcrn", "int8_snr_db_vs_fp32", None, "")["met"] is None
    assert bench.row("reference", "streams_per_core", 73.0, "")["want"] == ">= 60.0"


def test_unknown_model_is_refused_in_one_line(capsys):
    bench = load_script("benchmarks/bench_targets")
    assert bench.main(["--models", "reference,rnnoise2"]) == 2
    assert "unknown model(s) rnnoise2" in one_error_line(capsys)


def test_a_failing_bench_script_stops_with_its_error(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmarks/bench_targets")
    monkeypatch.setattr(bench, "SCRIPTS", tmp_path)  # no bench scripts there: the child fails
    out = tmp_path / "t.json"
    assert bench.main(["--models", "reference", "--json", str(out)]) == 2
    assert "bench_precision.py failed (rc 2)" in capsys.readouterr().err
    assert not out.exists()


def test_the_table_is_written_from_the_children_json(tmp_path, monkeypatch):
    bench = load_script("benchmarks/bench_targets")
    fake = {"bench_precision.py": {"variants": {"int8-trt": {"speedup_p50_vs_fp32": 0.9, "snr_db_vs_fp32": 47.2},
                                                "fp32": {"speedup_p50_vs_fp32": 1.0}}},
            "bench_stream.py": {"ratio_vs_rnnoise": {"paced_p50_per_10ms": 0.7, "p50_per_10ms": 0.8}},
            "bench_streams.py": {"streams_per_core": 73.0},
            "bench_int8_bound.py": {"int8_speedup_bound_quantized_ops": 1.25}}
    monkeypatch.setattr(bench, "run_json", lambda script, args, tmp: fake[script])
    out = tmp_path / "t.json"
    assert bench.main(["--models", "reference", "--json", str(out), "--strict"]) == 1  # INT8 misses 1.3x
    doc = json.loads(out.read_text())
    assert {r["variant"] for r in doc["targets"] if r["target"] in ("int8_speedup_p50", "int8_snr_db_vs_fp32")} == {"int8-trt"}
    got = {r["target"]: (r["measured"], r["met"]) for r in doc["targets"]}
    assert got == {"int8_speedup_p50": (0.9, False), "int8_snr_db_vs_fp32": (47.2, True),
                   "int8_speedup_bound": (1.25, None),
                   "paced_p50_vs_rnnoise": (0.7, True), "back_to_back_p50_vs_rnnoise": (0.8, None),
                   "streams_per_core": (73.0, True)}


def test_from_json_re_tables_without_measuring(tmp_path, monkeypatch):
    bench = load_script("benchmarks/bench_targets")
    runs = {"dfn3": {"precision": {"variants": {"int8-ort_matmul": {
        "speedup_p50_vs_fp32": 1.39, "snr_db_vs_fp32": 46.0, "ort_fusion": {"demo_snr_db": 38.4}}}},
        "int8_bound": {"int8_speedup_bound_quantized_ops": 1.04},
        "libdeepfilter": {"ratio_ours_over_libdf": {"shipped": {"p50": 0.68, "paced_p50": 0.69}}}}}
    src = tmp_path / "old.json"
    src.write_text(json.dumps({"runs": runs, "machine": {"platform": "x"}}))
    monkeypatch.setattr(bench, "run_json", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    out = tmp_path / "new.json"
    assert bench.main(["--from-json", str(src), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    got = {r["target"]: (r["measured"], r["met"]) for r in doc["targets"]}
    assert got == {"int8_speedup_p50": (1.39, True), "int8_snr_db_vs_fp32": (46.0, True),
                   "int8_snr_db_vs_fp32_noisy": (38.4, False), "int8_speedup_bound": (1.04, None),
                   "dfn3_vs_libdeepfilter_p50": (0.68, True), "dfn3_vs_libdeepfilter_paced_p50": (0.69, True)}
    assert doc["machine"] == {"platform": "x"} and doc["runs"] == runs
    assert bench.main(["--from-json", str(tmp_path / "missing.json")]) == 3
