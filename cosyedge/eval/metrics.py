"""Speech-enhancement metrics for ``cosyedge eval``: PESQ (wideband), STOI and DNSMOS P.835.

SI-SNR is :func:`cosyedge.signal.si_snr_db` (the one shared signal-metrics module).

Every function takes 1-D float arrays at :data:`METRIC_RATE_HZ` (16 kHz). The intrusive metrics
(SI-SNR, PESQ, STOI) need the estimate aligned to the clean reference first
(:func:`cosyedge.eval.align.estimate_delay`); DNSMOS needs no reference.

The metric libraries are optional and imported lazily (``pip install 'cosyedge[eval]'``):

* PESQ: ``pesq`` (ludlows/python-pesq, ITU-T P.862.2 wideband), https://github.com/ludlows/PESQ
* STOI: ``pystoi`` (Taal et al., IEEE TASLP 2011), https://github.com/mpariente/pystoi
* DNSMOS P.835: ``speechmos`` (the Microsoft DNS-Challenge ONNX models, shipped in the wheel, so it works
  offline; Reddy et al., ICASSP 2022, arXiv:2110.01763), https://github.com/microsoft/DNS-Challenge

A metric that cannot be computed for one file (e.g. PESQ finds no utterance in silence) gives NaN and a
warning, never an exception: one odd file must not end a long evaluation.
"""

from __future__ import annotations

import os

import numpy as np

from cosyedge._lazy import lazy_import, require
from cosyedge.errors import UsageError, first_line
from cosyedge.log import LOG

soxr = lazy_import("soxr")

METRIC_RATE_HZ = 16000
"""int: sample rate (Hz) of every metric here (PESQ wideband and DNSMOS are defined at 16 kHz)."""

DNSMOS_MIN_SECONDS = 9.01
"""float: DNSMOS scores 9.01 s windows (hop 1 s); shorter clips are repeated to that length by speechmos."""


