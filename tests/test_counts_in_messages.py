"""Messages count in the number the count needs: ``plural(n, word)`` (cosyedge.log) is the one place, and the messages
that can say 1 use it (before: "1 frames", "1 states", "total stride 1 samples", "a chunk of 1 samples")."""

from __future__ import annotations

import pytest

from cosyedge.errors import UsageError
from cosyedge.log import plural
from cosyedge.surgery.masks import UNLIMITED, Pattern


@pytest.mark.parametrize("n,word,many,text", [(1, "frame", None, "1 frame"), (0, "frame", None, "0 frames"),
                                               (2, "frame", None, "2 frames"), (-1, "frame", None, "-1 frame"),
                                               (1.0, "sample", None, "1.0 sample"),
                                               (3, "key/value cache", "key/value caches", "3 key/value caches"),
                                               (1, "left chunk", None, "1 left chunk")])
def test_plural(n, word, many, text):
    assert plural(n, word, many) == text


def test_attention_patterns_count_frames():
    assert Pattern("banded", window=1, ahead=1).describe() == "banded (sliding window of 1 frame and 1 frame ahead)"
    assert Pattern("causal", ahead=1).describe() == "causal with unlimited left context and 1 frame ahead"
    assert Pattern("chunked", chunk=1, left=UNLIMITED).describe() == "chunked (chunks of 1 frame, every earlier chunk)"


def test_a_chunk_error_counts_samples():
    from cosyedge.artifacts import StreamContract

    c = StreamContract(input="audio", output="enhanced", sample_rate_hz=16000, hop_samples=2, total_stride=2,
                       delay_samples=0, states=[])
    with pytest.raises(UsageError, match=r"^chunk of 1 sample is not a positive multiple of the model's total stride "
                                         r"2 samples"):
        c.check_chunk(1)
    with pytest.raises(UsageError, match=r"\(1 sample\) is not a multiple of the model's total stride 2 samples"):
        c.chunk_samples(0.0625)
