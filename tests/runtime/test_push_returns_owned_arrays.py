"""Every ``push`` returns arrays the caller owns, so the natural
``outs.append(session.push(x)["enhanced"])`` keeps every chunk (it used to keep N references to one buffer,
overwritten by each push: N copies of the last chunk). Reusing the session's buffers is the opt-in
``push(..., copy=False)`` (``StreamPool.tick/push(..., copy=False)``), and it still reuses them.

Covered: OrtStreamSession on the bundled reference model (batch 1 and batch 2), an adopted Scan-over-hops model
pushed several hops per call, a model whose streaming outputs come back as a dict (several outputs), one whose
output is FP16 (cast into a float32 buffer), StreamPool (audio and dict outputs) and ``loop.stream``. The TensorRT
session is covered on the fake stack in ``tests/trt/test_push_returns_owned_arrays.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cosyedge.artifacts import StreamContract, StreamIO
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime import OrtStreamSession, StreamPool, loop, stream_array
from tests.helpers import models

CHUNKS = 6


def _speech(n: int, rows: int | None = None) -> np.ndarray:
    from cosyedge.surgery.proof import demo_audio

    x = demo_audio(16000, n * (rows or 1) + 977)[977:].astype(np.float32)
    return x if rows is None else x.reshape(rows, n)


def _assert_distinct(arrays: list[np.ndarray]) -> None:
    """No two of ``arrays`` share memory (each is the caller's), and they are not all one chunk."""
    for i, a in enumerate(arrays):
        for b in arrays[i + 1:]:
            assert not np.shares_memory(a, b)
    assert any(not np.array_equal(arrays[0], a) for a in arrays[1:])


def _reference_chunks(session_kwargs: dict, x: np.ndarray, chunk: int, name: str) -> list[np.ndarray]:
    """Each chunk's output of a fresh session, copied by hand right after its push (the old safe idiom)."""
    with OrtStreamSession(**session_kwargs) as s:
        return [s.push(np.ascontiguousarray(x[..., i:i + chunk]), copy=False)[name].copy()
                for i in range(0, x.shape[-1], chunk)]


# ------------------------------------------------------------------------------------------ OrtStreamSession
@pytest.mark.parametrize("batch", [1, 2])
def test_appended_pushes_of_the_reference_model_keep_every_chunk(batch):
    with OrtStreamSession(REFERENCE_STREAM_ONNX, batch=batch) as s:
        c, name = s.chunk_samples, s.contract.output
        x = _speech(CHUNKS * c, rows=batch)[:, None, :]  # (batch, 1, T)
        outs = []
        for i in range(CHUNKS):
            outs.append(s.push(np.ascontiguousarray(x[:, :, i * c:(i + 1) * c]))[name])  # kept, not copied
    _assert_distinct(outs)
    want = _reference_chunks({"model_path": REFERENCE_STREAM_ONNX, "batch": batch}, x, c, name)
    for got, ref in zip(outs, want):
        assert got.shape == (batch, 1, c) and got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, ref)
    # the one-shot helper gives the same stream
    with OrtStreamSession(REFERENCE_STREAM_ONNX, batch=batch) as s:
        whole = stream_array(s, x[:, 0, :])
    np.testing.assert_array_equal(np.concatenate(outs, axis=2)[:, 0, :], whole)


def test_copy_false_opts_in_to_the_sessions_reused_buffer():
    """The opt-in: ``push(x, copy=False)`` returns the session's output buffer, the same memory every push (so
    keeping it across pushes keeps the last chunk only); the dict itself is new on every call."""
    with OrtStreamSession(REFERENCE_STREAM_ONNX) as s:
        c, name = s.chunk_samples, s.contract.output
        x = _speech(3 * c).reshape(3, 1, 1, c)
        first = s.push(x[0], copy=False)
        a = first[name].copy()
        second = s.push(x[1], copy=False)
        assert first is not second
        assert np.shares_memory(first[name], second[name])
        assert not np.array_equal(first[name], a)  # the first result now holds the second chunk
        owned = s.push(x[2])[name]
        assert not np.shares_memory(owned, second[name])


