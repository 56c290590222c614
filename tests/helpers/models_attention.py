"""Attention models for the streamify tests: real architectures rebuilt from their upstream code, seeded random weights.

Every model maps features to features of the same time length, computes its mask inside ``forward`` from the
input's length (``torch.arange`` / ``torch.tril`` / ``triu`` as upstream does), and takes no mask input, except
the two data-dependent ones (``WenetLengths``, ``ValueMaskWindow``), which must be refused. Upstream snapshots
followed (read with ``git show``):

- WeNet ``wenet-e2e/wenet`` @ 015469960db73eb19c49a48c020d5ac9db69bae5 (2025-12-19):
  ``wenet/models/transformer/{attention,convolution,encoder_layer,embedding,subsampling,encoder}.py``,
  ``wenet/utils/mask.py``.
- CosyVoice ``FunAudioLLM/CosyVoice`` @ ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40 (2026-03-16):
  ``cosyvoice/transformer/{attention,embedding}.py``, ``cosyvoice/utils/mask.py``.
- NeMo ``NVIDIA/NeMo`` @ 8cfedd7203462cb251a914e700e5605444277561 (2025-09-20) and the ``nemo_toolkit`` 3.0.0
  wheel (identical ``multi_head_attention.py`` / ``conformer_modules.py``; its ``conformer_encoder.py`` adds the
  ``chunked_limited_with_rc`` style, not used here): ``nemo/collections/asr/parts/submodules/
  {multi_head_attention,conformer_modules,causal_convs}.py``, ``nemo/collections/asr/modules/conformer_encoder.py``
  (``_create_masks``, ``forward_internal``).
- Moshi ``kyutai-labs/moshi`` @ e6a55d2722a65870ef52a6c9f6ecfc0e90f38362 (2026-05-16):
  ``moshi/moshi/modules/{transformer,rope}.py``, ``moshi/moshi/models/loaders.py`` (``_transformer_kwargs``).

``tests/verify_attention_upstream.py`` loads the upstream classes themselves (the nemo_toolkit 3.0.0 and moshi
0.2.13 wheels installed with ``--no-deps``, the WeNet and CosyVoice sources above) with the same weights: the outputs
are equal (0.0; CosyVoice <= 5.4e-6) and so are the masks.

Dropout is left out (eval mode; p would be 0 at inference). Sizes are small (d_model 32, 2-4 heads, 1-2 layers).
:func:`build` seeds ``torch.manual_seed(0)`` and then draws every parameter that upstream initialises to a
constant (NeMo's ``pos_bias_u/v`` are zeros, Mimi's LayerScale is 0.01, norms are 1/0) from a seeded random
distribution, so that no path of the model is inert and a wrong cache shows in the output.

:func:`export` exports with either exporter (TorchScript ``dynamo=False`` with ``dynamic_axes``, ``dynamo=True``
with ``dynamic_shapes``, batch 2 example as in ``tests/surgery/rules/test_rope.py``), :func:`speech_features`
gives deterministic real-speech features.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

C_IN = 16  # feature channels of every model's input (and output)


# ---------------------------------------------------------------------------------------------------------------
# WeNet / CosyVoice
# ---------------------------------------------------------------------------------------------------------------

def subsequent_chunk_mask_loop(size: int, chunk_size: int, num_left_chunks: int = -1) -> torch.Tensor:
    """``wenet/utils/mask.py::subsequent_chunk_mask`` verbatim (a Python loop over ``size``: it cannot export with a
    dynamic length, the trace bakes ``size``); the reference :func:`subsequent_chunk_mask` is checked against."""
    ret = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        if num_left_chunks < 0:
            start = 0
        else:
            start = max((i // chunk_size - num_left_chunks) * chunk_size, 0)
        ending = min((i // chunk_size + 1) * chunk_size, size)
        ret[i, start:ending] = True
    return ret


def subsequent_chunk_mask(size: int, chunk_size: int, num_left_chunks: int = -1,
                          device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """WeNet's static chunk mask (size, size), bool, True = visible, computed with ``torch.arange`` so it exports
    with a dynamic length.

    For ``num_left_chunks < 0`` this is CosyVoice's ONNX-friendly ``subsequent_chunk_mask`` verbatim
    (``cosyvoice/utils/mask.py``: ``pos_idx < (pos_idx // C + 1) * C``; its note says it "doesn't support
    num_left_chunks"); for ``num_left_chunks >= 0`` the lower bound ``start = max((i // C - n) * C, 0)`` of WeNet's
    loop is added the same way (``pos_idx >= (pos_idx // C - n) * C``). Equal to :func:`subsequent_chunk_mask_loop`
    for every size (tests check it).
    """
    pos_idx = torch.arange(size, device=device)
    block = torch.div(pos_idx, chunk_size, rounding_mode="trunc")
    ret = pos_idx.unsqueeze(0) < ((block + 1) * chunk_size).unsqueeze(1)
    if num_left_chunks >= 0:
        ret = ret & (pos_idx.unsqueeze(0) >= ((block - num_left_chunks) * chunk_size).unsqueeze(1))
    return ret


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """``wenet/utils/mask.py::make_pad_mask``: (B, max_len) bool, True at padded frames."""
    batch_size = lengths.size(0)
    max_len = max_len if max_len > 0 else lengths.max().item()
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    seq_length_expand = lengths.unsqueeze(-1)
    return seq_range_expand >= seq_length_expand


class WenetPositionalEncoding(nn.Module):
    """``wenet/models/transformer/embedding.py`` ``PositionalEncoding`` (``pe`` buffer of ``max_len`` rows, sliced
    ``pe[:, offset:offset + T]``); ``rel=True`` is its ``RelPositionalEncoding`` (``x * xscale`` only, the slice
    returned as ``pos_emb``: WeNet's "relative" encoding is the absolute table of the key positions)."""

    def __init__(self, d_model: int, max_len: int = 5000, rel: bool = False):
        super().__init__()
        self.xscale, self.rel = math.sqrt(d_model), rel
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x, offset: int = 0):
        pos_emb = self.pe[:, offset:offset + x.size(1)]
        if self.rel:
            return x * self.xscale, pos_emb
        return x * self.xscale + pos_emb, pos_emb


class EspnetRelPositionalEncoding(nn.Module):
    """``cosyvoice/transformer/embedding.py`` ``EspnetRelPositionalEncoding`` (positions T-1 ... -(T-1), a (1, 2T-1,
    d) slice of a table built once for ``max_len``: ``pe[:, L//2 - T + 1 : L//2 + T]``)."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        self.d_model, self.xscale = d_model, math.sqrt(d_model)
        pe_positive = torch.zeros(max_len, d_model)
        pe_negative = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe_positive[:, 0::2] = torch.sin(position * div_term)
        pe_positive[:, 1::2] = torch.cos(position * div_term)
        pe_negative[:, 0::2] = torch.sin(-1 * position * div_term)
        pe_negative[:, 1::2] = torch.cos(-1 * position * div_term)
        pe_positive = torch.flip(pe_positive, [0]).unsqueeze(0)
        pe_negative = pe_negative[1:].unsqueeze(0)
        self.register_buffer("pe", torch.cat([pe_positive, pe_negative], dim=1))

    def forward(self, x, offset: int = 0):
        x = x * self.xscale
        size = x.size(1)
        pos_emb = self.pe[:, self.pe.size(1) // 2 - size - offset + 1: self.pe.size(1) // 2 + size + offset]
        return x, pos_emb


class WenetMultiHeadedAttention(nn.Module):
    """``wenet/models/transformer/attention.py`` ``MultiHeadedAttention`` (``use_sdpa=False``, no cache): scores
    ``q @ k^T / sqrt(d_k)``, ``masked_fill(~mask, -inf)``, softmax, ``masked_fill(~mask, 0)`` after the softmax,
    ``@ v``. ``mask`` (B or 1, T1, T2) bool, True = visible."""

    def __init__(self, n_head: int, n_feat: int):
        super().__init__()
        assert n_feat % n_head == 0
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)

    def _forward_linearx(self, linear, x):
        x = linear(x)
        x = x.view(x.size()[:-1] + torch.Size([self.h, self.d_k]))
        return x.transpose(-3, -2)  # (batch, head, time, d_k)

    def forward_qkv(self, query, key, value):
        return (self._forward_linearx(self.linear_q, query), self._forward_linearx(self.linear_k, key),
                self._forward_linearx(self.linear_v, value))

    def forward_attention(self, value, scores, mask):
        if mask.size(-1) > 0:
            mask = mask.unsqueeze(-3).eq(0)  # (batch, 1, *, time2)
            mask = mask[..., :scores.size(-1)]
            scores = scores.masked_fill(mask, -float("inf"))
            attn = torch.softmax(scores.float(), dim=-1).type_as(value).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores.float(), dim=-1).type_as(value)
        x = torch.matmul(attn, value)  # (batch, head, time1, d_k)
        x = x.transpose(-3, -2).contiguous()
        x = x.view(x.size()[:-2] + torch.Size([self.h * self.d_k]))
        return self.linear_out(x)

    def forward(self, query, key, value, mask, pos_emb=None):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class WenetRelPositionMultiHeadedAttention(WenetMultiHeadedAttention):
    """``wenet/models/transformer/attention.py`` ``RelPositionMultiHeadedAttention``: ``pos_bias_u/v``
    (h, d_k), ``matrix_ac = (q + u) @ k^T``, ``matrix_bd = (q + v) @ p^T`` with ``p = linear_pos(pos_emb)``.

    ``rel_shift=False`` (WeNet today): ``rel_shift`` is defined but never called; ``pos_emb`` is
    ``RelPositionalEncoding``'s (1, T, d) absolute table, so ``matrix_bd[i, j]`` depends on the key's absolute
    position j. ``rel_shift=True`` follows ``cosyvoice/transformer/attention.py`` instead: with the Espnet
    (1, 2T-1, d) encoding the shapes differ and ``rel_shift`` (zero pad column, view (T+1... ), drop a row, keep
    ``x.size(-1) // 2 + 1`` columns) makes ``matrix_bd[i, j]`` depend on i - j.
    """

    def __init__(self, n_head: int, n_feat: int, rel_shift: bool = False):
        super().__init__(n_head, n_feat)
        self.use_rel_shift = rel_shift
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.Tensor(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.Tensor(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def rel_shift(self, x):
        """``cosyvoice/transformer/attention.py`` ``RelPositionMultiHeadedAttention.rel_shift`` verbatim."""
        zero_pad = torch.zeros((x.size()[0], x.size()[1], x.size()[2], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(x.size()[0], x.size()[1], x.size(3) + 1, x.size(2))
        x = x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]  # only keep the positions from 0 to time2
        return x

    def forward(self, query, key, value, mask, pos_emb=None):
        q, k, v = self.forward_qkv(query, key, value)
        q = q.transpose(1, 2)  # (batch, time1, head, d_k)
        n_batch_pos = pos_emb.size(0)
        p = self.linear_pos(pos_emb).view(n_batch_pos, -1, self.h, self.d_k)
        p = p.transpose(1, 2)  # (batch, head, time1, d_k)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_bd = torch.matmul(q_with_bias_v, p.transpose(-2, -1))
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        if self.use_rel_shift and matrix_ac.shape != matrix_bd.shape:
            matrix_bd = self.rel_shift(matrix_bd)
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class EspnetLegacyRelPositionalEncoding(nn.Module):
    """ESPnet ``LegacyRelPositionalEncoding`` (``espnet/nets/pytorch_backend/transformer/embedding.py``, espnet 202511:
    ``PositionalEncoding(reverse=True)``): a table for positions ``max_len - 1 .. 0`` built at init, ``x * xscale``,
    ``pos_emb = pe[:, :T]`` (positions ``max_len - 1 .. max_len - T``: counted from the table's end, not relative to
    the sequence; the reason ESPnet replaced it, espnet/espnet#2816)."""

    def __init__(self, d_model: int, max_len: int = 5000):
        super().__init__()
        self.xscale = math.sqrt(d_model)
        position = torch.arange(max_len - 1, -1, -1.0, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x, offset: int = 0):
        return x * self.xscale, self.pe[:, :x.size(1)]


class EspnetLegacyRelPositionMultiHeadedAttention(WenetRelPositionMultiHeadedAttention):
    """ESPnet ``LegacyRelPositionMultiHeadedAttention`` (``attention.py``, ``zero_triu=False``): ``matrix_bd`` over the
    (1, T, d) legacy table, then the legacy ``rel_shift`` (zero column, view (T + 1, T), drop a row, ``view_as``: the
    entries above the diagonal come from the next query's row)."""

    def __init__(self, n_head: int, n_feat: int):
        super().__init__(n_head, n_feat, rel_shift=True)

    def rel_shift(self, x):
        """``LegacyRelPositionMultiHeadedAttention.rel_shift`` verbatim (``zero_triu=False``)."""
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)

    def forward(self, query, key, value, mask, pos_emb=None):
        q, k, v = self.forward_qkv(query, key, value)
        q = q.transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul(q_with_bias_v, p.transpose(-2, -1)))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class WenetConvolutionModule(nn.Module):
    """``wenet/models/transformer/convolution.py`` ``ConvolutionModule``, ``causal=True`` (``lorder = kernel - 1``
    zero frames padded on the left with ``nn.functional.pad``), ``norm='layer_norm'``, swish; GLU; no pad mask
    (every stream at full length)."""

    def __init__(self, channels: int, kernel_size: int = 8):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.lorder = kernel_size - 1
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, padding=0, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)
        self.activation = nn.SiLU()

    def forward(self, x):
        x = x.transpose(1, 2)  # (batch, channels, time)
        x = nn.functional.pad(x, (self.lorder, 0), "constant", 0.0)
        x = nn.functional.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        x = self.activation(self.norm(x.transpose(1, 2))).transpose(1, 2)
        x = self.pointwise_conv2(x)
        return x.transpose(1, 2)


class WenetFeedForward(nn.Module):
    """``positionwise_feed_forward.py`` ``PositionwiseFeedForward``: ``w_2(act(w_1(x)))``, swish."""

    def __init__(self, idim: int, hidden: int):
        super().__init__()
        self.w_1, self.w_2, self.activation = nn.Linear(idim, hidden), nn.Linear(hidden, idim), nn.SiLU()

    def forward(self, xs):
        return self.w_2(self.activation(self.w_1(xs)))


class WenetConformerLayer(nn.Module):
    """``wenet/models/transformer/encoder_layer.py`` ``ConformerEncoderLayer``, ``normalize_before=True``: macaron
    FFN (x0.5), self-attention, convolution module, FFN (x0.5), final LayerNorm."""

    def __init__(self, size: int, self_attn: nn.Module, ff_units: int, kernel: int):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = WenetFeedForward(size, ff_units)
        self.feed_forward_macaron = WenetFeedForward(size, ff_units)
        self.conv_module = WenetConvolutionModule(size, kernel)
        self.norm_ff, self.norm_mha = nn.LayerNorm(size, eps=1e-5), nn.LayerNorm(size, eps=1e-5)
        self.norm_ff_macaron = nn.LayerNorm(size, eps=1e-5)
        self.norm_conv, self.norm_final = nn.LayerNorm(size, eps=1e-5), nn.LayerNorm(size, eps=1e-5)
        self.ff_scale = 0.5

    def forward(self, x, mask, pos_emb):
        x = x + self.ff_scale * self.feed_forward_macaron(self.norm_ff_macaron(x))
        y = self.norm_mha(x)
        x = x + self.self_attn(y, y, y, mask, pos_emb)
        x = x + self.conv_module(self.norm_conv(x))
        x = x + self.ff_scale * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class WenetConformer(nn.Module):
    """WeNet U2++ conformer encoder (``wenet/models/transformer/encoder.py`` ``ConformerEncoder.forward``) with a
    static chunk mask, (N, T, C_IN) -> (N, T, C_IN).

    ``LinearNoSubsampling`` (Linear, LayerNorm, positional encoding), ``num_blocks`` ``ConformerEncoderLayer``,
    ``after_norm``, and a Linear back to C_IN channels (not upstream: a CTC/decoder head would follow). The mask is
    ``add_optional_chunk_mask(static_chunk_size=chunk, num_decoding_left_chunks=left)`` = ``masks &
    subsequent_chunk_mask(T, chunk, left)`` computed in ``forward`` from ``xs.size(1)``; the padding mask ``masks``
    of ``make_pad_mask(xs_lens)`` is all True for full-length streams and left out (see :class:`WenetLengths`).
    ``pos``: ``"abs"`` (``PositionalEncoding`` + ``MultiHeadedAttention``), ``"rel"`` (WeNet ``rel_pos`` +
    ``rel_selfattn``, the U2++ recipe, no rel_shift), ``"rel_espnet"`` (CosyVoice ``rel_pos_espnet`` +
    ``rel_selfattn``: ``EspnetRelPositionalEncoding`` and ``rel_shift``, the same code as ESPnet's current
    ``RelPositionMultiHeadedAttention``), ``"rel_espnet_legacy"`` (ESPnet's ``legacy_rel_pos`` +
    ``legacy_rel_selfattn``).
    Config from ``examples/aishell/s0/conf/train_u2++_conformer.yaml`` scaled down: swish, causal conv kernel 8,
    ``cnn_module_norm: layer_norm``, ``normalize_before: true``.
    """

    def __init__(self, d_model: int = 32, heads: int = 4, num_blocks: int = 2, ff_units: int = 64, kernel: int = 8,
                 chunk: int = 4, left_chunks: int = 2, pos: str = "rel"):
        super().__init__()
        self.chunk, self.left_chunks = chunk, left_chunks
        self.embed_out = nn.Sequential(nn.Linear(C_IN, d_model), nn.LayerNorm(d_model, eps=1e-5))
        if pos == "abs":
            self.pos_enc = WenetPositionalEncoding(d_model)
            attn = lambda: WenetMultiHeadedAttention(heads, d_model)  # noqa: E731
        elif pos == "rel":
            self.pos_enc = WenetPositionalEncoding(d_model, rel=True)
            attn = lambda: WenetRelPositionMultiHeadedAttention(heads, d_model)  # noqa: E731
        elif pos == "rel_espnet":
            self.pos_enc = EspnetRelPositionalEncoding(d_model)
            attn = lambda: WenetRelPositionMultiHeadedAttention(heads, d_model, rel_shift=True)  # noqa: E731
        elif pos == "rel_espnet_legacy":
            self.pos_enc = EspnetLegacyRelPositionalEncoding(d_model)
            attn = lambda: EspnetLegacyRelPositionMultiHeadedAttention(heads, d_model)  # noqa: E731
        else:
            raise ValueError(pos)
        self.encoders = nn.ModuleList(WenetConformerLayer(d_model, attn(), ff_units, kernel)
                                      for _ in range(num_blocks))
        self.after_norm = nn.LayerNorm(d_model, eps=1e-5)
        self.head = nn.Linear(d_model, C_IN)

    def masks(self, xs):
        return subsequent_chunk_mask(xs.size(1), self.chunk, self.left_chunks, xs.device).unsqueeze(0)

    def forward(self, xs):
        chunk_masks = self.masks(xs)  # (1, T, T)
        xs, pos_emb = self.pos_enc(self.embed_out(xs))
        for layer in self.encoders:
            xs = layer(xs, chunk_masks, pos_emb)
        return self.head(self.after_norm(xs))


class CosyVoiceChunkUnlimited(WenetConformer):
    """CosyVoice's chunk-aware encoder mask as it really runs (``cosyvoice/utils/mask.py`` ``subsequent_chunk_mask``
    with ``num_left_chunks = -1``: every query sees all earlier chunks and the rest of its own; CosyVoice2's flow
    encoder uses ``static_chunk_size`` 25 and no left-chunk limit). Chunk 4 here, ``abs`` positions: unlimited left
    context, so it must be refused by default (and may stream under ``attention_window``)."""

    def __init__(self, **kw):
        kw.setdefault("pos", "abs")
        super().__init__(left_chunks=-1, **kw)


class WenetLengths(WenetConformer):
    """``ConformerEncoder.forward(xs, xs_lens)`` with its padding mask: ``masks = ~make_pad_mask(xs_lens, T)``
    (B, 1, T), ``chunk_masks = masks & subsequent_chunk_mask(T, 4, 2)``. The key-padding mask depends on the
    ``xs_lens`` input's values: must be refused."""

    def forward(self, xs, xs_lens):
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)  # (B, 1, T)
        chunk_masks = masks & self.masks(xs)
        xs, pos_emb = self.pos_enc(self.embed_out(xs))
        for layer in self.encoders:
            xs = layer(xs, chunk_masks, pos_emb)
        return self.head(self.after_norm(xs))



class WenetShapeLengths(WenetLengths):
    """:class:`WenetLengths` exported the way a stream allows: ``forward(xs)`` computes ``xs_lens`` from the input's
    shape (every frame valid, ``xs_lens = T`` for each sequence) instead of taking a ``lengths`` input, so the padding
    mask ``~make_pad_mask(xs_lens, T)`` is all True and only the chunk mask bounds attention. (N, T, C_IN) ->
    (N, T, C_IN). Not in :data:`MODELS`: what the refusal of :class:`WenetLengths` tells the user to export."""

    def forward(self, xs):
        lens = torch.ones(xs.size(0), dtype=torch.int64, device=xs.device) * xs.size(1)
        return super().forward(xs, lens)

# ---------------------------------------------------------------------------------------------------------------
# NeMo FastConformer (faithful rebuild: nemo_toolkit installs with --no-deps but its modules do not import without
# hydra, lightning, ...; the rebuild was compared with the wheel's own classes, see tests)
# ---------------------------------------------------------------------------------------------------------------

NEMO_INF_VAL = 10000.0


class NemoRelPositionalEncoding(nn.Module):
    """NeMo ``RelPositionalEncoding`` (``multi_head_attention.py``): table for positions ``max_len-1 ... -(max_len-1)``
    built at init (``extend_pe``), ``x * xscale``, ``pos_emb = pe[:, center - T : center + T - 1]`` with ``center =
    pe.size(1) // 2 + 1`` (positions T-1 ... -(T-1)). ``rel=False`` is NeMo's ``PositionalEncoding``
    (``x * xscale + pe[:, :T]``). Note NeMo's ``create_pe`` uses ``log(INF_VAL)`` = log(10000) as the base."""

    def __init__(self, d_model: int, max_len: int = 5000, rel: bool = True, xscale: bool = True):
        super().__init__()
        self.d_model, self.rel = d_model, rel
        self.xscale = math.sqrt(d_model) if xscale else None
        if rel:
            positions = torch.arange(max_len - 1, -max_len, -1, dtype=torch.float32).unsqueeze(1)
        else:
            positions = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        pe = torch.zeros(positions.size(0), d_model)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(NEMO_INF_VAL) / d_model))
        pe[:, 0::2] = torch.sin(positions * div_term)
        pe[:, 1::2] = torch.cos(positions * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x, cache_len: int = 0):
        if self.xscale:
            x = x * self.xscale
        input_len = x.size(1) + cache_len
        if not self.rel:
            pos_emb = self.pe[:, :input_len]
            return x + pos_emb, pos_emb
        center_pos = self.pe.size(1) // 2 + 1
        start_pos = center_pos - input_len
        end_pos = center_pos + input_len - 1
        return x, self.pe[:, start_pos:end_pos]


