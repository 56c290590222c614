"""StreamPool.push_many: the chunks of many streams as one array, one tick; every output and state equals the same
chunks pushed per stream (push), whatever the order of the ids and the slots they sit in; bad batches are refused
whole, before any state moves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.runtime.pool import StreamPool
from tests.helpers import models
from tests.helpers.audio import demo_speech


@pytest.fixture(scope="module")
def two_state(tmp_path_factory) -> Path:
    """The two-state test model (:func:`tests.helpers.models.make_two_state_model`), made once for the module."""
    return models.make_two_state_model(tmp_path_factory.mktemp("push_many") / "m.onnx")


def _chunks(x: np.ndarray, offsets: np.ndarray, t: int, c: int) -> np.ndarray:
    return x[(offsets[:, None] + t * c + np.arange(c)[None, :]) % x.size].astype(np.float32)


@pytest.mark.parametrize("model", ["reference", "two_state"])
def test_push_many_equals_push_with_churn_and_shuffled_ids(model, two_state):
    path = REFERENCE_STREAM_ONNX if model == "reference" else two_state
    x = demo_speech(10.0) if model == "reference" else np.random.default_rng(0).standard_normal(40000)
    rng = np.random.default_rng(1)
    with StreamPool(path, max_streams=12) as a, StreamPool(path, max_streams=12) as b:
        c = a.chunk_samples
        live: list[tuple[int, int, int]] = []  # (id in a, id in b, its offset)
        ran = 0
        for t in range(90):
            if t % 7 == 0 and len(live) < 12:  # joins
                for _ in range(1 + t % 3):
                    if len(live) < 12:
                        live.append((a.join(), b.join(), int(rng.integers(0, x.size))))
            if t % 11 == 5 and len(live) > 2:  # a stream in the middle leaves: slots move
                ia, ib, _ = live.pop(len(live) // 2)
                a.leave(ia)
                b.leave(ib)
            if not live:
                continue
            run = [s for k, s in enumerate(live) if (t + k) % 5]  # some streams skip ticks: non-contiguous slots
            if not run:
                continue
            rng.shuffle(run)
            xs = _chunks(x, np.array([s[2] for s in run], np.int64), t, c)
            ya = a.push({s[0]: xs[i] for i, s in enumerate(run)})
            yb = b.push_many([s[1] for s in run], xs)
            assert yb.shape == (len(run), c) and yb.dtype == np.float32
            for i, s in enumerate(run):
                np.testing.assert_array_equal(yb[i], ya[s[0]])
            ran += len(run)
        for ia, ib, _ in live:
            sa, sb = a.state(ia), b.state(ib)
            assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)
        assert ran > 300 and b.chunks_run == a.chunks_run == ran and b.ticks == a.ticks


def test_bad_batches_are_refused_before_any_state_moves(two_state):
    with StreamPool(two_state, max_streams=4) as pool:
        c = pool.chunk_samples
        s1, s2 = pool.join(), pool.join()
        x = np.ones((2, c), np.float32)
        before = pool.state(s1)

        def refused(match: str, sids, chunks) -> None:
            with pytest.raises(UsageError, match=match):
                pool.push_many(sids, chunks)

        refused("dtype is float64, expected float32", [s1, s2], x.astype(np.float64))
        refused(rf"shape is \(2, {c}\), expected \(1, {c}\)", [s1], x)
        bad = x.copy()
        bad[1, 0] = np.nan
        refused(rf"stream\(s\) \[{s2}\] hold NaN/Inf", [s1, s2], bad)
        refused("appears more than once", [s1, s1], x)
        refused("unknown stream id 99", [s1, 99], x)
        pool.submit(s2, x[0])
        refused(rf"stream\(s\) \[{s2}\] have chunks queued by submit\(\)", [s1, s2], x)
        assert all(np.array_equal(before[k], v) for k, v in pool.state(s1).items()) and pool.ticks == 0
        pool.tick()
        assert pool.push_many([], np.empty((0, c), np.float32)).shape == (0, c)
        assert pool.push_many([s2, s1], x).shape == (2, c) and pool.ticks == 2
    with pytest.raises(UsageError, match="inactive"):
        pool.push_many([s1], x[:1])


def test_a_stream_past_the_position_table_is_refused_by_name(tmp_path):
    path = models.make_two_state_model(tmp_path / "m.onnx")  # its own file: the test sets the contract's limit
    with StreamPool(path, max_streams=2) as pool:
        c = pool.chunk_samples
        pool.contract.max_stream_samples = 3 * c  # as a model with a position table of 3 chunks declares
        a, b = pool.join(), pool.join()
        x = np.ones((2, c), np.float32)
        for _ in range(3):
            pool.push_many([a, b], x)
        with pytest.raises(UsageError, match=rf"stream {a} is longer than the model can count positions"):
            pool.push_many([a, b], x)
        assert pool.ticks == 3


def test_ids_not_a_sequence_ragged_rows_and_a_set_of_ids_with_nan_are_one_line_usage_errors(two_state):
    with StreamPool(two_state, max_streams=3) as pool:
        c = pool.chunk_samples
        a, b = pool.join(), pool.join()
        x = np.ones((2, c), np.float32)
        before = pool.state(a)
        for sids, chunks, match in [
            ((s for s in (a, b)), x, "a sequence of stream ids, got generator"),
            (a, x[:1], "a sequence of stream ids, got int"),
            (None, x[:1], "a sequence of stream ids, got NoneType"),
            ([a, b], [[0.0] * c, [0.0] * (c - 1)], rf"chunks is not one \(m, {c}\) array"),
        ]:
            with pytest.raises(UsageError, match=match) as err:
                pool.push_many(sids, chunks)
            assert "\n" not in str(err.value)
        bad = x.copy()
        bad[1, 3] = np.inf
        with pytest.raises(UsageError, match=r"stream\(s\) \[\d\] hold NaN/Inf"):  # the ids as a set: not indexable
            pool.push_many({a, b}, bad)
        assert pool.ticks == 0 and all(np.array_equal(before[k], v) for k, v in pool.state(a).items())
        assert pool.push_many({a: 0, b: 1}.keys(), x).shape == (2, c)  # any sized iterable of ids runs


def test_an_unhashable_id_is_an_unknown_stream_id_not_a_type_error(two_state):
    with StreamPool(two_state, max_streams=2) as pool:
        c = pool.chunk_samples
        a = pool.join()
        x = np.ones((1, c), np.float32)
        with pytest.raises(UsageError, match=r"unknown stream id \[0\]"):
            pool.push_many([[a]], x)  # ids nested one list too deep
        with pytest.raises(UsageError, match=r"unknown stream id \[0\]"):
            pool.submit([a], x[0])
        assert pool.ticks == 0 and pool.pending(a) == 0
