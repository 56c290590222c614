"""A faithful GTCRN rebuild and a CosyVoice3 CausalHiFT trunk (seeded weights).

Random weights are enough here: streaming equivalence and look-ahead do not depend on the values.

* :class:`GTCRN`: the offline GTCRN of Xiaobin-Rong/gtcrn ``gtcrn.py`` (MIT, Rong Xiaobin; commit at the time of
  writing), module for module: ERB band merge/split, SFE (``nn.Unfold`` over frequency), grouped temporal convs with
  dilated causal time kernels (``F.pad`` on the left, ``ConvTranspose2d`` with a begin crop in the decoder), TRA
  (GRU attention over time), two DPGRNNs (bidirectional GRU over frequency, GRU over time; the explicit zero initial
  state over the time-folded batch). Only ``einops.rearrange`` is written as ``reshape``. Strictly causal: (B, 257, T, 2) STFT frames -> (B, 257, T, 2).
* :class:`CausalHiFTTrunk`: FunAudioLLM/CosyVoice ``cosyvoice/hifigan/generator.py`` ``CausalHiFTGenerator.decode``
  with the class defaults (upsample 8 x 8, kernels 16, iSTFT n_fft 16 hop 4: 256 samples per mel frame;
  ``conv_pre`` looks 4 mel frames ahead, ``causal_type='right'``), ``cosyvoice/transformer/convolution.py``
  ``CausalConv1d`` / ``CausalConv1dUpsample``. The trunk without the source (F0/NSF) module: mel (B, 80, T) ->
  waveform (B, 1, 256 T). Changes from upstream, said here: base channels 64 (not 512), no weight norm (weights
  only), the left ``ReflectionPad1d((1, 0))`` is a zero pad of one frame (a reflect pad over time does not stream),
  the iSTFT is a ``ConvTranspose1d`` with the windowed inverse-DFT bases (stride 4, kernel 16, centre crop of 8
  samples each side) divided by the window's steady-state square sum, as ONNX DSP.

Sources: https://github.com/Xiaobin-Rong/gtcrn (gtcrn.py), https://github.com/FunAudioLLM/CosyVoice
(cosyvoice/hifigan/generator.py, cosyvoice/transformer/convolution.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- GTCRN (Xiaobin-Rong/gtcrn gtcrn.py)
class ERB(nn.Module):
    """ERB band merge (257 -> 129 bins) and split (129 -> 257)."""

    def __init__(self, erb_subband_1, erb_subband_2, nfft=512, high_lim=8000, fs=16000):
        super().__init__()
        erb_filters = self.erb_filter_banks(erb_subband_1, erb_subband_2, nfft, high_lim, fs)
        nfreqs = nfft // 2 + 1
        self.erb_subband_1 = erb_subband_1
        self.erb_fc = nn.Linear(nfreqs - erb_subband_1, erb_subband_2, bias=False)
        self.ierb_fc = nn.Linear(erb_subband_2, nfreqs - erb_subband_1, bias=False)
        self.erb_fc.weight = nn.Parameter(erb_filters, requires_grad=False)
        self.ierb_fc.weight = nn.Parameter(erb_filters.T, requires_grad=False)

    @staticmethod
    def hz2erb(freq_hz):
        return 21.4 * np.log10(0.00437 * freq_hz + 1)

    @staticmethod
    def erb2hz(erb_f):
        return (10 ** (erb_f / 21.4) - 1) / 0.00437

    def erb_filter_banks(self, erb_subband_1, erb_subband_2, nfft=512, high_lim=8000, fs=16000):
        low_lim = erb_subband_1 / nfft * fs
        erb_points = np.linspace(self.hz2erb(low_lim), self.hz2erb(high_lim), erb_subband_2)
        bins = np.round(self.erb2hz(erb_points) / fs * nfft).astype(np.int32)
        erb_filters = np.zeros([erb_subband_2, nfft // 2 + 1], dtype=np.float32)
        erb_filters[0, bins[0]:bins[1]] = (bins[1] - np.arange(bins[0], bins[1]) + 1e-12) / (bins[1] - bins[0] + 1e-12)
        for i in range(erb_subband_2 - 2):
            erb_filters[i + 1, bins[i]:bins[i + 1]] = ((np.arange(bins[i], bins[i + 1]) - bins[i] + 1e-12)
                                                       / (bins[i + 1] - bins[i] + 1e-12))
            erb_filters[i + 1, bins[i + 1]:bins[i + 2]] = ((bins[i + 2] - np.arange(bins[i + 1], bins[i + 2]) + 1e-12)
                                                           / (bins[i + 2] - bins[i + 1] + 1e-12))
        erb_filters[-1, bins[-2]:bins[-1] + 1] = 1 - erb_filters[-2, bins[-2]:bins[-1] + 1]
        return torch.from_numpy(np.abs(erb_filters[:, erb_subband_1:]))

    def bm(self, x):
        """x: (B,C,T,F)."""
        return torch.cat([x[..., :self.erb_subband_1], self.erb_fc(x[..., self.erb_subband_1:])], dim=-1)

    def bs(self, x_erb):
        """x: (B,C,T,F_erb)."""
        return torch.cat([x_erb[..., :self.erb_subband_1], self.ierb_fc(x_erb[..., self.erb_subband_1:])], dim=-1)


class SFE(nn.Module):
    """Subband feature extraction: ``nn.Unfold`` of 3 neighbouring bins (over frequency only)."""

    def __init__(self, kernel_size=3, stride=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.unfold = nn.Unfold(kernel_size=(1, kernel_size), stride=(1, stride), padding=(0, (kernel_size - 1) // 2))

    def forward(self, x):
        """x: (B,C,T,F)."""
        return self.unfold(x).reshape(x.shape[0], x.shape[1] * self.kernel_size, x.shape[2], x.shape[3])


class TRA(nn.Module):
    """Temporal recurrent attention: a GRU over time on the band energy."""

    def __init__(self, channels):
        super().__init__()
        self.att_gru = nn.GRU(channels, channels * 2, 1, batch_first=True)
        self.att_fc = nn.Linear(channels * 2, channels)
        self.att_act = nn.Sigmoid()

    def forward(self, x):
        """x: (B,C,T,F)."""
        zt = torch.mean(x.pow(2), dim=-1)
        at = self.att_gru(zt.transpose(1, 2))[0]
        at = self.att_act(self.att_fc(at).transpose(1, 2))
        return x * at[..., None]


class ConvBlock(nn.Module):
    """Conv (or transposed conv) over frequency + BatchNorm + PReLU/Tanh."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups=1, use_deconv=False,
                 is_last=False):
        super().__init__()
        conv_module = nn.ConvTranspose2d if use_deconv else nn.Conv2d
        self.conv = conv_module(in_channels, out_channels, kernel_size, stride, padding, groups=groups)
        self.bn = nn.BatchNorm2d(out_channels)
        self.act = nn.Tanh() if is_last else nn.PReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class GTConvBlock(nn.Module):
    """Group temporal convolution: SFE, point conv, causal dilated depthwise time conv, point conv, TRA, shuffle."""

    def __init__(self, in_channels, hidden_channels, kernel_size, stride, padding, dilation, use_deconv=False):
        super().__init__()
        self.pad_size = (kernel_size[0] - 1) * dilation[0]
        conv_module = nn.ConvTranspose2d if use_deconv else nn.Conv2d
        self.sfe = SFE(kernel_size=3, stride=1)
        self.point_conv1 = conv_module(in_channels // 2 * 3, hidden_channels, 1)
        self.point_bn1 = nn.BatchNorm2d(hidden_channels)
        self.point_act = nn.PReLU()
        self.depth_conv = conv_module(hidden_channels, hidden_channels, kernel_size, stride=stride, padding=padding,
                                      dilation=dilation, groups=hidden_channels)
        self.depth_bn = nn.BatchNorm2d(hidden_channels)
        self.depth_act = nn.PReLU()
        self.point_conv2 = conv_module(hidden_channels, in_channels // 2, 1)
        self.point_bn2 = nn.BatchNorm2d(in_channels // 2)
        self.tra = TRA(in_channels // 2)

    @staticmethod
    def shuffle(x1, x2):
        """x1, x2: (B,C,T,F) -> (B,2C,T,F) interleaved ('b c g t f -> b (c g) t f')."""
        x = torch.stack([x1, x2], dim=1).transpose(1, 2).contiguous()
        return x.reshape(x.shape[0], x.shape[1] * 2, x.shape[3], x.shape[4])

    def forward(self, x):
        x1, x2 = torch.chunk(x, chunks=2, dim=1)
        x1 = self.sfe(x1)
        h1 = self.point_act(self.point_bn1(self.point_conv1(x1)))
        h1 = F.pad(h1, [0, 0, self.pad_size, 0])
        h1 = self.depth_act(self.depth_bn(self.depth_conv(h1)))
        h1 = self.point_bn2(self.point_conv2(h1))
        h1 = self.tra(h1)
        return self.shuffle(h1, x2)


class GRNN(nn.Module):
    """Grouped RNN: two GRUs on the two halves of the features."""

    def __init__(self, input_size, hidden_size, num_layers=1, batch_first=True, bidirectional=False):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.rnn1 = nn.GRU(input_size // 2, hidden_size // 2, num_layers, batch_first=batch_first,
                           bidirectional=bidirectional)
        self.rnn2 = nn.GRU(input_size // 2, hidden_size // 2, num_layers, batch_first=batch_first,
                           bidirectional=bidirectional)

    def forward(self, x):
        # upstream's zero initial state over the batch, which the intra-frame RNN folds with time (B*T): its zeros
        # are rewritten to the chunk's shape (Walker._uniform multiplies the frames by the batch there)
        h = torch.zeros(self.num_layers * (2 if self.bidirectional else 1), x.shape[0], self.hidden_size)
        x1, x2 = torch.chunk(x, chunks=2, dim=-1)
        h1, h2 = torch.chunk(h, chunks=2, dim=-1)
        y1, _ = self.rnn1(x1, h1.contiguous())
        y2, _ = self.rnn2(x2, h2.contiguous())
        return torch.cat([y1, y2], dim=-1)


class DPGRNN(nn.Module):
    """Grouped dual-path RNN: bidirectional over frequency (time folded into batch), forward over time."""

    def __init__(self, input_size, width, hidden_size):
        super().__init__()
        self.width = width
        self.hidden_size = hidden_size
        self.intra_rnn = GRNN(input_size=input_size, hidden_size=hidden_size // 2, bidirectional=True)
        self.intra_fc = nn.Linear(hidden_size, hidden_size)
        self.intra_ln = nn.LayerNorm((width, hidden_size), eps=1e-8)
        self.inter_rnn = GRNN(input_size=input_size, hidden_size=hidden_size, bidirectional=False)
        self.inter_fc = nn.Linear(hidden_size, hidden_size)
        self.inter_ln = nn.LayerNorm((width, hidden_size), eps=1e-8)

    def forward(self, x):
        """x: (B, C, T, F)."""
        x = x.permute(0, 2, 3, 1)
        intra_x = x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3])
        intra_x = self.intra_fc(self.intra_rnn(intra_x))
        intra_x = self.intra_ln(intra_x.reshape(x.shape[0], -1, self.width, self.hidden_size))
        intra_out = torch.add(x, intra_x)
        x = intra_out.permute(0, 2, 1, 3)
        inter_x = x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3])
        inter_x = self.inter_fc(self.inter_rnn(inter_x))
        inter_x = inter_x.reshape(x.shape[0], self.width, -1, self.hidden_size).permute(0, 2, 1, 3)
        inter_out = torch.add(intra_out, self.inter_ln(inter_x))
        return inter_out.permute(0, 3, 1, 2)


class Encoder(nn.Module):
    """Two frequency-strided conv blocks and three GT blocks (time dilations 1, 2, 5)."""

    def __init__(self):
        super().__init__()
        self.en_convs = nn.ModuleList([
            ConvBlock(3 * 3, 16, (1, 5), stride=(1, 2), padding=(0, 2)),
            ConvBlock(16, 16, (1, 5), stride=(1, 2), padding=(0, 2), groups=2),
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(0, 1), dilation=(1, 1)),
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(0, 1), dilation=(2, 1)),
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(0, 1), dilation=(5, 1)),
        ])

    def forward(self, x):
        en_outs = []
        for conv in self.en_convs:
            x = conv(x)
            en_outs.append(x)
        return x, en_outs


