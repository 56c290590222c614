"""The corpus registry: name -> builder (:data:`CORPORA`) and :func:`load_corpus`, plus the derived corpora
built from other corpora (male-converted prompts, re-voiced festvox-ru, Tux Paint's clean male voices).

Moved from ``cosyedge/datasets/sources.py``: sources builds corpora from packages, voice converts
them, and this module, above both, names them (no import circle).
"""

from __future__ import annotations

import os

from cosyedge.data.corpus import Corpus, _load_corpus, _save_corpus
from cosyedge.data.sources import (CLEAN_FLOOR_DB, TUXPAINT_MALE_LANGS, floor_range_db,
                                   _build_asterisk, _build_espeak, _build_festival, _build_fillets_male, _build_flite,
                                   _build_glob, _build_opensfx, _build_pocketsphinx, _build_prompt_pack,
                                   _build_sounds, data_dir)
from cosyedge.errors import UsageError
from cosyedge.log import LOG


def _build_tuxpaint_male_clean(cache_dir) -> Corpus:
    """The male voices of ``tuxpaint`` (:data:`TUXPAINT_MALE_LANGS`) whose files keep a noise floor at least
    :data:`CLEAN_FLOOR_DB` below the speech (:func:`floor_range_db`): about 40 min of 7418 phrases' 178."""
    c = load_corpus("tuxpaint", cache_dir)
    keep = [i for i, n in enumerate(c.names)
            if n.rsplit("_desc", 1)[-1].lstrip("_").removesuffix(".ogg") in TUXPAINT_MALE_LANGS
            and floor_range_db(c.utterance(i)) >= CLEAN_FLOOR_DB]
    return c.subset("tuxpaint-male-clean", keep, "filter")


CORPORA: dict = {
    **{f"asterisk-{lang}": (lambda cd, _l=lang: _build_asterisk(_l, cd)) for lang in ("en", "fr", "es", "it", "ru")},
    "asterisk-prompt-fr-armelle": lambda cd: _build_prompt_pack("asterisk-prompt-fr-armelle", "gsm", cd),
    "asterisk-prompt-es-co": lambda cd: _build_prompt_pack("asterisk-prompt-es-co", "gsm", cd),
    "asterisk-prompt-it-menardi": lambda cd: _build_prompt_pack("asterisk-prompt-it-menardi-wav", "wav", cd),
    "librivox": lambda cd: _build_pocketsphinx("librivox", cd),
    "cards": lambda cd: _build_pocketsphinx("cards", cd),
    "sound-icons": lambda cd: _build_sounds("sound-icons", "sound-icons", "*.wav", cd),
    "freedesktop": lambda cd: _build_sounds("sound-theme-freedesktop", "freedesktop", "*.oga", cd),
    "moh": lambda cd: _build_glob("asterisk-moh-opsound-g722", "usr/share/asterisk/moh", ("*.g722",), cd),
    "lmms-samples": lambda cd: _build_glob("lmms-common", "usr/share/lmms/samples", ("*.ogg", "*.wav"), cd),
    "opensfx": _build_opensfx,
    # real city/industry/nature ambiences (GPL-2+ / CC-BY-SA 2.0 dual licence; see the package copyright)
    "lincity-sfx": lambda cd: _build_glob("lincity-ng-data", "usr/share/games/lincity-ng/sounds", ("*.wav",), cd),
    # real sliding/impact sounds (GPL-2+)
    "etr-sfx": lambda cd: _build_glob("extremetuxracer-data", "usr/share/games/etr/sounds", ("*.wav",), cd),
    # real wideband voices (many speakers, ~35 languages): spoken letters and syllables of KLettres and
    # spoken object names of KTuberling (GPL-2+ / GFDL; /usr/share/doc/{klettres,ktuberling}-data/copyright)
    "klettres": lambda cd: _build_glob("klettres-data", "usr/share/klettres", ("*.ogg", "*.wav"), cd),
    "ktuberling": lambda cd: _build_glob("ktuberling-data", "usr/share/ktuberling/sounds", ("*.ogg", "*.wav"), cd),
    # real read phrases: the spoken descriptions of Tux Paint's stamps ("*_desc*.ogg", 7418 files, about 3.3 h,
    # 44.1 kHz; GPL-2, /usr/share/doc/tuxpaint-stamps-default/copyright), one volunteer voice per language, most
    # of them male (fr, ru, ca, bg, da, lt, nl: median f0 about 105-140 Hz; ro, es, be, el: female); the
    # stamps' sound effects are not included
    "tuxpaint": lambda cd: _build_glob("tuxpaint-stamps-default", "usr/share/tuxpaint/stamps", ("*_desc*.ogg",), cd),
    # its male voices without an audible noise floor (about 40 min)
    "tuxpaint-male-clean": _build_tuxpaint_male_clean,
    # real read sentences by one male speaker (Russian, median f0 about 115-150 Hz): the 620 studio recordings
    # (16 kHz, 99.5 min) of the msu_ru_nsh unit-selection database that festvox-ru ships for Festival's
    # synthesis (BSD-like, Nickolay V. Shmyrev 2005; /usr/share/doc/festvox-ru/copyright)
    "festvox-ru": lambda cd: _build_glob("festvox-ru", "usr/share/festival/voices/russian/msu_ru_nsh_clunits/wav",
                                         ("*.wav",), cd),
    # real acted dialogue by two male actors: the big fish of Fish Fillets NG's Dutch and Czech dubbing
    # (GPL-2; /usr/share/doc/fillets-ng-data-{nl,cs}/copyright)
    "fillets-male": _build_fillets_male,
    # real effects and ambiences: rain, thunder, ocean waves, birds, jets, helicopter, tank tracks,
    # explosions (GPL-2+ / CC0 / CC-BY(-SA) 3.0 per file; /usr/share/doc/scorched3d-data/copyright)
    "scorched3d-sfx": lambda cd: _build_glob("scorched3d-data", "usr/share/games/scorched3d/data", ("*.wav",), cd),
    # real car engine loops, crashes, skids, gear changes (GPL-2+ / free; /usr/share/doc/torcs-data/copyright)
    "torcs-sfx": lambda cd: _build_glob("torcs-data", "usr/share/games/torcs/data/sound", ("*.wav",), cd),
    # SuperTuxKart effects and track ambiences: engines, rain, river, waterfall, crowds, thunder...
    # (CC-BY-SA 3.0/4.0, CC0, GPL; /usr/share/doc/supertuxkart-data/copyright); music and cut-scenes and the
    # one spoken announcement excluded
    "stk-sfx": lambda cd: _build_glob("supertuxkart-data", "usr/share/games/supertuxkart/data", ("*.ogg", "*.wav"), cd,
                                      exclude=("music/", "introcutscene", "sara_airport_pa")),
    # SuperTuxKart music (real instrument/electronic music; CC-BY-SA 3.0 and others)
    "stk-music": lambda cd: _build_glob("supertuxkart-data", "usr/share/games/supertuxkart/data/music", ("*.ogg",), cd),
    # Hedgewars effects (explosions, water, wind, machinery; GPL-2 / CC; voices excluded)
    "hedgewars-sfx": lambda cd: _build_glob("hedgewars-data", "usr/share/games/hedgewars/Data/Sounds", ("*.ogg",), cd,
                                            exclude=("voices/",)),
}
"""Corpus builders by name: ``builder(cache_dir) -> Corpus``. The synthetic corpora (``espeak``,
``flite``, ``festival``) are registered at the end of this module."""


