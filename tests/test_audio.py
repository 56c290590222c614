"""Audio file I/O and validation (cosyedge.audio)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from cosyedge.audio import (
    check_output_path,
    from_model_output,
    load_audio,
    to_model_input,
    write_audio,
)
from cosyedge.errors import ArtifactError, UsageError


def _sine(sr: int, seconds: float, hz: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_load_audio_shape_dtype_rate(tmp_path):
    x = np.stack([_sine(44100, 0.2), _sine(44100, 0.2, hz=1000)], axis=1)
    sf.write(tmp_path / "st.flac", x, 44100, subtype="PCM_16")
    y, sr = load_audio(tmp_path / "st.flac")
    assert sr == 44100 and y.dtype == np.float32 and y.shape == (8820, 2)
    assert np.abs(y - x).max() < 1e-4


def test_load_audio_missing(tmp_path):
    with pytest.raises(ArtifactError, match="not found"):
        load_audio(tmp_path / "nope.wav")
    with pytest.raises(ArtifactError, match="not a file"):
        load_audio(tmp_path)


def test_load_audio_corrupt(tmp_path):
    bad = tmp_path / "noise.wav"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ArtifactError, match="cannot decode .*noise.wav"):
        load_audio(bad)
    txt = tmp_path / "notes.flac"
    txt.write_text("not audio at all\n")
    with pytest.raises(ArtifactError, match="cannot decode"):
        load_audio(txt)


def test_load_audio_empty(tmp_path):
    sf.write(tmp_path / "empty.wav", np.zeros((0, 1), np.float32), 16000)
    with pytest.raises(ArtifactError, match="no samples"):
        load_audio(tmp_path / "empty.wav")


def test_load_audio_nan(tmp_path):
    x = _sine(16000, 0.1)
    x[100], x[1200] = np.nan, np.inf
    sf.write(tmp_path / "nan.wav", x, 16000, subtype="FLOAT")
    with pytest.raises(UsageError, match=r"2 NaN/Inf sample\(s\) of 1600 \(first at sample 100 = 0.006 s, channel 0\)"):
        load_audio(tmp_path / "nan.wav")


@pytest.mark.parametrize("rate, ok", [(1, False), (3999, False), (4000, True), (8000, True)])
def test_load_audio_refuses_a_rate_with_no_speech_band(tmp_path, rate, ok):
    """A 1 Hz header once 'enhanced' into 20 s of zeros; below 4 kHz the file is refused (exit 2)."""
    sf.write(tmp_path / "r.wav", _sine(16000, 0.01)[:200], rate)
    if ok:
        assert load_audio(tmp_path / "r.wav")[1] == rate
    else:
        with pytest.raises(UsageError, match=rf"sample rate of {rate} Hz, below 4000 Hz: no speech band"):
            load_audio(tmp_path / "r.wav")


def test_load_audio_clipped_warns(tmp_path, warnings_seen):
    x = _sine(16000, 0.1, amp=2.0)  # ~ 2/3 of the samples at full scale after PCM_16 clipping
    sf.write(tmp_path / "loud.wav", np.clip(x, -1, 1), 16000, subtype="PCM_16")
    y, _ = load_audio(tmp_path / "loud.wav")
    assert y.shape == (1600, 1)
    msgs = [r.getMessage() for r in warnings_seen]
    assert len(msgs) == 1 and "looks clipped" in msgs[0] and "% of samples" in msgs[0]
    frac = float(msgs[0].split(": ")[1].split("%")[0])
    assert 55 < frac < 75
    warnings_seen.clear()
    sf.write(tmp_path / "ok.wav", _sine(16000, 0.1), 16000)
    load_audio(tmp_path / "ok.wav")
    assert warnings_seen == []


def test_to_model_input_downmix_and_resample():
    x = np.stack([_sine(48000, 0.5), np.zeros(24000, np.float32)], axis=1)
    m = to_model_input(x, 48000, 16000)
    assert m.dtype == np.float32 and m.shape == (8000,)
    ref = 0.5 * _sine(16000, 0.5)  # mean of (sine, 0)
    assert np.abs(m[200:-200] - ref[200:-200]).max() < 1e-3  # linear phase: no shift
    same = to_model_input(x, 16000, 16000)
    np.testing.assert_allclose(same, x.mean(axis=1))


@pytest.mark.parametrize("sr", [8000, 22050, 44100, 48000])
def test_from_model_output_length_exact(sr):
    n = int(sr * 0.37) + 1
    m = to_model_input(_sine(sr, n / sr)[:, None], sr, 16000)
    back = from_model_output(m, 16000, sr, length=n)
    assert back.shape == (n,) and back.dtype == np.float32
    assert np.abs(back[300:-300] - _sine(sr, n / sr)[300:-300]).max() < 2e-3


def test_check_output_path(tmp_path):
    assert check_output_path(tmp_path / "new" / "deeper" / "out.wav") == tmp_path / "new" / "deeper" / "out.wav"
    assert not (tmp_path / "new").exists()  # nothing created by the check
    assert list(tmp_path.iterdir()) == []  # probe file removed
    with pytest.raises(UsageError, match="unsupported extension '.mp4'"):
        check_output_path(tmp_path / "out.mp4")
    with pytest.raises(UsageError, match="unsupported extension"):
        check_output_path(tmp_path / "out")
    with pytest.raises(ArtifactError, match="is a folder"):
        (tmp_path / "d.wav").mkdir()
        check_output_path(tmp_path / "d.wav")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ArtifactError, match="is not a folder"):
        check_output_path(tmp_path / "file.txt" / "out.wav")
    with pytest.raises(ArtifactError, match="cannot create files in /proc"):
        check_output_path("/proc/x.wav")  # passes os.access as root: only the probe catches it


@pytest.mark.parametrize("ext, subtype", [(".wav", "PCM_16"), (".flac", "PCM_16"), (".ogg", "VORBIS")])
def test_write_audio_formats(tmp_path, ext, subtype):
    y = _sine(16000, 0.25)
    path = write_audio(tmp_path / f"out{ext}", y, 16000)
    info = sf.info(str(path))
    assert info.samplerate == 16000 and info.channels == 1 and info.frames == 4000 and info.subtype == subtype
    assert [p.name for p in tmp_path.iterdir()] == [f"out{ext}"]


def test_write_audio_clips_and_is_atomic(tmp_path):
    path = tmp_path / "out.wav"
    write_audio(path, np.array([2.0, -2.0, 0.5], np.float32), 8000)
    r, _ = sf.read(str(path), dtype="float32")
    assert r[0] == pytest.approx(32767 / 32768) and r[1] == -1.0 and r[2] == pytest.approx(0.5, abs=1e-4)
    before = path.read_bytes()
    with pytest.raises(ArtifactError, match="NaN/Inf"):
        write_audio(path, np.array([0.0, np.nan], np.float32), 8000)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["out.wav"]
