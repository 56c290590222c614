"""What a newcomer's audit of issues 23-25 broke, each one line and a non-zero exit now, nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def _err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_a_truncated_wav_is_refused_and_the_earlier_output_kept(tmp_path, capsys):
    x, sr = sf.read(DEMO, dtype="float32")
    full = tmp_path / "full.wav"
    sf.write(full, np.concatenate([x, x]), sr, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    data = full.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # the header still announces the whole data size
    out = tmp_path / "out.wav"
    out.write_bytes(b"earlier result")
    assert main(["run", "-q", str(cut), "-o", str(out)]) == 3
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "is truncated: its header says 553280 frames (34.58 s), the file holds" in lines[0]
    assert out.read_bytes() == b"earlier result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.wav", "full.wav", "out.wav"]


def test_calib_make_refuses_a_negative_seed_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["calib", "make", "--seed", "-1", "--count", "4", "--out", str(out)]) == 2
    assert _err_lines(capsys) == ["[!] --seed must be >= 0, got -1"]
    assert not out.exists()


def test_a_failed_first_calibration_set_leaves_no_empty_folder(tmp_path, capsys):
    src = tmp_path / "few"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.wav").write_text("not audio")
    out = tmp_path / "set"
    assert main(["calib", "make", "--from", str(src), "--out", str(out)]) == 2
    assert "only 0 usable recording(s), need at least 16" in _err_lines(capsys)[-1]
    assert not out.exists()


def test_eval_refuses_contradicting_baseline_options(tmp_path, capsys):
    for kind in ("noisy", "clean"):
        (tmp_path / kind).mkdir()
        sf.write(tmp_path / kind / "a.wav", np.zeros(16000, np.float32), 16000)
    assert main(["eval", str(tmp_path), "--baselines", "rnnoise", "--no-baseline", "--no-dnsmos"]) == 2
    assert _err_lines(capsys)[-1] == "[!] give --baselines or --no-baseline, not both"
    assert main(["eval", str(tmp_path), "--baselines", ",", "--no-dnsmos"]) == 2
    assert _err_lines(capsys)[-1] == "[!] --baselines ',' names no baseline (use --no-baseline for none)"


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_gpu_check_refuses_a_stand_in_length_that_is_not_positive(value):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--stand-in-seconds", value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "give a positive number of seconds" in r.stderr and "Traceback" not in r.stderr


def test_run_shows_no_progress_bar_under_quiet(monkeypatch):
    import logging

    from cosyedge.log import LOG

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    lg = logging.getLogger("cosyedge")
    old = lg.level
    try:
        lg.setLevel(logging.INFO)
        assert LOG.progress_wanted()
        lg.setLevel(logging.WARNING)  # -q
        assert not LOG.progress_wanted()
    finally:
        lg.setLevel(old)
