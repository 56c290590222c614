"""Positions as state, two forms the first tests left out.

1. Rotary position embeddings (RoPE) as in Mimi / LLaMA, per frame (no attention): ``cos``/``sin`` of ``positions *
   inv_freq`` applied by the rotate-half formula ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2,
   x1)`` over the channel axis, on an (N, T, C) stream, on a multi-head (N, T, H, D) view, on an (N, C, T) stream,
   with ``(inv_freq[:, None] @ t[None, :]).T``, in Mimi's interleaved form, and in the HF LLaMA form (``position_ids
   = arange(T)[None].expand(N, -1)``, ``inv_freq[None, :, None].expand(N, -1, 1) @ position_ids[:, None, :]``).
2. Positions meeting a tensor that has look-ahead: a non-causal conv (padding 1 both sides: one frame of look-ahead)
   followed by a sinusoidal encoding from ``arange(T)``; the stream output is the full output delayed by the
   contract's delay, from the first frame on.

Both exporters (TorchScript ``dynamo=False`` with dynamic_axes, ``dynamo=True`` with dynamic_shapes); streamify's
proof must pass, then an own OrtStreamSession loop at several chunk sizes from the first frame must equal the full
graph within 1e-5.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from cosyedge.surgery import streamify
from tests.helpers.streams import feature_frames_streamed

torch = pytest.importorskip("torch")
nn = torch.nn

D = 16  # channels
CHUNKS = (1, 2, 3, 5, 8, 16, 25)
ATOL = 1e-5


def _inv_freq(d):
    return 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))


def _rotate_half(x, dim):
    x1, x2 = x.chunk(2, dim=dim)
    return torch.cat([-x2, x1], dim=dim)


class RopeNTC(nn.Module):
    """(N, T, C): linear, RoPE from ``arange(T)`` (cos/sin (T, C)), linear."""

    def __init__(self, d=D):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.register_buffer("inv_freq", _inv_freq(d))

    def forward(self, x):
        h = self.a(x)
        t = torch.arange(x.shape[1], device=x.device).float()
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        return self.b(h * emb.cos() + _rotate_half(h, -1) * emb.sin())


class RopeHeads(nn.Module):
    """(N, T, C) viewed as (N, T, H, D/H) heads, RoPE per head (LLaMA ``cos[None, :, None, :]``), back to (N, T, C)."""

    def __init__(self, d=D, heads=2):
        super().__init__()
        self.h = heads
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.register_buffer("inv_freq", _inv_freq(d // heads))

    def forward(self, x):
        n, t, c = x.shape
        q = self.a(x).view(n, t, self.h, c // self.h)
        freqs = torch.arange(t, device=x.device).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)[None, :, None, :]
        q = q * emb.cos() + _rotate_half(q, -1) * emb.sin()
        return self.b(q.reshape(n, t, c))


class RopeHF(nn.Module):
    """HF LLaMA rotary embedding: ``position_ids = arange(T)[None].expand(N, -1)``, freqs by a batched matmul."""

    def __init__(self, d=D):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.register_buffer("inv_freq", _inv_freq(d))

    def forward(self, x):
        n, t, _ = x.shape
        position_ids = torch.arange(t, device=x.device).unsqueeze(0).expand(n, -1)
        inv = self.inv_freq[None, :, None].float().expand(n, -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)  # (N, 1, T, C): unsqueeze_dim=1
        h = self.a(x).unsqueeze(1)
        return self.b((h * cos + _rotate_half(h, -1) * sin).squeeze(1))


class RopeMatMul(nn.Module):
    """(N, T, C): freqs as ``(inv_freq[:, None] @ t[None, :]).T`` (a constant on the left of a MatMul with positions,
    then a Transpose of positions), RoPE, linear."""

    def __init__(self, d=D):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.register_buffer("inv_freq", _inv_freq(d))

    def forward(self, x):
        t = torch.arange(x.shape[1], device=x.device).float()
        freqs = (self.inv_freq[:, None] @ t[None, :]).transpose(0, 1)
        emb = torch.cat([freqs, freqs], dim=-1)
        h = self.a(x)
        return self.b(h * emb.cos() + _rotate_half(h, -1) * emb.sin())


class RopeMimi(nn.Module):
    """Kyutai Mimi's ``apply_rope`` (moshi/modules/rope.py, interleaved pairs, offset 0): (N, T, H, D) viewed as
    (N, T, H, D/2, 2), ``ts = arange(T).view(-1, 1, 1)``, real/imaginary rotation, stacked back."""

    def __init__(self, d=D, heads=2, max_period=10000.0):
        super().__init__()
        self.h, self.mp = heads, max_period
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        n, t, c = x.shape
        dh = c // self.h
        q = self.a(x).view(n, t, self.h, dh // 2, 2)
        ds = torch.arange(dh // 2, device=x.device, dtype=torch.float32)
        freqs = torch.exp(ds * (-math.log(self.mp) * 2 / dh))
        ts = torch.arange(t, device=x.device, dtype=torch.float32).view(-1, 1, 1)
        qr, qi = q[..., 0].float(), q[..., 1].float()
        rotr, roti = torch.cos(freqs * ts), torch.sin(freqs * ts)
        qo = torch.stack([qr * rotr - qi * roti, qr * roti + qi * rotr], dim=-1)
        return self.b(qo.reshape(n, t, c))


class RopeNCT(nn.Module):
    """(N, C, T): causal conv, RoPE over channels (cos/sin (C, T)), 1x1 conv."""

    def __init__(self, d=D):
        super().__init__()
        self.a = nn.Conv1d(d, d, 3)
        self.b = nn.Conv1d(d, d, 1)
        self.register_buffer("inv_freq", _inv_freq(d))

    def forward(self, x):
        h = self.a(nn.functional.pad(x, (2, 0)))
        t = torch.arange(h.shape[-1], device=x.device).float()
        freqs = self.inv_freq[:, None] * t[None, :]
        emb = torch.cat([freqs, freqs], dim=0)
        return self.b(h * emb.cos() + _rotate_half(h, 1) * emb.sin())


class LookaheadPE(nn.Module):
    """(N, C, T): non-causal conv (padding 1 both sides: one frame of look-ahead), + sin/cos(arange(T) * freq),
    1x1 conv."""

    def __init__(self, d=D):
        super().__init__()
        self.a = nn.Conv1d(d, d, 3, padding=1)
        self.b = nn.Conv1d(d, d, 1)
        self.register_buffer("freq", torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d)))

    def forward(self, x):
        h = self.a(x)
        ang = self.freq[:, None] * torch.arange(h.shape[-1], device=x.device).float()[None, :]
        return self.b(h + torch.cat([ang.sin(), ang.cos()], dim=0))


# name: (class, time axis, expected delay in frames)
MODELS = {"rope_ntc": (RopeNTC, 1, 0), "rope_heads": (RopeHeads, 1, 0), "rope_hf": (RopeHF, 1, 0),
          "rope_matmul": (RopeMatMul, 1, 0), "rope_mimi": (RopeMimi, 1, 0),
          "rope_nct": (RopeNCT, 2, 0), "lookahead_pe": (LookaheadPE, 2, 1)}


def _export(model, path, ax, dynamo):
    from tests.helpers.models_attention import export

    return export(model, path, (torch.zeros(1, 64, D) if ax == 1 else torch.zeros(1, D, 64),), dynamo, ax)


def _speech_frames(t, ax):
    """(2, T, 16) or (2, 16, T) float32 frames (two streams in one batch) of real speech (16 samples a frame,
    scaled to about unit range)."""
    from tests.precision import int8_fixtures as fx

    x = np.ascontiguousarray(fx.eval_pair()[0][:2 * t * D].astype(np.float32)).reshape(2, t, D) * 4
    return np.ascontiguousarray(x if ax == 1 else x.transpose(0, 2, 1))


def _errors(name, tmp_path, dynamo):
    cls, ax, delay = MODELS[name]
    torch.manual_seed(0)
    src = _export(cls(), tmp_path / f"{name}{int(dynamo)}.onnx", ax, dynamo)
    out = tmp_path / f"{name}{int(dynamo)}.stream.onnx"
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert [(s.shape, s.dtype) for s in c.states if s.kind == "position"] == [(["N", 1], "int64")]
    assert c.delay_samples == 160 * delay and c.outputs[0].delay_frames == delay
    x = _speech_frames(400, ax)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    errs, unshifted = {}, {}
    for k in CHUNKS:
        y = feature_frames_streamed(out, x, ax, k)
        n = min(y.shape[ax] - delay, ref.shape[ax])
        assert n >= x.shape[ax] - k - delay
        got = np.take(y, np.arange(delay, delay + n), axis=ax)
        want = np.take(ref, np.arange(n), axis=ax)
        errs[k] = float(np.abs(got - want).max())
        if delay:
            unshifted[k] = float(np.abs(np.take(y, np.arange(n), axis=ax) - want).max())
    print(name, "dynamo" if dynamo else "torchscript", "proof", c.proof.get("max_abs"), "errors", errs)
    return c, errs, unshifted


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", [m for m in MODELS if m.startswith("rope")])
def test_rope_streams_exactly(tmp_path, name, dynamo):
    """RoPE (rotate-half) per frame: one int64 (N, 1) position state; the proof passes; stream == full from the first
    frame at 7 chunk sizes over 400 frames, batch 2, within 1e-5."""
    c, errs, _ = _errors(name, tmp_path, dynamo)
    assert c.proof["max_abs"] <= ATOL, c.proof
    assert max(errs.values()) <= ATOL, errs


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_positions_after_look_ahead_are_delayed_with_the_output(tmp_path, dynamo):
    """A non-causal conv (1 frame of look-ahead) then a sinusoidal encoding of ``arange(T)``: the contract's delay is
    1 frame and the stream output equals the full output delayed by it, including frame 0 (positions counted for the
    conv's output frames, not the input frames); unshifted it does not match."""
    c, errs, unshifted = _errors("lookahead_pe", tmp_path, dynamo)
    assert c.proof["max_abs"] <= ATOL, c.proof
    assert max(errs.values()) <= ATOL, errs
    assert min(unshifted.values()) > 0.1, unshifted


class _SumOverPositions(nn.Module):
    def forward(self, x):
        w = torch.linspace(0.1, 1.0, x.shape[-1])
        return x * torch.einsum("t,c->c", torch.arange(x.shape[1], device=x.device).float(), w)


def test_einsum_summing_over_positions_is_refused(tmp_path):
    """Closed world: an Einsum that sums positions over time (it needs the sequence's end) is refused naming the
    node; nothing is written."""
    from cosyedge.errors import UsageError

    path = _export(_SumOverPositions(), tmp_path / "sum.onnx", 1, False)
    with pytest.raises(UsageError, match=r"Einsum node '[^']+': .*sums over or takes a diagonal of positions"):
        streamify(path, tmp_path / "sum.stream.onnx", sample_rate_hz=16000, hop_samples=160, frames_per_hop=1)
    assert not (tmp_path / "sum.stream.onnx").exists()
