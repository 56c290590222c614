"""Bounds on what a stream contract, a state and a model name may declare, checked before anything is allocated or
written: the state dtypes a contract may name and the bytes of state one stream may carry
(:func:`check_state_bytes`), the longest hop and chunk, and the longest model name (:func:`check_name`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.errors import ArtifactError, UsageError

_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32, "bool": np.bool_,
              "uint8": np.uint8, "int8": np.int8, "float64": np.float64}


MAX_HOP_S = 10.0
"""float: the longest hop a contract may declare (seconds at its sample rate): a hop is one chunk, allocated
whole (an edited ``cosyedge.hop_samples`` of 1e12 asked numpy for 3.64 TiB)."""

MAX_STATE_BYTES_PER_STREAM = 256 << 20
"""int: the most state one stream may carry between chunks, bytes (256 MiB: every state at batch 1 together; the
largest model cosyedge streams carries well under 1 MiB, a long attention cache some MiB). A contract, a graph or a
``--state NAME=SHAPE`` that declares more is refused before anything is allocated (a 2^40-sample state asked numpy
for 4 TiB); :func:`check_state_bytes`."""


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.4g} MiB" if nbytes < 1 << 40 else f"{nbytes / (1 << 40):.4g} TiB"


def state_nbytes(shape: list, dtype: str = "float32") -> int:
    """Bytes of one stream's state of ``shape`` (``"N"`` and any other non-integer size count as 1) and numpy dtype
    name ``dtype`` (unknown names count as float32), computed without allocating anything (int)."""
    import math

    dims = [int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 else 1 for d in shape]
    return math.prod(dims) * np.dtype(_NP_DTYPES.get(str(dtype), np.float32)).itemsize


def check_state_bytes(states: list[tuple[str, list, str]], where: str, error: type = ArtifactError,
                      fix: str = "") -> int:
    """Refuse states that carry more than :data:`MAX_STATE_BYTES_PER_STREAM` per stream, before any allocation.

    Args:
        states (list[tuple[str, list, str]]): (name, shape, numpy dtype name) of each state; the shape at batch 1
            or with ``"N"`` for the batch axis (taken as 1); any other non-integer size counts as 1.
        where (str): The model, as the message names it.
        error (type): The error class to raise: :class:`ArtifactError` (exit 3) for a file's shapes,
            :class:`UsageError` (exit 2) for shapes the user gave.
        fix (str): What to do, appended to the message (e.g. ``"give --state cache=SHAPE"``).
    Returns:
        int: bytes per stream (the sum over ``states``).
    Raises:
        ArtifactError | UsageError: one line naming the largest state, its shape and size, and the bound.
    """
    sizes = [(state_nbytes(shape, dtype), name, shape, dtype) for name, shape, dtype in states]
    total = sum(n for n, *_ in sizes)
    if total > MAX_STATE_BYTES_PER_STREAM:
        n, name, shape, dtype = max(sizes, key=lambda t: t[0])
        raise error(f"{where}: state '{name}' {list(shape)} {dtype} is {_mib(n)} per stream"
                    f"{f' ({_mib(total)} with the other states)' if _mib(total) != _mib(n) else ''}, more than the "
                    f"{_mib(MAX_STATE_BYTES_PER_STREAM)} of state a stream may carry (MAX_STATE_BYTES_PER_STREAM)"
                    f"{': ' + fix if fix else ''}")
    return total


MAX_CHUNK_MS = 10_000.0
"""float: longest chunk accepted by :meth:`StreamContract.chunk_samples`, ms (a chunk is buffered whole; 10 s
bounds memory)."""


MAX_NAME_BYTES = 100
"""int: the longest model or engine name, UTF-8 bytes: it names the engine folder (``<name>-<precision>[-variant]-
<backend>``, a file name of at most 255 bytes on common file systems; ``build --name`` of 300 characters ended in exit 3
"File name too long")."""


def name_too_long(name: str, what: str = "--name") -> str | None:
    """The one-line refusal of a name longer than :data:`MAX_NAME_BYTES` (str), or None when it fits."""
    n = len(name.encode("utf-8", "surrogatepass"))
    if n <= MAX_NAME_BYTES:
        return None
    size = f"{len(name)} characters" + (f", {n} bytes in UTF-8" if n != len(name) else "")
    return (f"{what} {name[:24]!r}... is {size}; a model name holds at most {MAX_NAME_BYTES} bytes (it names the "
            f"engine folder): give a shorter one")


def check_name(name: Any) -> None:
    """Refuse an empty or blank model name (``--name ''``), one that is no plain folder name (``a/b``, ``../x``,
    ``.``: the rule of :func:`cosyedge.builders.names.check_engine_name`, which ``build`` applies to the engine folder
    the name gives), or one longer than :data:`MAX_NAME_BYTES`: it names the engine folder and every message.

    Raises:
        UsageError: one line (exit 2).
    """
    if name is not None and not str(name).strip():
        raise UsageError(f"--name {name!r} is empty: give a model name (default: the file stem)")
    if name is not None and (any(ch in str(name) for ch in "/\\") or str(name) in (".", "..")):
        raise UsageError(f"--name {name!r} must be a plain folder name (no path separators, not '.' or '..'): it "
                         f"names the engine folder 'cosyedge build' writes")
    too_long = name_too_long(str(name)) if name is not None else None
    if too_long:
        raise UsageError(too_long)