class NemoMultiHeadAttention(nn.Module):
    """NeMo ``MultiHeadAttention`` (``use_pytorch_sdpa=False``, no cache): ``mask`` (B, T1, T2) bool, True =
    MASKED; ``scores.masked_fill(mask, -10000)``, softmax, ``masked_fill(mask, 0)``, ``@ v``."""

    def __init__(self, n_head: int, n_feat: int, use_bias: bool = True):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.s_d_k = math.sqrt(self.d_k)
        self.linear_q = nn.Linear(n_feat, n_feat, bias=use_bias)
        self.linear_k = nn.Linear(n_feat, n_feat, bias=use_bias)
        self.linear_v = nn.Linear(n_feat, n_feat, bias=use_bias)
        self.linear_out = nn.Linear(n_feat, n_feat, bias=use_bias)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1)  # (batch, 1, time1, time2)
            scores = scores.masked_fill(mask, -NEMO_INF_VAL)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(attn, value)
        x = x.transpose(1, 2).reshape(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, query, key, value, mask, pos_emb=None):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.s_d_k
        return self.forward_attention(v, scores, mask)


class NemoRelPositionMultiHeadAttention(NemoMultiHeadAttention):
    """NeMo ``RelPositionMultiHeadAttention`` (Transformer-XL, non-sdpa path): ``matrix_bd = rel_shift((q + v) @
    p^T)`` with NeMo's ``rel_shift`` (``F.pad(x, (1, 0))``, view (b, h, -1, T), drop the first row, view back),
    sliced ``[..., :T2]``; ``scores = (matrix_ac + matrix_bd) / sqrt(d_k)``."""

    def __init__(self, n_head: int, n_feat: int, use_bias: bool = True):
        super().__init__(n_head, n_feat, use_bias)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.d_k))  # NeMo: nn.init.zeros_
        self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.d_k))

    def rel_shift(self, x):
        b, h, qlen, pos_len = x.size()  # (b, h, t1, t2)
        x = torch.nn.functional.pad(x, pad=(1, 0))  # (b, h, t1, t2+1)
        x = x.view(b, h, -1, qlen)  # (b, h, t2+1, t1)
        x = x[:, :, 1:].view(b, h, qlen, pos_len)  # (b, h, t1, t2)
        return x

    def forward(self, query, key, value, mask, pos_emb=None):
        q, k, v = self.forward_qkv(query, key, value)
        q = q.transpose(1, 2)  # (batch, time1, head, d_k)
        n_batch_pos = pos_emb.size(0)
        p = self.linear_pos(pos_emb).view(n_batch_pos, -1, self.h, self.d_k).transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_bd = torch.matmul(q_with_bias_v, p.transpose(-2, -1))
        matrix_bd = self.rel_shift(matrix_bd)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = matrix_bd[:, :, :, : matrix_ac.size(-1)]
        scores = (matrix_ac + matrix_bd) / self.s_d_k
        return self.forward_attention(v, scores, mask)


