"""Adopt's streamed tensors: what each streamed input/output looks like per hop, and the proof inputs (real speech
for a waveform, speech laid out frame by frame for features unless given). The graph's own state loop over them and
the proof that the adopted graph equals that loop are in :mod:`cosyedge.surgery.proof.adopt`.

Source: k2-fsa/icefall ``onnx_pretrained-streaming.py`` (the state loop of an already-streaming export).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cosyedge.errors import UsageError
from cosyedge.surgery import proof


@dataclasses.dataclass
class StreamTensor:
    """One streamed (non-state) input or output of the canonical graph.

    Attributes:
        name (str): Tensor name.
        kind (str): ``"audio"`` (a waveform (N, 1, T) at the model rate) or ``"features"``.
        time_axis (int): Axis of time (batch is axis 0).
        frames (int): Frames of the time axis per hop (``hop_samples`` for audio, 1 for one frame per hop).
        shape (list[int]): Shape at batch 1 and one hop (time axis = ``frames``).
        dtype (str): numpy dtype name.
        dynamic_time (bool): The graph takes any number of frames on this axis per call.
    """

    name: str
    kind: str
    time_axis: int
    frames: int
    shape: list
    dtype: str = "float32"
    dynamic_time: bool = False

    def contract_shape(self) -> list:
        """Shape for :class:`~cosyedge.artifacts.StreamIO`: ``"N"`` on axis 0, ``"T"`` on the time axis."""
        return ["N"] + [("T" if k == self.time_axis else int(d)) for k, d in enumerate(self.shape) if k > 0]


def speech_feed(ins: list[StreamTensor], rate: int, hops: int, given: dict | None = None) -> dict[str, np.ndarray]:
    """Proof inputs at batch 1, ``hops`` hops long: real speech (the bundled demo recording) for a waveform, for
    features the given arrays (``given[name]``, cut or repeated to length) else the same speech laid out frame by
    frame (each frame's values are consecutive samples).

    Args:
        ins (list[StreamTensor]): The streamed inputs.
        rate (int): Sample rate (Hz).
        hops (int): Hops of input.
        given (dict[str, np.ndarray] | None): Real inputs by name, batch 1, frames along the time axis.
    Returns:
        dict[str, np.ndarray]: by input name, shape = the input's shape with ``frames * hops`` on its time axis.
    Raises:
        UsageError: a given array of the wrong rank or frame shape.
    """
    out = {}
    for k, t in enumerate(ins):
        n = t.frames * hops
        if given and t.name in given:
            a = np.asarray(given[t.name], dtype=t.dtype)
            want = [d for i, d in enumerate(t.shape) if i != t.time_axis]
            got = [d for i, d in enumerate(a.shape) if i != t.time_axis]
            if a.ndim != len(t.shape) or got != want:
                raise UsageError(f"proof input '{t.name}' has shape {list(a.shape)}; the graph takes {t.shape} per hop "
                                 f"(time axis {t.time_axis})")
            reps = -(-n // a.shape[t.time_axis])
            a = np.concatenate([a] * reps, axis=t.time_axis) if reps > 1 else a
            out[t.name] = np.ascontiguousarray(np.take(a, np.arange(n), axis=t.time_axis))
            continue
        per = int(np.prod([d for i, d in enumerate(t.shape) if i != t.time_axis]))
        x = proof.demo_audio(rate, per * n + 1234 * k)[1234 * k:]
        if t.kind == "audio":
            out[t.name] = x[: n].reshape(1, 1, n).astype(t.dtype)
            continue
        other = [d for i, d in enumerate(t.shape) if i != t.time_axis]
        a = x[: per * n].reshape([n] + other)  # frames first, then moved to the time axis
        out[t.name] = np.ascontiguousarray(np.moveaxis(a, 0, t.time_axis)).astype(t.dtype)
    return out
