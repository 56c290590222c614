"""Every value-taking option of adopt, streamify, build, run, check, calib make/amax/int8 and compare, given values of the wrong type, negative,
zero, huge, non-integer and out of range (and malformed ``NAME=VALUE`` pairs, unknown names, unusable paths),
ends in exactly one ``[!]`` line naming the option or value, with exit 2 (bad argument) or 3 (bad file): never a
traceback, never exit 1 (the accuracy-regression code), never exit 0 for a value its option cannot mean.

The options come from the click commands (a new option is swept too); what each value should get comes from
the option's meaning in tests/cli_sweep.py, not from cosyedge's answers."""

from __future__ import annotations

import pytest

from tests import cli_sweep

COMMANDS = ["adopt", "streamify", "build", "run", "check", "calib make", "calib amax", "calib int8", "compare"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    done = [cli_sweep.run_case(c, tmp) for c in cli_sweep.cases(tmp)]
    return done


def test_every_value_taking_option_is_swept(swept):
    """An option with a value and no entry in KINDS would go unswept: list it (add it to tests/cli_sweep.py)."""
    missing = [(cmd, opt) for cmd in COMMANDS for opt in cli_sweep.options(cmd)
               if (cmd, opt) not in cli_sweep.KINDS and (cmd, opt) not in cli_sweep.SKIP]
    assert not missing
    assert {c.command for c in swept} == set(COMMANDS)
    assert len(swept) >= 290


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_values_end_in_one_line_with_exit_2_or_3(swept, command):
    bad = [f"{c.verdict}: cosyedge {c.command} ... {c.option} {c.value[:40]!r} ({c.cls}) -> exit {c.rc}: "
           f"{c.err.strip().splitlines()[-1][:200] if c.err.strip() else ''}"
           for c in swept if c.command == command and c.verdict != "ok"]
    assert not bad, "\n".join(bad)
