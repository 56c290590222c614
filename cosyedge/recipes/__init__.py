"""Recipes: pretrained third-party enhancers with their signal processing, as one stream ONNX each.

``export_recipe("nsnet2", "nsnet2.stream.onnx")`` (CLI ``cosyedge export nsnet2 -o nsnet2.stream.onnx``; also
``dfn3``, DeepFilterNet3 at 48 kHz, and ``hush``, LiveKit's DeepFilterNet-style 16 kHz model, both with libDF's
processing from :mod:`cosyedge.recipes.libdf`)
builds the recipe's full-sequence waveform graph and streamifies it (proved on real speech); a network
published already streaming (``cosyedge export dtln``, ``cosyedge export gtcrn``) is built as a one-hop graph and adopted
(:mod:`cosyedge.surgery.adopt`). See
:mod:`cosyedge.recipes.base` for the pattern and each recipe module for its processing and sources.
"""

from __future__ import annotations

from pathlib import Path

from cosyedge.errors import UsageError


def recipes() -> dict:
    """dict[str, type]: recipe classes by CLI name."""
    from cosyedge.recipes.dfn3 import DeepFilterNet3
    from cosyedge.recipes.dtln import DTLN
    from cosyedge.recipes.gtcrn import GTCRN
    from cosyedge.recipes.hush import Hush
    from cosyedge.recipes.nsnet2 import NSNet2
    from cosyedge.recipes.silero_vad import SileroVAD

    return {r.name: r for r in (NSNet2, DTLN, DeepFilterNet3, GTCRN, Hush, SileroVAD)}


def get_recipe(name: str):
    """Return an instance of recipe ``name``.

    Raises:
        UsageError: unknown name (the message lists the known ones).
    """
    known = recipes()
    if name not in known:
        raise UsageError(f"unknown model '{name}': cosyedge export knows reference, {', '.join(sorted(known))}")
    return known[name]()


def export_recipe(name: str, out: str | Path, *, full_onnx: str | Path | None = None, atol: float | None = None):
    """Write recipe ``name``'s stream ONNX to ``out`` (see :meth:`cosyedge.recipes.base.Recipe.export`).

    Returns:
        StreamContract: the written contract.
    Raises:
        UsageError: unknown recipe; DependencyError: its wheel is missing; AccuracyError: the proof failed.
    """
    return get_recipe(name).export(out, full_onnx=full_onnx, atol=atol)