class NemoCausalConv1D(nn.Conv1d):
    """NeMo ``CausalConv1D`` (``causal_convs.py``) with ``padding=[kernel-1, 0]``, no cache: ``F.pad(x, (left,
    right))`` then the conv."""

    def __init__(self, channels: int, kernel_size: int, padding: list[int]):
        super().__init__(channels, channels, kernel_size, padding=0, groups=channels)
        self._left_padding, self._right_padding = padding

    def forward(self, x):
        return super().forward(F.pad(x, pad=(self._left_padding, self._right_padding)))


class NemoConformerConvolution(nn.Module):
    """NeMo ``ConformerConvolution`` (``conformer_modules.py``): pointwise conv, GLU, pad-mask fill, causal
    depthwise conv (``conv_context_size='causal'`` = [k-1, 0]), LayerNorm (``conv_norm_type: layer_norm``, the
    cache-aware streaming configs), Swish, pointwise conv."""

    def __init__(self, d_model: int, kernel_size: int = 9):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(d_model, d_model * 2, 1)
        self.depthwise_conv = NemoCausalConv1D(d_model, kernel_size, [kernel_size - 1, 0])
        self.batch_norm = nn.LayerNorm(d_model)
        self.activation = nn.SiLU()  # nemo Swish = x * sigmoid(x)
        self.pointwise_conv2 = nn.Conv1d(d_model, d_model, 1)

    def forward(self, x, pad_mask=None):
        x = nn.functional.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        if pad_mask is not None:
            x = x.masked_fill(pad_mask.unsqueeze(1), 0.0)
        x = self.depthwise_conv(x)
        x = self.batch_norm(x.transpose(1, 2)).transpose(1, 2)
        x = self.pointwise_conv2(self.activation(x))
        return x.transpose(1, 2)