def _mono(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise UsageError(f"{what}: expected a 1-D signal, got shape {x.shape}")
    return x


def pesq_wb(est: np.ndarray, ref: np.ndarray, sample_rate_hz: int = METRIC_RATE_HZ) -> float:
    """Wideband PESQ (ITU-T P.862.2, MOS-LQO 1.04..4.64) of ``est`` against ``ref``.

    Args:
        est (np.ndarray): float, shape (T,), degraded/enhanced signal, aligned to ``ref``.
        ref (np.ndarray): float, shape (T,), clean reference.
        sample_rate_hz (int): Rate of both, Hz; resampled to 16 kHz (soxr HQ) if different.
    Returns:
        float: MOS-LQO, or NaN (with a warning) when PESQ cannot score the pair (no utterance found,
        e.g. silence).
    Raises:
        DependencyError: ``pesq`` is not installed.
    Source: ITU-T P.862.2; implementation ``pesq`` (https://github.com/ludlows/PESQ).
    """
    pesq = require("pesq")
    est, ref = _at_16k(est, sample_rate_hz), _at_16k(ref, sample_rate_hz)
    if not np.any(ref):
        LOG.warning("PESQ of a silent reference; scored NaN")
        return float("nan")
    try:
        return float(pesq.pesq(METRIC_RATE_HZ, ref.astype(np.float64), est.astype(np.float64), "wb"))
    except Exception as err:  # noqa: BLE001  (pesq.NoUtterancesError, BufferTooShortError, ...)
        LOG.warning("PESQ failed (%s); scored NaN", first_line(err))
        return float("nan")


def stoi(est: np.ndarray, ref: np.ndarray, sample_rate_hz: int = METRIC_RATE_HZ, extended: bool = False) -> float:
    """Short-time objective intelligibility of ``est`` against ``ref`` (0..1, higher is better).

    Args:
        est (np.ndarray): float, shape (T,), aligned to ``ref``.
        ref (np.ndarray): float, shape (T,), clean reference.
        sample_rate_hz (int): Rate of both, Hz (pystoi resamples to 10 kHz internally).
        extended (bool): ESTOI (Jensen & Taal 2016) instead of STOI.
    Returns:
        float: STOI, or NaN (with a warning) when it cannot be computed (e.g. all-silent reference).
    Raises:
        DependencyError: ``pystoi`` is not installed.
    Source: Taal et al., "An Algorithm for Intelligibility Prediction of Time-Frequency Weighted Noisy
    Speech", IEEE TASLP 2011; implementation ``pystoi``.
    """
    pystoi = require("pystoi")
    try:
        v = float(pystoi.stoi(np.asarray(ref, np.float64), np.asarray(est, np.float64), int(sample_rate_hz),
                              extended=extended))
    except Exception as err:  # noqa: BLE001
        LOG.warning("STOI failed (%s); scored NaN", first_line(err))
        return float("nan")
    return v


def _at_16k(x: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if int(sample_rate_hz) != METRIC_RATE_HZ:
        x = soxr.resample(x, int(sample_rate_hz), METRIC_RATE_HZ, quality="HQ").astype(np.float32)
    return x


class DnsMos:
    """DNSMOS P.835 (SIG, BAK, OVRL) and P.808 MOS predictor, non-intrusive (no clean reference).

    Uses the ONNX models and feature code shipped in ``speechmos`` (no download), with ONNX Runtime
    sessions limited to ``threads`` threads (speechmos's own ``run`` uses every core).

    Args:
        threads (int): ONNX Runtime intra-op threads.
    Raises:
        DependencyError: ``speechmos`` (or its ``librosa`` dependency) is not installed.
    Source: Reddy et al., "DNSMOS P.835", ICASSP 2022 (arXiv:2110.01763); models and feature code from
    https://github.com/microsoft/DNS-Challenge via ``speechmos``.
    """

    def __init__(self, threads: int = 1):
        require("librosa")  # speechmos imports it at module level without declaring it
        dnsmos = require("speechmos.dnsmos")
        root = os.path.dirname(os.path.abspath(dnsmos.__file__))
        primary = os.path.join(root, "dnsmos_models", "sig_bak_ovr.onnx")
        p808 = os.path.join(root, "dnsmos_models", "model_v8.onnx")
        from cosyedge.runtime.ort import session_from_onnx

        model = dnsmos.DNSMOS.__new__(dnsmos.DNSMOS)  # same scoring code, our session options
        model.primary_model_path = primary
        model.onnx_sess = session_from_onnx(primary, threads=int(threads), inter_threads=1, log_severity=None)
        model.p808_onnx_sess = session_from_onnx(p808, threads=int(threads), inter_threads=1, log_severity=None)
        self._model = model

    def __call__(self, x: np.ndarray, sample_rate_hz: int = METRIC_RATE_HZ) -> dict[str, float]:
        """Score one signal.

        Args:
            x (np.ndarray): float, shape (T,), any level (clipped to [-1, 1]); clips shorter than
                :data:`DNSMOS_MIN_SECONDS` are repeated to that length (speechmos behaviour).
            sample_rate_hz (int): Rate of ``x``, Hz; resampled to 16 kHz if different.
        Returns:
            dict[str, float]: ``dnsmos_sig``, ``dnsmos_bak``, ``dnsmos_ovrl`` (P.835, 1..5) and
            ``dnsmos_p808`` (P.808 MOS). NaN values (with a warning) for an empty or silent input.
        """
        x = np.clip(_at_16k(_mono(x, "dnsmos"), sample_rate_hz), -1.0, 1.0)
        keys = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")
        if x.size == 0 or not np.any(x):
            LOG.warning("DNSMOS of an empty/silent signal; scored NaN")
            return {k: float("nan") for k in keys}
        r = self._model(x, METRIC_RATE_HZ, False)
        return {"dnsmos_sig": float(r["sig_mos"]), "dnsmos_bak": float(r["bak_mos"]),
                "dnsmos_ovrl": float(r["ovrl_mos"]), "dnsmos_p808": float(r["p808_mos"])}


_DNSMOS: dict[int, DnsMos] = {}


def dnsmos(x: np.ndarray, sample_rate_hz: int = METRIC_RATE_HZ, threads: int = 1) -> dict[str, float]:
    """DNSMOS P.835 of ``x`` with a per-process cached :class:`DnsMos` (see there for args and returns).

    The first call loads the models and compiles librosa's feature code (tens of seconds on a slow CPU).
    """
    if threads not in _DNSMOS:
        _DNSMOS[threads] = DnsMos(threads)
    return _DNSMOS[threads](x, sample_rate_hz)
