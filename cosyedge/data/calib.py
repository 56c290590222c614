"""Noisy-speech clips for the default INT8 calibration set, drawn from the training mixtures.

:func:`training_mix_clips` is the iterator :func:`cosyedge.precision.calibset.make_calibration_set` writes
when it generates a set; the calibration code itself only consumes ``(noisy, clean)`` clips. Moved from
``cosyedge/precision/calibset.py`` (``_generated``) so that calibration does not build training data.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cosyedge.data.corpus import SAMPLE_RATE_HZ


class TrainingMixClips:
    """``count`` seeded utterances of noisy speech mixed by a :class:`~cosyedge.data.training_data.TrainingData`.

    Iterating yields ``(noisy, clean)``: float32, shape (n_samples,), 16 kHz, n_samples uniform in
    ``duration_range_s`` (seconds). The draws depend only on ``seed`` (``SeedSequence(seed, spawn_key=(0xCA11B,))``),
    so the same seed and data give byte-identical clips. Every ``release_every`` clips the data's
    ``release_pages()`` is called (when it has one), so resident memory stays at the last few dozen draws.

    Attributes:
        count (int): Clips to yield.
        seed (int): Seed of the draws.
        training_data: Object with ``batch(n_rows, n_samples, rng) -> (noisy, clean)``; defaults to
            ``TrainingData(seed=0)`` (the training speech and noise bank, cached; the first run downloads).
        source (dict): The calibration manifest's ``source`` entry (read it after iterating: it names the
            corpora missing on this machine).
    Raises:
        ArtifactError, DependencyError: the default training data cannot be prepared (from ``TrainingData``).
    """

    def __init__(self, count: int, seed: int = 0, training_data=None, *, duration_range_s=(1.0, 4.0),
                 release_every: int = 32) -> None:
        if training_data is None:
            from cosyedge.data.training_data import TrainingData

            training_data = TrainingData(seed=0)  # the training bank (cached); ``seed`` drives the draws
        self.count = int(count)
        self.seed = int(seed)
        self.training_data = training_data
        self.duration_range_s = tuple(duration_range_s)
        self.release_every = int(release_every)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0xCA11B,)))
        lo, hi = self.duration_range_s
        release = getattr(self.training_data, "release_pages", None)
        for i in range(self.count):
            if release is not None and i % self.release_every == 0:
                release()  # resident memory stays at the pages of the last few dozen draws
            n = int(round(rng.uniform(lo, hi) * SAMPLE_RATE_HZ))
            noisy, clean = self.training_data.batch(1, n, rng)
            yield noisy[0], clean[0]

    @property
    def source(self) -> dict:
        """dict: the manifest's ``source`` entry (kind ``training-mix``, seed, ranges, missing corpora)."""
        # sources missing on this machine (e.g. no espeak-ng): another machine makes another set
        return {"kind": "training-mix", "seed": self.seed, "duration_range_s": list(self.duration_range_s),
                "snr_db_range": [-5.0, 20.0], "note": "TrainingData(seed=0) training speech x "
                "training noise bank; test speech and held-out noises excluded",
                "missing_corpora": dict(getattr(self.training_data, "missing", {}))}
