"""API conformance against the real bindings: every TensorRT, pycuda and cuda-python name cosyedge
uses exists where cosyedge uses it.

* TensorRT 8.6.1, 10.3.0 (what JetPack 6.1/6.2 ship), 10.13.3.9 and 11.4.0.106: the bindings wheels from PyPI
  cannot be imported here (they link libnvinfer), but their compiled module holds every class, method, property,
  argument and enum member name as a string (pybind11). :mod:`tests.trt.api_usage` collects the names cosyedge reads *on each version's code path*
  from cosyedge's source (the branches are evaluated with :mod:`cosyedge.runtime.trt_compat`'s real decisions on a
  stand-in module made of that version's names), and each must be in that version's string table.
* pycuda 2026.1: the names must be defined by its C++ wrappers (``src/wrapper/*.cpp``) or ``pycuda/driver.py``.
* cuda-python (``cuda-bindings`` 12.9.4 and 13.4.4): imported from the wheel (no GPU needed) in a subprocess;
  every function exists and accepts the arguments cosyedge passes (``inspect.signature(...).bind``).

The wheels and the sdist are downloaded by ``.ci/run`` into ``.cache/trt-wheels`` (``$COSYEDGE_TRT_WHEELS``
overrides it); without them these tests skip with the command that fetches them. They never download.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import json
import os
import re
import subprocess
import sys
import tarfile
import types
import zipfile
from pathlib import Path

import pytest

from cosyedge.runtime.trt_compat import PRECISIONS, features, plan_build
from cosyedge.errors import CosyEdgeError
from tests.trt.api_usage import STACK_MODULES, Analysis, StandIn

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("COSYEDGE_TRT_WHEELS", ROOT / ".cache" / "trt-wheels"))
TRT_WHEELS = {"8.6.1": "tensorrt_bindings-8.6.1-*.whl", "10.3.0": "tensorrt_cu12_bindings-10.3.0-*.whl",
              "10.13.3.9": "tensorrt_cu12_bindings-10.13.3.9-*.whl",
              "11.4.0.106": "tensorrt_cu12_bindings-11.4.0.106-*.whl"}
"""dict[str, str]: TensorRT version -> wheel file pattern (PyPI ``tensorrt-bindings`` / ``tensorrt-cu12-bindings``).
10.3.0 is the TensorRT of JetPack 6.2: Jetson's own bindings are not on PyPI, the x86-64 wheel of the same version
has the same Python API."""
PYCUDA_SDIST = "pycuda-2026.1.tar.gz"
CUDA_BINDINGS = {"12.9.4": "cuda_bindings-12.9.4-*.whl", "13.4.4": "cuda_bindings-13.4.4-*.whl"}
CUDA_PATHFINDER = "cuda_pathfinder-1.9.1-*.whl"
FETCH = "bash .ci/run (or: pip download --no-deps tensorrt-bindings==8.6.1 tensorrt-cu12-bindings==10.3.0 " \
        "tensorrt-cu12-bindings==10.13.3.9 " \
        "tensorrt-cu12-bindings==11.4.0.106 cuda-bindings==12.9.4 cuda-bindings==13.4.4 cuda-pathfinder==1.9.1 " \
        f"-d {CACHE}; pip download --no-deps --no-binary pycuda pycuda==2026.1 -d {CACHE})"


# ------------------------------------------------------------------------------------------ the bindings
def _wheel(pattern: str) -> Path | None:
    found = sorted(CACHE.glob(pattern))
    return found[-1] if found else None


def _need(pattern: str) -> Path:
    path = _wheel(pattern)
    if path is None:
        pytest.skip(f"{pattern} is not in {CACHE}: fetch it with {FETCH}")
    return path


def binary_names(data: bytes) -> frozenset:
    """Identifier names a compiled module defines, from its NUL-terminated printable strings.

    The linker merges a string into the tail of a longer one (``INT8`` is stored as the end of ``UINT8``,
    ``float16`` as the end of ``bfloat16``), so every suffix of an identifier string counts: a name is found
    iff it is a string or the end of an identifier string (docstrings and signatures are not split).

    Args:
        data (bytes): The ``.so`` file.
    Returns:
        frozenset[str]
    """
    names = set()
    for raw in re.findall(rb"[\x20-\x7e]+(?=\x00)", data):
        s = raw.decode()
        if s.isidentifier():  # a name, or a name's tail merge host (not a C++ symbol: _Z..., >64 characters)
            names.add(s)
            if not s.startswith("_Z") and len(s) <= 64:
                names.update(s[i:] for i in range(1, len(s)) if s[i:].isidentifier())
    return frozenset(names)


def python_names(source: str) -> set:
    """Names a Python file defines: top-level defs, classes, assignments, imports, and attributes assigned
    anywhere (``Class.attr = ...``: pycuda's driver.py adds methods to its C++ classes)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def trt_names(wheel: Path) -> frozenset:
    """The names of one TensorRT bindings wheel: its ``tensorrt*.so`` strings and its ``__init__.py`` names
    (``nptype``, ``__version__``, the ``float32`` aliases...)."""
    with zipfile.ZipFile(wheel) as z:
        so = [n for n in z.namelist() if re.search(r"/tensorrt[^/]*\.so$", n)]
        assert so, f"{wheel.name} has no tensorrt*.so"
        names = set(binary_names(z.read(so[0])))
        for n in z.namelist():
            if n.count("/") == 1 and n.endswith("/__init__.py"):
                names |= python_names(z.read(n).decode())
    return frozenset(names)


@pytest.fixture(scope="module")
def tables() -> dict:
    """TensorRT version -> frozenset of names (skips when a wheel is missing)."""
    return {v: trt_names(_need(p)) for v, p in TRT_WHEELS.items()}


# ------------------------------------------------------------------------------------------ cosyedge's uses
def cosyedge_modules() -> list[tuple[str, str, object]]:
    """Every cosyedge module that touches the GPU stack: imports tensorrt / pycuda / cuda-python (also through
    ``importlib``/``lazy_import`` strings) or reads ``trt.<name>``; plus the version shim."""
    out = []
    for path in sorted((ROOT / "cosyedge").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        hit = rel == "cosyedge/runtime/trt_compat.py"
        for n in ast.walk(tree):
            if isinstance(n, ast.Import) and any(a.name in STACK_MODULES for a in n.names) or \
                    isinstance(n, ast.ImportFrom) and n.module in STACK_MODULES or \
                    isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "trt" or \
                    isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) in \
                    ("import_module", "lazy_import") and any(isinstance(a, ast.Constant) and a.value in STACK_MODULES
                                                             for a in n.args):
                hit = True
        if hit:
            out.append((rel, path.read_text(), importlib.import_module(rel[:-3].replace("/", "."))))
    return out


class VersionConfig:
    """One TensorRT version and one build configuration the analysis evaluates conditions for.

    Args:
        version (str): TensorRT version.
        standin (StandIn): The stand-in ``tensorrt`` module of that version.
        config (dict): Values of entry-point parameters (``precision``, ``sparse``, ``dla_core``, ``gpu_fallback``).
    """

    def __init__(self, version: str, standin: StandIn, config: dict):
        self.version, self.standin, self.config = version, standin, config


def version_configs(version: str, names: frozenset) -> list[VersionConfig]:
    """Every build configuration :func:`plan_build` accepts on ``version`` (its real decision, fed the stand-in)."""
    standin = StandIn(names, version)
    feat = features(version, standin)
    flags = [n for n in dir(standin.BuilderFlag) if n.isupper()]
    out = []
    for precision, sparse, dla, fallback in itertools.product(PRECISIONS, (False, True), (None, 0), (False, True)):
        try:
            plan_build(feat, precision, sparse, dla, fallback, available_builder_flags=flags)
        except CosyEdgeError:
            continue
        out.append(VersionConfig(version, standin, {"precision": precision, "sparse": sparse, "dla_core": dla,
                                                    "gpu_fallback": fallback}))
    return out


def check(analysis: Analysis, tables: dict, stack: str = "tensorrt") -> dict:
    """Per TensorRT version: the names on its path, the uses missing from its table, unresolved dynamic names.

    Returns:
        dict: version -> ``{"names": set, "uses": int, "missing": [labels], "unresolved": [labels]}``.
    """
    report = {}
    for version, names in tables.items():
        vcs = version_configs(version, names)
        assert vcs, f"no build configuration is accepted on TensorRT {version}"
        live, missing, unresolved, count = set(), [], [], 0
        for use in analysis.uses:
            if use.stack != stack or use.probe:
                continue
            used = set()
            for vc in vcs:
                if not analysis.live(use.fn, use.guards, vc):
                    continue
                got = analysis.use_names(use, vc)
                if got is None:
                    unresolved.append(use.label)
                    break
                used |= got
            count += bool(used)
            live |= used
            missing += [f"{use.label.replace('<dynamic>', n)}" for n in sorted(used - names)]
        report[version] = {"names": live, "uses": count, "missing": sorted(set(missing)),
                           "unresolved": sorted(set(unresolved))}
    return report


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    """The analysis of cosyedge's GPU-stack modules."""
    return Analysis(cosyedge_modules())


@pytest.fixture(scope="module")
def report(analysis, tables) -> dict:
    """:func:`check` of cosyedge against the TensorRT versions of :data:`TRT_WHEELS`."""
    return check(analysis, tables)


# ------------------------------------------------------------------------------------------ TensorRT tests
def test_string_tables_read_the_known_api_differences(tables):
    # the reader itself, on differences documented by NVIDIA and measured with `strings` (docs/design.md)
    v8, v10, v11 = tables["8.6.1"], tables["10.13.3.9"], tables["11.4.0.106"]
    for name in ("FP16", "int8_calibrator", "IInt8EntropyCalibrator2"):
        assert name in v8 and name in v10 and name not in v11, name
    for name in ("execute_async_v2", "num_bindings", "max_workspace_size"):
        assert name in v8 and name not in v10 and name not in v11, name
    assert "STRONGLY_TYPED" not in v8 and "STRONGLY_TYPED" in v10 and "STRONGLY_TYPED" in v11
    for name in ("execute_async_v3", "set_tensor_address", "SPARSE_WEIGHTS", "nptype", "__version__"):
        assert all(name in t for t in (v8, v10, v11)), name
    assert "INT8" in v11  # tail-merged into "UINT8" (and DataType.INT8 remains): found as a suffix


def test_string_tables_tell_jetpack_6_tensorrt_from_newer_10x(tables):
    # names added after 10.3 (JetPack 6.2's TensorRT): tiling (10.8), IRuntimeConfig (10.11), timing-cache editing
    v103, v1013 = tables["10.3.0"], tables["10.13.3.9"]
    for name in ("tiling_optimization_level", "TilingOptimizationLevel", "IRuntimeConfig", "EDITABLE_TIMING_CACHE",
                 "MONITOR_MEMORY"):
        assert name in v1013 and name not in v103, name
    for name in ("STRONGLY_TYPED", "execute_async_v3", "set_tensor_address", "SPARSE_WEIGHTS",
                 "IInt8EntropyCalibrator2", "DLA_core", "GPU_FALLBACK", "FP16", "INT8"):
        assert name in v103, name


def test_jetpack_6_tensorrt_runs_the_same_path_as_newer_10x(report):
    # TensorRT 10.3 takes the 10.x decisions (strongly typed GPU builds, weakly typed DLA builds) and cosyedge reads
    # nothing on that path that 10.3 lacks (test_every_name_on_each_version_path_exists checks each name)
    assert report["10.3.0"]["names"] == report["10.13.3.9"]["names"]
    assert not report["10.3.0"]["missing"] and not report["10.3.0"]["unresolved"]


def test_analysis_finds_modules_and_uses(analysis):
    paths = {m.path for m in analysis.mods}
    assert {"cosyedge/builders/trt.py", "cosyedge/runtime/trt_compat.py", "cosyedge/runtime/trt.py",
            "cosyedge/precision/calibrate.py"} <= paths, paths
    got = {(u.stack, u.name) for u in analysis.uses}
    for want in (("tensorrt", "create_network"), ("tensorrt", "execute_async_v3"), ("tensorrt", "set_output_type"),
                 ("tensorrt", "ignore_mismatch"), ("tensorrt", "INTERNAL_ERROR"), ("pycuda", "memcpy_htod_async"),
                 ("pycuda", "free"), ("pycuda", "make_context"), ("cudart", "cudaGraphInstantiate")):
        assert want in got, want


def test_every_name_on_each_version_path_exists(report):
    lines = []
    for version, r in report.items():
        lines += [f"TensorRT {version}: {m} is not in the bindings" for m in r["missing"]]
        lines += [f"TensorRT {version}: cannot tell which names {u} reads" for u in r["unresolved"]]
    assert not lines, "\n".join(lines)
    counts = {v: len(r["names"]) for v, r in report.items()}
    assert all(n >= 50 for n in counts.values()), counts
    print("names checked per TensorRT version:", counts)


def test_version_gates_are_attributed(report):
    n8, n10, n11 = (report[v]["names"] for v in ("8.6.1", "10.13.3.9", "11.4.0.106"))
    # 8.6 (weakly typed): EXPLICIT_BATCH and the precision flags; FP32 pins with PREFER_PRECISION_CONSTRAINTS
    assert {"EXPLICIT_BATCH", "FP16", "INT8", "PREFER_PRECISION_CONSTRAINTS", "precision", "set_output_type"} <= n8
    assert "STRONGLY_TYPED" not in n8
    # 10.x: strongly typed on the GPU; the weakly typed DLA path keeps the precision flags and pins
    assert {"STRONGLY_TYPED", "FP16", "INT8", "PREFER_PRECISION_CONSTRAINTS", "DLA", "DLA_core"} <= n10
    # 11.x: always strongly typed, no DLA: none of the removed or weak-typing names
    for name in ("FP16", "INT8", "EXPLICIT_BATCH", "STRONGLY_TYPED", "PREFER_PRECISION_CONSTRAINTS",
                 "OBEY_PRECISION_CONSTRAINTS", "precision", "set_output_type", "DLA", "DLA_core", "GPU_FALLBACK"):
        assert name not in n11, name
    assert {"SPARSE_WEIGHTS", "execute_async_v3", "set_tensor_address", "num_io_tensors"} <= n11
    # the bindings API (8.0-8.4: no execute_async_v3) is on no supported version's path
    for name in ("execute_async_v2", "num_bindings", "get_binding_index", "set_binding_shape"):
        assert name not in n8 | n10 | n11, name


def test_names_the_11x_path_avoids_are_absent_from_11_4(report, tables):
    avoided = (report["8.6.1"]["names"] | report["10.13.3.9"]["names"]) - report["11.4.0.106"]["names"]
    v11 = tables["11.4.0.106"]
    absent = sorted(n for n in avoided if n not in v11)
    # the removed API the shim works around (11.x migration guide) must really be gone
    assert {"FP16", "EXPLICIT_BATCH", "PREFER_PRECISION_CONSTRAINTS"} <= set(absent), absent
    # the rest is avoided for other reasons and still exists: DLA is refused on 11.x (not on JetPack), INT8 is a
    # DataType member too, FP32 pins (ILayer.precision) are for weak typing, STRONGLY_TYPED is implied on 11.x
    present = sorted(n for n in avoided if n in v11)
    assert set(present) <= {"INT8", "DLA", "DLA_core", "default_device_type", "num_DLA_cores", "GPU_FALLBACK",
                            "DeviceType", "precision", "set_output_type", "STRONGLY_TYPED", "num_layers",
                            "get_layer", "get_output", "num_outputs", "dtype", "name", "float16", "float32"}, present


def test_feature_probes_name_real_members(analysis, tables):
    # hasattr/getattr-with-default probes may miss on a version, but each must name something that exists
    # somewhere (a typo would silently take the fallback everywhere)
    everywhere = frozenset().union(*tables.values())
    vc = version_configs("10.13.3.9", tables["10.13.3.9"])[0]
    probed = set()
    for use in analysis.uses:
        if use.stack == "tensorrt" and use.probe:
            names = analysis.use_names(use, vc)
            assert names, f"cannot tell which names {use.label} probes"
            probed |= names
    probed -= {"__members__"}  # pybind11 enums have it at run time (python attribute, not a string)
    assert {"IExecutionContext", "execute_async_v3", "IInt8EntropyCalibrator2", "STRONGLY_TYPED", "FP16",
            "NetworkDefinitionCreationFlag", "BuilderFlag"} <= probed, probed
    assert probed <= everywhere, sorted(probed - everywhere)


GOOD = '''
from cosyedge._lazy import lazy_import
from cosyedge.runtime.trt_compat import features

trt = lazy_import("tensorrt")


def build(config):
    feat = features(trt.__version__, trt)
    if feat.precision_flags:
        config.set_flag(trt.BuilderFlag.FP16)  # 8.6 / 10.x only
    for flag in ("SPARSE_WEIGHTS",):
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if feat.version >= (10, 8):
        config.tiling_optimization_level = trt.TilingOptimizationLevel.FAST  # 10.8+, gated
'''
BAD = GOOD + '''

def build_fp16_everywhere(config, engine):
    config.set_flag(trt.BuilderFlag.FP16)  # no gate: fails on 11.x
    for flag in ("FP16", "INT4"):
        config.set_flag(getattr(trt.BuilderFlag, flag))  # dynamic: FP16 fails on 11.x, INT4 on 8.6
    ctx = trt.Runtime(None).deserialize_cuda_engine(engine).create_execution_context()
    ctx.execute_async_v2([], 0)
    config.tiling_optimization_level = trt.TilingOptimizationLevel.NONE  # 10.8+, ungated: fails on 10.3 (JetPack 6)
'''


def _snippet(source: str) -> Analysis:
    ns = types.ModuleType("snippet")
    exec(compile(source, "snippet.py", "exec"), ns.__dict__)  # noqa: S102 - our own test source
    return Analysis([("snippet.py", source, ns)])


def test_checker_passes_a_gated_snippet(tables):
    r = check(_snippet(GOOD), tables)
    assert all(not v["missing"] and not v["unresolved"] for v in r.values()), r
    assert "FP16" in r["8.6.1"]["names"] and "FP16" in r["10.13.3.9"]["names"]
    assert "FP16" not in r["11.4.0.106"]["names"] and "SPARSE_WEIGHTS" in r["11.4.0.106"]["names"]
    assert "TilingOptimizationLevel" in r["10.13.3.9"]["names"]
    assert "TilingOptimizationLevel" not in r["10.3.0"]["names"]


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_checker_flags_a_name_used_where_it_does_not_exist(tables):
    r = check(_snippet(BAD), tables)
    m8, m10, m11 = (r[v]["missing"] for v in ("8.6.1", "10.13.3.9", "11.4.0.106"))
    ungated, dynamic = _line(BAD, "FP16)  # no gate"), _line(BAD, "# dynamic:")
    assert f"tensorrt: BuilderFlag.FP16 (snippet.py:{ungated})" in m11, m11
    assert f"tensorrt: BuilderFlag.FP16 (snippet.py:{dynamic})" in m11, m11  # via getattr over a literal list
    assert not any("FP16" in m for m in m8 + m10)
    assert any("BuilderFlag.INT4" in m for m in m8), m8  # INT4 arrived after 8.6
    assert any("execute_async_v2" in m for m in m10) and any("execute_async_v2" in m for m in m11)
    assert not any("execute_async_v2" in m for m in m8)
    tiling = _line(BAD, "# 10.8+, ungated")
    missing_103 = r["10.3.0"]["missing"]
    assert f"tensorrt: tensorrt.TilingOptimizationLevel (snippet.py:{tiling})" in missing_103, missing_103
    assert not any("TilingOptimizationLevel" in m for m in m10 + m11)


# ------------------------------------------------------------------------------------------ pycuda
def pycuda_names(sdist: Path) -> set:
    """Python names pycuda defines: ``py::def``/``.def``/``.add_property``/``class_<...>("X")``/``DEF_SIMPLE_*``/
    ``ENUM_VALUE`` in its C++ wrappers, plus the names of ``pycuda/driver.py``."""
    out = set()
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if re.search(r"/src/wrapper/[^/]+\.(cpp|hpp)$", member.name):
                cpp = tar.extractfile(member).read().decode("utf-8", "replace")
                out.update(re.findall(r'(?:\.|py::)(?:def|add_property|add_static_property|def_readonly|'
                                      r'def_readwrite|value|staticmethod)\s*\(\s*"(\w+)"', cpp))
                out.update(re.findall(r'class_<[^;]*?>\s*\(\s*"(\w+)"', cpp, flags=re.S))
                out.update(re.findall(r"\b(?:DEF_SIMPLE_\w+|ENUM_VALUE)\s*\(\s*(\w+)", cpp))
            elif member.name.endswith("/pycuda/driver.py"):
                out |= python_names(tar.extractfile(member).read().decode())
    return out


def test_pycuda_defines_every_name_cosyedge_uses(analysis):
    names = pycuda_names(_need(PYCUDA_SDIST))
    assert {"mem_alloc", "Stream", "Context", "memcpy_htod"} <= names  # the reader works
    used = {u.name for u in analysis.uses if u.stack == "pycuda"}
    assert {"pagelocked_empty", "mem_alloc", "memcpy_htod_async", "memcpy_dtoh_async", "Stream", "Event",
            "make_context", "push", "pop", "detach", "handle", "synchronize", "time_since", "record", "free",
            "init", "count", "compute_capability", "total_memory"} <= used, used
    missing = sorted({u.label for u in analysis.uses if u.stack == "pycuda" and u.name not in names})
    assert not missing, missing
    print(f"pycuda 2026.1: {len(used)} names checked")


# ------------------------------------------------------------------------------------------ cuda-python
_PROBE = r'''
import inspect, json, sys, warnings
warnings.simplefilter("ignore")
uses = json.loads(sys.argv[1])
out = {}
for mod in ("cuda.bindings.runtime", "cuda.cudart"):
    try:
        m = __import__(mod, fromlist=["_"])
    except ImportError as err:
        out[mod] = {"error": str(err)}
        continue
    res = []
    for chain, name, nargs in uses:
        obj, ok = m, True
        for c in chain + [name]:
            if not hasattr(obj, c):
                ok = False
                break
            obj = getattr(obj, c)
        bind = None
        if ok and nargs is not None:
            try:
                inspect.signature(obj).bind(*range(nargs))
                bind = True
            except TypeError:
                bind = False
        res.append([ok, bind])
    out[mod] = {"uses": res, "success_is_0": int(m.cudaError_t.cudaSuccess) == 0}
print(json.dumps(out))
'''


def _cudart_uses(analysis: Analysis) -> list:
    return [u for u in analysis.uses if u.stack == "cudart"]


def _probe(uses: list, path: str | None) -> dict:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    payload = json.dumps([[[c for c in u.chain if c not in ("()", "[]")], u.name, u.nargs] for u in uses])
    p = subprocess.run([sys.executable, "-c", _PROBE, payload], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _check_cudart(uses: list, result: dict, what: str) -> None:
    assert "error" not in result, f"{what}: {result.get('error')}"
    assert result["success_is_0"], f"{what}: int(cudaError_t.cudaSuccess) is not 0 (_cuda_check relies on it)"
    problems, groups = [], {}
    for u, (ok, bind) in zip(uses, result["uses"]):
        if not ok:
            problems.append(f"{what}: {u.label} does not exist")
        elif bind is False and u.alt is None:
            problems.append(f"{what}: {u.label} does not accept {u.nargs} positional argument(s)")
        if u.alt is not None and u.nargs is not None:
            groups.setdefault((u.name, u.alt), []).append(bool(bind))
    for (name, _), binds in groups.items():  # try (graph, flags) / except TypeError: (graph, log, size)
        if not any(binds):
            problems.append(f"{what}: no form of {name} cosyedge tries accepts its arguments")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("version", sorted(CUDA_BINDINGS))
def test_cuda_python_has_every_function_with_a_fitting_signature(analysis, version, tmp_path):
    wheel, finder = _need(CUDA_BINDINGS[version]), _need(CUDA_PATHFINDER)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if f"-{tag}-" not in wheel.name:
        pytest.skip(f"{wheel.name} is not for this Python ({tag}): download it with this interpreter's pip")
    for w in (wheel, finder):
        with zipfile.ZipFile(w) as z:
            z.extractall(tmp_path)
    uses = _cudart_uses(analysis)
    assert {"cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate", "cudaGraphLaunch",
            "cudaGraphDestroy", "cudaGraphExecDestroy", "cudaStreamCaptureModeThreadLocal"} <= {u.name for u in uses}
    result = _probe(uses, str(tmp_path))
    _check_cudart(uses, result["cuda.bindings.runtime"], f"cuda-bindings {version} cuda.bindings.runtime")
    if version.startswith("12."):  # the legacy module cosyedge falls back to is still shipped by 12.x
        _check_cudart(uses, result["cuda.cudart"], f"cuda-bindings {version} cuda.cudart")
    # cosyedge's first form of cudaGraphInstantiate is the CUDA 12+ one
    inst = [(u, b) for u, (_, b) in zip(uses, result["cuda.bindings.runtime"]["uses"]) if u.name == "cudaGraphInstantiate"]
    assert [(u.nargs, b) for u, b in inst] == [(2, True), (3, False)], [(u.nargs, b) for u, b in inst]


def test_installed_cuda_python_fits(analysis):
    import importlib.util

    try:
        spec = importlib.util.find_spec("cuda.bindings.runtime") or importlib.util.find_spec("cuda.cudart")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        pytest.skip("cuda-python is not installed here (the wheels above are checked instead)")
    uses = _cudart_uses(analysis)
    result = _probe(uses, None)
    mod = "cuda.bindings.runtime" if "error" not in result["cuda.bindings.runtime"] else "cuda.cudart"
    _check_cudart(uses, result[mod], f"installed {mod}")


def _mutated(path: str, old: str, new: str) -> Analysis:
    mods = []
    for rel, source, ns in cosyedge_modules():
        if rel == path:
            assert old in source, f"{path} no longer contains {old!r}: update this test"
            source = source.replace(old, new)
        mods.append((rel, source, ns))
    return Analysis(mods)


@pytest.mark.parametrize("path, old, new, version, name", [
    # the FP32 pins (weak typing only) without their gate reach the 11.x path
    ("cosyedge/builders/trt.py", "    if fp32_nodes:\n", "    if True:\n", "11.4.0.106", "PREFER_PRECISION_CONSTRAINTS"),
    # a session that ignored the shim's execute_api decision would call the 8.0-8.4 bindings API
    ("cosyedge/runtime/trt.py", 'v3 = self._feat.execute_api == "v3"', "v3 = False", "10.13.3.9", "execute_async_v2"),
])
def test_checker_catches_a_removed_gate_in_cosyedge(tables, path, old, new, version, name):
    r = check(_mutated(path, old, new), tables)
    assert any(f".{name} (" in m for m in r[version]["missing"]), r[version]["missing"]


def test_checker_follows_the_shims_decisions(tables, monkeypatch):
    import cosyedge.builders.trt as build_trt
    from cosyedge.runtime import trt_compat

    def plan_with_fp16(feat, precision="fp32", *args, **kwargs):
        """A shim that forgot 11.x removed FP16: plan_build plus the FP16 flag on every fp16 build."""
        plan = trt_compat.plan_build(feat, precision, *args, **kwargs)
        if precision == "fp16" and "FP16" not in plan.builder_flags:
            plan.builder_flags.append("FP16")
        return plan

    plan_with_fp16.__module__ = trt_compat.__name__  # the analysis evaluates cosyedge's own functions only
    monkeypatch.setattr(build_trt, "plan_build", plan_with_fp16)
    r = check(Analysis(cosyedge_modules()), tables)
    assert any(m.startswith("tensorrt: BuilderFlag.FP16 (cosyedge/builders/trt.py:") for m in r["11.4.0.106"]["missing"])
    assert not r["8.6.1"]["missing"] and not r["10.13.3.9"]["missing"]
