"""Entropy (KL-divergence) calibration: histograms of |x| and the amax that minimises KL(P || Q).

Histogram collection (:class:`AbsHistogram`) is **two-pass**: the first pass over the calibration set
records only ``max |x|`` per tensor (:meth:`AbsHistogram.observe_max`), the second fills a histogram of
``num_bins`` (2048) equal bins over ``[0, max |x|]``. TensorRT and pytorch-quantization instead grow the
range on the fly (new bins of the first batch's width are appended when a later batch exceeds it); that
is one pass but its bin width, and so the chosen amax, depends on which batch came first, and the bin
count is unbounded when the first batch is near silence (a first chunk of zeros). Two passes cost one
more FP32 inference over the set (cheap next to histogramming), keep memory at ``num_bins`` counters
per tensor and make the result independent of utterance order and chunking.

:func:`amax_entropy` is TensorRT's entropy calibration ("EntropyCalibration2"): for every candidate
threshold bin ``i`` (from ``start_bin`` = 128 to ``num_bins``), the reference distribution P is the
first ``i`` bins with all counts above them added to bin ``i - 1``; the candidate Q spreads the first
``i`` bins into 128 levels (int8 magnitudes), each level's count shared evenly over its non-empty bins;
the amax is the upper edge of the ``i`` with the smallest KL(P || Q) (the largest such ``i`` on ties).
Bin 0 is set to the count of bin 1 first (it holds the exact zeros, e.g. zero state at stream start).

Sources: S. Migacz, "8-bit Inference with TensorRT", GTC 2017 (slides 28-38, entropy calibration);
NVIDIA/TensorRT ``tools/pytorch-quantization/pytorch_quantization/calib/histogram.py``
(``_compute_amax_entropy``, ``HistogramCalibrator.collect``); NVIDIA TensorRT-Model-Optimizer
``modelopt/torch/quantization/calib/histogram.py`` (same algorithm).
"""

from __future__ import annotations

import numpy as np

from cosyedge.errors import UsageError

NUM_BINS = 2048
"""int: histogram bins over [0, max |x|] (TensorRT's default)."""

START_BIN = 128
"""int: first candidate threshold bin (pytorch-quantization's default ``start_bin``)."""


class AbsHistogram:
    """Histogram of |x| for one tensor, collected in two passes (see module docstring).

    Args:
        num_bins (int): Bins over ``[0, max |x|]``, >= 2 * 128. Defaults to 2048.
    Attributes:
        max (float): ``max |x|`` seen in pass 1 (0.0 before any data).
        counts (np.ndarray | None): int64 (num_bins,), pass-2 counts; None before :meth:`start_histogram`.
        count (int): Elements histogrammed in pass 2.
    Raises:
        UsageError: ``num_bins`` < 256.
    """

    def __init__(self, num_bins: int = NUM_BINS):
        if int(num_bins) < 2 * START_BIN:
            raise UsageError(f"num_bins must be >= {2 * START_BIN}, got {num_bins}")
        self.num_bins = int(num_bins)
        self.max = 0.0
        self.counts: np.ndarray | None = None
        self.count = 0
        self._inv_width = 0.0

    # ------------------------------------------------------------------ pass 1
    def observe_max(self, x: np.ndarray) -> None:
        """Pass 1: update :attr:`max` with ``max |x|`` of ``x`` (float array, any shape).

        Raises:
            UsageError: ``x`` holds NaN or Inf (the model produced non-finite activations).
        """
        if x.size == 0:
            return
        m = float(np.max(np.abs(x)))
        if not np.isfinite(m):
            raise UsageError("non-finite activation (NaN/Inf) during calibration; check the model and audio")
        self.max = max(self.max, m)

    # ------------------------------------------------------------------ pass 2
    def start_histogram(self) -> None:
        """Begin pass 2: zero the counts; bins are ``num_bins`` equal bins over ``[0, max]``."""
        self.counts = np.zeros(self.num_bins, np.int64)
        self.count = 0
        self._inv_width = self.num_bins / self.max if self.max > 0 else 0.0

    def add(self, x: np.ndarray) -> None:
        """Pass 2: add |x| of ``x`` (float array, any shape) to the histogram.

        Values above :attr:`max` (impossible when pass 1 saw the same data) land in the last bin.
        """
        if self.counts is None:
            self.start_histogram()
        if x.size == 0:
            return
        idx = np.abs(x.reshape(-1), dtype=np.float32)
        idx *= np.float32(self._inv_width)
        idx = idx.astype(np.intp)
        np.minimum(idx, self.num_bins - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.num_bins)
        self.count += x.size

    @property
    def edges(self) -> np.ndarray:
        """np.ndarray: float64 (num_bins + 1,), bin edges over ``[0, max]``."""
        return np.linspace(0.0, self.max, self.num_bins + 1)

    def amax_entropy(self, num_bits: int = 8, start_bin: int = START_BIN, stride: int = 1) -> float:
        """Return the KL-optimal amax (float) of the collected histogram (:func:`amax_entropy`).

        Returns ``max`` for an all-zero tensor (amax 0 is replaced by 1.0 by the Q/DQ pass).
        Raises:
            UsageError: pass 2 did not run.
        """
        if self.counts is None:
            raise UsageError("amax_entropy() before the histogram pass")
        if self.max == 0.0 or self.count == 0:
            return self.max
        return amax_entropy(self.counts, self.edges, num_bits=num_bits, start_bin=start_bin, stride=stride)


