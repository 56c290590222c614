"""Growth steps of the reference enhancer from a checkpoint, each keeping (or nearly keeping) its function:
more dilation blocks (identity), a deep-filter head (zero), a long-window feature conv (zero), a pitch-comb
feature (nearly zero) and a re-gridded analysis window. PyTorch.

Moved from ``scripts/training/train_reference.py``, beside the model whose internals they edit.
"""

from __future__ import annotations


def _grown_copy(model, new_keys: tuple, **changes):
    """Return a ReferenceEnhancer with ``model``'s config updated by ``changes`` and ``model``'s weights
    loaded; only parameters whose names start with one of ``new_keys`` may be new (they keep their fresh
    initialisation for the caller to set).

    Raises:
        SystemExit: the weights do not fit (keys other than ``new_keys`` missing or unexpected).
    """
    import dataclasses

    from cosyedge.train.reference.model import ReferenceEnhancer

    new = ReferenceEnhancer(dataclasses.replace(model.config, **changes))
    missing, unexpected = new.load_state_dict(model.state_dict(), strict=False)
    if unexpected or not all(k.startswith(new_keys) for k in missing):
        raise SystemExit(f"cannot grow the model ({changes}): unexpected keys {unexpected}, missing {missing}")
    return new


def extend_blocks(model, dilations: tuple):
    """Return a copy of ``model`` (ReferenceEnhancer) with gated blocks of ``dilations`` appended.

    The new blocks' output projections are zero, so each is the identity (residual ``x + 0``) and the
    extended model computes exactly the same function; training then uses the added capacity.
    """
    import torch

    new = _grown_copy(model, ("blocks.",), dilations=tuple(model.config.dilations) + tuple(dilations))
    with torch.no_grad():
        for blk in new.blocks[len(model.config.dilations):]:
            blk.proj.weight.zero_()
            blk.proj.bias.zero_()
    return new


def add_deep_filter(model, order: int, bins: int):
    """Return a copy of ``model`` (ReferenceEnhancer without a deep filter) with a deep filter of
    ``order`` taps on the lowest ``bins`` bins whose coefficient head is zero (as
    :class:`~cosyedge.train.reference.model.ReferenceEnhancer` initialises it), so the extended model computes
    exactly the same function and training then learns the filter.

    Raises:
        ValueError: ``model`` already has a deep filter.
        ValueError: ``order``/``bins`` out of range (from :class:`~cosyedge.train.reference.model.EnhancerConfig`).
    """
    if model.config.df_order:
        raise ValueError(f"the --init model already has a deep filter (order {model.config.df_order})")
    return _grown_copy(model, ("df_out.", "df_taps."), df_order=order, df_bins=bins)


def add_long_window(model, window: int, bins: int):
    """Return a copy of ``model`` (ReferenceEnhancer without long-window features) with long-window
    features of ``window`` samples on the lowest ``bins`` bins whose 1x1 conv is zero (as
    :class:`~cosyedge.train.reference.model.ReferenceEnhancer` initialises it), so the extended model computes
    exactly the same function; the caller sets their normalisation with
    ``set_feature_stats(x, long_window_only=True)``.

    Raises:
        ValueError: ``model`` already has long-window features.
        ValueError: ``window``/``bins`` out of range (from :class:`~cosyedge.train.reference.model.ReferenceEnhancer`).
    """
    if model.config.lw_window:
        raise ValueError(f"the --init model already has long-window features (window {model.config.lw_window})")
    return _grown_copy(model, ("lw_",), lw_window=window, lw_bins=bins)


def add_pitch_comb(model):
    """Return a copy of ``model`` (ReferenceEnhancer with long-window features, no pitch comb) with the pitch
    comb path (``EnhancerConfig.pitch_comb``): its feature conv is zero and its mix head starts at
    m = 0.0003, so the extended model computes nearly the same function; the caller sets the comb features'
    normalisation with ``set_feature_stats(x, pitch_comb_only=True)``.

    Raises:
        ValueError: ``model`` already has the pitch comb, or has no long-window features.
    """
    if model.config.pitch_comb:
        raise ValueError("the --init model already has the pitch comb")
    return _grown_copy(model, ("pc_",), pitch_comb=True)


def regrid_window(model, win: int):
    """Return a copy of ``model`` (ReferenceEnhancer, no deep filter) whose STFT uses a ``win``-sample analysis
    window (:func:`cosyedge.train.reference.model.stft_bases`: asymmetric when ``win`` > 2 * hop; same one-hop
    delay), with F' = win/2 + 1 bins instead of F.

    The estimator blocks (and long-window branch) are copied; the per-bin convs are resampled to the new
    bins by nearest frequency: new bin k (``k * fs / win`` Hz) takes old bin ``j = round(k * W / win)``
    (``W`` = the old window): the gain head's row and bias are copied, the feature conv's column is divided
    by the number of new bins sharing ``j`` (so a flat spectrum gives the same first-layer activations).
    The function is then close to, not equal to, the old one; the caller measures the new feature
    normalisation with ``set_feature_stats(x, main_only=True)``.

    Raises:
        ValueError: ``model`` has a deep filter, ``win`` equals its window, ``win`` is odd or below 2 * hop, or
            its long feature window is not longer than ``win`` (from ReferenceEnhancer).
    """
    import dataclasses

    import numpy as np
    import torch

    from cosyedge.train.reference.model import ReferenceEnhancer

    old = model.config
    if old.df_order:
        raise ValueError("--add-window: the model has a deep filter (not supported)")
    if win == old.win_samples:
        raise ValueError(f"--add-window {win}: the --init model already uses a {win}-sample window")
    new = ReferenceEnhancer(dataclasses.replace(old, win_samples=win))
    state = {k: v for k, v in model.state_dict().items()
             if not k.startswith(("analysis.", "synthesis.", "inp.", "out.", "feat_"))}
    _, unexpected = new.load_state_dict(state, strict=False)  # the per-bin convs are set below
    if unexpected:
        raise ValueError(f"--add-window: unexpected weights {unexpected}")
    j = np.minimum(np.rint(np.arange(new.config.n_bins) * old.win_samples / win).astype(int), old.n_bins - 1)
    share = np.bincount(j, minlength=old.n_bins)[j].astype(np.float32)
    jt = torch.from_numpy(j)
    with torch.no_grad():
        new.inp.weight.copy_(model.inp.weight[:, jt] / torch.from_numpy(share)[None, :, None])
        new.inp.bias.copy_(model.inp.bias)
        new.out.weight.copy_(model.out.weight[jt])
        new.out.bias.copy_(model.out.bias[jt])
    return new


