"""Every module imports on a CPU-only machine: tensorrt, pycuda and sounddevice blocked, and the runtime
path (run, build for ONNX Runtime) works without torch."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = """
import sys, importlib.abc
class _Block(importlib.abc.MetaPathFinder):
    def __init__(self, names): self.names = names
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in self.names:
            raise ImportError('blocked for test: ' + name)
sys.meta_path.insert(0, _Block({blocked!r}))
"""

TORCH_FREE = [
    "cosyedge", "cosyedge.errors", "cosyedge.log", "cosyedge._lazy", "cosyedge.artifacts", "cosyedge.audio",
    "cosyedge.enhance", "cosyedge.runtime", "cosyedge.runtime.base", "cosyedge.runtime.ort",
    "cosyedge.runtime.stream", "cosyedge.builders", "cosyedge.builders.ort", "cosyedge.surgery",
    "cosyedge.surgery.streamify", "cosyedge.export", "cosyedge.cli.main", "cosyedge.cli.run",
    "cosyedge.cli.build", "cosyedge.cli.export", "cosyedge.data", "cosyedge.models",
    "cosyedge.builders.trt", "cosyedge.runtime.trt_compat", "cosyedge.runtime.trt",
    "cosyedge.runtime.pool", "cosyedge.realtime", "cosyedge.realtime.devices", "cosyedge.cli.devices",
    "cosyedge.runtime.engine", "cosyedge.builders.cache", "cosyedge.builders.names", "cosyedge.builders.config",
    "cosyedge.builders.triton", "cosyedge.precision.calibration", "cosyedge.builders.triton.python",
    "cosyedge.serve", "cosyedge.serve.server", "cosyedge.serve.client", "cosyedge.serve.model", "cosyedge.cli.serve",
    "cosyedge.drivers", "cosyedge.drivers.file", "cosyedge.drivers.mic", "cosyedge.vad.stream", "cosyedge.vad.live",
]


def test_serving_modules_and_help_need_no_tritonclient_or_pytriton():
    """`cosyedge --help`, `cosyedge serve --help` and the serving modules import with tritonclient, grpc and pytriton
    blocked (they are imported only when a server starts or a client connects)."""
    code = ("import importlib\nfrom cosyedge.cli.main import main\n"
            + "".join(f"importlib.import_module({m!r})\n" for m in TORCH_FREE)
            + "assert main(['--help']) == 0 and main(['serve', '--help']) == 0 and main(['run', '--help']) == 0\n"
            "print('ok')\n")
    r = _run(code, {"torch", "tensorrt", "pycuda", "sounddevice", "tritonclient", "grpc", "pytriton"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")


def _run(code: str, blocked: set[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=sorted(blocked)) + code],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, **(env or {})})


def test_modules_import_without_torch_tensorrt_pycuda_sounddevice():
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in TORCH_FREE)
    code += "assert 'torch' not in sys.modules\nprint('ok')\n"
    r = _run(code, {"torch", "tensorrt", "pycuda", "sounddevice"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_cli_help_and_run_without_torch(tmp_path):
    """`cosyedge --help` and `cosyedge run` on the bundled recording need no torch."""
    out = tmp_path / "enhanced.wav"
    code = (
        "from cosyedge.cli.main import main\n"
        "assert main(['--help']) == 0\n"
        f"rc = main(['run', 'cosyedge/assets/demo/noisy.wav', '-o', {str(out)!r}])\n"
        "assert 'torch' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    r = _run(code, {"torch", "tensorrt", "pycuda", "sounddevice"}, env={"COSYEDGE_ENGINES_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "reference-fp32-onnxruntime" / "manifest.json").is_file()
    assert "Commands:" in r.stdout and "run" in r.stdout
    assert out.is_file() and out.stat().st_size > 1000


def test_nn_without_torch_is_a_dependency_error():
    r = _run("import cosyedge.train.nn\n", {"torch"})
    assert r.returncode != 0
    assert "DependencyError" in r.stderr and "pip install torch==2.13.0" in r.stderr


ALLOWED_TRAIN_IMPORTS = {("cosyedge/cli/export.py", "export", "cosyedge.train.reference.export")}
"""(file, function, module): the only import of :mod:`cosyedge.train` outside it: ``cosyedge export`` of the
reference model, lazily inside the command function (icefall keeps export beside training)."""


def _imports_of(path: Path, root: Path):
    """Yield (function name or None for module level, absolute module name) for every import in ``path``."""
    import ast

    rel = path.relative_to(root)
    package = ".".join(rel.with_suffix("").parts[:-1] if rel.name != "__init__.py" else rel.parent.parts)

    def walk(node, func):
        for child in ast.iter_child_nodes(node):
            f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and func is None else func
            if isinstance(child, ast.Import):
                for a in child.names:
                    yield func, a.name
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                yield func, mod
                for a in child.names:  # ``from cosyedge import train``
                    yield func, f"{mod}.{a.name}"
            yield from walk(child, f)

    yield from walk(ast.parse(path.read_text(), str(path)), None)


def test_nothing_outside_cosyedge_train_imports_it():
    """Training is its own package: no module of cosyedge/ outside cosyedge/train imports cosyedge.train, at
    module level or inside a function, except the one lazy export import in ALLOWED_TRAIN_IMPORTS."""
    root = Path(__file__).resolve().parents[1]
    found, offending = set(), []
    for path in sorted((root / "cosyedge").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("cosyedge/train/"):
            continue
        for func, mod in _imports_of(path, root):
            if mod == "cosyedge.train" or mod.startswith("cosyedge.train."):
                allowed = [a for a in ALLOWED_TRAIN_IMPORTS
                           if a[:2] == (rel, func) and (mod == a[2] or mod.startswith(a[2] + "."))]
                if allowed:
                    found.update(allowed)
                else:
                    offending.append(f"{rel}: {'module level' if func is None else func + '()'} imports {mod}")
    assert not offending, "\n".join(offending)
    assert found == ALLOWED_TRAIN_IMPORTS, "the allowed lazy export import moved; update ALLOWED_TRAIN_IMPORTS"


def test_deployment_data_and_signal_import_without_torch():
    """The default calibration data (cosyedge.data) and the shared metrics (cosyedge.signal) need no torch."""
    r = _run("import cosyedge.data, cosyedge.data.calib, cosyedge.signal, cosyedge.precision.calibset, "
             "cosyedge.eval.metrics\nassert 'torch' not in sys.modules\nassert 'cosyedge.train' not in sys.modules\n"
             "print('ok')\n", {"torch", "tensorrt", "pycuda", "sounddevice"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_data_sources_and_voice_do_not_import_each_other():
    """Circle 2 is gone: the Corpus lives in cosyedge.data.corpus and the name -> builder table in
    cosyedge.data.registry, so sources and voice import only the corpus module, never each other or the registry."""
    root = Path(__file__).resolve().parents[1]
    for name, banned in (("sources", {"voice", "registry"}), ("voice", {"sources", "registry"}),
                         ("corpus", {"sources", "voice", "registry"})):
        mods = {m for _, m in _imports_of(root / "cosyedge" / "data" / f"{name}.py", root)}
        hit = sorted(m for m in mods for b in banned if m == f"cosyedge.data.{b}" or m.startswith(f"cosyedge.data.{b}."))
        assert not hit, f"cosyedge/data/{name}.py imports {hit}"


def test_enhance_and_realtime_do_not_import_each_other():
    """Circle 3 stays gone: the file API (cosyedge/enhance.py) and the live path
    (cosyedge/realtime/) share the writer (cosyedge.audio) and the chunk conversion (StreamContract.chunk_samples),
    so neither imports the other, at module level or inside a function."""
    def hits(path: Path, package: str) -> list[str]:
        return sorted(m for _, m in _imports_of(path, ROOT) if m == package or m.startswith(package + "."))

    pkg = ROOT / "cosyedge"
    assert not hits(pkg / "enhance.py", "cosyedge.realtime"), "cosyedge/enhance.py imports cosyedge.realtime"
    realtime = sorted((pkg / "realtime").glob("*.py"))
    assert realtime
    for path in realtime:
        assert not hits(path, "cosyedge.enhance"), f"{path.relative_to(ROOT)} imports cosyedge.enhance"


def test_vad_imports_no_private_name_of_the_live_path():
    """``cosyedge/vad/*.py`` uses the mic driver (:mod:`cosyedge.drivers.mic`) and the public realtime API only: no
    ``_name`` from ``cosyedge.realtime`` or ``cosyedge.drivers``, at module level or inside a function."""
    bad = []
    for path in sorted((ROOT / "cosyedge" / "vad").glob("*.py")):
        for func, mod in _imports_of(path, ROOT):
            if mod.startswith(("cosyedge.realtime", "cosyedge.drivers")) and mod.rsplit(".", 1)[-1].startswith("_"):
                bad.append(f"{path.relative_to(ROOT)}: {func or 'module level'} imports {mod}")
    assert not bad, bad


def test_runtime_imports_nothing_from_the_build_stage():
    """``cosyedge/runtime/*.py`` never imports ``cosyedge.builders`` (running an engine does not build one; the
    layer above injects a builder, see ``cosyedge.builders.cache``), at module level or inside a function."""
    bad = []
    for path in sorted((ROOT / "cosyedge" / "runtime").glob("*.py")):
        for func, mod in _imports_of(path, ROOT):
            if mod == "cosyedge.builders" or mod.startswith("cosyedge.builders."):
                bad.append(f"{path.relative_to(ROOT)}: {func or 'module level'} imports {mod}")
    assert not bad, f"runtime/ imports the build stage: {bad}"
