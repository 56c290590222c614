"""``cosyedge eval`` refuses contradicting baseline options in one line."""

from __future__ import annotations


import numpy as np
import soundfile as sf

from cosyedge.cli.main import main


def _err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_eval_refuses_contradicting_baseline_options(tmp_path, capsys):
    for kind in ("noisy", "clean"):
        (tmp_path / kind).mkdir()
        sf.write(tmp_path / kind / "a.wav", np.zeros(16000, np.float32), 16000)
    assert main(["eval", str(tmp_path), "--baselines", "rnnoise", "--no-baseline", "--no-dnsmos"]) == 2
    assert _err_lines(capsys)[-1] == "[!] give --baselines or --no-baseline, not both"
    assert main(["eval", str(tmp_path), "--baselines", ",", "--no-dnsmos"]) == 2
    assert _err_lines(capsys)[-1] == "[!] --baselines ',' names no baseline (use --no-baseline for none)"
