"""The training loop's library part: learning-rate schedule, validation (SI-SNR improvement, DNSMOS OVRL), the
weight average (EMA) and the curves plot. Moved from ``scripts/training/train_reference.py``; the loop itself
and its flags stay in the script.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from cosyedge.signal import si_snr_db


def lr_at(base_lr: float, step: int, frac: float, warmup_steps: int) -> float:
    """Learning rate: linear warm-up over ``warmup_steps``, then cosine decay to 5 % of ``base_lr`` over
    the fraction ``frac`` in [0, 1] of the wall-clock budget."""
    return base_lr * min(1.0, (step + 1) / warmup_steps) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))



def evaluate(model, pairs, delay: int, by_noise: bool = False):
    """Mean SI-SNR improvement (dB) of ``model`` over ``pairs`` [(name, noisy (T,), clean (T,))].

    With ``by_noise`` returns ``{noise: mean}`` grouped by the ``+<noise>@`` part of the names, plus
    ``"all"``."""
    import torch

    gains = []
    with torch.no_grad():
        for _, noisy, clean in pairs:
            n = len(noisy) - len(noisy) % model.config.hop_samples
            x = torch.from_numpy(np.ascontiguousarray(noisy[:n], dtype=np.float32))[None, None]
            y = model(x)[0, 0].numpy()
            est, ref, mix = y[delay:], clean[: n - delay], noisy[: n - delay]
            gains.append(si_snr_db(est, ref) - si_snr_db(mix, ref))
    if not by_noise:
        return float(np.mean(gains))
    groups: dict = {}
    for (name, _, _), g in zip(pairs, gains):
        groups.setdefault(name.split("+")[-1].split("@")[0], []).append(g)
    return {"all": float(np.mean(gains)), **{k: float(np.mean(v)) for k, v in groups.items()}}


def mean_dnsmos_ovrl(model, pairs, delay: int) -> float:
    """Mean DNSMOS P.835 OVRL of ``model``'s output over ``pairs`` [(name, noisy (T,), clean (T,))], scored as
    ``cosyedge eval`` scores it (:func:`cosyedge.eval.metrics.dnsmos`, 9.01 s windows, ONNX Runtime)."""
    import torch

    from cosyedge.eval.metrics import dnsmos

    scores = []
    with torch.no_grad():
        for _, noisy, _ in pairs:
            n = len(noisy) - len(noisy) % model.config.hop_samples
            y = model(torch.from_numpy(np.ascontiguousarray(noisy[:n], dtype=np.float32))[None, None])[0, 0].numpy()
            scores.append(dnsmos(y[delay:])["dnsmos_ovrl"])
    return float(np.mean(scores))


class WeightAverage:
    """Exponential moving average of a model's trainable parameters (fixed weights and buffers are copied once).

    ``avg = decay * avg + (1 - decay) * current`` after every optimiser step (Polyak averaging; e.g.
    Izmailov et al. 2018, arXiv:1803.05407, for why averaged weights generalise better).

    There is no warm-up: the average starts at the initial weights, which suits fine-tunes from a trained
    checkpoint (``--init``); from scratch, early evaluations still carry most of the random initialisation
    (after ``t`` steps its weight is ``decay ** t``, 0.74 at step 300 with 0.999).

    Args:
        model (torch.nn.Module): the trained model.
        decay (float): in (0, 1); 0.999 averages over about the last 1000 steps.
    """

    def __init__(self, model, decay: float):
        import copy

        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    def update(self, model) -> None:
        """Blend ``model``'s current state into the average (call after each optimiser step).

        Args:
            model (torch.nn.Module): the model being trained, of the same architecture as the average.
        """
        import torch

        with torch.no_grad():
            for avg, cur in zip(self.model.parameters(), model.parameters(), strict=True):
                if cur.requires_grad:  # the fixed STFT bases and feature statistics stay bit-exact
                    avg.mul_(self.decay).add_(cur, alpha=1.0 - self.decay)


def plot_curves(history: dict, path: Path) -> None:
    """Save training loss and validation SI-SNRi curves to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    steps, loss = history["step"], history["loss"]
    ax[0].plot(steps, loss, lw=0.6)
    ax[0].set(xlabel="step", ylabel="loss (neg. thresholded SNR [+ W x spectral] [+ W x STOI], dB)", title="training loss")
    ax[1].plot(history["val_step"], history["val_sisnri"], "o-", label="validation (held-out asterisk)")
    if history.get("test_sisnri"):
        ax[1].plot(history["val_step"], history["test_sisnri"], "s--", label="test (LibriVox x held-out real noises, 5 dB)")
    ax[1].set(xlabel="step", ylabel="SI-SNR improvement (dB)", title="evaluation")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


