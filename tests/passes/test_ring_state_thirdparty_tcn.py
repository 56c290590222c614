"""Pass ring_state on a third-party dilated TCN our tests never saw: asteroid's causal Conv-TasNet (free encoder, kernel
16 stride 8 -> ``TDConvNet`` of ``Conv1DBlock`` (dilations 1, 2, 4, ...) -> decoder ConvTranspose), rebuilt as
upstream wrote it (tests/helpers/asteroid_tcn.py, commit cited there), random weights, 16 kHz, one encoder frame a
tick (hop 8 samples: a conv state gets one frame per tick, as ring_state needs).

* Which norms stream: upstream's causal ConvTasNet takes only cLN (``ChanLN``, frame-local) or cgLN (``CumLN``); cLN
  streams and is proved; cgLN is refused by name (its ``arange`` counts the frames of the encoder output, one frame
  shorter than the input's ticks: position 0 is not the stream's first frame); gLN (global over time) is refused by
  name; bN (``norms.BatchNorm``, per-channel affine in eval) streams.
* With cLN every depthwise conv feeds the next norm's Div/Sqrt, so ``batch_gemm`` keeps it a Conv (its sensitive cone,
  for outputs equal to a one-stream session's) and its window has a Conv reader: ``state_layout`` lays the 8 states out
  time-major but ring_state takes none. With bN the convs become taps and every dilated conv state whose taps read
  fewer than its P frames (kernel K < P = (K-1)d: d >= 2 for K >= 3, d >= 3 for K = 2) is a ring.
* Over 480 ticks of the demo recording with five streams joining and leaving at different ticks (and one skipping
  ticks), the ring pool's outputs and states are bit-identical to the same pool without ring_state, and the ring state
  turned back equals the window; against each stream alone in an OrtStreamSession the pool differs by batch_gemm's
  rounding (another summation order), measured here in dB.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cosyedge.errors import UsageError  # noqa: E402
from cosyedge.passes import POOL_PASSES  # noqa: E402
from cosyedge.runtime.ort import OrtStreamSession  # noqa: E402
from cosyedge.runtime.pool import StreamPool  # noqa: E402
from tests.helpers.asteroid_tcn import CausalConvTasNet, dilated_convs  # noqa: E402
from tests.helpers.audio import demo_speech  # noqa: E402
from tests.helpers.torch_export import streamify_waveform  # noqa: E402

pytestmark = pytest.mark.slow

HOP = 8  # samples: one encoder frame (stride 8) a tick
NORING = tuple(p for p in POOL_PASSES if p != "ring_state")
VARIANTS = {  # kernel, blocks per repeat (dilations 2**x), repeats; the rings each must get
    "k3_x4_r2": (dict(conv_kernel_size=3, n_blocks=4, n_repeats=2), 6),  # d 2, 4, 8 twice
    "k5_x4_r2": (dict(conv_kernel_size=5, n_blocks=4, n_repeats=2), 6),  # d 2, 4, 8 twice (P = 8, 16, 32)
    "k2_x5_r1": (dict(conv_kernel_size=2, n_blocks=5, n_repeats=1), 3),  # d 4, 8, 16 (d 2: taps 2 = P)
}
# stream k: (join tick, leave after tick, offset in the recording (s)); stream 2 skips every 7th tick
CHURN = {0: (0, 480, 0.5), 1: (0, 200, 1.0), 2: (50, 480, 1.5), 3: (230, 480, 2.0), 4: (120, 330, 2.5)}
TICKS = 480


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(norm, variant) -> (stream ONNX path, model): exported and streamified once per module."""
    work = tmp_path_factory.mktemp("asteroid_tcn")
    cache = {}

    def get(norm: str, variant: str = "k3_x4_r2"):
        if (norm, variant) not in cache:
            m = CausalConvTasNet(norm_type=norm, **VARIANTS[variant][0]).eval()
            cache[norm, variant] = (streamify_waveform(m, work, f"ctn_{norm}_{variant}", hop=HOP), m)
        return cache[norm, variant]

    return get


def _rings_expected(model) -> list[int]:
    """R = P + 1 of every dilated conv state whose K taps read fewer than its P frames, in graph order."""
    return [p + 1 for k, _, p in dilated_convs(model) if k < p]


@pytest.mark.parametrize("norm", ["cLN", "bN"])
def test_streamify_proves_the_causal_tcn(built, norm):
    from cosyedge.artifacts import StreamContract

    path, model = built(norm)
    c = StreamContract.from_onnx(path)
    assert c.hop_samples == HOP and c.proof["snr_db"] > 120 and c.proof["ticks"] >= 64000
    assert c.proof["lookahead"]["measured_samples"] == 8  # the encoder's 16-sample window reaches 8 samples ahead
    conv_states = [list(s.shape) for s in c.states if s.kind == "context" and s.shape[1] == 48]
    assert conv_states == [["N", 48, p] for _, _, p in dilated_convs(model)]  # one (N, 48, P) state per dilated conv


