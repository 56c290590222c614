"""Adopting graphs that already stream: hand-built ONNX graphs with their own state I/O
(batch on axis 1, packed states, batch-1 Reshapes, a dynamic time axis), the proof, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StreamContract
from cosyedge.errors import AccuracyError, UsageError
from cosyedge.surgery.adopt import adopt, find_state_pairs, parse_state_pairs
from tests.helpers.streaming import session_stream

HOP = 16
SR = 16000


def _save(path: Path, nodes, inputs, outputs, inits, opset=13) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _c(name, value):
    a = np.asarray(value)
    return numpy_helper.from_array(a.astype(np.int64 if a.dtype.kind == "i" else np.float32), name)


def packed_model(path: Path, state_in="states_in", state_out="states_out") -> Path:
    """audio (1, 1, 16) -> enhanced (1, 1, 16), one hop per call; ONE packed state (2, 1, 16) with the batch on
    axis 1: row 0 the previous hop, row 1 a leaky running sum. Reshapes to [1, 16] and [1, 1, 16] hard-code batch
    1 (as TF exports do). y = x + 0.5 prev + 0.1 tanh(acc); acc' = 0.9 acc + x."""
    nodes = [
        helper.make_node("Reshape", ["audio", "flat"], ["x2"]),
        helper.make_node("Gather", [state_in, "i0"], ["prev"], axis=0),
        helper.make_node("Gather", [state_in, "i1"], ["acc"], axis=0),
        helper.make_node("Mul", ["prev", "half"], ["p2"]),
        helper.make_node("Tanh", ["acc"], ["ta"]),
        helper.make_node("Mul", ["ta", "tenth"], ["a2"]),
        helper.make_node("Add", ["x2", "p2"], ["s1"]),
        helper.make_node("Add", ["s1", "a2"], ["y2"]),
        helper.make_node("Reshape", ["y2", "shape3"], ["enhanced"]),
        helper.make_node("Mul", ["acc", "leak"], ["acc9"]),
        helper.make_node("Add", ["acc9", "x2"], ["acc_new"]),
        helper.make_node("Unsqueeze", ["x2", "ax0"], ["u0"]),
        helper.make_node("Unsqueeze", ["acc_new", "ax0"], ["u1"]),
        helper.make_node("Concat", ["u0", "u1"], [state_out], axis=0),
    ]
    inits = [_c("flat", [1, HOP]), _c("shape3", [1, 1, HOP]), _c("i0", 0), _c("i1", 1), _c("half", 0.5),
             _c("tenth", 0.1), _c("leak", 0.9), _c("ax0", [0])]
    return _save(path, nodes, [_f("audio", [1, 1, HOP]), _f(state_in, [2, 1, HOP])],
                 [_f("enhanced", [1, 1, HOP]), _f(state_out, [2, 1, HOP])], inits)


def packed_reference(x: np.ndarray) -> np.ndarray:
    """NumPy loop of :func:`packed_model` over hops of x (float64 (L,))."""
    prev, acc, out = np.zeros(HOP), np.zeros(HOP), []
    for i in range(0, x.size, HOP):
        h = x[i:i + HOP]
        out.append(h + 0.5 * prev + 0.1 * np.tanh(acc))
        prev, acc = h, 0.9 * acc + h
    return np.concatenate(out)


def conv_cache_model(path: Path, *, output_uses_state=True, dead_state=False) -> Path:
    """audio (N, 1, T) dynamic -> enhanced (N, 1, T): a causal 5-tap conv whose 4 past samples are the state
    ``cache`` -> ``new_cache`` (N, 1, 4). ``output_uses_state=False``: the output is 2x (the cache is updated but
    never used); ``dead_state``: a second state h_in -> h_out (N, 1, 1) added to the output, h_out = 0 * h_in."""
    rng = np.random.default_rng(1)
    conv_in = "cat" if output_uses_state else "audio_pad"
    nodes = [helper.make_node("Concat", ["cache", "audio"], ["cat"], axis=2),
             helper.make_node("Slice", ["cat", "s0", "s1", "s2"], ["new_cache"])]
    inits = [_c("w", rng.standard_normal((1, 1, 5))), _c("s0", [-4]), _c("s1", [1 << 62]), _c("s2", [2])]
    if output_uses_state:
        nodes.append(helper.make_node("Conv", [conv_in, "w"], ["y0"]))
    else:
        nodes.append(helper.make_node("Mul", ["audio", "two"], ["y0"]))
        inits.append(_c("two", 2.0))
    ins = [_f("audio", ["N", 1, "T"]), _f("cache", ["N", 1, 4])]
    outs = [_f("enhanced", ["N", 1, "T"]), _f("new_cache", ["N", 1, 4])]
    if dead_state:
        nodes += [helper.make_node("Add", ["y0", "h_in"], ["enhanced"]),
                  helper.make_node("Mul", ["h_in", "zero"], ["h_out"])]
        inits.append(_c("zero", 0.0))
        ins.append(_f("h_in", ["N", 1, 1]))
        outs.append(_f("h_out", ["N", 1, 1]))
    else:
        nodes.append(helper.make_node("Identity", ["y0"], ["enhanced"]))
    return _save(path, nodes, ins, outs, inits)


