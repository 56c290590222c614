"""compare and check on a base install without the 'pesq' package: PESQ-WB is omitted and
said once, every other metric still runs and gates (they used to exit 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
# cosyedge as on a base install: the pesq package cannot be found or imported
NO_PESQ = """
import importlib.util, sys
sys.modules["pesq"] = None
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "pesq" else _find(name, *a)
from cosyedge.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
WARNING = "pesq is not installed: PESQ-WB is omitted (pip install 'cosyedge[eval]' to score it)"


def _run(tmp_path, *args):
    env = dict(os.environ, COSYEDGE_ENGINES_DIR=str(tmp_path / "engines"), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", NO_PESQ, *args], capture_output=True, text=True, timeout=600,
                          env=env)


def test_compare_without_pesq_omits_it_once(tmp_path):
    res = _run(tmp_path, "compare", str(REF), str(REF))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count(WARNING) == 1 and "PESQ-WB ref" not in res.stdout
    assert "SI-SNR vs clean" in res.stdout and res.stdout.strip().endswith("enhanced and states")


def test_check_without_pesq_gates_the_other_metrics(tmp_path):
    res = _run(tmp_path, "check", "--precisions", "fp16", "--json", str(tmp_path / "acc.json"))
    assert res.returncode == 0, res.stderr
    assert res.stderr.count(WARNING) == 1
    import json

    metrics = json.loads((tmp_path / "acc.json").read_text())["labels"]["fp16"]["metrics"]
    assert metrics and not any(k.endswith("/pesq") for k in metrics)
    assert any(k.endswith("/si_snr_db") for k in metrics) and any(k.endswith("/snr_db") for k in metrics)
