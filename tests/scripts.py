"""Load the project's scripts (``scripts/**/*.py``, not part of the package) as modules in tests. Torch-free."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """Return ``scripts/<name>.py`` executed as a fresh module named after its file.

    ``name`` (str, without ``.py``) is the path under ``scripts/``, e.g. ``"benchmarks/bench_stream"``. The script's
    folder goes on ``sys.path`` first, as ``python scripts/<name>.py`` puts it, so a benchmark's
    ``from _common import ...`` resolves.
    """
    path = SCRIPTS / f"{name}.py"
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