class NemoConformerLayer(nn.Module):
    """NeMo ``ConformerLayer.forward`` (no cache, no adapters): FF1 x0.5, self-attention (``rel_pos`` or
    ``abs_pos``), convolution, FF2 x0.5, ``norm_out``."""

    def __init__(self, d_model: int, d_ff: int, n_heads: int, self_attention_model: str, conv_kernel_size: int):
        super().__init__()
        self.self_attention_model = self_attention_model
        self.fc_factor = 0.5
        self.norm_feed_forward1 = nn.LayerNorm(d_model)
        self.feed_forward1 = nn.Sequential(nn.Linear(d_model, d_ff), nn.SiLU(), nn.Linear(d_ff, d_model))
        self.norm_conv = nn.LayerNorm(d_model)
        self.conv = NemoConformerConvolution(d_model, conv_kernel_size)
        self.norm_self_att = nn.LayerNorm(d_model)
        if self_attention_model == "rel_pos":
            self.self_attn = NemoRelPositionMultiHeadAttention(n_heads, d_model)
        else:
            self.self_attn = NemoMultiHeadAttention(n_heads, d_model)
        self.norm_feed_forward2 = nn.LayerNorm(d_model)
        self.feed_forward2 = nn.Sequential(nn.Linear(d_model, d_ff), nn.SiLU(), nn.Linear(d_ff, d_model))
        self.norm_out = nn.LayerNorm(d_model)

    def forward(self, x, att_mask=None, pos_emb=None, pad_mask=None):
        residual = x
        x = self.feed_forward1(self.norm_feed_forward1(x))
        residual = residual + x * self.fc_factor
        x = self.norm_self_att(residual)
        if self.self_attention_model == "rel_pos":
            x = self.self_attn(query=x, key=x, value=x, mask=att_mask, pos_emb=pos_emb)
        else:
            x = self.self_attn(query=x, key=x, value=x, mask=att_mask)
        residual = residual + x
        x = self.conv(self.norm_conv(residual), pad_mask=pad_mask)
        residual = residual + x
        x = self.feed_forward2(self.norm_feed_forward2(residual))
        residual = residual + x * self.fc_factor
        return self.norm_out(residual)


