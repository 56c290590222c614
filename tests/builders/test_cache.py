"""builders/cache.py: one reuse-or-build rule (default engine and check), names and typed build options."""

from __future__ import annotations

import json

import pytest

from cosyedge.artifacts import EngineManifest, SourceModel, sha256_file
from cosyedge.builders import build_ort
from cosyedge.builders.cache import label_fresh, reuse_or_build
from cosyedge.builders.config import BuildConfig
from cosyedge.builders.names import engine_folder_name, parse_precision_label, precision_label
from cosyedge.errors import ArtifactError, UsageError
from tests.helpers import models


@pytest.fixture
def fir(tmp_path):
    return models.make_fir_model(tmp_path / "fir.onnx", taps=[1.0, 0.5, 0.25], hop=4)


def test_reuse_or_build_reuses_a_fresh_folder_and_rebuilds_a_stale_one(fir, tmp_path):
    root = tmp_path / "engines"
    folder = root / engine_folder_name("fir")
    builds = []

    def build():
        builds.append(1)
        return build_ort(fir, out_dir=root)

    assert reuse_or_build(fir, folder, build=build) == folder and builds == [1]  # missing: built
    assert reuse_or_build(fir, folder, build=build) == folder and builds == [1]  # fresh: reused
    assert reuse_or_build(fir, folder, build=build, fresh=lambda f: False) == folder and builds == [1, 1]
    (folder / "model.onnx").write_bytes(b"corrupt")  # does not load: rebuilt
    assert reuse_or_build(fir, folder, build=build) == folder and len(builds) == 3


def test_label_fresh_is_checks_rule(fir, tmp_path):
    folder = build_ort(fir, out_dir=tmp_path, precision="fp16")
    digest = sha256_file(fir)
    assert label_fresh(folder, digest, "fp16")
    assert not label_fresh(folder, digest, "fp32")
    assert not label_fresh(folder, "0" * 64, "fp16")
    with pytest.raises(ArtifactError):
        label_fresh(tmp_path / "absent", digest, "fp16")


def test_build_config_is_checked_once():
    assert BuildConfig.from_flags(int8=True, calib="c", calib_count=3).options() == ("int8", False, (), "c", 3, None)
    with pytest.raises(UsageError, match="--calib is only used by --int8 builds"):
        BuildConfig.from_flags(fp16=True, calib="c")
    with pytest.raises(UsageError, match="--calib-count must be in 1..100000"):
        BuildConfig.from_flags(int8=True, calib_count=0)
    with pytest.raises(UsageError, match="unknown precision 'bf16'"):
        BuildConfig.of(precision="bf16")
    assert BuildConfig(precision="int8", sparse=True).label == "int8-sparse"
    assert parse_precision_label(precision_label("int8", True)) == ("int8", True)


def test_source_model_and_engine_manifest(fir, tmp_path):
    src = SourceModel(fir)
    assert src.sha256 == sha256_file(fir) and src.contract.name == "fir" and str(src) == str(fir)
    folder = build_ort(src, out_dir=tmp_path)
    m = EngineManifest.load(folder)
    assert (m.backend, m.precision, m.sparse, m.parent_sha256) == ("onnxruntime", "fp32", False, src.sha256)
    raw = json.loads((folder / "manifest.json").read_text())
    assert EngineManifest.from_dict({**raw, "reports": {}, "int8": {"x": 1}}).int8 == {"x": 1}  # legacy key
