"""RNNoise baseline for ``cosyedge eval``: the real-time CPU enhancer users would otherwise pick.

RNNoise runs at 48 kHz on 480-sample (10 ms) frames of int16-scaled floats. :func:`rnnoise_enhance`
resamples to 48 kHz (soxr HQ, linear phase, delay-compensated), runs one fresh RNNoise state over the
whole signal frame by frame, and resamples back. RNNoise's own delay (about 20 ms: one 10 ms frame of
buffering plus the window overlap) is **not** compensated here: the evaluator measures it with
:func:`cosyedge.eval.align.estimate_delay` and reports it. The input is padded with
:data:`FLUSH_MS` of zeros so the delayed tail is not lost.

Source: Valin, "A Hybrid DSP/Deep Learning Approach to Real-Time Full-Band Speech Enhancement", MMSP
2018 (arXiv:1709.08243); library and weights via ``pyrnnoise`` (https://github.com/pengzhendong/pyrnnoise).
"""

from __future__ import annotations

import ctypes

import numpy as np

from cosyedge._lazy import lazy_import, require

soxr = lazy_import("soxr")

RNNOISE_RATE_HZ = 48000
"""int: RNNoise's native sample rate, Hz."""

FLUSH_MS = 60.0
"""float: zeros appended to the input (ms) so RNNoise's delayed output tail comes out."""


def rnnoise_enhance(x: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    """Enhance ``x`` with RNNoise; the output is late by RNNoise's delay (not compensated).

    Args:
        x (np.ndarray): float32 PCM in [-1, 1], shape (T,).
        sample_rate_hz (int): Rate of ``x``, Hz (any; resampled to 48 kHz and back).
    Returns:
        np.ndarray: float32, shape (T + round(FLUSH_MS * rate / 1000),), at ``sample_rate_hz``, clipped to [-1, 1].
    Raises:
        DependencyError: ``pyrnnoise`` is not installed.
    """
    rn = require("pyrnnoise.rnnoise")
    frame = int(rn.FRAME_SIZE)
    x = np.asarray(x, np.float32)
    pad = round(FLUSH_MS * sample_rate_hz / 1000.0)
    x = np.concatenate([x, np.zeros(pad, np.float32)])
    x48 = x if sample_rate_hz == RNNOISE_RATE_HZ else soxr.resample(x, int(sample_rate_hz), RNNOISE_RATE_HZ,
                                                                     quality="HQ")
    n = -(-x48.size // frame) * frame
    buf = np.zeros(n, np.float32)
    buf[:x48.size] = np.clip(x48, -1.0, 1.0) * 32767.0  # RNNoise works on int16-scaled floats
    out = np.empty_like(buf)
    state = rn.create()
    try:
        fp = ctypes.POINTER(ctypes.c_float)
        for i in range(0, n, frame):
            inp = np.ascontiguousarray(buf[i:i + frame])
            res = np.empty(frame, np.float32)
            rn.lib.rnnoise_process_frame(state, res.ctypes.data_as(fp), inp.ctypes.data_as(fp))
            out[i:i + frame] = res
    finally:
        rn.destroy(state)
    y48 = out[:x48.size] / 32767.0
    y = y48 if sample_rate_hz == RNNOISE_RATE_HZ else soxr.resample(y48, RNNOISE_RATE_HZ, int(sample_rate_hz),
                                                                    quality="HQ")
    y = np.clip(y, -1.0, 1.0).astype(np.float32)
    if y.size >= x.size:
        return y[:x.size]
    return np.concatenate([y, np.zeros(x.size - y.size, np.float32)])
