"""What the README and ``cosyedge --help`` say first is what the code does: transformers stream too (attention caches,
positions), the opening's SI-SNRi figure is the one measured in the results table (before: +3.2 dB opening, +3.07
in the table), the test command says how long it runs and how to leave the slow tests out, and INT8 calibration's cost
and its ./calib folder are written down."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_opening_names_attention():
    opening = README.split("```", 1)[0]
    assert "attention" in opening and "transformers" in opening


def test_the_opening_figure_is_the_results_tables():
    opening = README.split("## Set-up", 1)[0]
    table = re.search(r"^\| reference \(bundled\) \| [^|]+ \| ([+\d.]+) \|", README, re.M).group(1)
    figures = re.findall(r"([+-]\d+\.\d+) dB SI-SNRi?", opening)
    assert figures == [table], (figures, table)
    rnnoise = re.search(r"^\| RNNoise \| [^|]+ \| ([+\d.]+) \|", README, re.M).group(1)
    assert f"RNNoise {rnnoise} dB" in opening


def test_the_test_command_says_its_duration_and_how_to_skip_slow_tests():
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"about 16 minutes", setup) and 'python -m pytest -q -m "not slow"' in setup
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "slow:" in pyproject  # the marker the command refers to


def test_int8_calibration_cost_and_folder_are_written_down():
    assert "`./calib`" in README and "2048 WAV files" in README and "COSYEDGE_CALIB_DIR" in README
    assert re.search(r"about \d+ min of\s+audio", README)


def test_help_summary_names_attention(capsys):
    from cosyedge.cli.main import main

    assert main(["--help"]) == 0
    first = capsys.readouterr().out.split("\n\n")[1]
    assert "attention" in first and "recurrent" in first
    assert "attention" in re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
