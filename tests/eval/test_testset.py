"""The committed test-set manifest: well formed, and (where the Debian data is cached) reproduced bit-exactly
by scripts/data/make_testset.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "cosyedge" / "assets" / "testset" / "manifest.json"


def _script():
    return load_script("data/make_testset")


def test_manifest_lists_30_pairs_of_heldout_speech_and_noise():
    m = json.loads(MANIFEST.read_text())
    pairs = m["pairs"]
    assert len(pairs) == 30 and len({p["name"] for p in pairs}) == 30
    assert sorted({p["snr_db"] for p in pairs}) == [0.0, 5.0, 10.0]
    assert {p["condition"] for p in pairs} == {"camaro-engine", "opensfx-heldout"}
    assert {p["speech"]["corpus"] for p in pairs} == {"librivox"}  # never used for training
    from cosyedge.data.versions import SPEECH_TRAIN_CORPORA

    assert "librivox" not in SPEECH_TRAIN_CORPORA
    for p in pairs:
        assert len(p["sha256_noisy"]) == 64 and len(p["sha256_clean"]) == 64
        assert 0 <= p["noise"]["offset_samples"] and 0 < p["gain"] <= 1.0
        assert p["noisy"] == f"noisy/{p['name']}.wav" and p["clean"] == f"clean/{p['name']}.wav"


def test_verify_reports_a_changed_file():
    mod = _script()
    ref = json.loads(MANIFEST.read_text())
    assert mod.verify(ref, ref) == []
    changed = json.loads(MANIFEST.read_text())
    changed["pairs"][3]["sha256_clean"] = "0" * 64
    del changed["pairs"][7]
    assert mod.verify(changed, ref) == sorted([ref["pairs"][7]["name"]]) + [ref["pairs"][3]["name"]]


def _data_cached() -> bool:
    d = Path(os.environ.get("COSYEDGE_DATA_DIR") or Path.home() / ".cache" / "cosyedge" / "data")
    return all((d / "corpora" / f).exists() for f in ("librivox.npy", "opensfx.npy", "heldout-camaro-engine-15s.npy"))


@pytest.mark.skipif(not _data_cached(), reason="test-set sources not in the data cache (run "
                    "scripts/data/make_testset.py once with apt access)")
def test_regenerated_testset_matches_committed_sha256(tmp_path):
    mod = _script()
    rc = mod.main(["--out", str(tmp_path)])
    assert rc == 0
    assert len(list((tmp_path / "noisy").glob("*.wav"))) == 30
    assert len(list((tmp_path / "clean").glob("*.wav"))) == 30
    from cosyedge.eval.pairs import find_items, validate_items

    items = validate_items(find_items(tmp_path))
    assert len(items) == 30 and {it.group for it in items} >= {"camaro-engine@0dB", "opensfx-heldout@10dB"}
