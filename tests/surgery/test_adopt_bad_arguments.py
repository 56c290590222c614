"""Bad input at the edges of adopt, state shapes and attention windows: never a traceback, never exit 1, never a
silent change. Each refusal is one ``[!]`` line, exit 2 for the user's arguments and 3 for a bad file, and no
output is written.

The graph is an already-streaming model as they come: audio (N, 1, 160) float, sr (1,) int64, cache (N, 1, 160),
h (1, N, 32) (batch on axis 1); outputs enhanced, new_cache, hn. enhanced = (audio + 0.5 cache) * sr / 16000 +
mean(h); new_cache = audio; hn = tanh(0.9 h + mean(audio)).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StateSpec, StreamContract
from tests.cli_errors import one_error_line

SR = 16000
HOP = 160


def streaming_graph(path: Path, *, audio=("N", 1, HOP), cache=("N", 1, HOP), h=(1, "N", 32), strict=False,
                    long_cache=False) -> Path:
    """Write the module doc's graph with these declared shapes (strings symbolic). ``strict``: the cache meets the
    audio in a Concat on axis 1, so only a cache of exactly 160 samples runs (else any cache broadcasts).
    ``long_cache``: a cache of any length, its mean added (new_cache = cache), so a huge declared cache is valid."""
    def f(name, shape, t=TensorProto.FLOAT):
        return helper.make_tensor_value_info(name, t, list(shape))

    def c(name, v, dt=np.float32):
        return numpy_helper.from_array(np.asarray(v, dt), name)

    mix = ([helper.make_node("Concat", ["audio", "c2"], ["cc"], axis=1),
            helper.make_node("ReduceSum", ["cc", "ax1"], ["y0"], keepdims=1)] if strict else
           [helper.make_node("Add", ["audio", "c2"], ["y0"])])
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "k16"], ["scale"]),
             *([helper.make_node("ReduceMean", ["cache"], ["cm"], axes=[2], keepdims=1),
                helper.make_node("Mul", ["cm", "half"], ["c2"])] if long_cache else
               [helper.make_node("Mul", ["cache", "half"], ["c2"])]), *mix,
             helper.make_node("Mul", ["y0", "scale"], ["y1"]),
             helper.make_node("ReduceMean", ["h"], ["hm"], axes=[2], keepdims=1),
             helper.make_node("Transpose", ["hm"], ["hmt"], perm=[1, 0, 2]),
             helper.make_node("Add", ["y1", "hmt"], ["enhanced"]),
             helper.make_node("Identity", ["cache" if long_cache else "audio"], ["new_cache"]),
             helper.make_node("ReduceMean", ["audio"], ["am"], axes=[2], keepdims=1),
             helper.make_node("Transpose", ["am"], ["amt"], perm=[1, 0, 2]),
             helper.make_node("Mul", ["h", "leak"], ["h9"]),
             helper.make_node("Add", ["h9", "amt"], ["h1"]),
             helper.make_node("Tanh", ["h1"], ["hn"])]
    graph = helper.make_graph(
        nodes, "g", [f("audio", audio), f("sr", [1], TensorProto.INT64), f("cache", cache), f("h", h)],
        [f("enhanced", audio), f("new_cache", cache), f("hn", h)],
        initializer=[c("k16", 16000.0), c("half", 0.5), c("leak", 0.9), c("ax1", [1], np.int64)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def adopt_cli(cli, tmp_path):
    """``adopt_cli(src, *extra)`` -> (exit code, the one [!] line or '', stderr); asserts nothing is written on a
    refusal (the output and no other new file beside the source)."""
    def run(src: Path, *extra):
        out = tmp_path / "out.stream.onnx"
        before = sorted(p.name for p in tmp_path.iterdir())
        rc, _, err = cli("adopt", "-q", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, *extra)
        if rc == 0:
            out.unlink()
            return rc, "", err
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == before, err
        return rc, one_error_line(err), err

    return run


@pytest.fixture
def address_space_cap():
    """Cap this process's address space at its present size + 2 GiB for the test, so that a regression which
    allocates a state of several GiB fails at once with MemoryError instead of swapping the machine."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        vm = int(fh.read().split()[0]) * resource.getpagesize()
    cap = vm + (2 << 30)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ---------------------------------------------------------------- --const
def test_const_with_a_fraction_for_an_int64_input_is_refused_not_cut(tmp_path, adopt_cli):
    """sr=16000.7 was adopted with sr silently 16000 (exit 0); sr=1.5 became 1 and failed later with an unrelated
    'state cache=new_cache carries nothing'."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000.7")
    assert rc == 2 and "--const sr=16000.7: input 'sr' is int64, which takes whole numbers only (16000.7 would be " \
                       "cut to 16000)" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=1.5")
    assert rc == 2 and "(1.5 would be cut to 1)" in line and "carries nothing" not in line, line
    assert adopt_cli(src, "--const", "sr=16000.0")[0] == 0  # a whole number written as a float is that number


def test_const_beyond_the_input_dtype_range_is_refused_without_a_traceback(tmp_path, adopt_cli):
    """sr=99999999999999999999 was an OverflowError traceback, exit 1; 1e400 (float() gives inf) was taken."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=99999999999999999999")
    assert rc == 2 and "input 'sr' is int64, which holds -9223372036854775808..9223372036854775807" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=1e400")
    assert rc == 2 and "1e400 is beyond the float range" in line, line