@pytest.mark.parametrize("norm, match", [
    ("cgLN", r"Range node '/masker/bottleneck/bottleneck.0/Range': counts the frames of a time axis 1 frame\(s\) "
             r"shorter than the input's ticks"),
    ("gLN", r"ReduceMean node '/masker/bottleneck/bottleneck.0/ReduceMean': reduces over the time axis"),
])
def test_norms_that_do_not_stream_are_refused_by_name(tmp_path, norm, match):
    m = CausalConvTasNet(norm_type=norm).eval()
    with pytest.raises(UsageError, match=match):
        streamify_waveform(m, tmp_path, f"ctn_{norm}", hop=HOP)


def test_cln_windows_are_laid_out_but_not_ringed(built):
    path, model = built("cLN")
    with StreamPool(path, max_streams=4) as pool:
        assert pool.rewritten.get("state_layout") == 8 and "ring_state" not in pool.rewritten
        assert pool.rewritten.get("kept_sensitive") == 25  # every conv upstream of a norm's Div/Sqrt
        assert not any(pool._ring)
    from tests.helpers.streams import pool_outputs, session_outputs

    xs = [demo_speech(0.1, off) for off in (0.5, 1.0, 1.5)]  # 200 ticks each
    got, ref = pool_outputs(path, xs, HOP, 4), session_outputs(path, xs, HOP)
    snr = min(_snr_db(r, g) for r, g in zip(ref, got))
    print(f"cLN pool vs solo OrtStreamSession: worst SNR {snr:.1f} dB")
    assert snr > 120


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_pool_rings_the_dilated_conv_states(built, variant):
    path, model = built("bN", variant)
    want = _rings_expected(model)
    assert len(want) == VARIANTS[variant][1]
    with StreamPool(path, max_streams=4) as pool:
        assert pool.rewritten["ring_state"] == len(want)
        assert pool.rewritten["conv_depthwise"] == len(dilated_convs(model))
        assert [r for r in pool._ring if r] == want


def _churn(path, speech):
    """Run CHURN through a pool with ring_state and one without, in lockstep: every tick each live stream's outputs
    and every state (the rings turned back) must be bit-identical. Returns the ring pool's output per stream (float32),
    its states as each stream left, the ring state names and the ring pool's rewrite counts."""
    out = {k: [] for k in CHURN}
    states = {}
    with StreamPool(path, max_streams=4) as ring, StreamPool(path, max_streams=4, passes=NORING) as flat:
        assert "ring_state" not in flat.rewritten and not any(flat._ring)
        sids = {}
        for t in range(TICKS):
            for k, (start, _, _) in CHURN.items():
                if t == start:
                    sids[k] = (ring.join(), flat.join())
            live = [k for k in sids if not (k == 2 and t % 7 == 3)]
            chunks = {k: speech[k][len(out[k]) * HOP:(len(out[k]) + 1) * HOP] for k in live}
            y = ring.push({sids[k][0]: chunks[k] for k in live})
            y2 = flat.push({sids[k][1]: chunks[k] for k in live})
            for k in live:
                out[k].append(np.asarray(y[sids[k][0]]).reshape(-1).copy())
                assert np.array_equal(out[k][-1], np.asarray(y2[sids[k][1]]).reshape(-1)), (t, k)
            for k in list(sids):
                st, st2 = ring.state(sids[k][0]), flat.state(sids[k][1])
                assert all(np.array_equal(st[n], st2[n]) for n in st2), (t, k)
                if t + 1 == CHURN[k][1]:
                    states[k] = st
                    ring.leave(sids[k][0]), flat.leave(sids.pop(k)[1])
        rings = [s.input for s, r in zip(ring.contract.states, ring._ring) if r]
        return {k: np.concatenate(v) for k, v in out.items()}, states, rings, dict(ring.rewritten)


def _solo(path, x):
    """One stream alone in an OrtStreamSession: its output and its states after the last chunk."""
    with OrtStreamSession(path, chunk_samples=HOP) as s:
        y = np.concatenate([s.push(np.ascontiguousarray(x[None, None, i:i + HOP]))[s.contract.output].reshape(-1)
                            for i in range(0, x.size, HOP)])
        return y, s.state()


def _snr_db(ref, y):
    ref, y = ref.astype(np.float64), y.astype(np.float64)
    err = np.sum((y - ref) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref ** 2) / err))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ring_pool_over_real_speech_with_churn(built, variant):
    path, model = built("bN", variant)
    speech = {k: demo_speech(0.25, off) for k, (_, _, off) in CHURN.items()}
    y_ring, st_ring, rings, counts = _churn(path, speech)  # (bit-identical to the pool without rings: inside)
    assert len(rings) == VARIANTS[variant][1] == counts["ring_state"]
    worst, off = np.inf, 0.0
    for k in CHURN:
        n = y_ring[k].size
        assert n >= 100 * HOP, k
        solo, st_solo = _solo(path, speech[k][:n])
        worst = min(worst, _snr_db(solo, y_ring[k]))
        for s in rings:  # the ring turned back is the solo session's window, to batch_gemm's rounding
            assert st_ring[k][s].shape == st_solo[s].shape
            off = max(off, float(np.abs(st_ring[k][s] - st_solo[s]).max() / np.abs(st_solo[s]).max()))
    assert float(np.abs(y_ring[0]).max()) > 1e-3
    print(f"{variant}: ring pool vs solo OrtStreamSession: worst SNR {worst:.1f} dB, ring windows {off:.2e} of peak")
    assert worst > 120 and off < 1e-5
