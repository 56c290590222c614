"""StreamPool: N streams batched into one run per tick; each output equals that stream's solo run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cosyedge.artifacts import StateSpec, StreamContract
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.runtime import OrtStreamSession, stream_array
from cosyedge.runtime.pool import StreamPool
from tests.helpers import models

HOP = 4
ATOL = 1e-5
REFERENCE = Path(__file__).resolve().parents[2] / "cosyedge" / "models" / "reference.stream.onnx"


def make_axis1_model(path: Path, hop: int = HOP) -> Path:
    """The two-state model, but state 00 is stored time-first as (4, N, 1): its batch axis is the second.

    The graph transposes state_in.00 to (N, 1, 4) before the Concat and the new state back to (4, N, 1),
    so only a runtime that honours the contract's batch axis gives the right numbers for batch > 1
    (a reshape in place of the axis move would interleave the streams' histories).
    """
    base = models.make_two_state_model(path.with_name("base_" + path.name), hop=hop)
    m = onnx.load(str(base))
    g = m.graph
    for node in g.node:
        node.input[:] = ["s0_nc1" if i == "state_in.00" else i for i in node.input]
        node.output[:] = ["s0_out_nc1" if o == "state_out.00" else o for o in node.output]
    g.node.insert(0, helper.make_node("Transpose", ["state_in.00"], ["s0_nc1"], perm=[1, 2, 0], name="t_in"))
    g.node.append(helper.make_node("Transpose", ["s0_out_nc1"], ["state_out.00"], perm=[2, 0, 1], name="t_out"))
    for coll in (g.input, g.output):
        for vi in coll:
            if vi.name in ("state_in.00", "state_out.00"):
                vi.CopyFrom(helper.make_tensor_value_info(vi.name, TensorProto.FLOAT, [4, "N", 1]))
    contract = StreamContract.from_onnx(base)
    contract.states[0] = StateSpec("state_in.00", "state_out.00", [4, "N", 1], node="c0_conv")
    del m.metadata_props[:]
    contract.write_to_onnx(m)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pool_models")


@pytest.fixture(scope="module")
def two_state(model_dir):
    return models.make_two_state_model(model_dir / "two_state.onnx", hop=HOP)


@pytest.fixture(scope="module")
def axis1(model_dir):
    return make_axis1_model(model_dir / "axis1.onnx")


def _inputs(n_streams: int, chunks: int, chunk: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal(chunks * chunk) * (1 + i)).astype(np.float32) for i in range(n_streams)]


def _solo(model: Path, x: np.ndarray, chunk: int) -> np.ndarray:
    with OrtStreamSession(model, chunk_samples=chunk) as s:
        return stream_array(s, x)


def _run_schedule(pool: StreamPool, xs: list[np.ndarray], starts: list[int], skip=lambda i, t: False):
    """Stream i joins at tick starts[i], pushes one chunk per tick (unless skip(i, t)), leaves when done."""
    c = pool.chunk_samples
    ids, pos, outs = {}, [0] * len(xs), [[] for _ in xs]
    t = 0
    while any(p < x.size for p, x in zip(pos, xs)):
        for i, x in enumerate(xs):
            if t == starts[i]:
                ids[i] = pool.join()
            if i in ids and pos[i] < x.size and not skip(i, t):
                pool.submit(ids[i], x[pos[i]:pos[i] + c])
                pos[i] += c
        res = pool.tick()
        for i, sid in list(ids.items()):
            if sid in res:
                outs[i].append(res[sid])
            if pos[i] >= xs[i].size and pool.pending(sid) == 0:
                pool.leave(sid)
                del ids[i]
        t += 1
    return [np.concatenate(o) for o in outs]


@pytest.mark.parametrize("model_fixture", ["two_state", "axis1"])
def test_pool_outputs_equal_solo_runs_with_join_leave_and_gaps(request, model_fixture):
    model = request.getfixturevalue(model_fixture)
    chunk = 2 * HOP
    lengths = [10, 30, 20, 15, 12]  # chunks
    xs = [x[:n * chunk] for x, n in zip(_inputs(5, chunks=30, chunk=chunk), lengths)]
    starts = [0, 0, 3, 7, 12]  # join at different ticks, leave when the input ends; 4 reuses 0's slot
    with StreamPool(model, max_streams=4, chunk_samples=chunk) as pool:
        # stream 1 skips every third tick: other rows of the batch run without it, its state must wait
        outs = _run_schedule(pool, xs, starts, skip=lambda i, t: i == 1 and t % 3 == 2)
        assert pool.streams == []
        batches = pool.chunks_run / pool.ticks
        inplace = pool.inplace_ticks
    # both tick kinds ran: in place (compact slots, equal parity) and gathered (after a skipped tick the
    # parities differ; the non-first batch axis always gathers)
    assert (0 < inplace < pool.ticks) if model_fixture == "two_state" else inplace == 0
    assert batches > 2.0  # really batched
    for i, (x, y) in enumerate(zip(xs, outs)):
        solo = _solo(model, x, chunk)
        assert y.shape == x.shape
        assert np.abs(y - solo).max() <= ATOL, f"stream {i}"
    # the streams differ, so a state leak between them would show: outputs are far apart
    assert np.abs(outs[0] - outs[1][:outs[0].size]).max() > 0.1


def test_pool_state_does_not_leak_into_a_reused_slot(two_state):
    chunk = HOP
    x_old, x_new = _inputs(2, chunks=10, chunk=chunk, seed=3)
    with StreamPool(two_state, max_streams=1, chunk_samples=chunk) as pool:
        a = pool.join()
        for i in range(10):
            pool.submit(a, x_old[i * chunk:(i + 1) * chunk])
            pool.tick()
        assert np.abs(pool.state(a)["state_in.00"]).max() > 0  # the slot holds a real state
        pool.leave(a)
        b = pool.join()  # same (only) slot
        assert b != a
        assert all(np.all(v == 0) for v in pool.state(b).values())
        y = np.concatenate([pool.push({b: x_new[i * chunk:(i + 1) * chunk]})[b] for i in range(10)])
    assert np.abs(y - _solo(two_state, x_new, chunk)).max() <= ATOL


def test_pool_non_first_batch_axis_state_layout(axis1):
    """state(sid) comes back in the model layout (4, 1, 1) with the stream's own values."""
    chunk = HOP
    xs = _inputs(3, chunks=6, chunk=chunk, seed=5)
    with StreamPool(axis1, max_streams=3, chunk_samples=chunk) as pool:
        ids = [pool.join() for _ in xs]
        for t in range(6):
            pool.push({sid: x[t * chunk:(t + 1) * chunk] for sid, x in zip(ids, xs)})
        states = [pool.state(sid) for sid in ids]
    for x, st in zip(xs, states):
        with OrtStreamSession(axis1, chunk_samples=chunk) as s:
            for t in range(6):
                s.push(x[t * chunk:(t + 1) * chunk].reshape(1, 1, chunk))
            solo = s.state()
        assert st["state_in.00"].shape == (4, 1, 1) == solo["state_in.00"].shape
        for k in solo:
            np.testing.assert_allclose(st[k], solo[k], atol=ATOL)


@pytest.mark.skipif(not REFERENCE.is_file(), reason="bundled reference model missing")
def test_pool_reference_model_eight_streams_match_solo():
    xs = _inputs(8, chunks=12, chunk=160, seed=7)
    with StreamPool(REFERENCE, max_streams=8) as pool:
        ids = [pool.join() for _ in xs]
        outs = [[] for _ in xs]
        for t in range(12):
            res = pool.push({sid: x[t * 160:(t + 1) * 160] for sid, x in zip(ids, xs)})
            for i, sid in enumerate(ids):
                outs[i].append(res[sid])
        assert pool.tick_latencies_ms.shape == (12,)
        assert pool.inplace_ticks == 12  # the steady state copies no state
    for x, o in zip(xs, outs):
        assert np.abs(np.concatenate(o) - _solo(REFERENCE, x, 160)).max() <= 1e-4


def test_pool_errors_and_drops(two_state, model_dir):
    with pytest.raises(UsageError, match="inactive stream pool"):
        StreamPool(two_state).join()
    with pytest.raises(UsageError, match="not a positive multiple"):
        StreamPool(two_state, chunk_samples=HOP + 1)
    with pytest.raises(UsageError, match="max_streams must be >= 1"):
        StreamPool(two_state, max_streams=0)
    stateless = models.make_stateless_model(model_dir / "stateless.onnx")
    with pytest.raises(ArtifactError, match="no streaming state"):
        StreamPool(stateless)
    with StreamPool(two_state, max_streams=2, max_pending=3) as pool:
        a = pool.join()
        pool.join()
        with pytest.raises(UsageError, match="pool is full"):
            pool.join()
        with pytest.raises(UsageError, match="unknown stream id 99"):
            pool.submit(99, np.zeros(HOP, np.float32))
        with pytest.raises(UsageError, match="expected float32"):
            pool.submit(a, np.zeros(HOP))
        with pytest.raises(UsageError, match=r"expected \(4,\)"):
            pool.submit(a, np.zeros(HOP + 1, np.float32))
        bad = np.zeros(HOP, np.float32)
        bad[1] = np.nan
        with pytest.raises(UsageError, match="NaN"):
            pool.submit(a, bad)
        for i in range(5):  # queue 5 chunks, room for 3: the two oldest are dropped and counted
            pool.submit(a, np.full(HOP, i, np.float32))
        assert pool.dropped[a] == 2 and pool.pending(a) == 3
        assert set(pool.tick()) == {a}
        assert pool.tick() and pool.tick() and pool.tick() == {}


def test_ticks_of_consecutive_slots_not_from_zero_run_in_place_and_equal_solo_runs(two_state):
    """A server whose clients send at different moments ticks a few streams at a time anywhere in the slots: a run of
    consecutive slots with equal parity is run in place on those rows (no gather), and each stream still equals its
    solo run."""
    chunk = HOP
    xs = _inputs(6, chunks=8, chunk=chunk, seed=11)
    groups = [[2, 3], [5], [0, 1, 2], [4], [1, 2, 3, 4]]  # stream indices per tick, cycled
    with StreamPool(two_state, max_streams=6, chunk_samples=chunk) as pool:
        ids = [pool.join() for _ in xs]
        pos, outs = [0] * 6, [[] for _ in xs]
        t = 0
        while any(p < x.size for p, x in zip(pos, xs)):
            for i in groups[t % len(groups)]:
                if pos[i] < xs[i].size:
                    pool.submit(ids[i], xs[i][pos[i]:pos[i] + chunk])
                    pos[i] += chunk
            for sid, y in pool.tick().items():
                outs[ids.index(sid)].append(y)
            t += 1
        for i in (0, 5):  # the streams nobody ticks beside stay idle: finish them alone
            while pool.pending(ids[i]):
                outs[i].append(pool.tick()[ids[i]])
        inplace, ticks = pool.inplace_ticks, pool.ticks
    assert inplace > ticks // 2  # most ticks: consecutive slots with equal parity, none from slot 0 alone
    for i, x in enumerate(xs):
        np.testing.assert_allclose(np.concatenate(outs[i]), _solo(two_state, x, chunk), atol=ATOL)


@pytest.mark.skipif(not REFERENCE.is_file(), reason="bundled reference model missing")
def test_a_rewritten_graph_onnx_runtime_refuses_runs_as_stored_with_one_warning(monkeypatch, caplog):
    """A pass's output that ONNX Runtime will not load (as a state-layout rewrite inside a Scan over hops once did)
    is said in one warning line and the pool runs the stored graph, equal to single sessions."""
    import cosyedge.runtime.pool as pool_mod

    real = pool_mod.session_from_onnx

    def refuse_rewritten(model, **kw):
        if not isinstance(model, (str, Path)):
            raise RuntimeError("[ShapeInferenceError] Inferred=160 Declared=3")
        return real(model, **kw)

    monkeypatch.setattr(pool_mod, "session_from_onnx", refuse_rewritten)
    xs = _inputs(2, chunks=6, chunk=160, seed=3)
    with StreamPool(REFERENCE, max_streams=2) as pool:
        assert pool.rewritten == {}
        ids = [pool.join() for _ in xs]
        outs = [pool.push({sid: x[t * 160:(t + 1) * 160] for sid, x in zip(ids, xs)}) for t in range(6)]
    err = caplog.text
    assert err.count("does not load in ONNX Runtime") == 1 and "running the graph as stored" in err
    for i, x in enumerate(xs):
        got = np.concatenate([o[ids[i]] for o in outs])
        with OrtStreamSession(REFERENCE) as s:
            solo = np.concatenate([s.push(x[t * 160:(t + 1) * 160].reshape(1, 1, 160))["enhanced"].reshape(-1)
                                   for t in range(6)])
        assert np.abs(got - solo).max() <= ATOL
