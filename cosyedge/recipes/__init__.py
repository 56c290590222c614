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


REFERENCE = "reference"
"""str: the name of the bundled model (not a recipe: 'cosyedge export reference', the default engine of 'run')."""


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("_", "-")


def match_name(name: str, known) -> str | None:
    """The known name ``name`` stands for (str), or None: the exact name, else the one it equals ignoring case and
    ``_`` / ``-`` (``GTCRN`` -> ``gtcrn``, ``silero_vad`` -> ``silero-vad``) when exactly one does.

    Args:
        name (str): What the user typed.
        known (Iterable[str]): The names (recipes, ``reference``).
    """
    known = list(known)
    if name in known:
        return name
    hits = [k for k in known if _norm(k) == _norm(name)]
    return hits[0] if len(hits) == 1 else None


def closest_names(name: str, known, n: int = 3) -> list[str]:
    """Up to ``n`` known names closest to ``name`` (list[str], best first; :func:`difflib.get_close_matches` ignoring
    case), for a refusal's "did you mean"."""
    import difflib

    by_norm = {_norm(k): k for k in known}
    return [by_norm[m] for m in difflib.get_close_matches(_norm(name), list(by_norm), n=n, cutoff=0.5)]


def did_you_mean(name: str, known) -> str:
    """``" (did you mean 'gtcrn'?)"`` for the closest known names, or "" (str)."""
    close = closest_names(name, known)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def get_recipe(name: str):
    """Return an instance of recipe ``name`` (matched ignoring case and ``_``/``-``, :func:`match_name`).

    Raises:
        UsageError: unknown name (the message lists the known ones and the closest).
    """
    known = recipes()
    found = match_name(name, known)
    if found is None:
        raise UsageError(f"unknown model '{name}'{did_you_mean(name, [REFERENCE, *known])}: cosyedge export knows "
                         f"{REFERENCE}, {', '.join(sorted(known))}")
    return known[found]()


def export_recipe(name: str, out: str | Path, *, full_onnx: str | Path | None = None, atol: float | None = None):
    """Write recipe ``name``'s stream ONNX to ``out`` (see :meth:`cosyedge.recipes.base.Recipe.export`).

    Returns:
        StreamContract: the written contract.
    Raises:
        UsageError: unknown recipe; DependencyError: its wheel is missing; AccuracyError: the proof failed.
    """
    return get_recipe(name).export(out, full_onnx=full_onnx, atol=atol)
