"""Tiny torch waveform models exported with a dynamic time axis and made stream graphs."""

from __future__ import annotations

from pathlib import Path

SR = 16000
HOP = 160


def export_waveform(model, path: Path, out_names=("enhanced",)) -> Path:
    """Export ``model`` (float32 audio (N, 1, T) -> outputs (N, 1, T')) with TorchScript, opset 17, dynamic N and T,
    input 'audio', outputs ``out_names``; returns ``path``."""
    import warnings

    import torch

    torch.manual_seed(0)
    x = torch.randn(1, 1, 1920) * 0.1
    axes = {"audio": {0: "N", 2: "T"}, **{o: {0: "N", 2: "T"} for o in out_names}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (x,), str(path), input_names=["audio"], output_names=list(out_names),
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    return path


def streamify_waveform(model, work: Path, name: str, out_names=("enhanced",), **kw) -> Path:
    """Export ``model`` to ``work/<name>.onnx`` and streamify it (16 kHz, hop ``kw['hop']`` or 160) into
    ``work/<name>.stream.onnx``; other ``kw`` go to streamify. Returns the stream ONNX path."""
    from cosyedge.surgery.streamify import streamify

    src = export_waveform(model, Path(work) / f"{name}.onnx", out_names)
    out = Path(work) / f"{name}.stream.onnx"
    streamify(src, out, sample_rate_hz=SR, hop_samples=kw.pop("hop", HOP), **kw)
    return out
