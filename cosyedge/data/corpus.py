"""The :class:`Corpus` (utterances concatenated in one array) and its cache files.

Moved from ``cosyedge/datasets/sources.py`` so that :mod:`cosyedge.data.voice` and
:mod:`cosyedge.data.sources` both import it without importing each other.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosyedge.errors import ArtifactError

SAMPLE_RATE_HZ = 16000
CACHE_VERSION = 1


# ------------------------------------------------------------------------------------------ corpora
@dataclass
class Corpus:
    """A cached corpus: utterances concatenated into one array.

    Attributes:
        name (str): Corpus name (key of :data:`cosyedge.data.registry.CORPORA`).
        audio (np.ndarray): float32, shape (total_samples,), 16 kHz mono (a read-only memory map when loaded
            from the cache).
        offsets (np.ndarray): int64, shape (n_utts + 1,), sample offsets into ``audio``.
        names (list[str]): relative file name (or synthesis id) per utterance.
        splits (list[str]): ``"train"``, ``"val"`` or ``"test"`` per utterance.
        speakers (list[str]): speaker / voice id per utterance.
        source (str): Debian package(s) or tool the audio came from.
    """

    name: str
    audio: np.ndarray
    offsets: np.ndarray
    names: list[str]
    splits: list[str]
    speakers: list[str]
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def utterance(self, i: int) -> np.ndarray:
        """Return utterance ``i``: float32, shape (samples,)."""
        return self.audio[self.offsets[i] : self.offsets[i + 1]]

    def indices(self, split: str) -> list[int]:
        """Return the utterance indices of ``split`` (``"train"``, ``"val"`` or ``"test"``)."""
        return [i for i, s in enumerate(self.splits) if s == split]

    def subset(self, name: str, keep: list[int], why: str) -> "Corpus":
        """Return a corpus called ``name`` holding the utterances ``keep`` (indices, in that order), with their
        names, splits and speakers; ``source`` is kept.

        Raises:
            ArtifactError: ``keep`` is empty (``"corpus '<name>': no file passes the <why>"``).
        """
        if not keep:
            raise ArtifactError(f"corpus '{name}': no file passes the {why}")
        audios = [np.asarray(self.utterance(i), np.float32) for i in keep]
        offsets = np.concatenate([[0], np.cumsum([a.size for a in audios])]).astype(np.int64)
        return Corpus(name, np.concatenate(audios), offsets, [self.names[i] for i in keep],
                      [self.splits[i] for i in keep], [self.speakers[i] for i in keep], self.source)

    def concat(self, split: str) -> np.ndarray:
        """Return all utterances of ``split`` concatenated: float32, shape (samples,)."""
        idx = self.indices(split)
        if not idx:
            return np.zeros(0, np.float32)
        return np.concatenate([self.utterance(i) for i in idx])

    def seconds(self, split: str | None = None) -> float:
        """Return the duration in seconds of ``split`` (all utterances if None)."""
        d = np.diff(self.offsets)
        if split is not None:
            d = d[[s == split for s in self.splits]]
        return float(d.sum()) / SAMPLE_RATE_HZ


def heldout_split(rel_name: str, percent: int = 10) -> str:
    """Return ``"val"`` for about ``percent`` % of names (by SHA-1 of ``rel_name``), else ``"train"``.

    Deterministic and independent of the file list, so adding files never moves others between splits.
    """
    h = int(hashlib.sha1(rel_name.encode()).hexdigest()[:8], 16)
    return "val" if h % 100 < percent else "train"


def _save_corpus(path_npy: Path, c: Corpus) -> None:
    path_npy.parent.mkdir(parents=True, exist_ok=True)
    tmp = path_npy.with_suffix(".tmp.npy")
    np.save(tmp, c.audio.astype(np.float32))
    tmp.replace(path_npy)
    meta = {
        "version": CACHE_VERSION,
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "names": c.names,
        "offsets": [int(o) for o in c.offsets],
        "splits": c.splits,
        "speakers": c.speakers,
        "source": c.source,
        "meta": c.meta,
    }
    path_npy.with_suffix(".json").write_text(json.dumps(meta))


def _load_corpus(path_npy: Path, name: str) -> Corpus | None:
    pj = path_npy.with_suffix(".json")
    if not (path_npy.exists() and pj.exists()):
        return None
    try:
        meta = json.loads(pj.read_text())
        if meta.get("version") != CACHE_VERSION:
            return None
        audio = np.load(path_npy, mmap_mode="r")  # read-only memory map: utterances are read on demand
    except Exception as e:
        raise ArtifactError(f"corrupt corpus cache {path_npy} ({e}); delete it and retry") from e
    offsets = np.asarray(meta["offsets"], np.int64)
    if audio.dtype != np.float32 or audio.ndim != 1 or offsets[-1] != audio.size:
        raise ArtifactError(f"corrupt corpus cache {path_npy} (size mismatch); delete it and retry")
    return Corpus(name, audio, offsets, meta["names"], meta["splits"], meta["speakers"], meta.get("source", ""),
                  meta.get("meta", {}))

