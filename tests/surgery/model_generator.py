"""A generator of small seeded PyTorch transformer/conv models that tests whether streamify generalizes
beyond the forms the other tests were written for.

Every model is composed from independent choices, each drawn from ``random.Random(seed)`` (:func:`draw`):

- ``kind``: ``bounded`` (about 80 %: every attention has a bounded window, nothing needs the sequence length) or one
  control that must be refused, each with exactly one blocker and otherwise the same bounded model:
  ``unbounded_causal`` (causal attention with no window: ``tril`` or SDPA ``is_causal=True``), ``full``
  (bidirectional attention, no mask), ``data_mask`` (a band whose keys are also masked by the features' values),
  ``length_positions`` (a sinusoid of ``pos / T``, ``T - 1 - pos`` or ``arange(T).flip(0)`` added to the features)
  and ``global_mean`` (``h - h.mean(time)``).
- ``positions``: ``none``; absolute ``table_slice`` (``pe[:, :T]``, or ``pe[:, :, :T]`` in (N, C, T)),
  ``table_gather`` (``pe[arange(T)]``), ``embedding`` (``nn.Embedding(arange(T))``), ``sinusoid`` (computed from
  ``arange(T)``), added in (N, C, T) or (N, T, C) (``pos_layout``), scaled (``x * sqrt(d) + pe``) or not
  (``pos_scaled``); RoPE on queries and keys as the libraries write it: ``rope_hf`` (Hugging Face transformers:
  ``inv_freq[None, :, None].expand(B, -1, 1).float() @ position_ids[:, None, :].float()``, transpose, ``cat(freqs,
  freqs)``, cos/sin, ``rotate_half``), ``rope_moshi`` (moshi's interleaved ``apply_rope``), ``rope_torchtune``
  (``RotaryPositionalEmbeddings``: a cos/sin cache sliced to T, ``x.reshape(..., -1, 2)``), ``rope_xtransformers``
  (``einsum('i , j -> i j', t, inv_freq)``, interleaved rotate_half); ``rel_shift``: relative positions as NeMo /
  Transformer-XL (table of T-1 ... -(T-1) sliced around its centre, ``linear_pos``, pos_bias_u/v,
  ``rel_shift`` by pad + view, ``[..., :T]``).
- ``mask`` (bounded models): ``band`` (keys i-W+1 ... i+L, ``lookahead`` L in 0..2), ``chunk`` (chunk C, n left
  chunks, WeNet's arange form), ``causal_window`` (``tril`` and ``triu(-(W-1))``); ``mask_form``: ``bool`` (applied
  by ``masked_fill`` or ``torch.where``, ``mask_apply``) or ``additive`` (0 / fill added to the scores), the fill
  ``-inf`` or ``-1e9``; ``attn``: ``explicit`` (MatMul/Einsum + Softmax) or ``sdpa``
  (``F.scaled_dot_product_attention`` with the mask as ``attn_mask``; the dynamo exporter at opset 23 writes the ONNX
  ``Attention`` op). Relative positions force ``explicit``.
- ``layout`` of the input and output (``nct`` / ``ntc``), ``heads`` split by ``view`` + transpose, ``reshape`` +
  permute or ``einsum`` with per-head weights; ``gqa`` (half as many key/value heads, ``repeat_interleave``).
- ``norm``: ``layer`` (LayerNorm over channels), ``rms`` (RMSNorm written out), ``batch`` (BatchNorm1d in eval with
  random running statistics).
- ``front``: ``linear`` (1x1 conv), ``causal_conv`` (left pad 2, kernel 3), ``stride2`` / ``stride4`` (causal
  strided conv, kernel 2s, left pad s); ``back`` for strided fronts: ``conv`` (1x1 at the low rate),
  ``convtranspose`` (kernel = stride), ``convtranspose_overlap`` (kernel 2 x stride, the tail trimmed),
  ``pixel_shuffle`` (1x1 conv to s x channels, then a time pixel-shuffle).
- ``batch``: ``symbolic`` ('N'), ``fixed1``, ``fixed2``; ``exporter``: ``torchscript`` (``dynamo=False``, opset 17,
  ``dynamic_axes``), ``dynamo`` (``dynamic_shapes``), ``dynamo23`` (the same at opset 23).
- sizes: ``d_model`` 16 or 32 (head size 8), ``layers`` 1 or 2, window W 4 or 8, chunk 2 or 4 with 1 or 2 left.

Verdict rules (from the construction only, never from cosyedge): a bounded model must be accepted by streamify and
the stream graph must equal the full graph delayed by the contract's delay; a control must be refused with a message
matching its key phrase (:data:`BLOCKER_PHRASES`, taken from the messages in ``cosyedge/surgery/rules``). Categories
(:func:`classify`): ``accepted-exact`` (bounded, accepted, and :func:`stream_errors` <= 1e-4 of the peak at every
chunk size and batch), ``refused-correctly`` (control refused naming its blocker), ``refused-but-bounded`` (a bounded
model refused: the message is recorded), ``refused-wrong-reason`` (control refused, the message does not name the
blocker), ``silent-wrong`` (accepted but not exact, or a control accepted), ``export-failed`` (torch could not export
it, or the exported graph differs from the module at another length; excluded from the percentages).

The chunk loop (:func:`stream_errors`) is independent of cosyedge's runtime: raw ONNX Runtime sessions, every state
of the contract fed its zeros at the start and its previous output after, chunks of 1, 2 and 3 hops (fewer for long
hops), over at least three attention spans, at batch 1 and, where the batch is not fixed to 1, batch 2 with
different rows (fixed 2: batch 2 only).
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

C_IN = 16  # input feature channels (tests.helpers.models_attention.speech_features)
C_OUT = 8
TABLE = 4096  # rows of every position table (frames at the attention's rate)
REL_TOL = 1e-4  # stream vs full, relative to the peak |full|
CONTROLS = ("unbounded_causal", "full", "data_mask", "length_positions", "global_mean")
BLOCKER_PHRASES = {
    # rules/attention.py _site: "its attention is causal with unlimited left context: ... give --attention-window N"
    "unbounded_causal": r"(?i)unlimited|--attention-window",
    # masks.Pattern.describe: "full (bidirectional: every frame sees the whole sequence)"; perframe MatMul: "attention
    # over the whole sequence"
    "full": r"(?i)\bfull\b|bidirectional|whole sequence",
    # rules/attention.py: "its mask '...' depends on the values of <input>", "computed from data", "from the data"
    "data_mask": r"(?i)values of|from (the )?data|data.dependent",
    # rules/positions.py _FUTURE: "needs the sequence's total length ... (T - pos, pos / T, positions counted from the
    # end)"; timeslice: "steps backwards over time (reverses the sequence)"
    "length_positions": r"(?i)length|from the end|revers|backwards|downwards",
    # rules/perframe.py Reduce*: "reduces over the time axis t (a statistic of the whole sequence: a global mean...)"
    "global_mean": r"(?i)whole sequence|global mean|mean over time|statistic",
}
CATEGORIES = ("accepted-exact", "refused-correctly", "refused-but-bounded", "refused-wrong-reason", "silent-wrong",
              "export-failed")

POSITIONS = ("none", "table_slice", "table_gather", "embedding", "sinusoid", "rope_hf", "rope_moshi", "rope_torchtune",
             "rope_xtransformers", "rel_shift")


def draw(seed: int) -> dict:
    """The choices of model ``seed`` (dict of str -> str/int/bool), each drawn independently (module docstring);
    choices that do not apply to the draw (e.g. ``back`` without a strided front) are normalised so that equal
    dicts mean equal models."""
    r = random.Random(seed)
    c: dict[str, Any] = {}
    c["kind"] = "bounded" if r.random() < 0.8 else r.choice(CONTROLS)
    c["positions"] = r.choice(POSITIONS)
    c["pos_layout"] = r.choice(["nct", "ntc"])
    c["pos_scaled"] = r.random() < 0.5
    c["mask"] = r.choice(["band", "chunk", "causal_window"])
    c["mask_form"] = r.choice(["bool", "additive"])
    c["mask_apply"] = r.choice(["masked_fill", "where"])
    c["fill"] = r.choice(["-inf", "-1e9"])
    c["attn"] = r.choice(["explicit", "sdpa"])
    c["layout"] = r.choice(["nct", "ntc"])
    c["heads"] = r.choice(["view", "reshape", "einsum"])
    c["gqa"] = r.random() < 0.3
    c["norm"] = r.choice(["layer", "rms", "batch"])
    c["front"] = r.choice(["linear", "causal_conv", "stride2", "stride4"])
    c["back"] = r.choice(["conv", "convtranspose", "convtranspose_overlap", "pixel_shuffle"])
    c["batch"] = r.choice(["symbolic", "fixed1", "fixed2"])
    c["exporter"] = r.choice(["torchscript", "dynamo", "dynamo23"])
    c["d_model"] = r.choice([16, 32])
    c["layers"] = r.choice([1, 2])
    c["window"] = r.choice([4, 8])
    c["lookahead"] = r.choice([0, 1, 2])
    c["chunk"] = r.choice([2, 4])
    c["left_chunks"] = r.choice([1, 2])
    c["length_form"] = r.choice(["pos_over_t", "t_minus_pos", "flip"])
    # normalise what does not apply
    if c["positions"] not in ("table_slice", "table_gather", "embedding", "sinusoid"):
        c["pos_layout"] = "-"
        if c["positions"] != "rel_shift":
            c["pos_scaled"] = False
    if c["positions"] == "rel_shift":
        c["attn"] = "explicit"
    if c["kind"] in ("unbounded_causal", "full"):
        c["mask"] = "-"
    if c["mask"] != "band":
        c["lookahead"] = 0
    if c["mask"] != "chunk":
        c["chunk"], c["left_chunks"] = 0, 0
    else:
        c["window"] = 0
    if c["kind"] == "full" or (c["kind"] == "unbounded_causal" and c["attn"] == "sdpa"):
        c["mask_form"], c["mask_apply"], c["fill"] = "-", "-", "-"
    if c["mask_form"] == "additive" or c["attn"] == "sdpa":
        c["mask_apply"] = "-"
    if c["attn"] == "sdpa" and c["mask_form"] == "bool":
        c["fill"] = "-"
    if c["front"] in ("linear", "causal_conv"):
        c["back"] = "conv"
    if c["kind"] != "length_positions":
        c["length_form"] = "-"
    return c


def stride(c: dict) -> int:
    """Time stride (int) of the front end: input frames per attention frame."""
    return {"stride2": 2, "stride4": 4}.get(c["front"], 1)


def out_rate(c: dict) -> int:
    """Output frames per attention frame (int): the stride when the back end upsamples, else 1."""
    return stride(c) if c["back"] in ("convtranspose", "convtranspose_overlap", "pixel_shuffle") else 1


def frames_per_hop(c: dict) -> int:
    """Input frames per hop (int): the stride, times the chunk for a chunked mask (one chunk per hop)."""
    return stride(c) * (c["chunk"] if c["mask"] == "chunk" else 1)


def span(c: dict) -> int:
    """Attention frames one query can see (int), for the length of the stream test."""
    if c["mask"] == "chunk":
        return (c["left_chunks"] + 1) * c["chunk"]
    return c["window"] + c["lookahead"] if c["window"] else 8


def blocker(c: dict) -> str | None:
    """The key-phrase regex (str) a refusal of this control must match; None for a bounded model."""
    return BLOCKER_PHRASES.get(c["kind"])


# ---------------------------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------------------------

def _torch():
    import torch

    return torch


def build(c: dict, seed: int = 0):
    """The nn.Module (eval mode, seeded weights) for choices ``c``: input ``x`` (N, 16, T) or (N, T, 16) by
    ``layout``, output ``y`` (N, 8, T') or (N, T', 8), T' = T or T / stride (module docstring)."""
    torch = _torch()
    torch.manual_seed(seed)
    model = _make_model_class()(c)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
        for name, p in model.named_parameters():  # non-zero position biases and RMS weights
            if name.endswith(("pos_bias_u", "pos_bias_v")):
                p.normal_(0, 0.3)
    return model.eval()


