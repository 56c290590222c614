"""``calib make`` refusals: a negative seed, too few usable recordings; no folder left behind."""

from __future__ import annotations

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line


def test_calib_make_refuses_a_negative_seed_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["calib", "make", "--seed", "-1", "--count", "4", "--out", str(out)]) == 2
    assert "--seed must be >= 0, got -1" in one_error_line(capsys)
    assert not out.exists()


def test_a_failed_first_calibration_set_leaves_no_empty_folder(tmp_path, capsys):
    src = tmp_path / "few"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.wav").write_text("not audio")
    out = tmp_path / "set"
    assert main(["calib", "make", "--from", str(src), "--out", str(out)]) == 2
    assert "only 0 usable recording(s), need at least 16" in one_error_line(capsys)
    assert not out.exists()
