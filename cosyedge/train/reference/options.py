"""Option checks shared by the training scripts (``scripts/training/train_reference.py``,
``scripts/training/finetune_sparse.py``):
argparse types for the pair/range flags, the loss-weight checks and building the training data with one-line
errors. Moved from ``scripts/training/train_reference.py`` so that no script imports another.
"""

from __future__ import annotations

import argparse
import sys

from cosyedge.train.reference.losses import STOI_MIN_SECONDS


def check_loss_weights(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (``ap.error``: one line, exit 2) for ``--spectral-weight`` and ``--stoi-weight`` outside
    [0, 10] and for ``--stoi-weight`` with segments (``--seconds``) shorter than :data:`STOI_MIN_SECONDS`;
    shared by ``scripts/training/train_reference.py`` and ``scripts/training/finetune_sparse.py``."""
    for name in ("spectral_weight", "stoi_weight", "dnsmos_weight"):
        if not 0 <= getattr(args, name, 0.0) <= 10:
            ap.error(f"--{name.replace('_', '-')} must be in [0, 10], got {getattr(args, name)}")
    if getattr(args, "dnsmos_items", 1) < 1:
        ap.error(f"--dnsmos-items must be at least 1, got {args.dnsmos_items}")
    if args.stoi_weight and args.seconds < STOI_MIN_SECONDS:
        ap.error(f"--stoi-weight needs segments of at least {STOI_MIN_SECONDS:.2f} s (--seconds), got {args.seconds}")


ALLOW_MISSING_HELP = ("train even when a speech or real-noise corpus of the data version cannot be loaded (a tool "
                      "such as espeak-ng, flite or festival, or a Debian package missing): it is skipped and listed "
                      "in the training notes, and the run is not reproducible on a machine that has it")


def training_data_or_exit(ap: argparse.ArgumentParser, args: argparse.Namespace, **options):
    """Build ``TrainingData(**options)``, requiring every source of the data version unless
    ``args.allow_missing_corpora``; shared by ``scripts/training/train_reference.py`` and
    ``scripts/training/finetune_sparse.py``.

    Returns:
        TrainingData: the data; its ``missing`` lists what was skipped (only with ``--allow-missing-corpora``).
    Raises:
        SystemExit: 2 (``ap.error``) for bad data options; the error's exit code (4 for a missing tool, 3 for a
            corpus that cannot be built) with a one-line ``[!]`` message when a source is missing.
    """
    from cosyedge.data.training_data import TrainingData
    from cosyedge.errors import CosyEdgeError, UsageError

    print("preparing the training data (the first run on a machine fetches Debian packages, synthesises and "
          "converts voices: several minutes; later runs load the cache)", flush=True)
    try:  # TrainingData checks its options (e.g. the speech shares adding up to <= 1) before loading anything
        data = TrainingData(require_all=not args.allow_missing_corpora, **options)
    except UsageError as err:
        ap.error(str(err))
    except CosyEdgeError as err:
        print(f"[!] {err} (or pass --allow-missing-corpora)", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    for reason in data.missing.values():
        print(f"[!] {reason} (--allow-missing-corpora: trained without it)", file=sys.stderr, flush=True)
    return data



def _pair_spec(text: str, what: str, example: str) -> tuple[int, int]:
    """Parse ``"A,B"`` into two positive ints or raise argparse.ArgumentTypeError naming ``what``."""
    try:
        a, b = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} (two positive integers, e.g. {example}), got {text!r}") from None
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"need {what.replace(',', ' >= 1 and ')} >= 1, got {text!r}")
    return a, b


def _df_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--df`` / ``--add-df``: ``"K,BINS"`` -> (K, BINS), both positive ints (the upper
    bound of BINS, the model's bin count, is checked by :class:`EnhancerConfig` when the model is built)."""
    return _pair_spec(text, "K,BINS", "3,64")


def _lw_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--lw`` / ``--add-lw``: ``"W,BINS"`` -> (W, BINS), both positive ints (their
    range is checked by :class:`ReferenceEnhancer` when the model is built)."""
    return _pair_spec(text, "W,BINS", "1024,128")


def _gru_spec(text: str) -> tuple[int, int]:
    """argparse type of ``--gru``: ``"H,LAYERS"`` -> (H, LAYERS), both positive ints."""
    return _pair_spec(text, "H,LAYERS", "192,2")


def _snr_range_spec(text: str) -> tuple[float, float]:
    """``LO,HI`` (dB, -20 <= LO < HI <= 40) -> (LO, HI); argparse type of ``--snr-range``."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI in dB, e.g. -5,15, got {text!r}") from None
    if not -20 <= lo < hi <= 40:
        raise argparse.ArgumentTypeError(f"need -20 <= LO < HI <= 40 dB, got {text!r}")
    return lo, hi


def _read_speech_spec(text: str) -> str:
    """argparse type of ``--read-phrases``: one or more comma-separated names of
    :data:`cosyedge.data.versions.READ_PHRASE_CORPORA`, returned unchanged.

    Raises:
        argparse.ArgumentTypeError: an unknown or repeated name (``invalid choice: 'NAME'``).
    """
    from cosyedge.data.versions import READ_PHRASE_CORPORA

    names = text.split(",")
    for name in names:
        if name not in READ_PHRASE_CORPORA or names.count(name) > 1:
            raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (one or more of {', '.join(READ_PHRASE_CORPORA)}, "
                                             f"comma-separated, each once)")
    return text