class NemoCausalConv2D(nn.Conv2d):
    """NeMo ``CausalConv2D`` (``causal_convs.py``): ``F.pad(x, (k - 1, stride - 1, k - 1, stride - 1))`` (frequency
    and time), then the conv without padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1):
        super().__init__(in_channels, out_channels, kernel_size, stride, 0, groups=groups)
        self._left_padding, self._right_padding = kernel_size - 1, stride - 1

    def forward(self, x):
        return super().forward(F.pad(x, pad=(self._left_padding, self._right_padding, self._left_padding,
                                              self._right_padding)))


class NemoMaskedConvSequential(nn.Sequential):
    """NeMo 3.0 ``MaskedConvSequential`` (``subsampling.py``) verbatim: (B, T, F) -> (B, C, T', F'), every layer's
    input multiplied by ``arange(T) < lengths`` (all ones at full length), lengths updated after each strided conv."""

    def forward(self, x, lengths):
        x = x.unsqueeze(1)
        current_lengths = lengths.clone().float()
        mask = self._create_mask(x, current_lengths.long())
        for layer in self:
            b, c, t, f = x.shape
            x = x * mask.unsqueeze(1).expand(b, c, t, f)  # apply_channel_mask
            x = layer(x)
            if hasattr(layer, "stride") and layer.stride != (1, 1):
                padding = (layer._left_padding, layer._right_padding) if hasattr(layer, "_left_padding") \
                    else layer.padding
                current_lengths = (current_lengths + padding[0] + padding[1] - layer.kernel_size[0]) \
                    // layer.stride[0] + 1  # calculate_conv_output_size
                mask = self._create_mask(x, current_lengths.long())
        b, c, t, f = x.shape
        x = x * mask.unsqueeze(1).expand(b, c, t, f)
        return x, current_lengths.long()

    def _create_mask(self, tensor, lengths):
        batch_size, channels, time, features = tensor.shape
        time_mask = torch.arange(time, device=tensor.device).expand(batch_size, time) < lengths.unsqueeze(1)
        return time_mask.unsqueeze(-1).expand(batch_size, time, features).to(tensor.dtype)


class NemoConvSubsampling(nn.Module):
    """NeMo ``ConvSubsampling`` (``subsampling.py``, nemo_toolkit 3.0.0) for ``subsampling`` ``"dw_striding"``
    (FastConformer: a 3x3 stride-2 Conv2d, then per further factor 2 a depthwise 3x3 stride-2 Conv2d and a pointwise
    Conv2d, ReLU after each stage) and ``"striding"`` (3x3 stride-2 Conv2d + ReLU per factor 2), factor 4 or 8,
    ``is_causal`` (``causal_downsampling: true`` of the cache-aware streaming configs: ``CausalConv2D``, pads k - 1
    before and stride - 1 after on time and frequency) or not (symmetric padding 1: one frame of look-ahead per
    stage). ``subsampling_conv_chunking_factor=1`` (the default: ``MaskedConvSequential`` with lengths). The output
    Linear takes ``conv_channels * F'`` features (``calc_length`` of ``feat_in``). (B, T, feat_in) -> (B, T', feat_out),
    lengths (B,) -> (B,)."""

    def __init__(self, subsampling: str, factor: int, feat_in: int, feat_out: int, conv_channels: int,
                 is_causal: bool = True):
        super().__init__()
        self._sampling_num = int(math.log(factor, 2))
        self._stride, self._kernel_size = 2, 3
        self._left_padding, self._right_padding = (2, 1) if is_causal else (1, 1)
        act = nn.ReLU(True)

        def conv(cin, cout, groups=1):
            if is_causal:
                return NemoCausalConv2D(cin, cout, 3, 2, groups=groups)
            return nn.Conv2d(cin, cout, 3, 2, padding=1, groups=groups)

        layers, cin = [], 1
        if subsampling == "dw_striding":
            layers += [conv(1, conv_channels), act]
            for _ in range(self._sampling_num - 1):
                layers += [conv(conv_channels, conv_channels, groups=conv_channels),
                           nn.Conv2d(conv_channels, conv_channels, 1), act]
        elif subsampling == "striding":
            for _ in range(self._sampling_num):
                layers += [conv(cin, conv_channels), act]
                cin = conv_channels
        else:
            raise ValueError(subsampling)
        out_length = float(feat_in)
        for _ in range(self._sampling_num):  # calc_length
            out_length = math.floor((out_length + self._left_padding + self._right_padding - 3) / 2 + 1)
        self.out = nn.Linear(conv_channels * int(out_length), feat_out)
        self.conv = NemoMaskedConvSequential(*layers)

    def forward(self, x, lengths):
        out_lengths = lengths.float()
        for _ in range(self._sampling_num):  # calc_length (its value is not used on this path, as upstream)
            out_lengths = torch.floor((out_lengths + self._left_padding + self._right_padding - 3) / 2 + 1)
        x, lengths = self.conv(x, lengths)
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).reshape(b, t, -1))
        return x, lengths


class NemoFastConformer(nn.Module):
    """Faithful rebuild of NeMo's cache-aware FastConformer encoder (``ConformerEncoder.forward_internal``, no
    cache), (N, C_IN, T) -> (N, C_IN, T / subsampling factor), named as such: ``nemo_toolkit`` 3.0.0 installs with ``--no-deps`` but
    ``nemo.collections.asr`` does not import without hydra/lightning.

    ``subsampling=None``: ``subsampling_factor=1`` (``pre_encode = nn.Linear(feat_in, d_model)``); else
    :class:`NemoConvSubsampling` (``"dw_striding"``, FastConformer's, or ``"striding"``; ``subsampling_factor`` 4 or 8;
    ``causal_downsampling``), its lengths passed on to the masks as ``forward_internal`` does; ``xscaling=True``, ``self_attention_model`` ``"rel_pos"`` (the default, with
    ``rel_shift``) or ``"abs_pos"``, ``att_context_style`` ``"regular"`` (mask ``ones(1, T, T).triu(-left)
    .tril(right)``: ONNX ``Trilu``) or ``"chunked_limited"`` (chunk ``right + 1``, ``left // chunk`` left chunks, from
    ``arange``), ``conv_context_size='causal'``, ``conv_norm_type='layer_norm'``. ``length`` is ``None`` in
    ``forward``, so NeMo builds it as ``new_full((B,), T)`` and its ``pad_mask`` (``arange(T) < length``) and
    ``pad_mask_for_att_mask`` are all-valid but present in the graph as NeMo emits them. Output transposed to
    (B, d_model, T) as NeMo returns it, then a 1x1 Linear to C_IN channels (not upstream).
    """

    def __init__(self, d_model: int = 32, n_heads: int = 4, n_layers: int = 2, ff_expansion: int = 2,
                 conv_kernel_size: int = 9, self_attention_model: str = "rel_pos",
                 att_context_size: tuple[int, int] = (16, 0), att_context_style: str = "regular",
                 subsampling: str | None = None, subsampling_factor: int = 8, causal_downsampling: bool = True,
                 subsampling_conv_channels: int = 8):
        super().__init__()
        self.att_context_size = list(att_context_size)
        self.att_context_style = att_context_style
        self.self_attention_model = self_attention_model
        if subsampling is None:
            self.pre_encode = nn.Linear(C_IN, d_model)
        else:
            self.pre_encode = NemoConvSubsampling(subsampling, subsampling_factor, C_IN, d_model,
                                                  subsampling_conv_channels, is_causal=causal_downsampling)
        self.pos_enc = NemoRelPositionalEncoding(d_model, rel=self_attention_model == "rel_pos")
        self.layers = nn.ModuleList(NemoConformerLayer(d_model, d_model * ff_expansion, n_heads,
                                                       self_attention_model, conv_kernel_size)
                                    for _ in range(n_layers))
        self.head = nn.Linear(d_model, C_IN)

    def _create_masks(self, att_context_size, padding_length, max_audio_length, offset, device):
        """``conformer_encoder.py`` ``ConformerEncoder._create_masks`` verbatim (``regular`` / ``chunked_limited``)."""
        att_mask = torch.ones(1, max_audio_length, max_audio_length, dtype=torch.bool, device=device)
        if self.att_context_style == "regular":
            if att_context_size[0] >= 0:
                att_mask = att_mask.triu(diagonal=-att_context_size[0])
            if att_context_size[1] >= 0:
                att_mask = att_mask.tril(diagonal=att_context_size[1])
        elif self.att_context_style == "chunked_limited":
            if att_context_size[1] == -1:
                if att_context_size[0] >= 0:
                    att_mask = att_mask.triu(diagonal=-att_context_size[0])
            else:
                chunk_size = att_context_size[1] + 1
                if att_context_size[0] >= 0:
                    left_chunks_num = att_context_size[0] // chunk_size
                else:
                    left_chunks_num = 10000
                chunk_idx = torch.arange(0, max_audio_length, dtype=torch.int, device=att_mask.device)
                chunk_idx = torch.div(chunk_idx, chunk_size, rounding_mode="trunc")
                diff_chunks = chunk_idx.unsqueeze(1) - chunk_idx.unsqueeze(0)
                chunked_limited_mask = torch.logical_and(torch.le(diff_chunks, left_chunks_num),
                                                         torch.ge(diff_chunks, 0))
                att_mask = torch.logical_and(att_mask, chunked_limited_mask.unsqueeze(0))
        pad_mask = torch.arange(0, max_audio_length, device=device).expand(
            padding_length.size(0), -1) < padding_length.unsqueeze(-1)
        if offset is not None:
            pad_mask_off = torch.arange(0, max_audio_length, device=device).expand(
                padding_length.size(0), -1) >= offset.unsqueeze(-1)
            pad_mask = pad_mask_off.logical_and(pad_mask)
        pad_mask_for_att_mask = pad_mask.unsqueeze(1).repeat([1, max_audio_length, 1])
        pad_mask_for_att_mask = torch.logical_and(pad_mask_for_att_mask, pad_mask_for_att_mask.transpose(1, 2))
        att_mask = att_mask[:, :max_audio_length, :max_audio_length]
        att_mask = torch.logical_and(pad_mask_for_att_mask, att_mask.to(pad_mask_for_att_mask.device))
        att_mask = ~att_mask
        pad_mask = ~pad_mask
        return pad_mask, att_mask

    def forward(self, audio_signal):
        length = audio_signal.new_full((audio_signal.size(0),), audio_signal.size(-1), dtype=torch.int64)
        audio_signal = torch.transpose(audio_signal, 1, 2)
        if isinstance(self.pre_encode, nn.Linear):
            audio_signal = self.pre_encode(audio_signal)
        else:
            audio_signal, length = self.pre_encode(x=audio_signal, lengths=length)
            length = length.to(torch.int64)
        max_audio_length = audio_signal.size(1)
        audio_signal, pos_emb = self.pos_enc(x=audio_signal, cache_len=0)
        pad_mask, att_mask = self._create_masks(self.att_context_size, length, max_audio_length, None,
                                                audio_signal.device)
        for layer in self.layers:
            audio_signal = layer(x=audio_signal, att_mask=att_mask, pos_emb=pos_emb, pad_mask=pad_mask)
        return torch.transpose(self.head(audio_signal), 1, 2)


# ---------------------------------------------------------------------------------------------------------------
# Mimi (Kyutai moshi)
# ---------------------------------------------------------------------------------------------------------------

def apply_rope(q, k, offset, max_period: float = 10_000, interleave: bool = True, time_before_heads: bool = False):
    """``moshi/moshi/modules/rope.py`` ``apply_rope`` verbatim (without ``torch_compile_lazy``)."""
    if time_before_heads:
        B, T, H, D = q.shape
    else:
        B, H, T, D = q.shape
    ds = torch.arange(D // 2, device=q.device, dtype=torch.float32)
    freqs = torch.exp(ds * (-math.log(max_period) * 2 / D))
    ts = offset.float().view(-1, 1) + torch.arange(T, device=q.device, dtype=torch.float32)
    if time_before_heads:
        ts = ts.view(B, -1, 1, 1)
    else:
        ts = ts.view(B, 1, -1, 1)
    rotr = torch.cos(freqs * ts)
    roti = torch.sin(freqs * ts)
    if interleave:
        q = q.view(*q.shape[:-1], D // 2, 2)
        k = k.view(*k.shape[:-1], D // 2, 2)
        qr, qi = q[..., 0].float(), q[..., 1].float()
        kr, ki = k[..., 0].float(), k[..., 1].float()
    else:
        qr, qi = q[..., : D // 2].float(), q[..., D // 2:].float()
        kr, ki = k[..., : D // 2].float(), k[..., D // 2:].float()
    qor = qr * rotr - qi * roti
    qoi = qr * roti + qi * rotr
    kor = kr * rotr - ki * roti
    koi = kr * roti + ki * rotr
    dtype = q.dtype
    if interleave:
        qo = torch.stack([qor.to(dtype), qoi.to(dtype)], dim=-1).view(*q.shape[:-2], D)
        ko = torch.stack([kor.to(dtype), koi.to(dtype)], dim=-1).view(*k.shape[:-2], D)
    else:
        qo = torch.cat([qor.to(dtype), qoi.to(dtype)], dim=-1)
        ko = torch.cat([kor.to(dtype), koi.to(dtype)], dim=-1)
    return qo, ko


class LayerScale(nn.Module):
    """``moshi/moshi/modules/transformer.py`` ``LayerScale`` (channel_last)."""

    def __init__(self, channels: int, init: float = 1e-4):
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), init))

    def forward(self, x):
        return self.scale * x


class MimiAttention(nn.Module):
    """``StreamingMultiheadAttention.forward`` with no streaming state (``offset = zeros(B)``), ``kv_repeat=1``,
    ``weights_per_step=0``: one bias-free ``in_projs[0]`` to 3*d, ``rearrange("b t (p h d) -> p b h t d")`` (here
    view + permute + unbind), RoPE on q and k, ``KVCacheResult.from_kv`` positions ``arange(T).expand(B, -1)``, the
    causal bias ``(pos_k >= 0) & (delta >= 0) & (delta < context)`` with ``delta = pos_q - pos_k``, and
    ``F.scaled_dot_product_attention(q, k, v, attn_bias)`` with that bool (B, 1, T, T) mask."""

    def __init__(self, embed_dim: int, num_heads: int, context: int | None, max_period: float = 10000.0):
        super().__init__()
        self.embed_dim, self.num_heads, self.context, self.max_period = embed_dim, num_heads, context, max_period
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x):
        B, T = x.shape[:2]
        offset = torch.zeros(B, device=x.device, dtype=torch.long)
        projected = self.in_proj(x)
        q, k, v = projected.view(B, T, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, k, offset, self.max_period, interleave=True, time_before_heads=False)
        pos_k = torch.arange(T, device=k.device, dtype=torch.long).expand(B, -1)
        pos_k = pos_k[:, None]
        pos_q = offset.view(-1, 1, 1) + torch.arange(T, device=q.device, dtype=torch.long).view(-1, 1)
        delta = pos_q - pos_k
        attn_bias = (pos_k >= 0) & (delta >= 0)
        if self.context is not None:
            attn_bias = attn_bias & (delta < self.context)
        attn_bias = attn_bias[:, None]
        x = F.scaled_dot_product_attention(q, k, v, attn_bias, dropout_p=0.0)
        x = x.transpose(1, 2).reshape(B, T, self.embed_dim)  # rearrange "b h t d -> b t (h d)"
        return self.out_proj(x)


class MimiLayer(nn.Module):
    """``StreamingTransformerLayer`` (``norm='layer_norm'``, ``gating='none'``, gelu, bias-free linears,
    LayerScale): ``x + ls1(attn(norm1(x)))``, ``x + ls2(linear2(gelu(linear1(norm2(x)))))``."""

    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int, context: int | None, layer_scale: float,
                 max_period: float):
        super().__init__()
        self.self_attn = MimiAttention(d_model, num_heads, context, max_period)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-5)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-5)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=False)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=False)
        self.layer_scale_1 = LayerScale(d_model, layer_scale)
        self.layer_scale_2 = LayerScale(d_model, layer_scale)

    def forward(self, x):
        x = x + self.layer_scale_1(self.self_attn(self.norm1(x)))
        return x + self.layer_scale_2(self.linear2(F.gelu(self.linear1(self.norm2(x)))))


class MimiTransformer(nn.Module):
    """Mimi's encoder/decoder transformer: ``ProjectedTransformer`` (``conv_layout=True``: (N, C_IN, T) in and out,
    bias-free input/output projections) around ``StreamingTransformer`` with Mimi's ``_transformer_kwargs``
    (``causal=True``, ``context=250``, ``positional_embedding='rope'`` = interleaved RoPE, ``max_period=10000``,
    ``layer_scale=0.01``, ``norm='layer_norm'``, ``gating='none'``) scaled down to d_model 32, 2 heads, 1 layer,
    dim_feedforward 64 (Mimi: 512, 8, 8, 2048). ``context=None`` gives unlimited causal attention."""

    def __init__(self, d_model: int = 32, num_heads: int = 2, num_layers: int = 1, dim_feedforward: int = 64,
                 context: int | None = 250, layer_scale: float = 0.01, max_period: float = 10000.0):
        super().__init__()
        self.input_proj = nn.Linear(C_IN, d_model, bias=False)
        self.layers = nn.ModuleList(MimiLayer(d_model, num_heads, dim_feedforward, context, layer_scale, max_period)
                                    for _ in range(num_layers))
        self.output_proj = nn.Linear(d_model, C_IN, bias=False)

    def forward(self, x):
        x = self.input_proj(x.transpose(1, 2))
        for layer in self.layers:
            x = layer(x)
        return self.output_proj(x).transpose(1, 2)


# ---------------------------------------------------------------------------------------------------------------
# Plain attention forms (written here, not from an upstream project)
# ---------------------------------------------------------------------------------------------------------------

def band_mask(t: int, window: int, device=None) -> torch.Tensor:
    """(T, T) bool, True where key j is visible to query i: ``(i - j >= 0) & (i - j < window)``."""
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    return (i - j >= 0) & (i - j < window)


class _Proj(nn.Module):
    """(N, T, C_IN) -> Linear -> q, k, v as (N, H, T, d_k) -> ``attend`` -> Linear -> + input projection."""

    def __init__(self, d_model: int = 32, heads: int = 2):
        super().__init__()
        self.h, self.dk = heads, d_model // heads
        self.inp = nn.Linear(C_IN, d_model)
        self.q, self.k, self.v = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, C_IN)

    def heads(self, lin, h):
        n, t, _ = h.shape
        return lin(h).view(n, t, self.h, self.dk).transpose(1, 2)

    def forward(self, x):
        h = self.inp(x)
        q, k, v = self.heads(self.q, h), self.heads(self.k, h), self.heads(self.v, h)
        y = self.attend(q, k, v, x.shape[1])  # (N, H, T, dk)
        n, _, t, _ = y.shape
        return self.out(h + y.transpose(1, 2).reshape(n, t, self.h * self.dk))


class SlidingWindowSDPA(_Proj):
    """Banded causal local attention, window 16, ``F.scaled_dot_product_attention(q, k, v, attn_mask=band)`` with a
    bool mask from ``arange``."""

    def __init__(self, window: int = 16, **kw):
        super().__init__(**kw)
        self.window = window

    def attend(self, q, k, v, t):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band_mask(t, self.window, q.device))


class SlidingWindowExplicit(_Proj):
    """Banded causal local attention, window 16, written out: ``softmax(q @ k^T * scale + additive)`` with
    ``additive = where(band, 0, -inf)``, ``@ v``."""

    def __init__(self, window: int = 16, **kw):
        super().__init__(**kw)
        self.window = window

    def attend(self, q, k, v, t):
        additive = torch.where(band_mask(t, self.window, q.device), 0.0, float("-inf"))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dk)) + additive
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class SlidingWindowTorchMHA(nn.Module):
    """Banded causal local attention, window 16, with ``nn.MultiheadAttention(batch_first=True)`` and a float
    (T, T) ``attn_mask`` (0 / -inf), ``need_weights=False``; residual, Linear out."""

    def __init__(self, d_model: int = 32, heads: int = 2, window: int = 16):
        super().__init__()
        self.window = window
        self.inp = nn.Linear(C_IN, d_model)
        self.mha = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.out = nn.Linear(d_model, C_IN)

    def forward(self, x):
        h = self.inp(x)
        m = torch.zeros(x.shape[1], x.shape[1], device=x.device).masked_fill(
            ~band_mask(x.shape[1], self.window, x.device), float("-inf"))
        y, _ = self.mha(h, h, h, attn_mask=m, need_weights=False)
        return self.out(h + y)


class CausalTril(_Proj):
    """Plain causal attention, unlimited left context: ``mask = torch.tril(torch.ones(T, T, dtype=bool))``,
    ``masked_fill(~mask, -inf)``, softmax, ``@ v``. ``window=N`` adds ``triu(diagonal=-(N-1))``: query i sees keys
    i-N+1 ... i (N frames including itself, Mimi's ``delta < context``), the reference for ``attention_window=N``."""

    def __init__(self, window: int | None = None, **kw):
        super().__init__(**kw)
        self.window = window

    def attend(self, q, k, v, t):
        ones = torch.ones(t, t, dtype=torch.bool, device=q.device)
        mask = torch.tril(ones)
        if self.window is not None:
            mask = mask & torch.triu(ones, diagonal=-(self.window - 1))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
        return torch.matmul(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), v)


