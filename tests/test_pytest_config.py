"""The suite's own settings (pyproject.toml): the slow marker is registered and not excluded by default, the
warning filters ignore third-party notes and raise ours, and no DeprecationWarning comes from cosyedge."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

_NO_COSYEDGE_DEPRECATIONS = r'''
import importlib, json, os, pkgutil, sys, warnings
import cosyedge
seen = []
with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    for m in pkgutil.walk_packages(cosyedge.__path__, "cosyedge."):
        if not m.name.startswith("cosyedge.train"):
            importlib.import_module(m.name)
    import torch
    from cosyedge.export import onnx_from_torch
    sys.path.insert(0, sys.argv[2])
    from tests.models_torch import UserCausalNet
    torch.manual_seed(0)
    for dynamo in (False, True):
        onnx_from_torch(UserCausalNet().eval(), os.path.join(sys.argv[1], f"u{int(dynamo)}.onnx"), dynamo=dynamo,
                        sample_rate_hz=8000, hop_samples=2)
    from cosyedge.cli.main import main
    assert main(["streamify", "-q", os.path.join(sys.argv[1], "u0.onnx"), "-o", os.path.join(sys.argv[1], "s.onnx")]) == 0
pkg = os.path.dirname(cosyedge.__file__)
print(json.dumps([[w.category.__name__, w.filename, str(w.message)[:200]] for w in rec
                  if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning))
                  and os.path.abspath(w.filename).startswith(pkg)]))
'''


def _ini() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_slow_marker_registered_and_not_excluded_by_default():
    ini = _ini()
    assert any(m.startswith("slow:") for m in ini["markers"])
    assert "not slow" not in ini.get("addopts", "")  # CI (the README's test command) still runs them
    assert "-m" not in re.findall(r"pytest (.*)", (ROOT / ".ci/run").read_text())[0].split()


@pytest.mark.parametrize("category, message, module, raises", [
    (DeprecationWarning, "old API", "cosyedge.export.torch_to_onnx", True),
    (PendingDeprecationWarning, "old API", "cosyedge.runtime.ort", True),
    (DeprecationWarning, "You are using the legacy TorchScript-based ONNX export. Starting in PyTorch 2.9",
     "cosyedge.export.torch_to_onnx", True),  # ours to handle: cosyedge's own call site (torch_to_onnx) does
    (DeprecationWarning, "You are using the legacy TorchScript-based ONNX export. Starting in PyTorch 2.9",
     "tests.models_torch", False),
    (DeprecationWarning, "The feature will be removed. Please remove usage of this function",
     "torch.onnx._internal.torchscript_exporter.utils", False),
    (DeprecationWarning, "whatever", "onnxscript.ir", False),
    (FutureWarning, "`isinstance(treespec, LeafSpec)` is deprecated, use ...", "copyreg", False),
    (UserWarning, "Constant folding - Only steps=1 can be constant folded for opset >= 10 onnx::Slice op.",
     "torch.onnx._internal.torchscript_exporter.utils", False),
    (UserWarning, "The tensor attributes self.a, self.b were assigned during export. Such attributes", "contextlib",
     False),
    (Warning, "Converting a tensor to a Python boolean might cause the trace to be incorrect.", "denoiser.demucs",
     False),
])
def test_filterwarnings_ignore_third_party_and_raise_ours(category, message, module, raises):
    """pyproject's filterwarnings, applied as pytest applies them (last match wins): a DeprecationWarning from a
    cosyedge module is an error, the exporters' notes are ignored."""
    import warnings

    from _pytest.config import parse_warning_filter

    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        for arg in _ini()["filterwarnings"]:
            warnings.filterwarnings(*parse_warning_filter(arg, escape=False))

        def emit():
            warnings.warn_explicit(message, category, filename=module.replace(".", "/") + ".py", lineno=1,
                                   module=module)

        if raises:
            with pytest.raises(category):
                emit()
        else:
            emit()
            assert not seen, [str(w.message) for w in seen]


def test_importing_cosyedge_and_a_small_export_raise_no_deprecation_from_cosyedge(tmp_path):
    """In a fresh interpreter with every warning shown: importing every cosyedge module, exporting a small causal
    model with both exporters and streamifying it raise no Deprecation/FutureWarning attributed to cosyedge's own
    files (the TorchScript exporter's deprecation used to be, at cosyedge/export/torch_to_onnx.py)."""
    pytest.importorskip("torch")
    import json

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", _NO_COSYEDGE_DEPRECATIONS, str(tmp_path), str(ROOT)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []
