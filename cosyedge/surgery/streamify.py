"""Stage 2, streamify: turn a full-sequence causal-conv ONNX into a chunk-in/chunk-out ONNX with state.

Works on any causal-convolution ONNX (made by :mod:`cosyedge.export` or by the user), in both forms
the PyTorch exporters emit for ``conv(F.pad(x, (P, 0)))`` (DESIGN.md, ONNX export facts):

(a) ``Pad`` (mode constant, value 0, constant ``pads`` after constant folding, only a left pad on the
    last = time axis) feeding a ``Conv`` (``torch.onnx.export(dynamo=False)``);
(b) ``Conv`` with asymmetric ``pads=[P, 0]`` (``dynamo=True`` folds the pad into the Conv).

Each becomes ``Concat(state_in.NN, x, axis=-1)`` feeding the Conv (pads zeroed) and
``state_out.NN = Slice(concat, -P:)``, P = (k-1)*d for a stride-1 conv (k - s for
``CausalConv1dDownsample``). States are numbered in topological order with a fixed zero-padded
width, so no state name is a prefix of another (DESIGN.md, known failure kinds). The graph's total
stride (least common multiple of the cumulative Conv strides from the audio input) is stored in the
contract; a chunk must be a multiple of it (:meth:`~cosyedge.artifacts.StreamContract.check_chunk`):
ONNX Runtime silently truncates other lengths instead of failing (DESIGN.md).

Refused with :class:`~cosyedge.errors.UsageError` naming the node: any pad that is not causal (right or
symmetric pads, pads on other axes, negative pads, non-constant mode, non-zero value, pads that are
not constant after folding), a causal Pad feeding anything but a Conv, a Conv whose time pad does not
give exactly ``T / stride`` frames per chunk (needs ``k_eff - s <= P <= k_eff - 1``), ops that keep
hidden time state (ConvTranspose, LSTM, GRU, RNN, pooling), and a graph without any causal pad.
Not detected: other ops that mix time steps (reductions or cumulative sums over time, attention):
such a model is not causal-conv and streams wrongly.

Sources: onnx-graphsurgeon docs and source (``Graph.fold_constants``, ``Graph.cleanup``,
``Graph.toposort``, ``Graph.register``); ONNX operator docs: Pad (opset 18 ``pads`` = all begins then
all ends, optional ``constant_value`` and ``axes`` inputs), Conv (``pads`` = begins then ends per
spatial axis, ``auto_pad``), Concat, Slice; icefall ``export-onnx-streaming.py`` (explicit cache I/O).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    BATCH_DIM,
    META_PREFIX,
    Stage,
    StateSpec,
    StreamContract,
    check_not_input,
    check_writable,
    resolve_artifact,
)
from cosyedge.errors import UsageError
from cosyedge.log import LOG
from cosyedge.surgery import io, ops  # noqa: F401  (ops registers graph functions)

gs = lazy_import("onnx_graphsurgeon")

STATE_IN_PREFIX = "state_in."
STATE_OUT_PREFIX = "state_out."

# Ops that keep time state streamify cannot expose as Conv left pads.
_REFUSED_OPS = {"ConvTranspose", "LSTM", "GRU", "RNN", "MaxPool", "AveragePool", "LpPool"}


@dataclasses.dataclass
class _Site:
    """One causal left pad to replace: ``conv(pad(x, P))`` -> ``conv(concat(state, x))``."""

    conv: Any  # gs.Node (Conv)
    x: Any  # gs.Tensor, the unpadded input
    pad_frames: int  # P


def _const(t: Any) -> np.ndarray | None:
    """Values of a constant tensor (initializer or Constant-node output), else None."""
    if isinstance(t, gs.Constant):
        return np.asarray(t.values)
    if len(t.inputs) == 1 and t.inputs[0].op == "Constant":
        return np.asarray(t.inputs[0].attrs["value"].values)
    return None


def _is_omitted(node: Any, index: int) -> bool:
    """True when optional input ``index`` of ``node`` is absent or empty."""
    return index >= len(node.inputs) or node.inputs[index].name == ""


def _desc(node: Any) -> str:
    return f"{node.op} node '{node.name}'"


def _pad_left_frames(pad: Any, rank_hint: int | None) -> int:
    """Validate a Pad node and return its left pad P (frames) on the time (last) axis.

    Returns 0 for a no-op Pad (all pads zero). Raises UsageError for anything not causal.
    """
    mode = pad.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise UsageError(f"{_desc(pad)} uses mode '{mode}': only zero constant padding can become a stream state")
    if "pads" in pad.attrs:  # opset < 11: pads attribute
        pads = np.asarray(pad.attrs["pads"], dtype=np.int64)
        value = float(pad.attrs.get("value", 0.0))
    else:
        pads = _const(pad.inputs[1]) if len(pad.inputs) > 1 else None
        if pads is None:
            raise UsageError(f"{_desc(pad)} has pads computed at run time (not constant after folding): "
                             "cannot tell whether it is causal")
        value = 0.0
        if not _is_omitted(pad, 2):
            v = _const(pad.inputs[2])
            if v is None:
                raise UsageError(f"{_desc(pad)} has a run-time pad value: only zero padding can become a state")
            value = float(np.asarray(v).reshape(-1)[0]) if np.asarray(v).size else 0.0
    pads = pads.astype(np.int64).reshape(-1)
    if not _is_omitted(pad, 3):  # opset 18 axes input
        axes = _const(pad.inputs[3])
        x_shape = pad.inputs[0].shape
        rank = len(x_shape) if x_shape is not None else rank_hint
        if axes is None or rank is None:
            raise UsageError(f"{_desc(pad)} has run-time axes or unknown input rank: cannot tell whether it is causal")
        full = np.zeros(2 * rank, dtype=np.int64)
        axes = [int(a) % rank for a in np.asarray(axes).reshape(-1)]
        for i, a in enumerate(axes):
            full[a], full[rank + a] = pads[i], pads[len(axes) + i]
        pads = full
    rank = len(pads) // 2
    begins, ends = pads[:rank], pads[rank:]
    if not pads.any():
        return 0
    if ends.any() or begins[:-1].any() or begins[-1] < 0:
        raise UsageError(
            f"{_desc(pad)} pads begins={begins.tolist()} ends={ends.tolist()}: not causal (only a left pad on "
            "the last = time axis can become a stream state; use F.pad(x, (P, 0)))"
        )
    if value != 0.0:
        raise UsageError(f"{_desc(pad)} pads with value {value:g}: only zero padding can become a stream state")
    return int(begins[-1])


def _conv_geometry(conv: Any) -> tuple[int, int, int, int, Any]:
    """Return (left pad P on time, effective time kernel k_eff, time stride s, rank, weight shape)."""
    w = conv.inputs[1]
    w_shape = list(_const(w).shape) if _const(w) is not None else (list(w.shape) if w.shape else None)
    ksz = conv.attrs.get("kernel_shape") or (w_shape[2:] if w_shape else None)
    if not ksz or not all(isinstance(k, (int, np.integer)) for k in ksz):
        raise UsageError(f"{_desc(conv)} has an unknown kernel shape: cannot tell its time receptive field")
    n_sp = len(ksz)
    auto_pad = conv.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID"):
        raise UsageError(f"{_desc(conv)} uses auto_pad={auto_pad}: not causal (export with explicit left pads)")
    pads = np.asarray(conv.attrs.get("pads", [0] * 2 * n_sp) if auto_pad == "NOTSET" else [0] * 2 * n_sp,
                      dtype=np.int64)
    begins, ends = pads[:n_sp], pads[n_sp:]
    if ends.any() or begins[:-1].any() or begins[-1] < 0:
        raise UsageError(
            f"{_desc(conv)} pads begins={begins.tolist()} ends={ends.tolist()}: not causal (only a left pad on "
            "the last = time axis can become a stream state; use F.pad(x, (P, 0)) instead of padding=...)"
        )
    dil = conv.attrs.get("dilations", [1] * n_sp)[-1]
    stride = conv.attrs.get("strides", [1] * n_sp)[-1]
    k_eff = (int(ksz[-1]) - 1) * int(dil) + 1
    return int(begins[-1]), k_eff, int(stride), n_sp + 2, w_shape


def find_causal_pads(graph: Any) -> list[_Site]:
    """Validate every Pad and Conv of a folded, sorted graph and list the causal pads to replace.

    Args:
        graph (gs.Graph): Constant-folded, topologically sorted graph.
    Returns:
        list[_Site]: one per Conv with a causal left pad (Pad node, Conv pads or both), in graph order.
    Raises:
        UsageError: a non-causal pad, a causal Pad that feeds something other than a Conv, a Conv whose
            time pad breaks chunking, or an op with hidden time state (the message names the node).
    """
    pad_frames: dict[int, int] = {}
    for node in graph.nodes:
        if node.op in _REFUSED_OPS:
            raise UsageError(f"{_desc(node)}: {node.op} keeps time state streamify cannot carry "
                             "(supported: Conv with causal left pads; upsample with CausalConv1dUpsample)")
        if node.op != "Pad":
            continue
        consumers = list(node.outputs[0].outputs)
        hint = next((len(c.inputs[1].shape) for c in consumers if c.op == "Conv" and c.inputs[1].shape), None)
        p = _pad_left_frames(node, hint)
        if p == 0:
            continue
        for c in consumers:
            if c.op != "Conv" or c.inputs[0] is not node.outputs[0]:
                raise UsageError(f"{_desc(node)} (causal left pad of {p} frames) feeds {_desc(c)}, not a Conv "
                                 "input: streamify only carries state into Conv inputs")
        if node.outputs[0] in graph.outputs:
            raise UsageError(f"{_desc(node)} output is a graph output: a padded tensor cannot be streamed")
        pad_frames[id(node)] = p

    sites = []
    for conv in graph.nodes:
        if conv.op != "Conv":
            continue
        p_conv, k_eff, stride, _, _ = _conv_geometry(conv)
        x, p_pad = conv.inputs[0], 0
        producer = x.inputs[0] if len(x.inputs) == 1 else None
        if producer is not None and id(producer) in pad_frames:
            x, p_pad = producer.inputs[0], pad_frames[id(producer)]
        p = p_pad + p_conv
        lo, hi = max(0, k_eff - stride), k_eff - 1
        if not lo <= p <= hi:
            raise UsageError(
                f"{_desc(conv)} (time kernel {k_eff} with dilation, stride {stride}) has a left pad of {p}: "
                f"chunked output needs {lo} <= pad <= {hi} (causal conv: pad = kernel - stride)"
            )
        if p > 0:
            sites.append(_Site(conv=conv, x=x, pad_frames=p))
    return sites


def total_stride(graph: Any, input_name: str) -> int:
    """Return the model's total stride in input samples (int).

    Each tensor gets the stride of its time axis relative to the audio input: a Conv multiplies its
    input's stride by its time stride, other ops take the least common multiple of their inputs'.
    The result is the lcm over all tensors. A reshape-based upsampler (``CausalConv1dUpsample``) does not
    reduce it, which is right: chunks must still fill whole frames of the strided layers.

    Args:
        graph (gs.Graph): Topologically sorted graph (before the rewrite).
        input_name (str): Audio input name.
    """
    stride = {input_name: 1}
    total = 1
    for node in graph.nodes:
        ins = [stride[t.name] for t in node.inputs if t.name in stride]
        if not ins:
            continue
        s = math.lcm(*ins)
        if node.op == "Conv" and node.inputs[0].name in stride:
            s = stride[node.inputs[0].name] * int(node.attrs.get("strides", [1])[-1])
        for o in node.outputs:
            stride[o.name] = s
        total = math.lcm(total, s)
    return total


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return "float32"


def _state_shape(site: _Site, w_shape: list | None) -> list:
    """["N", C_in, ..., P] for the state of ``site``."""
    conv, x = site.conv, site.x
    rank = len(w_shape) if w_shape else (len(x.shape) if x.shape else 3)
    x_shape = list(x.shape) if x.shape else [None] * rank
    c_in = int(w_shape[1]) * int(conv.attrs.get("group", 1)) if w_shape else x_shape[1]
    middle = x_shape[2:-1]
    dims = [c_in, *middle]
    if not all(isinstance(d, (int, np.integer)) and d > 0 for d in dims):
        raise UsageError(f"{_desc(conv)}: input shape {x_shape} has unknown non-time dims: cannot size its state")
    return [BATCH_DIM, *(int(d) for d in dims), int(site.pad_frames)]


def streamify_graph(graph: Any, input_name: str) -> tuple[list[StateSpec], int]:
    """Rewrite every causal left pad of ``graph`` in place into explicit state I/O (the surgery pass).

    Args:
        graph (gs.Graph): Full-sequence graph; audio input ``input_name`` (N, C, T), time last.
        input_name (str): Audio input name (for the total stride).
    Returns:
        tuple[list[StateSpec], int]: the state pairs in graph order and the total stride (samples).
    Raises:
        UsageError: see :func:`find_causal_pads`; also when the graph has no causal pad or already has
            tensors named ``state_in.*`` / ``state_out.*``.
    """
    for i, node in enumerate(graph.nodes):  # error messages and StateSpec.node need names
        if not node.name:
            node.name = f"{node.op}_{i}"
    graph.toposort()
    graph.fold_constants().cleanup().toposort()
    sites = find_causal_pads(graph)
    if not sites:
        raise UsageError("model has no causal left pad (no Conv with a left pad on time): nothing to stream; "
                         "is it a causal-conv model? (streamify needs conv(F.pad(x, (P, 0))))")
    taken = [n for n in graph.tensors() if n.startswith((STATE_IN_PREFIX, STATE_OUT_PREFIX))]
    if taken:
        raise UsageError(f"model already has tensor '{taken[0]}': is it already streamified?")
    stride = total_stride(graph, input_name)

    width = max(2, len(str(len(sites) - 1)))
    specs = []
    for i, site in enumerate(sites):
        _, _, _, _, w_shape = _conv_geometry(site.conv)
        shape = _state_shape(site, w_shape)
        dtype = site.x.dtype if site.x.dtype is not None else np.float32
        name_in, name_out = f"{STATE_IN_PREFIX}{i:0{width}d}", f"{STATE_OUT_PREFIX}{i:0{width}d}"
        cat = graph.expose_state(site.x, site.pad_frames, shape, name_in, name_out, dtype=dtype,
                                 prefix=site.conv.name)
        site.conv.inputs[0] = cat
        if "pads" in site.conv.attrs:
            site.conv.attrs["pads"] = [0] * len(site.conv.attrs["pads"])
        specs.append(StateSpec(input=name_in, output=name_out, shape=shape, dtype=_dtype_name(dtype),
                               node=site.conv.name, init=0.0))
        LOG.debug("state %s: %s before %s", name_in, shape, site.conv.name)
    graph.clear_intermediate_shapes().cleanup().toposort()
    return specs, stride


def _contract_fields(model: Any, where: str, *, sample_rate_hz, hop_samples, delay_samples, name) -> dict:
    """Merge cosyedge metadata of ``model`` with explicit arguments (arguments win)."""
    meta = {p.key: p.value for p in model.metadata_props}
    fields: dict = {}
    if any(k.startswith(META_PREFIX) for k in meta):
        old = StreamContract.from_metadata(meta, where=where)
        if old.is_streaming:
            raise UsageError(f"{where} is already streaming (has {len(old.states)} states): streamify the "
                             "full-sequence ONNX instead")
        fields = {"sample_rate_hz": old.sample_rate_hz, "hop_samples": old.hop_samples,
                  "delay_samples": old.delay_samples, "name": old.name, "input": old.input, "output": old.output}
    given = {"sample_rate_hz": sample_rate_hz, "hop_samples": hop_samples, "delay_samples": delay_samples,
             "name": name}
    for key, value in given.items():
        if value is None:
            continue
        if key in fields and fields[key] != value:
            LOG.warning("%s: %s=%s overrides the model's metadata value %s", where, key, value, fields[key])
        fields[key] = value
    for key in ("sample_rate_hz", "hop_samples"):
        if fields.get(key) is None:
            raise UsageError(f"{where} has no cosyedge metadata: give {key}= (CLI: --{key.replace('_', '-')} N)")
        if int(fields[key]) <= 0:
            raise UsageError(f"{key} must be a positive integer, got {fields[key]}")
    if int(fields.get("delay_samples") or 0) < 0:
        raise UsageError(f"delay_samples must be >= 0, got {fields['delay_samples']}")
    return fields


class StatefulOnnxFromOnnx(Stage):
    """Stage: full-sequence causal-conv ONNX -> streaming ONNX with explicit state I/O (see module doc).

    Args:
        onnx_in (str | Path | Stage): Source ONNX path, or a stage producing it (e.g. ``OnnxFromTorch``).
        out (str | Path): Destination ``.stream.onnx`` (one self-contained file, written atomically).
        sample_rate_hz (int | None): Sample rate; required when the source has no cosyedge metadata.
        hop_samples (int | None): Samples per model step; required without metadata; must be a multiple
            of the graph's total stride.
        delay_samples (int | None): Algorithmic delay (samples); defaults to the metadata value or 0.
        name (str | None): Model name; defaults to the metadata value or the file stem.

    Calling it returns the output Path; afterwards :attr:`contract` holds the written
    :class:`~cosyedge.artifacts.StreamContract`.

    Streaming model I/O: ``<input>`` (N, C, T) float32 with T a positive multiple of
    ``contract.total_stride``; ``state_in.NN`` (N, C_l, P_l) float32, zeros at stream start; outputs
    ``<output>`` (N, 1, T) and ``state_out.NN`` (same shape as ``state_in.NN``), to feed back next chunk.

    Raises:
        ArtifactError: source missing/corrupt, output not writable, rewritten graph fails ONNX checks.
        UsageError: non-causal model (message names the node), missing metadata (names the option),
            hop not a multiple of the total stride, already streaming.
    """

    def __init__(self, onnx_in: Any, out: str | Path, *, sample_rate_hz: int | None = None,
                 hop_samples: int | None = None, delay_samples: int | None = None, name: str | None = None):
        self.onnx_in = onnx_in
        self.out = Path(out)
        self.sample_rate_hz = sample_rate_hz
        self.hop_samples = hop_samples
        self.delay_samples = delay_samples
        self.name = name
        self.contract: StreamContract | None = None

    def call_impl(self) -> Path:
        """Run the surgery now; returns the streaming ONNX path (see :func:`streamify` for errors)."""
        src = resolve_artifact(self.onnx_in)
        check_writable(self.out)
        check_not_input(src, self.out)
        with LOG.stage(f"streamify {src} -> {self.out}"):
            graph, model = io.load_graph(src)
            fields = _contract_fields(model, str(src), sample_rate_hz=self.sample_rate_hz,
                                      hop_samples=self.hop_samples, delay_samples=self.delay_samples,
                                      name=self.name)
            in_names = [t.name for t in graph.inputs]
            out_names = [t.name for t in graph.outputs]
            audio_in = fields.get("input") or (in_names[0] if len(in_names) == 1 else None)
            audio_out = fields.get("output") or (out_names[0] if len(out_names) == 1 else None)
            if audio_in not in in_names or audio_out not in out_names or len(in_names) != 1:
                raise UsageError(f"{src} must have exactly one audio input and one audio output, "
                                 f"has inputs {in_names} and outputs {out_names}")
            t_dim = (graph.inputs[0].shape or [None])[-1]
            if isinstance(t_dim, (int, np.integer)):
                LOG.warning("%s: input '%s' has a fixed time length %d: the streaming model only accepts "
                            "chunks of exactly %d samples", src, audio_in, t_dim, t_dim)

            specs, stride = streamify_graph(graph, audio_in)
            hop = int(fields["hop_samples"])
            if hop % stride:
                raise UsageError(f"hop_samples {hop} is not a multiple of the model's total stride {stride} "
                                 f"samples (use {stride * max(1, round(hop / stride))})")
            contract = StreamContract(
                input=audio_in, output=audio_out, sample_rate_hz=int(fields["sample_rate_hz"]),
                hop_samples=hop, total_stride=stride, delay_samples=int(fields.get("delay_samples") or 0),
                states=specs, name=str(fields.get("name") or _stem(src)),
            )
            new = io.graph_to_model(graph, like=model)
            contract.write_to_onnx(new)
            new = io.finalize_model(new, where=str(src))
            io.save_model(new, self.out)
            LOG.info("%d states, total stride %d samples, %s", len(specs), stride,
                     ", ".join(f"{s.input}{s.shape[1:]}" for s in specs))
        self.contract = contract
        return self.out


def _stem(path: Path) -> str:
    name = Path(path).name
    for suffix in (".onnx", ".full", ".stream"):
        name = name.removesuffix(suffix)
    return name or "model"


def streamify(in_onnx: Any, out_onnx: str | Path, *, sample_rate_hz: int | None = None,
              hop_samples: int | None = None, delay_samples: int | None = None,
              name: str | None = None) -> StreamContract:
    """Function twin of :class:`StatefulOnnxFromOnnx`: rewrite ``in_onnx`` into a streaming ``out_onnx``.

    Args:
        in_onnx (str | Path | Stage): Full-sequence causal-conv ONNX (or a stage producing it).
        out_onnx (str | Path): Destination streaming ONNX.
        sample_rate_hz (int | None): Required when ``in_onnx`` has no cosyedge metadata.
        hop_samples (int | None): Required when ``in_onnx`` has no cosyedge metadata.
        delay_samples (int | None): Defaults to the metadata value or 0.
        name (str | None): Defaults to the metadata value or the file stem.
    Returns:
        StreamContract: the contract written into ``out_onnx``'s metadata (states, total stride...).
    Raises:
        ArtifactError, UsageError: see :class:`StatefulOnnxFromOnnx`.
    """
    stage = StatefulOnnxFromOnnx(in_onnx, out_onnx, sample_rate_hz=sample_rate_hz, hop_samples=hop_samples,
                                 delay_samples=delay_samples, name=name)
    stage()
    return stage.contract
