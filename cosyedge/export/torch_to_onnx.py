"""Stage 1, export: PyTorch module -> FP32 full-sequence ONNX with the cosyedge stream contract.

The model maps audio (N, 1, T) float32 -> (N, 1, T) float32. The ONNX has input ``audio`` and output
``enhanced`` with dynamic batch ``N`` and time ``T``, ONE self-contained file (the ``dynamo=True``
exporter writes weights to a separate ``.onnx.data``; they are folded back in), written atomically.
Its metadata holds a :class:`~cosyedge.artifacts.StreamContract` without states (``total_stride`` = hop
until streamify measures it) when the sample rate and hop are known.

Exporter facts (DESIGN.md, torch 2.13): always pass ``dynamo=`` explicitly (the default changed);
``dynamo=True`` folds ``F.pad`` left pads into Conv ``pads=[P, 0]``, ``dynamo=False`` emits a Pad whose
pads become constant after constant folding; remove weight_norm before export.

torch is imported lazily: this module imports without it; exporting raises
:class:`~cosyedge.errors.DependencyError` with the pip command.

Sources: PyTorch docs ``torch.onnx.export`` (``dynamo``, ``dynamic_axes`` / ``dynamic_shapes``,
``external_data``); ``torch.nn.utils.parametrize.remove_parametrizations`` and
``torch.nn.utils.remove_weight_norm``; Polygraphy ``backend/onnx/loader.py`` (``OnnxFromPath``-style stages).
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from pathlib import Path
from typing import Any

from cosyedge._lazy import lazy_import, require
from cosyedge.artifacts import Stage, StreamContract, check_writable, load_onnx
from cosyedge.errors import UsageError
from cosyedge.log import LOG

onnx = lazy_import("onnx")

INPUT_NAME = "audio"
OUTPUT_NAME = "enhanced"
DEFAULT_EXAMPLE_SAMPLES = 1600
_NOISY_WARNINGS = (r"Constant folding - Only steps=1", r".*isinstance\(treespec, LeafSpec\)")


def remove_weight_norm(model: Any) -> int:
    """Fold weight normalisation into plain weights, in place, in both PyTorch forms.

    Handles ``torch.nn.utils.parametrizations.weight_norm`` (parametrize) and the legacy
    ``torch.nn.utils.weight_norm`` (forward pre-hook with ``weight_g`` / ``weight_v``). Other
    parametrizations are folded as well (their current value is kept).

    Args:
        model (torch.nn.Module): Model to modify.
    Returns:
        int: number of tensors folded.
    """
    torch = require("torch")
    from torch.nn.utils import parametrize

    n = 0
    for module in model.modules():
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
                n += 1
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, torch.nn.utils.weight_norm.WeightNorm):
                torch.nn.utils.remove_weight_norm(module, hook.name)
                n += 1
    return n


def _metadata(model: Any, *, name, sample_rate_hz, hop_samples, delay_samples) -> dict:
    """Contract fields: ``model.stream_metadata()`` if present, overridden by explicit arguments."""
    fields = dict(model.stream_metadata()) if callable(getattr(model, "stream_metadata", None)) else {}
    given = {"name": name, "sample_rate_hz": sample_rate_hz, "hop_samples": hop_samples,
             "delay_samples": delay_samples}
    fields.update({k: v for k, v in given.items() if v is not None})
    have_sr, have_hop = fields.get("sample_rate_hz") is not None, fields.get("hop_samples") is not None
    if have_sr != have_hop:
        missing = "hop_samples" if have_sr else "sample_rate_hz"
        raise UsageError(f"give {missing}= too (sample rate and hop go together in the stream contract)")
    for key in ("sample_rate_hz", "hop_samples"):
        if have_sr and int(fields[key]) <= 0:
            raise UsageError(f"{key} must be a positive integer, got {fields[key]}")
    return fields


class OnnxFromTorch(Stage):
    """Stage: export a PyTorch audio model to a full-sequence FP32 ONNX (see module docstring).

    Args:
        model (torch.nn.Module): ``forward(x)`` with x (N, 1, T) float32 -> (N, 1, T) float32, causal.
            It is deep-copied (weight_norm removed, eval mode, CPU); the caller's model is not changed.
        path (str | Path): Destination ``.onnx`` (e.g. ``model.onnx``).
        dynamo (bool): Use the ``torch.export``-based exporter (Conv pads form) instead of TorchScript
            tracing (Pad form). Defaults to False.
        opset (int): ONNX opset. Defaults to 18.
        name (str | None): Model name; defaults to ``model.stream_metadata()["name"]`` or "model".
        sample_rate_hz (int | None): Defaults to ``model.stream_metadata()``.
        hop_samples (int | None): Samples per model step; defaults to ``model.stream_metadata()``.
        delay_samples (int | None): Algorithmic delay; defaults to ``model.stream_metadata()`` or 0.
        example_samples (int | None): Length T of the example input used for tracing; must suit the
            model (a multiple of its stride). Defaults to the smallest multiple of the hop >= 1600.

    Without a sample rate and hop the ONNX gets no cosyedge metadata (a warning says so); then
    ``streamify`` needs them as arguments.

    Raises:
        DependencyError: torch (or onnxscript for ``dynamo=True``) missing.
        UsageError: only one of sample rate / hop known, or non-positive values.
        ArtifactError: destination not writable.
    """

    def __init__(self, model: Any, path: str | Path, *, dynamo: bool = False, opset: int = 18,
                 name: str | None = None, sample_rate_hz: int | None = None, hop_samples: int | None = None,
                 delay_samples: int | None = None, example_samples: int | None = None):
        self.model = model
        self.path = Path(path)
        self.dynamo = bool(dynamo)
        self.opset = int(opset)
        self.name = name
        self.sample_rate_hz = sample_rate_hz
        self.hop_samples = hop_samples
        self.delay_samples = delay_samples
        self.example_samples = example_samples

    def call_impl(self) -> Path:
        torch = require("torch")
        check_writable(self.path)
        fields = _metadata(self.model, name=self.name, sample_rate_hz=self.sample_rate_hz,
                           hop_samples=self.hop_samples, delay_samples=self.delay_samples)
        hop = fields.get("hop_samples")
        n_ex = self.example_samples or (-(-DEFAULT_EXAMPLE_SAMPLES // int(hop)) * int(hop) if hop else
                                        DEFAULT_EXAMPLE_SAMPLES)
        with LOG.stage(f"export {type(self.model).__name__} -> {self.path} (dynamo={self.dynamo})"):
            model = copy.deepcopy(self.model).cpu().eval()
            n_wn = remove_weight_norm(model)
            if n_wn:
                LOG.info("removed weight_norm from %d tensors", n_wn)
            example = (0.1 * torch.randn(2, 1, n_ex, generator=torch.Generator().manual_seed(0)),)
            with tempfile.TemporaryDirectory(prefix="cosyedge-export-") as tmp:
                raw = Path(tmp) / "model.onnx"
                kwargs: dict = dict(input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], opset_version=self.opset,
                                    dynamo=self.dynamo, verbose=False)
                if self.dynamo:
                    dim = torch.export.Dim
                    kwargs["dynamic_shapes"] = ({0: dim("N"), 2: dim("T")},)
                else:
                    kwargs["dynamic_axes"] = {INPUT_NAME: {0: "N", 2: "T"}, OUTPUT_NAME: {0: "N", 2: "T"}}
                with torch.no_grad(), warnings.catch_warnings():
                    for pattern in _NOISY_WARNINGS:  # exporter-internal noise; TracerWarnings stay visible
                        warnings.filterwarnings("ignore", message=pattern)
                    torch.onnx.export(model, example, str(raw), **kwargs)
                proto = load_onnx(raw, load_external_data=True)  # weights inline from .onnx.data
            if fields.get("sample_rate_hz") is not None:
                contract = StreamContract(
                    input=INPUT_NAME, output=OUTPUT_NAME, sample_rate_hz=int(fields["sample_rate_hz"]),
                    hop_samples=int(hop), total_stride=int(hop), delay_samples=int(fields.get("delay_samples") or 0),
                    states=[], name=str(fields.get("name") or "model"),
                )
                contract.write_to_onnx(proto)
            else:
                LOG.warning("%s: no sample rate / hop known (model has no stream_metadata()): no cosyedge metadata "
                            "written; pass --sample-rate-hz and --hop-samples to 'cosyedge streamify'", self.path)
            from cosyedge.surgery.io import save_model

            save_model(proto, self.path)
        return self.path


def onnx_from_torch(model: Any, path: str | Path, *, dynamo: bool = False, opset: int = 18,
                    name: str | None = None, sample_rate_hz: int | None = None, hop_samples: int | None = None,
                    delay_samples: int | None = None, example_samples: int | None = None) -> Path:
    """Function twin of :class:`OnnxFromTorch`: export ``model`` to a full-sequence ONNX at ``path``.

    Args:
        model (torch.nn.Module): x (N, 1, T) float32 -> (N, 1, T) float32.
        path (str | Path): Destination ``.onnx``.
        dynamo (bool): Exporter choice (passed explicitly to ``torch.onnx.export``). Defaults to False.
        opset (int): ONNX opset. Defaults to 18.
        name, sample_rate_hz, hop_samples, delay_samples: contract fields; default to
            ``model.stream_metadata()``.
        example_samples (int | None): Tracing input length (see :class:`OnnxFromTorch`).
    Returns:
        Path: ``path``.
    Raises:
        DependencyError, UsageError, ArtifactError: see :class:`OnnxFromTorch`.
    """
    return OnnxFromTorch(model, path, dynamo=dynamo, opset=opset, name=name, sample_rate_hz=sample_rate_hz,
                         hop_samples=hop_samples, delay_samples=delay_samples, example_samples=example_samples)()


def export_reference(weights: str | Path | None = None, out: str | Path | None = None, dynamo: bool = False,
                     full_onnx: str | Path | None = None) -> Path:
    """Export the bundled reference enhancer to its streaming ONNX (export, then streamify).

    Args:
        weights (str | Path | None): safetensors weights; defaults to
            ``cosyedge/models/reference.safetensors`` (:data:`cosyedge.models.REFERENCE_WEIGHTS`).
        out (str | Path | None): Streaming ONNX destination; defaults to
            :data:`cosyedge.models.REFERENCE_STREAM_ONNX` (``cosyedge/models/reference.stream.onnx``).
        dynamo (bool): Exporter choice. Defaults to False.
        full_onnx (str | Path | None): Also keep the full-sequence ONNX here; by default it is a temp file.
    Returns:
        Path: the streaming ONNX (16 kHz, hop 160, states in its metadata).
    Raises:
        ArtifactError: weights missing/corrupt, output not writable.
        DependencyError: torch or safetensors missing.
    """
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.surgery.streamify import streamify

    require("torch")
    from cosyedge.models.reference import load_reference

    out = check_writable(out or REFERENCE_STREAM_ONNX)
    if full_onnx is not None:
        check_writable(full_onnx)
    model = load_reference(weights)
    with tempfile.TemporaryDirectory(prefix="cosyedge-export-") as tmp:
        full = Path(full_onnx) if full_onnx is not None else Path(tmp) / "reference.onnx"
        onnx_from_torch(model, full, dynamo=dynamo)
        contract = streamify(full, out)
    LOG.info("wrote %s (%d states, %.0f ms algorithmic latency)", out, len(contract.states),
             contract.algorithmic_latency_ms)
    return out
