"""Relative-position attention with Transformer-XL's ``rel_shift`` streams under a bounded mask, proved
(``cosyedge/surgery/rules/relative.py``).

Models (``tests/helpers/models_attention.py``, rebuilt from upstream, seeded random weights): NeMo's FastConformer encoder
(``RelPositionMultiHeadAttention``, ``RelPositionalEncoding``; ``nemo/collections/asr/parts/submodules/
multi_head_attention.py``, ``modules/conformer_encoder.py``) with ``att_context_style`` ``regular`` ([16, 0]: a
17-frame causal window) and ``chunked_limited`` ([8, 3]: chunks of 4 frames, 2 left chunks), without and with its
pre-encode ``ConvSubsampling`` (``subsampling.py``: ``dw_striding`` or ``striding``, x4 or x8, causal or not; the
rebuild equals nemo_toolkit 3.0.0's class bit for bit); CosyVoice's conformer with ``EspnetRelPositionalEncoding`` and
its ``rel_shift`` (the ESPnet form that keeps ``T`` columns), static chunk mask; and a minimal Transformer-XL layer
(``tests/surgery/rules/test_attention.py::RelShift``, band window). Exporters: TorchScript (``dynamo=False``, ``dynamic_axes``)
and ``dynamo=True`` (``dynamic_shapes``), symbolic batch and fixed batch 1.

Each accepted model: streamify's own proof passes, the contract has key/value caches, and an independent ONNX
Runtime loop (states from the contract, zeros at start) at several chunk sizes equals the full graph from the first
frame within 1e-5 of its peak. A waveform enhancer with NeMo's rel_pos attention builds in FP16 and INT8 (ONNX
Runtime) with ``compare`` PASS, and StreamPool keeps its caches per stream. Refusals: unlimited left context names it and ``--attention-window``; full context
names full attention. A negative control shows the proof sees a wrong relative-position range.

Source: Dai et al., Transformer-XL (arXiv:1901.02860), section 3.3 and appendix B.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from cosyedge.errors import AccuracyError, UsageError  # noqa: E402
from cosyedge.surgery import streamify  # noqa: E402
from tests.helpers import models_attention as M  # noqa: E402

RTOL = 1e-5  # max |stream - full| / max |full|
CONTEXT = {"regular": ((16, 0), 1), "chunked_limited": ((8, 3), 4)}  # att_context_size, chunk frames


def _nemo(style: str, subsampling: str | None = None, factor: int = 8, causal: bool = True, context=None):
    """NemoFastConformer (rel_pos) with ``style``'s context (or ``context``), seeded and randomized as
    :func:`tests.helpers.models_attention.build`."""
    torch.manual_seed(0)
    m = M.NemoFastConformer(att_context_size=context or CONTEXT[style][0], att_context_style=style,
                            subsampling=subsampling, subsampling_factor=factor, causal_downsampling=causal)
    return M.randomize_constants(m, torch.Generator().manual_seed(1)).eval()


def _export(model, path, dynamo: bool, time_axis: int, batch: str, t: int = 256):
    """Export ``model`` with a dynamic time axis; ``batch`` ``"N"`` (symbolic: :func:`tests.helpers.models_attention.export`)
    or ``"1"`` (fixed: only the time axis dynamic, as most streaming exports)."""
    if batch == "N":
        return M.export(model, path, M.example_input(time_axis, t=t), dynamo=dynamo, time_axis=time_axis)
    x = M.example_input(time_axis, t=t)
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(model, x, str(path), input_names=["x"], output_names=["y"], dynamo=True,
                              dynamic_shapes=({time_axis: torch.export.Dim("T", min=2, max=100000)},))
        else:
            torch.onnx.export(model, x, str(path), input_names=["x"], output_names=["y"], dynamo=False,
                              opset_version=17, dynamic_axes={"x": {time_axis: "T"}, "y": {time_axis: "T"}})
    return path


def _stream_error(src, out, contract, x, ax, hop, multiples=(1, 2, 5)) -> dict[int, float]:
    """Run the stream graph ``hop * k`` input frames at a time (raw ONNX Runtime, every state of the contract from its
    zeros, fed back), shift by the contract's delay and compare with the full graph from frame 0: {chunk: max abs
    error / peak |full|}. Every stream covers all but at most one chunk of the full output."""
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    delay = contract.outputs[0].delay_frames
    errs = {}
    for k in multiples:
        step = hop * k
        states = {s.input: s.zeros(x.shape[0]) for s in contract.states}
        parts = []
        for i in range(0, x.shape[ax] - step + 1, step):
            sl = [slice(None)] * x.ndim
            sl[ax] = slice(i, i + step)
            res = dict(zip(names, sess.run(None, {"x": np.ascontiguousarray(x[tuple(sl)]), **states})))
            parts.append(res["y"])
            states = {s.input: res[s.output] for s in contract.states}
        y = np.concatenate(parts, axis=ax)
        n = min(y.shape[ax] - delay, ref.shape[ax])
        assert n >= ref.shape[ax] * (1 - step / x.shape[ax]) - delay - 2, (step, n, ref.shape)
        got, want = np.take(y, np.arange(delay, delay + n), axis=ax), np.take(ref, np.arange(n), axis=ax)
        errs[step] = float(np.abs(got - want).max() / np.abs(want).max())
    return errs


def _check(src, tmp_path, ax, hop, frames, batch: str = "N"):
    """streamify ``src`` with a hop of ``hop`` input frames (160 samples each), check the contract and the stream
    (two streams of different speech, one for a fixed batch of 1)."""
    out = tmp_path / f"{src.stem}.stream.onnx"
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=160 * hop, frames_per_hop=hop)
    kinds = sorted(s.kind for s in c.states)
    assert "key" in kinds and "value" in kinds, kinds
    errs = _stream_error(src, out, c, M.speech_features(frames, ax, n=2 if batch == "N" else 1), ax, hop)
    print(src.stem, "proof", c.proof.get("max_abs"), "delay", c.outputs[0].delay_frames, "errors", errs)
    assert max(errs.values()) < RTOL, errs
    return c


DYNAMO = pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])


@pytest.mark.parametrize("style,dynamo", [("regular", False), pytest.param("regular", True, marks=pytest.mark.slow),
                                          ("chunked_limited", False),
                                          pytest.param("chunked_limited", True, marks=pytest.mark.slow)],
                         ids=["regular-torchscript", "regular-dynamo", "chunked-torchscript", "chunked-dynamo"])
def test_nemo_fastconformer_rel_pos_streams_exactly(tmp_path, style, dynamo):
    """NeMo FastConformer (rel_pos, no subsampling), 2 layers: the regular window and the chunked_limited chunk mask
    both stream exactly, symbolic batch, batch 2 of different speech."""
    src = _export(_nemo(style), tmp_path / f"nemo_{style}{int(dynamo)}.onnx", dynamo, 2, "N")
    _check(src, tmp_path, 2, CONTEXT[style][1], 240)


@pytest.mark.parametrize("subsampling,factor,causal,style,dynamo,batch", [
    ("dw_striding", 8, True, "chunked_limited", False, "N"),
    pytest.param("dw_striding", 8, True, "regular", True, "N", marks=pytest.mark.slow),
    pytest.param("dw_striding", 4, True, "chunked_limited", True, "1", marks=pytest.mark.slow),
    pytest.param("dw_striding", 8, False, "chunked_limited", True, "N", marks=pytest.mark.slow),
    ("striding", 4, False, "regular", False, "1"),
    ("striding", 8, True, "chunked_limited", False, "1"),
], ids=lambda v: str(v))
def test_nemo_fastconformer_with_subsampling_streams_exactly(tmp_path, subsampling, factor, causal, style, dynamo,
                                                             batch):
    """With NeMo's pre-encode ConvSubsampling (x4/x8, causal_downsampling or not) in front, the hop is the chunk at
    the subsampled rate (``factor * chunk`` input frames); both exporters, symbolic batch and fixed batch 1."""
    model = _nemo(style, subsampling, factor, causal)
    src = _export(model, tmp_path / f"nemo_{subsampling}{factor}{int(causal)}_{style}{int(dynamo)}{batch}.onnx",
                  dynamo, 2, batch)
    _check(src, tmp_path, 2, factor * CONTEXT[style][1], factor * 160, batch)


def test_cosyvoice_espnet_rel_shift_streams_exactly(tmp_path):
    """CosyVoice's conformer (``EspnetRelPositionalEncoding`` + ``rel_shift`` keeping ``T`` columns, static chunk
    mask of 4 frames and 2 left chunks), TorchScript (``dynamo=True`` cannot export it: see
    ``tests/surgery/rules/test_attention_architectures.py::NO_EXPORT``)."""
    src = _export(M.build("cosyvoice_conformer_espnet_rel"), tmp_path / "cosy.onnx", False, 1, "N")
    _check(src, tmp_path, 1, 4, 240)


@DYNAMO
def test_transformer_xl_layer_with_a_band_streams_exactly(tmp_path, dynamo):
    """A minimal Transformer-XL layer (a table sliced ``pe[2500 - T + 1 : 2500 + T]``, rel_shift by pad/view/slice,
    a band window of 16): streams exactly, fixed batch 1."""
    from tests.surgery.rules.test_attention import RelShift

    batch = "1" if dynamo else "N"
    src = _export(RelShift().eval(), tmp_path / f"txl{int(dynamo)}.onnx", dynamo, 1, batch)
    _check(src, tmp_path, 1, 1, 200, batch)


class _ScaledRelShift(torch.nn.Module):
    """Transformer-XL attention (one layer, 2 heads, band window 8, (N, T, 16) -> (N, T, 16)) whose terms are scaled
    apart: ``ac / sqrt(d) + rel_shift(bd) / sqrt(d)`` (NeMo's rel_shift and table order: ``pe[2500 - T : 2499 + T]``
    of positions 2499 .. -2499)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        d, self.h = 16, 2
        self.q, self.k, self.v, self.pos = (torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, d),
                                            torch.nn.Linear(d, d, bias=False))
        self.bu, self.bv = torch.nn.Parameter(torch.randn(2, 8)), torch.nn.Parameter(torch.randn(2, 8))
        p = torch.arange(2499, -2500, -1).float()[:, None]
        div = torch.exp(torch.arange(0, d, 2).float() * -(np.log(10000.0) / d))
        pe = torch.zeros(p.shape[0], d)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(p * div), torch.cos(p * div)
        self.register_buffer("pe", pe[None])

    def forward(self, x):
        n, t, c = x.shape
        q = self.q(x).view(n, t, self.h, c // self.h)
        k, v = [m(x).view(n, t, self.h, c // self.h).transpose(1, 2) for m in (self.k, self.v)]
        p = self.pos(self.pe[:, 2500 - t:2499 + t]).view(1, 2 * t - 1, self.h, c // self.h).transpose(1, 2)
        ac = (q + self.bu).transpose(1, 2) @ k.transpose(-2, -1)
        bd = (q + self.bv).transpose(1, 2) @ p.transpose(-2, -1)
        b, h, qlen, plen = bd.shape
        bd = F.pad(bd, (1, 0)).view(b, h, -1, qlen)[:, :, 1:].view(b, h, qlen, plen)[..., :t]
        i = torch.arange(t)
        band = (i[:, None] - i[None, :] >= 0) & (i[:, None] - i[None, :] < 8)
        s = (ac / math.sqrt(8) + bd / math.sqrt(8)).masked_fill(~band, float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(n, t, c)


@DYNAMO
def test_a_term_scaled_after_the_rel_shift_streams_exactly(tmp_path, dynamo):
    """The shifted term divided by sqrt(d) on its own before it is added to the content scores: the scale is applied
    again to the chunk's term; streams exactly."""
    src = _export(_ScaledRelShift().eval(), tmp_path / f"scaled{int(dynamo)}.onnx", dynamo, 1, "N")
    _check(src, tmp_path, 1, 1, 200)


@pytest.mark.parametrize("context,style,why", [
    ((-1, 0), "regular", r"causal with unlimited left context.*--attention-window"),
    ((-1, -1), "regular", r"full \(bidirectional"),
])
def test_unbounded_rel_pos_is_refused_naming_the_context(tmp_path, context, style, why):
    """rel_pos with unlimited left context is refused naming the unbounded context and ``--attention-window``; with
    full context (bidirectional) naming full attention; nothing is written."""
    src = _export(_nemo(style, context=context), tmp_path / "u.onnx", False, 2, "N")
    out = tmp_path / "u.stream.onnx"
    with pytest.raises(UsageError, match=why) as e:
        streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert "2T - 1" not in str(e.value)
    assert not out.exists()


def test_a_wrong_relative_range_fails_the_proof(tmp_path, monkeypatch):
    """Negative control: the same stream graph built with the relative positions off by one frame (the table's range
    shifted) fails streamify's proof, so the relative-position term matters to the output and the proof checks it."""
    from cosyedge.surgery.rules import relative

    real = relative._rel_range
    monkeypatch.setattr(relative, "_rel_range", lambda site: tuple(r + 1 for r in real(site)))
    src = _export(_nemo("regular"), tmp_path / "w.onnx", False, 2, "N")
    out = tmp_path / "w.stream.onnx"
    with pytest.raises(AccuracyError, match="differs from the full-sequence graph"):
        streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not out.exists()


def test_espnet_legacy_rel_pos_is_refused_as_length_dependent(tmp_path):
    """ESPnet's legacy relative positions (a (1, T, d) table of positions ``max_len - 1 .. max_len - T`` and the legacy
    rel_shift over T columns) with a chunk mask: its term depends on the sequence length (entry (i, j) sees position
    ``max_len - T + i - j``), so no chunk graph equals it: refused, nothing written."""
    torch.manual_seed(0)
    model = M.randomize_constants(M.WenetConformer(pos="rel_espnet_legacy", num_blocks=1),
                                  torch.Generator().manual_seed(1)).eval()
    src = _export(model, tmp_path / "legacy.onnx", False, 1, "N")
    out = tmp_path / "legacy.stream.onnx"
    with pytest.raises(UsageError, match=r"1 node blocks it: .*not centred on the query.*depends on the sequence "
                                         r"length"):
        streamify(src, out, sample_rate_hz=16000, hop_samples=640, frames_per_hop=4)
    assert not out.exists()


def test_attention_window_bounds_unlimited_rel_pos(tmp_path):
    """``attention_window=16`` makes NeMo's rel_pos attention with unlimited left context ([-1, 0]) stream: the stream
    equals the same model exported with ``att_context_size`` [15, 0] (query i sees keys i - 15 .. i) within 1e-5 at
    three chunk sizes, and differs from the unbounded graph."""
    src = _export(_nemo("regular", context=(-1, 0)), tmp_path / "unb.onnx", False, 2, "N")
    ref_src = _export(_nemo("regular", context=(15, 0)), tmp_path / "w16.onnx", False, 2, "N")
    out = tmp_path / "unb.stream.onnx"
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1, attention_window=16)
    x = M.speech_features(200, 2)
    errs = _stream_error(ref_src, out, c, x, 2, 1)
    sess = {p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (src, ref_src)}
    unbounded = float(np.abs(sess[src].run(None, {"x": x})[0] - sess[ref_src].run(None, {"x": x})[0]).max())
    print("window 16 errors", errs, "vs unbounded", unbounded)
    assert max(errs.values()) < RTOL, errs
    assert unbounded > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# deployment: the stream graph of a waveform model with rel_pos attention builds in FP16 and INT8 and pools
# ---------------------------------------------------------------------------------------------------------------

HOP = 160


class _RelPosEnhancer(torch.nn.Module):
    """Waveform in and out: causal conv encoder (1 -> 32, window 320, hop 160) -> NeMo ``RelPositionalEncoding`` +
    ``RelPositionMultiHeadAttention`` (4 heads, ``regular`` window of 16 frames: mask ``~ones.triu(-15).tril(0)``) ->
    sigmoid mask on the encoding -> ConvTranspose decoder. (N, 1, T) -> (N, 1, T)."""

    def __init__(self, d: int = 32):
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Conv1d(1, d, 2 * HOP, stride=HOP)
        self.pos = M.NemoRelPositionalEncoding(d)
        self.att = M.NemoRelPositionMultiHeadAttention(4, d)
        M.randomize_constants(self, torch.Generator().manual_seed(1))
        self.dec = torch.nn.ConvTranspose1d(d, 1, 2 * HOP, stride=HOP)

    def forward(self, audio):
        h = self.enc(F.pad(audio, (HOP, 0)))
        z, pos = self.pos(h.transpose(1, 2))
        t = z.shape[1]
        mask = ~torch.ones(1, t, t, dtype=torch.bool).triu(diagonal=-15).tril(diagonal=0)
        y = self.att(z, z, z, mask, pos)
        return self.dec(torch.sigmoid(y).transpose(1, 2) * h)[..., HOP:HOP + audio.shape[-1]]


@pytest.fixture(scope="module")
def enhancer(tmp_path_factory):
    d = tmp_path_factory.mktemp("relpos")
    full = d / "relpos.onnx"
    torch.onnx.export(_RelPosEnhancer().eval(), (torch.zeros(1, 1, 16 * HOP),), str(full), input_names=["audio"],
                      output_names=["enhanced"], dynamic_axes={"audio": {0: "N", 2: "T"}, "enhanced": {0: "N", 2: "T"}},
                      dynamo=False, opset_version=17)
    out = d / "relpos.stream.onnx"
    c = streamify(full, out, sample_rate_hz=16000, hop_samples=HOP)
    assert {"key", "value"} <= {s.kind for s in c.states}
    return out


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_rel_pos_stream_builds_in_fp16_and_int8_and_compares(enhancer, precision, tmp_path, cli):
    """``cosyedge build --fp16`` / ``--int8`` (ONNX Runtime) of the rel_pos stream graph, then ``cosyedge compare``
    against the FP32 stream: PASS."""
    from tests.precision import int8_fixtures as fx

    extra = ["--int8", "--calib", fx.small_calibration_set(tmp_path / "calib")] if precision == "int8" else ["--fp16"]
    rc, out, err = cli("build", "--onnx", enhancer, *extra, "--backend", "onnxruntime", "-o", tmp_path / "eng")
    assert rc == 0, err
    folder = tmp_path / "eng" / f"relpos-{precision}-onnxruntime"
    rc, out, err = cli("compare", enhancer, folder)
    print(out)
    assert rc == 0 and f"PASS: {precision}" in out, out + err


def test_streampool_keeps_rel_pos_caches_per_stream(enhancer):
    """StreamPool: streams joining at different ticks (one reusing a freed slot) share batches and each equals its
    solo run."""
    from tests.helpers.streams import session_outputs, staggered_pool_outputs

    n = 50
    rng = np.random.default_rng(7)
    xs = [(0.1 * rng.standard_normal(n * HOP)).astype(np.float32) for _ in range(3)]
    starts, ends = {0: 0, 1: 9, 2: 35}, {0: 30, 1: 9 + n, 2: 35 + n}
    got, batches = staggered_pool_outputs(enhancer, xs, HOP, starts, ends, max_streams=2)
    assert batches > 20
    solo = session_outputs(enhancer, [xs[0][:30 * HOP], xs[1], xs[2]], HOP)
    for k in range(3):
        y = got[k]
        assert y.shape == solo[k].shape
        assert np.abs(y - solo[k]).max() < 1e-5, k


@pytest.mark.parametrize("context", [(16, 2), (8, 1)], ids=["16-2", "8-1"])
def test_nemo_regular_with_right_context_streams_with_its_look_ahead(tmp_path, context):
    """NeMo FastConformer ``regular`` with right context ``[W - 1, A]`` (a band that looks A frames ahead), rel_pos, two
    layers: streams exactly, TorchScript, symbolic batch; each layer's queries wait A frames, so the contract's delay is
    2 A frames, and the contract records A frames of look-ahead per attention."""
    src = _export(_nemo("regular", context=context), tmp_path / f"nemo_reg{context[0]}_{context[1]}.onnx", False, 2,
                  "N")
    c = _check(src, tmp_path, 2, 1, 240)
    assert [a["lookahead_frames"] for a in c.attention] == [context[1]] * 2, c.attention
    assert c.outputs[0].delay_frames == 2 * context[1]
