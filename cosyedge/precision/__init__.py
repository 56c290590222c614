"""Precision stage: streaming FP32 ONNX -> reduced-precision / sparse ONNX (precision lives in the ONNX).

* :mod:`cosyedge.precision.fp16`: FP16 compute with FP32 inputs, outputs and states.
* :mod:`cosyedge.precision.sparsity`: 2:4 structured sparsity of Conv/Gemm/MatMul weights (ONNX side);
  :mod:`cosyedge.precision.sparse_torch`: fixed 2:4 masks for fine-tuning (PyTorch side).
* Calibration set, KL (entropy) calibration and Q/DQ INT8 live in their own modules of this package.

Submodules are imported on demand (nothing heavy is imported by ``import cosyedge.precision``).
"""
