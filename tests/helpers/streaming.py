"""Stream loops for tests: a stream ONNX run chunk by chunk with its states fed back, either with raw ONNX Runtime
(independent of cosyedge.runtime) or through :class:`cosyedge.runtime.ort.OrtStreamSession`."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def ort_session(path: Path, threads: int | None = None):
    """A CPU ``onnxruntime.InferenceSession`` of ``path``; ``threads`` sets intra_op_num_threads (None: ORT's)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def stream_feeds(path: Path, contract, feeds: dict[str, np.ndarray], frames: int,
                 threads: int | None = None) -> dict[str, np.ndarray]:
    """Raw ONNX Runtime streaming of every stream input in ``feeds`` (name -> full input, batch first), ``frames``
    frames per chunk along each input's time axis (the contract's), every state starting at its zeros and fed back.
    Returns each stream output concatenated on its time axis."""
    sess = ort_session(path, threads)
    names = [o.name for o in sess.get_outputs()]
    ios = {i.name: i for i in contract.stream_inputs}
    first = next(iter(feeds))
    total = feeds[first].shape[ios[first].time_axis]
    states = {s.input: s.zeros(feeds[first].shape[0]) for s in contract.states}
    parts = {o.name: [] for o in contract.stream_outputs}
    for start in range(0, total, frames):
        feed = dict(states)
        for name, x in feeds.items():
            feed[name] = np.ascontiguousarray(np.take(x, np.arange(start, start + frames), axis=ios[name].time_axis))
        res = dict(zip(names, sess.run(None, feed)))
        for o in contract.stream_outputs:
            parts[o.name].append(res[o.name])
        states = {s.input: res[s.output] for s in contract.states}
    return {o.name: np.concatenate(parts[o.name], axis=o.time_axis) for o in contract.stream_outputs}


def stream_frames(path: Path, contract, x: np.ndarray, axis: int, chunk: int,
                  threads: int | None = None) -> np.ndarray:
    """Raw ONNX Runtime streaming of the contract's one stream input: ``x`` (batch first) cut into whole chunks of
    ``chunk`` frames along ``axis`` (a partial last chunk is left out), every state starting at its zeros (batch
    ``x.shape[0]``) and fed back. Returns the contract's output concatenated on its time axis."""
    sess = ort_session(path, threads)
    names = [o.name for o in sess.get_outputs()]
    out_axis = next(o.time_axis for o in contract.stream_outputs if o.name == contract.output)
    states = {s.input: s.zeros(x.shape[0]) for s in contract.states}
    parts = []
    t = x.shape[axis]
    for start in range(0, t - t % chunk, chunk):
        feed = {contract.input: np.ascontiguousarray(np.take(x, np.arange(start, start + chunk), axis=axis)),
                **states}
        res = dict(zip(names, sess.run(None, feed)))
        parts.append(res[contract.output])
        states = {s.input: res[s.output] for s in contract.states}
    return np.concatenate(parts, axis=out_axis)


def session_stream(path: Path, x: np.ndarray, chunk: int, name: str | None = None, batch: int = 1) -> np.ndarray:
    """Stream ``batch`` waveforms ``x`` (reshaped to (batch, L)) through an OrtStreamSession in whole chunks of
    ``chunk`` samples (a partial last chunk is left out); returns output ``name`` (default: the contract's)
    concatenated on its time axis."""
    from cosyedge.runtime.ort import OrtStreamSession

    x = np.asarray(x).reshape(batch, -1)
    with OrtStreamSession(path, chunk_samples=chunk, batch=batch) as s:
        c = s.contract
        name = name or c.output
        ax = next(o.time_axis for o in c.stream_outputs if o.name == name)
        return np.concatenate([s.push(np.ascontiguousarray(x[:, i:i + chunk].reshape(batch, 1, chunk)))[name].copy()
                               for i in range(0, x.shape[-1] - chunk + 1, chunk)], axis=ax)
