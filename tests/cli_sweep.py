"""A generated sweep of bad option values over the CLI: every value-taking option of ``adopt``, ``streamify``,
``build``, ``run``, ``check``, ``calib make|amax|int8`` and ``compare`` gets values of the wrong type, negative, zero, huge, non-integer and out of
range (and, for ``NAME=VALUE`` options and paths, malformed pairs, unknown names and unusable paths), one at a
time on an otherwise valid command line over tiny models.

The options are read from the click commands themselves, so an option added later is swept too. What a value
should get comes from the option's meaning (:data:`KINDS`), never from cosyedge's answer: a value that is
invalid for its option must end in exactly one ``[!]`` line with exit 2 (a bad argument) or 3 (a bad file);
a value that may be valid (``--delay-samples 0``) may also exit 0. Never a traceback, never exit 1 (the
accuracy-regression code), never another exit code.

Used by ``tests/test_cli_bad_values_sweep.py`` (CI) and ``scripts/benchmarks/sweep_bad_arguments.py`` (the table).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HOP = 160
RATE = 16000

# Value classes: (class name, value). "{name}" is replaced by a real input name of the model.
NUMBER = [("wrong type", "abc"), ("negative", "-1"), ("zero", "0"), ("huge", "99999999999999999999"),
          ("non-integer", "1.5"), ("out of range", "nan"), ("out of range", "1e400")]
PAIR = [("malformed", "noequals"), ("malformed", "=1"), ("unknown name", "nosuchname=1"),
        ("wrong type", "{name}=abc"), ("negative", "{name}=-1"), ("zero", "{name}=0"),
        ("huge", "{name}=99999999999999999999"), ("non-integer", "{name}=1.5"), ("out of range", "{name}=nan")]
IN_PATH = [("missing file", "{tmp}/no/such.onnx"), ("a folder", "{tmp}"), ("empty file", "{tmp}/empty.onnx"),
           ("not the format", "{tmp}/text.onnx")]
OUT_PATH = [("under a file", "{tmp}/text.onnx/x.out"), ("a folder", "{tmp}")]
TEXT = [("empty", ""), ("path-like", "a/b"), ("huge", "x" * 300)]


@dataclasses.dataclass
class Kind:
    """What an option means: its value classes and which classes may be valid values (exit 0 allowed).

    Attributes:
        values (list[tuple[str, str]]): (class, value template).
        valid (set[str]): Classes whose values can be legitimate for this option (then exit 0 is fine).
    """

    values: list
    valid: set = dataclasses.field(default_factory=set)


KINDS: dict[tuple[str, str], Kind] = {
    # adopt
    ("adopt", "--output"): Kind(OUT_PATH),
    ("adopt", "--state"): Kind(PAIR + [("shape", "{name}=1x1x2147483647"), ("shape", "{name}=Nx1xL")]),
    ("adopt", "--sample-rate-hz"): Kind(NUMBER),
    ("adopt", "--hop-samples"): Kind(NUMBER),
    ("adopt", "--delay-samples"): Kind(NUMBER, {"zero"}),
    ("adopt", "--name"): Kind(TEXT, {"huge"}),  # a path-like name is refused: it names the engine folder
    ("adopt", "--batch-axis"): Kind(PAIR, {"zero"}),
    ("adopt", "--init"): Kind(PAIR, {"zero", "negative", "non-integer"}),
    ("adopt", "--const"): Kind(PAIR, {"negative", "zero"}),  # any int64 value is a legal constant
    ("adopt", "--frame-samples"): Kind(NUMBER),
    ("adopt", "--time-axis"): Kind(PAIR + [("out of range", "{name}=7")]),
    ("adopt", "--atol"): Kind(NUMBER, {"zero"}),
    # streamify
    ("streamify", "--output"): Kind(OUT_PATH),
    ("streamify", "--sample-rate-hz"): Kind(NUMBER),
    ("streamify", "--hop-samples"): Kind(NUMBER),
    ("streamify", "--delay-samples"): Kind(NUMBER, {"zero"}),
    ("streamify", "--name"): Kind(TEXT, {"huge"}),  # a path-like name is refused: it names the engine folder
    ("streamify", "--time-axis"): Kind(PAIR + [("out of range", "{name}=7")], {"negative"}),  # -1: the last axis
    ("streamify", "--frames-per-hop"): Kind(NUMBER),
    ("streamify", "--atol"): Kind(NUMBER, {"zero"}),
    ("streamify", "--audio-output"): Kind(TEXT),
    ("streamify", "--attention-window"): Kind(NUMBER),
    # build
    ("build", "--onnx"): Kind(IN_PATH),
    ("build", "--exclude"): Kind(TEXT),
    ("build", "--calib"): Kind(IN_PATH),
    ("build", "--calib-count"): Kind(NUMBER),
    ("build", "--int8-placement"): Kind(TEXT),
    ("build", "--int8-min-snr"): Kind(NUMBER, {"zero", "non-integer"}),
    ("build", "--name"): Kind(TEXT, {"huge"}),
    ("build", "--out-dir"): Kind(OUT_PATH, {"a folder"}),
    ("build", "--dla-core"): Kind(NUMBER, {"zero"}),  # DLA core 0: exit 4 here (no TensorRT)
    ("build", "--max-batch-size"): Kind(NUMBER),
    ("build", "--max-sequences"): Kind(NUMBER),
    ("build", "--instances"): Kind(NUMBER),
    ("build", "--chunk-samples"): Kind(NUMBER),
    ("build", "--idle-timeout-ms"): Kind(NUMBER),
    ("build", "--max-queue-delay-us"): Kind(NUMBER, {"zero"}),
    # run
    ("run", "--output"): Kind(OUT_PATH),
    ("run", "--engine"): Kind(IN_PATH),
    ("run", "--model"): Kind(TEXT),
    ("run", "--chunk-ms"): Kind(NUMBER),
    ("run", "--threads"): Kind(NUMBER),
    ("run", "--device"): Kind(TEXT + NUMBER[:4], {"path-like"}),
    ("run", "--duration"): Kind(NUMBER),
    ("run", "--save-input"): Kind(OUT_PATH),
    ("run", "--server"): Kind(TEXT + [("malformed", "localhost"), ("out of range", "localhost:0"),
                                      ("out of range", "localhost:99999"), ("malformed", "http://localhost:8001")]),
    ("run", "--server-model"): Kind(TEXT),
    # check
    ("check", "--onnx"): Kind(IN_PATH),
    ("check", "--baseline"): Kind(IN_PATH),
    ("check", "--precisions"): Kind(TEXT + [("unknown name", "fp64")]),
    ("check", "--candidate"): Kind(PAIR),
    ("check", "--engines-dir"): Kind(OUT_PATH, {"a folder"}),
    ("check", "--calib"): Kind(IN_PATH),
    ("check", "--sparse-onnx"): Kind(IN_PATH),
    ("check", "--utterances"): Kind(IN_PATH),
    ("check", "--chunk-ms"): Kind(NUMBER),
    ("check", "--json"): Kind(OUT_PATH),
    ("check", "--junit"): Kind(OUT_PATH),
    # calib
    ("calib make", "--count"): Kind(NUMBER),
    ("calib make", "--seed"): Kind(NUMBER, {"zero", "huge"}),  # any non-negative integer seeds numpy
    ("calib make", "--out"): Kind(OUT_PATH, {"a folder"}),  # --out is a folder
    ("calib make", "--from"): Kind(IN_PATH, {"a folder"}),  # searched recursively
    ("calib amax", "--onnx"): Kind(IN_PATH),
    ("calib amax", "--calib"): Kind(IN_PATH, {"a folder"}),
    ("calib amax", "--threads"): Kind(NUMBER),
    ("calib amax", "--trt-version"): Kind(TEXT + [("malformed", "abc"), ("huge", "99999999999999999999")]),
    ("calib int8", "--onnx"): Kind(IN_PATH),
    ("calib int8", "--output"): Kind(OUT_PATH),
    ("calib int8", "--calib"): Kind(IN_PATH, {"a folder"}),
    ("calib int8", "--amax"): Kind(IN_PATH),
    ("calib int8", "--exclude"): Kind(TEXT + [("unknown name", "no_such_node")]),
    ("calib int8", "--threads"): Kind(NUMBER),
    ("calib int8", "--int8-placement"): Kind(TEXT),
    ("calib int8", "--int8-min-snr"): Kind(NUMBER, {"zero", "non-integer"}),
    # compare
    ("compare", "--chunk-ms"): Kind(NUMBER),
    ("compare", "--utterances"): Kind(IN_PATH),
    ("compare", "--max-utterances"): Kind(NUMBER, {"huge"}),  # at most N: all of them
    ("compare", "--snr-db"): Kind(NUMBER, {"zero", "negative", "non-integer"}),
    ("compare", "--seconds"): Kind(NUMBER, {"non-integer"}),
    ("compare", "--jump-db"): Kind(NUMBER, {"non-integer"}),
    ("compare", "--floor-db"): Kind(NUMBER, {"zero", "negative", "non-integer"}),
    ("compare", "--json"): Kind(OUT_PATH),
    ("compare", "--threads"): Kind(NUMBER),
}
"""(command, option) -> :class:`Kind`. Options not listed (flags, -v/-q, choices) have nothing to sweep."""

TRITON = ["--backend", "triton"]
EXTRA: dict[tuple[str, str], list[str]] = {
    **{("build", o): TRITON for o in ("--max-batch-size", "--max-sequences", "--instances", "--chunk-samples",
                                      "--idle-timeout-ms", "--max-queue-delay-us")},
    ("build", "--dla-core"): ["--backend", "tensorrt"],
    **{("build", o): ["--int8", "--calib", "{tmp}/calib"] for o in ("--calib-count", "--int8-placement",
                                                                    "--int8-min-snr")},
    ("build", "--exclude"): ["--fp16"],
    ("check", "--calib"): ["--precisions", "int8"],
    ("check", "--sparse-onnx"): ["--precisions", "fp32-sparse"],
    **{("compare", o): ["--mark-all"] for o in ("--seconds", "--jump-db", "--floor-db")},  # refused without it
}
"""(command, option) -> arguments added to the base so that the option is used (a Triton option needs
``--backend triton``), so that its value, not the option's irrelevance, is what gets judged."""

