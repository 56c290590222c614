"""Speech segments from per-hop speech probabilities: Silero VAD's ``get_speech_timestamps_from_probs``.

A plain-Python port (no torch) of ``get_speech_timestamps_from_probs`` from ``silero_vad/utils_vad.py``
(silero-vad 6.2.3, MIT License, Copyright (c) 2020-present Silero Team): hysteresis on the probability
(speech from ``threshold``, silence below ``neg_threshold``), segments shorter than
``min_speech_duration_ms`` dropped, silences shorter than ``min_silence_duration_ms`` bridged, a cut
after ``max_speech_duration_s`` at the longest silence seen, then ``speech_pad_ms`` of padding each side
(split in the middle of a short gap). The defaults are the package's; with the same probabilities it
gives the same segments, sample for sample. ``visualize_probs`` and the ``step`` decimation (a caller
concern) are left out.

Source: github.com/snakers4/silero-vad, ``src/silero_vad/utils_vad.py`` ``get_speech_timestamps_from_probs``
(MIT License, Copyright (c) 2020-present Silero Team; the licence text is in the silero-vad wheel's
``LICENSE``).
"""

from __future__ import annotations

from collections.abc import Sequence


def speech_timestamps_from_probs(speech_probs: Sequence[float], sampling_rate: int = 16000, threshold: float = 0.5,
                                 min_speech_duration_ms: int = 250, max_speech_duration_s: float = float("inf"),
                                 min_silence_duration_ms: int = 100, speech_pad_ms: int = 30,
                                 neg_threshold: float | None = None, min_silence_at_max_speech: int = 98,
                                 use_max_poss_sil_at_max_speech: bool = True,
                                 audio_length_samples: int | None = None) -> list[dict]:
    """Speech segments (in samples) from one speech probability per window.

    Args:
        speech_probs (Sequence[float]): Probability of window k = samples [w k, w k + w), w = 512 at 16 kHz,
            256 at 8 kHz (one per hop of the Silero stream model).
        sampling_rate (int): 16000 or 8000 (Hz): sets the window w.
        threshold (float): Speech from this probability on.
        min_speech_duration_ms (int): Shorter segments are dropped (ms).
        max_speech_duration_s (float): Longer segments are cut (s).
        min_silence_duration_ms (int): Silence that ends a segment (ms).
        speech_pad_ms (int): Padding added each side (ms).
        neg_threshold (float | None): Silence below this; None: ``max(threshold - 0.15, 0.01)``.
        min_silence_at_max_speech (int): Silence (ms) that counts as a cut point for a too-long segment.
        use_max_poss_sil_at_max_speech (bool): Cut a too-long segment at its longest silence (else the last).
        audio_length_samples (int | None): Length of the audio (samples); None: ``len(speech_probs) * w``.
    Returns:
        list[dict]: ``{"start": int, "end": int}`` sample indices at ``sampling_rate``, in order.
    Source: silero-vad ``utils_vad.get_speech_timestamps_from_probs`` (MIT, Silero Team), line for line.
    """
    window_size_samples = 512 if sampling_rate == 16000 else 256
    if audio_length_samples is None:
        audio_length_samples = len(speech_probs) * window_size_samples

    min_speech_samples = sampling_rate * min_speech_duration_ms / 1000
    speech_pad_samples = sampling_rate * speech_pad_ms / 1000
    max_speech_samples = sampling_rate * max_speech_duration_s - window_size_samples - 2 * speech_pad_samples
    min_silence_samples = sampling_rate * min_silence_duration_ms / 1000
    min_silence_samples_at_max_speech = sampling_rate * min_silence_at_max_speech / 1000

    triggered = False
    speeches: list[dict] = []
    current_speech: dict = {}
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    temp_end = 0  # a potential segment end (some silence tolerated)
    prev_end = next_start = 0  # segment limits kept for a cut at the maximum length
    possible_ends: list[tuple[int, int]] = []

    for i, speech_prob in enumerate(speech_probs):
        cur_sample = window_size_samples * i
        # speech back after a temp_end: keep the silence as a cut candidate if long enough
        if (speech_prob >= threshold) and temp_end:
            sil_dur = cur_sample - temp_end
            if sil_dur > min_silence_samples_at_max_speech:
                possible_ends.append((temp_end, sil_dur))
            temp_end = 0
            if next_start < prev_end:
                next_start = cur_sample
        # start of speech
        if (speech_prob >= threshold) and not triggered:
            triggered = True
            current_speech["start"] = cur_sample
            continue
        # maximum length reached: decide where to cut
        if triggered and (cur_sample - current_speech["start"] > max_speech_samples):
            if use_max_poss_sil_at_max_speech and possible_ends:
                prev_end, dur = max(possible_ends, key=lambda x: x[1])
                current_speech["end"] = prev_end
                speeches.append(current_speech)
                current_speech = {}
                next_start = prev_end + dur
                if next_start < prev_end + cur_sample:
                    current_speech["start"] = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                possible_ends = []
            else:
                if prev_end:
                    current_speech["end"] = prev_end
                    speeches.append(current_speech)
                    current_speech = {}
                    if next_start < prev_end:
                        triggered = False
                    else:
                        current_speech["start"] = next_start
                    prev_end = next_start = temp_end = 0
                    possible_ends = []
                else:
                    current_speech["end"] = cur_sample
                    speeches.append(current_speech)
                    current_speech = {}
                    prev_end = next_start = temp_end = 0
                    triggered = False
                    possible_ends = []
                    continue
        # silence while in speech
        if (speech_prob < neg_threshold) and triggered:
            if not temp_end:
                temp_end = cur_sample
            sil_dur_now = cur_sample - temp_end
            if not use_max_poss_sil_at_max_speech and sil_dur_now > min_silence_samples_at_max_speech:
                prev_end = temp_end
            if sil_dur_now < min_silence_samples:
                continue
            current_speech["end"] = temp_end
            if (current_speech["end"] - current_speech["start"]) > min_speech_samples:
                speeches.append(current_speech)
            current_speech = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            possible_ends = []
            continue

    if current_speech and (audio_length_samples - current_speech["start"]) > min_speech_samples:
        current_speech["end"] = audio_length_samples
        speeches.append(current_speech)

    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - speech_pad_samples))
        if i != len(speeches) - 1:
            silence_duration = speeches[i + 1]["start"] - speech["end"]
            if silence_duration < 2 * speech_pad_samples:
                speech["end"] += int(silence_duration // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - silence_duration // 2))
            else:
                speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - speech_pad_samples))
        else:
            speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))
    return speeches


def in_seconds(speeches: list[dict], sampling_rate: int) -> list[dict]:
    """list[dict]: ``{"start": s, "end": s, "start_sample": int, "end_sample": int}`` per segment (seconds
    rounded to 1 ms) from :func:`speech_timestamps_from_probs`'s samples at ``sampling_rate`` (Hz)."""
    return [{"start": round(s["start"] / sampling_rate, 3), "end": round(s["end"] / sampling_rate, 3),
             "start_sample": int(s["start"]), "end_sample": int(s["end"])} for s in speeches]