def test_an_adopted_scan_session_pushing_several_hops_returns_owned_arrays(tmp_path):
    """A Scan-over-hops graph (``cosyedge adopt`` of a packed-state model), 4 hops per push, 3 streams per batch."""
    from cosyedge.surgery.adopt import adopt
    from tests.surgery.test_adopt import HOP, SR, packed_model, packed_reference

    out = tmp_path / "packed.stream.onnx"
    adopt(packed_model(tmp_path / "packed.onnx"), out, sample_rate_hz=SR, hop_samples=HOP)
    assert "Scan" in {n.op_type for n in onnx.load(str(out)).graph.node}
    chunk = 4 * HOP
    x = _speech(chunk * CHUNKS, rows=3)
    with OrtStreamSession(out, chunk_samples=chunk, batch=3) as s:
        outs = [s.push(np.ascontiguousarray(x[:, None, i:i + chunk]))["enhanced"] for i in range(0, x.shape[1], chunk)]
    _assert_distinct(outs)
    got = np.concatenate(outs, axis=2)[:, 0, :]
    for b in range(3):
        np.testing.assert_allclose(got[b], packed_reference(x[b].astype(np.float64)), atol=1e-5)


def _two_output_model(path: Path) -> Path:
    """The two-state model with its hidden signal ``h`` (the first conv, tanh) exposed as a second streaming output
    and its input declared as features: ``push`` takes ``{"noisy": (N, 1, T)}`` and returns both outputs."""
    base = models.make_two_state_model(path.with_name("base_" + path.name), hop=4)
    m = onnx.load(str(base))
    m.graph.output.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 1, "T"]))
    c = StreamContract.from_onnx(base)
    c.inputs = [StreamIO(models.INPUT, ["N", 1, "T"], "float32", 2, 4, 0, "features")]
    c.outputs = [StreamIO(models.OUTPUT, ["N", 1, "T"], "float32", 2, 4, 0, "features"),
                 StreamIO("h", ["N", 1, "T"], "float32", 2, 4, 0, "features")]
    c.write_to_onnx(m)
    onnx.save(m, str(path))
    return path


def test_a_session_with_several_outputs_returns_owned_arrays_for_each(tmp_path):
    model = _two_output_model(tmp_path / "two_out.onnx")
    x = _speech(4 * CHUNKS)
    with OrtStreamSession(model, chunk_samples=4) as s:
        assert not s.contract.is_audio
        outs = [s.push({models.INPUT: x[i:i + 4].reshape(1, 1, 4)}) for i in range(0, x.size, 4)]
        shared = [s.push({models.INPUT: x[i:i + 4].reshape(1, 1, 4)}, copy=False) for i in range(2)]
    for name in (models.OUTPUT, "h"):
        _assert_distinct([o[name] for o in outs])
    np.testing.assert_allclose(np.concatenate([o[models.OUTPUT] for o in outs], axis=2).reshape(-1),
                               models.two_state_reference(x)[0], atol=1e-5)
    assert np.shares_memory(shared[0]["h"], shared[1]["h"]) and shared[0] is not shared[1]


def _fp16_output_model(path: Path) -> Path:
    """The two-state model with its output cast to FP16 (as an FP16 build may give it): the session returns it
    cast to float32."""
    base = models.make_two_state_model(path.with_name("base_" + path.name), hop=4)
    m = onnx.load(str(base))
    g = m.graph
    for n in g.node:
        n.output[:] = ["enh32" if o == models.OUTPUT else o for o in n.output]
    g.node.append(helper.make_node("Cast", ["enh32"], [models.OUTPUT], to=TensorProto.FLOAT16, name="to_fp16"))
    g.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.save(m, str(path))
    return path