class FullAttention(_Proj):
    """Bidirectional attention, no mask (an offline encoder): every query sees the whole sequence."""

    def attend(self, q, k, v, t):
        return F.scaled_dot_product_attention(q, k, v)


class ValueMaskWindow(_Proj):
    """Banded causal window 16 whose keys are also masked by the input's values (frames whose features are all near
    zero are ignored as keys, a VAD-gated attention): the mask depends on data, not on shapes. Fully masked rows
    keep a finite -1e4 bias (NeMo's INF_VAL), never NaN."""

    def __init__(self, window: int = 16, **kw):
        super().__init__(**kw)
        self.window = window

    def forward(self, x):
        self._keep = (x.abs().sum(-1) > 1e-3)[:, None, None, :]  # (N, 1, 1, T)
        return super().forward(x)

    def attend(self, q, k, v, t):
        ok = band_mask(t, self.window, q.device) & self._keep
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
        return torch.matmul(torch.softmax(scores.masked_fill(~ok, -1e4), dim=-1), v)


# ---------------------------------------------------------------------------------------------------------------
# Registry, weights, export, inputs
# ---------------------------------------------------------------------------------------------------------------

# name: (class, keyword arguments, time axis of input and output, attention span facts for the tests)
#   kind: "chunked" (chunk C, left chunks n: KV cache n*C frames, look-ahead up to C-1), "window" (query sees the
#   last L frames including itself), "unlimited", "full", "data"
MODELS = {
    "wenet_conformer_abs": (WenetConformer, dict(pos="abs"), 1, dict(kind="chunked", chunk=4, left_chunks=2)),
    "wenet_conformer_rel": (WenetConformer, dict(pos="rel"), 1, dict(kind="chunked", chunk=4, left_chunks=2)),
    "cosyvoice_conformer_espnet_rel": (WenetConformer, dict(pos="rel_espnet"), 1,
                                       dict(kind="chunked", chunk=4, left_chunks=2, rel_shift=True)),
    "nemo_fastconformer_regular_abs": (NemoFastConformer, dict(self_attention_model="abs_pos"), 2,
                                       dict(kind="window", window=17)),
    "nemo_fastconformer_regular_rel": (NemoFastConformer, dict(self_attention_model="rel_pos"), 2,
                                       dict(kind="window", window=17, rel_shift=True)),
    "nemo_fastconformer_chunked_abs": (NemoFastConformer, dict(self_attention_model="abs_pos", att_context_size=(8, 3),
                                                               att_context_style="chunked_limited"), 2,
                                       dict(kind="chunked", chunk=4, left_chunks=2)),
    "nemo_fastconformer_chunked_rel": (NemoFastConformer, dict(self_attention_model="rel_pos", att_context_size=(8, 3),
                                                               att_context_style="chunked_limited"), 2,
                                       dict(kind="chunked", chunk=4, left_chunks=2, rel_shift=True)),
    "mimi_transformer": (MimiTransformer, {}, 2, dict(kind="window", window=250)),
    "sliding_sdpa": (SlidingWindowSDPA, {}, 1, dict(kind="window", window=16)),
    "sliding_explicit": (SlidingWindowExplicit, {}, 1, dict(kind="window", window=16)),
    "sliding_torch_mha": (SlidingWindowTorchMHA, {}, 1, dict(kind="window", window=16)),
    "causal_tril": (CausalTril, {}, 1, dict(kind="unlimited")),
    "cosyvoice_chunk_unlimited": (CosyVoiceChunkUnlimited, {}, 1, dict(kind="unlimited", chunk=4)),
    "mimi_unlimited": (MimiTransformer, dict(context=None), 2, dict(kind="unlimited")),
    "full_attention": (FullAttention, {}, 1, dict(kind="full")),
    "wenet_lengths": (WenetLengths, dict(pos="abs"), 1, dict(kind="data")),
    "value_mask_window": (ValueMaskWindow, {}, 1, dict(kind="data")),
}


