"""Proof that a stream graph computes what its full-sequence graph computes, chunk by chunk.

Every streamify run ends here before anything is written. The full-sequence graph runs once on an input
of ``L`` ticks; the stream graph runs on the same input cut into chunks of the smallest allowed length
(the total stride) and of a larger one, starting from the contract's initial states and feeding every
``state_out`` back. Each output of the stream, shifted by its delay, must equal the full output on the
frames both have: max abs error <= ``atol * max(1, peak)``. Waveform inputs get real speech (the bundled
demo recording, noise and speech, resampled to the model rate), other inputs seeded Gaussian values; ``L``
covers at least 8 receptive fields of the stateful layers and 64 of the largest chunks, so a norm or sum
over time that is exact on the first chunk (a cumulative norm) still shows.

On a mismatch the error is bisected: every tensor that exists in both graphs is compared at its own delay
and the first one in graph order whose error exceeds the tolerance is named (as ``compare --mark-all`` does
for precision).

Source: sonos/tract ``pulse`` tests (pulsed == full model after the delay).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from cosyedge.errors import ArtifactError, first_line
from cosyedge.runtime.ort import session_from_onnx
from cosyedge.surgery.facts import mark_all_outputs

ATOL = 1e-4
"""float: default tolerance, relative to max(1, peak |full output|)."""


def _session(model: Any) -> Any:
    return session_from_onnx(model, threads=1, inter_threads=1, log_severity=4)


def stream_run(model: Any, contract: Any, inputs: dict[str, np.ndarray], chunk_ticks: int,
               ticks_per_frame: dict[str, Any], mark_all: bool = False) -> dict[str, np.ndarray]:
    """Stream ``inputs`` through a stream graph with raw ONNX Runtime; return every output concatenated
    over chunks along its time axis (with ``mark_all``, every intermediate tensor too, along the axis
    given by ``ticks_per_frame``'s keys).

    Args:
        model (onnx.ModelProto): The stream graph.
        contract (StreamContract): Its contract (inputs, outputs, states).
        inputs (dict[str, np.ndarray]): Full-length inputs (batch 1), time on each input's time axis.
        chunk_ticks (int): Input ticks per chunk; the input length must be a multiple of it.
        ticks_per_frame (dict[str, tuple[int, Fraction]]): (time axis, frames per tick) by tensor name, for
            the tensors to collect.
        mark_all (bool): Collect intermediate tensors as well.
    Returns:
        dict[str, np.ndarray]: by tensor name.
    Raises:
        ArtifactError: ONNX Runtime cannot load or run the stream graph.
    """
    m = mark_all_outputs(model)[0] if mark_all else model
    try:
        sess = _session(m)
    except Exception as err:
        raise ArtifactError(f"ONNX Runtime cannot load the stream graph ({first_line(err)})") from None
    names = [o.name for o in sess.get_outputs()]
    want = [n for n in names if n in ticks_per_frame]
    states = {s.input: s.zeros(1) for s in contract.states}
    io = {i.name: i for i in contract.stream_inputs}
    total = next(iter(inputs.values())).shape[io[next(iter(inputs))].time_axis]
    parts: dict[str, list] = {n: [] for n in want}
    for start in range(0, total, chunk_ticks):
        feed = dict(states)
        for name, arr in inputs.items():
            ax = io[name].time_axis
            idx = [slice(None)] * arr.ndim
            idx[ax] = slice(start, start + chunk_ticks)
            feed[name] = np.ascontiguousarray(arr[tuple(idx)])
        try:
            res = dict(zip(names, sess.run(None, feed)))
        except Exception as err:
            raise ArtifactError(f"ONNX Runtime cannot run the stream graph on a chunk of {chunk_ticks} ticks "
                                f"({first_line(err)})") from None
        for n in want:
            parts[n].append(res[n])
        states = {s.input: res[s.output] for s in contract.states}
    return {n: np.concatenate(v, axis=ticks_per_frame[n][0]) for n, v in parts.items() if v}


def compare_aligned(full: np.ndarray, stream: np.ndarray, axis: int, delay: int) -> tuple[float, float, float]:
    """(max abs error, SNR dB, peak |full|) of ``stream`` shifted by ``delay`` frames against ``full``,
    over the frames both have along ``axis`` (a negative delay: the stream starts ``-delay`` frames into the
    full tensor). SNR is capped at 200 dB (identical)."""
    s0, f0 = (delay, 0) if delay >= 0 else (0, -delay)  # an early tensor (delay < 0) lacks the pad's frames
    n = min(full.shape[axis] - f0, stream.shape[axis] - s0)
    if n <= 0:
        return float("inf"), -float("inf"), 0.0
    a = np.take(full, np.arange(f0, f0 + n), axis=axis).astype(np.float64)
    b = np.take(stream, np.arange(s0, s0 + n), axis=axis).astype(np.float64)
    err = b - a
    peak = float(np.abs(a).max()) if a.size else 0.0
    e2, s2 = float((err ** 2).sum()), float((a ** 2).sum())
    snr = 200.0 if e2 == 0 else min(200.0, 10 * math.log10(max(s2, 1e-300) / e2))
    return float(np.abs(err).max()) if err.size else 0.0, snr, peak


@dataclasses.dataclass
class ProofResult:
    """Outcome of :func:`prove`.

    Attributes:
        ok (bool): Every output within tolerance at every chunk length.
        rows (list[dict]): One per (output, chunk ticks): max_abs, snr_db, peak, ok.
        first_bad (str): When not ok: the first diverging tensor, its producer and error (one line).
        ticks (int): Input length used (ticks).
    """

    ok: bool
    rows: list
    first_bad: str = ""
    ticks: int = 0

    def summary(self) -> dict:
        """JSON-able summary for the contract metadata: worst max abs error and SNR, chunks, length."""
        return {"max_abs": max(r["max_abs"] for r in self.rows), "snr_db": min(r["snr_db"] for r in self.rows),
                "chunks_ticks": sorted({r["chunk_ticks"] for r in self.rows}), "ticks": self.ticks,
                "outputs": sorted({r["output"] for r in self.rows})}


def prove(full_model: Any, stream_model: Any, contract: Any, inputs: dict[str, np.ndarray], chunks: list[int],
          out_facts: dict[str, tuple[int, Any, int]], all_facts: dict[str, tuple[int, Any, int]] | None = None,
          order: list[str] | None = None, producers: dict[str, str] | None = None,
          atol: float = ATOL) -> ProofResult:
    """Run both graphs and compare (module doc).

    Args:
        full_model (onnx.ModelProto): Full-sequence graph.
        stream_model (onnx.ModelProto): Stream graph.
        contract (StreamContract): The stream graph's contract.
        inputs (dict[str, np.ndarray]): Full inputs (batch 1), length a multiple of every chunk.
        chunks (list[int]): Chunk lengths to try, in input ticks.
        out_facts (dict[str, tuple]): (time axis, frames per tick, delay frames) per output.
        all_facts (dict[str, tuple] | None): The same for every tensor of the full graph (for bisection).
        order (list[str] | None): Tensor names in graph order (bisection).
        producers (dict[str, str] | None): "Op node 'name'" by tensor name (bisection).
        atol (float): Tolerance relative to max(1, peak).
    Returns:
        ProofResult: the rows; ``first_bad`` names the first diverging tensor when not ok.
    Raises:
        ArtifactError: a graph cannot be run.
    """
    try:
        full = dict(zip([o.name for o in full_model.graph.output], _session(full_model).run(None, inputs)))
    except Exception as err:
        raise ArtifactError(f"ONNX Runtime cannot run the full-sequence graph ({first_line(err)})") from None
    rows, ok, bad_chunk = [], True, None
    ticks = next(iter(inputs.values())).shape[contract.stream_inputs[0].time_axis]
    for chunk in chunks:
        got = stream_run(stream_model, contract, inputs, chunk, {n: f[:2] for n, f in out_facts.items()})
        for name, (axis, _rate, delay) in out_facts.items():
            mx, snr, peak = compare_aligned(full[name], got[name], axis, delay)
            good = mx <= atol * max(1.0, peak)
            rows.append({"output": name, "chunk_ticks": chunk, "max_abs": mx, "snr_db": snr, "peak": peak,
                         "ok": bool(good)})
            if not good and ok:
                ok, bad_chunk = False, chunk
    result = ProofResult(ok, rows, ticks=ticks)
    if not ok and all_facts and order:
        result.first_bad = bisect(full_model, stream_model, contract, inputs, bad_chunk, all_facts, order,
                                  producers or {}, atol)
    return result


def bisect(full_model: Any, stream_model: Any, contract: Any, inputs: dict[str, np.ndarray], chunk: int,
           all_facts: dict, order: list[str], producers: dict[str, str], atol: float) -> str:
    """Name the first tensor (graph order) whose streamed values differ from the full graph's beyond
    tolerance, with its producer and error (str; "" when none is found)."""
    from cosyedge.surgery.facts import run_all

    full = run_all(full_model, inputs)
    got = stream_run(stream_model, contract, inputs, chunk, {n: f[:2] for n, f in all_facts.items()},
                     mark_all=True)
    for name in order:
        if name not in got or name not in full or name not in all_facts:
            continue
        axis, _rate, delay = all_facts[name]
        if delay is None or not np.issubdtype(np.asarray(full[name]).dtype, np.floating):
            continue
        mx, snr, peak = compare_aligned(full[name], got[name], axis, delay)
        if mx > atol * max(1.0, peak):
            return (f"first diverging tensor '{name}' (output of {producers.get(name, '?')}): max abs error "
                    f"{mx:.3g}, SNR {snr:.1f} dB at chunks of {chunk} ticks")
    return ""
