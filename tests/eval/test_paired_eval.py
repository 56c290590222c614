"""scripts/eval/paired_eval.py: paired per-file differences against an anchor, as quoted in docs/model-card.md."""

import json
import math
from pathlib import Path

from tests.scripts import load_script
from tests.helpers.cli_errors import one_error_line

paired = load_script("eval/paired_eval")
SIDE_BY_SIDE = Path(__file__).resolve().parents[2] / "docs" / "eval" / "side-by-side.json"


def _report(a_vals, b_vals, metric="stoi"):
    return {"items": [{"scores": {"rnnoise": {metric: a}, "model": {metric: b}, "clean": {}}}
                      for a, b in zip(a_vals, b_vals)]}


def test_mean_difference_standard_error_and_wins_by_hand():
    d = paired.paired_differences(_report([0.8, 0.9, 0.7], [0.85, 0.88, 0.76]), metrics=("stoi",))
    r = d["model"]["stoi"]
    diffs = [0.05, -0.02, 0.06]
    mean = sum(diffs) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2 / 3)
    assert r["n"] == 3 and r["wins"] == 2
    assert abs(r["mean_diff"] - mean) < 1e-12 and abs(r["se"] - se) < 1e-12
    assert "clean" not in d  # no paired scores: left out


def test_committed_side_by_side_figures_of_the_model_card():
    d = paired.paired_differences(json.loads(SIDE_BY_SIDE.read_text()), "rnnoise")
    # DeepFilterNet3 ties RNNoise on STOI (15 of 30 pairs above it), the bundled model trails it
    assert d["deepfilternet3"]["stoi"]["wins"] == 15
    assert abs(d["deepfilternet3"]["stoi"]["mean_diff"] + 0.0010) < 5e-4
    assert abs(d["reference"]["stoi"]["mean_diff"] + 0.0172) < 5e-4 and d["reference"]["stoi"]["wins"] == 6
    # the clean references score only +0.09 DNSMOS OVRL above RNNoise's output
    assert abs(d["clean"]["dnsmos_ovrl"]["mean_diff"] - 0.0954) < 5e-4
    assert "si_snri_db" not in d["clean"]


def test_bad_reports_are_one_line_exit_3(tmp_path, capsys):
    assert paired.main([str(tmp_path / "missing.json")]) == 3
    assert f"{tmp_path / 'missing.json'}: not found" in one_error_line(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert paired.main([str(bad)]) == 3
    assert "not readable as JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"summary": {}}))
    assert paired.main([str(bad)]) == 3
    assert "no 'items' list" in capsys.readouterr().err
    assert paired.main([str(SIDE_BY_SIDE), "--anchor", "nobody"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "anchor 'nobody' is not among" in err


def test_json_output_is_written(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert paired.main([str(SIDE_BY_SIDE), "--json", str(out)]) == 0
    assert "| deepfilternet3 | stoi | -0.0010 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["differences"]["nsnet2"]["pesq_wb"]["wins"] == 28


def test_malformed_scores_are_refused_by_name():
    bad_scores = {"items": [{"scores": {"rnnoise": 5, "model": {"stoi": 0.9}}}]}
    for report, text in ((bad_scores, "the scores of 'rnnoise' are int, not a mapping"),
                         (_report([0.8], ["0.9"]), "item 0: model stoi is '0.9', not a finite number"),
                         (_report([0.8, float("nan")], [0.9, 0.9]), "item 1: rnnoise stoi is nan"),
                         (_report([True], [0.9]), "rnnoise stoi is True"),
                         ({"items": [{"scores": {"rnnoise": {"stoi": 0.8}}}]}, "no other system to compare"),
                         (_report([0.8], [0.9], metric="other"), "no metric")):
        try:
            paired.paired_differences(report)
        except paired.ReportError as e:
            assert text in str(e), (text, str(e))
        else:
            raise AssertionError(f"accepted: {report}")
    # a missing (null) score skips the pair; one pair has no standard error
    d = paired.paired_differences(_report([0.8, None], [0.9, 0.7]), metrics=("stoi",))
    assert d["model"]["stoi"]["n"] == 1 and d["model"]["stoi"]["se"] is None
    assert "| model | stoi | +0.1000 | - | 1/1 |" in paired.format_table(d, "rnnoise")


def test_unwritable_json_is_one_line_and_nothing_printed_or_left(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps(_report([0.8, 0.7], [0.9, 0.75])))
    for target in (tmp_path / "missing" / "d.json", tmp_path):
        assert paired.main([str(report), "--json", str(target)]) == 3
        out = capsys.readouterr()
        assert out.out == "" and out.err.startswith(f"[!] --json {target}") and out.err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    one = tmp_path / "one.json"
    one.write_text(json.dumps(_report([0.8], [0.9])))
    assert paired.main([str(one), "--json", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["differences"]["model"]["stoi"]["se"] is None  # strict JSON


def test_huge_and_nested_inputs_are_refused_not_crashed(tmp_path, capsys):
    for v in (10 ** 400, 1e308):
        try:
            paired.paired_differences(_report([0.5], [v]))
        except paired.ReportError as e:
            assert "not a finite number" in str(e)
        else:
            raise AssertionError(v)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    assert paired.main([str(deep)]) == 3
    assert "not readable as JSON (RecursionError)" in capsys.readouterr().err
