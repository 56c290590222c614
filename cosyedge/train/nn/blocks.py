"""Causal 1-D convolution blocks that stream exactly.

Each block left-pads its input with zeros and never looks ahead, so running it on consecutive chunks
with the last ``state_frames`` input frames carried over (``cosyedge streamify`` turns the pad into
``Concat(state_in, x)`` and ``Slice(-P:) -> state_out``) equals running it on the whole sequence.

All tensors are float, shape (N, C, T): batch, channels, time (samples or frames of that layer).

Sources: WaveNet causal dilated convolutions (van den Oord et al., 2016, arXiv:1609.03499);
pixel-shuffle / sub-pixel convolution (Shi et al., 2016, arXiv:1609.05158) applied along time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalConv1d(nn.Module):
    """Causal (left-padded) dilated 1-D convolution, stride 1.

    ``y[t]`` depends on ``x[t - (k-1)*d .. t]`` only.

    Args:
        in_channels (int): C_in.
        out_channels (int): C_out.
        kernel_size (int): k (taps).
        dilation (int): d. Defaults to 1.
        groups (int): Conv groups. Defaults to 1.
        bias (bool): Add a bias. Defaults to True.

    Shapes:
        x: (N, C_in, T) float32 -> y: (N, C_out, T) float32.

    Receptive field: ``(k-1)*d + 1`` frames. Streaming state: (N, C_in, (k-1)*d) float32, zeros at start.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 groups: int = 1, bias: bool = True):
        super().__init__()
        self.pad = (kernel_size - 1) * dilation
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups, bias=bias)

    @property
    def state_frames(self) -> int:
        """int: frames of input history kept between chunks, ``(k-1)*d``."""
        return self.pad

    @property
    def receptive_field(self) -> int:
        """int: input frames that influence one output frame, ``(k-1)*d + 1``."""
        return self.pad + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C_in, T) float32 -> (N, C_out, T) float32."""
        return self.conv(F.pad(x, (self.pad, 0)))


class CausalConv1dDownsample(nn.Module):
    """Strided causal convolution: exactly ``T / stride`` outputs for a T-sample input.

    Left pad ``P = kernel_size - stride``; output frame ``j`` sees input samples
    ``[j*s - P, j*s + s)``, i.e. the current hop and the ``P`` samples before it. With
    ``kernel_size = 2*stride`` this is an STFT-style analysis with 50 % overlap.

    Args:
        in_channels (int): C_in.
        out_channels (int): C_out.
        stride (int): s, the hop in input samples.
        kernel_size (int | None): k >= s (window). Defaults to ``2*stride``.
        bias (bool): Add a bias. Defaults to True.

    Shapes:
        x: (N, C_in, T) float32 with T a multiple of s -> y: (N, C_out, T // s) float32.

    Receptive field: k input samples. Streaming state: (N, C_in, k - s) float32, zeros at start.

    Raises:
        ValueError: ``kernel_size < stride``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int | None = None,
                 bias: bool = True):
        super().__init__()
        kernel_size = 2 * stride if kernel_size is None else kernel_size
        if kernel_size < stride:
            raise ValueError(f"kernel_size {kernel_size} < stride {stride}: samples would be skipped")
        self.stride = stride
        self.pad = kernel_size - stride
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, bias=bias)

    @property
    def state_frames(self) -> int:
        """int: input samples kept between chunks, ``k - s``."""
        return self.pad

    @property
    def receptive_field(self) -> int:
        """int: input samples seen by one output frame, ``k``."""
        return self.pad + self.stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C_in, T) float32, T % stride == 0 -> (N, C_out, T // stride) float32."""
        return self.conv(F.pad(x, (self.pad, 0)))


class CausalFraming(nn.Module):
    """The most recent ``frames`` hops of input samples at the end of each hop, without a dense framing matrix.

    Output frame ``t`` holds the ``K * hop`` samples ``x[(t + 1 - K) * hop .. (t + 1) * hop)`` (zeros before the
    start), the values a ``CausalConv1dDownsample(1, K * hop, hop, K * hop)`` with an identity kernel computes
    with ``(K * hop)^2`` MACs per frame. Here: a polyphase split (a fixed identity conv, kernel = stride = hop:
    channel ``p`` of frame ``t`` is ``x[t * hop + p]``) and a fixed grouped causal conv over frames (``hop``
    groups of ``K`` one-hot taps: the ``K - 1`` previous frames), ``hop^2 + K^2 hop`` MACs per frame, exact in
    float (each output is one input times 1.0). The channels come out in polyphase order: sample ``s`` of the
    frame (0 = oldest) is channel :attr:`channel_of` ``[s] = (s % hop) * K + s // hop``; :meth:`take` gathers
    by sample index.

    Args:
        hop (int): hop in input samples (> 0).
        frames (int): K >= 1, hops per output frame.

    Shapes:
        x: (N, 1, T) float32 with T a multiple of hop -> y: (N, K * hop, T // hop) float32 (polyphase order).

    Receptive field: ``K * hop`` input samples. Streaming state (``cosyedge streamify``, at the grouped conv):
    (N, hop, K - 1) float32 frames = the ``(K - 1) * hop`` previous samples, zeros at start.

    Raises:
        ValueError: ``hop`` < 1 or ``frames`` < 1.
    """

    def __init__(self, hop: int, frames: int):
        super().__init__()
        if hop < 1 or frames < 1:
            raise ValueError(f"CausalFraming(hop={hop}, frames={frames}): both must be >= 1")
        self.hop, self.frames = hop, frames
        self.pad = frames - 1
        self.poly = nn.Conv1d(1, hop, hop, stride=hop, bias=False)
        self.taps = nn.Conv1d(hop, hop * frames, frames, groups=hop, bias=False)
        taps = torch.zeros(hop * frames, 1, frames)
        for j in range(frames):
            taps[j::frames, 0, j] = 1.0  # output p*K + j = phase p, j frames after the oldest
        for conv, weight in ((self.poly, torch.eye(hop)[:, None, :]), (self.taps, taps)):
            conv.weight.data.copy_(weight)
            conv.weight.requires_grad_(False)
        s = torch.arange(hop * frames)
        self.register_buffer("channel_of", (s % hop) * frames + s // hop, persistent=False)

    @property
    def state_frames(self) -> int:
        """int: frames (of ``hop`` samples) kept between chunks, ``K - 1``."""
        return self.pad

    @property
    def receptive_field(self) -> int:
        """int: input samples in one output frame, ``K * hop``."""
        return self.frames * self.hop

    def take(self, y: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
        """Pick samples of each frame by their index in the frame.

        Args:
            y (torch.Tensor): (N, K * hop, T) float32 from :meth:`forward`.
            samples (torch.Tensor): (N, S, T) or (S,) int64 sample indices in ``[0, K * hop)`` (0 = oldest).
        Returns:
            torch.Tensor: (N, S, T) float32, ``out[n, i, t]`` = sample ``samples[n, i, t]`` of frame ``t``.
        """
        if samples.dim() == 1:
            return y.index_select(1, self.channel_of[samples])
        return torch.gather(y, 1, self.channel_of[samples])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, 1, T) float32, T % hop == 0 -> (N, K * hop, T // hop) float32 in polyphase order."""
        return self.taps(F.pad(self.poly(x), (self.pad, 0)))


class CausalConv1dUpsample(nn.Module):
    """Causal upsampling by ``factor``: a causal conv at the low rate with ``factor*C_out`` channels,
    then a time pixel-shuffle (sub-pixel convolution along time).

    This is the exact, cheaper equivalent of nearest-repeat x r followed by a causal conv, and with
    ``kernel_size = 2`` frames it equals a transposed convolution (kernel ``2r``, stride ``r``) with
    overlap-add, i.e. STFT synthesis: output hop ``t`` mixes frames ``t-1`` and ``t``.

    Args:
        in_channels (int): C_in (at the low rate).
        out_channels (int): C_out (at the high rate).
        factor (int): r, upsampling factor (output samples per input frame).
        kernel_size (int): Taps at the low rate. Defaults to 2.
        bias (bool): Add a bias. Defaults to True.

    Shapes:
        x: (N, C_in, T) float32 -> y: (N, C_out, T * r) float32;
        ``y[:, c, t*r + m] = conv(x)[:, c*r + m, t]``.

    Receptive field: ``kernel_size`` input frames. Streaming state: (N, C_in, kernel_size - 1), zeros.
    """

    def __init__(self, in_channels: int, out_channels: int, factor: int, kernel_size: int = 2, bias: bool = True):
        super().__init__()
        self.factor = factor
        self.out_channels = out_channels
        self.conv = CausalConv1d(in_channels, out_channels * factor, kernel_size, bias=bias)

    @property
    def state_frames(self) -> int:
        """int: low-rate input frames kept between chunks, ``kernel_size - 1``."""
        return self.conv.state_frames

    @property
    def receptive_field(self) -> int:
        """int: low-rate input frames seen by one output sample."""
        return self.conv.receptive_field

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C_in, T) float32 -> (N, C_out, T * factor) float32."""
        y = self.conv(x)  # (N, C_out*r, T)
        if self.out_channels == 1:  # same values; exports as Transpose + Flatten + Unsqueeze, no Shape ops
            return y.transpose(1, 2).flatten(1).unsqueeze(1)  # (N, T, r) -> (N, 1, T*r)
        y = y.unflatten(1, (self.out_channels, self.factor))  # (N, C_out, r, T)
        return y.transpose(2, 3).flatten(2)  # (N, C_out, T*r)

