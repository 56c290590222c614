"""Silero VAD as one stream model: waveform in, a speech probability per 32 ms hop out, 16 kHz.

Silero VAD is published already streaming: each call of its ONNX graph takes 512 new samples (at 16 kHz)
preceded by the last 64 samples of the previous call (the *context*), and the LSTM state (2, 1, 128)
(h, c), and returns the speech probability of those 512 samples and the new state. The package's own loop
(``silero_vad/utils_vad.py`` ``OnnxWrapper.__call__``; ``get_speech_timestamps`` calls it every 512
samples, the last chunk zero-padded) keeps the context itself: zeros at the start, then
``x[..., -64:]`` of the 576-sample input.

The ``silero-vad`` 6.2.3 wheel ships seven graphs (``silero_vad/data``). This recipe uses
``silero_vad_openvino_16k.onnx``: ``input`` (1, 576), ``state`` (2, 1, 128) -> ``output`` (1, 1),
``stateN`` (2, 1, 128); fully static, no ``sr`` input and no ``If`` (the package default ``silero_vad.onnx``
branches on ``sr`` for 8 and 16 kHz), so nothing has to be fixed at adopt time and TensorRT gets a plain
graph; on the bundled recordings it gives bit-identical probabilities to the package default with the
package's loop. Around it, as ONNX nodes, the context handling: ``Concat(context,
audio)`` -> (1, 1, 576) -> the network; the last 64 samples are the next context. The one-hop graph is
adopted (:mod:`cosyedge.surgery.adopt`): two states (the 64-sample context, kind ``context``; the LSTM
state, batch on axis 1, kind ``recurrent``), a Scan over the hops of a chunk (any multiple of 512 samples),
output ``speech_prob`` float32 (N, 1, T/512): one probability in [0, 1] per hop, kind ``features`` (not
audio: ``cosyedge run FILE --vad`` turns it into speech segments, :mod:`cosyedge.vad`). The adopted graph is
then compared with :func:`reference_loop` (the package's loop in NumPy on its default graph) on the bundled
recording: max abs difference <= :data:`MAX_REFERENCE_ABS`.

Delay: 0 (probability k is that of samples [512 k, 512 k + 512)).

Source: Silero Team, Silero VAD, github.com/snakers4/silero-vad (MIT), ``src/silero_vad/utils_vad.py``
(``OnnxWrapper``, ``get_speech_timestamps``); pypi.org/project/silero-vad 6.2.3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.artifacts.task import VAD
from cosyedge.errors import AccuracyError, ArtifactError
from cosyedge.log import LOG
from cosyedge.recipes.base import AdoptedRecipe, sha256_of
from cosyedge.recipes.dsp import GraphBuilder, gs

SAMPLE_RATE_HZ = 16000
HOP_SAMPLES = 512
"""int: samples per call at 16 kHz (``OnnxWrapper``: ``num_samples = 512 if sr == 16000``)."""
CONTEXT_SAMPLES = 64
"""int: samples of the previous call prepended (``context_size = 64 if sr == 16000``)."""
STATE_SHAPE = (2, 1, 128)
"""tuple[int, ...]: the LSTM state (h, c) x batch x 128."""
NETWORK_FILE = "data/silero_vad_openvino_16k.onnx"
"""str: the graph this recipe adopts (relative to the package folder)."""
PACKAGE_DEFAULT_FILE = "data/silero_vad.onnx"
"""str: the graph ``load_silero_vad(onnx=True)`` loads (the reference of :func:`reference_loop`)."""
NETWORK_IO = {"inputs": {"input": [1, 576], "state": [2, 1, 128]}, "outputs": {"output": [1, 1], "stateN": [2, 1, 128]}}
"""dict: the I/O of :data:`NETWORK_FILE` the recipe is written for (a wheel whose graph differs is refused)."""
OUTPUT_NAME = "speech_prob"
"""str: the stream model's probability output, float32 (N, 1, T / 512)."""
STATE_PAIRS = [("context", "context_next"), ("silero/state", "silero/stateN")]
STATE_KINDS = {"context": "context", "silero/state": "recurrent"}
MAX_REFERENCE_ABS = 1e-5
"""float: the stream ONNX's probabilities must equal the package loop's within this (max abs) on the demo."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph (the wheel's graph is opset 16)."""
TASK = VAD
"""str: the recipe's task, written into the contract (``cosyedge.task``) and its provenance."""


def _load(path: Path) -> Any:
    import onnx

    try:
        return onnx.load(str(path))
    except Exception as err:  # a damaged wheel
        raise ArtifactError(f"cannot read {path} ({type(err).__name__}: {err})") from None


