"""The training scripts refuse to train on data other than their data version's (a ``--seed N`` run must
be reproducible): a corpus the machine cannot make (espeak-ng, flite or festival not installed, a package that
cannot be fetched) is a one-line ``[!]`` error with the error's exit code, unless ``--allow-missing-corpora``,
which trains without it, says so and records it in the training notes.

``TrainingData`` is replaced by a fake that fails the way the real one does (tests/datasets/test_mix.py tests
the real one), so no data is prepared here.
"""

from __future__ import annotations

import pytest

from cosyedge.errors import DependencyError
from tests.scripts import load_script
from tests.helpers.cli_errors import one_error_line

MESSAGE = ("speech corpus espeak unavailable: 'espeak-ng' not found on PATH (install it: apt-get install espeak-ng); "
           "every source of the data version is needed for a reproducible run")


class _StopAfterData(Exception):
    """Raised by the fake data's first use: the script got past data preparation."""


def _fake_training_data(seen: dict):
    class FakeTrainingData:
        def __init__(self, require_all=False, **options):
            seen["require_all"] = require_all
            if require_all:
                raise DependencyError(MESSAGE)
            self.missing = {"espeak": MESSAGE.split(";")[0]}

        def validation_pairs(self, *a, **k):
            raise _StopAfterData

    return FakeTrainingData


@pytest.mark.parametrize("script", ["training/train_reference", "training/finetune_sparse"])
def test_a_missing_corpus_stops_training_with_one_line_unless_allowed(script, capsys, monkeypatch):
    pytest.importorskip("torch")
    from cosyedge.data import training_data as mix

    seen: dict = {}
    monkeypatch.setattr(mix, "TrainingData", _fake_training_data(seen))
    mod = load_script(script)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--minutes", "0.01"])
    assert exc.value.code == 4 and seen["require_all"] is True  # DependencyError's exit code
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert "speech corpus espeak unavailable" in line and "--allow-missing-corpora" in line
    with pytest.raises(_StopAfterData):  # allowed: it goes on to the validation pairs, having said what is missing
        mod.main(["--minutes", "0.01", "--allow-missing-corpora"])
    assert seen["require_all"] is False
    line = one_error_line(capsys)
    assert "speech corpus espeak unavailable" in line and "trained without it" in line
