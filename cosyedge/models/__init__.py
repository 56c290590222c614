"""Bundled models. ``reference`` is the trained streaming speech enhancer shipped with cosyedge.

Files next to this module: ``reference.safetensors`` (PyTorch weights + config in the header) and
``reference.stream.onnx`` (its streaming FP32 ONNX, so the runtime never needs PyTorch), and the 2:4-sparse
fine-tuned variant ``reference.sparse.safetensors`` / ``reference.sparse.stream.onnx`` (made by
``scripts/finetune_sparse.py``; build sparse engines from it: ``cosyedge build --onnx ... --sparse``).
"""

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
REFERENCE_WEIGHTS = MODELS_DIR / "reference.safetensors"
REFERENCE_STREAM_ONNX = MODELS_DIR / "reference.stream.onnx"
REFERENCE_SPARSE_WEIGHTS = MODELS_DIR / "reference.sparse.safetensors"
REFERENCE_SPARSE_STREAM_ONNX = MODELS_DIR / "reference.sparse.stream.onnx"
