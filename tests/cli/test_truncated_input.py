"""A truncated wav is refused in one line (exit 3) and the earlier output kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from cosyedge.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
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
