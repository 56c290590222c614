"""Load the project's ``scripts/*.py`` (scripts, not part of the package) as modules in tests. Torch-free."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """Return ``scripts/<name>.py`` executed as a fresh module named ``name`` (str, without ``.py``)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
