"""Offline training data for the speech enhancer: real speech and noise from Debian packages.

``TrainingData(seed=0).batch(16, 32000, rng) -> (noisy, clean)``; see :mod:`cosyedge.datasets.mix`.
Sources and caching: :mod:`cosyedge.datasets.sources`; noises: :mod:`cosyedge.datasets.noise`.
"""

from cosyedge.datasets.mix import TrainingData, active_power, mix_at_snr, si_snr, test_pairs

__all__ = ["TrainingData", "active_power", "mix_at_snr", "si_snr", "test_pairs"]
