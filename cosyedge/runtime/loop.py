"""The one chunk loop that streams inputs through a stream graph and feeds its states back.

Every place that streams a graph by hand (the streamify proof, adopt's reference and proof, INT8
calibration, ``cosyedge compare``) calls :func:`stream` with its own ``infer``: any ``feeds -> dict``
callable (an ONNX Runtime ``sess.run`` wrapped to return a dict, a Polygraphy ``runner.infer``, a
session's ``push``). The loop cuts each input into chunks along its time axis, feeds the current states
(or forced ones: teacher forcing), runs ``infer`` and carries each state output to its state input.

Source: k2-fsa/icefall ``egs/librispeech/ASR/zipformer/onnx_pretrained-streaming.py`` (the state loop:
each call's new caches are the next call's caches).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np


def stream(infer: Callable[[dict], dict], contract: Any, inputs: dict[str, np.ndarray], chunk: int, *,
           states: dict[str, np.ndarray] | None = None, forced_states: list[dict] | None = None,
           zero: Iterable[str] = (), pairs: list[tuple[str, str]] | None = None,
           axes: dict[str, int] | None = None, outputs: Iterable[str] | None = None,
           on_chunk: Callable[[int, dict, dict], None] | None = None,
           on_error: Callable[[Exception, int], Exception] | None = None,
           copy_states: bool = False, chunks: dict[str, int] | None = None,
           copy_outputs: bool = True) -> list[dict[str, np.ndarray]]:
    """Stream ``inputs`` chunk by chunk through ``infer``, each chunk's state outputs feeding the next chunk.

    Args:
        infer (Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]): Runs one chunk: feeds by input
            name (the chunk's inputs and the state inputs) to outputs by name (must include every state
            output).
        contract (StreamContract | None): Gives the state pairs (``states[i].input``/``.output``) and their
            zero initial values (``zeros(1)``, batch 1). May be None when ``pairs`` and ``states`` are given.
        inputs (dict[str, np.ndarray]): Full-length inputs by name; the number of ticks is the length of
            the first input along its time axis.
        chunk (int): Ticks (samples for audio) per call; the last chunk is shorter when the length is not
            a multiple (each input is sliced ``[start:start + chunk]``).
        states (dict[str, np.ndarray] | None): Initial value per state input. Defaults to the contract's
            zeros at batch 1.
        forced_states (list[dict[str, np.ndarray]] | None): Teacher forcing: the state inputs to feed at
            chunk k (``forced_states[k]``) instead of the carried ones.
        zero (Iterable[str]): State inputs reset to their initial value before every chunk (the carry test:
            a state that is never carried).
        pairs (list[tuple[str, str]] | None): (state input, state output) pairs; defaults to the
            contract's.
        axes (dict[str, int] | None): Time axis per input name; an input not named uses its last axis.
        outputs (Iterable[str] | None): Outputs kept in the returned per-chunk dicts (None: all).
        on_chunk (Callable[[int, dict, dict], None] | None): Called as ``on_chunk(k, feeds, results)``
            after each chunk; when given, nothing is collected and the return value is ``[]``.
        on_error (Callable[[Exception, int], Exception] | None): Maps an exception raised by ``infer`` on
            chunk ``k`` to the one-line error raised instead (``from None``); None lets it through.
        copy_states (bool): Copy each state output before feeding it back (for runners that reuse their
            output buffers, e.g. Polygraphy's).
        chunks (dict[str, int] | None): Ticks per call for inputs whose rate differs from the first input's
            (e.g. feature frames beside samples); an input not named takes ``chunk``. The number of calls is
            set by the first input: ``ceil(length / its chunk)``.
        copy_outputs (bool): ``True`` (default): each kept output is copied before it is collected, so the list
            holds arrays of its own even when ``infer`` reuses its output buffers (Polygraphy runners,
            ``session.push(..., copy=False)``). ``False``: collect the arrays ``infer`` returned (for an ``infer``
            that returns new arrays on every call, e.g. ``sess.run``). ``on_chunk`` always gets ``infer``'s arrays
            (valid until the next chunk).
    Returns:
        list[dict[str, np.ndarray]]: per chunk, the kept outputs (copies unless ``copy_outputs`` is False).
    Raises:
        Exception: what ``on_error`` returns for a failing chunk (or ``infer``'s own exception).
    """
    if pairs is None:
        pairs = [(s.input, s.output) for s in contract.states]
    if states is None:
        states = {s.input: s.zeros(1) for s in contract.states}
    init = dict(states)
    cur = dict(states)
    zero = set(zero)
    axes = axes or {}
    chunks = chunks or {}
    first = next(iter(inputs))
    calls = -(-inputs[first].shape[axes.get(first, -1)] // chunks.get(first, chunk))
    keep = None if outputs is None else list(outputs)
    collected: list[dict[str, np.ndarray]] = []
    for k in range(calls):
        st = forced_states[k] if forced_states is not None else cur
        feeds = {}
        for name, arr in inputs.items():
            step = chunks.get(name, chunk)
            idx = [slice(None)] * arr.ndim
            idx[axes.get(name, -1)] = slice(k * step, (k + 1) * step)
            feeds[name] = np.ascontiguousarray(arr[tuple(idx)])
        for name, v in st.items():
            feeds[name] = init[name] if name in zero else v
        try:
            res = infer(feeds)
        except Exception as err:  # backends raise their own exception types
            if on_error is None:
                raise
            raise on_error(err, k) from None
        if on_chunk is not None:
            on_chunk(k, feeds, res)
        else:
            kept = res if keep is None else {n: res[n] for n in keep if n in res}
            collected.append({n: np.array(v, copy=True) for n, v in kept.items()} if copy_outputs else kept)
        if forced_states is None:
            cur = {i: (np.array(res[o], copy=True) if copy_states else res[o]) for i, o in pairs}
    return collected
