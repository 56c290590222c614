"""libDF's signal processing (DeepFilterNet's runtime) as ONNX nodes around a DeepFilterNet network.

Shared by the DeepFilterNet-style recipes (:mod:`cosyedge.recipes.dfn3`, 48 kHz; :mod:`cosyedge.recipes.hush`,
16 kHz): the float32 libDF constants (ERB filterbank widths, vorbis window, normalisation decay and initial
states) and :func:`build_libdf_processing`, which replaces a merged enc + erb_dec + df_dec graph's feature inputs
by an STFT analysis of a waveform and its gain/coefficient outputs by the ERB gains, the deep filter and the
synthesis, so the whole model is one ``audio`` (N, 1, T) -> ``enhanced`` (N, 1, T + hop) graph that streamify
streams (the processing is described step by step in :mod:`cosyedge.recipes.dfn3`).

Source: github.com/Rikorose/DeepFilterNet ``libDF/src/lib.rs`` (``erb_fb``, ``band_mean_norm_erb``,
``band_unit_norm``, ``DFState``), ``libDF/src/tract.rs`` (``calc_norm_alpha``, ``DfTract::process``),
commit d375b2d8309e0935d165700c91da9de862a99c31. MIT / Apache-2.0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.recipes.dsp import GraphBuilder, gs, irdft_bases, rdft_bases

MEAN_NORM_INIT = (-60.0, -90.0)
"""tuple[float, float]: libDF's initial ERB mean-norm state, first and last band (dB), linearly spaced."""
UNIT_NORM_INIT = (0.001, 0.0001)
"""tuple[float, float]: libDF's initial unit-norm state, first and last DF bin, linearly spaced."""
DB_OFFSET = 110.0
"""float: added to the dB features inside the normalisation RNN (10 log10(x + 1e-10) >= -100) so its Relu units
never see a negative value; subtracted again exactly afterwards."""


def _f32(x) -> np.float32:
    return np.float32(x)


def freq2erb(freq_hz: np.float32) -> np.float32:
    """libDF ``freq2erb`` (``lib.rs``) in float32: ``9.265 ln(1 + f / (24.7 * 9.265))``; ``freq_hz`` in Hz, the
    result in ERB units (np.float32)."""
    return _f32(9.265) * np.log1p(_f32(freq_hz) / (_f32(24.7) * _f32(9.265)))


def erb2freq(n_erb: np.float32) -> np.float32:
    """libDF ``erb2freq`` (``lib.rs``) in float32, the inverse of :func:`freq2erb`: ``24.7 * 9.265 (exp(n / 9.265)
    - 1)`` Hz (np.float32)."""
    return _f32(24.7) * _f32(9.265) * (np.exp(_f32(n_erb) / _f32(9.265)) - _f32(1.0))


