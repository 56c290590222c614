"""Typed build options: :class:`BuildConfig` (precision, 2:4 sparsity, excluded nodes, INT8 calibration).

Made and validated once, where the command line is parsed (:meth:`BuildConfig.from_flags`), then passed to
:func:`cosyedge.builders.build` unchanged; the layers below read its fields instead of re-checking flags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from cosyedge.builders.names import PRECISIONS
from cosyedge.errors import UsageError
from cosyedge.precision.calibration import DEFAULT_CALIB_COUNT, MAX_CALIB_COUNT, Calibration


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """What to build: precision, sparsity, nodes kept in FP32, INT8 calibration.

    Attributes:
        precision (str): ``fp32`` | ``fp16`` | ``int8``.
        sparse (bool): 2:4-prune Conv/Gemm/MatMul weights first.
        exclude (tuple[str, ...]): ONNX node names kept as in the FP32 model (dense, float).
        calibration (Calibration | None): INT8 only (None: the default set, 2048 utterances).
        placement (str | None): INT8 Q/DQ placement (:data:`cosyedge.precision.qdq.PLACEMENTS`); None: the backend's
            default (``trt``; ``--int8-placement``).
    Raises:
        UsageError: unknown precision; calibration options on a non-INT8 build (on construction).
    """

    precision: str = "fp32"
    sparse: bool = False
    exclude: tuple[str, ...] = ()
    calibration: Calibration | None = None
    placement: str | None = None

    def __post_init__(self) -> None:
        """Check the precision and that calibration options go with INT8 (UsageError)."""
        if self.precision not in PRECISIONS:
            raise UsageError(f"unknown precision '{self.precision}' (use one of {', '.join(PRECISIONS)})")
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "sparse", bool(self.sparse))
        cal = self.calibration
        if self.placement is not None:
            from cosyedge.precision.qdq import check_placement

            check_placement(self.placement)
            if self.precision != "int8":
                raise UsageError("--int8-placement is only used by --int8 builds")
        if cal is not None and cal.bias_correction and self.precision != "int8":
            raise UsageError("--bias-correction is only used by --int8 builds")
        if cal is not None and cal.min_snr_db is not None and self.precision != "int8":
            raise UsageError("--int8-min-snr is only used by --int8 builds")
        if cal is not None and self.precision != "int8":
            if cal.set is not None:
                raise UsageError("--calib is only used by --int8 builds")
            if cal.amax is not None:
                raise UsageError("an amax cache is only used by --int8 builds")

    @classmethod
    def of(cls, precision: str = "fp32", sparse: bool = False, exclude: Iterable[str] = (),
           calib: str | Path | None = None, calib_count: int = DEFAULT_CALIB_COUNT,
           amax: str | Path | None = None) -> BuildConfig:
        """Make the config of the Python API's keyword options (``build_ort(..., precision=..., calib=...)``).

        Checked in this order (the first failing check raises): precision, ``calib`` without INT8, ``amax``
        without INT8, ``calib_count``.

        Args:
            precision (str): ``fp32`` | ``fp16`` | ``int8``.
            sparse (bool): 2:4-prune first.
            exclude (Iterable[str]): Node names kept as in the FP32 model.
            calib (str | Path | None): INT8 calibration set folder.
            calib_count (int): Utterances of a default set made on first use.
            amax (str | Path | None): INT8 amax cache to reuse.
        Returns:
            BuildConfig
        Raises:
            UsageError: unknown precision; ``calib``/``amax`` without INT8; ``calib_count`` < 1.
        """
        if precision not in PRECISIONS:
            raise UsageError(f"unknown precision '{precision}' (use one of {', '.join(PRECISIONS)})")
        if calib is not None and precision != "int8":
            raise UsageError("--calib is only used by --int8 builds")
        if amax is not None and precision != "int8":
            raise UsageError("an amax cache is only used by --int8 builds")
        return cls(precision=precision, sparse=sparse, exclude=tuple(exclude),
                   calibration=Calibration(set=calib, count=calib_count, amax=amax))

    @classmethod
    def from_flags(cls, *, fp16: bool = False, int8: bool = False, sparse: bool = False,
                   exclude: Iterable[str] = (), calib: str | Path | None = None,
                   calib_count: int = DEFAULT_CALIB_COUNT, amax: str | Path | None = None,
                   placement: str | None = None, bias_correction: bool = False,
                   min_snr_db: float | None = None) -> BuildConfig:
        """Make the config of ``cosyedge build`` flags, checking them once.

        Args:
            fp16 (bool): ``--fp16``.
            int8 (bool): ``--int8``.
            sparse (bool): ``--sparse``.
            exclude (Iterable[str]): ``--exclude`` node names.
            calib (str | Path | None): ``--calib DIR``.
            calib_count (int): ``--calib-count``.
            amax (str | Path | None): an amax cache to reuse (INT8).
            placement (str | None): ``--int8-placement`` (None: the backend's default).
            bias_correction (bool): ``--bias-correction``.
            min_snr_db (float | None): ``--int8-min-snr`` (dB; :mod:`cosyedge.precision.fallback`).
        Returns:
            BuildConfig
        Raises:
            UsageError: ``--fp16`` with ``--int8``; ``--exclude`` on a plain FP32 build; ``--calib-count`` outside 1..:data:`MAX_CALIB_COUNT`;
                ``--calib`` (or an amax cache) without ``--int8``; ``--int8-min-snr`` NaN, infinite, negative or
                without ``--int8``.
        """
        from cosyedge.builders.prepare import precision_from_flags

        precision = precision_from_flags(fp16=fp16, int8=int8)
        if exclude and precision == "fp32" and not sparse:
            raise UsageError("--exclude applies to --fp16, --int8 or --sparse builds (an FP32 build changes no node)")
        if not 1 <= calib_count <= MAX_CALIB_COUNT:
            raise UsageError(f"--calib-count must be in 1..{MAX_CALIB_COUNT} utterances, got {calib_count}")
        cal = Calibration(set=calib, count=calib_count, amax=amax, bias_correction=bool(bias_correction),
                          min_snr_db=min_snr_db)
        return cls(precision=precision, sparse=sparse, exclude=tuple(exclude), calibration=cal, placement=placement)

    @property
    def label(self) -> str:
        """str: ``<precision>[-sparse]`` (:func:`cosyedge.builders.names.precision_label`)."""
        from cosyedge.builders.names import precision_label

        return precision_label(self.precision, self.sparse)

    def variant(self, placement: str | None = None) -> dict:
        """The INT8 variant flags of this build (dict, :func:`cosyedge.builders.names.int8_variant`): the placement
        (``self.placement``, else ``placement``, else ``trt``), bias correction and minimum SNR; ``{}`` unless INT8."""
        from cosyedge.builders.names import int8_variant

        cal = self.calibration or Calibration()
        return int8_variant(self.precision, self.placement or placement, cal.bias_correction, cal.min_snr_db)

    def options(self) -> tuple:
        """``(precision, sparse, exclude, calib, calib_count, amax)`` (tuple) for the layers that unpack it."""
        cal = self.calibration or Calibration()
        return self.precision, self.sparse, self.exclude, cal.set, cal.count, cal.amax


__all__ = ["BuildConfig", "Calibration"]
