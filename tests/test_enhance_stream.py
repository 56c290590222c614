"""``cosyedge run FILE`` streams the file through in blocks: the output is bit-identical to
processing the whole file at once, memory does not grow with the file's length, a bad sample deep in the file
still leaves an earlier output untouched, and long inputs get a progress bar."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from cosyedge.audio import from_model_output, load_audio, to_model_input, write_audio
from cosyedge.runtime.engine import load_engine
from cosyedge.enhance import enhance_file
from cosyedge.errors import UsageError
from cosyedge.runtime.stream import enhance_array

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
MODEL = ROOT / "cosyedge" / "models" / "reference.stream.onnx"


def _whole_file(src: Path, dst: Path, chunk_samples: int) -> None:
    """What ``cosyedge run`` did before it streamed: the whole file in memory, one array per stage."""
    x, sr = load_audio(src)
    eng = load_engine(MODEL)
    with eng(chunk_samples=chunk_samples) as session:
        ym = enhance_array(session, to_model_input(x, sr, eng.contract.sample_rate_hz))
    write_audio(dst, from_model_output(ym, eng.contract.sample_rate_hz, sr, length=x.shape[0]), sr)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def demo_44k_stereo(tmp_path_factory) -> Path:
    x, sr = sf.read(DEMO, dtype="float32")
    y = soxr.resample(x, sr, 44100)
    st = np.stack([y, 0.5 * y[::-1]], axis=1)
    p = tmp_path_factory.mktemp("in") / "demo44k.wav"
    sf.write(p, st, 44100, subtype="PCM_16")
    return p


@pytest.mark.parametrize("chunk, block", [(160, None), (160, 1000), (480, 4097)])
def test_streamed_file_is_bit_identical_to_the_whole_file_at_once(tmp_path, demo_44k_stereo, chunk, block):
    """Real speech, 44.1 kHz stereo in (downmix + two resamplers), any block size: the same bytes out."""
    ref, out = tmp_path / "whole.wav", tmp_path / "streamed.wav"
    _whole_file(demo_44k_stereo, ref, chunk)
    s = enhance_file(demo_44k_stereo, out, engine=MODEL, chunk_samples=chunk, block_frames=block)
    assert _sha(out) == _sha(ref)
    assert sf.info(out).frames == sf.info(demo_44k_stereo).frames and sf.info(out).samplerate == 44100
    assert s["channels_in"] == 2 and s["chunks"] == -(-(s["duration_s"] * 16000 + s["delay_samples"]) // chunk)


def test_streamed_file_at_the_model_rate_is_bit_identical(tmp_path):
    ref, out = tmp_path / "whole.flac", tmp_path / "streamed.flac"
    _whole_file(DEMO, ref, 160)
    enhance_file(DEMO, out, engine=MODEL, block_frames=777)
    a, _ = sf.read(ref, dtype="int16")
    b, _ = sf.read(out, dtype="int16")
    assert a.shape == b.shape and np.array_equal(a, b)


def _long_file(path: Path, seconds: float) -> Path:
    """Real speech tiled to ``seconds`` at 16 kHz, written block by block (the test holds no whole copy)."""
    x, sr = sf.read(DEMO, dtype="float32")
    n = int(seconds * sr)
    with sf.SoundFile(path, "w", sr, 1, subtype="PCM_16") as f:
        done = 0
        while done < n:
            k = min(x.size, n - done)
            f.write(x[:k])
            done += k
    return path


def _peak_traced_mb(src: Path, dst: Path) -> float:
    tracemalloc.start()
    try:
        enhance_file(src, dst, engine=MODEL, chunk_samples=1600)  # 100 ms chunks keep the test short
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_files_length(tmp_path):
    """The Python heap (numpy arrays included) peaks at a few blocks: the same for 1 and 6 minutes, and far
    below one float32 copy of the 6-minute file (23 MB) that the whole-file path held several times."""
    _peak_traced_mb(_long_file(tmp_path / "1min.wav", 60), tmp_path / "o1.wav")  # one-time costs (imports, caches)
    short = _peak_traced_mb(tmp_path / "1min.wav", tmp_path / "o1.wav")
    long = _peak_traced_mb(_long_file(tmp_path / "6min.wav", 360), tmp_path / "o6.wav")
    whole_copy_mb = 360 * 16000 * 4 / 2**20
    assert long < 6.0 < whole_copy_mb / 3, (short, long)
    assert long - short < 1.0, (short, long)


def test_a_nan_deep_in_the_file_keeps_the_earlier_output(tmp_path):
    x, sr = sf.read(DEMO, dtype="float32")
    x = np.concatenate([x, x])
    x[400_000] = np.nan  # 25 s in: several blocks were streamed and written before it
    src, out = tmp_path / "nan.wav", tmp_path / "out.wav"
    sf.write(src, x, sr, subtype="FLOAT")
    out.write_bytes(b"earlier result")
    with pytest.raises(UsageError, match=r"holds 1 NaN/Inf sample\(s\) of 553280 \(first at sample 400000 = "
                                         r"25.000 s, channel 0\)"):
        enhance_file(src, out, engine=MODEL)
    assert out.read_bytes() == b"earlier result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.wav", "out.wav"]


def test_progress_bar_when_asked_and_only_on_a_terminal_by_default(tmp_path, capsys):
    src = _long_file(tmp_path / "40s.wav", 40)
    enhance_file(src, tmp_path / "a.wav", engine=MODEL, chunk_samples=1600, progress=True)
    err = capsys.readouterr().err
    assert "enhance:" in err and "s audio" in err and "/40 s audio" in err
    enhance_file(src, tmp_path / "b.wav", engine=MODEL, chunk_samples=1600)  # stderr is not a terminal here
    assert "enhance:" not in capsys.readouterr().err


def test_delay_compensator_is_one_mechanism_for_files_arrays_and_the_live_path():
    """runtime.stream.DelayCompensator: a pure delay comes back as its input whatever the
    split of the feeds; with delay 0 (the live path) the output is the raw stream cut to the input length."""
    from cosyedge.runtime.stream import DelayCompensator

    d, c = 7, 5
    state = {"buf": np.zeros(d, np.float32)}

    def delay_push(x):  # (1, 1, c) -> (1, 1, c): y[t] = x[t - d]
        xs = np.concatenate([state["buf"], x[0, 0]])
        state["buf"] = xs[-d:].copy()
        return xs[None, None, :c].copy()

    x = np.arange(1, 24, dtype=np.float32)
    for splits in ([23], [1, 4, 18], [5, 5, 5, 8], [0, 3, 0, 20]):
        state["buf"][:] = 0.0
        comp = DelayCompensator(delay_push, c, d)
        parts, at = [], 0
        for n in splits:
            parts.append(comp.feed(x[at:at + n]))
            at += n
        parts.append(comp.finish(ndim=1))
        y = np.concatenate(parts)
        np.testing.assert_array_equal(y, x)
        assert (comp.fed, comp.kept, comp.dropped, comp.chunks) == (23, 23, d, -(-(23 + d) // c))
    state["buf"][:] = 0.0
    live = DelayCompensator(delay_push, c, 0)
    y = np.concatenate([live.feed(x[:9]), live.feed(x[9:]), live.finish(ndim=1)])
    np.testing.assert_array_equal(y, np.concatenate([np.zeros(d, np.float32), x[:-d]]))
    with pytest.raises(UsageError, match="delay_samples >= 0"):
        DelayCompensator(delay_push, c, -1)
