"""The eval package imports without its metric libraries; a missing one is a one-line DependencyError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = """
import sys, importlib.abc
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError('blocked for test: ' + name)
sys.meta_path.insert(0, _Block())
"""
METRIC_LIBS = {"pesq", "pystoi", "speechmos", "librosa", "pyrnnoise", "matplotlib", "torch", "tensorrt", "pycuda"}


def _run(code: str, blocked: set[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=sorted(blocked)) + code],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def test_eval_modules_import_without_metric_libraries():
    mods = ["cosyedge.eval", "cosyedge.eval.metrics", "cosyedge.eval.align", "cosyedge.eval.baseline",
            "cosyedge.eval.pairs", "cosyedge.eval.report", "cosyedge.eval.plot", "cosyedge.eval.evaluate",
            "cosyedge.cli.eval"]
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in mods)
    code += "from cosyedge.cli.main import main\nassert main(['eval', '--help']) == 0\n"
    code += f"bad = [m for m in sys.modules if m.split('.')[0] in {sorted(METRIC_LIBS)!r}]\n"
    code += "assert not bad, bad\nprint('ok')\n"
    r = _run(code, METRIC_LIBS)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok") and "INPUT" in r.stdout


def test_missing_pesq_is_a_dependency_error(tmp_path):
    from tests.eval.conftest import write_pair_folder

    write_pair_folder(tmp_path, seconds=1.0, names=("a",))
    code = f"from cosyedge.cli.main import main\nsys.exit(main(['eval', {str(tmp_path)!r}]))\n"
    r = _run(code, {"pesq"})
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("[!] 'pesq' is required") and "pip install 'cosyedge[eval]'" in line