def load_corpus(name: str, cache_dir: str | os.PathLike | None = None) -> Corpus:
    """Load corpus ``name`` from the cache, building (fetch, decode, save) it the first time.

    Args:
        name (str): A key of :data:`CORPORA`.
        cache_dir (str | PathLike | None): See :func:`data_dir`.
    Returns:
        Corpus: the corpus (audio float32, 16 kHz).
    Raises:
        UsageError: unknown corpus name.
        DependencyError: a needed tool (apt-get, dpkg, espeak-ng, PyAV) is missing.
        ArtifactError: download, decode or cache failure.
    """
    if name not in CORPORA:
        raise UsageError(f"unknown corpus '{name}' (choose from {', '.join(sorted(CORPORA))})")
    path = data_dir(cache_dir) / "corpora" / f"{name}.npy"
    c = _load_corpus(path, name)
    if c is not None:
        return c
    with LOG.stage(f"build corpus {name}"):
        c = CORPORA[name](cache_dir)
        _save_corpus(path, c)
    LOG.info("corpus %s: %d utterances, %.1f min (%s)", name, len(c), c.seconds() / 60, c.source)
    del c  # the saved corpus, memory-mapped as a cached one is (the built copy is freed)
    return _load_corpus(path, name)


CORPORA.update({"espeak": _build_espeak, "flite": _build_flite, "festival": _build_festival})


def _build_male(src: str, cache_dir) -> Corpus:
    from cosyedge.data.voice import build_male_corpus

    return build_male_corpus(load_corpus(src, cache_dir), f"{src}-male")


def _build_festvox_ru_voices(cache_dir) -> Corpus:
    from cosyedge.data.voice import REVOICE_RANGES, build_converted_corpus

    return build_converted_corpus(load_corpus("festvox-ru", cache_dir), "festvox-ru-voices", REVOICE_RANGES, "~revoiced")


# festvox-ru's 620 real read sentences re-voiced, each with its own median f0 (75-125 Hz) and formant shift
# (x0.90-1.05): one real male speaker's connected speech spread over the low male range (BSD-like, as festvox-ru)
CORPORA["festvox-ru-voices"] = _build_festvox_ru_voices

MALE_CONVERTED_CORPORA = tuple(f"asterisk-{lang}-male" for lang in ("en", "fr", "es", "it", "ru"))
"""Training prompts of the five asterisk core packs converted to male-range voices
(:mod:`cosyedge.data.voice`); used by training data version 3."""

CORPORA.update({name: (lambda cd, _s=name.removesuffix("-male"): _build_male(_s, cd)) for name in MALE_CONVERTED_CORPORA})
