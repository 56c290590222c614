"""Default tolerances of ``cosyedge compare``, per precision label, and how they are chosen.

A candidate is compared with its FP32 reference on real speech (see :mod:`cosyedge.compare.core`).
Each limit applies to every utterance:

=============  ========================================================================================
field          meaning
=============  ========================================================================================
output_snr_db  minimum SNR (dB) of the candidate's audio output against the reference's, both modes:
               ``10 log10(sum ref^2 / sum (ref - cand)^2)`` over the whole utterance.
output_max_abs maximum absolute sample error of the audio output (full scale 1.0), teacher-forced mode
               (the per-step error; in free-running mode errors may legitimately accumulate).
state_snr_db   minimum SNR (dB) of every ``state_out`` tensor in teacher-forced mode (the candidate got
               the reference's states, so a state that differs is computed wrongly: swapped or dropped
               caches show here first).
pesq_drop      maximum PESQ-WB drop (MOS-LQO) of the candidate's output against the reference's, both
               scored against the clean speech, free-running mode.
si_snr_drop_db maximum SI-SNR drop (dB) against clean speech, free-running mode.
=============  ========================================================================================

How the defaults were chosen: measured on the bundled reference model (2026-11-29 weights) and the fixed
set (ONNX Runtime 1.32 CPU), then loosened by a margin for other CPUs, ONNX Runtime versions and
retrained weights. Measured output SNR, teacher-forced / free-running (100 ms chunks; 10 ms chunks give
the same within 1 dB): FP16 75-77 / 70-72 dB (states 71-73 dB, max abs error 1.7e-4); INT8 39-46 /
34-43 dB (states 33-45 dB, max abs 0.012); 2:4 pruning changes the model itself (no fine-tuning):
INT8+sparse 18-24 / 15-23 dB (states from 12 dB), PESQ-WB against clean speech unchanged or better.
So the sparse labels mostly guard the perceptual metrics. GTCRN (adopted from its wheel) in FP16:
output 70.1 dB teacher-forced, PESQ-WB unchanged, but two of its convolution caches at 48.6 and 49.7 dB (they hold
unnormalised encoder activations, whose FP16 rounding is a larger share of a small state): the FP16 state limit is
44 dB, still far above what a swapped or dropped state gives (below 10 dB). A single bad Q/DQ scale, a swapped or dropped
state shows far more clearly against a baseline of the same build (``cosyedge check``) than against these
absolute limits. ``cosyedge check`` gates on a
baseline instead (a metric may not get worse than the committed value by more than
:data:`BASELINE_TOLERANCES`).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Limits for one precision label (see module docstring for each field's definition)."""

    output_snr_db: float
    output_max_abs: float
    state_snr_db: float
    pesq_drop: float
    si_snr_drop_db: float

    def as_dict(self) -> dict:
        """Return the limits as a dict (JSON)."""
        return dataclasses.asdict(self)


DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(output_snr_db=100.0, output_max_abs=1e-5, state_snr_db=100.0, pesq_drop=0.01,
                      si_snr_drop_db=0.01),
    "fp16": Tolerance(output_snr_db=50.0, output_max_abs=2e-3, state_snr_db=44.0, pesq_drop=0.02,
                      si_snr_drop_db=0.05),
    "int8": Tolerance(output_snr_db=25.0, output_max_abs=0.05, state_snr_db=25.0, pesq_drop=0.1,
                      si_snr_drop_db=0.5),
    "fp32-sparse": Tolerance(output_snr_db=10.0, output_max_abs=0.5, state_snr_db=8.0, pesq_drop=0.3,
                             si_snr_drop_db=1.0),
    "fp16-sparse": Tolerance(output_snr_db=10.0, output_max_abs=0.5, state_snr_db=8.0, pesq_drop=0.3,
                             si_snr_drop_db=1.0),
    "int8-sparse": Tolerance(output_snr_db=10.0, output_max_abs=0.5, state_snr_db=8.0, pesq_drop=0.3,
                             si_snr_drop_db=1.0),
}
"""dict[str, Tolerance]: defaults per precision label."""

SNR_CAP_DB = 150.0
"""float: SNRs are clipped to this (identical tensors give +inf; JSON has no inf)."""

SNR_EXACT_DB = 90.0
"""float: an SNR at or above this counts as float32-exact in baseline gating (never a regression)."""

BASELINE_TOLERANCES: dict[str, float] = {
    "snr_db": 1.0,
    "max_abs_rel": 0.5,
    "pesq": 0.05,
    "si_snr_db": 0.2,
}
"""dict[str, float]: how much worse than the baseline a metric may get in ``cosyedge check``:
``snr_db`` (dB lower; SNRs >= :data:`SNR_EXACT_DB` always pass), ``max_abs_rel`` (relative growth of a
max abs error, plus 1e-6 absolute), ``pesq`` (MOS-LQO lower), ``si_snr_db`` (dB lower)."""


def tolerance_for(label: str) -> Tolerance:
    """Return the default :class:`Tolerance` of a precision label (``int8-sparse``...); unknown -> fp32's."""
    return DEFAULT_TOLERANCES.get(label, DEFAULT_TOLERANCES["fp32"])


__all__ = ["BASELINE_TOLERANCES", "DEFAULT_TOLERANCES", "SNR_CAP_DB", "SNR_EXACT_DB", "Tolerance", "tolerance_for"]
