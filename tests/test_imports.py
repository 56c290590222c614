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
    "cosyedge.cli.build", "cosyedge.cli.export", "cosyedge.datasets", "cosyedge.models",
    "cosyedge.builders.trt", "cosyedge.runtime.trt_compat", "cosyedge.runtime.trt",
    "cosyedge.runtime.pool", "cosyedge.realtime", "cosyedge.realtime.devices", "cosyedge.cli.devices",
    "cosyedge.runtime.engine", "cosyedge.builders.cache", "cosyedge.builders.names", "cosyedge.builders.config",
    "cosyedge.builders.triton", "cosyedge.precision.calibration",
]


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
    r = _run("import cosyedge.nn\n", {"torch"})
    assert r.returncode != 0
    assert "DependencyError" in r.stderr and "pip install torch==2.13.0" in r.stderr


def test_runtime_imports_nothing_from_the_build_stage():
    """``cosyedge/runtime/*.py`` never imports ``cosyedge.builders`` (running an engine does not build one; the
    layer above injects a builder, see ``cosyedge.builders.cache``)."""
    import ast

    bad = []
    for path in sorted((ROOT / "cosyedge" / "runtime").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "cosyedge.builders" or n.startswith("cosyedge.builders.") for n in names) or (
                    isinstance(node, ast.ImportFrom) and node.module == "cosyedge"
                    and any(a.name == "builders" for a in node.names)):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"runtime/ imports the build stage: {bad}"