SKIP = {("run", "--device")}
"""Options whose values only matter with ``run mic`` (an audio device): swept with ``mic`` as the input."""


def _full_model(path: Path) -> Path:
    """A full-sequence causal FIR (N, 1, T) -> (N, 1, T): Pad(4, 0) + Conv(k=5), opset 17."""
    w = np.random.default_rng(0).standard_normal((1, 1, 5)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Pad", ["audio", "pads"], ["padded"]),
             helper.make_node("Conv", ["padded", "w"], ["enhanced"], kernel_shape=[5])]
    g = helper.make_graph(nodes, "fir", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 1, "T"])],
                          [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["N", 1, "T"])],
                          [numpy_helper.from_array(np.array([0, 0, 4, 0, 0, 0], np.int64), "pads"),
                           numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def _streaming_model(path: Path) -> Path:
    """A graph that already streams, no contract: audio (N, 1, 160), sr (1,) int64, cache (N, 1, 160) ->
    enhanced = 0.5 audio + 0.25 cache + 0 sr, new_cache = audio."""
    nodes = [helper.make_node("Mul", ["audio", "half"], ["a"]), helper.make_node("Mul", ["cache", "quarter"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Identity", ["audio"], ["new_cache"]),
             helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["srf", "zero"], ["sr0"]), helper.make_node("Add", ["ab", "sr0"], ["enhanced"])]
    ins = [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["N", 1, HOP]),
           helper.make_tensor_value_info("sr", TensorProto.INT64, [1]),
           helper.make_tensor_value_info("cache", TensorProto.FLOAT, ["N", 1, HOP])]
    outs = [helper.make_tensor_value_info("enhanced", TensorProto.FLOAT, ["N", 1, HOP]),
            helper.make_tensor_value_info("new_cache", TensorProto.FLOAT, ["N", 1, HOP])]
    g = helper.make_graph(nodes, "cached", ins, outs, [numpy_helper.from_array(np.float32(0.5), "half"),
                                                      numpy_helper.from_array(np.float32(0.25), "quarter"),
                                                      numpy_helper.from_array(np.float32(0.0), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def fixtures(tmp: Path) -> dict[str, list[str]]:
    """Write the tiny models, audio and files the sweep needs under ``tmp``; return the valid base command line
    of each command (argv lists, str)."""
    import soundfile as sf

    from tests.helpers.models import make_fir_model

    tmp.mkdir(parents=True, exist_ok=True)
    full = _full_model(tmp / "fir.onnx")
    cached = _streaming_model(tmp / "cached.onnx")
    stream = make_fir_model(tmp / "fir.stream.onnx", hop=HOP)
    (tmp / "empty.onnx").write_bytes(b"")
    (tmp / "text.onnx").write_text("not an onnx model\n")
    t = np.arange(int(1.5 * RATE)) / RATE
    sf.write(tmp / "in.wav", (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), RATE)
    (tmp / "raw").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(16):  # a calibration set of 16 one-second files (the least 'calib make --from' takes)
        x = 0.1 * np.sin(2 * np.pi * (200 + 25 * i) * t[:RATE]) + 0.01 * rng.standard_normal(RATE)
        sf.write(tmp / "raw" / f"{i}.wav", x.astype(np.float32), RATE)
    if not (tmp / "calib" / "manifest.json").exists():
        _quiet(["calib", "make", "--from", str(tmp / "raw"), "--out", str(tmp / "calib")], tmp)
    check = ["check", "--onnx", stream, "--baseline", tmp / "baseline.json", "--precisions", "fp32",
             "--engines-dir", tmp / "engines", "--no-pesq"]
    if not (tmp / "baseline.json").exists():  # fp32 and int8 (calibrated on the 4 files), checked as fp32
        setup = [str(a) for a in check] + ["--update-baseline", "--calib", str(tmp / "calib")]
        setup[setup.index("--precisions") + 1] = "fp32,int8"
        _quiet([str(a) for a in setup], tmp)
    return {
        "adopt": ["adopt", cached, "-o", tmp / "out" / "cached.stream.onnx", "--sample-rate-hz", RATE,
                  "--hop-samples", HOP, "--const", "sr=16000"],
        "streamify": ["streamify", full, "-o", tmp / "out" / "fir.stream.onnx", "--sample-rate-hz", RATE,
                      "--hop-samples", HOP],
        "build": ["build", "--onnx", stream, "--backend", "onnxruntime", "-o", tmp / "engines"],
        "run": ["run", tmp / "in.wav", "-o", tmp / "out" / "out.wav", "--engine", stream],
        "check": check,
        "calib make": ["calib", "make", "--from", tmp / "raw", "--out", tmp / "out" / "calibset"],
        "calib amax": ["calib", "amax", "--onnx", stream, "--calib", tmp / "calib"],
        "calib int8": ["calib", "int8", "--onnx", stream, "-o", tmp / "out" / "fir.int8.onnx", "--calib", tmp / "calib"],
        "compare": ["compare", stream, stream, "--utterances", tmp / "raw", "--max-utterances", "2", "--no-pesq"],
    }


NAMES = {"adopt": "sr", "streamify": "audio", "check": "fp32"}
"""The real input (or label) name put into ``NAME=VALUE`` values."""


def click_command(command: str):
    """The click command of ``command`` ("build", or a group's subcommand such as "calib make")."""
    from cosyedge.cli.main import COMMANDS

    top, *sub = command.split()
    mod, attr = COMMANDS[top]
    cmd = getattr(importlib.import_module(mod), attr)
    for name in sub:
        cmd = cmd.commands[name]
    return cmd


def options(command: str) -> list[str]:
    """The value-taking options of ``command`` (its click params: not flags, not -v/-q/--help, not choices)."""
    return [p.opts[-1] for p in click_command(command).params
            if p.param_type_name == "option" and not p.is_flag and not p.count and p.opts[-1] != "--help"
            and not getattr(p.type, "choices", None)]


@dataclasses.dataclass
class Case:
    """One swept value and what happened.

    Attributes:
        command, option, cls, value (str): What was given.
        argv (list[str]): The whole command line.
        rc (int | None): Exit code; None when an exception escaped ``main`` (a traceback).
        err (str): stderr.
        valid_ok (bool): Exit 0 is acceptable (the value's class may be valid for this option).
        seconds (float): Time it took.
    """

    command: str
    option: str
    cls: str
    value: str
    argv: list
    rc: int | None = None
    err: str = ""
    valid_ok: bool = False
    seconds: float = 0.0
    aliases: list = dataclasses.field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]

    @property
    def verdict(self) -> str:
        """``ok`` (exit 2/3 with one ``[!]`` line last on stderr, or exit 0 (4: TensorRT missing) for a possibly
        valid value), else
        what is wrong: ``traceback``, ``exit 0`` (an invalid value taken), ``exit N`` (another code), ``lines``
        (not exactly one ``[!]`` line)."""
        if self.rc is None:
            return "traceback"
        if self.rc == 0 or (self.rc == 4 and self.valid_ok):  # 4: a valid value, TensorRT missing here
            return "ok" if self.valid_ok else f"exit {self.rc}"
        if self.rc not in (2, 3):
            return f"exit {self.rc}"
        bangs = [ln for ln in self.lines if ln.startswith("[!]")]
        if len(bangs) != 1 or not self.lines[-1].startswith("[!]"):
            return "lines"
        return "ok" if self.names_culprit(bangs[0]) else "unnamed"

    def names_culprit(self, line: str) -> bool:
        """The error line names what was wrong: the option (``--chunk-ms``, or ``chunk-ms``/``chunk_ms``), the
        value itself (when at least 3 characters), a ``NAME=VALUE`` value's name, or a path's file name."""
        low = line.lower()
        keys = set()
        for opt in [self.option, *self.aliases]:
            bare = opt.lstrip("-")
            keys |= {opt, bare, bare.replace("-", "_"), bare.replace("-", " ")}
        if len(self.value) >= 3:
            keys.add(self.value.lower()[:40])
        if "=" in self.value and self.value.split("=")[0]:
            keys.add(self.value.split("=")[0].lower())
        if "/" in self.value:
            keys.add(Path(self.value).name.lower())
        return any(k and k.lower() in low for k in keys)


def cases(tmp: Path, commands: list[str] | None = None) -> list[Case]:
    """Every (command, option, value) of the sweep over the fixtures in ``tmp`` (not yet run)."""
    base = fixtures(tmp)
    out = []
    for command in commands or list(base):
        aliases = {p.opts[-1]: [o for o in p.opts if o.startswith("--")] for p in click_command(command).params}
        for option in options(command):
            kind = KINDS.get((command, option))
            if kind is None or (command, option) in SKIP:
                continue
            for cls, template in kind.values:
                value = template.format(name=NAMES.get(command, "x"), tmp=tmp)
                argv = [str(a) for a in base[command]]
                extra = [a.format(tmp=tmp) for a in EXTRA.get((command, option), [])]
                for i in range(0, len(extra) - 1):
                    if extra[i].startswith("--") and extra[i] in argv and not extra[i + 1].startswith("--"):
                        argv[argv.index(extra[i]) + 1] = extra[i + 1]
                        extra[i:i + 2] = ["", ""]
                argv += [a for a in extra if a]
                if option in argv:  # replace the base's own value of this option
                    i = argv.index(option)
                    argv[i + 1] = value
                else:
                    short = {"--output": "-o", "--out-dir": "-o"}.get(option)  # the base gives the short form
                    if short in argv:
                        argv[argv.index(short) + 1] = value
                    else:
                        argv += [option, value]
                out.append(Case(command, option, cls, value, argv, valid_ok=cls in kind.valid,
                                aliases=aliases.get(option, [])))
    return out


def _quiet(argv: list[str], tmp: Path) -> None:
    """Run a valid command line (a fixture's setup) in ``tmp``; raise when it fails."""
    case = run_case(Case("setup", "", "", "", argv, valid_ok=True), tmp)
    if case.rc != 0:
        raise RuntimeError(f"sweep fixture failed: {' '.join(argv)}: {case.err.strip()[-300:]}")


def run_case(case: Case, tmp: Path) -> Case:
    """Run ``case`` in process (stdout/stderr captured; the working folder is ``tmp`` so that nothing lands in
    the caller's) and fill in rc, err and seconds. An exception escaping ``main`` is recorded as rc None."""
    from cosyedge.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    t0 = time.perf_counter()
    try:
        os.chdir(tmp)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            case.rc = main(case.argv)
    except BaseException as exc:  # noqa: BLE001 - the sweep records any escape as a traceback
        case.rc = None
        err.write(f"{type(exc).__name__}: {exc}")
    finally:
        os.chdir(cwd)
        case.seconds = time.perf_counter() - t0
    case.err = err.getvalue()
    return case
