"""Training-data constants: corpora per data version, noise weights, augmentation probabilities.

Moved from ``cosyedge/datasets/mix.py``. Read by :mod:`cosyedge.data.training_data` and the
training scripts.
"""

from __future__ import annotations

from cosyedge.data.registry import MALE_CONVERTED_CORPORA

SPEECH_TRAIN_CORPORA = (
    "asterisk-en", "asterisk-fr", "asterisk-es", "asterisk-it", "asterisk-ru",
    "asterisk-prompt-fr-armelle", "asterisk-prompt-es-co", "asterisk-prompt-it-menardi",
    "flite", "festival", "espeak",
)
"""Speech corpora used for training (data version 1) if available (missing ones are skipped with a
warning)."""

EXTRA_SPEECH_CORPORA_V2 = ("klettres", "ktuberling")
"""Data version 2 adds about 80 min of real wideband voices (KLettres letters/syllables and KTuberling
words, many speakers and ~35 languages; amateur recordings, some with audible background noise)."""

EXTRA_SPEECH_CORPORA_V3 = MALE_CONVERTED_CORPORA
"""Data version 3 adds the asterisk training prompts converted to male-range voices (about 100 min; see
:mod:`cosyedge.data.voice`): the real connected speech of versions 1-2 is almost all female."""

MALE_SHARE_V3 = 0.3
"""Share of speech draws given to :data:`EXTRA_SPEECH_CORPORA_V3` in data version 3."""

READ_PHRASE_CORPORA = ("tuxpaint", "tuxpaint-male-clean", "festvox-ru", "fillets-male", "festvox-ru-voices")
"""Real read or acted speech, mostly male (:data:`cosyedge.data.registry.CORPORA`): Tux Paint's spoken stamp
descriptions (all 13 voices, 178 min; or only the male voices without an audible noise floor, about 40 min), the
620 read sentences (99.5 min) of the male speaker behind festvox-ru's unit-selection voice, and the big fish's
lines of Fish Fillets NG's Dutch and Czech dubbing (two male actors, about 70 min), and festvox-ru's sentences
re-voiced over the low male range (median f0 75-125 Hz, formants x0.90-1.05; :mod:`cosyedge.data.voice`). One or more of them
(comma-separated) are added to any data version with ``TrainingData(read_phrase_share=, read_phrase_corpus=)``;
together they get ``read_phrase_share`` of the speech draws, split by duration."""


DATA_VERSIONS = (1, 2, 3, 4)
"""Training data versions: 1 = the data of the first bundled weights; 2 = version 1 plus
:data:`EXTRA_SPEECH_CORPORA_V2` and the noises of :data:`cosyedge.data.noise.REAL_NOISE_CORPORA_V2`;
3 = version 2 plus :data:`EXTRA_SPEECH_CORPORA_V3` (male-converted prompts, drawn with :data:`MALE_SHARE_V3`;
its validation set also converts every second prompt, see :meth:`TrainingData.validation_pairs`);
4 = version 3 (same corpora, noise bank and validation set) with on-the-fly augmentation of every batch:
noise speed perturbation (:func:`speed_perturb`, :data:`NOISE_SPEED_RANGE`) and random equalisation of
noise and speech (:func:`random_eq`), so a noise seen in training stands for its faster, slower and
differently coloured variants (an engine at other revs, another room or microphone).
(A 40-min fine-tune of the bundled model on version 2 raised validation SI-SNRi but not the held-out
test figure; see docs/model-card.md.)"""

SYNTHETIC_CORPORA = ("espeak", "flite", "festival")
"""Corpora made by a synthesizer; together they get ``synthetic_share`` of the speech draws."""

NARROWBAND_CORPORA = ("asterisk-prompt-fr-armelle", "asterisk-prompt-es-co", "asterisk-prompt-it-menardi")
"""Real voices recorded at 8 kHz (no energy above 4 kHz); together they get ``narrowband_share``."""

NOISE_WEIGHTS = {
    "white": 0.05, "pink": 0.08, "brown": 0.05, "colored": 0.09, "hum": 0.05, "babble": 0.13,
    "clicks": 0.03, "band": 0.07, "tonal": 0.06, "machine": 0.12, "real-events": 0.05, "real-env": 0.16,
    "music": 0.06,
}
"""Probability of each noise category for the first noise of a mixture (renormalised over the
categories present in the bank), data version 1."""

NOISE_WEIGHTS_V2 = {
    "white": 0.05, "pink": 0.08, "brown": 0.05, "colored": 0.09, "hum": 0.05, "babble": 0.13,
    "clicks": 0.03, "band": 0.06, "tonal": 0.05, "machine": 0.08, "real-events": 0.04, "real-env": 0.12,
    "music": 0.07, "real-games": 0.16,
}
"""Noise category probabilities of data version 2."""

BANK_VERSION = 6

NOISE_SPEED_RANGE = (0.67, 1.5)
"""Data version 4: noise playback-speed factors (log-uniform), applied to :data:`P_NOISE_SPEED` of the
noise draws; 1.5 plays 1.5 x faster (pitch and tempo up by 7 semitones)."""
P_NOISE_SPEED = 0.5
"""Data version 4: probability that a noise draw is speed-perturbed (:data:`NOISE_SPEED_RANGE`)."""
P_NOISE_EQ = 0.5
"""Data version 4: probability of random equalisation of a noise draw (up to +-12 dB bumps)."""
P_SPEECH_EQ = 0.3
"""Data version 4: probability of random equalisation of a speech segment (up to +-6 dB bumps; the clean
target gets the same filter)."""
LOW_BOOST_CENTRE_HZ = (70.0, 140.0)
""":func:`low_band_boost`: range of the boost's centre frequency (log-uniform), Hz: a male voice's f0."""
REVERB_RT60_S = (0.15, 0.6)
""":func:`room_reverb`: range of the reverberation time RT60 (uniform), seconds: small to mid-sized rooms."""
REVERB_DRR_DB = (0.0, 12.0)
""":func:`room_reverb`: range of the direct-to-reverberant energy ratio (uniform), dB."""