class Decoder(nn.Module):
    """Mirror of the encoder with transposed convs (time: left pad, then a begin crop of the same size)."""

    def __init__(self):
        super().__init__()
        self.de_convs = nn.ModuleList([
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(2 * 5, 1), dilation=(5, 1), use_deconv=True),
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(2 * 2, 1), dilation=(2, 1), use_deconv=True),
            GTConvBlock(16, 16, (3, 3), stride=(1, 1), padding=(2 * 1, 1), dilation=(1, 1), use_deconv=True),
            ConvBlock(16, 16, (1, 5), stride=(1, 2), padding=(0, 2), groups=2, use_deconv=True),
            ConvBlock(16, 2, (1, 5), stride=(1, 2), padding=(0, 2), use_deconv=True, is_last=True),
        ])

    def forward(self, x, en_outs):
        n = len(self.de_convs)
        for i in range(n):
            x = self.de_convs[i](x + en_outs[n - 1 - i])
        return x


class GTCRN(nn.Module):
    """GTCRN (module doc): spec (B, 257, T, 2) float32 STFT frames (real, imaginary) -> enhanced, same shape.

    Seeded (``torch.manual_seed(seed)``) random weights; BatchNorm running statistics randomised too so that they
    are not the identity; eval mode.
    """

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.erb = ERB(65, 64)
        self.sfe = SFE(3, 1)
        self.encoder = Encoder()
        self.dpgrnn1 = DPGRNN(16, 33, 16)
        self.dpgrnn2 = DPGRNN(16, 33, 16)
        self.decoder = Decoder()
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, spec):
        spec_real = spec[..., 0].permute(0, 2, 1)
        spec_imag = spec[..., 1].permute(0, 2, 1)
        spec_mag = torch.sqrt(spec_real ** 2 + spec_imag ** 2 + 1e-12)
        feat = torch.stack([spec_mag, spec_real, spec_imag], dim=1)  # (B,3,T,257)
        feat = self.sfe(self.erb.bm(feat))  # (B,9,T,129)
        feat, en_outs = self.encoder(feat)
        feat = self.dpgrnn2(self.dpgrnn1(feat))  # (B,16,T,33)
        m = self.erb.bs(self.decoder(feat, en_outs))  # (B,2,T,257)
        ref = spec.permute(0, 3, 2, 1)  # (B,2,T,F)
        s_real = ref[:, 0] * m[:, 0] - ref[:, 1] * m[:, 1]
        s_imag = ref[:, 1] * m[:, 0] + ref[:, 0] * m[:, 1]
        return torch.stack([s_real, s_imag], dim=1).permute(0, 3, 2, 1)  # (B,F,T,2)


