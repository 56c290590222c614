"""INT8 calibration options as one value: which set, how many utterances, a reused amax cache, the cache name.

:class:`Calibration` is made once (by :meth:`cosyedge.builders.config.BuildConfig.from_flags` where the CLI parses
``--calib``/``--calib-count``, or by ``cosyedge check``) and passed down unchanged to
:func:`cosyedge.precision.int8.int8_onnx` (``calib=set``, ``count=count``, ``amax=amax``, ``cache_name=cache_name``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cosyedge.errors import UsageError

DEFAULT_CALIB_COUNT = 2048
"""int: utterances streamed for INT8 calibration when the default set has to be made."""
MAX_CALIB_COUNT = 100_000
"""int: the most calibration utterances taken (``--calib-count``, ``calib make --count``): 50x the default, about
70 h of audio."""


BIAS_CORRECTION_UTTERANCES = 32
"""int: calibration utterances streamed (one hop per call) to estimate the bias correction."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """INT8 calibration options.

    Attributes:
        set (Path | None): Calibration set folder (with ``manifest.json``); None: the default set
            (``$COSYEDGE_CALIB_DIR`` or ``./calib``, made when missing).
        count (int): Utterances of a default set made on first use, >= 1. Defaults to 2048.
        amax (Path | None): Reuse this amax cache (``<model>.amax.json`` of the model being quantized)
            instead of calibrating.
        cache_name (str | None): Name of the amax / TensorRT cache files in the calibration folder
            (None: the model's name; the build passes ``<name>-sparse`` for 2:4-pruned models).
        bias_correction (bool): Correct each quantized layer's bias by ``E[W_q Q(x) - W x]`` over the first
            :data:`BIAS_CORRECTION_UTTERANCES` utterances of the set (placement ``ort_matmul`` only;
            :func:`cosyedge.precision.qdq_matmul.bias_corrections`). Defaults to False.
        min_snr_db (float | None): Target INT8 output SNR (dB) vs FP32 on held-out speech: layers that cannot pay
            stay float until it is met (:mod:`cosyedge.precision.fallback`; ``--int8-min-snr``). None: no fallback.
    Raises:
        UsageError: ``count`` < 1; ``min_snr_db`` NaN, infinite or negative (on construction).
    """

    set: str | Path | None = None
    count: int = DEFAULT_CALIB_COUNT
    amax: str | Path | None = None
    cache_name: str | None = None
    bias_correction: bool = False
    min_snr_db: float | None = None

    def __post_init__(self) -> None:
        """Check ``count`` and ``min_snr_db`` (UsageError). Paths are kept as given (the manifest records them as
        given)."""
        from cosyedge.precision.fallback import check_min_snr

        if int(self.count) < 1:
            raise UsageError(f"calibration count must be >= 1, got {self.count}")
        object.__setattr__(self, "count", int(self.count))
        object.__setattr__(self, "min_snr_db", check_min_snr(self.min_snr_db))


__all__ = ["BIAS_CORRECTION_UTTERANCES", "Calibration", "DEFAULT_CALIB_COUNT"]
