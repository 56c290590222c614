"""Noisy/clean training mixtures (:class:`TrainingData`) and the fixed validation set.

Quick start::

    from cosyedge.data import TrainingData
    data = TrainingData(seed=0)                      # first call fetches + decodes + caches, then fast
    rng = np.random.default_rng(0)
    noisy, clean = data.batch(16, 32000, rng)        # float32 (16, 32000) each, 16 kHz
    pairs = data.test_pairs((5,))                    # [(name, noisy, clean)], real held-out noise
    val = data.validation_pairs()                    # [(name, noisy, clean)], held-out prompts

SNR convention (everywhere in this module): ``SNR = 10 log10(P_speech / P_noise)`` where ``P_noise`` is
the mean power of the noise over the whole segment and ``P_speech`` is the mean power of the speech over
its ACTIVE 20 ms frames (frames within 40 dB of the loudest frame and above -100 dBFS), so pauses do not
lower the speech level (as in ITU-T P.56 active speech level, simplified). See :func:`cosyedge.signal.active_power`.

Moved from ``cosyedge/datasets/mix.py``, which was split by job: the metrics went to
:mod:`cosyedge.signal`, the augmentation DSP to :mod:`~cosyedge.data.augment`, the data-version constants to
:mod:`~cosyedge.data.versions`, the test pairs to :mod:`~cosyedge.data.pairs`. About 540 lines: what is left is
the one class, whose methods (corpus loading, the cached speech and noise bank, the draws, validation) share
its state; splitting it further would mean rewriting it, which this move does not do.
"""


from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from cosyedge.data import noise as noise_mod
from cosyedge.data.augment import band_limit, low_band_boost, random_eq, room_reverb, speed_perturb
from cosyedge.data.corpus import SAMPLE_RATE_HZ, Corpus
from cosyedge.data.registry import load_corpus
from cosyedge.data.sources import FESTIVAL_VOICES, data_dir
from cosyedge.data.versions import (BANK_VERSION, DATA_VERSIONS, EXTRA_SPEECH_CORPORA_V2, EXTRA_SPEECH_CORPORA_V3,
                                    MALE_SHARE_V3, NARROWBAND_CORPORA, NOISE_SPEED_RANGE, NOISE_WEIGHTS,
                                    NOISE_WEIGHTS_V2, P_NOISE_EQ, P_NOISE_SPEED, P_SPEECH_EQ, READ_PHRASE_CORPORA,
                                    SPEECH_TRAIN_CORPORA, SYNTHETIC_CORPORA)
from cosyedge.data.pairs import _stable_int, test_pairs
from cosyedge.errors import ArtifactError, DependencyError, UsageError, first_line
from cosyedge.log import LOG
from cosyedge.signal import mix_at_snr, scale_noise

# ---------------------------------------------------------------------------------------- dataset
SPEECH_CACHE_VERSION = 1
"""int: version of the derived training-speech cache (``derived/speech-<key>.npy``)."""


def _train_samples(c: Corpus) -> int:
    """Samples in corpus ``c``'s train split, from its offsets (no audio read)."""
    d = np.diff(c.offsets)
    return int(d[np.array([s == "train" for s in c.splits], bool)].sum()) if len(c.splits) else 0


def _layout_hash(c: Corpus) -> str:
    """SHA-1 of corpus ``c``'s utterance offsets and splits (a rebuilt corpus of other files gets another)."""
    return hashlib.sha1(json.dumps([[int(o) for o in c.offsets], list(c.splits)]).encode()).hexdigest()[:12]


