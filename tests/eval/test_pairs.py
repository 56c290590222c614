"""Finding pairs: folder layouts, JSON/CSV manifests, SNR from names; header checks before processing."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from cosyedge.errors import ArtifactError, UsageError
from cosyedge.eval.pairs import find_items, snr_from_name, validate_items
from tests.eval.conftest import write_pair_folder


@pytest.mark.parametrize("name,snr", [("a_5dB", 5.0), ("b@-5dB", -5.0), ("c_snr10dB", 10.0), ("n-5dB", 5.0),
                                      ("n_-5dB", -5.0), ("mix10dBA", None), ("x 2.5 dB", 2.5),
                                      ("speech_0dB_take2", 0.0), ("plain", None), ("mp3_128kbps", None)])
def test_snr_from_name(name, snr):
    assert snr_from_name(name) == snr


def test_folder_layout_pairs_by_relative_path(tmp_path):
    write_pair_folder(tmp_path, seconds=1.0, names=("a_0dB", "b_10dB"))
    (tmp_path / "noisy" / "README.txt").write_text("not audio")  # skipped with a warning
    items = validate_items(find_items(tmp_path))
    assert [it.name for it in items] == ["a_0dB", "b_10dB"]
    assert [it.snr_db for it in items] == [0.0, 10.0]
    assert all(it.clean == tmp_path / "clean" / it.noisy.name for it in items)
    assert items[0].frames == 16000 and items[0].sample_rate_hz == 16000
    assert [it.group for it in items] == ["0dB", "10dB"]


def test_condition_subfolder_and_noisy_only(tmp_path):
    write_pair_folder(tmp_path / "set", seconds=1.0, names=("babble/a_5dB",))
    items = find_items(tmp_path / "set")
    assert items[0].condition == "babble" and items[0].group == "babble@5dB"
    only = tmp_path / "only"
    only.mkdir()
    (tmp_path / "set" / "noisy" / "babble" / "a_5dB.wav").rename(only / "rec.wav")
    items = find_items(only)
    assert len(items) == 1 and items[0].clean is None and items[0].group == "all"


def test_json_and_csv_manifests(tmp_path):
    write_pair_folder(tmp_path, seconds=1.0, names=("a",))
    rows = [{"name": "x", "noisy": "noisy/a.wav", "clean": "clean/a.wav", "snr_db": 5, "noise": {"name": "engine"}}]
    (tmp_path / "m.json").write_text(json.dumps({"pairs": rows}))
    it = find_items(tmp_path / "m.json")[0]
    assert (it.name, it.condition, it.snr_db, it.clean) == ("x", "engine", 5.0, tmp_path / "clean" / "a.wav")
    (tmp_path / "m.csv").write_text("noisy,clean,condition,snr_db\nnoisy/a.wav,,cafe,-5\n")
    it = find_items(tmp_path / "m.csv")[0]
    assert (it.condition, it.snr_db, it.clean) == ("cafe", -5.0, None)


def test_validation_errors_name_the_file(tmp_path):
    write_pair_folder(tmp_path, seconds=1.0, names=("a",))
    clean = tmp_path / "clean" / "a.wav"
    x, sr = sf.read(str(clean), dtype="float32")
    sf.write(str(clean), x[:-5], sr)
    with pytest.raises(UsageError, match=r"clean/a\.wav has 15995 samples but .*noisy/a\.wav has 16000"):
        validate_items(find_items(tmp_path))
    sf.write(str(clean), x, 8000)
    with pytest.raises(UsageError, match=r"clean/a\.wav is at 8000 Hz but .*noisy/a\.wav at 16000 Hz"):
        validate_items(find_items(tmp_path))
    clean.write_text("this is not audio")
    with pytest.raises(ArtifactError, match=r"cannot decode .*clean/a\.wav as audio"):
        validate_items(find_items(tmp_path))
    clean.unlink()
    with pytest.raises(ArtifactError, match=r"clean reference missing for .*noisy/a\.wav"):
        find_items(tmp_path)
    with pytest.raises(UsageError, match="folder or a .json/.csv manifest"):
        find_items(tmp_path / "noisy" / "a.wav")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ArtifactError, match=r"bad\.json is not valid JSON"):
        find_items(tmp_path / "bad.json")
