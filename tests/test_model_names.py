"""Model names on the command line (``run --model NAME``, ``export MODEL``) match ignoring case and ``_``/``-`` where
one name fits (``GTCRN``, ``Silero_VAD``), ``reference`` is the bundled model, and an unknown name is refused with the
closest known names (before: ``--model GTCRN`` and ``--model reference`` were "unknown model" without a suggestion).
Nothing is exported here: names are resolved before any work."""

from __future__ import annotations

import pytest

from cosyedge.recipes import closest_names, match_name
from tests.helpers.cli_errors import refused


@pytest.mark.parametrize("typed,known", [("GTCRN", "gtcrn"), ("Silero_VAD", "silero-vad"), ("DFN3", "dfn3"),
                                         ("Reference", "reference"), ("nsnet2", "nsnet2")])
def test_names_match_ignoring_case_and_separators(typed, known):
    from cosyedge.cli.run import check_model_task

    assert match_name(typed, ["reference", "gtcrn", "silero-vad", "dfn3", "nsnet2"]) == known
    assert check_model_task(typed, vad=known == "silero-vad") == known


def test_an_ambiguous_name_is_not_guessed():
    assert match_name("a_b", ["a-b", "A_B"]) is None
    assert match_name("a-b", ["a-b", "A_B"]) == "a-b"  # the exact name wins


def test_unknown_names_are_refused_with_the_closest(cli):
    rc, _o, err = cli("run", "--model", "gtcnr", "in.wav", "-o", "out.wav")
    line = refused(rc, err, 2)
    assert line.startswith("[!] unknown model 'gtcnr' (did you mean 'gtcrn'?): --model takes an enhancer (reference, "), line
    assert "reference is the bundled one" in line
    rc, _o, err = cli("export", "refrence")
    assert refused(rc, err, 2).startswith("[!] unknown model 'refrence' (did you mean 'reference'?)")
    assert closest_names("zzzz", ["gtcrn", "dtln"]) == []


def test_model_reference_runs_the_bundled_model(cli, tmp_path, monkeypatch):
    """``--model reference`` is the default engine (no export): here the missing input is what stops it."""
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    rc, _o, err = cli("run", "--model", "Reference", tmp_path / "missing.wav", "-o", tmp_path / "out.wav")
    line = refused(rc, err, 3)
    assert "unknown model" not in line and "missing.wav" in line
    rc, _o, err = cli("run", "--model", "reference", "--vad", tmp_path / "missing.wav")
    assert "--model reference is an enhancer" in refused(rc, err, 2)
