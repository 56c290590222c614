"""A small streaming transformer speech enhancer (16 kHz, hop 160 samples = 10 ms, 20 ms algorithmic latency).

A transformer model people can hear: the full-sequence graph has causal self-attention over a
sliding window of :attr:`TransformerEnhancerConfig.attention_frames` frames and rotary positions from
``arange(T)``; ``cosyedge streamify`` turns the attention into a fixed-size KV cache and the positions into a
counter. Written for that: the mask and the positions are computed inside ``forward`` from
``torch.arange`` of the frame count, the attention is explicit ``q @ k^T``, masked fill, softmax, ``@ v`` (no
``nn.MultiheadAttention``).

Architecture (every step causal):

1. Encoder: :class:`~cosyedge.train.nn.CausalConv1dDownsample` (1 -> 2F channels, window 320, hop 160, left pad 160)
   with the fixed sqrt-Hann real-DFT basis of the reference enhancer (F = 161 bins: real then imaginary parts).
2. Features: log power per bin ``log(re^2 + im^2 + eps)``, normalised per bin with a fixed mean and scale measured
   on training audio (buffers), then a causal conv over 3 frames, F -> d_model (local order for the attention).
3. ``layers`` pre-LN transformer layers over frames, layout (N, T, d_model): ``h = h + Wo attn(LN(h))``,
   ``h = h + FFN(LN(h))``. Attention: one ``Linear(d, 3d)`` for q, k, v, ``heads`` heads, rotary embeddings
   (LLaMA rotate-half form) on q and k from ``arange(T)``, scores ``q k^T / sqrt(d_head)``, masked where
   ``not (0 <= i - j < attention_frames)`` (query frame i sees keys i - L + 1 .. i, L = ``attention_frames``),
   softmax over keys, ``@ v``. FFN: ``Linear(d, ffn) -> GELU -> Linear(ffn, d)``.
4. Mask: ``LN -> Linear(d, F)``, ``g = floor + (1 - floor) * sigmoid(.)`` per bin, applied to re and im of the
   encoder output.
5. Decoder: ``nn.ConvTranspose1d(2F, 1, 320, stride=160)`` with the fixed sqrt-Hann inverse-DFT basis (overlap-add
   inverse STFT), cropped to the input length: ``y[n]`` is the estimate of ``x[n - 160]``.

Shapes: ``forward(x)``: x (N, 1, T) float32, T a multiple of 160 -> y (N, 1, T) float32, 160 samples late.
With the default config: 108.5 k trainable parameters (the fixed STFT pair adds 206 k); 321 k multiply-adds per
10 ms hop (32 M per second of audio), 206 k of them in the fixed encoder and decoder. Streamed (``cosyedge
streamify``) its state per stream is 34 kB: two 31-frame key/value caches per layer, the position counter, the
conv contexts and the overlap-add tail.

The bundled weights (``cosyedge/assets/transformer/weights.safetensors``, their README) were trained here in two
25-minute stages on one CPU thread (``scripts/training/train_transformer_enhancer.py``).

Sources: pre-LN transformer (Xiong et al. 2020, arXiv:2002.04745); rotary position embeddings (Su et al. 2021,
arXiv:2104.09864; the rotate-half form of HF LLaMA); sliding-window causal attention (Longformer, Beltagy et al.
2020, arXiv:2004.05150; Mimi's 250-step context); STFT-mask enhancement with an SNR loss as in
:mod:`cosyedge.train.reference.model`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cosyedge.errors import ArtifactError, first_line
from cosyedge.models.stft import stft_bases
from cosyedge.train.nn import CausalConv1d, CausalConv1dDownsample

__all__ = ["TransformerEnhancer", "TransformerEnhancerConfig", "export_transformer_enhancer",
           "load_transformer_enhancer", "save_transformer_enhancer"]


@dataclasses.dataclass
class TransformerEnhancerConfig:
    """Hyper-parameters of :class:`TransformerEnhancer`.

    Attributes:
        sample_rate_hz (int): 16000.
        hop_samples (int): encoder stride = model step, 160 samples (10 ms).
        win_samples (int): encoder window, 2 * hop (20 ms sqrt-Hann).
        d_model (int): transformer width.
        heads (int): attention heads (``d_model`` divisible by it; head size even, for the rotary pairs).
        layers (int): transformer layers.
        ffn (int): hidden units of each feed-forward block.
        attention_frames (int): L, frames a query sees (itself and the L - 1 before it): 32 = 320 ms.
        feature_kernel (int): frames of the causal feature conv before the transformer.
        rope (bool): rotary position embeddings on q and k (positions from ``arange(T)``).
        rope_base (float): rotary frequency base.
        gain_floor (float): minimum gain in [0, 1).
        log_eps (float): floor added to the bin power before the log.
    """

    sample_rate_hz: int = 16000
    hop_samples: int = 160
    win_samples: int = 320
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    ffn: int = 128
    attention_frames: int = 32
    feature_kernel: int = 3
    rope: bool = True
    rope_base: float = 10000.0
    gain_floor: float = 0.03
    log_eps: float = 1e-6

    @property
    def n_bins(self) -> int:
        """int: F = win/2 + 1 frequency bins."""
        return self.win_samples // 2 + 1

    @property
    def delay_samples(self) -> int:
        """int: output delay w.r.t. the input (one hop, from the 50 % overlap-add)."""
        return self.hop_samples


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., 2m) -> (..., 2m): ``cat(-x2, x1)`` of the two halves of the last axis."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention over frames, each query seeing itself and the ``window - 1`` frames before it.

    Args:
        d_model (int): width C.
        heads (int): H (C divisible by H; C / H even when ``rope``).
        window (int): L >= 1, keys per query.
        rope (bool): rotary embeddings on q and k from ``arange(T)``.
        rope_base (float): rotary frequency base.

    Shapes:
        x (N, T, C) float32 -> (N, T, C) float32.
    """

    def __init__(self, d_model: int, heads: int, window: int, rope: bool = True, rope_base: float = 10000.0):
        super().__init__()
        if d_model % heads or (rope and (d_model // heads) % 2) or window < 1:
            raise ValueError(f"d_model {d_model}, heads {heads}, window {window}: need d_model divisible by heads, "
                             f"an even head size with rope, window >= 1")
        self.heads, self.head_dim, self.window, self.rope = heads, d_model // heads, window, rope
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        inv = 1.0 / (rope_base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, T, C) float32 -> (N, T, C) float32."""
        n, t, c = x.shape
        h, dh = self.heads, self.head_dim
        q, k, v = self.qkv(x).view(n, t, 3, h, dh).unbind(2)  # each (N, T, H, Dh)
        pos = torch.arange(t, device=x.device)
        if self.rope:
            freqs = pos.float()[:, None] * self.inv_freq[None, :]  # (T, Dh/2)
            emb = torch.cat([freqs, freqs], dim=-1)[None, :, None, :]  # (1, T, 1, Dh)
            cos, sin = emb.cos(), emb.sin()
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (N, H, T, Dh)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))  # (N, H, T, T)
        lag = pos[:, None] - pos[None, :]  # i - j
        allowed = (lag >= 0) & (lag < self.window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(n, t, c)
        return self.out(y)


class TransformerLayer(nn.Module):
    """Pre-LN transformer layer: ``h += attn(LN(h)); h += FFN(LN(h))``; (N, T, C) -> (N, T, C) float32."""

    def __init__(self, d_model: int, heads: int, ffn: int, window: int, rope: bool, rope_base: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, window, rope, rope_base)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ffn)
        self.ff2 = nn.Linear(ffn, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, T, C) float32 -> (N, T, C) float32."""
        x = x + self.attn(self.norm1(x))
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))