def stft_frames(x: np.ndarray, n_fft: int = 512, hop: int = 256) -> np.ndarray:
    """GTCRN's input: sqrt-Hann STFT of waveform ``x`` (float32 (n,)), centred with zeros, as float32 (1, 257, T, 2)
    (T = n // hop + 1), the package's own framing (``torch.stft(..., center=True)``, ``pad_mode='constant'``)."""
    win = torch.hann_window(n_fft).pow(0.5)
    s = torch.stft(torch.from_numpy(np.asarray(x, np.float32)), n_fft, hop, n_fft, win, center=True,
                   pad_mode="constant", return_complex=True)
    return torch.view_as_real(s)[None].numpy().astype(np.float32)


def export_gtcrn(path, frames: int = 63) -> GTCRN:
    """Export :class:`GTCRN` through TorchScript (``dynamo=False``, opset 17), input ``spec`` (N, 257, T, 2) with
    dynamic N and T, output ``enh``; returns the model."""
    model = GTCRN()
    x = torch.randn(1, 257, frames, 2)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), input_names=["spec"], output_names=["enh"],
                          dynamic_axes={"spec": {0: "N", 2: "T"}, "enh": {0: "N", 2: "T"}}, dynamo=False,
                          opset_version=17)
    return model


# ---------------------------------------------------------------- CosyVoice3 CausalHiFT trunk
class CausalConv1d(nn.Conv1d):
    """CosyVoice ``CausalConv1d``: zeros of ``causal_padding`` frames concatenated on the left ('left') or on the
    right ('right': look-ahead), then a plain conv."""

    def __init__(self, cin, cout, kernel_size, dilation=1, causal_type="left"):
        super().__init__(cin, cout, kernel_size, stride=1, padding=0, dilation=dilation)
        self.causal_padding = int((kernel_size * dilation - dilation) / 2) * 2 + (kernel_size + 1) % 2
        self.causal_type = causal_type

    def forward(self, x):
        cache = torch.zeros(x.shape[0], x.shape[1], self.causal_padding)
        x = torch.cat([cache, x], dim=2) if self.causal_type == "left" else torch.cat([x, cache], dim=2)
        return super().forward(x)


