"""scripts/gpu_check.py refuses a stand-in length that is not positive (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_gpu_check_refuses_a_stand_in_length_that_is_not_positive(value):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--stand-in-seconds", value],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "give a positive number of seconds" in r.stderr and "Traceback" not in r.stderr
