"""scripts/benchmarks/bench_targets.py: the target table, the per-round statistics, the stream-count search and the
refusals (the timings themselves are benchmarks, never asserted here)."""

from __future__ import annotations

import types

import pytest

from tests.helpers.cli_errors import one_error_line
from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_targets")


def test_rows_judge_each_target_in_its_direction_with_its_models_bound(bench):
    s = lambda v: bench.spread([v])  # noqa: E731
    assert bench.row("nsnet2", "int8_speedup_p50", s(1.31), "")["met"] is True
    assert bench.row("reference", "int8_speedup_p50", s(1.01), "")["met"] is True  # its bound is 1.0
    assert bench.row("dfn3", "int8_speedup_p50", s(1.29), "")["met"] is False
    assert bench.row("reference", "paced_p50_vs_rnnoise", s(0.69), "")["met"] is True
    assert bench.row("dfn3", "dfn3_vs_libdeepfilter_paced_p50", s(0.71), "")["met"] is False
    assert bench.row("reference", "back_to_back_p50_vs_rnnoise", s(2.0), "")["met"] is None  # reported only
    assert bench.row("gtcrn", "streams_per_core", s(59), "")["want"] == ">= 60.0"
    r = bench.row("reference", "streams_per_core", s(151), "", bench.spread([70, 77]))
    assert r["met"] is True and r["replaces"] == 77.0 and r["baseline"]["median"] == 73.5
    assert bench.row("reference", "streams_per_core", None, "")["met"] is None


def test_spread_is_the_median_with_min_and_max(bench):
    got = bench.spread([3.0, 1.0, 10.0, 2.0, 4.0])
    assert (got["median"], got["min"], got["max"]) == (3.0, 1.0, 10.0) and len(got["rounds"]) == 5


def test_unknown_items_and_bad_counts_are_refused_in_one_line(bench, capsys):
    assert bench.main(["--items", "paced,rnnoise2"]) == 2
    assert "unknown item(s) rnnoise2" in one_error_line(capsys)
    assert bench.main(["--rounds", "0"]) == 2
    assert "--rounds must be >= 1" in one_error_line(capsys)


@pytest.mark.parametrize("true_best", [1, 7, 100, 300])
def test_the_stream_search_finds_the_largest_real_time_count_in_every_round(bench, monkeypatch, true_best):
    """A fake pool whose tick p99 grows with the stream count: the search brackets from 8 (first round) or from the
    last round's answer, then bisects to RESOLUTION; a machine that got slower is followed down."""
    item = bench.StreamsItem.__new__(bench.StreamsItem)
    pool = types.SimpleNamespace(chunk_samples=160, contract=types.SimpleNamespace(sample_rate_hz=16000),
                                 max_streams=512)
    item.pools, item.best, item.rows_seen = {("m", "today"): pool}, {}, {("m", "today"): []}
    limit = {"best": true_best}
    monkeypatch.setattr(item, "measure", lambda key, n: (0.0, 10.0 * n / (limit["best"] + 0.5)), raising=False)
    tol = max(1, int(bench.RESOLUTION * true_best))
    got = item.search(("m", "today"))
    assert true_best - tol <= got <= true_best
    limit["best"] = max(1, true_best // 2)  # the machine slowed down
    got = item.search(("m", "today"))
    assert limit["best"] - max(1, int(bench.RESOLUTION * limit["best"])) <= got <= limit["best"]
