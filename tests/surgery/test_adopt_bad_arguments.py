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
from tests.helpers.cli_errors import one_error_line

SR = 16000
HOP = 160


def streaming_graph(path: Path, *, audio=("N", 1, HOP), cache=("N", 1, HOP), h=(1, "N", 32), strict=False,
                    long_cache=False, h_scaled=False, cache_gain=0.5) -> Path:
    """Write the module doc's graph with these declared shapes (strings symbolic). ``strict``: the cache meets the
    audio in a Concat on axis 1, so only a cache of exactly 160 samples runs (else any cache broadcasts).
    ``long_cache``: a cache of any length, its mean added (new_cache = cache), so a huge declared cache is valid.
    ``h_scaled``: mean(h) is added before the sr / 16000 gain (enhanced = (audio + 0.5 cache + mean(h)) * sr / 16000),
    so every term of the output scales with sr. ``cache_gain``: the 0.5 the cache is weighted with."""
    def f(name, shape, t=TensorProto.FLOAT):
        return helper.make_tensor_value_info(name, t, list(shape))

    def c(name, v, dt=np.float32):
        return numpy_helper.from_array(np.asarray(v, dt), name)

    mix = ([helper.make_node("Concat", ["audio", "c2"], ["cc"], axis=1),
            helper.make_node("ReduceSum", ["cc", "ax1"], ["y0"], keepdims=1)] if strict else
           [helper.make_node("Add", ["audio", "c2"], ["y0"])])
    hmean = [helper.make_node("ReduceMean", ["h"], ["hm"], axes=[2], keepdims=1),
             helper.make_node("Transpose", ["hm"], ["hmt"], perm=[1, 0, 2])]
    tail = ([helper.make_node("Add", ["y0", "hmt"], ["y0h"]), helper.make_node("Mul", ["y0h", "scale"], ["enhanced"])]
            if h_scaled else
            [helper.make_node("Mul", ["y0", "scale"], ["y1"]), helper.make_node("Add", ["y1", "hmt"], ["enhanced"])])
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "k16"], ["scale"]),
             *([helper.make_node("ReduceMean", ["cache"], ["cm"], axes=[2], keepdims=1),
                helper.make_node("Mul", ["cm", "half"], ["c2"])] if long_cache else
               [helper.make_node("Mul", ["cache", "half"], ["c2"])]), *mix, *hmean, *tail,
             helper.make_node("Identity", ["cache" if long_cache else "audio"], ["new_cache"]),
             helper.make_node("ReduceMean", ["audio"], ["am"], axes=[2], keepdims=1),
             helper.make_node("Transpose", ["am"], ["amt"], perm=[1, 0, 2]),
             helper.make_node("Mul", ["h", "leak"], ["h9"]),
             helper.make_node("Add", ["h9", "amt"], ["h1"]),
             helper.make_node("Tanh", ["h1"], ["hn"])]
    graph = helper.make_graph(
        nodes, "g", [f("audio", audio), f("sr", [1], TensorProto.INT64), f("cache", cache), f("h", h)],
        [f("enhanced", audio), f("new_cache", cache), f("hn", h)],
        initializer=[c("k16", 16000.0), c("half", cache_gain), c("leak", 0.9), c("ax1", [1], np.int64)])
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


