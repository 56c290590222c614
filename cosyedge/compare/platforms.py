"""The platform an accuracy baseline was measured on, and which gates depend on it.

ONNX Runtime's CPU provider computes an FP16 model differently on different CPUs: on arm64 CPUs with FP16 arithmetic
(``/proc/cpuinfo`` ``Features``: ``asimdhp``; Jetson Orin's Cortex-A78AE, Apple silicon) its arm64 FP16 kernels run
the nodes in half precision, while x86-64 (and arm64 without ``asimdhp``) computes them in FP32 between casts. The
bundled model's FP16 engine scores 58.3 dB there against a 69.0 dB baseline recorded on x86-64 (teacher-forced, noisy
demo, onnxruntime 1.23.2 under QEMU ``-cpu cortex-a76``), so an FP16 gate is compared only with a baseline measured on
the same kind of platform (:func:`platform_key`). INT8 and FP32 gates are not: the INT8 + 2:4 gate of the same run
agreed with x86-64 to 0.01 dB and passed (``docs/bench/aarch64.json``).

A baseline records ``platform`` = :func:`this_platform` for each label (``{"machine": "x86_64" | "aarch64" | ...,
"fp16_compute": "fp32" | "half"}``); a baseline written before this field existed was measured on x86-64
(:data:`LEGACY_PLATFORM`).

Sources: the Linux kernel's arm64 ``/proc/cpuinfo`` feature names (``arch/arm64/kernel/cpuinfo.c``: ``fphp``,
``asimdhp``); ONNX Runtime's ``MlasFp16AccelerationSupported`` (arm64 FP16 kernels only where the CPU has FP16
arithmetic).
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path

LEGACY_PLATFORM = {"machine": "x86_64", "fp16_compute": "fp32"}
"""dict: the platform of a baseline entry that records none (every baseline before the field existed was measured on
x86-64)."""

_MACHINES = {"amd64": "x86_64", "x86_64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


def normal_machine(machine: str) -> str:
    """``platform.machine()`` in one spelling (str): ``AMD64``/``x86_64`` -> ``x86_64``, ``arm64``/``aarch64`` ->
    ``aarch64``; others lower-cased."""
    return _MACHINES.get(machine.lower(), machine.lower())


def platform_of(machine: str, cpuinfo: str | None) -> dict:
    """The platform record (dict ``{"machine", "fp16_compute"}``) of a CPU.

    Args:
        machine (str): ``platform.machine()``.
        cpuinfo (str | None): ``/proc/cpuinfo``'s text; None where there is none (then arm64 is taken to have FP16
            arithmetic: every Apple silicon CPU does).
    Returns:
        dict: ``fp16_compute`` is ``"half"`` on aarch64 with ``asimdhp``, else ``"fp32"``.
    """
    m = normal_machine(machine)
    half = False
    if m == "aarch64":
        if cpuinfo is None:
            half = True
        else:
            feats: set[str] = set()
            for line in cpuinfo.splitlines():
                key, _, value = line.partition(":")
                if key.strip().lower() == "features":
                    feats.update(value.split())
            half = "asimdhp" in feats
    return {"machine": m, "fp16_compute": "half" if half else "fp32"}


def this_platform(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """The platform record of this machine (:func:`platform_of` of ``platform.machine()`` and ``/proc/cpuinfo``)."""
    try:
        text: str | None = Path(cpuinfo_path).read_text(errors="replace")
    except OSError:
        text = None
    return platform_of(_platform.machine(), text)


def platform_key(p: dict | None) -> str:
    """The kind of platform an FP16 gate depends on (str): ``x86_64``, ``aarch64`` (FP16 computed in FP32) or
    ``aarch64+fp16`` (half precision); ``None`` is :data:`LEGACY_PLATFORM`."""
    p = p or LEGACY_PLATFORM
    return f"{p.get('machine', 'x86_64')}{'+fp16' if p.get('fp16_compute') == 'half' else ''}"


def describe(p: dict | None) -> str:
    """One phrase for a platform record: ``x86-64 (FP16 computed in FP32)``, ``aarch64 with FP16 arithmetic (FP16
    computed in half precision)``."""
    p = p or LEGACY_PLATFORM
    machine = {"x86_64": "x86-64"}.get(p.get("machine", ""), p.get("machine", "?"))
    if p.get("fp16_compute") == "half":
        return f"{machine} with FP16 arithmetic (FP16 computed in half precision)"
    return f"{machine} (FP16 computed in FP32)"


def platform_bound(label: str) -> bool:
    """Whether a precision label's gate depends on the platform (bool): the FP16 labels (``fp16``, ``fp16-sparse``)."""
    return label.split("-")[0] == "fp16"


__all__ = ["LEGACY_PLATFORM", "describe", "normal_machine", "platform_bound", "platform_key", "platform_of",
           "this_platform"]
