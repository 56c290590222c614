"""``--chunk-ms`` values cosyedge prints (6 significant digits, e.g. at 44.1 kHz) are taken back."""

from __future__ import annotations


def test_chunk_ms_printed_at_44100_hz_is_taken_back():
    """--chunk-ms values cosyedge suggests at 44.1 kHz (6 significant digits) are taken back."""
    import pytest

    from cosyedge.artifacts import StreamContract
    from cosyedge.errors import UsageError

    c = StreamContract(input="audio", output="enhanced", sample_rate_hz=44100, hop_samples=160, total_stride=160,
                       delay_samples=0, states=[], name="m")
    step = 1000.0 * 160 / 44100
    assert c.chunk_samples(float(f"{step:g}")) == 160
    assert c.chunk_samples(float(f"{28 * step:g}")) == 4480
    with pytest.raises(UsageError, match="not a positive whole number of samples"):
        c.chunk_samples(3.6)