class CausalConv1dUpsample(nn.Conv1d):
    """CosyVoice ``CausalConv1dUpsample``: nearest upsampling by ``stride``, left zero pad ``k - 1``, conv."""

    def __init__(self, cin, cout, kernel_size, stride):
        super().__init__(cin, cout, kernel_size, 1, padding=0)
        self.causal_padding = kernel_size - 1
        self.upsample = nn.Upsample(scale_factor=stride, mode="nearest")

    def forward(self, x):
        return super().forward(F.pad(self.upsample(x), (self.causal_padding, 0), value=0.0))


class Snake(nn.Module):
    """Snake activation ``x + 1/alpha sin(alpha x)^2`` (per channel alpha; BigVGAN)."""

    def __init__(self, channels):
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        a = self.alpha[None, :, None]
        return x + (1.0 / (a + 1e-9)) * torch.sin(x * a).pow(2)


class ResBlock(nn.Module):
    """HiFi-GAN residual block with causal dilated convs and Snake activations."""

    def __init__(self, channels, kernel_size=3, dilations=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList(CausalConv1d(channels, channels, kernel_size, d) for d in dilations)
        self.convs2 = nn.ModuleList(CausalConv1d(channels, channels, kernel_size, 1) for _ in dilations)
        self.acts1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.acts2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x):
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.acts1, self.acts2):
            x = c2(a2(c1(a1(x)))) + x
        return x


