"""One fake microphone input through the mic driver (cosyedge.drivers.mic.drive_mic), with either sink, gives what
the file driver (cosyedge.drivers.file.stream_file) gives on the input the model heard: the enhancer's audio bit for
bit (live output not delay-shifted, the file's is), the VAD's probabilities and segments exactly; pick_sink chooses
the sink from the model's task and refuses the other kind."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from cosyedge.audio import AudioReader, IncrementalAudioWriter
from cosyedge.builders.cache import load_or_rebuild
from cosyedge.drivers import AUDIO, SEGMENTS, pick_sink
from cosyedge.drivers.file import AudioFileSink, stream_file
from cosyedge.drivers.mic import drive_mic
from cosyedge.errors import UsageError
from cosyedge.realtime import devices as devmod
from tests.helpers import models
from tests.realtime.fakes import fake_sounddevice

SR = 16000
DEMO = "cosyedge/assets/demo/noisy.wav"


@pytest.fixture(scope="module")
def fir(tmp_path_factory):
    """A FIR enhancer, hop 16, that declares a 3-sample delay (the file driver drops 3 leading outputs)."""
    return load_or_rebuild(models.make_fir_model(tmp_path_factory.mktemp("drv") / "fir.onnx", hop=16,
                                                 delay_samples=3))


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    """Silero VAD's engine, made in a private engines root."""
    import os

    pytest.importorskip("silero_vad")
    from cosyedge.builders.named import recipe_engine

    root = tmp_path_factory.mktemp("engines")
    old = os.environ.get("COSYEDGE_ENGINES_DIR")
    os.environ["COSYEDGE_ENGINES_DIR"] = str(root)
    try:
        return load_or_rebuild(recipe_engine("silero-vad"))
    finally:
        if old is None:
            os.environ.pop("COSYEDGE_ENGINES_DIR")
        else:
            os.environ["COSYEDGE_ENGINES_DIR"] = old


def _speech(seconds: float) -> np.ndarray:
    x, sr = sf.read(DEMO, dtype="float32")
    assert sr == SR
    return np.ascontiguousarray(x[: int(seconds * SR)])


def _mic(eng, sink, signal, tmp_path, writer=None):
    """Run the fake 16 kHz microphone (4x real time) playing ``signal`` through ``eng`` into ``sink``; returns the
    result, the core and what the model heard (float32, the --save-input file)."""
    sd = fake_sounddevice([{"name": "Fake Mic", "max_input_channels": 1, "max_output_channels": 0,
                            "default_samplerate": float(SR)}], signal=signal, default=(0, 0))
    dev = devmod.resolve_device(None, "input", sd)
    rate = devmod.pick_sample_rate(dev, None, sd)
    heard_writer = IncrementalAudioWriter(tmp_path / "heard.wav", SR, exact=True)
    result, core = drive_mic(sd, dev, rate, eng(threads=1), sink, writer=writer, input_writer=heard_writer,
                             duration_s=signal.size / SR)
    heard, _ = sf.read(str(tmp_path / "heard.wav"), dtype="float32")
    assert result["chunks"] >= signal.size // eng.contract.hop_samples and result["device"] == "Fake Mic"
    return result, core, heard


def test_audio_sink_live_equals_the_file_driver_on_what_the_model_heard(fir, tmp_path):
    signal = _speech(1.0)
    live_writer = IncrementalAudioWriter(tmp_path / "live.wav", SR, exact=True)
    _result, core, heard = _mic(fir, None, signal, tmp_path, writer=live_writer)
    live, _ = sf.read(str(tmp_path / "live.wav"), dtype="float32")
    assert live.size == heard.size == core.fed >= signal.size
    with AudioReader(tmp_path / "heard.wav") as reader, fir(threads=1) as session:
        w = IncrementalAudioWriter(tmp_path / "replay.wav", SR, exact=True)
        stream_file(reader, session, AudioFileSink(w, fir.contract, SR, "fir"))
        w.close()
    replay, _ = sf.read(str(tmp_path / "replay.wav"), dtype="float32")
    d = fir.contract.delay_samples
    assert d == 3 and replay.size == heard.size
    assert np.array_equal(live[d:], replay[:-d])  # the same floats; live is heard as it comes, d samples late
    want = models.fir_reference(heard, models.default_taps())[0]
    assert np.abs(live - want).max() <= 1e-6 and np.abs(live).max() > 0.05


def test_vad_sink_live_equals_the_file_driver_on_what_the_model_heard(silero, tmp_path):
    from cosyedge.vad.live import LiveVadSink
    from cosyedge.vad.stream import detect_file, segments_report

    _kind, out = pick_sink(silero, vad=True, where="silero", mic=True)
    sink = LiveVadSink(silero.contract, out)
    _result, core, heard = _mic(silero, sink, _speech(4.0), tmp_path)
    probs = sink.hop_probs(core.fed)
    rep = detect_file(tmp_path / "heard.wav", silero)
    assert core.fed == heard.size and len(probs) == rep["hops"] == -(-heard.size // 512)
    assert probs == rep["probs"]  # exactly: the same chunks through the same model
    assert segments_report(probs, core.fed, silero.contract)["segments"] == rep["segments"]
    assert len(rep["segments"]) >= 1 and rep["speech_hops"] > 20  # real speech in noisy.wav's first 4 s


def test_pick_sink_follows_the_task_and_refuses_the_other_kind(fir, silero):
    assert pick_sink(fir, vad=False, where="fir.onnx") == (AUDIO, fir.contract.output)
    assert pick_sink(silero, vad=True, where="silero") == (SEGMENTS, "speech_prob")
    with pytest.raises(UsageError, match="a voice activity detector: it gives a speech probability per 32 ms hop"):
        pick_sink(silero, vad=False, where="silero")
    with pytest.raises(UsageError, match=r"--vad needs a voice activity detector .* is an enhancer"):
        pick_sink(fir, vad=True, where="fir.onnx")