def randomize_constants(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """Draw the parameters upstream initialises to constants from seeded random values: norm weights 1 +- 0.2 and
    biases +- 0.1, LayerScale in [0.5, 1.0], relative-position biases ``pos_bias_u/v`` N(0, 0.5)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))
            if isinstance(m, LayerScale):
                m.scale.copy_(0.5 + 0.5 * torch.rand(m.scale.shape, generator=gen))
            for name in ("pos_bias_u", "pos_bias_v"):
                if hasattr(m, name) and isinstance(getattr(m, name), nn.Parameter):
                    getattr(m, name).copy_(0.5 * torch.randn(getattr(m, name).shape, generator=gen))
    return model


def build(name: str, **kw) -> nn.Module:
    """Model ``name`` of :data:`MODELS` (its keyword arguments updated by ``kw``), built after
    ``torch.manual_seed(0)``, constants randomized (:func:`randomize_constants`), in eval mode."""
    cls, args, _, _ = MODELS[name]
    torch.manual_seed(0)
    model = cls(**{**args, **kw})
    return randomize_constants(model, torch.Generator().manual_seed(1)).eval()


def example_input(time_axis: int, t: int = 64, n: int = 1, lengths: bool = False):
    """Example export input (zeros would give a degenerate trace for value masks: a seeded random one)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn((n, t, C_IN) if time_axis == 1 else (n, C_IN, t), generator=g)
    return (x, torch.full((n,), t, dtype=torch.int64)) if lengths else (x,)


def export(model: nn.Module, path, example=None, dynamo: bool = False, time_axis: int = 1, *,
           t_max: int = 100000) -> Path:
    """Export ``model`` as a user would: input ``x`` (and ``lengths`` when the example has a second tensor), output
    ``y``; dynamic batch and time.

    ``dynamo=False``: TorchScript exporter, opset 17, ``dynamic_axes {0: 'N', time_axis: 'T'}``. ``dynamo=True``:
    ``dynamic_shapes`` with ``Dim('N', max=64)`` and ``Dim('T', min=2, max=t_max)``; the example batch is made 2
    (``torch.export`` specializes a size-1 example batch to 1), as ``tests/surgery/rules/test_rope.py::_export``.
    ``example`` defaults to :func:`example_input` (64 frames). Returns ``path``.
    """
    path = Path(path)
    example = tuple(example) if example is not None else example_input(time_axis)
    if dynamo and example[0].shape[0] == 1:
        example = tuple(torch.cat([e, e]) for e in example)
    names = ["x", "lengths"][:len(example)]
    model = model.eval()
    with torch.no_grad():
        if dynamo:
            n, t = torch.export.Dim("N", max=64), torch.export.Dim("T", min=2, max=t_max)
            shapes = ({0: n, time_axis: t},) + tuple({0: n} for _ in example[1:])
            torch.onnx.export(model, example, str(path), input_names=names, output_names=["y"], dynamo=True,
                              dynamic_shapes=shapes, verbose=False)
        else:
            axes = {"x": {0: "N", time_axis: "T"}, "y": {0: "N", time_axis: "T"}}
            if len(example) > 1:
                axes["lengths"] = {0: "N"}
            torch.onnx.export(model, example, str(path), input_names=names, output_names=["y"], opset_version=17,
                              dynamo=False, dynamic_axes=axes)
    return path


def speech_features(t: int, time_axis: int = 1, n: int = 2) -> np.ndarray:
    """(n, t, C_IN) or (n, C_IN, t) float32: log band energies of real speech (the bundled demo audio, 10 ms hop,
    20 ms Hann window, 16 bands of 0-8 kHz), normalized to zero mean and unit variance per band; stream ``b`` starts
    ``b * 997`` frames later (wrapping), so the streams differ."""
    from tests.precision import int8_fixtures as fx

    audio = np.concatenate(fx.speech_pool()).astype(np.float64)
    hop, win = 160, 320
    frames = (audio.size - win) // hop
    idx = np.arange(win)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(audio[idx] * np.hanning(win), axis=1)) ** 2  # (frames, 161)
    edges = np.linspace(0, spec.shape[1], C_IN + 1).astype(int)
    bands = np.stack([spec[:, a:b].sum(1) for a, b in zip(edges[:-1], edges[1:])], axis=1)
    feats = np.log(bands + 1e-6)
    feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-6)
    out = np.stack([np.take(feats, (np.arange(t) + 997 * b) % frames, axis=0) for b in range(n)])
    out = out.astype(np.float32)
    return np.ascontiguousarray(out if time_axis == 1 else out.transpose(0, 2, 1))