def _sinusoid(pos, d):
    """(T, d) sin/cos of float positions ``pos`` (T,) (Transformer's encoding, base 10000)."""
    torch = _torch()
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    ang = pos[:, None] * inv[None, :]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


def _make_model_class():
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def rotate_half_interleaved(x):  # x-transformers
        x = x.reshape(*x.shape[:-1], -1, 2)
        x1, x2 = x.unbind(-1)
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))

        def forward(self, x):  # (N, T, C)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Norm(nn.Module):
        def __init__(self, kind, d):
            super().__init__()
            self.kind = kind
            self.n = {"layer": nn.LayerNorm, "rms": RMSNorm, "batch": nn.BatchNorm1d}[kind](d)

        def forward(self, x):  # (N, T, C)
            if self.kind == "batch":
                return self.n(x.transpose(1, 2)).transpose(1, 2)
            return self.n(x)

    class Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            d = c["d_model"]
            self.dh = 8
            self.h = d // self.dh
            self.hkv = self.h // 2 if c["gqa"] else self.h
            if c["heads"] == "einsum":
                s = 1 / math.sqrt(d)
                self.wq = nn.Parameter(torch.randn(self.h, self.dh, d) * s)
                self.wk = nn.Parameter(torch.randn(self.hkv, self.dh, d) * s)
                self.wv = nn.Parameter(torch.randn(self.hkv, self.dh, d) * s)
                self.wo = nn.Parameter(torch.randn(self.h, self.dh, d) * s)
            else:
                self.q = nn.Linear(d, self.h * self.dh)
                self.k = nn.Linear(d, self.hkv * self.dh)
                self.v = nn.Linear(d, self.hkv * self.dh)
                self.o = nn.Linear(self.h * self.dh, d)
            pos = c["positions"]
            half = torch.arange(0, self.dh, 2, dtype=torch.float32)
            self.register_buffer("inv_freq", 1.0 / (10000.0 ** (half / self.dh)), persistent=False)
            if pos == "rope_torchtune":  # RotaryPositionalEmbeddings._rope_init / build_rope_cache
                idx = torch.arange(TABLE, dtype=torch.float32)
                ang = torch.einsum("i, j -> ij", idx, self.inv_freq).float()
                self.register_buffer("cache", torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1),
                                     persistent=False)
            if pos == "rel_shift":
                p = torch.arange(TABLE - 1, -TABLE, -1, dtype=torch.float32)
                self.register_buffer("rel_pe", _sinusoid(p, d)[None], persistent=False)
                self.linear_pos = nn.Linear(d, self.h * self.dh, bias=False)
                self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.dh))
                self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.dh))

        # heads ----------------------------------------------------------------------------------------------
        def split(self, x, which):
            b, t = x.shape[0], x.shape[1]
            h = self.h if which == "q" else self.hkv
            if self.c["heads"] == "einsum":
                return torch.einsum("btc,hdc->bhtd", x, getattr(self, "w" + which))
            y = getattr(self, which)(x)
            if self.c["heads"] == "view":
                return y.view(b, t, h, self.dh).transpose(1, 2)
            return y.reshape(b, -1, h, self.dh).permute(0, 2, 1, 3)

        def merge(self, o):
            if self.c["heads"] == "einsum":
                return torch.einsum("bhtd,hdc->btc", o, self.wo)
            b, t = o.shape[0], o.shape[2]
            if self.c["heads"] == "view":
                return self.o(o.transpose(1, 2).contiguous().view(b, t, self.h * self.dh))
            return self.o(o.permute(0, 2, 1, 3).reshape(b, -1, self.h * self.dh))

        # RoPE -----------------------------------------------------------------------------------------------
        def rope(self, q, k):
            pos = self.c["positions"]
            b, _, t, _ = q.shape
            if pos == "rope_hf":  # transformers MimiRotaryEmbedding / LlamaRotaryEmbedding + apply_rotary_pos_emb
                position_ids = torch.arange(t, device=q.device).unsqueeze(0).expand(b, -1)
                inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
                freqs = (inv.float() @ position_ids[:, None, :].float()).transpose(1, 2)
                emb = torch.cat((freqs, freqs), dim=-1)
                cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
                return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if pos == "rope_moshi":  # moshi/modules/rope.py apply_rope (time_before_heads=False), offset 0
                d = q.shape[-1]
                ds = torch.arange(d // 2, device=q.device, dtype=torch.float32)
                freqs = torch.exp(ds * (-math.log(10000.0) * 2 / d))
                ts = torch.arange(t, device=q.device, dtype=torch.float32).view(-1, 1)
                rotr, roti = torch.cos(freqs * ts), torch.sin(freqs * ts)

                def one(x):
                    dims = x.shape[:-1]
                    x = x.view(*dims, d // 2, 2)
                    xr, xi = x[..., 0].float(), x[..., 1].float()
                    return torch.stack([xr * rotr - xi * roti, xr * roti + xi * rotr], dim=-1).view(*dims, d)
                return one(q), one(k)
            if pos == "rope_torchtune":  # torchtune RotaryPositionalEmbeddings.forward on (b, s, n_h, h_d)
                def one(x):
                    x = x.transpose(1, 2)
                    seq_len = x.size(1)
                    rope_cache = self.cache[:seq_len]
                    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
                    rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
                    x_out = torch.stack([
                        xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
                        xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1]], -1)
                    return x_out.flatten(3).transpose(1, 2)
                return one(q), one(k)
            if pos == "rope_xtransformers":  # x_transformers RotaryEmbedding + apply_rotary_pos_emb
                tt = torch.arange(t, device=q.device)
                freqs = torch.einsum("i , j -> i j", tt.type_as(self.inv_freq), self.inv_freq)
                freqs = torch.stack((freqs, freqs), dim=-1).flatten(-2)
                return (q * freqs.cos() + rotate_half_interleaved(q) * freqs.sin(),
                        k * freqs.cos() + rotate_half_interleaved(k) * freqs.sin())
            return q, k

        # mask -----------------------------------------------------------------------------------------------
        def allowed(self, t, x):
            """(T, T) bool, True = query i may see key j (or (N, 1, T, T) for the data control); None = no mask."""
            c = self.c
            kind = c["kind"]
            if kind == "full":
                return None
            i = torch.arange(t, device=x.device)
            if kind == "unbounded_causal":
                return torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            if c["mask"] == "band":
                a = (i[None, :] <= i[:, None] + c["lookahead"]) & (i[None, :] > i[:, None] - c["window"])
            elif c["mask"] == "chunk":  # WeNet subsequent_chunk_mask, arange form
                ci = i // c["chunk"]
                a = (ci[None, :] <= ci[:, None]) & (ci[None, :] >= ci[:, None] - c["left_chunks"])
            else:  # causal_window: tril & triu
                ones = torch.ones(t, t, dtype=torch.bool, device=x.device)
                a = ones.tril() & ones.triu(-(c["window"] - 1))
            if kind == "data_mask":  # keys of quiet frames hidden (the diagonal kept so no row is empty)
                keep = (x.abs().mean(-1) > 0.5)[:, None, None, :]
                diag = i[:, None] == i[None, :]  # not torch.eye: TorchScript writes a bool EyeLike ORT cannot run
                a = a[None, None] & (keep | diag[None, None])
            return a

        def forward(self, x):  # (N, T, C)
            c = self.c
            b, t = x.shape[0], x.shape[1]
            q, k, v = self.split(x, "q"), self.split(x, "k"), self.split(x, "v")
            q, k = self.rope(q, k)
            if self.hkv != self.h:
                k = k.repeat_interleave(self.h // self.hkv, dim=1)
                v = v.repeat_interleave(self.h // self.hkv, dim=1)
            a = self.allowed(t, x)
            fill = float("-inf") if c["fill"] == "-inf" else -1e9
            if c["attn"] == "sdpa":
                if c["kind"] == "unbounded_causal" and c["mask_form"] == "-":
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                elif a is None:
                    o = F.scaled_dot_product_attention(q, k, v)
                elif c["mask_form"] == "bool":
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=a)
                else:
                    m = torch.zeros(a.shape, dtype=q.dtype, device=q.device).masked_fill(~a, fill)
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
                return self.merge(o)
            if c["heads"] == "einsum":
                s = torch.einsum("bhid,bhjd->bhij", q, k)
            else:
                s = q @ k.transpose(-2, -1)
            if c["positions"] == "rel_shift":  # NeMo RelPositionMultiHeadAttention (Transformer-XL)
                centre = self.rel_pe.size(1) // 2 + 1
                pe = self.rel_pe[:, centre - t:centre + t - 1]  # positions t-1 ... -(t-1)
                p = self.linear_pos(pe).view(1, -1, self.h, self.dh).transpose(1, 2)
                qt = q.transpose(1, 2)
                qu = (qt + self.pos_bias_u).transpose(1, 2)
                qv = (qt + self.pos_bias_v).transpose(1, 2)
                bd = torch.matmul(qv, p.transpose(-2, -1))
                bh, hh, t1, pl = bd.size()
                bd = F.pad(bd, pad=(1, 0)).view(bh, hh, -1, t1)[:, :, 1:].view(bh, hh, t1, pl)
                ac = torch.matmul(qu, k.transpose(-2, -1))
                s = ac + bd[:, :, :, :ac.size(-1)]
            s = s / math.sqrt(self.dh)
            if a is not None:
                if c["mask_form"] == "additive":
                    s = s + torch.zeros(a.shape, dtype=s.dtype, device=s.device).masked_fill(~a, fill)
                elif c["mask_apply"] == "where":
                    s = torch.where(a, s, torch.tensor(fill, dtype=s.dtype, device=s.device))
                else:
                    s = s.masked_fill(~a, fill)
            p_ = torch.softmax(s, dim=-1)
            o = torch.einsum("bhij,bhjd->bhid", p_, v) if c["heads"] == "einsum" else p_ @ v
            return self.merge(o)

    class Layer(nn.Module):
        def __init__(self, c):
            super().__init__()
            d = c["d_model"]
            self.n1, self.n2 = Norm(c["norm"], d), Norm(c["norm"], d)
            self.att = Attention(c)
            self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = x + self.att(self.n1(x))
            return x + self.ff(self.n2(x))

    class GenModel(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            d, s = c["d_model"], stride(c)
            self.s = s
            if c["front"] == "linear":
                self.front, self.front_pad = nn.Conv1d(C_IN, d, 1), 0
            elif c["front"] == "causal_conv":
                self.front, self.front_pad = nn.Conv1d(C_IN, d, 3), 2
            else:
                self.front, self.front_pad = nn.Conv1d(C_IN, d, 2 * s, stride=s), s
            pos = c["positions"]
            if pos in ("table_slice", "table_gather"):
                pe = _sinusoid(torch.arange(TABLE, dtype=torch.float32), d)
                if pos == "table_slice" and c["pos_layout"] == "nct":
                    self.register_buffer("pe", pe.t()[None].contiguous(), persistent=False)  # (1, d, L)
                elif pos == "table_slice":
                    self.register_buffer("pe", pe[None], persistent=False)  # (1, L, d)
                else:
                    self.register_buffer("pe", pe, persistent=False)  # (L, d)
            if pos == "embedding":
                self.emb = nn.Embedding(TABLE, d)
            self.layers = nn.ModuleList(Layer(c) for _ in range(c["layers"]))
            self.norm = Norm(c["norm"], d)
            back = c["back"]
            if back == "conv":
                self.back = nn.Conv1d(d, C_OUT, 1)
            elif back == "convtranspose":
                self.back = nn.ConvTranspose1d(d, C_OUT, s, stride=s)
            elif back == "convtranspose_overlap":
                self.back = nn.ConvTranspose1d(d, C_OUT, 2 * s, stride=s)
            else:
                self.back = nn.Conv1d(d, C_OUT * s, 1)

        def positions(self, h, t):
            """Absolute positions (or the length control) added to ``h`` (N, d, T) -> (N, T, d)."""
            c = self.c
            pos, d = c["positions"], c["d_model"]
            scale = math.sqrt(d) if c["pos_scaled"] else None
            if c["kind"] == "length_positions":
                p = torch.arange(t, device=h.device, dtype=torch.float32)
                if c["length_form"] == "pos_over_t":
                    p = p / t * 100.0
                elif c["length_form"] == "t_minus_pos":
                    p = t - 1 - p
                else:
                    p = p.flip(0)
                h = h + _sinusoid(p, d).t()[None]
            if pos in ("table_slice", "table_gather", "embedding", "sinusoid"):
                if pos == "table_slice":
                    pe = self.pe[:, :, :t] if c["pos_layout"] == "nct" else self.pe[:, :t]
                elif pos == "table_gather":
                    pe = self.pe[torch.arange(t, device=h.device)][None]
                elif pos == "embedding":
                    pe = self.emb(torch.arange(t, device=h.device))[None]
                else:
                    pe = _sinusoid(torch.arange(t, device=h.device).float(), d)[None]
                if c["pos_layout"] == "nct":
                    if pos != "table_slice":
                        pe = pe.transpose(1, 2)
                    h = (h * scale if scale else h) + pe
                    return h.transpose(1, 2)
                h = h.transpose(1, 2)
                return (h * scale if scale else h) + pe
            if pos == "rel_shift" and scale:  # NeMo RelPositionalEncoding's xscale
                h = h * scale
            return h.transpose(1, 2)

        def forward(self, x):
            c = self.c
            if c["layout"] == "ntc":
                x = x.transpose(1, 2)
            if self.front_pad:
                x = F.pad(x, (self.front_pad, 0))
            h = self.front(x)  # (N, d, T')
            t = h.shape[2]
            h = self.positions(h, t)  # (N, T', d)
            if c["kind"] == "global_mean":
                h = h - h.mean(dim=1, keepdim=True)
            for layer in self.layers:
                h = layer(h)
            h = self.norm(h).transpose(1, 2)  # (N, d, T')
            back = c["back"]
            y = self.back(h)
            if back == "convtranspose_overlap":
                y = y[:, :, :-self.s]
            elif back == "pixel_shuffle":
                n = y.shape[0]
                y = y.view(n, C_OUT, self.s, t).permute(0, 1, 3, 2).reshape(n, C_OUT, t * self.s)
            return y.transpose(1, 2) if c["layout"] == "ntc" else y

    return GenModel


# ---------------------------------------------------------------------------------------------------------------
# export, streamify, chunk loop, verdict
# ---------------------------------------------------------------------------------------------------------------

def features(c: dict, frames: int, n: int) -> np.ndarray:
    """(n, 16, frames) or (n, frames, 16) float32 speech features (real speech, rows differ)."""
    from tests.helpers.models_attention import speech_features

    return speech_features(frames, 2 if c["layout"] == "nct" else 1, n=n)


def time_axis(c: dict) -> int:
    return 2 if c["layout"] == "nct" else 1


def export(model, c: dict, path: Path) -> Path:
    """Export ``model`` with choices ``c`` (``batch``, ``exporter``): input ``x``, output ``y``; the time axis dynamic,
    the batch 'N' or fixed. Returns ``path``."""
    torch = _torch()
    ax = time_axis(c)
    s = fph = frames_per_hop(c)
    n = {"fixed1": 1, "fixed2": 2, "symbolic": 2}[c["batch"]]
    x = torch.from_numpy(features(c, 24 * s, n))
    path = Path(path)
    with torch.no_grad():
        if c["exporter"] == "torchscript":
            axes = {"x": {ax: "T"}, "y": {ax: "T_out"}}
            if c["batch"] == "symbolic":
                axes = {k: {0: "N", **v} for k, v in axes.items()}
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17,
                              dynamo=False, dynamic_axes=axes)
        else:
            st = stride(c)
            tdim = torch.export.Dim("t", min=2, max=TABLE // 2) * st if st > 1 else \
                torch.export.Dim("T", min=2 * fph, max=TABLE // 2)
            shape = {ax: tdim}
            if c["batch"] == "symbolic":
                shape[0] = torch.export.Dim("N", max=64)
            kw = {"opset_version": 23} if c["exporter"] == "dynamo23" else {}
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                              dynamic_shapes=({**shape},), verbose=False, **kw)
    return path


def check_export(model, c: dict, path: Path) -> str:
    """'' when ONNX Runtime runs the export at a length other than the example's and equals the module within
    1e-4 of its peak; else why not (an exporter problem, not streamify's)."""
    import onnxruntime as ort

    torch = _torch()
    s = frames_per_hop(c)
    n = 1 if c["batch"] == "fixed1" else 2
    x = features(c, 18 * s, n)
    try:
        got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception as e:  # noqa: BLE001 - any runtime failure of the export
        return f"ONNX Runtime cannot run the export at {x.shape}: {str(e).splitlines()[0][:200]}"
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    if got.shape != want.shape:
        return f"export gives shape {got.shape}, the module {want.shape}"
    err = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-6)
    return "" if err < 1e-4 else f"export differs from the module by {err:.2e} of the peak"


def _run_stream(sess, contract, x, ax, chunk):
    names = [o.name for o in sess.get_outputs()]
    states = {s.input: s.zeros(x.shape[0]) for s in contract.states}
    out_name = contract.stream_outputs[0].name
    in_name = contract.stream_inputs[0].name
    parts = []
    t = x.shape[ax]
    for i in range(0, t - t % chunk, chunk):
        sl = [slice(None)] * x.ndim
        sl[ax] = slice(i, i + chunk)
        res = dict(zip(names, sess.run(None, {in_name: np.ascontiguousarray(x[tuple(sl)]), **states})))
        parts.append(res[out_name])
        states = {s.input: res[s.output] for s in contract.states}
    return np.concatenate(parts, axis=contract.stream_outputs[0].time_axis)


def stream_errors(c: dict, src: Path, out: Path, contract) -> dict:
    """Relative errors {'b<batch>/k<chunk frames>': max|stream - full| / peak|full|} of the stream graph ``out`` run by
    raw ONNX Runtime (states from ``contract``, zeros at start), its output shifted by the contract's delay, against
    the full graph ``src``, from frame 0, at 1-3 hops per chunk and batch 1 / 2 (as the batch choice allows)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    full = ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
    sess = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"])
    fph = frames_per_hop(c)
    ax = time_axis(c)
    oax = contract.stream_outputs[0].time_axis
    delay = contract.stream_outputs[0].delay_frames
    hops = max(6, -(-3 * span(c) * stride(c) // fph) + 6)
    hops += (-hops) % 6
    frames = hops * fph
    ks = (1, 2, 3) if fph <= 8 else (1, 2)
    batches = {"fixed1": (1,), "fixed2": (2,), "symbolic": (1, 2)}[c["batch"]]
    errs = {}
    for n in batches:
        x = features(c, frames, 2)[:n]
        ref = full.run(None, {"x": x})[0]
        peak = max(float(np.abs(ref).max()), 1e-6)
        for k in ks:
            y = _run_stream(sess, contract, x, ax, k * fph)
            m = min(y.shape[oax] - delay, ref.shape[oax])
            if m < ref.shape[oax] // 2:
                errs[f"b{n}/k{k * fph}"] = float("inf")
                continue
            got = np.take(y, np.arange(delay, delay + m), axis=oax)
            want = np.take(ref, np.arange(m), axis=oax)
            errs[f"b{n}/k{k * fph}"] = float(np.abs(got - want).max()) / peak
    return errs


@dataclasses.dataclass
class Result:
    """One generated model's outcome (see :func:`classify`)."""

    seed: int
    choices: dict
    category: str
    message: str = ""
    errors: dict = dataclasses.field(default_factory=dict)
    delay_frames: int | None = None
    seconds: float = 0.0


def classify(seed: int, workdir: Path, keep: bool = False) -> Result:
    """Build, export, streamify and check model ``seed``; the verdict comes from the construction (module docstring).

    Args:
        seed (int): Model seed (:func:`draw`).
        workdir (Path): Folder for the ONNX files (removed after unless ``keep``).
    Returns:
        Result: category, the refusal message or the stream errors, time taken.
    """
    from cosyedge.errors import CosyEdgeError
    from cosyedge.surgery import streamify

    t0 = time.perf_counter()
    c = draw(seed)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src, out = workdir / f"gen{seed}.onnx", workdir / f"gen{seed}.stream.onnx"

    def done(cat, msg="", **kw):
        if not keep:
            for p in workdir.glob(f"gen{seed}.*"):
                p.unlink()
        return Result(seed, c, cat, msg.replace(str(workdir), "<dir>"), seconds=time.perf_counter() - t0, **kw)

    try:
        model = build(c, seed)
        export(model, c, src)
    except Exception as e:  # noqa: BLE001 - torch's exporter failing is its own category
        return done("export-failed", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}")
    why = check_export(model, c, src)
    if why:
        return done("export-failed", why)
    fph = frames_per_hop(c)
    try:
        contract = streamify(src, out, sample_rate_hz=16000, hop_samples=160 * fph, frames_per_hop=fph)
    except CosyEdgeError as e:
        msg = str(e)
        if c["kind"] == "bounded":
            return done("refused-but-bounded", f"{type(e).__name__}: {msg}")
        ok = re.search(blocker(c), msg.replace(str(workdir), ""))
        return done("refused-correctly" if ok else "refused-wrong-reason", f"{type(e).__name__}: {msg}")
    except Exception as e:  # noqa: BLE001 - a crash inside streamify is a refusal for a wrong reason
        msg = f"crash {type(e).__name__}: {e} | {traceback.format_exc().strip().splitlines()[-3][:200]}"
        return done("refused-but-bounded" if c["kind"] == "bounded" else "refused-wrong-reason", msg)
    delay = contract.stream_outputs[0].delay_frames
    if c["kind"] != "bounded":
        return done("silent-wrong", f"control '{c['kind']}' accepted", delay_frames=delay)
    try:
        errs = stream_errors(c, src, out, contract)
    except Exception as e:  # noqa: BLE001 - an accepted graph that does not run chunk by chunk is wrong
        return done("silent-wrong", f"stream graph fails in the chunk loop: {type(e).__name__}: {str(e)[:300]}",
                    delay_frames=delay)
    worst = max(errs.values())
    if worst <= REL_TOL:
        return done("accepted-exact", errors=errs, delay_frames=delay)
    return done("silent-wrong", f"stream differs from the full graph by {worst:.3g} of the peak", errors=errs,
                delay_frames=delay)


def describe(c: dict) -> str:
    """Short one-line form of choices ``c`` (the ones that apply)."""
    return " ".join(f"{k}={v}" for k, v in c.items() if v not in ("-", 0, False) or k in ("kind",))