def erb_fb(sr: int, fft_size: int, nb_bands: int, min_nb_freqs: int) -> list[int]:
    """Widths (bins per band) of libDF's ERB filterbank.

    Args:
        sr (int): Sample rate, Hz.
        fft_size (int): FFT size (``fft_size // 2 + 1`` bins).
        nb_bands (int): Number of ERB bands.
        min_nb_freqs (int): Minimum bins per band.
    Returns:
        list[int]: ``nb_bands`` widths summing to ``fft_size // 2 + 1``.
    Source: libDF ``lib.rs`` ``erb_fb`` (float32 arithmetic, ``round`` half away from zero).
    """
    freq_width = _f32(sr) / _f32(fft_size)
    erb_low, erb_high = freq2erb(_f32(0.0)), freq2erb(_f32(sr // 2))
    step = (erb_high - erb_low) / _f32(nb_bands)
    erb = [0] * nb_bands
    prev_freq, freq_over = 0, 0
    for i in range(1, nb_bands + 1):
        f = erb2freq(erb_low + _f32(i) * step)
        fb = int(np.floor(f / freq_width + _f32(0.5)))
        nb = fb - prev_freq - freq_over
        if nb < min_nb_freqs:
            freq_over = min_nb_freqs - nb
            nb = min_nb_freqs
        else:
            freq_over = 0
        erb[i - 1] = nb
        prev_freq = fb
    erb[-1] += 1
    too_large = sum(erb) - (fft_size // 2 + 1)
    if too_large > 0:
        erb[-1] -= too_large
    return erb


def vorbis_window(fft_size: int) -> np.ndarray:
    """libDF's vorbis window (``DFState::new``).

    Args:
        fft_size (int): Window length N (even).
    Returns:
        np.ndarray: float32 (N,), ``sin(pi/2 sin^2(pi/2 (n + 0.5) / (N / 2)))``, computed in float64 and rounded
        to float32 as libDF does.
    """
    n = np.arange(fft_size, dtype=np.float64)
    s = np.sin(0.5 * np.pi * (n + 0.5) / (fft_size // 2))
    return np.sin(0.5 * np.pi * s * s).astype(np.float32)


def calc_norm_alpha(sr: int, hop_size: int, tau: float) -> np.float32:
    """libDF ``calc_norm_alpha`` (``tract.rs``): the decay of the feature normalisations.

    Args:
        sr (int): Sample rate, Hz.
        hop_size (int): Hop, samples.
        tau (float): Time constant, s (config.ini ``norm_tau``).
    Returns:
        np.float32: ``exp(-hop / sr / tau)`` rounded to the fewest decimals (3 or more) that leave it below 1
        (0.99 for 48 kHz, hop 480, tau 1 s).
    """
    alpha = np.exp(_f32(-(_f32(hop_size) / _f32(sr)) / _f32(tau)))
    precision, a = 3, _f32(1.0)
    while a >= 1.0:
        scale = _f32(10 ** precision)
        a = _f32(np.floor(alpha * scale + _f32(0.5)) / scale)
        precision += 1
    return a


def norm_init(bounds: tuple[float, float], n: int) -> np.ndarray:
    """libDF's initial normalisation state (``init_mean_norm_state`` / ``init_unit_norm_state``, ``lib.rs``).

    Args:
        bounds (tuple[float, float]): First and last value (:data:`MEAN_NORM_INIT` or :data:`UNIT_NORM_INIT`).
        n (int): Number of bands or bins (>= 2).
    Returns:
        np.ndarray: float32 (n,), ``min + i (max - min) / (n - 1)`` in float32 arithmetic.
    """
    lo, hi = _f32(bounds[0]), _f32(bounds[1])
    step = (hi - lo) / _f32(n - 1)
    return np.asarray([lo + _f32(i) * step for i in range(n)], np.float32)



def build_libdf_processing(net: Any, feat_erb: Any, feat_spec: Any, gains: Any, coefs: Any, *, sr: int,
                           n_fft: int, hop: int, nb_erb: int, nb_df: int, order: int, min_nb_erb_freqs: int,
                           alpha: np.float32, lag: int, mean_norm_init: tuple[float, float],
                           unit_norm_init: tuple[float, float], prefix: str) -> None:
    """Write libDF's processing around the merged network ``net`` (in place; :mod:`cosyedge.recipes.dfn3`).

    Args:
        net (gs.Graph): The merged enc + erb_dec + df_dec graph; its inputs are replaced by ``audio``
            (N, 1, T) and its outputs by ``enhanced`` (N, 1, T + hop).
        feat_erb (gs.Variable): The encoder's (N, 1, S, nb_erb) input (now computed).
        feat_spec (gs.Variable): The encoder's (N, 2, S, nb_df) input (now computed).
        gains (gs.Variable): ``m``, ERB gains (N, 1, S, nb_erb).
        coefs (gs.Variable): Deep-filter coefficients (N, S, nb_df, 2 order).
        sr (int): Sample rate, Hz. n_fft (int): FFT size (= window). hop (int): Hop, samples.
        nb_erb (int): ERB bands. nb_df (int): Deep-filtered bins. order (int): Deep-filter taps (frames).
        min_nb_erb_freqs (int): Minimum bins per ERB band (:func:`erb_fb`).
        alpha (np.float32): Decay of both exponential normalisations (float32, as libDF multiplies).
        lag (int): Frames between a spectrum and the gains that multiply it (``conv_lookahead``; 0: the same
            frame; > 0: the gains of step t multiply frame t - lag).
        mean_norm_init (tuple[float, float]): Initial ERB mean-norm state, first and last band (dB).
        unit_norm_init (tuple[float, float]): Initial unit-norm state, first and last DF bin.
        prefix (str): Name prefix of the new nodes (``<recipe>_dsp``: :meth:`Recipe.keep_dsp_float`).
    Source: libDF ``lib.rs`` / ``tract.rs`` (:mod:`cosyedge.recipes.dfn3` docstring).
    """
    bins = n_fft // 2 + 1
    widths = erb_fb(sr, n_fft, nb_erb, min_nb_erb_freqs)
    band = np.repeat(np.arange(nb_erb), widths)  # (bins,) band of every bin
    one_m_a = _f32(1.0) - alpha
    win = vorbis_window(n_fft)
    wnorm = _f32(1.0) / _f32(n_fft * n_fft / (2 * hop))

    b = GraphBuilder(net, prefix)
    axes_as_input = (net.opset or 0) >= 13  # Unsqueeze / Squeeze / ReduceSum take axes as an input from opset 13

    def axes_op(op, x, axes, attrs=None, **kw):
        if axes_as_input:
            return b.op(op, [x, np.asarray(axes, np.int64)], attrs, **kw)
        return b.op(op, [x], {"axes": axes, **(attrs or {})}, **kw)

    audio = gs.Variable("audio", dtype=np.float32, shape=["N", 1, "T"])
    enhanced = gs.Variable("enhanced", dtype=np.float32, shape=["N", 1, "T_out"])

    # analysis: frame t = audio[hop (t - 1) : hop t + hop] (a hop of zeros before the start), windowed, rfft
    re_w, im_w = rdft_bases(win.astype(np.float64) * float(wnorm), n_fft)
    conv = {"strides": [hop], "kernel_shape": [n_fft], "pads": [n_fft - hop, 0]}
    stft = b.op("Conv", [audio, b.const(np.concatenate([re_w, im_w]), "rdft")], conv, what="stft")  # (N, 2 bins, S)
    re = b.op("Slice", [stft, b.const([0]), b.const([bins]), b.const([1])], what="stft_re")  # (N, bins, S)
    im = b.op("Slice", [stft, b.const([bins]), b.const([2 * bins]), b.const([1])], what="stft_im")
    power = b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])], what="power")  # (N, bins, S)
    power_t = b.op("Transpose", [power], {"perm": [0, 2, 1]}, what="power_t")  # (N, S, bins)
    spec = b.op("Concat", [axes_op("Unsqueeze", re, [1]), axes_op("Unsqueeze", im, [1])],
                {"axis": 1})
    spec = b.op("Transpose", [spec], {"perm": [0, 1, 3, 2]}, what="spec")  # (N, 2, S, bins): re, im

    # ERB band power in dB (compute_band_corr: mean |X|^2 per band) and |X| of the DF bins
    fb = np.zeros((bins, nb_erb), np.float32)
    fb[np.arange(bins), band] = (_f32(1.0) / np.asarray(widths, np.float32))[band]
    erb_pow = b.op("MatMul", [power_t, b.const(fb, "erb_fb")], what="erb_power")  # (N, S, nb_erb)
    db = b.op("Mul", [b.op("Log", [b.op("Add", [erb_pow, np.float32(1e-10)])]),
                      np.float32(10.0 / np.log(10.0))], what="erb_db")
    mag = b.op("Sqrt", [b.op("Slice", [power_t, b.const([0]), b.const([nb_df]), b.const([2])])],
               what="df_mag")  # (N, S, nb_df)

    # the two exponential normalisations as one RNN with zero initial state (module docstring)
    n_in, hid = nb_erb + nb_df, nb_erb + nb_df + 1
    w = np.zeros((1, hid, n_in), np.float32)
    w[0, np.arange(n_in), np.arange(n_in)] = one_m_a
    r = np.zeros((1, hid, hid), np.float32)
    r[0, np.arange(hid), np.arange(hid)] = alpha
    bias = np.zeros((1, 2 * hid), np.float32)
    bias[0, :nb_erb] = one_m_a * _f32(DB_OFFSET)
    bias[0, hid - 1] = one_m_a
    x_rnn = b.op("Transpose", [b.op("Concat", [db, mag], {"axis": 2})], {"perm": [1, 0, 2]},
                 what="norm_in")  # (S, N, n_in)
    y_rnn = b.op("RNN", [x_rnn, b.const(w, "norm_W"), b.const(r, "norm_R"), b.const(bias, "norm_B")],
                 {"hidden_size": hid, "activations": ["Relu"]}, what="norm_rnn")  # (S, 1, N, hid)
    states = b.op("Transpose", [axes_op("Squeeze", y_rnn, [1])], {"perm": [1, 0, 2]},
                  what="norm_states")  # (N, S, hid)

    def cols(t, lo, hi, what):
        return b.op("Slice", [t, b.const([lo]), b.const([hi]), b.const([2])], what=what)

    g = cols(states, hid - 1, hid, "norm_g")  # 1 - alpha^(t+1)
    decay = b.op("Sub", [np.float32(1.0), g], what="norm_decay")  # alpha^(t+1)
    mean_init, unit_init = norm_init(mean_norm_init, nb_erb), norm_init(unit_norm_init, nb_df)
    mean_s = b.op("Add", [b.op("Sub", [cols(states, 0, nb_erb, "mean_h"), b.op("Mul", [g, _f32(DB_OFFSET)])]),
                          b.op("Mul", [decay, b.const(mean_init, "mean_init")])], what="mean_state")
    unit_s = b.op("Add", [cols(states, nb_erb, nb_erb + nb_df, "unit_h"),
                          b.op("Mul", [decay, b.const(unit_init, "unit_init")])], what="unit_state")
    erb_norm = b.op("Div", [b.op("Sub", [db, mean_s]), np.float32(40.0)], what="erb_norm")  # (N, S, nb_erb)
    axes_op("Unsqueeze", erb_norm, [1], what="feat_erb", out=feat_erb)  # (N, 1, S, nb_erb)
    spec_df = b.op("Slice", [spec, b.const([0]), b.const([nb_df]), b.const([3])], what="spec_df")  # (N,2,S,96)
    unit_sqrt = axes_op("Unsqueeze", b.op("Sqrt", [unit_s]), [1], what="unit_sqrt")  # (N, 1, S, 96)
    b.op("Div", [spec_df, unit_sqrt], what="feat_spec", out=feat_spec)
    for t in (feat_erb, feat_spec):
        t.shape, t.dtype = None, np.float32

    # stage 1: the ERB gains of step t on the spectrum of frame t - lag (libDF's rolling buffer)
    expand = np.zeros((nb_erb, bins), np.float32)
    expand[band, np.arange(bins)] = 1.0
    gain_bins = b.op("MatMul", [gains, b.const(expand, "erb_to_bins")], what="gain_bins")  # (N, 1, S, bins)
    spec_late = spec
    if lag > 0:
        spec_late = b.op("Pad", [spec, b.const([0, 0, lag, 0, 0, 0, 0, 0])], {"mode": "constant"}, what="spec_pad")
        spec_late = b.op("Slice", [spec_late, b.const([0]), b.const([-lag]), b.const([2])], what="spec_late")
    stage1 = b.op("Mul", [spec_late, gain_bins], what="stage1")  # (N, 2, S, bins)

    # stage 2, deep filtering: bins < nb_df = sum_j X[t - (order - 1) + j] * c[j] over the noisy spectra
    unfold = np.zeros((2 * order, 2, order, 1), np.float32)
    for ri in range(2):
        for j in range(order):
            unfold[ri * order + j, ri, j, 0] = 1.0
    taps = b.op("Conv", [spec_df, b.const(unfold, "df_unfold")],
                {"kernel_shape": [order, 1], "pads": [order - 1, 0, 0, 0]}, what="df_taps")  # (N, 2 order, S, 96)
    taps = b.op("Reshape", [taps, b.const([0, 2, order, -1, nb_df])], what="df_taps5")  # (N, 2, order, S, 96)
    c5 = b.op("Reshape", [coefs, b.const([0, -1, nb_df, order, 2])], what="df_coefs5")  # (N, S, 96, order, 2)
    c5 = b.op("Transpose", [c5], {"perm": [0, 4, 3, 1, 2]}, what="df_coefs")  # (N, 2, order, S, 96)

    def part(t, i, what):
        return b.op("Slice", [t, b.const([i]), b.const([i + 1]), b.const([1])], what=what)

    x_re, x_im, c_re, c_im = part(taps, 0, "x_re"), part(taps, 1, "x_im"), part(c5, 0, "c_re"), part(c5, 1, "c_im")
    o_re = b.op("Sub", [b.op("Mul", [x_re, c_re]), b.op("Mul", [x_im, c_im])], what="df_re")
    o_im = b.op("Add", [b.op("Mul", [x_re, c_im]), b.op("Mul", [x_im, c_re])], what="df_im")
    df = axes_op("ReduceSum", b.op("Concat", [o_re, o_im], {"axis": 1}), [2], {"keepdims": 0},
              what="df_out")  # (N, 2, S, 96)
    high = b.op("Slice", [stage1, b.const([nb_df]), b.const([bins]), b.const([3])], what="stage1_high")
    out_spec = b.op("Concat", [df, high], {"axis": 3}, what="enhanced_spec")  # (N, 2, S, bins)

    # synthesis: unscaled irfft (realfft), window, overlap-add at the hop
    out_t = b.op("Transpose", [out_spec], {"perm": [0, 1, 3, 2]}, what="enhanced_spec_t")  # (N, 2, bins, S)
    out_t = b.op("Reshape", [out_t, b.const([0, 2 * bins, -1])], what="enhanced_re_im")  # (N, 2 bins, S)
    ire, iim = irdft_bases(win.astype(np.float64) * n_fft, n_fft)
    b.op("ConvTranspose", [out_t, b.const(np.concatenate([ire, iim]), "irdft")],
         {"strides": [hop], "kernel_shape": [n_fft]}, what="istft", out=enhanced)
    net.inputs, net.outputs = [audio], [enhanced]
