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
