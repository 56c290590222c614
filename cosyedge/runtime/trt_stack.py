"""The GPU stack the TensorRT backend needs: the one-line message naming what is missing (tensorrt, pycuda, a GPU),
:func:`require_stack` (import tensorrt and ``pycuda.driver`` and check a CUDA device answers), the GPU's description
(:func:`device_info`), cosyedge's process-wide TensorRT logger (:func:`trt_logger`), and cuda-python's runtime
bindings for CUDA-graph capture. Imported lazily: this module imports on a machine without TensorRT, pycuda or a GPU.
"""

from __future__ import annotations

from typing import Any

from cosyedge._lazy import has_module
from cosyedge.errors import ArtifactError, DependencyError, first_line
from cosyedge.log import LOG

TRT_PIP = "pip install 'cosyedge[trt]'"
JETSON_HINT = "on Jetson use JetPack's TensorRT (sudo apt install nvidia-jetpack) and pip install pycuda"


def missing_stack_message(have_tensorrt: bool, have_pycuda: bool, have_gpu: bool | None,
                          purpose: str = "run TensorRT engines") -> str | None:
    """Return the one-line message naming what is missing to ``purpose``, or None when nothing is.

    Args:
        have_tensorrt (bool): ``tensorrt`` is importable.
        have_pycuda (bool): ``pycuda`` is importable.
        have_gpu (bool | None): A CUDA GPU and driver answered (None: not checked yet).
        purpose (str): What the user tried, e.g. ``"build TensorRT engines"``.
    Returns:
        str | None: e.g. ``"to build TensorRT engines cosyedge needs tensorrt and pycuda (missing); install:
        pip install 'cosyedge[trt]' on a machine with an NVIDIA GPU; ... or use --backend onnxruntime"``.
    """
    missing = [n for n, ok in (("tensorrt", have_tensorrt), ("pycuda", have_pycuda)) if not ok]
    if have_gpu is False:
        missing.append("an NVIDIA GPU with its CUDA driver")
    if not missing:
        return None
    what = " and ".join(missing)
    fix = []
    if not have_tensorrt or not have_pycuda:
        fix.append(f"install: {TRT_PIP} on a machine with an NVIDIA GPU; {JETSON_HINT}")
    if have_gpu is False:
        fix.append("check 'nvidia-smi' (desktop) or 'tegrastats' (Jetson) sees the GPU")
    return f"to {purpose} cosyedge needs {what} (missing); {'; '.join(fix)}; or use --backend onnxruntime"



def require_stack(purpose: str = "run TensorRT engines", device: int = 0) -> tuple[Any, Any]:
    """Import ``tensorrt`` and ``pycuda.driver`` and check a CUDA GPU answers.

    Args:
        purpose (str): For the error message.
        device (int): CUDA device index that must exist.
    Returns:
        tuple: (tensorrt module, pycuda.driver module), ``pycuda.driver.init()`` done.
    Raises:
        DependencyError: tensorrt/pycuda missing, or no GPU/driver (one line naming what and how to get it).
    """
    have_trt, have_cuda = has_module("tensorrt"), has_module("pycuda")
    msg = missing_stack_message(have_trt, have_cuda, None, purpose)
    if msg:
        raise DependencyError(msg)
    try:
        import pycuda.driver as cuda
        import tensorrt as trt
    except ImportError as err:
        raise DependencyError(f"to {purpose}: {first_line(err)}; {TRT_PIP} ({JETSON_HINT})") from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except Exception as err:  # noqa: BLE001 - pycuda._driver.Error subclasses (RuntimeError, LogicError...)
        raise DependencyError(missing_stack_message(True, True, False, purpose) + f" [{first_line(err)}]") from None
    if count <= int(device):
        raise DependencyError(f"to {purpose} cosyedge needs CUDA device {device} but {count} GPU(s) were found; "
                              f"check 'nvidia-smi' or pick --device < {count}")
    return trt, cuda


def device_info(cuda: Any, device: int = 0) -> dict:
    """Return ``{"name": str, "compute_capability": "major.minor", "total_memory_mib": int}`` of a GPU.

    Args:
        cuda: ``pycuda.driver`` after ``init()``.
        device (int): Device index.
    Source: PyCUDA ``Device.name()``, ``Device.compute_capability()``, ``Device.total_memory()``.
    """
    d = cuda.Device(int(device))
    major, minor = d.compute_capability()
    return {"name": str(d.name()), "compute_capability": f"{major}.{minor}",
            "total_memory_mib": int(d.total_memory()) >> 20}


_LOGGERS: dict[int, tuple] = {}


def trt_logger(trt: Any) -> Any:
    """Return the process-wide ``tensorrt.ILogger`` of cosyedge (one per ``tensorrt`` module).

    It forwards TensorRT errors to :data:`cosyedge.log.LOG` (warning level) and warnings at debug level,
    and keeps the structured-sparsity report lines, the errors and the last 50 messages of the current
    build (``clear()`` starts a new one). One logger is shared by every builder and runtime: TensorRT uses
    the logger of the builder/runtime for every object created through it, and 8.x warns when runtimes
    are created with different loggers.

    Args:
        trt: the ``tensorrt`` module.
    Returns:
        ILogger subclass instance with ``sparsity``, ``errors``, ``recent`` (list[str]) and ``clear()``.
    Source: TensorRT Python API, Logger.html ("To implement a custom logger, ensure that you explicitly
        instantiate the base class in __init__()"; ``log(self, severity, msg)``; ``ILogger.Severity``).
    """
    key = id(trt)
    if key in _LOGGERS:
        return _LOGGERS[key][1]
    sev = trt.ILogger.Severity

    class _Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.clear()

        def clear(self) -> None:
            self.sparsity: list[str] = []
            self.errors: list[str] = []
            self.recent: list[str] = []

        def log(self, severity, msg):  # TensorRT callback (may come from TensorRT's threads)
            msg = str(msg)
            if "(Sparsity)" in msg:
                self.sparsity.append(msg)
            self.recent = (self.recent + [msg])[-50:]
            if severity in (sev.INTERNAL_ERROR, sev.ERROR):
                self.errors.append(msg)
                LOG.warning("TensorRT: %s", msg)
            elif severity == sev.WARNING:
                LOG.debug("TensorRT: %s", msg)

    _LOGGERS[key] = (trt, _Logger())  # holding the module keeps its id unique
    return _LOGGERS[key][1]


def _cudart() -> Any:
    """cuda-python runtime bindings (new location first), or DependencyError."""
    import importlib

    for mod in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(mod)
        except ImportError:
            continue
    raise DependencyError("CUDA graph capture needs cuda-python (pip install cuda-python); pycuda has no graph API; "
                          "or build the session without cuda_graph=True")


def _cuda_check(result: Any) -> Any:
    """Unpack a cuda-python ``(err, value...)`` tuple; raise ArtifactError when err is not success."""
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(err) != 0:
        raise ArtifactError(f"CUDA graph call failed: {err}")
    return rest[0] if len(rest) == 1 else (rest or None)
