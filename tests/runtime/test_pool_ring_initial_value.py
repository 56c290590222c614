"""StreamPool with pass ring_state on a model whose conv states start at a non-zero initial value (the contract's
``init``, e.g. ``cosyedge adopt --init``): every ring is filled with that value when a stream joins, so each stream's
output and state() are bit-identical to the pool without ring_state from the first tick on (before the ring holds
only the stream's own frames) and a stream that joins a used slot starts from the initial value again."""

from __future__ import annotations

import json

import numpy as np
import onnx

from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.passes import POOL_PASSES
from cosyedge.runtime.pool import StreamPool

INIT = 0.25


def _with_ring_init(tmp_path) -> tuple:
    """The bundled model with INIT as the initial value of every state ring_state turns into a ring; its path and
    those state names."""
    with StreamPool(REFERENCE_STREAM_ONNX, max_streams=2) as pool:
        rings = [s.input for s, r in zip(pool.contract.states, pool._ring) if r]
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    prop = next(p for p in m.metadata_props if p.key == "cosyedge.state")
    states = json.loads(prop.value)
    for s in states:
        if s["input"] in rings:
            s["init"] = INIT
    prop.value = json.dumps(states)
    path = tmp_path / "reference_init.stream.onnx"
    onnx.save(m, str(path))
    return path, rings


def test_rings_start_at_the_states_initial_value(tmp_path):
    path, rings = _with_ring_init(tmp_path)
    assert len(rings) >= 4
    rng = np.random.default_rng(11)
    noring = tuple(p for p in POOL_PASSES if p != "ring_state")
    with StreamPool(path, max_streams=2) as a, StreamPool(path, max_streams=2, passes=noring) as b:
        assert a.rewritten.get("ring_state", 0) == len(rings) and "ring_state" not in b.rewritten
        sa, sb = [a.join(), a.join()], [b.join(), b.join()]
        st = a.state(sa[0])
        assert all(np.all(st[k] == INIT) for k in rings)  # a joined stream's windows hold the initial value
        for t in range(30):
            if t == 12:  # a stream leaves and a new one takes its slot: its rings start at INIT again
                a.leave(sa[0]), b.leave(sb[0])
                sa[0], sb[0] = a.join(), b.join()
            xs = [(rng.standard_normal(a.chunk_samples) * 0.3).astype(np.float32) for _ in range(2)]
            live = [i for i in range(2) if (t + i) % 4]  # one stream skips ticks: general (gathered) ticks too
            ya = a.push({sa[i]: xs[i] for i in live})
            yb = b.push({sb[i]: xs[i] for i in live})
            for i in live:
                assert np.array_equal(ya[sa[i]], yb[sb[i]]), (t, i)
            for i in range(2):
                s1, s2 = a.state(sa[i]), b.state(sb[i])
                assert all(np.array_equal(s1[k], s2[k]) for k in s1), (t, i)
        assert float(np.abs(ya[sa[1]]).max()) > 1e-3
