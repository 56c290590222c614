"""Causal streaming convolution blocks (PyTorch; needs the ``export`` extra).

Importing this package imports torch; a missing torch raises :class:`~cosyedge.errors.DependencyError`.
"""

from cosyedge._lazy import require

require("torch")

from cosyedge.train.nn.blocks import (  # noqa: E402
    CausalConv1d,
    CausalConv1dDownsample,
    CausalConv1dUpsample,
    CausalFraming,
)

__all__ = ["CausalConv1d", "CausalConv1dDownsample", "CausalConv1dUpsample", "CausalFraming"]