# ---------------------------------------------------------------- --time-axis
def test_time_axis_outside_the_input_rank_is_refused(tmp_path, adopt_cli):
    """--time-axis audio=7 on a rank-3 input was taken modulo 3 (exit 0, the audio re-labelled as features); a
    rank-1 input has no axis besides the batch: said so, not 'one of axes 1..0'."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--time-axis", "audio=7")
    assert rc == 2 and "--time-axis audio=7: input 'audio' ['N', 1, 160] has 3 axes; its time axis is one of axes " \
                       "1..2 (axis 0 is the batch)" in line, line
    assert adopt_cli(src, "--const", "sr=16000", "--time-axis", "audio=0")[0] == 2
    rc, line, _ = adopt_cli(src, "--time-axis", "sr=0")  # sr (1,) int64, not fixed: rank 1
    assert rc == 2 and "--time-axis sr=0: input 'sr' [1] has no time axis to pick (rank 1: its only axis is the " \
                       "batch): fix its value with --const sr=VALUE" in line and "1..0" not in line, line


# ---------------------------------------------------------------- --delay-samples
def test_delay_beyond_what_run_accepts_is_refused_before_writing(tmp_path, adopt_cli):
    """--delay-samples 1000000000 wrote the file (exit 0), whose metadata run then refused: the bound streamify uses
    (10 s at the model rate) is checked up front."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--delay-samples", "1000000000")
    assert rc == 2 and "delay_samples (--delay-samples) 1000000000 must be an integer in 0..160000 samples (10 s at " \
                       "16000 Hz)" in line, line
    assert adopt_cli(src, "--const", "sr=16000", "--delay-samples", "160000")[0] == 0


# ---------------------------------------------------------------- state sizes
def test_a_state_shape_over_the_per_stream_bound_is_refused_before_allocation(tmp_path, adopt_cli,
                                                                                address_space_cap):
    """--state cache=1x1x2147483647 (8 GiB) grew memory until the machine killed it; now exit 2 before anything is
    allocated, naming the bound."""
    src = streaming_graph(tmp_path / "m.onnx", cache=("N", 1, "L"))
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=1x1x2147483647")
    assert rc == 2 and "state 'cache' [1, 1, 2147483647] float32 is 8192 MiB per stream, more than the 256 MiB of " \
                       "state a stream may carry (MAX_STATE_BYTES_PER_STREAM)" in line, line
    from cosyedge.artifacts import MAX_STATE_BYTES_PER_STREAM

    assert MAX_STATE_BYTES_PER_STREAM == 256 << 20


def test_a_graph_declaring_a_state_over_the_bound_is_a_bad_file(tmp_path, adopt_cli):
    """A graph that declares a 2^40-sample state: exit 3 (the file), before any allocation."""
    src = streaming_graph(tmp_path / "m.onnx", cache=("N", 1, 1 << 40), long_cache=True)
    rc, line, _ = adopt_cli(src, "--const", "sr=16000")
    assert rc == 3 and "state 'cache' ['N', 1, 1099511627776] float32 is 4 TiB per stream" in line \
        and "MAX_STATE_BYTES_PER_STREAM" in line, line