# ---------------------------------------------------------------- audit 49: options that changed the result silently
def test_the_samples_axis_of_a_waveform_given_as_time_axis_keeps_it_audio(tmp_path, adopt_cli, cli):
    """--time-axis audio=2 (and -1, the same axis counted from the end) on the (N, 1, 160) waveform read it as
    features, exit 0, and wrote a file 'run' refused: now the input stays audio and 'run' takes the file. Axis 1 (the
    channel axis of size 1: one frame of 160 features per call, as asked) warns that 'run' will not take it."""
    import soundfile as sf

    src = streaming_graph(tmp_path / "m.onnx")
    out = tmp_path / "o.stream.onnx"
    wav = tmp_path / "x.wav"
    sf.write(str(wav), (np.random.default_rng(0).standard_normal(SR // 5) * 0.1).astype(np.float32), SR)
    for axis in ("2", "-1"):
        rc, _o, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, "--const", "sr=16000",
                          "--time-axis", f"audio={axis}")
        assert rc == 0, err
        c = StreamContract.from_onnx(out)
        assert c.audio_in and c.is_audio and c.stream_inputs[0].kind == "audio", (axis, c.stream_inputs)
        rc, _o, err = cli("run", wav, "--engine", out, "-o", tmp_path / "y.wav")
        assert rc == 0, err
    for axis in ("1", "-2"):
        rc, _o, err = cli("adopt", "-q", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, "--const",
                          "sr=16000", "--time-axis", f"audio={axis}")
        assert rc == 0, err
        warn = [w for w in err.splitlines() if w.startswith("[W]")]
        assert len(warn) == 1 and f"--time-axis audio={axis} reads input 'audio' ['N', 1, 160] as one frame of 160 " \
                                  "features per call" in warn[0] and "'cosyedge run' (audio files) does not take" \
                                  in warn[0], err


def test_a_batch_axis_that_keeps_the_graph_from_batching_is_refused_naming_the_option(tmp_path, adopt_cli):
    """--batch-axis h=0 (h=2, h=-1, cache=1) or --state h=Nx1x32 on a graph whose h batches on axis 1 was adopted
    (exit 0) as a Scan over streams with states (N, 1, 1, 160), only an [I] line blaming the graph: the graph batches
    with the axis it tells, so the option is refused (exit 2) naming it and the axis."""
    src = streaming_graph(tmp_path / "m.onnx")
    for opt, fix in (("h=0", "--batch-axis h=1"), ("h=2", "--batch-axis h=1"), ("h=-1", "--batch-axis h=1"),
                     ("cache=1", "--batch-axis cache=0")):
        rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--batch-axis", opt)
        assert rc == 2 and f"--batch-axis {opt} keeps the graph from a dynamic batch" in line and f"give {fix}" \
            in line, line
    assert adopt_cli(src, "--const", "sr=16000", "--batch-axis", "h=1")[0] == 0  # the told axis, given: fine
    dyn = streaming_graph(tmp_path / "d.onnx", cache=("N", 1, "L"), h=("A", "N", "B"))
    rc, line, _ = adopt_cli(dyn, "--const", "sr=16000", "--state", "cache=Nx1x160", "--state", "h=Nx1x32")
    assert rc == 2 and "--state h=Nx1x32 keeps the graph from a dynamic batch" in line and "give --state h=1xNx32" \
        in line, line
    assert adopt_cli(dyn, "--const", "sr=16000", "--state", "cache=Nx1x160", "--state", "h=1xNx32")[0] == 0


def test_a_quiet_output_that_depends_on_its_states_is_adopted(tmp_path, adopt_cli, cli):
    """With sr=1 every term of the output is scaled by 1/16000 (peak about 1e-5): the state-dependence floor was
    1e-4 absolute below a peak of 1, so a graph that streams was refused ("the outputs do not depend on the
    states"); the floor is now relative to the output's level. States that truly do not matter (a cache weighted
    1e-9) are still refused."""
    src = streaming_graph(tmp_path / "q.onnx", h_scaled=True)
    out = tmp_path / "q.stream.onnx"
    rc, _o, err = cli("adopt", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, "--const", "sr=1")
    assert rc == 0, err
    assert StreamContract.from_onnx(out).proof["state_effect_max_abs"]["cache"] > 0
    dead = streaming_graph(tmp_path / "dead.onnx", h_scaled=True, cache_gain=1e-9)
    rc, line, _ = adopt_cli(dead, "--const", "sr=16000")
    assert rc == 2 and "state cache=new_cache carries nothing" in line, line


def test_options_for_states_on_an_input_that_is_no_state_are_refused(tmp_path, adopt_cli):
    """--init audio=1 and --batch-axis audio=0 (audio is not a state) and --time-axis cache=2 (cache is a state,
    carried whole) were accepted and ignored, exit 0; an option naming an input fixed by --const said "'sr' not among
    the inputs"."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--init", "audio=1")
    assert rc == 2 and "--init audio=1.0: input 'audio' is not a state (state inputs: ['cache', 'h'])" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--batch-axis", "audio=0")
    assert rc == 2 and "--batch-axis audio=0: input 'audio' is not a state" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--time-axis", "cache=2")
    assert rc == 2 and "--time-axis cache=2: 'cache' is a state (pair cache=new_cache)" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--time-axis", "hn=1")
    assert rc == 2 and "'hn' is a state (pair h=hn)" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "sr=new_cache")
    assert rc == 2 and "--state sr=new_cache: input 'sr' is fixed by --const sr=VALUE" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--init", "sr=1")
    assert rc == 2 and "input 'sr' is fixed by --const" in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "1e39"])
def test_a_non_finite_initial_value_is_refused(tmp_path, adopt_cli, value):
    """--init cache=nan (inf, 1e400) was written into the contract (exit 0 where the output stays finite); 1e39
    overflows float32."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--init", f"cache={value}")
    assert rc == 2 and "the initial value of state 'cache' (float32) must be a finite number" in line, line


def test_a_hop_longer_than_a_waveform_block_with_an_output_of_its_shape_names_both_fixes(tmp_path, adopt_cli):
    """--hop-samples 320 on a graph taking 160 samples per call, output (N, 1, 160), was adopted as one frame of 160
    features (said in an [I] line, hidden by -q), a file 'run' refused: exit 2 naming --hop-samples 160 and
    --time-axis audio=1; the sample axis given (--time-axis audio=2) is the waveform, refused for the hop too."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--hop-samples", "320")
    assert rc == 2 and "input 'audio' ['N', 1, 160] takes 160 values per call, fewer than the 320-sample hop" in line \
        and "give --hop-samples 160" in line and "give --time-axis audio=1" in line, line
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--hop-samples", "320", "--time-axis", "audio=2")
    assert rc == 2 and "give --hop-samples 160" in line and "--time-axis audio=1" in line, line


@pytest.mark.parametrize("name", ["../../evil", "a/b", "a\\b", "..", "."])
def test_a_name_that_is_no_plain_folder_name_is_refused_up_front(tmp_path, adopt_cli, cli, name):
    """adopt/streamify --name ../../evil (a/b) wrote the name (exit 0); build then refused it ("engine name must be a
    plain folder name"): refused before any work now, by the rule build applies."""
    src = streaming_graph(tmp_path / "m.onnx")
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--name", name)
    assert rc == 2 and f"--name {name!r} must be a plain folder name" in line, line
    out = tmp_path / "s.stream.onnx"
    rc, _o, err = cli("streamify", src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, "--name", name)
    line = one_error_line(err)
    assert rc == 2 and f"--name {name!r} must be a plain folder name" in line and not out.exists(), line


def _edited_contract(tmp_path: Path, adopt_cli_src: Path, cli, **state) -> Path:
    """Adopt the module's graph, then edit the first state of its contract (``state``: keys of the JSON entry)."""
    import json

    out = tmp_path / "e.stream.onnx"
    rc, _o, err = cli("adopt", adopt_cli_src, "-o", out, "--sample-rate-hz", SR, "--hop-samples", HOP, "--const",
                      "sr=16000")
    assert rc == 0, err
    model = onnx.load(str(out))
    for p in model.metadata_props:
        if p.key == "cosyedge.state":
            entries = json.loads(p.value)
            entries[0].update(state)
            p.value = json.dumps(entries)
    onnx.save(model, str(out))
    return out


@pytest.mark.parametrize("edit,phrase", [
    ({"dtype": "bogus"}, "has invalid cosyedge metadata: state 'state_in.00' has dtype 'bogus'"),
    ({"dtype": "complex128"}, "has invalid cosyedge metadata: state 'state_in.00' has dtype 'complex128'"),
    ({"dtype": "int64"}, "the contract contradicts the graph: state 'state_in.00' is float32 in the graph but the "
                         "contract says int64"),
    ({"dtype": "float16"}, "the contract contradicts the graph: state 'state_in.00' is float32 in the graph but the "
                           "contract says float16"),
    ({"init": float("nan")}, "has invalid cosyedge metadata: state 'state_in.00' has initial value nan"),
], ids=["bogus", "complex128", "int64", "float16", "init-nan"])
def test_run_and_build_check_the_contract_state_dtype(tmp_path, cli, edit, phrase):
    """A contract whose state dtype is 'bogus' or 'complex128' ran and built (exit 0); int64/float16 ended in ONNX
    Runtime's raw "Unexpected input data type" (exit 3): one line naming the state, exit 3, nothing written."""
    import soundfile as sf

    src = _edited_contract(tmp_path, streaming_graph(tmp_path / "m.onnx"), cli, **edit)
    wav = tmp_path / "x.wav"
    sf.write(str(wav), np.zeros(SR // 10, np.float32), SR)
    rc, _, err = cli("run", wav, "--engine", src, "-o", tmp_path / "y.wav")
    line = one_error_line(err)
    assert rc == 3 and phrase in line, line
    assert not (tmp_path / "y.wav").exists()
    rc, _, err = cli("build", "--onnx", src, "--backend", "onnxruntime", "-o", tmp_path / "engines")
    line = one_error_line(err)
    assert rc == 3 and phrase in line, line


def test_output_and_atol_and_file_edges(tmp_path, adopt_cli, cli):
    """-o x.txt was written (exit 0) where streamify refuses it; -o /tmp was exit 3 for adopt, 2 for streamify;
    --atol 0 was refused by a later check although the help said 0<=x<=1; a graph declaring a 0-size state axis was
    exit 2 "unknown sizes" (the file is bad: exit 3)."""
    src = streaming_graph(tmp_path / "m.onnx")
    base = ("adopt", src, "--sample-rate-hz", SR, "--hop-samples", HOP, "--const", "sr=16000")
    rc, _o, err = cli(*base, "-o", tmp_path / "x.txt")
    assert rc == 2 and "a stream ONNX file name must end in .onnx" in one_error_line(err)
    assert not (tmp_path / "x.txt").exists()
    rc, _o, err = cli(*base, "-o", tmp_path)
    assert rc == 2 and "a stream ONNX file name must end in .onnx" in one_error_line(err)
    rc, _o, err = cli(*base, "-o", tmp_path / "o.onnx", "--atol", "0")
    assert rc == 2 and "0<x<=1" in one_error_line(err)
    rc, _o, err = cli("adopt", "--help")
    assert "0<x<=1" in _o
    zero = streaming_graph(tmp_path / "z.onnx", h=(1, "N", 0))
    rc, line, _ = adopt_cli(zero, "--const", "sr=16000")
    assert rc == 3 and "the graph declares state input 'h' [1, 'N', 0] with an axis of size 0" in line, line


@pytest.mark.parametrize("shape,norm", [("nx1x160", "Nx1x160"), ("1X1X160", "1x1x160"), ("1,1,160", "1x1x160"),
                                        ("1*1*160", "1x1x160")])
def test_a_shape_written_in_another_form_gets_the_form_state_takes(tmp_path, adopt_cli, shape, norm):
    """--state cache=nx1x160 (1X1X160, 1,1,160) said only "state output [...] not among the outputs", without the
    shape hint 1x1x-5 got: now the hint gives the form --state takes."""
    src = streaming_graph(tmp_path / "m.onnx", cache=("N", 1, "L"))
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", f"cache={shape}")
    assert rc == 2 and f"state output ['{shape}'] not among the outputs" in line and "if it is a shape" in line \
        and line.rstrip().endswith(f"{norm})"), line


def test_a_misplaced_pair_is_blamed_before_a_guessed_shape(tmp_path, adopt_cli):
    """--state cache=enhanced on a graph whose cache length is symbolic and must be 160 blamed cache's guessed shape
    ("give it with --state cache=SHAPE"), not the pairing."""
    src = streaming_graph(tmp_path / "s.onnx", cache=("N", 1, "L"), strict=True)
    rc, line, _ = adopt_cli(src, "--const", "sr=16000", "--state", "cache=enhanced")
    assert rc == 2 and line.startswith(f"[!] {src}: --state cache=enhanced pairs state 'cache' with output "
                                       "'enhanced', which is no state of it") and "give --state cache=new_cache" in \
        line, line
