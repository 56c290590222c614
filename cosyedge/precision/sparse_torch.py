"""2:4 structured sparsity on the PyTorch side: fixed magnitude masks for fine-tuning (needs torch).

Recipe (NVIDIA ASP, "prune once, then retrain with fixed masks"): compute a 2:4 mask per eligible
weight from the trained dense weights (the 2 largest ``|w|`` in every 4 consecutive input channels, for
each output channel and kernel tap), zero the pruned weights, fine-tune with the masks fixed (the mask
is re-applied after every optimizer step, so neither the update nor weight decay revives a pruned
weight), then export; :func:`cosyedge.precision.sparsity.check_2to4` verifies the pattern in the ONNX.

Eligible: ``nn.Conv1d``/``nn.Conv2d``/``nn.Linear`` with a trainable weight whose input channels per
group are a multiple of 4 and >= :data:`cosyedge.precision.sparsity.MIN_REDUCTION` (the same rule as the
ONNX pass, so the fixed STFT analysis/synthesis convs and the 161-bin input conv of the reference model
stay dense).

torch is imported lazily: this module imports on machines without torch; calling it without torch
raises :class:`~cosyedge.errors.DependencyError`.

Source: Mishra et al., "Accelerating Sparse Deep Neural Networks", arXiv:2104.08378 (2:4 pattern,
one-shot magnitude pruning then fine-tuning with fixed masks); NVIDIA apex ``apex/contrib/sparsity``
(ASP: ``compute_sparse_masks``, masks re-applied after ``optimizer.step``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cosyedge._lazy import lazy_import
from cosyedge.precision.sparsity import M_GROUP, MIN_REDUCTION, N_KEEP

torch = lazy_import("torch")


def mask_2to4_torch(w: Any) -> Any:
    """Magnitude 2:4 mask of a weight along its input-channel axis.

    Args:
        w (torch.Tensor): Conv weight (C_out, C_in/group, k...) or Linear weight (out, in), float;
            axis 1 a multiple of 4.
    Returns:
        torch.Tensor: bool mask of ``w``'s shape; in every 4 consecutive input channels (fixed output
        channel and tap) exactly the 2 of largest ``|w|`` are True.
    Raises:
        ValueError: axis 1 is not a multiple of 4.
    """
    if w.shape[1] % M_GROUP:
        raise ValueError(f"input-channel axis of a weight of shape {tuple(w.shape)} is not a multiple of {M_GROUP}")
    a = w.detach().abs().movedim(1, -1)
    g = a.reshape(*a.shape[:-1], a.shape[-1] // M_GROUP, M_GROUP)
    idx = g.topk(N_KEEP, dim=-1).indices
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, idx, True)
    return keep.reshape(a.shape).movedim(-1, 1).contiguous()


def eligible_modules(model: Any, include: Callable[[str, Any], bool] | None = None) -> dict[str, Any]:
    """Return ``{qualified name: module}`` of the layers to prune (see module docstring).

    Args:
        model (torch.nn.Module): Model.
        include (callable | None): Extra filter ``include(name, module) -> bool``.
    Returns:
        dict[str, torch.nn.Module]: eligible Conv/Linear modules in definition order.
    """
    nn = torch.nn
    out = {}
    for name, m in model.named_modules():
        if not isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            continue
        w = m.weight
        if not w.requires_grad or w.shape[1] % M_GROUP or w.shape[1] < MIN_REDUCTION:
            continue
        if include is not None and not include(name, m):
            continue
        out[name] = m
    return out


def apply_2to4(model: Any, include: Callable[[str, Any], bool] | None = None) -> dict[str, Any]:
    """Compute 2:4 masks from the current weights and zero the pruned weights, in place.

    Args:
        model (torch.nn.Module): Trained dense model.
        include (callable | None): Extra filter ``include(name, module) -> bool``.
    Returns:
        dict[str, torch.Tensor]: ``{module name: bool mask}`` (keep these fixed during fine-tuning).
    """
    masks = {}
    with torch.no_grad():
        for name, m in eligible_modules(model, include).items():
            mask = mask_2to4_torch(m.weight)
            m.weight.mul_(mask)
            masks[name] = mask
    return masks


def reapply_masks(model: Any, masks: dict[str, Any]) -> None:
    """Zero the pruned weights again (call after every ``optimizer.step()``).

    Args:
        model (torch.nn.Module): The model ``masks`` were computed on.
        masks (dict[str, torch.Tensor]): From :func:`apply_2to4`.
    """
    mods = dict(model.named_modules())
    with torch.no_grad():
        for name, mask in masks.items():
            mods[name].weight.mul_(mask)


def masks_hold(model: Any, masks: dict[str, Any]) -> bool:
    """Return True (bool) when every masked weight is zero where its mask is False and every group
    of 4 input channels has <= 2 non-zeros."""
    mods = dict(model.named_modules())
    for name, mask in masks.items():
        w = mods[name].weight.detach()
        if bool((w[~mask] != 0).any()):
            return False
        nz = (w != 0).movedim(1, -1)
        if bool((nz.reshape(*nz.shape[:-1], -1, M_GROUP).sum(-1) > N_KEEP).any()):
            return False
    return True


__all__ = ["apply_2to4", "eligible_modules", "mask_2to4_torch", "masks_hold", "reapply_masks"]
