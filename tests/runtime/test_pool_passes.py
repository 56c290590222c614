"""StreamPool's graph passes: its per-tick cuts (onehot_conv, conv_matvec, matvec_groups, scalar_rank,
state_layout, perm_gather, gather_inner, reshape_chain, ring_state) leave every stream's output bit-identical to the pool without
them, on the bundled model and real speech; each is a switch (its name listed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.errors import UsageError
from cosyedge.passes import POOL_PASSES, POOL_PASSES_BASE
from cosyedge.runtime.pool import StreamPool

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "cosyedge" / "models" / "reference.stream.onnx"
NOISY = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
CUTS = ("onehot_conv", "conv_matvec", "matvec_groups", "scalar_rank", "state_layout", "perm_gather", "gather_inner",
        "reshape_chain", "ring_state")
NEEDS = {"perm_gather": ("onehot_conv", "state_layout"), "ring_state": ("state_layout",)}  # a cut that matches only in others' output


def _outputs(passes, streams: list[np.ndarray], hop: int = 160) -> tuple[np.ndarray, dict]:
    with StreamPool(REFERENCE, max_streams=len(streams), passes=passes) as pool:
        ids = [pool.join() for _ in streams]
        got = []
        for i in range(0, streams[0].size, hop):
            out = pool.push({sid: a[i:i + hop] for sid, a in zip(ids, streams)})
            got.append(np.stack([out[sid] for sid in ids]))
        return np.concatenate(got, axis=1), pool.rewritten


@pytest.mark.skipif(not REFERENCE.is_file(), reason="bundled reference model missing")
def test_each_cut_keeps_the_pool_bit_identical_on_real_speech():
    """35 streams (two groups of 32 for matvec_groups, the second padded) of the demo recording at other offsets, 1.5 s
    each, loud and 60 dB quieter: with all cuts, and with each alone, every output sample equals the pool's without."""
    x, _ = sf.read(str(NOISY), dtype="float32")
    n = 150 * 160
    streams = [np.roll(x, 997 * i)[:n] * (1e-3 if i % 2 else 1.0) for i in range(35)]
    want, base = _outputs(POOL_PASSES_BASE, streams)
    assert base == {"conv_gemm": 26, "kept_sensitive": 6}
    got, done = _outputs(None, streams)
    assert done == {**base, "onehot_conv": 2, "conv_matvec": 2, "matvec_groups": 1, "scalar_rank": 7,
                    "state_layout": 12, "perm_gather": 2, "gather_inner": 1,
                    "reshape_chain": 17, "ring_state": 8}
    assert np.array_equal(got, want) and np.abs(want).max() > 0.1
    want3 = _outputs(POOL_PASSES_BASE, streams[:3])[0]  # a batch of 3 runs the GEMMs blocked otherwise
    for cut in CUTS:
        got, done = _outputs(POOL_PASSES_BASE[:-1] + NEEDS.get(cut, ()) + (cut, "dqmm_per_row"), streams[:3])
        assert done[cut] > 0 and np.array_equal(got, want3), cut


def test_pool_lists_the_cuts_by_default_and_refuses_an_unknown_pass():
    assert set(CUTS) <= set(POOL_PASSES) and not set(CUTS) & set(POOL_PASSES_BASE)
    assert POOL_PASSES.index("batch_gemm") < min(POOL_PASSES.index(c) for c in CUTS)
    with pytest.raises(UsageError, match="unknown graph pass"):
        StreamPool(REFERENCE, max_streams=2, passes=["batch_gemm", "fuse_everything"])


@pytest.mark.skipif(not REFERENCE.is_file(), reason="bundled reference model missing")
def test_time_major_states_survive_gaps_churn_and_read_back_in_the_model_layout():
    """4 streams over 150 ticks (past the wrap of the longest ring, 65 frames, twice), stream 1 skips every third
    tick (gathered ticks), stream 2 leaves after 20 ticks (stream 3 moves into its slot) and a new one joins, stream 0
    leaves at tick 90 (the new one moves): outputs and state() (rings turned back into windows) equal the pool without
    the cuts, bit for bit."""
    x, _ = sf.read(str(NOISY), dtype="float32")
    hop = 160
    runs = {}
    for name, passes in (("base", POOL_PASSES_BASE), ("cuts", None)):
        with StreamPool(REFERENCE, max_streams=4, passes=passes) as pool:
            ids = [pool.join() for _ in range(4)]
            outs, states = [], []
            for t in range(150):
                if t == 20:
                    pool.leave(ids[2])
                    ids[2] = pool.join()
                if t == 90:
                    pool.leave(ids[0])
                    ids[0] = pool.join()
                feed = {sid: np.roll(x, 997 * i)[t * hop:(t + 1) * hop] for i, sid in enumerate(ids)
                        if not (i == 1 and t % 3 == 0)}
                res = pool.push(feed)
                outs.append(np.concatenate([res[sid] for sid in sorted(res)]))
            states = [pool.state(sid) for sid in ids]
            assert 0 < pool.inplace_ticks < 150  # the gathered path ran too
            runs[name] = (np.concatenate(outs), states, (pool.rewritten.get("state_layout", 0),
                                                         pool.rewritten.get("ring_state", 0)))
    (a, sa, _), (b, sb, n_layout) = runs["base"], runs["cuts"]
    assert n_layout == (12, 8) and np.array_equal(a, b)
    for u, v in zip(sa, sb):
        assert u.keys() == v.keys() and all(u[k].shape == v[k].shape and np.array_equal(u[k], v[k]) for k in u)
    assert sa[0]["state_in.08"].shape == (1, 96, 64) and np.abs(sa[0]["state_in.08"]).max() > 0
