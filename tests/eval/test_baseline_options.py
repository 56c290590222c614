"""``cosyedge eval`` refuses contradicting baseline options in one line."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line


def test_eval_refuses_contradicting_baseline_options(tmp_path, capsys):
    for kind in ("noisy", "clean"):
        (tmp_path / kind).mkdir()
        sf.write(tmp_path / kind / "a.wav", np.zeros(16000, np.float32), 16000)
    assert main(["eval", str(tmp_path), "--baselines", "rnnoise", "--no-baseline", "--no-dnsmos"]) == 2
    assert "give --baselines or --no-baseline, not both" in one_error_line(capsys)
    assert main(["eval", str(tmp_path), "--baselines", ",", "--no-dnsmos"]) == 2
    assert "--baselines ',' names no baseline" in one_error_line(capsys)