class TransformerEnhancer(nn.Module):
    """Streaming STFT-mask speech enhancer with a sliding-window causal transformer (see module docstring).

    Args:
        config (TransformerEnhancerConfig | None): hyper-parameters; defaults to the dataclass defaults.

    Shapes:
        forward: x (N, 1, T) float32, T % 160 == 0 -> y (N, 1, T) float32, delayed by 160 samples.
    Raises:
        ValueError: window other than 2 * hop; an inconsistent attention config.
    """

    def __init__(self, config: TransformerEnhancerConfig | None = None):
        super().__init__()
        self.config = cfg = config or TransformerEnhancerConfig()
        if cfg.win_samples != 2 * cfg.hop_samples:
            raise ValueError(f"win_samples must be 2 * hop_samples ({2 * cfg.hop_samples}), got {cfg.win_samples}")
        f = cfg.n_bins
        ana, syn = stft_bases(cfg.win_samples, cfg.hop_samples)
        self.encoder = CausalConv1dDownsample(1, 2 * f, cfg.hop_samples, cfg.win_samples, bias=False)
        self.encoder.conv.weight.data.copy_(torch.from_numpy(ana))
        self.decoder = nn.ConvTranspose1d(2 * f, 1, cfg.win_samples, stride=cfg.hop_samples, bias=False)
        self.decoder.weight.data.copy_(torch.from_numpy(np.ascontiguousarray(syn))[:, None, :])
        for p in (*self.encoder.parameters(), *self.decoder.parameters()):
            p.requires_grad_(False)
        self.register_buffer("feat_mean", torch.zeros(f))
        self.register_buffer("feat_scale", torch.ones(f))
        self.inp = CausalConv1d(f, cfg.d_model, cfg.feature_kernel)
        self.layers = nn.ModuleList(TransformerLayer(cfg.d_model, cfg.heads, cfg.ffn, cfg.attention_frames, cfg.rope,
                                                     cfg.rope_base) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, f)

    def log_power(self, spec: torch.Tensor) -> torch.Tensor:
        """spec (N, 2F, T) float32 (Re; Im) -> log bin power (N, F, T) float32."""
        f = self.config.n_bins  # a static split: no Shape/Div ops in the exported graph
        re, im = spec[:, :f], spec[:, f:]
        return torch.log(re * re + im * im + self.config.log_eps)

    @torch.no_grad()
    def set_feature_stats(self, x: torch.Tensor) -> None:
        """Set the per-bin feature mean and scale (1 / std) from training audio x (N, 1, T) float32."""
        lp = self.log_power(self.encoder(x))  # (N, F, T)
        self.feat_mean.copy_(lp.mean(dim=(0, 2)))
        self.feat_scale.copy_(1.0 / (lp.std(dim=(0, 2)) + 1e-3))

    def gains(self, spec: torch.Tensor) -> torch.Tensor:
        """spec (N, 2F, T) float32 from the encoder -> gains (N, F, T) float32 in [floor, 1]."""
        lp = self.log_power(spec)
        h = self.inp((lp - self.feat_mean[:, None]) * self.feat_scale[:, None]).transpose(1, 2)  # (N, T, C)
        for layer in self.layers:
            h = layer(h)
        fl = self.config.gain_floor
        return (fl + (1.0 - fl) * torch.sigmoid(self.head(self.norm(h)))).transpose(1, 2)

    def synthesis(self, spec: torch.Tensor, n_samples: int) -> torch.Tensor:
        """spec (N, 2F, T') float32 -> waveform (N, 1, n_samples) float32 (overlap-add, tail cropped)."""
        return self.decoder(spec)[..., :n_samples]

    def apply_gains(self, spec: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """spec (N, 2F, T), g (N, F, T) -> (N, 2F, T): the same gain on Re and Im of each bin."""
        return spec * torch.cat([g, g], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, 1, T) float32 -> enhanced (N, 1, T) float32, 160 samples late."""
        spec = self.encoder(x)
        return self.synthesis(self.apply_gains(spec, self.gains(spec)), x.shape[-1])

    def stream_metadata(self) -> dict:
        """dict: model-level contract fields for export (name, sample rate, hop, delay)."""
        c = self.config
        return {"name": "transformer", "sample_rate_hz": c.sample_rate_hz, "hop_samples": c.hop_samples,
                "delay_samples": c.delay_samples}


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """int: parameters of ``model`` (the trainable ones by default; the fixed STFT bases are not)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def save_transformer_enhancer(model: TransformerEnhancer, path: str | Path, extra: dict | None = None) -> None:
    """Save weights to safetensors with the config (and ``extra`` notes) as JSON in the header; atomic.

    The fixed STFT bases are left out (they follow from the config), which keeps the file small."""
    from safetensors.torch import save_file

    from cosyedge.artifacts import atomic_output

    meta = {"config": json.dumps(dataclasses.asdict(model.config)), "model": "cosyedge.transformer_enhancer"}
    if extra:
        meta["notes"] = json.dumps(extra)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith(("encoder.", "decoder."))}
    with atomic_output(path) as tmp:
        save_file(state, str(tmp), metadata=meta)