def _io_of(model: Any) -> dict:
    """dict: {"inputs": {name: shape}, "outputs": {name: shape}} of an onnx.ModelProto (symbolic dims as str)."""
    def shape(v):
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in v.type.tensor_type.shape.dim]

    return {"inputs": {v.name: shape(v) for v in model.graph.input},
            "outputs": {v.name: shape(v) for v in model.graph.output}}


def reference_loop(x: np.ndarray, network: str | Path) -> np.ndarray:
    """Silero VAD's own loop (``OnnxWrapper`` as ``get_speech_timestamps`` drives it) in NumPy with ONNX Runtime.

    Args:
        x (np.ndarray): float (L,) mono audio at 16 kHz, range [-1, 1].
        network (str | Path): A Silero ONNX graph with inputs ``input`` (1, 576), ``state`` (2, 1, 128) and,
            when the graph has it, ``sr`` (int64 scalar, given 16000).
    Returns:
        np.ndarray: float32 (ceil(L / 512),): probability of hop k = samples [512 k, 512 k + 512) (the last hop
        zero-padded), state and context carried from zeros.
    Source: github.com/snakers4/silero-vad ``src/silero_vad/utils_vad.py`` ``OnnxWrapper.__call__`` (context
    concat, ``sr`` input) and ``get_speech_timestamps`` (512-sample loop, zero-padded last chunk).
    """
    from cosyedge.runtime.ort import session_from_onnx

    sess = session_from_onnx(network, threads=1, inter_threads=None, log_severity=None)
    names = {i.name for i in sess.get_inputs()}
    audio = np.asarray(x, np.float32)
    state = np.zeros(STATE_SHAPE, np.float32)
    context = np.zeros((1, CONTEXT_SAMPLES), np.float32)
    probs = []
    for start in range(0, audio.shape[0], HOP_SAMPLES):
        chunk = audio[start:start + HOP_SAMPLES]
        chunk = np.pad(chunk, (0, HOP_SAMPLES - chunk.shape[0]))[None]
        frame = np.concatenate([context, chunk], axis=1)
        feed = {"input": frame, "state": state}
        if "sr" in names:
            feed["sr"] = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
        out, state = sess.run(None, feed)
        probs.append(float(out[0, 0]))
        context = frame[:, -CONTEXT_SAMPLES:]
    return np.asarray(probs, np.float32)


