"""Bundled models. ``reference`` is the trained streaming speech enhancer shipped with cosyedge.

Files next to this module: ``reference.safetensors`` (PyTorch weights + config in the header) and
``reference.stream.onnx`` (its streaming FP32 ONNX, so the runtime never needs PyTorch), and the 2:4-sparse
fine-tuned variant ``reference.sparse.safetensors`` / ``reference.sparse.stream.onnx`` (made by
``scripts/training/finetune_sparse.py``; build sparse engines from it: ``cosyedge build --onnx ... --sparse``).
"""

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
REFERENCE_WEIGHTS = MODELS_DIR / "reference.safetensors"
REFERENCE_STREAM_ONNX = MODELS_DIR / "reference.stream.onnx"
REFERENCE_SPARSE_WEIGHTS = MODELS_DIR / "reference.sparse.safetensors"
REFERENCE_SPARSE_STREAM_ONNX = MODELS_DIR / "reference.sparse.stream.onnx"


def require_reference(hint: str = "pass --onnx MODEL.stream.onnx") -> Path:
    """Return the bundled reference model's streaming ONNX (Path), the default model of every command.

    The one place that resolves the fallback to the bundled model and spells its error. Reads the module
    attribute at call time (tests point :data:`REFERENCE_STREAM_ONNX` elsewhere).

    Args:
        hint (str): What the caller's user can do instead (appended after ``is missing``), e.g.
            ``"pass --onnx MODEL.stream.onnx"``.
    Returns:
        Path: ``cosyedge/models/reference.stream.onnx``.
    Raises:
        ArtifactError: the file is missing (exit 3): ``bundled reference model PATH is missing; HINT``
            (or ``... is missing (HINT)`` when ``hint`` starts with ``(``).
    """
    from cosyedge.errors import ArtifactError

    src = Path(globals()["REFERENCE_STREAM_ONNX"])
    if not src.is_file():
        sep = " " if hint.startswith("(") else "; "
        raise ArtifactError(f"bundled reference model {src} is missing{sep}{hint}")
    return src
