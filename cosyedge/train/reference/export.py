"""Export of the reference enhancer: PyTorch weights -> full ONNX -> streaming ONNX.

Moved from ``cosyedge/export/torch_to_onnx.py``: the export of a trained model lives with its
training code (icefall's ``export-onnx-streaming.py`` beside ``train.py``); ``cosyedge export`` imports this
module lazily inside the command, and deployment only ever sees the ONNX it writes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from cosyedge._lazy import require
from cosyedge.artifacts import check_writable
from cosyedge.export.torch_to_onnx import REFERENCE_INT8_KEEP_FLOAT, declare_int8_float_nodes, onnx_from_torch
from cosyedge.log import LOG


DEFAULT_OUT = "reference.stream.onnx"
"""str: where :func:`export_reference` writes without ``out``: this file name in the current folder, never the
installed package's bundled model (which a user's export would replace, and ``cosyedge check`` then refuses)."""


def export_reference(weights: str | Path | None = None, out: str | Path | None = None, dynamo: bool = False,
                     full_onnx: str | Path | None = None) -> Path:
    """Export the bundled reference enhancer to its streaming ONNX (export, then streamify).

    Args:
        weights (str | Path | None): safetensors weights; defaults to
            ``cosyedge/models/reference.safetensors`` (:data:`cosyedge.models.REFERENCE_WEIGHTS`).
        out (str | Path | None): Streaming ONNX destination; defaults to :data:`DEFAULT_OUT`
            (``reference.stream.onnx`` in the current folder). The bundled model
            (:data:`cosyedge.models.REFERENCE_STREAM_ONNX`) is rewritten only when ``out`` names it.
        dynamo (bool): Exporter choice. Defaults to False.
        full_onnx (str | Path | None): Also keep the full-sequence ONNX here; by default it is a temp file.
    Returns:
        Path: the streaming ONNX (16 kHz, hop 160, states in its metadata).
    Raises:
        ArtifactError: weights missing/corrupt, output not writable.
        DependencyError: torch or safetensors missing.
    """
    from cosyedge.surgery.streamify import streamify

    require("torch")
    from cosyedge.train.reference.model import load_reference

    out = check_writable(out if out is not None else Path.cwd() / DEFAULT_OUT)
    if full_onnx is not None:
        check_writable(full_onnx)
    model = load_reference(weights)
    with tempfile.TemporaryDirectory(prefix="cosyedge-export-") as tmp:
        full = Path(full_onnx) if full_onnx is not None else Path(tmp) / "reference.onnx"
        onnx_from_torch(model, full, dynamo=dynamo)
        contract = streamify(full, out)
    declare_int8_float_nodes(out, REFERENCE_INT8_KEEP_FLOAT)
    LOG.info("wrote %s (%d states, %.0f ms algorithmic latency)", out, len(contract.states),
             contract.algorithmic_latency_ms)
    return out
