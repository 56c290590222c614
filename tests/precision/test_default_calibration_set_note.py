"""``build --int8`` without ``--calib`` says, before it writes anything, where the default calibration set goes and
how big it is (one info line: the absolute folder, 2048 WAV files, about 85 min and 164 MB, the data cache, how to put
it elsewhere or make a smaller one); speech synthesizers that are not installed are one info line naming them, not
three warnings (before: a warning with the relative folder only, then "speech corpus espeak unavailable: ..." for
espeak, flite and festival)."""

from __future__ import annotations

import logging

import pytest

from cosyedge.errors import DependencyError


@pytest.fixture
def log_records():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("cosyedge")
    h, level = Keep(level=logging.DEBUG), logger.level
    logger.addHandler(h)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(h)
    logger.setLevel(level)


def test_the_default_set_is_announced_with_its_folder_and_size_before_it_is_written(tmp_path, monkeypatch,
                                                                                   log_records):
    from cosyedge.precision import calibset
    from cosyedge.precision.int8 import resolve_calibration_set

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(calibset.CALIB_ENV, raising=False)
    seen = {}

    def not_made(folder, count):
        seen["said"] = [r.getMessage() for r in log_records]
        raise RuntimeError("stop before writing")

    monkeypatch.setattr(calibset, "make_calibration_set", not_made)
    with pytest.raises(RuntimeError, match="stop before writing"):
        resolve_calibration_set(None, count=2048)
    said = [m for m in seen["said"] if "INT8 calibration" in m]
    assert len(said) == 1 and all(r.levelno < logging.WARNING for r in log_records), seen["said"]
    assert said[0].startswith(f"INT8 calibration: no calibration set in {tmp_path / 'calib'}: writing the default one "
                              "there now (2048 WAV files, about 85 min of audio, 164 MB, mixed from the training speech "
                              "and noise"), said[0]
    assert "COSYEDGE_CALIB_DIR" in said[0] and "cosyedge calib make --count N --out DIR" in said[0]


def test_missing_speech_synthesizers_are_one_info_line(log_records):
    from cosyedge.data.training_data import TrainingData

    td = TrainingData.__new__(TrainingData)  # only the bookkeeping of what is missing
    td.missing, td.corpora = {}, {}
    for name, tool in (("espeak", "espeak-ng"), ("flite", "flite"), ("festival", "festival")):
        err = DependencyError(f"'{tool}' not found on PATH (install it: apt-get install {tool})")
        td._missing(name, f"speech corpus {name} unavailable: {err}", False, err)
    td._missing("librispeech-x", "speech corpus librispeech-x unavailable: no network", False,
                DependencyError("no network"))  # not a synthesizer: still its own warning
    td._say_missing_synthesizers()
    warnings = [r.getMessage() for r in log_records if r.levelno >= logging.WARNING]
    infos = [r.getMessage() for r in log_records if r.levelno == logging.INFO]
    assert warnings == ["speech corpus librispeech-x unavailable: no network"]
    assert len(infos) == 1 and infos[0].startswith(
        "training speech: the synthetic corpora espeak, flite, festival are left out, their speech synthesizers not "
        "being installed ('espeak-ng' not found on PATH (install it: apt-get install espeak-ng); "), infos[0]
    assert set(td.missing) == {"espeak", "flite", "festival", "librispeech-x"}  # the manifest still lists them