def _speech(n: int) -> np.ndarray:
    from cosyedge.surgery.proof import demo_audio

    return demo_audio(SR, n)


# ---------------------------------------------------------------- adopted and proved
def test_packed_state_with_batch_on_axis_1_is_adopted_batch_first_and_streams_any_multiple_of_the_hop(tmp_path):
    src = packed_model(tmp_path / "packed.onnx")
    out = tmp_path / "packed.stream.onnx"
    c = adopt(src, out, sample_rate_hz=SR, hop_samples=HOP)  # pairs found: states_in -> states_out
    back = StreamContract.from_onnx(out)
    assert back.states[0].input == "state_in.00" and back.states[0].output == "state_out.00"
    assert back.states[0].shape == ["N", 2, HOP]  # batch moved first: (2, N, 16) -> (N, 2, 16)
    assert (back.hop_samples, back.total_stride, back.input, back.output) == (HOP, HOP, "audio", "enhanced")
    assert back.proof["max_abs"] <= 1e-6 and back.proof["chunks_ticks"] == [HOP, 3 * HOP]
    assert back.proof["state_effect_max_abs"]["states_in"] > 0.01
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    rec = json.loads(meta["cosyedge.adopted"])
    assert rec["states"][0]["input"] == "states_in" and rec["states"][0]["output"] == "states_out"
    assert rec["states"][0]["batch_axis"] == 1 and rec["states"][0]["transposed"] is True
    assert rec["batch"] == "dynamic" and rec["reshapes_made_dynamic"] == 2 and rec["scan_over_hops"] is True
    assert c.states[0].shape == ["N", 2, HOP]
    x = _speech(HOP * 60)
    want = packed_reference(x.astype(np.float64))
    for chunk in (HOP, 4 * HOP):  # a chunk of 4 hops runs the Scan 4 times
        got = session_stream(out, x, chunk)[0, 0]
        np.testing.assert_allclose(got, want, atol=1e-5)
    # three streams at batch 3 == each alone
    xs = np.stack([x, 0.5 * x[::-1], np.roll(x, 100)])
    both = session_stream(out, xs[:, None, :], 2 * HOP, batch=3)
    for b in range(3):
        np.testing.assert_allclose(both[b, 0], packed_reference(xs[b].astype(np.float64)), atol=1e-5)


def test_conv_cache_with_dynamic_time_is_adopted_without_scan(tmp_path):
    src = conv_cache_model(tmp_path / "cache.onnx")
    out = tmp_path / "cache.stream.onnx"
    adopt(src, out, sample_rate_hz=SR, hop_samples=HOP, name="toy", delay_samples=0)
    c = StreamContract.from_onnx(out)
    assert c.name == "toy" and c.states[0].shape == ["N", 1, 4]
    m = onnx.load(str(out))
    assert "Scan" not in {n.op_type for n in m.graph.node}
    x = _speech(HOP * 40)
    w = numpy_helper.to_array(next(t for t in onnx.load(str(src)).graph.initializer if t.name == "w"))[0, 0]
    want = np.convolve(np.concatenate([np.zeros(4), x]), w[::-1], mode="valid")[: x.size]
    np.testing.assert_allclose(session_stream(out, x, 5 * HOP)[0, 0], want, atol=1e-5)


def test_the_adopted_model_runs_in_streampool_like_single_sessions(tmp_path):
    from tests.helpers.streams import pool_outputs

    out = tmp_path / "packed.stream.onnx"
    adopt(packed_model(tmp_path / "p.onnx"), out, sample_rate_hz=SR, hop_samples=HOP)
    x = _speech(HOP * 30)
    streams = [x, x[::-1].copy(), 0.3 * x]
    for a, g in zip(streams, pool_outputs(out, streams, HOP, max_streams=4)):
        np.testing.assert_allclose(g, packed_reference(a.astype(np.float64)), atol=1e-5)


