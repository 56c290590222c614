"""cosyedge: deploy streaming speech models (causal convs, recurrent layers, transposed convs) with TensorRT
(GPU) and ONNX Runtime (CPU).

Pipeline: export (PyTorch -> FP32 ONNX) -> streamify (state surgery) -> precision -> build -> run ->
compare/check. Importing this package imports no heavy dependency (torch, tensorrt, pycuda,
sounddevice are lazy).
"""

__version__ = "0.1.0"

from cosyedge.errors import (  # noqa: E402
    AccuracyError,
    ArtifactError,
    CosyEdgeError,
    DependencyError,
    UsageError,
)

__all__ = [
    "__version__",
    "CosyEdgeError",
    "UsageError",
    "ArtifactError",
    "DependencyError",
    "AccuracyError",
]
