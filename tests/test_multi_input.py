"""Models with several inputs (``audio`` and ``ref``, both (N, 1, T) waveforms) through every
stage: build at every precision and for Triton, compare/check, StreamPool; ``run`` and TensorRT refuse them in one
line (exit 2), and feature inputs are refused by name wherever cosyedge has to make feeds from audio.

The model is built here with torch (a conv reading both inputs, two inner convs INT8 and 2:4 can work on, a last
conv), exported with a dynamic time axis and made a stream graph with ``streamify``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cosyedge.errors import UsageError  # noqa: E402
from tests.helpers.cli_errors import one_error_line  # noqa: E402
from tests.helpers.metrics import snr_db
from tests.helpers.audio import demo_speech

SR = 16000
HOP = 160
ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


class TwoInNet(nn.Module):
    """(audio, ref) float32 (N, 1, T) each -> enhanced (N, 1, T); causal convs only."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv1d(2, 16, 3)
        self.mid = nn.Conv1d(16, 16, 3)
        self.mid2 = nn.Conv1d(16, 16, 1)
        self.dec = nn.Conv1d(16, 1, 1)

    def forward(self, audio, ref):
        h = torch.relu(self.enc(F.pad(torch.cat([audio, ref], 1), (2, 0))))
        h = torch.relu(self.mid(F.pad(h, (2, 0))))
        h = torch.relu(self.mid2(h))
        return self.dec(h)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("multiin")