def test_state_pairs_parse_and_names_are_found():
    assert parse_state_pairs(["h_in=h_out", ("a", "b")]) == [("h_in", "h_out"), ("a", "b")]
    with pytest.raises(UsageError, match="a state pair is IN=OUT"):
        parse_state_pairs(["h_in"])
    ins = [_f("audio", [1, 1, 16]), _f("cache", [1, 4]), _f("h_in", [1, 8]), _f("lstm_state", [2, 1, 8])]
    outs = [_f("y", [1, 1, 16]), _f("new_cache", [1, 4]), _f("h_out", [1, 8]), _f("next", [2, 1, 8])]
    g = helper.make_graph([], "g", ins, outs)
    assert find_state_pairs(helper.make_model(g)) == [("cache", "new_cache"), ("h_in", "h_out"),
                                                      ("lstm_state", "next")]


# ---------------------------------------------------------------- refusals: one line, nothing written
def _ambiguous(path: Path) -> Path:
    nodes = [helper.make_node("Identity", ["audio"], ["y"]), helper.make_node("Add", ["state_a", "state_b"], ["o1"]),
             helper.make_node("Sub", ["state_a", "state_b"], ["o2"])]
    return _save(path, nodes, [_f("audio", [1, 1, 16]), _f("state_a", [1, 8]), _f("state_b", [1, 8])],
                 [_f("y", [1, 1, 16]), _f("o1", [1, 8]), _f("o2", [1, 8])], [])


def _unpaired(path: Path) -> Path:
    nodes = [helper.make_node("Identity", ["audio"], ["y"]), helper.make_node("Identity", ["foo"], ["bar"])]
    return _save(path, nodes, [_f("audio", [1, 1, 16]), _f("foo", [1, 8])], [_f("y", [1, 1, 16]), _f("bar", [1, 8])],
                 [])


def _mismatched(path: Path) -> Path:
    nodes = [helper.make_node("Identity", ["audio"], ["y"]), helper.make_node("Slice", ["h_in", "z", "four", "one"],
                                                                           ["h_out"])]
    return _save(path, nodes, [_f("audio", [1, 1, 16]), _f("h_in", [1, 8])], [_f("y", [1, 1, 16]), _f("h_out", [1, 4])],
                 [_c("z", [0]), _c("four", [4]), _c("one", [1])])


