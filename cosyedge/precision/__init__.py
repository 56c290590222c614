"""Precision stage: streaming FP32 ONNX -> reduced-precision / sparse ONNX (precision lives in the ONNX).

* :mod:`cosyedge.precision.fp16`: FP16 compute with FP32 inputs, outputs and states.
* :mod:`cosyedge.precision.sparsity`: 2:4 structured sparsity of Conv/Gemm/MatMul weights (ONNX side);
  :mod:`cosyedge.precision.sparse_torch`: fixed 2:4 masks for fine-tuning (PyTorch side).
* INT8: :mod:`cosyedge.precision.calibset` (calibration sets), :mod:`cosyedge.precision.entropy`
  (histograms, KL amax), :mod:`cosyedge.precision.calibrate` (streaming calibration, amax cache,
  TensorRT calibration cache), :mod:`cosyedge.precision.qdq` (Q/DQ placement) and
  :mod:`cosyedge.precision.int8` (entry point :func:`~cosyedge.precision.int8.int8_onnx`).

Submodules are imported on demand (nothing heavy is imported by ``import cosyedge.precision``).
"""