def test_an_fp16_output_comes_back_as_owned_float32(tmp_path):
    model = _fp16_output_model(tmp_path / "fp16_out.onnx")
    x = _speech(4 * CHUNKS)
    with OrtStreamSession(model, chunk_samples=4) as s:
        outs = [s.push(x[i:i + 4].reshape(1, 1, 4))[models.OUTPUT] for i in range(0, x.size, 4)]
        shared = [s.push(x[:4].reshape(1, 1, 4), copy=False)[models.OUTPUT] for _ in range(2)]
    assert all(a.dtype == np.float32 for a in outs + shared)
    _assert_distinct(outs)
    np.testing.assert_allclose(np.concatenate(outs, axis=2).reshape(-1), models.two_state_reference(x)[0],
                               atol=2e-3)
    assert np.shares_memory(shared[0], shared[1])  # the opt-in: one preallocated float32 buffer, no allocation


# ------------------------------------------------------------------------------------------------ StreamPool
def test_stream_pool_results_kept_across_ticks_are_every_tick():
    with OrtStreamSession(REFERENCE_STREAM_ONNX) as s:
        c = s.chunk_samples
    xs = _speech(CHUNKS * c, rows=2)
    with StreamPool(REFERENCE_STREAM_ONNX, max_streams=2) as pool:
        a, b = pool.join(), pool.join()
        ticks = [pool.push({a: xs[0, i:i + c], b: xs[1, i:i + c]}) for i in range(0, xs.shape[1], c)]
        shared = [pool.push({a: xs[0, :c], b: xs[1, :c]}, copy=False) for _ in range(2)]
    kept = [t[a] for t in ticks] + [t[b] for t in ticks]
    _assert_distinct(kept)
    for sid, row in ((a, 0), (b, 1)):
        want = _reference_chunks({"model_path": REFERENCE_STREAM_ONNX}, xs[row][None, None, :], c, "enhanced")
        got = np.concatenate([t[sid] for t in ticks])
        # the pool runs a batched rewrite of the graph: equal to rounding, not bit for bit
        np.testing.assert_allclose(got, np.concatenate(want, axis=2).reshape(-1), atol=1e-4)
    # the opt-in: views of the pool's output buffer, the same memory on every tick
    assert np.shares_memory(shared[0][a], shared[1][a]) and not np.shares_memory(shared[0][a], shared[0][b])


def test_stream_pool_dict_outputs_are_owned(tmp_path):
    model = _two_output_model(tmp_path / "two_out.onnx")
    x = _speech(4 * CHUNKS)
    with StreamPool(model, max_streams=2, chunk_samples=4) as pool:
        sid = pool.join()
        ticks = [pool.push({sid: {models.INPUT: x[i:i + 4].reshape(1, 4)}})[sid] for i in range(0, x.size, 4)]
        assert pool.tick(copy=False) == {}  # nothing queued
        shared = [pool.push({sid: {models.INPUT: x[i:i + 4].reshape(1, 4)}}, copy=False)[sid] for i in (0, 4)]
    for name in (models.OUTPUT, "h"):
        _assert_distinct([t[name] for t in ticks])
    np.testing.assert_allclose(np.concatenate([t[models.OUTPUT] for t in ticks]).reshape(-1),
                               models.two_state_reference(x)[0], atol=1e-5)
    assert np.shares_memory(shared[0]["h"], shared[1]["h"])  # the opt-in reuses the pool's buffer


# -------------------------------------------------------------------------------------------------- loop
def test_loop_stream_collects_copies_of_reused_buffers():
    """``loop.stream`` with an ``infer`` that reuses its buffer (a Polygraphy runner, ``push(copy=False)``) still
    collects every chunk; ``copy_outputs=False`` collects what ``infer`` returned."""
    buf = np.zeros(3, np.float32)

    def infer(feeds):
        buf[:] = feeds["x"][0]
        return {"y": buf}

    x = np.arange(12, dtype=np.float32).reshape(1, 12)
    got = loop.stream(infer, None, {"x": x}, 3, states={}, pairs=[])
    np.testing.assert_array_equal(np.concatenate([g["y"].reshape(1, 3) for g in got], axis=1), x)
    raw = loop.stream(infer, None, {"x": x}, 3, states={}, pairs=[], copy_outputs=False)
    assert all(r["y"] is buf for r in raw)
