"""The Silero VAD stream model equals the package's own loop, its segments equal the
package's get_speech_timestamps on both bundled recordings, `cosyedge run FILE --vad` and `run mic --vad`
write them, and a VAD and an enhancer each refuse the other's command in one line."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.vad.segments import speech_timestamps_from_probs
from tests.helpers.cli_errors import refused

DEMO = Path(__file__).resolve().parents[2] / "cosyedge" / "assets" / "demo"
RECORDINGS = ("clean", "noisy")
RECON_SECONDS = {  # measured with the package: get_speech_timestamps (defaults), samples / 16000
    "clean": [(0.802, 7.518), (8.354, 10.974), (11.746, 16.67)],
    "noisy": [(0.578, 7.902), (8.354, 9.15), (9.282, 10.974), (11.746, 16.702)],
}
HOP = 512

pytest.importorskip("silero_vad", reason="silero-vad wheel (tests/requirements-thirdparty.txt)")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """A private engines root holding the Silero stream ONNX and its engine, made once by `run --vad`'s path."""
    import os

    from cosyedge.builders.named import recipe_engine

    root = tmp_path_factory.mktemp("engines")
    old = os.environ.get("COSYEDGE_ENGINES_DIR")
    os.environ["COSYEDGE_ENGINES_DIR"] = str(root)
    try:
        folder = recipe_engine("silero-vad")
    finally:
        if old is None:
            os.environ.pop("COSYEDGE_ENGINES_DIR")
        else:
            os.environ["COSYEDGE_ENGINES_DIR"] = old
    return types.SimpleNamespace(root=root, folder=folder, onnx=root / "silero-vad.stream.onnx")


@pytest.fixture
def cli(cli, engines, monkeypatch):
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(engines.root))
    return cli


def _audio(name: str) -> np.ndarray:
    x, sr = sf.read(str(DEMO / f"{name}.wav"), dtype="float32")
    assert sr == 16000 and x.ndim == 1
    return x


def _package_probs(x: np.ndarray) -> np.ndarray:
    """The package's own loop: OnnxWrapper (load_silero_vad(onnx=True)) as get_speech_timestamps drives it."""
    torch = pytest.importorskip("torch")
    from silero_vad import load_silero_vad

    model = load_silero_vad(onnx=True)
    model.reset_states()
    t = torch.from_numpy(x)
    out = []
    for i in range(0, len(x), HOP):
        ch = t[i:i + HOP]
        if len(ch) < HOP:
            ch = torch.nn.functional.pad(ch, (0, HOP - len(ch)))
        out.append(model(ch, 16000).item())
    return np.asarray(out)


def _package_segments(x: np.ndarray) -> list[tuple[int, int]]:
    torch = pytest.importorskip("torch")
    from silero_vad import get_speech_timestamps, load_silero_vad

    ts = get_speech_timestamps(torch.from_numpy(x), load_silero_vad(onnx=True), sampling_rate=16000)
    return [(d["start"], d["end"]) for d in ts]


