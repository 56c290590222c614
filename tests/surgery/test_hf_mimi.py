"""Hugging Face transformers' MimiModel (transformers 5.x, random weights) streams exactly: encoder and decoder.

The model is the library's own code (``transformers.models.mimi.modeling_mimi``), configured small (hidden 32, two
layers, two heads, a sliding window of 8 frames, 16 kHz, SEANet ratios 4 and 2, so 16 samples a latent frame): causal
SEANet convs (the encoder's downsampling conv pads its left edge by replicating the first frame), a transformer with
RoPE written as the library writes it (``position_ids = arange(T)[None]``, ``position_ids[..., None] * inv_freq``,
``cat``, cos/sin) and a sliding-window causal mask (``create_sliding_window_causal_mask``), transposed convs in the
decoder. Its export needs two patches, applied here and nowhere else:

1. ``transformers.masking_utils.find_packed_sequence_indices`` returns None: it detects packed sequences with
   ``torch.diff`` on the positions (``aten::diff`` has no ONNX export; the positions here are one sequence);
2. ``MimiConv1d.forward`` computes its pads in Python integers from the conv's kernel, stride and dilation (upstream
   keeps them as tensor buffers, which makes the pad data-dependent for ``torch.export``); same values, same code
   path for ``padding_cache=None``.

Both exporters, a fixed batch of 1 (as the model is exported for streaming) and 2: streamify's proof must pass (it
frees the fixed batch, :mod:`cosyedge.surgery.batch`), and an own OrtStreamSession loop over two different real-speech
streams in one batch equals the export from the first sample.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from cosyedge.surgery import streamify

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

HOP = 16  # samples per latent frame: ratios 4 x 2, then the stride-2 downsampling conv
ATOL = 1e-5


def _patched_mimi(batch: int):
    import transformers.masking_utils as mu
    import transformers.models.mimi.modeling_mimi as mm
    from transformers import MimiConfig, MimiModel

    def forward(self, h, padding_cache=None):  # patch 2 (module doc)
        c = self.conv
        k, s = (c.kernel_size[0] - 1) * c.dilation[0] + 1, c.stride[0]
        p = k - s
        extra = -(-(h.shape[-1] - k + p) // s) * s + k - p - h.shape[-1]
        return self.conv(self._pad1d(h, (p, extra) if self.causal else (p - p // 2, p // 2 + extra),
                                     mode=self.pad_mode))

    patches = [(mu, "find_packed_sequence_indices", lambda position_ids: None), (mm.MimiConv1d, "forward", forward)]
    torch.manual_seed(0)
    cfg = MimiConfig(hidden_size=32, num_filters=4, upsampling_ratios=[4, 2], num_residual_layers=1,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                     intermediate_size=64, sliding_window=8, codebook_size=16, codebook_dim=8, num_quantizers=2,
                     num_semantic_quantizers=1, sampling_rate=16000, upsample_groups=32,
                     vector_quantization_hidden_dimension=8, use_streaming=False, use_cache=False)
    return MimiModel(cfg).eval(), patches


class _Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m.encoder(x).latents


class _Decoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, z):
        return self.m.decoder(z).audio_values


def _export(part: str, path, dynamo: bool, batch: int):
    model, patches = _patched_mimi(batch)
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, fn in patches:
        setattr(obj, name, fn)
    try:
        mod = _Encoder(model) if part == "encoder" else _Decoder(model)
        x = torch.randn(batch, 1, HOP * 40) if part == "encoder" else torch.randn(batch, 32, 40)
        with torch.no_grad():
            if dynamo:
                t = torch.export.Dim("T", min=2, max=4000)
                torch.onnx.export(mod, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                                  dynamic_shapes=({2: HOP * t} if part == "encoder" else {2: t},), verbose=False)
            else:
                torch.onnx.export(mod, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                                  opset_version=17, dynamic_axes={"x": {2: "T"}, "y": {2: "T"}})
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
    return path


def _inputs(part: str, frames: int) -> np.ndarray:
    """Two different streams: real speech (16 kHz) for the encoder, latent frames of real speech for the decoder."""
    from cosyedge.surgery.proof import demo_audio_rows
    from tests.helpers.models_attention import speech_features

    if part == "encoder":
        return demo_audio_rows(16000, HOP * frames, batch=2)
    f = speech_features(frames, 2, 2)  # (2, 16, frames)
    return np.ascontiguousarray(np.concatenate([f, -f], axis=1)).astype(np.float32)


def _own_loop(out, x, chunk: int, part: str):
    from cosyedge.runtime import OrtStreamSession

    per = HOP if part == "encoder" else 1
    parts = []
    with OrtStreamSession(out, chunk_samples=chunk * HOP, batch=x.shape[0]) as s:
        for i in range(0, x.shape[2] - x.shape[2] % (chunk * per), chunk * per):
            parts.append(s.push({"x": np.ascontiguousarray(x[:, :, i:i + chunk * per])})["y"].copy())
    return np.concatenate(parts, axis=2)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2], ids=["batch1", "batch2"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_hf_mimi_streams_exactly(tmp_path, part, dynamo, batch):
    """MimiModel's encoder (audio -> latents) and decoder (latents -> audio): the stream graph takes any batch, carries
    key/value caches of the 8-frame window and a position counter, and equals the export on two real-speech streams
    in one batch at 1, 3 and 8 latent frames per call, within 1e-5 of the peak."""
    src = _export(part, tmp_path / f"mimi_{part}.onnx", dynamo, batch)
    out = tmp_path / f"mimi_{part}.stream.onnx"
    kw = {} if part == "encoder" else {"frames_per_hop": 1}
    c = streamify(src, out, sample_rate_hz=16000, hop_samples=HOP, **kw)
    kinds = sorted({s.kind for s in c.states})
    assert {"key", "value", "position"} <= set(kinds), kinds
    assert all(s.shape[0] == "N" for s in c.states)
    x = _inputs(part, 240)
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {"x": x[i:i + batch]})[0] for i in range(0, 2, batch)])
    peak = float(np.abs(ref).max())
    delay = c.outputs[0].delay_frames
    for chunk in (1, 3, 8):
        y = _own_loop(out, x, chunk, part)
        n = min(y.shape[2] - delay, ref.shape[2])
        err = float(np.abs(y[..., delay:delay + n] - ref[..., :n]).max()) / peak
        assert err <= ATOL, (chunk, err)