class TrainingData:
    """All training, validation and test audio, prepared once and cached as .npy.

    On construction the speech corpora (:data:`SPEECH_TRAIN_CORPORA`, train split only) are loaded or
    built, and the noise bank (:func:`cosyedge.data.noise.build_noise_bank`) is loaded or built for
    ``seed``. The first run fetches Debian packages (about 1 min on a fast link); later runs load .npy.

    Args:
        seed (int): Seed of the noise bank (and validation noise). Defaults to 0.
        cache_dir (str | PathLike | None): See :func:`cosyedge.data.sources.data_dir`.
        corpora (tuple[str, ...] | None): Speech corpora for training. Defaults to
            :data:`SPEECH_TRAIN_CORPORA`; must not contain test corpora (``librivox``, ``cards``).
        synthetic_share (float): Share of speech draws from synthetic voices (espeak-ng, flite,
            festival). Defaults to 0.3.
        narrowband_share (float): Share of draws from the 8 kHz prompt packs. Defaults to 0.12.
        male_share (float): Data version 3: share of draws from the male-converted prompts
            (:data:`EXTRA_SPEECH_CORPORA_V3`). Defaults to :data:`MALE_SHARE_V3`.
        noise_minutes_per_kind (float): Length of each synthetic noise category, minutes.
        data_version (int): 1 (default), 2 (more real voices and real noises), 3 (plus male-converted
            prompts) or 4 (version 3 with batch augmentation); see :data:`DATA_VERSIONS`. Ignored for
            speech when ``corpora`` is given.
        speech_low_boost (float): probability in [0, 1] that a training speech segment gets
            :func:`low_band_boost` (any data version; validation and test sets are unaffected). Defaults to 0.
        speech_low_boost_db (float): largest f0-band boost in dB (``max_db`` of :func:`low_band_boost`),
            in [0, 30]. Defaults to 10.
        read_phrase_share (float): share of speech draws from :data:`READ_PHRASE_CORPORA` (real read phrases,
            mostly male voices), in [0, 1); 0 (default) leaves them out.
        read_phrase_corpus (str): which of :data:`READ_PHRASE_CORPORA` ``read_phrase_share`` adds (one name, or
            several separated by commas)
            (default ``"tuxpaint"``). The shares of the synthetic, narrowband,
            male-converted and read-phrase groups must add up to at most 1.
        speech_reverb (float): probability in [0, 1] that a training speech segment gets
            :func:`room_reverb` (after the f0-band boost; the clean target is the reverberant speech).
            Defaults to 0.
        mixture_lowpass (float): probability in [0, 1] that a whole training mixture, noisy and clean alike,
            is band-limited to 4 kHz (:func:`band_limit`: an 8 kHz recording resampled to 16 kHz). Defaults to 0.
        require_all (bool): every speech corpus and real-noise corpus of the data version must load, and the
            festival corpus must hold every voice of :data:`~cosyedge.data.sources.FESTIVAL_VOICES`; without
            it (the default) a missing one is skipped with a warning and listed in :attr:`missing`, so the data
            differs from a machine that has it (a training run is then not reproducible elsewhere).
    Attributes:
        speech (np.ndarray): float32, shape (samples,), all training speech concatenated (a read-only memory map
            of a derived cache file: a calibration set or a training run keeps only what its draws touch).
        speech_ranges (dict[str, tuple[int, int]]): sample range of each corpus in ``speech``.
        bank (np.ndarray): float32, shape (samples,), training noise bank (a read-only memory map).
        bank_ranges (dict[str, tuple[int, int]]): sample range of each noise category in ``bank``.
        missing (dict[str, str]): corpora of the data version left out (or built incomplete), with the reason
            (one line each); empty when every source was there.
    Raises:
        UsageError: a test corpus was requested for training; ``speech_low_boost`` outside [0, 1];
            ``speech_low_boost_db`` outside [0, 30]; ``speech_reverb`` or ``mixture_lowpass`` outside [0, 1];
            ``read_phrase_share`` outside [0, 1), an unknown ``read_phrase_corpus``, ``male_share`` outside [0, 1],
            or the group shares adding up to more than 1.
        ArtifactError: no training speech could be loaded; ``asterisk-en`` or a read-speech corpus asked for
            with ``read_phrase_share`` > 0 cannot be loaded (other corpora are skipped with a warning); with
            ``require_all``, any corpus of the data version cannot be loaded or festival lacks a voice.
        DependencyError: a tool needed to build one of those (``apt-get``, ``dpkg``, ``espeak-ng``, ...) is missing.
    """

    def __init__(self, seed: int = 0, cache_dir: str | os.PathLike | None = None, corpora=None,
                 synthetic_share: float = 0.3, narrowband_share: float = 0.12,
                 noise_minutes_per_kind: float = 2.0, data_version: int = 1, male_share: float = MALE_SHARE_V3,
                 speech_low_boost: float = 0.0, speech_low_boost_db: float = 10.0, speech_reverb: float = 0.0,
                 read_phrase_share: float = 0.0, read_phrase_corpus: str = "tuxpaint", mixture_lowpass: float = 0.0,
                 require_all: bool = False):
        if isinstance(data_version, bool) or not isinstance(data_version, (int, np.integer)) \
                or data_version not in DATA_VERSIONS:
            raise UsageError(f"unknown training data version {data_version!r} (use one of the integers {DATA_VERSIONS})")
        if not 0.0 <= speech_low_boost <= 1.0:
            raise UsageError(f"speech_low_boost must be a probability in [0, 1], got {speech_low_boost}")
        if not 0.0 <= speech_low_boost_db <= 30.0:
            raise UsageError(f"speech_low_boost_db must be in [0, 30] dB, got {speech_low_boost_db}")
        if not 0.0 <= speech_reverb <= 1.0:
            raise UsageError(f"speech_reverb must be a probability in [0, 1], got {speech_reverb}")
        if not 0.0 <= mixture_lowpass <= 1.0:
            raise UsageError(f"mixture_lowpass must be a probability in [0, 1], got {mixture_lowpass}")
        chosen = set(str(read_phrase_corpus).split(","))
        if not chosen <= set(READ_PHRASE_CORPORA):
            raise UsageError(f"read_phrase_corpus must be one or more (comma-separated) of {READ_PHRASE_CORPORA}, "
                             f"got {read_phrase_corpus!r}")
        if not 0.0 <= read_phrase_share < 1.0:
            raise UsageError(f"read_phrase_share must be in [0, 1), got {read_phrase_share}")
        if not 0.0 <= male_share <= 1.0:
            raise UsageError(f"male_share must be in [0, 1], got {male_share}")
        total = synthetic_share + narrowband_share + (male_share if data_version >= 3 else 0.0) + read_phrase_share
        if total > 1.0 + 1e-9:
            raise UsageError(f"speech shares add up to {total:.2f} > 1 (synthetic {synthetic_share}, narrowband "
                             f"{narrowband_share}, male-converted {male_share if data_version >= 3 else 0.0}, "
                             f"read phrases {read_phrase_share}): lower one")
        self.seed = seed
        self.cache_dir = cache_dir
        self.data_version = data_version
        self.speech_low_boost = speech_low_boost
        self.speech_low_boost_db = speech_low_boost_db
        self.speech_reverb = speech_reverb
        self.mixture_lowpass = mixture_lowpass
        if corpora is None:  # v2: the extra real voices go after the real prompt packs, before the synthetic ones
            corpora = SPEECH_TRAIN_CORPORA
            if data_version >= 2:
                k = SPEECH_TRAIN_CORPORA.index("flite")
                extra = EXTRA_SPEECH_CORPORA_V2 + (EXTRA_SPEECH_CORPORA_V3 if data_version >= 3 else ())
                corpora = SPEECH_TRAIN_CORPORA[:k] + extra + SPEECH_TRAIN_CORPORA[k:]
        # the read phrases go last (see _val_speech_end), added when a share is asked for
        asked = chosen if read_phrase_share else set()  # read-speech corpora asked for by name
        read = tuple(c for c in READ_PHRASE_CORPORA if c in asked or c in corpora)
        corpora = tuple(c for c in corpora if c not in READ_PHRASE_CORPORA) + read
        bad = {"librivox", "cards"} & set(corpora)
        if bad:
            raise UsageError(f"test corpora {sorted(bad)} must never be used for training")
        self.missing: dict[str, str] = {}
        with LOG.stage("TrainingData prepare"):
            self.corpora: dict[str, Corpus] = {}
            self.speech_ranges, pos = {}, 0
            cached = data_dir(cache_dir) / "corpora"
            to_build = [n for n in corpora if not (cached / f"{n}.npy").exists()]
            for name in (LOG.progress(corpora, "training speech corpora", "corpus") if to_build else corpora):
                try:
                    c = load_corpus(name, cache_dir)
                except (ArtifactError, DependencyError, UsageError) as e:
                    if name == "asterisk-en" or name in asked:
                        raise
                    self._missing(name, f"speech corpus {name} unavailable: {first_line(e, with_type=False)}",
                                  require_all, e)
                    continue
                if name == "festival":
                    voices = set(c.speakers)
                    lacking = [pkg for v, pkg in FESTIVAL_VOICES.items() if f"festival:{v}" not in voices]
                    if lacking:
                        self._missing(name, f"speech corpus festival was built without the voices of "
                                            f"{' '.join(lacking)} (apt-get install them, then delete "
                                            f"{data_dir(cache_dir) / 'corpora' / 'festival.npy'})", require_all)
                self.corpora[name] = c
                size = _train_samples(c)
                if size < 4 * SAMPLE_RATE_HZ:
                    continue
                self.speech_ranges[name] = (pos, pos + size)
                pos += size
            self._say_missing_synthesizers()
            if not self.speech_ranges:
                raise ArtifactError("no training speech available (check apt-get access)")
            self.speech = self._load_speech()
            # the noise bank and the validation babble draw from the speech of the data version only (the read
            # phrases, appended last, are left out), so adding them keeps the data version's noise and
            # validation set for the same seed
            self._val_speech_end = min([a for n, (a, _) in self.speech_ranges.items() if n in READ_PHRASE_CORPORA]
                                       or [self.speech.size])
            shares = {tuple(SYNTHETIC_CORPORA): synthetic_share, tuple(NARROWBAND_CORPORA): narrowband_share}
            if data_version >= 3:
                shares[EXTRA_SPEECH_CORPORA_V3] = male_share
            if read_phrase_share:
                shares[READ_PHRASE_CORPORA] = read_phrase_share
            self._speech_w = self._corpus_weights(shares)
            self.bank, self.bank_ranges = self._load_bank(noise_minutes_per_kind, self._real_noise_corpora(require_all))
            weights = NOISE_WEIGHTS_V2 if data_version >= 2 else NOISE_WEIGHTS
            w = np.array([weights.get(k, 0.05) for k in self.bank_ranges])
            self._noise_kinds = list(self.bank_ranges)
            self._noise_w = w / w.sum()
        LOG.info("training speech: %s", self.summary())

    # ---------------------------------------------------------------------------- preparation
    def _missing(self, name: str, reason: str, require_all: bool, err: Exception | None = None) -> None:
        """Record corpus ``name`` as left out (or incomplete) for ``reason``; with ``require_all`` raise instead
        (the original error's type, so a missing tool stays a DependencyError)."""
        if require_all:
            kind = type(err) if isinstance(err, (ArtifactError, DependencyError)) else ArtifactError
            raise kind(f"{reason}; every source of the data version is needed for a reproducible run")
        self.missing[name] = reason
        if name in SYNTHETIC_CORPORA and isinstance(err, DependencyError):
            return  # a synthesizer not installed: said once for all of them (_say_missing_synthesizers)
        LOG.warning("%s", reason)

    def _say_missing_synthesizers(self) -> None:
        """One info line for the synthetic corpora left out because their speech synthesizer (espeak-ng, flite,
        festival) is not installed: optional sources (``synthetic_share`` of the speech draws goes to the corpora
        there are), not three warnings."""
        gone = [n for n in SYNTHETIC_CORPORA if n in self.missing and n not in self.corpora]
        if not gone:
            return
        LOG.info("training speech: the synthetic corpora %s are left out, their speech synthesizers not being "
                 "installed (%s): the mixtures draw from the recorded corpora only (enough for an INT8 calibration "
                 "set; its manifest lists them as missing_corpora); to include synthetic speech install them",
                 ", ".join(gone), "; ".join(self.missing[n].split("unavailable: ", 1)[-1] for n in gone))

    def _version_real_noise(self) -> dict:
        """``{category: corpora}`` of the data version's real training noises (all of them)."""
        return noise_mod.REAL_NOISE_CORPORA_V2 if self.data_version >= 2 else noise_mod.REAL_NOISE_CORPORA

    def _real_noise_corpora(self, require_all: bool) -> dict:
        """``{category: corpora}`` of the data version's real noises that load; the others are recorded with
        :meth:`_missing` (or raise with ``require_all``)."""
        version = self._version_real_noise()
        out = {kind: [] for kind in version}
        todo = [(kind, name) for kind, names in version.items() for name in names]
        cached = data_dir(self.cache_dir) / "corpora"
        if any(not (cached / f"{name}.npy").exists() for _, name in todo):
            todo = LOG.progress(todo, "training noise corpora", "corpus")
        for kind, name in todo:
            try:
                load_corpus(name, self.cache_dir)
                out[kind].append(name)
            except (ArtifactError, DependencyError) as e:
                self._missing(name, f"real noise corpus {name} unavailable: {first_line(e, with_type=False)}",
                              require_all, e)
        return {kind: tuple(names) for kind, names in out.items()}

    def _corpus_weights(self, shares: dict[tuple[str, ...], float]) -> np.ndarray:
        """Draw probability per corpus: proportional to duration inside a group; each group in ``shares``
        gets its share (if present), the remaining corpora share the rest."""
        names = list(self.speech_ranges)
        dur = np.array([b - a for a, b in self.speech_ranges.values()], np.float64)
        w = np.zeros(len(names))
        rest = np.ones(len(names), bool)
        left = 1.0
        for group, share in shares.items():
            m = np.array([n in group for n in names])
            if m.any():
                w[m] = dur[m] / dur[m].sum() * share
                rest &= ~m
                left -= share
        if rest.any():
            w[rest] = dur[rest] / dur[rest].sum() * max(left, 0.0)
        return w / w.sum()

    def _load_bank(self, minutes: float, real: dict):
        # the bank (its babble) is built from the data version's speech only: adding the read phrases
        # (READ_PHRASE_CORPORA, appended last) keeps the noise bank, like the validation set
        key = [BANK_VERSION, self.seed, minutes,
               {k: b - a for k, (a, b) in self.speech_ranges.items() if k not in READ_PHRASE_CORPORA}]
        if self.data_version >= 2:  # version 4 augments batches of the version-3 bank
            key.append({"data_version": min(self.data_version, 3)})
        # a bank without some of the version's real noises is another bank
        if real != {k: tuple(v) for k, v in self._version_real_noise().items()}:
            key.append({"real_noise": real})
        key = json.dumps(key)
        tag = hashlib.sha1(key.encode()).hexdigest()[:10]
        path = data_dir(self.cache_dir) / "derived" / f"noisebank-{tag}.npy"
        pj = path.with_suffix(".json")
        if path.exists() and pj.exists():
            try:
                bank = np.load(path, mmap_mode="r")  # read-only memory map: draws read what they touch
                ranges = {k: tuple(v) for k, v in json.loads(pj.read_text()).items()}
                if max(b for _, b in ranges.values()) == bank.size:
                    return bank, ranges
            except Exception as e:  # noqa: BLE001
                LOG.warning("noise bank cache %s unreadable (%s); rebuilding", path, e)
        with LOG.stage("build noise bank"):
            bank, ranges = noise_mod.build_noise_bank(self.speech[: self._val_speech_end], seed=self.seed,
                                                      minutes_per_kind=minutes,
                                                      cache_dir=self.cache_dir, real_corpora=real)
        self.release_pages_of(self.speech)  # what the babble read
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path.with_suffix(".tmp.npy"), bank)
        path.with_suffix(".tmp.npy").replace(path)
        pj.write_text(json.dumps(ranges))
        del bank  # the saved bank, memory-mapped like a cached one (the built copy is freed)
        return np.load(path, mmap_mode="r"), ranges

    def _load_speech(self) -> np.ndarray:
        """The training speech of :attr:`speech_ranges`' corpora (their train splits, in order), as a read-only
        memory map of a derived cache file built once, utterance by utterance: memory holds only the pages that
        draws touch, never the whole speech (nor a second copy while it is assembled)."""
        key = [SPEECH_CACHE_VERSION] + [[n, int(self.corpora[n].offsets[-1]), _layout_hash(self.corpora[n]), b - a]
                                        for n, (a, b) in self.speech_ranges.items()]
        tag = hashlib.sha1(json.dumps(key).encode()).hexdigest()[:10]
        path = data_dir(self.cache_dir) / "derived" / f"speech-{tag}.npy"
        total = max(b for _, b in self.speech_ranges.values())
        if path.exists():
            try:
                speech = np.load(path, mmap_mode="r")
                if speech.dtype == np.float32 and speech.shape == (total,):
                    return speech
            except Exception as e:  # noqa: BLE001
                LOG.warning("training speech cache %s unreadable (%s); rebuilding", path, e)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        with open(tmp, "wb") as f:  # plain writes, not a writable map: the written pages are not this process's
            np.lib.format.write_array_header_1_0(f, {"descr": np.dtype("<f4").str, "fortran_order": False,
                                                     "shape": (total,)})
            for name in self.speech_ranges:
                c = self.corpora[name]
                for i in c.indices("train"):
                    f.write(np.ascontiguousarray(c.utterance(i), "<f4").tobytes())
                self.corpora[name] = load_corpus(name, self.cache_dir)  # a fresh map: the pages read are let go
        tmp.replace(path)
        return np.load(path, mmap_mode="r")

    def release_pages(self) -> None:
        """Let go of the pages of :attr:`speech` and :attr:`bank` that draws have read (both are read-only
        memory maps): resident memory drops back, the pages stay in the OS page cache, so the next draws
        fault them back in cheaply. Long generation loops (a calibration set) call it every few dozen draws
        to keep their resident memory flat; arrays built in memory (no map) are left alone.

        Source: madvise(2), ``MADV_DONTNEED`` on a shared file mapping (Python ``mmap.madvise``).
        """
        for a in (self.speech, self.bank):
            self.release_pages_of(a)

    @staticmethod
    def release_pages_of(a: np.ndarray) -> None:
        """:meth:`release_pages` for one array: a no-op unless ``a`` is a read-only file memory map."""
        import mmap

        m = getattr(a, "_mmap", None)  # numpy.memmap keeps its mmap.mmap here
        if m is not None and not a.flags.writeable and hasattr(m, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            m.madvise(mmap.MADV_DONTNEED)

    def summary(self) -> dict:
        """Return ``{corpus: (minutes of training speech, draw probability)}`` plus ``"noise": {kind: minutes}``."""
        out = {k: (round((b - a) / SAMPLE_RATE_HZ / 60, 1), round(float(w), 3))
               for (k, (a, b)), w in zip(self.speech_ranges.items(), self._speech_w)}
        out["noise"] = {k: round((b - a) / SAMPLE_RATE_HZ / 60, 1) for k, (a, b) in self.bank_ranges.items()}
        return out

    # ------------------------------------------------------------------------------- drawing
    def speech_segments(self, batch_size: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        """Return random training speech segments: float32, shape (batch_size, n_samples)."""
        names = list(self.speech_ranges)
        ci = rng.choice(len(names), size=batch_size, p=self._speech_w)
        lo = np.array([self.speech_ranges[n][0] for n in names])[ci]
        hi = np.array([self.speech_ranges[n][1] for n in names])[ci]
        starts = lo + (rng.random(batch_size) * np.maximum(hi - lo - n_samples, 1)).astype(np.int64)
        idx = (starts[:, None] + np.arange(n_samples)[None, :]) % self.speech.size
        return self.speech[idx]

    def noise_segments(self, batch_size: int, n_samples: int, rng: np.random.Generator,
                       p_second: float = 0.3) -> np.ndarray:
        """Return random training noise: float32, shape (batch_size, n_samples), about unit RMS.

        A noise is one bank category; with probability ``p_second`` a second category is added at
        -15..0 dB relative level. Random polarity. In data version 4 each draw is first augmented
        (:func:`speed_perturb`, :func:`random_eq`); the EQ changes a draw's RMS (about -5..+8 dB for 90 %
        of white-noise draws), so the mixture is then only roughly unit RMS and the second noise's
        relative level spreads wider. The SNR is unaffected: :meth:`batch` sets it afterwards.
        """
        x = self._draw_noise(batch_size, n_samples, rng)
        second = rng.random(batch_size) < p_second
        k = int(second.sum())
        if k:
            y = self._draw_noise(k, n_samples, rng)
            x[second] += y * (10 ** (rng.uniform(-15, 0, k) / 20)).astype(np.float32)[:, None]
        x *= rng.choice(np.array([-1, 1], np.float32), size=batch_size)[:, None]
        return x

    def _draw_noise(self, batch_size: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        if self.data_version >= 4:  # augmented: speed perturbation, then random EQ
            lo_f, hi_f = NOISE_SPEED_RANGE
            raw = self._draw_raw_noise(batch_size, int(np.ceil(n_samples * hi_f)) + 2, rng)
            f = np.where(rng.random(batch_size) < P_NOISE_SPEED,
                         np.exp(rng.uniform(np.log(lo_f), np.log(hi_f), batch_size)), 1.0)
            return random_eq(speed_perturb(raw, f, n_samples), rng, P_NOISE_EQ, 12.0)
        return self._draw_raw_noise(batch_size, n_samples, rng)

    def _draw_raw_noise(self, batch_size: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        ki = rng.choice(len(self._noise_kinds), size=batch_size, p=self._noise_w)
        lo = np.array([self.bank_ranges[k][0] for k in self._noise_kinds])[ki]
        hi = np.array([self.bank_ranges[k][1] for k in self._noise_kinds])[ki]
        span = hi - lo
        off = (rng.random(batch_size) * span).astype(np.int64)
        idx = lo[:, None] + (off[:, None] + np.arange(n_samples)[None, :]) % span[:, None]  # wrap in category
        return self.bank[idx]

    def batch(self, batch_size: int, n_samples: int, rng: np.random.Generator,
              snr_db_range: tuple[float, float] = (-5.0, 20.0), peak_dbfs_range: tuple[float, float] = (-30.0, -1.0),
              p_noise_only: float = 0.05, p_speech_only: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
        """Return one random training batch of (noisy, clean) pairs.

        Each row: a random training speech segment plus random training noise at an SNR uniform in
        ``snr_db_range`` (active-speech SNR, see module doc), then one gain for both signals so the
        noisy peak is uniform in ``peak_dbfs_range`` dBFS (never clipping). With probability
        ``p_noise_only`` the row is noise only (clean = 0), with ``p_speech_only`` speech only
        (noisy = clean). In data version 4 the speech segments get :func:`random_eq` with probability
        :data:`P_SPEECH_EQ` before mixing, so ``clean`` is the equalised speech. In any data version the
        speech segments get :func:`low_band_boost` with probability ``speech_low_boost`` (clean boosted too),
        then :func:`room_reverb` with probability ``speech_reverb`` (clean reverberant too); the finished
        mixture is band-limited to 4 kHz with probability ``mixture_lowpass`` (clean too). Each augmentation
        draws from ``rng``, so turning one on also changes the later draws (SNR, row kind, peak level): batches
        with and without it are not paired row by row.

        Args:
            batch_size (int): B.
            n_samples (int): Segment length T in samples (16 kHz), e.g. 32000 for 2 s.
            rng (np.random.Generator): Random source (the batch is a pure function of its state).
            snr_db_range (tuple[float, float]): SNR range in dB.
            peak_dbfs_range (tuple[float, float]): Peak range in dBFS (<= 0).
            p_noise_only (float): Probability of a noise-only row.
            p_speech_only (float): Probability of a speech-only row.
        Returns:
            tuple[np.ndarray, np.ndarray]: ``noisy``, ``clean``: float32, shape (B, T), in [-1, 1].
        """
        s = self.speech_segments(batch_size, n_samples, rng)
        n = self.noise_segments(batch_size, n_samples, rng)
        if self.data_version >= 4:
            s = random_eq(s, rng, P_SPEECH_EQ, 6.0)
        if self.speech_low_boost:
            s = low_band_boost(s, rng, self.speech_low_boost, self.speech_low_boost_db)
        if self.speech_reverb:
            s = room_reverb(s, rng, self.speech_reverb)
        snr = rng.uniform(*snr_db_range, size=batch_size)
        nz = scale_noise(s, n, snr)
        u = rng.random(batch_size)
        noise_only = u < p_noise_only
        speech_only = (u >= p_noise_only) & (u < p_noise_only + p_speech_only)
        if noise_only.any():
            s[noise_only] = 0.0
            lvl = 10 ** (rng.uniform(-40, -10, int(noise_only.sum())) / 20)
            nz[noise_only] = n[noise_only] * lvl.astype(np.float32)[:, None]
        nz[speech_only] = 0.0
        noisy = s + nz
        if self.mixture_lowpass:
            narrow = np.flatnonzero(rng.random(batch_size) < self.mixture_lowpass)
            if narrow.size:
                noisy[narrow], s[narrow] = band_limit(noisy[narrow]), band_limit(s[narrow])
        peak = np.abs(noisy).max(axis=1)
        target = 10 ** (rng.uniform(*peak_dbfs_range, size=batch_size) / 20)
        g = (target / np.maximum(peak, 1e-9)).astype(np.float32)[:, None]
        return noisy * g, s * g

    # --------------------------------------------------------------------------- fixed sets
    def validation_pairs(self, limit: int | None = 120, seed: int = 1234) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Return the deterministic validation set: held-out asterisk prompts x training-type noise.

        Prompts are the ``"val"`` split (about 10 % by file-name hash) of every loaded ``asterisk-*``
        corpus, never used in training (data version 3: every second one converted to a male-range voice,
        its ``<corpus>/<file>`` part suffixed ``~male``); noise comes from a separate bank realisation (seed
        ``seed``) of the training categories; SNR uniform in [-5, 20] dB (active-speech SNR); no gain.

        Args:
            limit (int | None): Keep the first ``limit`` prompts in a fixed hash order (None: all, about
                12 min for five languages).
            seed (int): Seed of the validation noise.
        Returns:
            list[tuple[str, np.ndarray, np.ndarray]]: ``(name, noisy, clean)``; name is
            ``"<corpus>/<file>|<noise kind>|<snr>dB"``; arrays float32, shape (n_samples,), lengths vary.
        """
        items = []
        for cname, c in self.corpora.items():
            if not cname.startswith("asterisk"):
                continue
            for i in c.indices("val"):
                items.append((f"{cname}/{c.names[i]}", c.utterance(i)))
        items.sort(key=lambda t: _stable_int(t[0]))
        if limit is not None:
            items = items[:limit]
        if self.data_version >= 3:  # every second held-out prompt as a male-range voice (same conversion as training)
            from cosyedge.data.voice import convert_to_male

            items = [(f"{n}~male", convert_to_male(x, n)) if k % 2 else (n, x)
                     for k, (n, x) in enumerate(items)]
        rng = np.random.default_rng(seed)
        out = []
        for name, clean in items:
            kind, nz = self.validation_noise(clean.size, rng)
            snr = float(np.round(rng.uniform(-5, 20), 1))
            noisy = mix_at_snr(clean, nz, snr)
            g = min(1.0, 0.95 / max(float(np.abs(noisy).max()), 1e-9))
            out.append((f"{name}|{kind}|{snr:g}dB", (noisy * g).astype(np.float32), (clean * g).astype(np.float32)))
        return out

    def validation_noise(self, n_samples: int, rng: np.random.Generator) -> tuple[str, np.ndarray]:
        """Draw one validation noise: a category by the training probabilities, then a FRESH realisation of
        it (synthetic kinds) or a bank segment (real kinds), as :meth:`validation_pairs` uses.

        Returns:
            tuple[str, np.ndarray]: the category name and the noise, float32, shape (n_samples,), 16 kHz.
        """
        kind = self._noise_kinds[rng.choice(len(self._noise_kinds), p=self._noise_w)]
        return kind, self._val_noise(kind, n_samples, rng)

    def _val_noise(self, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
        nb = -(-n // noise_mod.BLOCK_SAMPLES)
        if kind in ("white", "pink", "brown", "colored"):
            a = {"white": 0.0, "pink": 1.0, "brown": 2.0}.get(kind, rng.uniform(0, 2.5))
            x = noise_mod.colored_noise(rng, nb, a)
        elif kind == "babble":
            x = noise_mod.babble_noise(rng, self.speech[: self._val_speech_end], nb)
        elif kind in ("hum", "clicks", "band", "tonal"):
            fn = {"hum": noise_mod.hum_noise, "clicks": noise_mod.click_noise, "band": noise_mod.band_noise,
                  "tonal": noise_mod.tonal_noise}[kind]
            x = fn(rng, nb)
        else:  # real categories: a segment of the bank (real sounds are all training sounds)
            a, b = self.bank_ranges[kind]
            off = int(rng.integers(0, b - a))
            return self.bank[a + (off + np.arange(n)) % (b - a)]
        return x.reshape(-1)[:n]

    def test_pairs(self, snr_db_list=(5,), include_cards: bool = False,
                   noises: tuple[str, ...] | None = None) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Return the fixed test set: pocketsphinx LibriVox readings x each held-out REAL noise.

        Neither the speech (``pocketsphinx-testdata``) nor the noises
        (:func:`cosyedge.data.noise.heldout_noises`: a real engine recording from a package used
        nowhere else, and the held-out quarter of the opensfx recordings) is ever used for training. The noise offset
        per file is a hash of the file name (deterministic); SNR is active-speech SNR; if a mixture
        would exceed 0.95 full scale, noisy and clean are scaled down together.

        Args:
            snr_db_list (tuple[float, ...]): SNRs in dB; one pair per file and SNR.
            include_cards (bool): Also use the 5 ``cards`` recordings (spoken card names, 16 kHz).
        Returns:
            list[tuple[str, np.ndarray, np.ndarray]]: ``(name, noisy, clean)``, name
            ``"<file>+<noise>@<snr>dB"``; arrays float32, shape (n_samples,), 16 kHz.
        """
        return test_pairs(snr_db_list, include_cards, self.cache_dir, noises)
