"""What ``tritonserver``'s log and metrics say: the reasons of models it could not load, its error lines (driver noise
of a CPU-only start left out), the one-line error of a server that exited while starting (:class:`LogInterpretation`,
mixed into :class:`~cosyedge.serve.server.TritonServer`), and its Prometheus metrics summed by name.
"""

from __future__ import annotations

import contextlib
import re

from cosyedge.errors import ArtifactError, DependencyError

_NOISE = re.compile(r"NVML|DCGM|nvml|dcgm|CUDA driver|cuda driver|GPU metrics|Unable to get power|pinned memory|"
                    r"CudaDriver|libcuda|GPU device|cuMemGetInfo|CUDA memory pool")
"""re.Pattern: warnings every CPU-only start prints (no NVIDIA driver): shown only with -v."""


def _load_errors(lines: list[str]) -> list[str]:
    """Triton's own reasons for models it could not load, from its log: ``model 'x': reason`` (list[str])."""
    out = []
    for line in lines:
        m = re.search(r"failed to load '([^']+)'(?: version \d+)?: (.*)$", line)
        if m:
            out.append(f"model '{m.group(1)}': {_clean_reason(m.group(2))}")
    if not out:  # the model status table: "| name | 1 | UNAVAILABLE: reason |"
        for line in lines:
            m = re.match(r"\|\s*(\S+)\s*\|\s*\d+\s*\|\s*UNAVAILABLE: (.*?)\s*\|\s*$", line)
            if m:
                out.append(f"model '{m.group(1)}': {_clean_reason(m.group(2))}")
    return out


def _clean_reason(text: str) -> str:
    """Triton's reason without the Python traceback it carries (escaped ``\\n`` or real newlines, ``At:`` and
    the stack below): its first meaningful line (str)."""
    text = text.replace("\\n", "\n").replace("\\t", " ")
    lines = [ln.strip() for ln in text.splitlines()]
    keep = []
    for ln in lines:
        if ln in ("At:", "Traceback (most recent call last):") or ln.startswith("At: "):
            break
        if ln:
            keep.append(ln)
    out = keep[0] if keep else text.strip()
    return out.rstrip(chr(34)).strip()


def _error_lines(lines: list[str]) -> list[str]:
    """Triton's error lines (``E1207 ...] message`` -> ``message``), noise removed."""
    return [re.sub(r"^E\d{4} [\d:.]+ +\d+ [^\]]*\] ", "", ln).strip() for ln in lines
            if re.match(r"^E\d{4} ", ln) and not _NOISE.search(ln)]


def parse_metrics(text: str) -> dict[str, float]:
    """Sum Prometheus text-format samples by metric name (labels dropped): dict[str, float]."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+(\S+)", line)
        if m:
            with contextlib.suppress(ValueError):
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


class LogInterpretation:
    """Errors from the log of a :class:`~cosyedge.serve.server.TritonServer` (a mixin: it uses the server's
    ``log_tail``, ``repo`` and ``_proc``)."""

    def _last_words(self) -> str:
        errs = _error_lines(self.log_tail)
        return errs[-1] if errs else ""

    def _load_failure(self, loads: list[str]) -> ArtifactError:
        """The one-line error of a model Triton could not load (its reason, and the fix for a missing backend)."""
        hint = ""
        m = re.search(r"unable to find backend library for backend '([^']+)'", loads[0])
        if m:
            hint = (f" (this tritonserver has no '{m.group(1)}' backend: the nvidia-pytriton wheel has only the "
                    f"Python backend; build with --triton-backend python, or serve this repository in NVIDIA's "
                    f"container)")
        return ArtifactError(f"Triton cannot load the repository {self.repo}: {loads[0]}{hint}")

    def _startup_error(self) -> Exception:
        """The one-line error of a server that exited while starting (Triton's reason)."""
        lines = self.log_tail
        code = self._proc.returncode
        loads = _load_errors(lines)
        text = "\n".join(lines)
        if loads:
            return self._load_failure(loads)
        m = re.search(r"(Socket '[^']+' already in use|Address already in use|failed to start [A-Za-z]+ service[^\n]*)",
                      text)
        if m:
            return ArtifactError(f"tritonserver cannot listen: {m.group(1)} (stop the other server or give other "
                                 f"ports; 0 picks free ones)")
        m = re.search(r"(error while loading shared libraries: [^\n]*)", text)
        if m:
            return DependencyError(f"tritonserver cannot start: {m.group(1)}")
        why = self._last_words() or (lines[-1] if lines else "no output")
        return ArtifactError(f"tritonserver exited with status {code} while starting: {why}")