def _huge_stream_onnx(path: Path) -> Path:
    """A stream ONNX whose graph and contract both declare a state (N, 1, 2^40)."""
    big = 1 << 40
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    nodes = [helper.make_node("ReduceMean", ["state_in.00"], ["m"], axes=[2], keepdims=1),
             helper.make_node("Add", ["audio", "m"], ["enhanced"]),
             helper.make_node("Identity", ["state_in.00"], ["state_out.00"])]
    graph = helper.make_graph(nodes, "g", [f("audio", ["N", 1, "T"]), f("state_in.00", ["N", 1, big])],
                              [f("enhanced", ["N", 1, "T"]), f("state_out.00", ["N", 1, big])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    StreamContract(input="audio", output="enhanced", sample_rate_hz=SR, hop_samples=HOP, total_stride=HOP,
                   delay_samples=0, states=[StateSpec("state_in.00", "state_out.00", ["N", 1, big], "float32", "x")],
                   name="huge").write_to_onnx(model)
    onnx.save(model, str(path))
    return path


def test_run_and_build_refuse_a_contract_with_a_state_over_the_bound(tmp_path, cli):
    """run and build died with numpy's ArrayMemoryError traceback, exit 1: now exit 3, one line naming the bound."""
    import soundfile as sf

    src = _huge_stream_onnx(tmp_path / "huge.stream.onnx")
    wav = tmp_path / "x.wav"
    sf.write(str(wav), np.zeros(SR // 10, np.float32), SR)
    rc, _, err = cli("run", wav, "--engine", src, "-o", tmp_path / "y.wav")
    line = one_error_line(err)
    assert rc == 3 and "has invalid cosyedge metadata: state 'state_in.00' ['N', 1, 1099511627776] float32 is 4 TiB " \
                       "per stream" in line and "MAX_STATE_BYTES_PER_STREAM" in line, line
    assert not (tmp_path / "y.wav").exists()
    rc, _, err = cli("build", "--onnx", src, "--backend", "onnxruntime", "-o", tmp_path / "engines")
    line = one_error_line(err)
    assert rc == 3 and "MAX_STATE_BYTES_PER_STREAM" in line, line
    assert not any((tmp_path / "engines").glob("*")) if (tmp_path / "engines").exists() else True


def test_a_memory_error_on_the_cli_path_is_one_line_exit_3(tmp_path, cli, monkeypatch):
    """Any MemoryError that reaches the CLI (numpy's ArrayMemoryError included) is one [!] line, exit 3."""
    import cosyedge.surgery.adopt as adopt_mod

    def boom(*_a, **_k):
        raise MemoryError("Unable to allocate 4.00 TiB for an array with shape (1, 1, 1099511627776) and data type "
                          "float32")

    monkeypatch.setattr(adopt_mod, "adopt", boom)
    src = streaming_graph(tmp_path / "m.onnx")
    rc, _, err = cli("adopt", src, "-o", tmp_path / "o.onnx", "--sample-rate-hz", SR, "--hop-samples", HOP)
    line = one_error_line(err)
    assert rc == 3 and line.startswith("[!] out of memory: Unable to allocate 4.00 TiB"), line


# ---------------------------------------------------------------- hints are forms --state takes
def test_state_shape_hints_are_forms_that_state_takes(tmp_path, adopt_cli):
    """The hints 'e.g. --state cache=Nx1xL' and 'e.g. --state h=1xNx32' were then refused as "state output
    ['Nx1xL'] not among the outputs": N (the batch axis) is now taken, and every example a hint gives is fed back
    and is not refused for its form."""
    src = streaming_graph(tmp_path / "s.onnx", audio=(1, 1, HOP), cache=("N", 1, "L"), strict=True)
    rc, line, _ = adopt_cli(src, "--const", "sr=16000")
    assert rc == 2 and "give it with --state cache=SHAPE (Nx1xL with a number for L, N on the batch axis, e.g. " \
                       "--state cache=Nx1x64)" in line, line
    example = re.findall(r"e\.g\. --state (\S+?)\)", line)
    assert example == ["cache=Nx1x64"], line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", example[0])
    assert rc in (0, 2) and "not among the outputs" not in line and "no size" not in line, line  # 64 is not 160
    assert adopt_cli(src, "--const", "sr=16000", "--state", "cache=Nx1x160")[0] == 0
    # h (1, N, 32) with a fixed-batch audio: the old hint's form, N on axis 1, is the batch axis
    assert adopt_cli(src, "--const", "sr=16000", "--state", "cache=Nx1x160", "--state", "h=1xNx32")[0] == 0
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=Nx1x160", "--state", "h=1xNx32",
                            "--batch-axis", "h=0")
    assert rc == 2 and "--state h=1xNx32 puts the batch on axis 1, --batch-axis h=0 on axis 0: give one" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=Nx1xL")  # a placeholder left in
    assert rc == 2 and "'L' is no size" in line, line


# ---------------------------------------------------------------- the right culprit
def test_a_too_small_state_shape_is_blamed_on_that_state(tmp_path, adopt_cli):
    """--state cache=1x1x100 was blamed on state 'h' ("the shape of state 'h' cannot be told ... e.g.
    --state h=1xNx32"): the graph runs with cache at its declared sizes, so the given shape is named, with the size
    its output has."""
    src = streaming_graph(tmp_path / "s.onnx", audio=(1, 1, HOP), cache=("N", 1, "L"))
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=1x1x100")
    assert rc == 2 and "--state cache=1x1x100 does not run" in line and "give --state cache=1x1x160, the shape its " \
                       "output 'new_cache' has when run" in line and "state 'h'" not in line, line


def test_a_state_paired_with_the_audio_output_is_named_as_such(tmp_path, adopt_cli):
    """--state cache=enhanced fed the audio output back as the state and said "this graph is not a streaming
    model"."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=enhanced")
    assert rc == 2 and "--state cache=enhanced pairs state 'cache' with output 'enhanced', which is no state of it" \
        in line and "'enhanced' ['N', 1, 160] has the shape of the audio input 'audio', so it is likely the audio " \
                    "output" in line and "give --state cache=new_cache" in line, line
    assert "this graph is not a streaming model" not in line


def test_a_state_shape_that_does_not_run_is_a_usage_error(tmp_path, adopt_cli):
    """A user's shape mistake where the graph tells every other shape was "ONNX Runtime fails on one hop", exit 3
    (the file blamed): now exit 2 naming the given shape."""
    src = streaming_graph(tmp_path / "m.onnx", cache=("N", 1, "L"))
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=1x1x100")
    assert rc == 2 and "--state cache=1x1x100 does not run" in line and "give --state cache=1x1x160" in line, line
    assert "ONNX Runtime fails on one hop" not in line
