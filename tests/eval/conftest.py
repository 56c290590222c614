"""Shared fixtures of the eval tests: bundled real audio, small pairs in tmp folders, an in-process CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
DEMO_NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
DEMO_CLEAN = ROOT / "cosyedge" / "assets" / "demo" / "clean.wav"
SPEECH = ROOT / "tests" / "data" / "speech_librivox_0890.wav"


def read(path: Path) -> tuple[np.ndarray, int]:
    """Read mono float32 audio."""
    x, sr = sf.read(str(path), dtype="float32")
    return x, sr


@pytest.fixture
def cli(cli, monkeypatch, tmp_path_factory):
    """The CLI runner of tests/conftest.py with a private engines root."""
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path_factory.getbasetemp() / "engines"))
    return cli


def one_line_error(rc: int, err: str, code: int | None = None) -> str:
    """Assert a failed run printed exactly one '[!] ...' line (the last) and no traceback; return it."""
    assert rc != 0 if code is None else rc == code, (rc, err)
    assert "Traceback" not in err
    bang = [line for line in err.splitlines() if line.startswith("[!]")]
    assert len(bang) == 1, err
    assert err.rstrip().splitlines()[-1] == bang[0]
    return bang[0]


def write_pair_folder(root: Path, seconds: float = 3.0, names=("a_5dB",), start_s: float = 1.0) -> Path:
    """Write ``root/noisy/<name>.wav`` and ``root/clean/<name>.wav`` cut from the bundled demo pair."""
    x, sr = read(DEMO_NOISY)
    c, _ = read(DEMO_CLEAN)
    for i, name in enumerate(names):
        lo = int((start_s + i * seconds) * sr)
        hi = lo + int(seconds * sr)
        for sub, sig in (("noisy", x), ("clean", c)):
            (root / sub / name).parent.mkdir(parents=True, exist_ok=True)
            sf.write(str(root / sub / f"{name}.wav"), sig[lo:hi], sr, subtype="PCM_16")
    return root
