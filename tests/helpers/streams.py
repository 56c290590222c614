"""Shared stream drivers for tests: one model's streams through single sessions and through a StreamPool."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def session_outputs(model: Path, streams: list[np.ndarray], chunk: int) -> list[np.ndarray]:
    """Each stream (float32 (T,), T a multiple of ``chunk``) alone through one OrtStreamSession, reset between
    streams: the audio output per stream, float32 (T,)."""
    from cosyedge.runtime.ort import OrtStreamSession

    out = []
    with OrtStreamSession(model, chunk_samples=chunk) as s:
        name = s.contract.output
        for a in streams:
            s.reset()
            out.append(np.concatenate([s.push(np.ascontiguousarray(a[None, None, i:i + chunk]))[name][0, 0].copy()
                                       for i in range(0, a.size, chunk)]))
    return out


def pool_outputs(model: Path, streams: list[np.ndarray], chunk: int, max_streams: int) -> list[np.ndarray]:
    """All streams (float32 (T,), equal T, a multiple of ``chunk``) together through one StreamPool, one chunk of
    each per tick: the output per stream, float32 (T,)."""
    from cosyedge.runtime.pool import StreamPool

    with StreamPool(model, max_streams=max_streams, chunk_samples=chunk) as pool:
        ids = [pool.join() for _ in streams]
        got = [[] for _ in streams]
        for i in range(0, streams[0].size, chunk):
            out = pool.push({sid: a[i:i + chunk] for sid, a in zip(ids, streams)})
            for k, sid in enumerate(ids):
                got[k].append(out[sid])
    return [np.concatenate(g) for g in got]


def chunked_equals_full(full_onnx: Path, stream_onnx: Path, x: np.ndarray, chunk_ticks: list[int]) -> float:
    """Stream ``x`` (the full graph's one input, batch first, any batch) through ``stream_onnx`` with an
    :class:`~cosyedge.runtime.ort.OrtStreamSession` in chunks of each of ``chunk_ticks`` input ticks (frames of a
    feature input, samples of a waveform), and compare every streaming output with the full graph run by plain ONNX
    Runtime on all of ``x``, the stream ``delay_frames`` late.

    Args:
        full_onnx (Path): The full-sequence model.
        stream_onnx (Path): Its streamified model (the contract in its metadata).
        x (np.ndarray): The full graph's input, its time axis as the contract says (an (N, T) waveform, which the
            stream graph takes as (N, 1, T), is given as (N, T)); its length a multiple of every chunk.
        chunk_ticks (list[int]): Chunk lengths to try (input ticks).
    Returns:
        float: the largest absolute error over every chunk length, output and frame the stream has.
    Raises:
        AssertionError: a stream output has the wrong frame count.
    """
    import onnxruntime as ort

    from cosyedge.artifacts import StreamContract
    from cosyedge.runtime.ort import OrtStreamSession

    c = StreamContract.from_onnx(stream_onnx)
    inp = c.stream_inputs[0]
    per_tick = c.hop_samples // inp.frames_per_hop
    sess = ort.InferenceSession(str(full_onnx), providers=["CPUExecutionProvider"])
    full = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {inp.name: x})))
    worst = 0.0
    xs = x[:, None] if x.ndim + 1 == len(inp.shape) else x  # an (N, T) waveform streams as (N, 1, T)
    for chunk in chunk_ticks:
        got = {o.name: [] for o in c.stream_outputs}
        with OrtStreamSession(stream_onnx, chunk_samples=chunk * per_tick, batch=x.shape[0]) as s:
            for i in range(0, xs.shape[inp.time_axis], chunk):
                part = np.ascontiguousarray(np.take(xs, np.arange(i, i + chunk), axis=inp.time_axis))
                out = s.push(part if c.is_audio else {inp.name: part})
                for o in c.stream_outputs:
                    got[o.name].append(np.array(out[o.name]))
        for o in c.stream_outputs:
            y = np.concatenate(got[o.name], axis=o.time_axis)
            ref, t = full[o.name], o.time_axis
            if y.ndim == ref.ndim + 1 and y.shape[1] == 1:  # an (N, T) waveform output streams as (N, 1, T)
                y, t = y[:, 0], t - 1
            n = y.shape[t] - o.delay_frames
            assert n > 0 and n <= ref.shape[t], (o.name, y.shape, ref.shape)
            a = np.take(y, np.arange(o.delay_frames, o.delay_frames + n), axis=t)
            b = np.take(ref, np.arange(n), axis=t)
            worst = max(worst, float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()))
    return worst


def staggered_pool_outputs(model: Path, xs: list[np.ndarray], chunk: int, starts: dict[int, int],
                           ends: dict[int, int], max_streams: int) -> tuple[dict[int, np.ndarray], int]:
    """Streams joining and leaving one StreamPool at different ticks: stream ``k`` (float32 (T,) samples) joins at
    tick ``starts[k]`` and leaves after tick ``ends[k] - 1``, one ``chunk`` a tick. Returns its output (float32 (n,),
    concatenated) by ``k`` and the number of ticks that ran more than one stream in a batch."""
    from cosyedge.runtime.pool import StreamPool

    got: dict[int, list] = {k: [] for k in starts}
    with StreamPool(model, max_streams=max_streams, chunk_samples=chunk) as pool:
        sids, batches = {}, 0
        for t in range(max(ends.values())):
            for k, s in starts.items():
                if t == s:
                    sids[k] = pool.join()
            push = {sids[k]: xs[k][(t - starts[k]) * chunk:(t - starts[k] + 1) * chunk] for k in sids}
            out = pool.push(push)
            batches += len(push) > 1
            for k in list(sids):
                got[k].append(np.asarray(out[sids[k]]).reshape(-1).copy())
                if t + 1 == ends[k]:
                    pool.leave(sids.pop(k))
    return {k: np.concatenate(v) for k, v in got.items()}, batches


def feature_frames_streamed(model: Path, x: np.ndarray, axis: int, chunk: int) -> np.ndarray:
    """Push feature frames ``x`` (float32, batch first, every row a stream, time on ``axis``) ``chunk`` frames at a
    time through a new OrtStreamSession of ``model`` (input ``x``, output ``y``, one frame per 160-sample hop); the
    outputs joined on ``axis`` (a tail shorter than ``chunk`` is not pushed)."""
    from cosyedge.runtime import OrtStreamSession

    parts = []
    with OrtStreamSession(model, chunk_samples=chunk * 160, batch=x.shape[0]) as s:
        for i in range(0, x.shape[axis] - x.shape[axis] % chunk, chunk):
            sl = [slice(None)] * x.ndim
            sl[axis] = slice(i, i + chunk)
            parts.append(s.push({"x": np.ascontiguousarray(x[tuple(sl)])})["y"].copy())
    return np.concatenate(parts, axis=axis)


def run_streaming(onnx_path, contract, audio, chunk: int):
    """Stream ``audio`` (N, 1, T) float32 through a streaming ONNX with raw ONNX Runtime.

    Starts from ``StateSpec.zeros`` and feeds each ``state_out`` back as the matching ``state_in``;
    T must be a multiple of ``chunk``. Returns the concatenated audio output (N, 1, T') float32.
    Independent of cosyedge.runtime on purpose: it checks the ONNX itself.
    """
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    batch = audio.shape[0]
    states = {s.input: s.zeros(batch) for s in contract.states}
    outs = []
    for start in range(0, audio.shape[-1], chunk):
        feed = {contract.input: np.ascontiguousarray(audio[..., start:start + chunk], dtype=np.float32), **states}
        res = dict(zip(names, sess.run(None, feed)))
        outs.append(res[contract.output])
        states = {s.input: res[s.output] for s in contract.states}
    return np.concatenate(outs, axis=-1)