CASES = {
    "ambiguous": (_ambiguous, [], "state input 'state_a' [1, 8] could pair with outputs ['o1', 'o2'] (same shape): "
                                  "give the pair, e.g. --state state_a=o1"),
    "missing": (_unpaired, [], "found no state pairs (inputs ['audio', 'foo'], outputs ['y', 'bar']"),
    "mismatched": (_mismatched, ["--state", "h_in=h_out"], "state pair h_in=h_out has shapes [1, 8] and [1, 4] (a state "
                                                         "output feeds the next chunk's input: shapes must be equal)"),
    "unknown": (_unpaired, ["--state", "foo=baz"], "state output ['baz'] not among the outputs ['y', 'bar']"),
    "dead state": (lambda p: conv_cache_model(p, dead_state=True), [],
                   "state h_in=h_out carries nothing (zeroing it every chunk changes 'enhanced' by 0 at most)"),
    "no state dependence": (lambda p: conv_cache_model(p, output_uses_state=False), [],
                            "the outputs do not depend on the states ['cache'] (zeroing them every chunk changes "
                            "'enhanced' by 0 at most): this graph is not a streaming model"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_graphs_are_refused_in_one_line_and_nothing_is_written(case, tmp_path, capsys):
    from cosyedge.cli.main import main

    make, extra, message = CASES[case]
    src = make(tmp_path / "in.onnx")
    out = tmp_path / "out.onnx"
    code = main(["adopt", "-q", str(src), "-o", str(out), "--sample-rate-hz", str(SR), "--hop-samples", str(HOP),
                 *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("[!] ") and message in err[0], err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_a_graph_that_differs_from_its_own_loop_is_an_accuracy_error(tmp_path, monkeypatch):
    """The proof compares against the original graph's loop: a broken rewrite (simulated by perturbing the
    adopted graph's output) is refused with exit 5 and nothing written."""
    from cosyedge.surgery import adopt as adopt_mod

    orig = adopt_mod._rename_and_wrap

    def broken(*args, **kw):
        m = orig(*args, **kw)
        for n in m.graph.node:
            if n.op_type == "Reshape" and n.output[0] == "enhanced":
                n.output[0] = "enhanced_raw"
                m.graph.node.append(helper.make_node("Mul", ["enhanced_raw", "adopt_bug"], ["enhanced"]))
                m.graph.initializer.append(_c("adopt_bug", 1.001))
        return m

    monkeypatch.setattr(adopt_mod, "_rename_and_wrap", broken)
    out = tmp_path / "x.onnx"
    with pytest.raises(AccuracyError, match="differs from the original's own state loop: output 'enhanced'"):
        adopt(packed_model(tmp_path / "p.onnx"), out, sample_rate_hz=SR, hop_samples=HOP)
    assert not out.exists()


def test_cli_adopt_writes_the_contract(tmp_path, capsys):
    from cosyedge.cli.main import main

    src = packed_model(tmp_path / "p.onnx", state_in="s", state_out="s_next")
    out = tmp_path / "p.stream.onnx"
    code = main(["adopt", str(src), "-o", str(out), "--state", "s=s_next", "--batch-axis", "s=1",
                 "--sample-rate-hz", str(SR), "--hop-samples", str(HOP), "--delay-samples", "0", "--name", "packed"])
    assert code == 0, capsys.readouterr().err
    c = StreamContract.from_onnx(out)
    assert c.name == "packed" and c.states[0].shape == ["N", 2, HOP] and c.states[0].node == "adopted:s"


def flat_model(path: Path) -> Path:
    """audio (1, 1, 16) -> enhanced (1, 1, 16) through Reshape([16]): a batch-1 graph that no rewrite makes
    batched; state h_in -> h_out (1, 16) is the previous hop: y = x + 0.5 h."""
    nodes = [helper.make_node("Reshape", ["audio", "flat"], ["x1"]),
             helper.make_node("Reshape", ["h_in", "flat"], ["h1"]),
             helper.make_node("Mul", ["h1", "half"], ["h2"]),
             helper.make_node("Add", ["x1", "h2"], ["y1"]),
             helper.make_node("Reshape", ["y1", "shape3"], ["enhanced"]),
             helper.make_node("Reshape", ["x1", "shape2"], ["h_out"])]
    inits = [_c("flat", [HOP]), _c("shape3", [1, 1, HOP]), _c("shape2", [1, HOP]), _c("half", 0.5)]
    return _save(path, nodes, [_f("audio", [1, 1, HOP]), _f("h_in", [1, HOP])],
                 [_f("enhanced", [1, 1, HOP]), _f("h_out", [1, HOP])], inits)


def test_a_graph_that_cannot_batch_is_batched_by_a_scan_over_streams(tmp_path):
    """The Reshape([16]) defeats the dynamic-batch rewrite, so the batch-1 graph runs once per
    stream inside a Scan over axis 0 (state stored (N, *its batch-1 shape)); StreamPool batches it and batch 2 ==
    two batch-1 streams (was: adopted for batch 1 only, refused by StreamPool and Triton)."""
    from cosyedge.runtime.pool import StreamPool

    out = tmp_path / "flat.stream.onnx"
    c = adopt(flat_model(tmp_path / "flat.onnx"), out, sample_rate_hz=SR, hop_samples=HOP)
    assert c.states[0].shape == ["N", 1, HOP]  # (N, *batch-1 shape (1, 16))
    m = onnx.load(str(out))
    assert m.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "N"
    rec = json.loads({p.key: p.value for p in m.metadata_props}["cosyedge.adopted"])
    assert rec["batch"] == "scan over streams" and "does not run at batch 2" in rec["why_fixed"]
    assert rec["states"][0]["batch_axis"] == "stream"
    x = _speech(HOP * 21)
    x2 = np.stack([x, 0.5 * x[::-1]])
    want = x2 + 0.5 * np.concatenate([np.zeros((2, HOP)), x2[:, :-HOP]], axis=1)
    np.testing.assert_allclose(session_stream(out, x, 3 * HOP)[0, 0], want[0], atol=1e-6)
    np.testing.assert_allclose(session_stream(out, x2, 3 * HOP, batch=2)[:, 0], want, atol=1e-6)
    with StreamPool(out, max_streams=2) as pool:
        a, b = pool.join(), pool.join()
        got = pool.push({a: x2[0, :HOP], b: x2[1, :HOP]})
        np.testing.assert_allclose(got[a], want[0, :HOP], atol=1e-6)
        np.testing.assert_allclose(got[b], want[1, :HOP], atol=1e-6)
