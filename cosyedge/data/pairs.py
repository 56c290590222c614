"""The fixed test pairs (pocketsphinx LibriVox speech x held-out real noises); needs no training data.

Moved from ``cosyedge/datasets/mix.py``.
"""

from __future__ import annotations

import hashlib

import numpy as np

from cosyedge.data import noise as noise_mod
from cosyedge.data.registry import load_corpus
from cosyedge.errors import ArtifactError
from cosyedge.signal import mix_at_snr


def _stable_int(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest()[:12], 16)



def test_pairs(snr_db_list=(5,), include_cards: bool = False, cache_dir=None,
               noises: tuple[str, ...] | None = None) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Module-level twin of :meth:`TrainingData.test_pairs` (needs no training data).

    ``noises`` selects held-out noises by name (default: all of
    :func:`cosyedge.data.noise.heldout_noises`).
    """
    bank = noise_mod.heldout_noises(cache_dir)
    names = tuple(bank) if noises is None else noises
    out = []
    for cname in ("librivox",) + (("cards",) if include_cards else ()):
        c = load_corpus(cname, cache_dir)
        for nname in names:
            nz = bank[nname][0]
            for i in range(len(c)):
                clean = c.utterance(i)
                if nz.size <= clean.size:
                    raise ArtifactError(f"held-out noise {nname} ({nz.size} samples) shorter than {c.names[i]}")
                off = _stable_int(c.names[i]) % (nz.size - clean.size)
                seg = nz[off : off + clean.size]
                for snr in snr_db_list:
                    noisy = mix_at_snr(clean, seg, snr)
                    g = min(1.0, 0.95 / max(float(np.abs(noisy).max()), 1e-9))
                    out.append((f"{c.names[i]}+{nname}@{snr:g}dB", (noisy * g).astype(np.float32),
                                (clean * g).astype(np.float32)))
    return out