HIFT_SAMPLES_PER_FRAME = 256
"""int: waveform samples per mel frame of :class:`CausalHiFTTrunk` (upsample 8 x 8, iSTFT hop 4)."""


class CausalHiFTTrunk(nn.Module):
    """CausalHiFTGenerator.decode without the source module (module doc): mel (B, 80, T) -> (B, 1, 256 T).

    Look-ahead by reading the graph: ``conv_pre`` 4 mel frames (1024 samples) plus the iSTFT's centre (the
    one-frame left pad before ``conv_post`` takes 4 of its 8 samples back: 1028 samples measured).
    """

    def __init__(self, in_channels=80, base_channels=64, upsample_rates=(8, 8), upsample_kernel_sizes=(16, 16),
                 n_fft=16, hop_len=4, resblock_kernel_sizes=(3, 7, 11), resblock_dilation_sizes=((1, 3, 5),) * 3,
                 conv_pre_look_right=4, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.n_fft, self.hop = n_fft, hop_len
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = CausalConv1d(in_channels, base_channels, conv_pre_look_right + 1, causal_type="right")
        self.ups = nn.ModuleList(CausalConv1dUpsample(base_channels // 2 ** i, base_channels // 2 ** (i + 1), k, u)
                                 for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)))
        self.resblocks = nn.ModuleList()
        ch = base_channels
        for i in range(len(self.ups)):
            ch = base_channels // 2 ** (i + 1)
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(ResBlock(ch, k, d))
        self.conv_post = CausalConv1d(ch, n_fft + 2, 7, causal_type="left")
        # iSTFT as a transposed conv: windowed inverse real DFT bases, (n_fft + 2) -> 1 channel
        win = torch.hann_window(n_fft, periodic=True)
        k = np.arange(n_fft // 2 + 1)[:, None]
        n = np.arange(n_fft)[None, :]
        c = np.where((k == 0) | (k == n_fft // 2), 1.0, 2.0) / n_fft
        re = c * np.cos(2 * np.pi * k * n / n_fft)
        im = -c * np.sin(2 * np.pi * k * n / n_fft)
        bases = np.concatenate([re, im], 0) * win.numpy()[None, :]
        norm = float((win ** 2).reshape(-1, hop_len).sum(0).mean())  # steady-state window square sum
        self.istft = nn.ConvTranspose1d(n_fft + 2, 1, n_fft, stride=hop_len, padding=n_fft // 2, bias=False)
        with torch.no_grad():
            self.istft.weight.copy_(torch.from_numpy((bases / norm)[:, None, :].astype(np.float32)))
        self.eval()

    def forward(self, mel):
        x = self.conv_pre(mel)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, 0.1))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0))  # upstream: ReflectionPad1d((1, 0))
            xs = None
            for j in range(self.num_kernels):
                r = self.resblocks[i * self.num_kernels + j](x)
                xs = r if xs is None else xs + r
            x = xs / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))
        h = self.n_fft // 2 + 1
        mag = torch.exp(x[:, :h, :]).clamp(max=1e2)
        phase = torch.sin(x[:, h:, :])
        y = self.istft(torch.cat([mag * torch.cos(phase), mag * torch.sin(phase)], dim=1))
        return torch.clamp(y, -0.99, 0.99)


def export_hift(path, frames: int = 20) -> CausalHiFTTrunk:
    """Export :class:`CausalHiFTTrunk` through TorchScript (``dynamo=False``, opset 17): input ``mel`` (N, 80, T),
    output ``audio`` (N, 1, 256 T), dynamic N and T; returns the model."""
    model = CausalHiFTTrunk()
    x = torch.randn(1, 80, frames)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), input_names=["mel"], output_names=["audio"],
                          dynamic_axes={"mel": {0: "N", 2: "T"}, "audio": {0: "N", 2: "T_out"}}, dynamo=False,
                          opset_version=17)
    return model
