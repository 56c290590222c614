"""Bundled models. ``reference`` is the trained streaming speech enhancer shipped with cosyedge.

Files next to this module: ``reference.safetensors`` (PyTorch weights + config in the header) and
``reference.stream.onnx`` (its streaming FP32 ONNX, so the runtime never needs PyTorch).
"""

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
REFERENCE_WEIGHTS = MODELS_DIR / "reference.safetensors"
REFERENCE_STREAM_ONNX = MODELS_DIR / "reference.stream.onnx"