@pytest.mark.parametrize("name", RECORDINGS)
def test_stream_probabilities_equal_the_package_loop(engines, name):
    """The adopted stream ONNX, chunks of 1 and 4 hops, vs silero_vad's OnnxWrapper loop: max abs 0 measured."""
    from cosyedge.runtime import OrtStreamSession
    from cosyedge.vad.stream import ProbabilityRecorder

    x = _audio(name)
    want = _package_probs(x)
    assert want.size == -(-x.size // HOP) == 541
    for hops in (1, 4):
        with OrtStreamSession(engines.onnx, chunk_samples=hops * HOP) as s:
            rec = ProbabilityRecorder(s, "speech_prob")
            rec.feed(x[:100_000])
            rec.feed(x[100_000:])
            got = np.asarray(rec.finish())
        assert got.size == want.size
        assert np.abs(got - want).max() <= 1e-6, (name, hops, np.abs(got - want).max())
    assert (want >= 0.5).sum() > 400  # real speech: most hops are speech


def test_recipe_records_where_it_comes_from_and_its_contract(engines):
    from cosyedge.artifacts import StreamContract, load_onnx

    c = StreamContract.from_onnx(engines.onnx)
    assert (c.sample_rate_hz, c.hop_samples, c.delay_samples, c.input) == (16000, 512, 0, "audio")
    (o,) = c.stream_outputs
    assert (o.name, o.kind, o.frames_per_hop) == ("speech_prob", "features", 1)
    assert [s.shape for s in c.states] == [["N", 1, 64], ["N", 2, 128]]
    assert c.proof["package_reference_max_abs"] <= 1e-6
    # the export's proof covers every sample as `run --vad` does: 17.29 s = 540.3 hops -> 541, the last zero-padded
    # (it said 540, trimmed to whole 4-hop chunks, while run said 541)
    assert c.proof["package_reference_hops"] == 541 == -(-_audio("noisy").size // HOP)
    meta = {p.key: p.value for p in load_onnx(engines.onnx, load_external_data=False).metadata_props}
    rec = json.loads(meta["recipe"])
    assert rec["task"] == "vad" and rec["version"] == "6.2.3" and rec["network"].endswith("openvino_16k.onnx")


def test_the_export_declares_a_vad_and_without_the_key_resolves_the_same(engines, tmp_path):
    """The recipe writes ``cosyedge.task`` ``"vad"``; the same model without it (an export from before the key)
    resolves through the guess to the same task and probability output."""
    import onnx

    from cosyedge.artifacts import StreamContract, model_metadata, resolve_task

    m = onnx.load(str(engines.onnx))
    assert {p.key: p.value for p in m.metadata_props}["cosyedge.task"] == "vad"
    new = resolve_task(StreamContract.from_onnx(engines.onnx))
    assert (new.task, new.speech_output, new.declared) == ("vad", "speech_prob", True)
    keep = [p for p in m.metadata_props if p.key != "cosyedge.task"]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    onnx.save(m, str(tmp_path / "old.onnx"))
    old = resolve_task(StreamContract.from_onnx(tmp_path / "old.onnx"), model_metadata(tmp_path / "old.onnx"))
    assert (old.task, old.speech_output, old.declared) == ("vad", "speech_prob", False)


@pytest.mark.parametrize("name", RECORDINGS)
def test_segments_equal_package_get_speech_timestamps(engines, name):
    """detect_file (the cosyedge stream + the ported rule) vs the package's get_speech_timestamps (defaults):
    identical samples (target: within one hop), and the recon's seconds."""
    from cosyedge.vad.stream import detect_file

    x = _audio(name)
    rep = detect_file(DEMO / f"{name}.wav", engines.folder)
    got = [(s["start_sample"], s["end_sample"]) for s in rep["segments"]]
    want = _package_segments(x)
    assert len(got) == len(want) and all(abs(a - b) <= HOP for g, w in zip(got, want) for a, b in zip(g, w))
    assert got == want
    assert [(s["start"], s["end"]) for s in rep["segments"]] == RECON_SECONDS[name]
    assert rep["hops"] == 541 and rep["speech_hops"] == {"clean": 435, "noisy": 438}[name]


def test_ported_rule_equals_the_package_on_every_branch():
    """The port vs silero_vad.utils_vad.get_speech_timestamps_from_probs on random probability tracks, with
    the cuts at a maximum length (both cut rules), short pads and thresholds exercised."""
    pytest.importorskip("torch")
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    rng = np.random.default_rng(39)
    cases = [{}, {"max_speech_duration_s": 1.0},
             {"max_speech_duration_s": 1.0, "use_max_poss_sil_at_max_speech": False},
             {"threshold": 0.3, "speech_pad_ms": 200}, {"min_silence_duration_ms": 300, "min_speech_duration_ms": 60},
             {"sampling_rate": 8000, "max_speech_duration_s": 0.7}]
    n_nonempty = 0
    for k, kw in enumerate(cases):
        for trial in range(20):
            # a smoothed random walk: runs of speech and silence like a real track
            p = 1 / (1 + np.exp(-np.cumsum(rng.normal(0, 0.8, 300)) * 0.7))
            probs = [float(v) for v in p]
            length = len(probs) * 512 - int(rng.integers(0, 512))
            want = get_speech_timestamps_from_probs(list(probs), audio_length_samples=length, **kw)
            got = speech_timestamps_from_probs(probs, audio_length_samples=length, **kw)
            assert got == want, (kw, trial)
            n_nonempty += bool(got)
    assert n_nonempty > 60


def test_cli_run_file_vad_writes_json_and_reuses_the_engine(cli, engines, tmp_path):
    rc, out, err = cli("run", DEMO / "noisy.wav", "--vad", "-o", tmp_path / "seg.json")
    assert rc == 0, err
    assert "silero-vad: reusing the engine" in err and "exporting" not in err
    data = json.loads((tmp_path / "seg.json").read_text())
    assert [(s["start"], s["end"]) for s in data["segments"]] == RECON_SECONDS["noisy"]
    assert data["sample_rate_hz"] == 16000 and data["hop_samples"] == 512 and "probs" not in data
    # one count (hops; chunks repeated it at one-hop chunks), the chunk length beside it; a newline at the end
    text = (tmp_path / "seg.json").read_text()
    assert data["hops"] == 541 and data["chunk_samples"] == 512 and "chunks" not in data
    assert text.endswith("}\n") and text.count('"hops"') == 1
    assert "4 speech segment(s)" in out.strip().splitlines()[-1]
    rc, out, err = cli("run", DEMO / "clean.wav", "--vad", "--chunk-ms", "128")  # printed, 4-hop chunks
    assert rc == 0, err
    assert out.splitlines()[:3] == ["speech 0.802 - 7.518 s", "speech 8.354 - 10.974 s", "speech 11.746 - 16.670 s"]


def test_cli_vad_model_without_vad_is_refused_in_one_line(cli, engines, tmp_path):
    rc, _out, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "x.wav", "--engine", engines.folder)
    line = refused(rc, err, 2)
    assert "is Silero VAD (Silero Team, 16 kHz), a voice activity detector: it gives a speech probability per " \
           "32 ms hop ('speech_prob'), not audio" in line
    assert "cosyedge run FILE --vad --engine MODEL" in line
    rc, _out, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "x.wav", "--model", "silero-vad")
    assert "a voice activity detector" in refused(rc, err, 2)
    rc, _out, err = cli("run", "mic", "-o", tmp_path / "x.wav", "--engine", engines.folder)
    assert "cosyedge run mic --vad --engine MODEL" in refused(rc, err, 2)
    assert list(tmp_path.iterdir()) == []


def test_cli_vad_with_an_enhancer_and_bad_vad_output_are_refused(cli, tmp_path):
    from cosyedge.models import require_reference

    ref = require_reference("")
    rc, _out, err = cli("run", DEMO / "noisy.wav", "--vad", "--engine", ref)
    line = refused(rc, err, 2)
    assert "--vad needs a voice activity detector" in line and "is an enhancer (waveform in, waveform out)" in line
    rc, _out, err = cli("run", DEMO / "noisy.wav", "--vad", "-o", tmp_path / "x.wav")
    assert "with --vad, -o is the speech segments file: give a .json name" in refused(rc, err, 2)
    assert list(tmp_path.iterdir()) == []


def test_cli_run_mic_vad_shows_speech_and_gives_the_file_segments(cli, engines, tmp_path, monkeypatch):
    """The fake microphone (16 kHz, 4x real time) plays clean.wav: the live status shows speech, and the
    segments at the end equal `run --vad` on the input the model heard (--save-input) and the package's own
    segments of that input (clean.wav, less any block a loaded machine dropped) within one hop."""
    from cosyedge.realtime import devices as devmod
    from tests.realtime.fakes import fake_sounddevice

    x = _audio("clean")
    sd = fake_sounddevice([{"name": "Fake Mic", "max_input_channels": 1, "max_output_channels": 0,
                            "default_samplerate": 16000.0}], signal=x, default=(0, 0))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    rc, out, err = cli("run", "mic", "--vad", "--duration", f"{x.size / 16000:.3f}", "-o", tmp_path / "live.json",
                       "--save-input", tmp_path / "heard.wav")
    assert rc == 0, err
    assert "SPEECH  p " in err or "silence p " in err
    assert out.strip().splitlines()[-1].startswith("mic 0 'Fake Mic' at 16000 Hz -> ")
    live = json.loads((tmp_path / "live.json").read_text())
    rc, _out, err = cli("run", tmp_path / "heard.wav", "--vad", "-o", tmp_path / "replay.json")
    assert rc == 0, err
    replay = json.loads((tmp_path / "replay.json").read_text())
    assert live["segments"] == replay["segments"]
    # what the model heard: all of clean.wav unless a loaded machine dropped blocks (an input overflow is counted,
    # never fatal), so the package's segments of that same audio are the reference
    heard, _sr = sf.read(str(tmp_path / "heard.wav"), dtype="float32")
    want = _package_segments(np.ascontiguousarray(heard, np.float32))
    got = [(s["start_sample"], s["end_sample"]) for s in live["segments"]]
    assert len(got) == len(want) and all(abs(a - b) <= HOP for g, w in zip(got, want) for a, b in zip(g, w)), got