def amax_entropy(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
                 start_bin: int = START_BIN, stride: int = 1) -> float:
    """Return the amax minimising KL(P || Q) between a |x| histogram and its int8-quantized version.

    Args:
        counts (np.ndarray): int/float (B,), histogram of |x|, B >= ``start_bin``.
        edges (np.ndarray): float (B + 1,), bin edges (edges[0] = 0).
        num_bits (int): Quantized bits; 8 gives 128 magnitude levels (signed). Defaults to 8.
        unsigned (bool): Unsigned quantization (256 levels at 8 bits). Defaults to False.
        start_bin (int): Smallest candidate threshold, in bins. Defaults to 128.
        stride (int): Candidate step, in bins. Defaults to 1.
    Returns:
        float: ``edges[i*]``, the upper edge of the last bin kept by the best threshold ``i*``; on ties
        the largest ``i`` wins (as in pytorch-quantization).
    Raises:
        UsageError: shapes disagree or fewer bins than ``start_bin``.
    Source: Migacz, GTC 2017, "8-bit Inference with TensorRT"; pytorch-quantization
        ``calib/histogram.py::_compute_amax_entropy`` (same candidate set, bin-0 rule, P/Q construction);
        this version vectorises the per-candidate loop with ``np.bincount``.
    """
    bins = np.asarray(counts, np.float64).copy()
    edges = np.asarray(edges, np.float64)
    n = bins.size
    if edges.size != n + 1:
        raise UsageError(f"amax_entropy: {n} counts need {n + 1} edges, got {edges.size}")
    if n < start_bin:
        raise UsageError(f"amax_entropy: {n} bins < start_bin {start_bin}")
    nlevels = 1 << (num_bits - 1 + int(unsigned))
    if n > 1:
        bins[0] = bins[1]  # zeros dominate bin 0 (padding, zero state); TensorRT ignores them this way
    total = bins.sum()
    if total <= 0:
        return float(edges[-1])
    tail = np.concatenate([np.cumsum(bins[::-1])[::-1], [0.0]])  # tail[i] = sum(bins[i:])
    best_i, best_kl = n, np.inf
    ar = np.arange(n)
    for i in range(start_bin, n + 1, stride):
        p = bins[:i].copy()
        p[-1] += tail[i]
        # digitize 0..i-1 into nlevels equal groups: np.digitize(range(i), linspace(0, i, nlevels + 1)) - 1
        space = np.linspace(0, i, nlevels + 1)
        group = np.searchsorted(space, ar[:i], side="right") - 1
        nz = bins[:i] != 0
        g_sum = np.bincount(group[nz], weights=bins[:i][nz], minlength=nlevels)
        g_cnt = np.bincount(group[nz], minlength=nlevels)
        q = np.where(nz, g_sum[group] / np.maximum(g_cnt[group], 1), 0.0)
        p /= p.sum()
        qs = q.sum()
        if qs <= 0:
            continue
        q /= qs
        m = p > 0
        if np.any(q[m] == 0):
            kl = np.inf
        else:
            kl = float(np.sum(p[m] * np.log(p[m] / q[m])))
        if kl <= best_kl:  # '<=': the last minimum wins
            best_kl, best_i = kl, i
    return float(edges[best_i])
