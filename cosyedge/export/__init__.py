"""Stage 1: export PyTorch models to full-sequence FP32 ONNX (torch is imported lazily)."""

from cosyedge.export.torch_to_onnx import OnnxFromTorch, onnx_from_torch, remove_weight_norm

__all__ = ["OnnxFromTorch", "onnx_from_torch", "remove_weight_norm"]
