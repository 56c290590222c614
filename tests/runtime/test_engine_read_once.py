"""The run path resolves the engine once and reads its ONNX once: `cosyedge run FILE` and `cosyedge run mic --engine`
load the engine one time (the loaded object is passed down, not its path) and parse the model one time (the
sessions and the VAD check reuse that read); a loaded engine gives the same samples as its path."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import soundfile as sf

import cosyedge.runtime.engine as engine_mod
from cosyedge.realtime import devices as devmod
from tests.helpers import models
from tests.realtime.fakes import fake_sounddevice

SR = 16000
HOP = 160


@pytest.fixture(scope="module")
def fir(tmp_path_factory):
    return models.make_fir_model(tmp_path_factory.mktemp("read_once") / "fir.onnx", hop=HOP)


@pytest.fixture
def counts(monkeypatch):
    """Counts of engine loads and of ``onnx.load`` calls on ``.onnx`` paths."""
    seen = {"load_engine": 0, "onnx.load": 0}
    load_engine, load = engine_mod.load_engine, onnx.load

    def counted_load_engine(*a, **k):
        seen["load_engine"] += 1
        return load_engine(*a, **k)

    def counted_load(f, *a, **k):
        if isinstance(f, (str, os.PathLike)) and str(f).endswith(".onnx"):
            seen["onnx.load"] += 1
        return load(f, *a, **k)

    monkeypatch.setattr(engine_mod, "load_engine", counted_load_engine)
    monkeypatch.setattr("cosyedge.builders.cache.load_engine", counted_load_engine)
    monkeypatch.setattr(onnx, "load", counted_load)
    return seen


def _noise(seconds: float, seed: int = 0) -> np.ndarray:
    return (0.05 * np.random.default_rng(seed).standard_normal(int(seconds * SR))).astype(np.float32)


def test_file_run_loads_engine_and_reads_onnx_once(cli, fir, tmp_path, counts):
    src = tmp_path / "in.wav"
    sf.write(src, _noise(0.5), SR, subtype="FLOAT")
    rc, out, err = cli("run", src, "-o", tmp_path / "out.wav", "--engine", fir)
    assert rc == 0, err
    assert counts == {"load_engine": 1, "onnx.load": 1}


def test_mic_run_loads_engine_and_reads_onnx_once(cli, fir, tmp_path, counts, monkeypatch):
    sd = fake_sounddevice([{"name": "Mic", "max_input_channels": 1, "max_output_channels": 0,
                            "default_samplerate": 16000.0}], signal=_noise(0.3))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    rc, out, err = cli("run", "mic", "--output", tmp_path / "x.wav", "--duration", "0.2", "--engine", fir)
    assert rc == 0, err
    assert counts == {"load_engine": 1, "onnx.load": 1}


def test_loaded_engine_gives_the_samples_of_its_path(fir, tmp_path):
    from cosyedge.builders.cache import load_or_rebuild
    from cosyedge.enhance import enhance_file

    src = tmp_path / "in.wav"
    sf.write(src, _noise(0.4, seed=1), SR, subtype="FLOAT")
    a = enhance_file(src, tmp_path / "a.wav", engine=fir)
    eng = load_or_rebuild(fir)
    b = enhance_file(src, tmp_path / "b.wav", engine=eng)
    enhance_file(src, tmp_path / "c.wav", engine=eng)  # a second session on the same read model
    ya, yb, yc = (sf.read(tmp_path / f"{n}.wav", dtype="float32")[0] for n in "abc")
    assert ya.shape == (int(0.4 * SR),) and np.abs(ya).max() > 0.01
    assert np.array_equal(ya, yb) and np.array_equal(ya, yc)
    assert a["engine"] == b["engine"] == str(fir)
