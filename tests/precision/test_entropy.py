"""KL (entropy) amax and the two-pass |x| histogram."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.precision.entropy import AbsHistogram, amax_entropy


def _reference_amax(bins, edges, start_bin=128, nbins=128):
    """Loop-for-loop transcription of pytorch-quantization's ``_compute_amax_entropy`` (numpy, no scipy)."""
    bins = np.array(bins, np.float64)
    bins[0] = bins[1]
    divergences = []
    for i in range(start_bin, len(bins) + 1):
        new_density_counts = np.zeros(nbins)
        space = np.linspace(0, i, num=nbins + 1)
        digitized = np.digitize(range(i), space) - 1
        digitized[bins[:i] == 0] = -1
        for idx, d in enumerate(digitized):
            if d != -1:
                new_density_counts[d] += bins[idx]
        for key, val in Counter(digitized).items():
            if key != -1:
                new_density_counts[key] /= val
        new_density = np.array([new_density_counts[d] if d != -1 else 0.0 for d in digitized])
        ref = bins[:i].copy()
        ref[-1] += bins[i:].sum()
        p, q = ref / ref.sum(), new_density / new_density.sum()
        m = p > 0
        divergences.append(np.inf if np.any(q[m] == 0) else float(np.sum(p[m] * np.log(p[m] / q[m]))))
    divergences = np.array(divergences)
    last_argmin = len(divergences) - 1 - np.argmin(divergences[::-1])
    return edges[last_argmin + start_bin]


def _hist(x, num_bins=2048, chunks=1):
    h = AbsHistogram(num_bins)
    for part in np.array_split(x, chunks):
        h.observe_max(part)
    h.start_histogram()
    for part in np.array_split(x, chunks):
        h.add(part)
    return h


def test_heavy_tailed_amax_is_well_below_max():
    x = np.random.default_rng(0).standard_t(df=2, size=400_000).astype(np.float32)
    h = _hist(x)
    a = h.amax_entropy()
    assert h.max > 100  # Student-t(2) has huge outliers
    assert a < 0.2 * h.max
    # the chosen range still covers the bulk: more than 99 % of |x| below amax
    assert np.mean(np.abs(x) <= a) > 0.99


def test_uniform_amax_is_about_max():
    x = np.random.default_rng(1).uniform(-3.0, 3.0, size=400_000).astype(np.float32)
    h = _hist(x)
    assert h.amax_entropy() == pytest.approx(h.max, rel=0.03)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_pytorch_quantization_reference(seed):
    rng = np.random.default_rng(seed)
    x = np.abs(rng.laplace(size=50_000) * rng.choice([1.0, 6.0], p=[0.98, 0.02], size=50_000))
    counts, edges = np.histogram(x, bins=400, range=(0, x.max()))
    ours = amax_entropy(counts, edges)
    assert ours == pytest.approx(_reference_amax(counts, edges), rel=0, abs=0)
    assert ours < x.max()


def test_histogram_independent_of_chunking():
    x = np.random.default_rng(3).normal(size=100_003).astype(np.float32)
    a, b = _hist(x, chunks=1), _hist(x, chunks=37)
    assert a.max == b.max
    np.testing.assert_array_equal(a.counts, b.counts)
    assert a.counts.sum() == x.size


def test_bad_inputs():
    with pytest.raises(UsageError, match="num_bins"):
        AbsHistogram(100)
    h = AbsHistogram()
    with pytest.raises(UsageError, match="non-finite"):
        h.observe_max(np.array([1.0, np.nan], np.float32))
    with pytest.raises(UsageError, match="before the histogram pass"):
        h.amax_entropy()
    with pytest.raises(UsageError, match="edges"):
        amax_entropy(np.ones(300), np.linspace(0, 1, 300))
