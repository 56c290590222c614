"""The bundled reference model, run exactly as deployed (streaming ONNX through OrtStreamSession),
on the bundled real recording (LibriVox speech + a real engine noise held out from training, 5 dB).

Measured when the weights were committed: noisy SI-SNR 4.38 dB -> enhanced 6.42 dB (+2.04 dB);
clean speech in -> 18.0 dB SI-SNR out (speech distortion). The thresholds below leave ~0.5 dB margin
for numeric differences between machines; a regression of the model or the runtime trips them.
"""

import numpy as np
import pytest
import soundfile as sf

from cosyedge.artifacts import StreamContract
from cosyedge.datasets import si_snr
from cosyedge.models import MODELS_DIR, REFERENCE_STREAM_ONNX
from cosyedge.runtime import OrtStreamSession, enhance_array

DEMO = MODELS_DIR.parent / "assets" / "demo"


@pytest.fixture(scope="module")
def demo():
    x, sr = sf.read(DEMO / "noisy.wav", dtype="float32")
    c, sr2 = sf.read(DEMO / "clean.wav", dtype="float32")
    assert sr == sr2 == 16000 and x.shape == c.shape
    return x, c


def test_bundled_contract():
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    assert (c.sample_rate_hz, c.hop_samples, c.total_stride, c.delay_samples) == (16000, 160, 160, 160)
    assert c.algorithmic_latency_ms == 20.0
    assert len(c.states) == 8 and c.states[0].shape == ["N", 1, 160]


def test_enhances_the_demo_recording(demo):
    x, c = demo
    with OrtStreamSession(REFERENCE_STREAM_ONNX) as s:
        y = enhance_array(s, x)
    assert y.shape == x.shape and np.isfinite(y).all()
    gain = float(si_snr(y, c) - si_snr(x, c))
    assert gain >= 1.5, f"SI-SNR improvement {gain:.2f} dB on the demo (was 2.04 dB)"


def test_clean_speech_passes_with_little_distortion(demo):
    _, c = demo
    with OrtStreamSession(REFERENCE_STREAM_ONNX) as s:
        y = enhance_array(s, c)
    assert float(si_snr(y, c)) >= 16.0


def test_chunk_size_does_not_change_the_output(demo):
    """10 ms and 100 ms chunks give the same signal (state carried exactly)."""
    x, _ = demo
    outs = []
    for chunk in (160, 1600):
        with OrtStreamSession(REFERENCE_STREAM_ONNX, chunk_samples=chunk) as s:
            outs.append(enhance_array(s, x))
    assert np.abs(outs[0] - outs[1]).max() <= 1e-5
