"""``compare --seconds/--jump-db/--floor-db`` set the layer bisection (``--mark-all``); without it they were silently
ignored. Refused in one line (exit 2), as ``run`` refuses ``--device`` without ``mic``; nothing is run or written."""

from __future__ import annotations

import pytest

from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.helpers.cli_errors import one_error_line


@pytest.mark.parametrize("flags, named", [(["--seconds", "5"], "--seconds only applies"),
                                          (["--jump-db", "10"], "--jump-db only applies"),
                                          (["--floor-db", "30"], "--floor-db only applies"),
                                          (["--seconds", "2", "--floor-db", "40"], "--seconds, --floor-db only apply")])
def test_bisection_options_without_mark_all_are_refused(cli, tmp_path, flags, named):
    js = tmp_path / "out.json"
    rc, out, err = cli("compare", REFERENCE_STREAM_ONNX, REFERENCE_STREAM_ONNX, "--no-pesq", "--json", js, *flags)
    assert rc == 2 and err.count("\n") == 1 and out == "", err
    assert f"{named} to the layer bisection: add --mark-all" in one_error_line(err)
    assert not js.exists()


def test_bisection_options_with_mark_all_are_taken(cli, monkeypatch):
    """With --mark-all the options reach the bisection (the run is stopped there: nothing else is checked)."""
    import cosyedge.compare.bisect as bisect
    from cosyedge.errors import UsageError

    seen = {}

    def bisect_layers(ref, cand, utt, *, chunk, seconds, jump_db, floor_db, threads):
        seen.update(seconds=seconds, jump_db=jump_db, floor_db=floor_db)
        raise UsageError("stopped at the bisection (test)")

    monkeypatch.setattr(bisect, "bisect_layers", bisect_layers)
    rc, _o, err = cli("compare", REFERENCE_STREAM_ONNX, REFERENCE_STREAM_ONNX, "--no-pesq", "--mode", "free-running",
                      "--max-utterances", "1", "--mark-all", "--seconds", "1", "--jump-db", "10", "--floor-db", "30")
    assert rc == 2 and "stopped at the bisection" in err, err
    assert seen == {"seconds": 1.0, "jump_db": 10.0, "floor_db": 30.0}