def attention_ops(path, fold: bool = False) -> list[dict]:
    """Inventory of the attentions in an exported ONNX file, for reading.

    For each attention (each ``Softmax`` or ONNX ``Attention`` node, in graph order) walks back from the
    ``MatMul`` that consumes the attention weights, along tensors that depend on the input values, down to the
    projections (``MatMul``/``Gemm`` with a constant weight, not included): ``core`` lists those nodes in graph order
    as ``Op[detail]``. ``side`` lists, in graph order, the nodes that compute the inputs of ``core`` that do not
    depend on input values (masks, position tables, relative-position terms: from ``Shape``, ``Range``, ``Trilu``,
    constants). Constants are shown as values when small. ``fold=True`` first folds constants with
    onnx-graphsurgeon as streamify does (``fold_constants().cleanup()``), showing the graph its rules see."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    if fold:
        import onnx_graphsurgeon as gs

        model = gs.export_onnx(gs.import_onnx(model).fold_constants().cleanup().toposort())
    g = model.graph
    const = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].type == onnx.AttributeProto.TENSOR:
            const[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    order = {id(n): k for k, n in enumerate(g.node)}
    # tensors that depend on input values (Shape / Size cut the dependence)
    data = {i.name for i in g.input if i.name not in const}
    for n in g.node:
        if n.op_type in ("Shape", "Size", "Constant", "ConstantOfShape"):
            continue
        if any(i in data for i in n.input if i):
            data.update(n.output)

    def is_proj(n):
        return n.op_type in ("MatMul", "Gemm") and any(i in const for i in n.input[1:2])

    def detail(n):
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        bits = []
        if n.op_type == "Transpose":
            bits.append(f"perm={list(a.get('perm', []))}")
        elif n.op_type in ("Softmax", "Concat", "Gather", "Split", "Unsqueeze", "Squeeze", "ReduceSum", "ReduceMax"):
            if "axis" in a:
                bits.append(f"axis={a['axis']}")
            if "axes" in a:
                bits.append(f"axes={list(a['axes'])}")
        elif n.op_type == "Trilu":
            bits.append(f"upper={a.get('upper', 1)}")
        elif n.op_type == "Einsum":
            bits.append(a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"])
        elif n.op_type == "Cast":
            bits.append(f"to={onnx.TensorProto.DataType.Name(a['to'])}")
        elif n.op_type == "Attention":
            bits.extend(f"{k}={v}" for k, v in a.items())
        for i in n.input:
            if i in const:
                v = const[i]
                bits.append(str(v.tolist() if v.ndim else v.item()) if v.size <= 8 else f"const{list(v.shape)}")
        return f"{n.op_type}[{', '.join(bits)}]" if bits else n.op_type

    out = []
    for s in g.node:
        if s.op_type not in ("Softmax", "Attention"):
            continue
        if s.op_type == "Softmax":  # forward to the MatMul with the values
            end, frontier = None, [s]
            while frontier and end is None:
                nxt = []
                for n in frontier:
                    for c in consumers.get(n.output[0], []):
                        if c.op_type in ("MatMul", "Einsum"):
                            end = c
                        else:
                            nxt.append(c)
                frontier = nxt
            end = end or s
        else:
            end = s
        core, side, seen = {}, {}, set()
        stack = [end]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            core[id(n)] = n
            for k, i in enumerate(n.input):
                p = producer.get(i)
                if p is None or i in const or (n.op_type == "Reshape" and k == 1):
                    continue  # a Reshape's target shape is bookkeeping, not part of the pattern
                if i in data:
                    if not is_proj(p):
                        stack.append(p)
                else:
                    side_stack = [p]
                    while side_stack:
                        q = side_stack.pop()
                        if id(q) in side or q.op_type == "Constant":
                            continue
                        side[id(q)] = q
                        side_stack.extend(producer[j] for k, j in enumerate(q.input)
                                          if j in producer and j not in const and j not in data
                                          and not (q.op_type == "Reshape" and k == 1))
        # the nodes between the Softmax and the MatMul (masked_fill after softmax) are in core via the walk back
        out.append({"softmax": s.name,
                    "core": [detail(n) for n in sorted(core.values(), key=lambda n: order[id(n)])],
                    "side": [detail(n) for n in sorted(side.values(), key=lambda n: order[id(n)])]})
    return out
