"""Offline speech and noise data: real speech and noise from Debian packages, mixed into noisy/clean pairs.

Used by training (:mod:`cosyedge.train`) and by the default INT8 calibration set
(:mod:`cosyedge.precision.calibset`), so it ships in the base install (numpy; PyAV/praat-parselmouth only
to build some corpora). ``TrainingData(seed=0).batch(16, 32000, rng) -> (noisy, clean)``; see
:mod:`cosyedge.data.training_data`. Layout: :mod:`~cosyedge.data.corpus` (the ``Corpus`` and its cache),
:mod:`~cosyedge.data.sources` (package fetchers, decoders, corpus builders), :mod:`~cosyedge.data.registry`
(name -> builder, ``load_corpus``), :mod:`~cosyedge.data.voice` (voice conversion),
:mod:`~cosyedge.data.noise` (the noise bank), :mod:`~cosyedge.data.augment` (augmentation DSP),
:mod:`~cosyedge.data.versions` (data-version constants), :mod:`~cosyedge.data.pairs` (the test pairs),
:mod:`~cosyedge.data.calib` (calibration clips). Signal metrics: :mod:`cosyedge.signal`.
"""

from cosyedge.data.pairs import test_pairs
from cosyedge.data.training_data import TrainingData

__all__ = ["TrainingData", "test_pairs"]
