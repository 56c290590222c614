"""Feeds for every non-state input of a stream graph, made from its contract (one rule for every caller).

cosyedge makes its own inputs in several places: INT8 calibration, the FP16 build scan, ``cosyedge compare``
and ``check``, the layer bisection, the build smoke tests. A model may stream several inputs
(:attr:`~cosyedge.artifacts.StreamContract.stream_inputs`), so each of those places asks this module, never
``contract.input`` alone:

* the **primary** input (:func:`primary_input`: the contract's ``input`` when it streams, else the first
  streaming input) gets the utterance being processed;
* every other **waveform** input (shape ``["N", 1, "T"]``, kind ``audio``, one frame per sample: the same time
  axis and hop as the primary, so a chunk of it is float32 (N, 1, chunk_samples)) is a **partner** and gets
  another utterance of the same set (:func:`pick_partners`: the next one, cyclically), cut or zero-padded to the
  primary's length;
* an input that is not a waveform (features: spectra, embeddings, frames at another rate) cannot be made from
  audio: :func:`require_waveform_inputs` refuses it by name in one line (exit 2) with what to do instead.

A model with one waveform input gets exactly the feeds it always got (``{contract.input: x}``).
Zero feeds for smoke tests (:func:`zero_feeds`) work for any input, features included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cosyedge.artifacts.contract import BATCH_DIM, TIME_DIM, StreamContract, StreamIO
from cosyedge.errors import UsageError


def is_waveform(io: StreamIO, contract: StreamContract) -> bool:
    """bool: ``io`` is a waveform on the model's sample clock: shape ``["N", 1, "T"]``, kind ``audio``,
    ``hop_samples`` frames per hop (a chunk of it is (N, 1, chunk_samples), float32 for every cosyedge export)."""
    return (io.kind == "audio" and list(io.shape) == [BATCH_DIM, 1, TIME_DIM] and io.time_axis == 2
            and io.frames_per_hop == contract.hop_samples)


def primary_input(contract: StreamContract) -> StreamIO:
    """The input that gets the utterance (StreamIO): the contract's ``input`` when it is a streaming input,
    else the first streaming input."""
    ins = contract.stream_inputs
    return next((i for i in ins if i.name == contract.input), ins[0])


def partner_inputs(contract: StreamContract) -> list[StreamIO]:
    """The waveform inputs other than the primary one (list[StreamIO], contract order); empty for a model with
    one input. Inputs that are not waveforms are not listed (see :func:`feature_inputs`)."""
    first = primary_input(contract).name
    return [i for i in contract.stream_inputs if i.name != first and is_waveform(i, contract)]


def feature_inputs(contract: StreamContract) -> list[StreamIO]:
    """The streaming inputs that are not waveforms (list[StreamIO]), the primary one included when it is not."""
    return [i for i in contract.stream_inputs if not is_waveform(i, contract)]


def describe_input(io: StreamIO, contract: StreamContract) -> str:
    """One input for a message (str), e.g. ``ref['N', 1, 'T'] (waveform)`` or ``spec['N', 1, 'T', 481]
    (features, 1 frame per 480-sample hop)``."""
    if is_waveform(io, contract):
        what = "waveform"
    else:
        kind = "features" if io.kind != "audio" else "audio of another shape or rate"
        what = f"{kind}, {io.frames_per_hop} frame(s) per {contract.hop_samples}-sample hop"
    return f"{io.name}{list(io.shape)} ({what})"


def python_api_call(contract: StreamContract, model: str, chunk_samples: int | None = None) -> str:
    """The Python call that streams ``model`` chunk by chunk (str), with one array per input and its shape, e.g.
    ``with cosyedge.runtime.OrtStreamSession('m.onnx') as s: s.push({'audio': float32 (1, 1, 160), 'ref': float32 (1,
    1, 160)})`` (a session pushes once activated; ``push`` returns arrays of the caller's own).

    Args:
        contract (StreamContract): The model's contract.
        model (str): The model path as the message shows it.
        chunk_samples (int | None): Samples per chunk (default: one hop).
    """
    chunk = int(chunk_samples or contract.hop_samples)
    arrays = ", ".join(f"'{i.name}': {i.dtype} {i.concrete_shape(1, i.frames(chunk, contract.hop_samples))}"
                       for i in contract.stream_inputs)
    return f"with cosyedge.runtime.OrtStreamSession('{model}') as s: s.push({{{arrays}}})"


def require_waveform_inputs(contract: StreamContract, where: str, purpose: str, hint: str) -> None:
    """Refuse a model with an input that cannot be made from audio (one line, exit 2).

    Args:
        contract (StreamContract): The model's contract.
        where (str): The model as the message names it (its path).
        purpose (str): What needs the feeds, e.g. ``"INT8 calibration"``.
        hint (str): What to do instead (the option or Python call), appended to the message.
    Raises:
        UsageError: a streaming input is not a waveform (:func:`is_waveform`); the message names every such
            input with its shape and says ``purpose`` feeds audio utterances only, then ``hint``.
    """
    bad = feature_inputs(contract)
    if bad:
        names = ", ".join(describe_input(i, contract) for i in bad)
        raise UsageError(f"{purpose} cannot feed {where}: its input{'s' if len(bad) > 1 else ''} {names} "
                         f"{'are' if len(bad) > 1 else 'is'} not a waveform (N, 1, T) at {contract.sample_rate_hz} Hz, "
                         f"and {purpose} feeds audio utterances only; {hint}")


def fit(x: np.ndarray, length: int) -> np.ndarray:
    """``x`` (float32 (T,)) cut or zero-padded at the end to ``length`` samples (float32 (length,))."""
    x = np.asarray(x, np.float32).reshape(-1)
    if x.size >= length:
        return x[:length]
    out = np.zeros(int(length), np.float32)
    out[:x.size] = x
    return out


def pick_partners(contract: StreamContract, signals: Sequence, i: int) -> dict[str, np.ndarray]:
    """The partner signals of utterance ``i`` of a set: partner input ``k`` (0-based, :func:`partner_inputs`
    order) gets ``signals[(i + 1 + k) % len(signals)]`` (the next utterances, cyclically; an utterance is its
    own partner in a set of one).

    Args:
        contract (StreamContract): The model's contract.
        signals (Sequence[np.ndarray] | Sequence[Callable[[], np.ndarray]]): The set's utterances, float32 (T_j,)
            at the model rate, or callables returning them (read only when needed).
        i (int): Index of the utterance fed to the primary input.
    Returns:
        dict[str, np.ndarray]: partner input name -> float32 (T_j,) (not yet fitted to the utterance's length);
        empty for a model with one waveform input.
    """
    out = {}
    n = len(signals)
    for k, io in enumerate(partner_inputs(contract)):
        s = signals[(i + 1 + k) % n]
        out[io.name] = np.asarray(s() if callable(s) else s, np.float32)
    return out


def full_inputs(contract: StreamContract, x: np.ndarray, partners: Mapping[str, np.ndarray] | None = None,
                where: str = "the model") -> dict[str, np.ndarray]:
    """Whole-utterance feeds of every streaming input, float32 (1, 1, T) each, T = ``len(x)``.

    Args:
        contract (StreamContract): The model's contract.
        x (np.ndarray): float32 (T,), the utterance at the model rate, for the primary input.
        partners (Mapping[str, np.ndarray] | None): One float32 (T',) signal per partner input
            (:func:`partner_inputs`), cut or zero-padded to T here.
        where (str): The model as error messages name it.
    Returns:
        dict[str, np.ndarray]: input name -> float32 (1, 1, T); ``{contract.input: x}`` alone for a model with one
        waveform input.
    Raises:
        UsageError: an input is not a waveform; a partner input has no signal in ``partners``; ``partners`` names
            an input that is not a partner input.
    """
    require_waveform_inputs(contract, where, "streaming audio", "stream it from Python with "
                            + python_api_call(contract, where))
    x = np.asarray(x, np.float32).reshape(-1)
    feeds = {primary_input(contract).name: x.reshape(1, 1, -1)}
    feeds.update({k: v.reshape(1, 1, -1) for k, v in partner_arrays(contract, partners, x.size, where).items()})
    return feeds


def partner_arrays(contract: StreamContract, partners: Mapping[str, np.ndarray] | None, length: int,
                   where: str = "the model") -> dict[str, np.ndarray]:
    """Each partner input's signal fitted to ``length`` samples (dict[str, np.ndarray], float32 (length,) or
    (batch, length) when a signal is 2-D).

    Raises:
        UsageError: a partner input without a signal, or a signal for an input that is not a partner input.
    """
    partners = dict(partners or {})
    want = [i.name for i in partner_inputs(contract)]
    missing = [n for n in want if n not in partners]
    extra = sorted(set(partners) - set(want))
    if missing or extra:
        raise UsageError(f"{where} streams the waveform inputs {[primary_input(contract).name] + want}: besides the "
                         f"primary '{primary_input(contract).name}', give one signal for each of {want} (partners="
                         f"{{name: float32 (T,)}})" + (f"; missing {missing}" if missing else "")
                         + (f"; not a partner input: {extra}" if extra else ""))
    out = {}
    for name in want:
        s = np.asarray(partners[name], np.float32)
        if s.ndim == 2:
            p = np.zeros((s.shape[0], int(length)), np.float32)
            p[:, :min(length, s.shape[1])] = s[:, :length]
            out[name] = p
        else:
            out[name] = fit(s, length)
    return out


def zero_feeds(contract: StreamContract, chunk_samples: int | None = None, batch: int = 1) -> dict[str, np.ndarray]:
    """Zero chunk of every streaming input (any kind, features included), dict name -> array of the input's
    dtype and shape with ``N`` = ``batch`` and ``T`` = its frames in ``chunk_samples`` (default one hop)."""
    chunk = int(chunk_samples or contract.hop_samples)
    return {i.name: np.zeros(i.concrete_shape(batch, i.frames(chunk, contract.hop_samples)), np.dtype(i.dtype))
            for i in contract.stream_inputs}


__all__ = ["describe_input", "feature_inputs", "fit", "full_inputs", "is_waveform", "partner_arrays",
           "partner_inputs", "pick_partners", "primary_input", "python_api_call", "require_waveform_inputs",
           "zero_feeds"]
