"""Lazy imports for heavy or optional dependencies.

``trt = lazy_import("tensorrt", extra="trt")`` returns a proxy; the real import happens on first
attribute access and a missing module raises :class:`~cosyedge.errors.DependencyError` naming the pip
command. ``import cosyedge`` therefore works on a CPU-only machine without torch/tensorrt/pycuda.

Source: Polygraphy ``polygraphy/mod/importer.py`` (``lazy_import``).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

from cosyedge.errors import DependencyError

_INSTALL_HINTS = {
    "torch": "pip install torch==2.13.0  (CPU build; then pip install 'cosyedge[export]')",
    "tensorrt": "pip install 'cosyedge[trt]' (or use the TensorRT shipped with JetPack on Jetson)",
    "pycuda": "pip install 'cosyedge[trt]' (needs the CUDA toolkit and driver)",
    "sounddevice": "pip install 'cosyedge[audio]'",
    "safetensors": "pip install safetensors",
    "av": "pip install av",
    "pyrnnoise": "pip install pyrnnoise",
    "pesq": "pip install 'cosyedge[eval]'",
    "pystoi": "pip install 'cosyedge[eval]'",
    "speechmos": "pip install 'cosyedge[eval]'",
    "librosa": "pip install 'cosyedge[eval]'",
    "matplotlib": "pip install 'cosyedge[eval]'",
}


def install_hint(name: str) -> str:
    """Return the install command for top-level module ``name`` (str)."""
    top = name.split(".")[0]
    return _INSTALL_HINTS.get(top, f"pip install {top}")


class _LazyModule(ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_cosy_name"] = name
        self.__dict__["_cosy_mod"] = None

    def _load(self) -> ModuleType:
        mod = self.__dict__["_cosy_mod"]
        if mod is None:
            name = self.__dict__["_cosy_name"]
            try:
                mod = importlib.import_module(name)
            except ImportError as err:
                raise DependencyError(
                    f"'{name}' is required here but cannot be imported ({err}); install it: {install_hint(name)}"
                ) from None
            self.__dict__["_cosy_mod"] = mod
        return mod

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)


def lazy_import(name: str) -> Any:
    """Return a proxy for module ``name`` that imports it on first attribute access.

    Args:
        name (str): Dotted module name, e.g. ``"onnx_graphsurgeon"``.
    Returns:
        module proxy: behaves like the module once loaded.
    Raises:
        DependencyError: on first use, when the module cannot be imported (message names the pip command).
    """
    return _LazyModule(name)


def has_module(name: str) -> bool:
    """Return True when module ``name`` (str) is importable, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require(name: str) -> ModuleType:
    """Import module ``name`` now, or raise :class:`DependencyError` with the install command."""
    return lazy_import(name)._load()