@pytest.fixture(scope="module")
def twoin(work) -> tuple[Path, nn.Module]:
    """(streaming ONNX of :class:`TwoInNet`, the torch model)."""
    from cosyedge.surgery.streamify import streamify

    torch.manual_seed(0)
    model = TwoInNet().eval()
    x = torch.randn(1, 1, 1600) * 0.1
    path = work / "twoin.onnx"
    torch.onnx.export(model, (x, x), str(path), input_names=["audio", "ref"], output_names=["enhanced"],
                      dynamic_axes={"audio": {0: "N", 2: "T"}, "ref": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                      dynamo=False, opset_version=17)
    out = work / "twoin.stream.onnx"
    streamify(path, out, sample_rate_hz=SR, hop_samples=HOP)
    return out, model


# ------------------------------------------------------------------------------------------------ feeds and run
def test_feeds_follow_the_contract(twoin):
    from cosyedge.artifacts import StreamContract
    from cosyedge.runtime import feeds

    c = StreamContract.from_onnx(twoin[0])
    assert feeds.primary_input(c).name == "audio" and [i.name for i in feeds.partner_inputs(c)] == ["ref"]
    sigs = [np.full(5, k, np.float32) for k in range(3)]
    assert [float(v[0]) for v in feeds.pick_partners(c, sigs, 2).values()] == [0.0]  # the next one, cyclically
    f = feeds.full_inputs(c, np.ones(8, np.float32), {"ref": np.arange(3, dtype=np.float32)})
    assert f["audio"].shape == f["ref"].shape == (1, 1, 8) and f["ref"][0, 0].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    with pytest.raises(UsageError, match=r"give one signal for each of \['ref'\].*missing \['ref'\]"):
        feeds.full_inputs(c, np.ones(8, np.float32))


def test_pool_push_many_refuses_a_two_input_model_saying_push(twoin):
    from cosyedge.runtime.pool import StreamPool

    with StreamPool(twoin[0], max_streams=2) as pool:
        sid = pool.join()
        with pytest.raises(UsageError, match=r"push_many\(\) takes one waveform per stream.*\['audio', 'ref'\].*use push"):
            pool.push_many([sid], np.zeros((1, pool.chunk_samples), np.float32))


def test_stream_array_takes_partners_and_equals_the_torch_model(twoin):
    from cosyedge.runtime import OrtStreamSession, stream_array

    path, model = twoin
    a, r = demo_speech(1.0), demo_speech(1.0, 5.0)
    with torch.no_grad():
        want = model(torch.from_numpy(a[None, None]), torch.from_numpy(r[None, None])).numpy()[0, 0]
    with OrtStreamSession(path, chunk_samples=480) as s:
        y = stream_array(s, a, partners={"ref": r})
        with pytest.raises(UsageError, match=r"missing \['ref'\]"):
            stream_array(s, a)
    assert float(np.abs(y - want).max()) < 1e-5


def test_run_refuses_a_multi_input_model_in_one_line(twoin, tmp_path, cli):
    out = tmp_path / "out.wav"
    rc, _, err = cli("run", DEMO / "noisy.wav", "-o", out, "--engine", twoin[0])
    line = one_error_line(err, last=False)
    assert rc == 2 and not out.exists()
    assert "cannot run on an audio file" in line and "it takes 2 inputs and an audio file is one waveform" in line
    assert (f"with cosyedge.runtime.OrtStreamSession('{twoin[0]}') as s: s.push({{'audio': float32 (1, 1, 160), "
            f"'ref': float32 (1, 1, 160)}})") in line
    assert "cosyedge.runtime.stream_array(session, audio, partners={'ref': ref})" in line


# ------------------------------------------------------------------------------------------------ build
@pytest.fixture(scope="module")
def calib(work) -> Path:
    """A calibration set of 16 recordings cut from the bundled audio (no downloads)."""
    from cosyedge.precision.calibset import make_calibration_set
    from tests.precision import int8_fixtures as fx

    rec = fx.write_recordings(work / "recordings", count=16, seconds=1.5)
    return make_calibration_set(work / "calib", from_dir=rec).folder


LABELS = {"fp32": [], "fp16": ["--fp16"], "int8": ["--int8"], "int8-sparse": ["--int8", "--sparse"]}


@pytest.fixture(scope="module")
def engines(twoin, calib, work) -> dict[str, Path]:
    """``cosyedge build`` of the two-input model at every precision (ONNX Runtime): label -> engine folder."""
    from cosyedge.cli.main import main

    out = {}
    for label, flags in LABELS.items():
        args = ["build", "-q", "--onnx", str(twoin[0]), "--backend", "onnxruntime", "-o", str(work / "engines"), *flags]
        if "--int8" in flags:
            args += ["--calib", str(calib)]
        assert main(args) == 0, label
        out[label] = work / "engines" / f"twoin-{label}-onnxruntime"
    return out


def test_build_every_precision_of_a_two_input_model(engines, twoin, calib):
    """fp32/fp16/int8/int8-sparse engines of a two-input model are built (int8 used to die with ONNX Runtime's
    "Required inputs (['ref']) are missing", exit 1; fp16 with "push a dict"), stream both inputs, and their output
    SNR against FP32 on real speech (partner: other speech) is what the precision gives (measured: fp16 84.7 dB,
    int8 64.7 dB, int8-sparse 22.5 dB: the 2:4 pruning, not fine-tuned, dominates)."""
    import json

    from cosyedge.runtime import OrtStreamSession, stream_array

    a, r = demo_speech(3.0, 10.0), demo_speech(3.0, 13.5, "clean")
    ys = {}
    for label, folder in engines.items():
        with OrtStreamSession(folder / "model.onnx", chunk_samples=480) as s:
            ys[label] = stream_array(s, a, partners={"ref": r})
    with torch.no_grad():
        full = twoin[1](torch.from_numpy(a[None, None]), torch.from_numpy(r[None, None])).numpy()[0, 0]
    assert float(np.abs(ys["fp32"] - full).max()) < 1e-5
    snr = {k: snr_db(ys["fp32"], ys[k]) for k in ("fp16", "int8", "int8-sparse")}
    assert snr["fp16"] > 75.0 and snr["int8"] > 55.0 and 15.0 < snr["int8-sparse"] < 40.0, snr
    m = json.loads((engines["int8"] / "manifest.json").read_text())["reports"]["int8"]
    # both inner convs are INT8; the conv reading Concat(state, Identity(Concat(audio, ref))) is the first conv
    assert m["quantized_nodes"] == ["/mid/Conv", "/mid2/Conv"]
    assert m["excluded_nodes"] == {"/dec/Conv": "1 output channel", "/enc/Conv": "first conv (reads the audio input)"}
    cache = json.loads((calib / "twoin.amax.json").read_text())
    assert cache["params"]["partners"].startswith("input k (after the primary) gets utterance i + 1 + k")
    sp = json.loads((engines["int8-sparse"] / "manifest.json").read_text())["reports"]["sparsity"]
    pruned = {row["node"]: row["sparsity"] for row in sp["layers"] if row["eligible"] and row["verified"]}
    assert pruned["/mid/Conv"] == pruned["/mid2/Conv"] == 0.5
    fp16 = json.loads((engines["fp16"] / "manifest.json").read_text())["reports"]["fp16"]
    assert all(row["finite"] for row in fp16["scan"]) and fp16["snr_db_vs_fp32"] > 75.0


def test_calibration_feeds_the_partner_input(twoin, calib):
    """INT8 calibration streams utterance i on 'audio' and utterance i + 1 (cut to its length) on 'ref': the max
    |x| it records for the first conv's output equals that of the torch model fed the same pairs, and differs from
    what a silent 'ref' would give."""
    from cosyedge.precision import calibrate as cal
    from cosyedge.precision.calibset import load_calibration_set
    from cosyedge.runtime.feeds import fit

    cset = load_calibration_set(calib)
    res = cal.collect_amax(twoin[0], cset, ["/enc/Conv_output_0"], progress=False)
    xs = [cset.read(i) for i in range(len(cset))]
    enc = twoin[1].enc

    def peak(pairs) -> float:
        with torch.no_grad():
            return max(float(enc(F.pad(torch.from_numpy(np.stack([a, b])[None]), (2, 0))).abs().max())
                       for a, b in pairs)

    want = peak([(x, fit(xs[(i + 1) % len(xs)], x.size)) for i, x in enumerate(xs)])
    silent_ref = peak([(x, np.zeros_like(x)) for x in xs])
    assert res["max"]["/enc/Conv_output_0"] == pytest.approx(want, rel=1e-5)
    assert abs(want - silent_ref) > 0.01 * want


def test_triton_repository_of_a_two_input_model(twoin, calib, tmp_path, cli):
    """--backend triton --int8 builds the repository: both inputs in config.pbtxt (1, 160) each, the INT8 model
    (Q/DQ nodes) in version 1, calibrated with the partner input fed."""
    import json

    import onnx

    rc, out, err = cli("build", "--onnx", twoin[0], "--backend", "triton", "--int8", "--calib", calib, "-o", tmp_path)
    assert rc == 0, err
    repo = Path(out.strip().splitlines()[-1])
    assert repo == tmp_path / "twoin-int8-triton"
    cfg = (repo / "twoin" / "config.pbtxt").read_text()
    for name in ("audio", "ref"):
        assert f'name: "{name}"\n    data_type: TYPE_FP32\n    dims: [ 1, 160 ]' in cfg
    ops = {n.op_type for n in onnx.load(str(repo / "twoin" / "1" / "model.onnx")).graph.node}
    assert "QuantizeLinear" in ops
    assert json.loads((repo / "manifest.json").read_text())["precision"] == "int8"


def test_tensorrt_backend_refuses_a_two_input_model_in_one_line(twoin, tmp_path, cli):
    """--backend tensorrt: one line, exit 2, before TensorRT is even looked for (exit 4 on this machine otherwise);
    TrtStreamSession refuses the contract too."""
    from cosyedge.artifacts import StreamContract
    from cosyedge.runtime.trt import TrtStreamSession

    rc, _, err = cli("build", "--onnx", twoin[0], "--backend", "tensorrt", "-o", tmp_path)
    line = one_error_line(err, last=False)
    assert rc == 2 and list(tmp_path.iterdir()) == []
    assert (f"the TensorRT backend cannot stream {twoin[0]}: it maps audio['N', 1, 'T'], ref['N', 1, 'T'] to "
            f"enhanced['N', 1, 'T']") in line and "build it with --backend onnxruntime or --backend triton" in line
    with pytest.raises(UsageError, match="the TensorRT backend cannot stream"):
        TrtStreamSession(tmp_path / "engine.plan", StreamContract.from_onnx(twoin[0]))


class FeatNet(nn.Module):
    """feat float32 (N, 4, T) frames (one per hop) -> gain (N, 1, T): a model whose input is not audio."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 8, 3)
        self.o = nn.Conv1d(8, 1, 1)

    def forward(self, feat):
        return torch.sigmoid(self.o(torch.relu(self.c(F.pad(feat, (2, 0))))))


@pytest.fixture(scope="module")
def featnet(work) -> Path:
    from cosyedge.surgery.streamify import streamify

    torch.manual_seed(0)
    path = work / "feat.onnx"
    torch.onnx.export(FeatNet().eval(), (torch.randn(1, 4, 20),), str(path), input_names=["feat"],
                      output_names=["gain"], dynamic_axes={"feat": {0: "N", 2: "T"}, "gain": {0: "N", 2: "T"}},
                      dynamo=False, opset_version=17)
    out = work / "feat.stream.onnx"
    streamify(path, out, sample_rate_hz=SR, hop_samples=HOP)
    return out


def test_feature_inputs_are_refused_by_name_where_feeds_come_from_audio(featnet, calib, tmp_path, cli):
    """A feature input cannot be made from audio: --int8 (calibration) and --fp16 (the scan) refuse it by name in
    one line, exit 2, with what to do instead; FP32 builds (a zero chunk of every input; it used to say
    "push a dict"), and compare/run refuse it naming the Python call."""
    rc, _, err = cli("build", "--onnx", featnet, "--int8", "--calib", calib, "-o", tmp_path)
    line = one_error_line(err, last=False)
    assert rc == 2 and (f"INT8 calibration cannot feed {featnet}: its input feat['N', 4, 'T'] (features, 1 frame(s) "
                        f"per 160-sample hop) is not a waveform (N, 1, T) at 16000 Hz") in line
    assert "'cosyedge calib int8 --onnx MODEL --amax FILE -o OUT.onnx'" in line
    rc, _, err = cli("build", "--onnx", featnet, "--fp16", "-o", tmp_path)
    line = one_error_line(err, last=False)
    assert rc == 2 and f"the FP16 scan cannot feed {featnet}: its input feat['N', 4, 'T']" in line
    assert "cosyedge.precision.fp16.fp16_onnx(MODEL, OUT, check=False)" in line
    assert not any(p.name.startswith("feat-") for p in tmp_path.iterdir())
    rc, out, err = cli("build", "--onnx", featnet, "-o", tmp_path)
    assert rc == 0 and (tmp_path / "feat-fp32-onnxruntime" / "manifest.json").is_file(), err
    rc, _, err = cli("compare", featnet, tmp_path / "feat-fp32-onnxruntime", "--no-pesq")
    line = one_error_line(err, last=False)
    assert rc == 2 and f"cosyedge compare cannot feed {featnet}: its input feat['N', 4, 'T']" in line
    assert "cosyedge.runtime.OrtStreamSession" in line
    rc, _, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "o.wav", "--engine", featnet)
    line = one_error_line(err, last=False)
    assert rc == 2 and "its input 'feat' is not a waveform" in line
    assert f"with cosyedge.runtime.OrtStreamSession('{featnet}') as s: s.push({{'feat': float32 (1, 4, 1)}})" in line


# ------------------------------------------------------------------------------------------------ compare / check
def test_compare_and_check_pass_on_a_two_input_model(twoin, engines, calib, tmp_path, cli):
    """compare (both modes, --mark-all) and check (--update-baseline, then the gate) exit 0 on the two-input model;
    each utterance feeds 'audio' and the next one feeds 'ref' (recorded in the JSON); with 'ref' fed its own
    utterance instead, the reference output changes (the partner is really fed)."""
    import json

    from cosyedge.compare.core import ReferenceCache
    from cosyedge.compare.models import load_compare_model
    from cosyedge.compare.utterances import fixed_utterances, with_partners

    js = tmp_path / "cmp.json"
    rc, out, err = cli("compare", twoin[0], engines["int8"], "--no-pesq", "--mark-all", "--json", js)
    assert rc == 0, err
    assert "PASS: int8 within tolerance on 2 utterance(s), enhanced and states" in out
    res = json.loads(js.read_text())
    assert [u.get("partners") for u in res["utterances"]] == [{"ref": "demo-clean"}, {"ref": "demo-noisy"}]
    snr = res["modes"]["free-running"]["utterances"]["demo-noisy"]["outputs"]["enhanced"]["snr_db"]
    assert snr > 55.0 and res["bisection"]["compared"] > 0
    base = tmp_path / "twoin.accuracy.json"
    args = ["check", "--onnx", twoin[0], "--precisions", "fp16,int8", "--baseline", base, "--engines-dir",
            tmp_path / "engines", "--no-pesq"]
    rc, _, err = cli(*args, "--update-baseline", "--calib", calib)
    assert rc == 0 and base.is_file(), err
    rc, out, err = cli(*args)
    assert rc == 0 and "PASS: fp16, int8 within baseline tolerance" in out, err
    ref = load_compare_model(twoin[0])
    utts = fixed_utterances(SR)
    paired = with_partners(utts, ref.contract, str(twoin[0]), "test")
    own = [dataclasses.replace(u, partners={"ref": u.x}, partner_names={"ref": u.name}) for u in utts]
    y_paired = ReferenceCache(ref, 1600).get(paired[0]).outputs["enhanced"]
    y_own = ReferenceCache(ref, 1600).get(own[0]).outputs["enhanced"]
    assert y_paired.shape == y_own.shape == utts[0].x.shape and float(np.abs(y_paired - y_own).max()) > 1e-3


# ------------------------------------------------------------------------------------------------ StreamPool
def test_stream_pool_takes_a_dict_per_stream_and_equals_single_streams(twoin):
    """Two streams of the two-input model through one StreamPool (one batched run per tick, a dict per stream)
    give exactly what each stream gives alone in an OrtStreamSession; a bare array is refused in one line."""
    from cosyedge.runtime import OrtStreamSession, StreamPool, stream_array

    path = twoin[0]
    chunk = 160
    pairs = [(demo_speech(1.0, 2.0), demo_speech(1.0, 7.0)), (demo_speech(1.0, 12.0, "clean"), demo_speech(1.0, 4.0, "clean"))]
    alone = []
    with OrtStreamSession(path, chunk_samples=chunk) as s:
        for a, r in pairs:
            alone.append(stream_array(s, a, partners={"ref": r}))
    with StreamPool(path, max_streams=4, chunk_samples=chunk) as pool:
        assert pool.input_shapes == {"audio": (1, 160), "ref": (1, 160)}
        ids = [pool.join() for _ in pairs]
        got = [[] for _ in pairs]
        for i in range(0, pairs[0][0].size, chunk):
            out = pool.push({sid: {"audio": a[i:i + chunk], "ref": r[None, i:i + chunk]}
                             for sid, (a, r) in zip(ids, pairs)})
            for k, sid in enumerate(ids):
                assert set(out[sid]) == {"enhanced"} and out[sid]["enhanced"].shape == (chunk,)
                got[k].append(out[sid]["enhanced"])
        with pytest.raises(UsageError, match=r"streams inputs \['audio', 'ref'\]: submit a dict of arrays by name"):
            pool.submit(ids[0], pairs[0][0][:chunk])
        with pytest.raises(UsageError, match=r"missing \['ref'\]"):
            pool.submit(ids[0], {"audio": pairs[0][0][:chunk]})
    assert pool.ticks == pairs[0][0].size // chunk
    for k in range(len(pairs)):
        np.testing.assert_array_equal(np.concatenate(got[k]), alone[k])