class SileroVAD(AdoptedRecipe):
    """Silero VAD 16 kHz, 512-sample hop, one speech probability per hop (see the module docstring)."""

    name = "silero-vad"
    title = "Silero VAD (Silero Team, 16 kHz)"
    sample_rate_hz = SAMPLE_RATE_HZ
    hop_samples = HOP_SAMPLES
    package = "silero-vad"
    module = "silero_vad"
    version = "6.2.3"
    extra = "vad"
    licence = "MIT (Silero Team)"
    url = "https://github.com/snakers4/silero-vad; https://pypi.org/project/silero-vad/"
    delay_samples = 0
    state_pairs = STATE_PAIRS
    state_kinds = STATE_KINDS
    batch_axes = {"silero/state": 1}
    task = TASK

    def network_file(self) -> Path:
        """Path of ``silero_vad_openvino_16k.onnx`` inside the installed wheel.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: the file is missing.
        """
        return self.package_file(NETWORK_FILE)

    def network(self) -> Any:
        """onnx.ModelProto: the wheel's graph, checked against :data:`NETWORK_IO`.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: the file is missing, corrupt, or its inputs and
                outputs differ from what the recipe is written for (names the difference).
        """
        path = self.network_file()
        model = _load(path)
        got = _io_of(model)
        if got != NETWORK_IO:
            diff = [f"{side[:-1]} {k}: {got[side].get(k, 'missing')} (recipe expects {v})"
                    for side in ("inputs", "outputs") for k, v in NETWORK_IO[side].items() if got[side].get(k) != v]
            diff += [f"{side[:-1]} {k}: not expected" for side in ("inputs", "outputs") for k in got[side]
                     if k not in NETWORK_IO[side]]
            raise ArtifactError(f"{self.package} {self.installed_version()}: {path.name} differs from the graph recipe "
                                f"{self.name} is written for ({'; '.join(diff)}); it is proved on "
                                f"{self.package}=={self.version}")
        return model

    def block_model(self) -> Any:
        """onnx.ModelProto: ONE hop of Silero VAD with its states as inputs and outputs (batch 1).

        Inputs: ``audio`` (1, 1, 512) float32; ``context`` (1, 1, 64) the previous hop's last samples;
        ``silero/state`` (2, 1, 128) LSTM state. Outputs: ``speech_prob`` (1, 1, 1) float32 in [0, 1],
        ``context_next`` (1, 1, 64), ``silero/stateN`` (2, 1, 128).

        Raises:
            DependencyError: the wheel is missing. ArtifactError: its graph is missing, corrupt or different.
        """
        from cosyedge.surgery.io import at_least_opset

        src = self.network()
        for i, node in enumerate(src.graph.node):  # the wheel repeats node names (F0::anon): unique first
            node.name = f"silero/{i}_{node.name or node.op_type}"
        net = gs.import_onnx(src)
        for t in net.tensors().values():
            t.name = f"silero/{t.name}"
        (x_in, s_in), (p_out, s_out) = net.inputs, net.outputs
        g = gs.Graph(nodes=list(net.nodes), opset=16, name="silero_vad_hop")
        b = GraphBuilder(g, "silero-vad_dsp")
        f32 = np.float32
        audio = gs.Variable("audio", dtype=f32, shape=[1, 1, HOP_SAMPLES])
        ctx = gs.Variable("context", dtype=f32, shape=[1, 1, CONTEXT_SAMPLES])
        ctx_next = gs.Variable("context_next", dtype=f32, shape=[1, 1, CONTEXT_SAMPLES])
        prob = gs.Variable(OUTPUT_NAME, dtype=f32, shape=[1, 1, 1])
        frame = b.op("Concat", [ctx, audio], {"axis": 2}, what="frame")  # (1, 1, 576): OnnxWrapper's x
        b.op("Reshape", [frame, np.array([1, HOP_SAMPLES + CONTEXT_SAMPLES], np.int64)], what="input", out=x_in)
        b.op("Slice", [frame, np.array([HOP_SAMPLES]), np.array([HOP_SAMPLES + CONTEXT_SAMPLES]),
                       np.array([2])], what="context_next", out=ctx_next)
        b.op("Reshape", [p_out, np.array([1, 1, 1], np.int64)], what="speech_prob", out=prob)
        g.inputs = [audio, ctx, s_in]
        g.outputs = [prob, ctx_next, s_out]
        g.cleanup().toposort()
        model = gs.export_onnx(g)
        model.ir_version = min(model.ir_version, 8)
        return at_least_opset(model, RECIPE_OPSET, self.name, "the stream model's later stages")

    def provenance(self) -> dict:
        """dict: the base provenance plus ``task`` ``"vad"``, the graph used and its SHA-256."""
        return {**super().provenance(), "task": TASK, "network": NETWORK_FILE,
                "network_sha256": sha256_of(self.network_file())}

    def reference_check(self, model: Any, contract: Any, audio: np.ndarray | None = None) -> dict:
        """Stream ``model`` (the adopted ONNX, chunks of one hop and of 4 hops) on the bundled real recording and
        compare its probabilities with :func:`reference_loop` on the package's default graph
        (``silero_vad.onnx`` with ``sr`` 16000: what ``load_silero_vad(onnx=True)`` runs).

        Returns:
            dict: ``package_reference_max_abs`` (worst chunk), ``package_reference_hops``, ``package_reference``.
        Raises:
            AccuracyError: max abs difference above :data:`MAX_REFERENCE_ABS` (nothing is written).
        """
        from cosyedge.recipes.dtln import _demo_recording
        from cosyedge.surgery.proof import run_state_loop, session

        x = _demo_recording() if audio is None else np.asarray(audio, np.float32)
        # every sample, as `run --vad` and get_speech_timestamps see it: ceil(L / 512) hops, the last partial hop
        # zero-padded (17.29 s: 540.3 -> 541 hops); zeros up to whole 4-hop chunks, then the first 541 compared
        ref = reference_loop(x, self.package_file(PACKAGE_DEFAULT_FILE))
        padded = np.pad(x, (0, -x.size % (4 * HOP_SAMPLES)))[None, None]
        sess = session(model)
        svals = [(s.input, s.output, s.zeros(1)) for s in contract.states]
        mx = 0.0
        for chunk in (HOP_SAMPLES, 4 * HOP_SAMPLES):
            got = run_state_loop(sess, {contract.input: padded}, chunk, svals, [OUTPUT_NAME])
            mx = max(mx, float(np.abs(got[OUTPUT_NAME][0, 0, :ref.size] - ref).max()))
        LOG.info("silero-vad: stream ONNX vs the package's loop (OnnxWrapper on silero_vad.onnx) on %.2f s of real "
                 "speech, %d hops (the last zero-padded where partial): max abs probability difference %.3g",
                 x.size / SAMPLE_RATE_HZ, ref.size, mx)
        if not mx <= MAX_REFERENCE_ABS:
            raise AccuracyError(f"silero-vad: the stream ONNX differs from the package's loop: max abs probability "
                                f"difference {mx:.3g} > {MAX_REFERENCE_ABS:g}; nothing written")
        return {"package_reference_max_abs": mx, "package_reference_hops": int(ref.size),
                "package_reference": "silero_vad.utils_vad.OnnxWrapper loop on silero_vad.onnx (sr 16000)"}