def load_transformer_enhancer(path: str | Path) -> TransformerEnhancer:
    """Load a :class:`TransformerEnhancer` from safetensors (no pickle), in eval mode.

    Raises:
        ArtifactError: file missing, unreadable, or weights that do not match the config in its header.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"weights file not found: {path} "
                            "(train one with scripts/training/train_transformer_enhancer.py)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
        model = TransformerEnhancer(TransformerEnhancerConfig(**json.loads(meta.get("config", "{}"))))
        own = {k: v for k, v in model.state_dict().items() if not k.startswith(("encoder.", "decoder."))}
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        wrong = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
        if missing or unexpected or wrong:
            raise ArtifactError(f"weights {path} do not fit the transformer enhancer: {len(missing)} missing (e.g. "
                                f"{missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]}), "
                                f"{len(wrong)} of another shape (e.g. {wrong[:2]})")
        model.load_state_dict(state, strict=False)
    except ArtifactError:
        raise
    except Exception as err:
        raise ArtifactError(f"cannot load weights {path}: {first_line(err)}") from None
    return model.eval()


def export_transformer_enhancer(model: TransformerEnhancer | str | Path, out: str | Path, dynamo: bool = False,
                                check_lengths: tuple[int, ...] = (1600, 4960), atol: float = 1e-5) -> Path:
    """Export to a full-sequence FP32 ONNX (input ``audio``, output ``enhanced``, dynamic N and T, the cosyedge
    stream contract in its metadata: what ``cosyedge streamify`` takes) and check it against PyTorch.

    Args:
        model (TransformerEnhancer | str | Path): the model, or its safetensors weights.
        out (str | Path): destination ``.onnx`` (one self-contained file).
        dynamo (bool): exporter (see :func:`cosyedge.export.torch_to_onnx.onnx_from_torch`). Defaults to False.
        check_lengths (tuple[int, ...]): input lengths (samples, multiples of the hop) at which ONNX Runtime must
            equal PyTorch within ``atol`` (batch of 2, speech-level noise).
        atol (float): max abs difference allowed.
    Returns:
        Path: ``out``.
    Raises:
        AccuracyError: ONNX Runtime differs from PyTorch by more than ``atol`` at a check length.
    """
    import onnxruntime as ort

    from cosyedge.errors import AccuracyError
    from cosyedge.export.torch_to_onnx import INPUT_NAME, OUTPUT_NAME, onnx_from_torch

    if not isinstance(model, nn.Module):
        model = load_transformer_enhancer(model)
    model = model.eval()
    out = onnx_from_torch(model, out, dynamo=dynamo)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for n in check_lengths:
        x = (0.1 * rng.standard_normal((2, 1, n))).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        got = sess.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        err = float(np.max(np.abs(got - want)))
        if got.shape != want.shape or not err <= atol:
            raise AccuracyError(f"{out}: ONNX differs from PyTorch at T={n}: shape {got.shape} vs {want.shape}, "
                                f"max abs err {err:.3g} > {atol:g}")
    return Path(out)
