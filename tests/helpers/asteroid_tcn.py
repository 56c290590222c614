"""A faithful rebuild of asteroid's causal Conv-TasNet (free filterbank encoder -> ``TDConvNet`` mask -> decoder),
seeded random weights.

Upstream (MIT, the asteroid team), read with git from the snapshots fetched for this rebuild:

* asteroid-team/asteroid commit 92c8d83a9dbe7c3afd1cd097e31254e0b4f82881 (2025-07-23):
  ``asteroid/masknn/convolutional.py`` (``_Chop1d``, ``Conv1DBlock``, ``TDConvNet``), ``asteroid/masknn/norms.py``
  (``GlobLN``/gLN, ``ChanLN``/cLN, ``CumLN``/cgLN; ``_LayerNorm.apply_gain_and_bias``), ``asteroid/models/
  conv_tasnet.py`` (``ConvTasNet``: ``fb_name="free"``, ``kernel_size=16``, ``stride=8``, ``mask_act="sigmoid"``; with
  ``causal=True`` it accepts only ``norm_type`` "cLN" or "cgLN" and turns any other into "cLN") and
  ``asteroid/models/base_models.py`` (``BaseEncoderMaskerDecoder.forward``: encoder, masker, ``mask * tf_rep``,
  decoder, ``pad_x_to_y``).
* asteroid-team/asteroid-filterbanks commit ddecf6b92f76a4c7096709c269ffd89783c7ae70: ``free_fb.py`` /
  ``enc_dec.py`` (the free encoder is ``F.conv1d(wav, filters, stride)``, no bias, no padding; the decoder
  ``F.conv_transpose1d(spec, filters, stride)``, no padding).

Which norms are causal upstream: gLN (``GlobLN``, mean/var over channels and the whole time axis) is not; cLN
(``ChanLN``, mean/var over the channels of each frame) is frame-local; cgLN (``CumLN``, mean/var over the channels of
every frame so far: ``cumsum`` over time, counts ``arange(C, C (T+1), C)``) is causal with a running statistic. ``BN``
(``BatchNorm``, eval) is a per-channel affine map.

Layer order, padding, norms and residual/skip paths are upstream's; the changes, said here: the asteroid-filterbanks
``Filterbank`` objects are plain ``nn.Conv1d`` / ``nn.ConvTranspose1d`` without bias holding the same filters (xavier
normal, as ``FreeFB``); ``n_src`` is 1 and the mask/decoder shape juggling of ``_unsqueeze_to_3d`` /
``_shape_reconstructed`` for other shapes is left out (a (N, 1, T) wave in, (N, 1, T) out); the norms take
``EPS = 1e-8`` as upstream's default argument, written as a constant (ONNX export of a keyword default is the same);
the PReLU slopes, norm gains/biases and BatchNorm running statistics are drawn at random (seeded) instead of
upstream's initial values, so no two layers compute the same function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-8


# ---------------------------------------------------------------- asteroid/masknn/norms.py
class _LayerNorm(nn.Module):
    """Layer Normalization base class: gain ``gamma`` and bias ``beta`` per channel."""

    def __init__(self, channel_size):
        super().__init__()
        self.channel_size = channel_size
        self.gamma = nn.Parameter(torch.ones(channel_size), requires_grad=True)
        self.beta = nn.Parameter(torch.zeros(channel_size), requires_grad=True)

    def apply_gain_and_bias(self, normed_x):
        """Assumes input of size ``[batch, chanel, *]``."""
        return (self.gamma * normed_x.transpose(1, -1) + self.beta).transpose(1, -1)


class GlobLN(_LayerNorm):
    """gLN: z-norm over every axis but the batch (channels and the whole time axis: not causal)."""

    def forward(self, x):
        dims = list(range(1, x.dim()))
        mean = x.mean(dim=dims, keepdim=True)
        var2 = torch.var(x, dim=dims, keepdim=True, unbiased=False)
        return self.apply_gain_and_bias((x - mean) / torch.sqrt(var2 + EPS))


class ChanLN(_LayerNorm):
    """cLN: channel-wise layer norm, each frame over its channels (causal, frame-local)."""

    def forward(self, x):
        mean = torch.mean(x, dim=1, keepdim=True)
        var = torch.var(x, dim=1, keepdim=True, unbiased=False)
        return self.apply_gain_and_bias((x - mean) / (var + EPS).sqrt())


class CumLN(_LayerNorm):
    """cgLN: cumulative global layer norm, mean/var over the channels of every frame up to the current one."""

    def forward(self, x):
        batch, chan, spec_len = x.size()
        cum_sum = torch.cumsum(x.sum(1, keepdim=True), dim=-1)
        cum_pow_sum = torch.cumsum(x.pow(2).sum(1, keepdim=True), dim=-1)
        cnt = torch.arange(start=chan, end=chan * (spec_len + 1), step=chan, dtype=x.dtype,
                           device=x.device).view(1, 1, -1)
        cum_mean = cum_sum / cnt
        cum_var = cum_pow_sum / cnt - cum_mean.pow(2)
        return self.apply_gain_and_bias((x - cum_mean) / (cum_var + EPS).sqrt())


class BatchNorm(nn.BatchNorm1d):
    """bN (upstream ``norms.BatchNorm``, a ``_BatchNorm``; the alias is ``bN``: ``norms.get("BN")`` finds nothing):
    in eval a per-channel affine map of the running statistics, frame-local."""

    def __init__(self, channel_size):
        super().__init__(channel_size)


NORMS = {"gLN": GlobLN, "cLN": ChanLN, "cgLN": CumLN, "bN": BatchNorm}


# ---------------------------------------------------------------- asteroid/masknn/convolutional.py
class _Chop1d(nn.Module):
    """To ensure the output length is the same as the input."""

    def __init__(self, chop_size):
        super().__init__()
        self.chop_size = chop_size

    def forward(self, x):
        return x[..., : -self.chop_size].contiguous()


class Conv1DBlock(nn.Module):
    """1x1 conv -> PReLU -> norm -> depth-wise dilated conv (causal: ``padding`` both sides, then the last
    ``padding`` frames chopped) -> PReLU -> norm; a 1x1 residual conv and a 1x1 skip conv of the shared output."""

    def __init__(self, in_chan, hid_chan, skip_out_chan, kernel_size, padding, dilation, norm_type="gLN",
                 causal=False):
        super().__init__()
        self.skip_out_chan = skip_out_chan
        conv_norm = NORMS[norm_type]
        in_conv1d = nn.Conv1d(in_chan, hid_chan, 1)
        depth_conv1d = nn.Conv1d(hid_chan, hid_chan, kernel_size, padding=padding, dilation=dilation,
                                 groups=hid_chan)
        if causal:
            depth_conv1d = nn.Sequential(depth_conv1d, _Chop1d(padding))
        self.shared_block = nn.Sequential(in_conv1d, nn.PReLU(), conv_norm(hid_chan), depth_conv1d, nn.PReLU(),
                                          conv_norm(hid_chan))
        self.res_conv = nn.Conv1d(hid_chan, in_chan, 1)
        if skip_out_chan:
            self.skip_conv = nn.Conv1d(hid_chan, skip_out_chan, 1)

    def forward(self, x):
        shared_out = self.shared_block(x)
        res_out = self.res_conv(shared_out)
        if not self.skip_out_chan:
            return res_out
        skip_out = self.skip_conv(shared_out)
        return res_out, skip_out


class TDConvNet(nn.Module):
    """Conv-TasNet's TCN: norm + 1x1 bottleneck, ``n_repeats`` x ``n_blocks`` :class:`Conv1DBlock` of dilation
    ``2**x`` (x = 0 .. n_blocks - 1; causal padding ``(k - 1) 2**x``), residual sum and skip sum, PReLU + 1x1 mask
    conv, mask activation. (N, in_chan, T) -> (N, n_src, out_chan, T)."""

    def __init__(self, in_chan, n_src, out_chan=None, n_blocks=8, n_repeats=3, bn_chan=128, hid_chan=512,
                 skip_chan=128, conv_kernel_size=3, norm_type="gLN", mask_act="relu", causal=False):
        super().__init__()
        self.in_chan = in_chan
        self.n_src = n_src
        out_chan = out_chan if out_chan else in_chan
        self.out_chan = out_chan
        self.skip_chan = skip_chan
        layer_norm = NORMS[norm_type](in_chan)
        bottleneck_conv = nn.Conv1d(in_chan, bn_chan, 1)
        self.bottleneck = nn.Sequential(layer_norm, bottleneck_conv)
        self.TCN = nn.ModuleList()
        for r in range(n_repeats):
            for x in range(n_blocks):
                if not causal:
                    padding = (conv_kernel_size - 1) * 2**x // 2
                else:
                    padding = (conv_kernel_size - 1) * 2**x
                self.TCN.append(Conv1DBlock(bn_chan, hid_chan, skip_chan, conv_kernel_size, padding=padding,
                                            dilation=2**x, norm_type=norm_type, causal=causal))
        mask_conv_inp = skip_chan if skip_chan else bn_chan
        mask_conv = nn.Conv1d(mask_conv_inp, n_src * out_chan, 1)
        self.mask_net = nn.Sequential(nn.PReLU(), mask_conv)
        self.output_act = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid}[mask_act]()

    def forward(self, mixture_w):
        batch, _, n_frames = mixture_w.size()
        output = self.bottleneck(mixture_w)
        skip_connection = torch.tensor([0.0], device=output.device)
        for layer in self.TCN:
            tcn_out = layer(output)
            if self.skip_chan:
                residual, skip = tcn_out
                skip_connection = skip_connection + skip
            else:
                residual = tcn_out
            output = output + residual
        mask_inp = skip_connection if self.skip_chan else output
        score = self.mask_net(mask_inp)
        score = score.view(batch, self.n_src, self.out_chan, n_frames)
        return self.output_act(score)


# ---------------------------------------------------------------- asteroid/models/conv_tasnet.py + base_models.py
class CausalConvTasNet(nn.Module):
    """Causal one-source Conv-TasNet enhancer: wave (N, 1, T) float32 at 16 kHz -> (N, 1, T). The free encoder (kernel
    ``kernel_size``, stride ``stride``) -> :class:`TDConvNet` (``causal=True``, sigmoid mask) -> mask x encoding ->
    free decoder (transposed conv) -> ``pad_x_to_y`` (right pad/trim to T). Weights seeded (``seed``)."""

    def __init__(self, n_filters=64, kernel_size=16, stride=8, n_blocks=4, n_repeats=2, bn_chan=32, hid_chan=48,
                 skip_chan=32, conv_kernel_size=3, norm_type="cLN", seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = nn.Conv1d(1, n_filters, kernel_size, stride=stride, bias=False)
        self.decoder = nn.ConvTranspose1d(n_filters, 1, kernel_size, stride=stride, bias=False)
        for p in (self.encoder.weight, self.decoder.weight):
            nn.init.xavier_normal_(p)
        self.masker = TDConvNet(n_filters, 1, n_blocks=n_blocks, n_repeats=n_repeats, bn_chan=bn_chan,
                                hid_chan=hid_chan, skip_chan=skip_chan, conv_kernel_size=conv_kernel_size,
                                norm_type=norm_type, mask_act="sigmoid", causal=True)
        with torch.no_grad():  # random PReLU slopes and norm gains, so no layer is the identity of another
            for m in self.modules():
                if isinstance(m, nn.PReLU):
                    m.weight.uniform_(0.05, 0.4)
                if isinstance(m, _LayerNorm):
                    m.gamma.uniform_(0.5, 1.5)
                    m.beta.uniform_(-0.2, 0.2)
                if isinstance(m, BatchNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 2.0)

    def forward(self, wav):
        tf_rep = self.encoder(wav)
        est_masks = self.masker(tf_rep)
        masked_tf_rep = est_masks * tf_rep.unsqueeze(1)
        decoded = self.decoder(masked_tf_rep[:, 0])
        return F.pad(decoded, [0, wav.shape[-1] - decoded.shape[-1]])  # pad_x_to_y


def dilated_convs(model: CausalConvTasNet) -> list[tuple[int, int, int]]:
    """(kernel, dilation, P = (kernel - 1) dilation) of every depth-wise conv of ``model``'s TCN, in order."""
    out = []
    for block in model.masker.TCN:
        conv = block.shared_block[3][0]
        k, d = conv.kernel_size[0], conv.dilation[0]
        out.append((k, d, (k - 1) * d))
    return out