def test_silero_onnx_adopted_from_the_wheel_runs_with_vad_and_is_refused_without(cli, engines, tmp_path):
    """Silero's own silero_vad.onnx, adopted (output 'output', no recipe metadata): `run --vad` gives the
    recipe's segments on noisy.wav; without --vad the one-line refusal points at --vad."""
    import silero_vad

    from cosyedge.vad.stream import detect_file

    src = Path(silero_vad.__file__).parent / "data" / "silero_vad.onnx"
    s1 = tmp_path / "s1.onnx"
    rc, _out, err = cli("adopt", src, "-o", s1, "--sample-rate-hz", 16000, "--const", "sr=16000",
                        "--frame-samples", 576, "--hop-samples", 512)
    assert rc == 0, err
    rc, out, err = cli("run", DEMO / "noisy.wav", "--vad", "--engine", s1, "-o", tmp_path / "seg.json")
    assert rc == 0, err
    got = json.loads((tmp_path / "seg.json").read_text())["segments"]
    assert got == detect_file(DEMO / "noisy.wav", engines.folder)["segments"]
    assert [(s["start"], s["end"]) for s in got] == RECON_SECONDS["noisy"]
    rc, _out, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "x.wav", "--engine", s1)
    line = refused(rc, err, 2)
    assert "a voice activity detector: it gives a speech probability per 32 ms hop ('output')" in line
    assert "cosyedge run FILE --vad --engine MODEL" in line and not (tmp_path / "x.wav").exists()


def test_compare_judges_a_vad_by_its_probabilities_and_segments(cli, engines, tmp_path):
    """`compare` of a VAD (output: one probability per hop, not audio) reports max abs, hops across 0.5 and the
    segments and passes when they are unchanged (it used to die on SI-SNR of 543 values vs 276640 samples);
    a track whose segments change fails, naming them."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.compare.probs import probability_failures, probability_stats

    rc, out, err = cli("compare", engines.onnx, engines.folder, "--json", tmp_path / "c.json", "--no-pesq")
    assert rc == 0, err
    assert "speech_prob (one value per hop): max abs 0.000e+00, 0/541 hops cross 0.5, speech segments unchanged " \
           "(4 vs 4)" in out
    assert out.strip().splitlines()[-1].startswith("PASS: fp32 within tolerance on 2 utterance(s)")
    p = json.loads((tmp_path / "c.json").read_text())["modes"]["free-running"]["utterances"]["demo-noisy"]
    assert p["probabilities"]["segments_ref"] == [list(s) for s in RECON_SECONDS["noisy"]]
    c = StreamContract.from_onnx(engines.onnx)
    ref = _package_probs(_audio("noisy")).astype(np.float32)
    cand = ref.copy()
    cand[300:340] = 0.0  # 1.28 s of silence in a segment: the segments change
    st = probability_stats(_audio("noisy").size, ref, cand, c, vad=True)
    assert st["flips"] == int((ref[300:340] >= 0.5).sum()) > 30 and not st["segments_equal"]
    (fail,) = probability_failures("free-running 'demo-noisy'", "speech_prob", st)
    assert fail.startswith("free-running 'demo-noisy' speech_prob: speech segments changed (4 vs reference 4; "
                           f"{st['flips']}/541 hops cross 0.5, max abs 1)")
    st = probability_stats(_audio("noisy").size, ref, cand, c, vad=False)  # not a VAD: any hop across 0.5 fails
    assert "segments_equal" not in st and "hops cross 0.5" in probability_failures("x", "p", st)[0]
