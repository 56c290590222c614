"""Explicit INT8 quantization: QuantizeLinear/DequantizeLinear (Q/DQ) pairs inserted with onnx-graphsurgeon.

Placement follows TensorRT's rules for explicit quantization (TensorRT developer guide, "Explicit
Quantization" / "Q/DQ Layer-Placement Recommendations"): quantize the **inputs** of the weighted ops
(Conv, ConvTranspose, Gemm, MatMul with a constant weight) and nothing else, so TensorRT fuses
``DQ -> Conv`` into an INT8 convolution and decides output precision itself; residual Adds, gates and
norms stay in float.

* **Activations**: per-tensor, symmetric, ``scale = amax / 127`` (amax from KL calibration,
  :mod:`cosyedge.precision.calibrate`), int8 zero point 0: ``x -> Q -> DQ -> op``. One Q/DQ pair per
  tensor, shared by every quantized consumer; consumers that are not quantized keep the float tensor.
  For a streaming Conv the tensor is ``Concat(state_in, x)``: exactly one Q/DQ sits on the Concat
  output, so the carried state and the new input share one scale, and the ``Slice`` that makes
  ``state_out`` still reads the float Concat (the state is carried exactly).
* **Weights**: per-channel, symmetric, ``scale[c] = max |W[c]| / 127``, zero point 0, on the output-
  channel axis: axis 0 for Conv (W: (C_out, C_in/g, k...)), axis 1 for ConvTranspose (W: (C_in,
  C_out/g, k...)), the output-feature axis for Gemm/MatMul. Stored **pre-quantized**: an int8 initializer
  followed by ``DequantizeLinear(axis=...)``. TensorRT 10 documents both float weights + Q/DQ and
  pre-quantized int8 weights + DQ ("Quantized Weights": "When using pre-quantized weights, an
  IDequantizeLayer is required"), and this is also the form ONNX Runtime's ``quantize_static`` (QDQ)
  writes and fuses on CPU; it keeps the file 4x smaller than float weights + Q/DQ and fixes the rounding
  (round half to even, as ONNX QuantizeLinear) in the artifact instead of in each runtime.
* **Biases** stay float (TensorRT folds them in; ONNX Runtime accepts float biases).
* **Kept in float** (:func:`float_nodes`): the first conv (reads the 1-channel audio input, possibly via
  its state Concat), the last conv(s) (from which the 1-channel audio output is reached without another
  weighted op), any weighted op with 1 input or 1 output channel, and every node named in ``exclude``.

Sources: NVIDIA TensorRT docs, "Working with Quantized Types" (explicit quantization, Q/DQ placement,
quantized weights, per-channel axis), https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/work-quantized-types.html;
ONNX operators QuantizeLinear/DequantizeLinear (opset 13+: per-axis ``axis`` attribute; int8 saturation
to [-128, 127], round half to even); onnx-graphsurgeon ``Graph.register``/``Graph.layer``;
pytorch-quantization ``calib/histogram.py::calibrate_weights`` (axis 1 for ConvTranspose weights).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG
from cosyedge.passes.edit import node_attrs

gs = lazy_import("onnx_graphsurgeon")

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""tuple[str, ...]: ops whose inputs are quantized (when their weight is a constant)."""

INT8_MAX = 127


@dataclasses.dataclass
class WeightedNode:
    """A weighted op found in a graph (an ONNX ``NodeProto`` view, no gs needed).

    Attributes:
        name (str): Node name.
        op (str): ``Conv``, ``ConvTranspose``, ``Gemm`` or ``MatMul``.
        data (str): Name of the activation input (input 0; input 1 for ``MatMul(W, x)`` is not handled).
        weight (str): Name of the constant weight initializer.
        axis (int): Output-channel axis of the weight (per-channel scale axis).
        in_channels (int): Input channels (features) of the weight.
        out_channels (int): Output channels (features) of the weight.
    """

    name: str
    op: str
    data: str
    weight: str
    axis: int
    in_channels: int
    out_channels: int


def weight_axis(op: str, attrs: dict, w_shape: tuple) -> tuple[int, int, int]:
    """Return ``(axis, in_channels, out_channels)`` (ints) of a weight of shape ``w_shape``.

    Conv W (C_out, C_in/group, k...): axis 0. ConvTranspose W (C_in, C_out/group, k...): axis 1.
    Gemm B (K, N), or (N, K) with ``transB=1``: the N axis. MatMul B (K, N): axis 1 (last).
    """
    g = int(attrs.get("group", 1))
    if op == "Conv":
        return 0, int(w_shape[1]) * g, int(w_shape[0])
    if op == "ConvTranspose":
        return 1, int(w_shape[0]), int(w_shape[1]) * g
    if op == "Gemm":
        if int(attrs.get("transB", 0)):
            return 0, int(w_shape[1]), int(w_shape[0])
        return 1, int(w_shape[0]), int(w_shape[1])
    return len(w_shape) - 1, int(w_shape[-2]), int(w_shape[-1])


def weighted_nodes(model: Any) -> list[WeightedNode]:
    """Find the quantizable weighted ops of an ONNX model (constant weight initializer, float data).

    Args:
        model (onnx.ModelProto): Model (weights loaded).
    Returns:
        list[WeightedNode]: in graph order. A MatMul/Gemm whose weight is not an initializer is skipped.
    """
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    out = []
    for n in model.graph.node:
        if n.op_type not in WEIGHTED_OPS or len(n.input) < 2 or n.input[1] not in inits:
            continue
        shape = inits[n.input[1]]
        if n.op_type == "MatMul" and len(shape) != 2:
            continue
        attrs = node_attrs(n)
        if n.op_type == "Gemm" and int(attrs.get("transA", 0)):
            continue
        axis, cin, cout = weight_axis(n.op_type, attrs, shape)
        out.append(WeightedNode(n.name, n.op_type, n.input[0], n.input[1], axis, cin, cout))
    return out


def activation_tensors(model: Any) -> list[str]:
    """Return the activation tensors Q/DQ needs scales for (list[str], graph order, no duplicates): the
    data inputs of every :func:`weighted_nodes` entry, excluded or not (so one amax cache serves any
    ``--exclude``)."""
    seen: dict[str, None] = {}
    for w in weighted_nodes(model):
        seen.setdefault(w.data, None)
    return list(seen)


def calibration_tensors(model: Any) -> list[str]:
    """Return every tensor to calibrate (list[str], no duplicates): :func:`activation_tensors` (used by
    Q/DQ) followed by the outputs of the weighted ops (not used by Q/DQ; they complete the TensorRT
    calibration cache, where an implicitly quantized INT8 convolution needs the range of its output too)."""
    seen: dict[str, None] = dict.fromkeys(activation_tensors(model))
    names = {w.name for w in weighted_nodes(model)}
    for n in model.graph.node:
        if n.name in names:
            seen.setdefault(n.output[0], None)
    return list(seen)


def concat_aliases(model: Any, tensors) -> dict[str, str]:
    """Map each input of a ``Concat`` whose output is in ``tensors`` to that output (dict[str, str]).

    TensorRT gives a concatenation's inputs the output's scale; the calibration cache lists them with
    the Concat output's amax (the state input and the new chunk of a ``Concat(state_in, x)``).
    Constant (initializer) inputs are skipped.
    """
    inits = {t.name for t in model.graph.initializer}
    wanted = set(tensors)
    out: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type == "Concat" and n.output[0] in wanted:
            for i in n.input:
                if i and i not in inits and i not in wanted:
                    out.setdefault(i, n.output[0])
    return out


KEEP_FLOAT_KEY = "cosyedge.int8_keep_float"
"""ONNX metadata key: JSON list of weighted node names the model's author keeps in float for INT8 (layers
measured to be quantization-sensitive), honoured like ``--exclude``."""


def declared_float_nodes(model: Any) -> list[str]:
    """Return the node names (list[str]) in the model's :data:`KEEP_FLOAT_KEY` metadata (empty if none).

    Raises:
        ArtifactError: the metadata is not a JSON list of strings.
    """
    import json

    for p in model.metadata_props:
        if p.key == KEEP_FLOAT_KEY:
            try:
                names = json.loads(p.value)
            except ValueError:
                names = None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ArtifactError(f"ONNX metadata {KEEP_FLOAT_KEY} must be a JSON list of node names, got {p.value!r}")
            return names
    return []


def is_copy_conv(node: Any, inits: dict) -> bool:
    """Tell whether a node is a Conv that only copies: its weight (an initializer, any shape (C_out, ...)) is
    one-hot per output channel (a single 1.0, zeros elsewhere) and its bias, if any, is zero, so each output is one
    input sample or frame, e.g. :class:`cosyedge.train.nn.CausalFraming`'s taps.

    Args:
        node (onnx.NodeProto): Any node.
        inits (dict[str, onnx.TensorProto]): The graph's initializers by name.
    Returns:
        bool: True for a copy; False for any other op, a weight or bias that is not an initializer, or one whose
        external data is not loaded (nothing to read).
    """
    from onnx import TensorProto, numpy_helper

    if node.op_type != "Conv" or len(node.input) < 2:
        return False
    tensors = [inits.get(i) for i in node.input[1:] if i]
    if any(t is None or (t.data_location == TensorProto.EXTERNAL and not t.raw_data) for t in tensors):
        return False
    w, *biases = (numpy_helper.to_array(t) for t in tensors)
    if w.size == 0 or w.shape[0] == 0:
        return False
    flat = w.reshape(w.shape[0], -1)
    if not (np.all((flat == 0) | (flat == 1)) and np.all(flat.sum(axis=1) == 1)):
        return False
    return not any(np.any(b) for b in biases)


_MOVES = ("Concat", "Identity", "Pad", "Reshape", "Unsqueeze", "Squeeze", "Transpose")
"""tuple[str]: ops that move samples without computing on them (a conv after them still reads the raw input)."""


def float_nodes(model: Any, audio_input: str | Iterable[str], audio_output: str) -> dict[str, str]:
    """Weighted ops kept in float by default, with the reason.

    Args:
        model (onnx.ModelProto): Streaming model.
        audio_input (str | Iterable[str]): Audio input name (contract ``input``), or every streaming input's name
            (a model with several inputs: a conv reading any of them is a first conv).
        audio_output (str): Audio output name (contract ``output``).
    Returns:
        dict[str, str]: node name -> reason (``"first conv (reads the audio input)"``, ``"last conv (feeds
        the audio output)"``, ``"1 input channel"``, ``"1 output channel"``, ``"copy (one-hot weights)"``: a
        fixed conv that only moves samples or frames, e.g. :class:`~cosyedge.train.nn.CausalFraming`'s taps, where
        int8 would round its input and save nothing).
    """
    inputs = {audio_input} if isinstance(audio_input, str) else set(audio_input)
    nodes = weighted_nodes(model)
    inits = {t.name: t for t in model.graph.initializer}
    by_name = {n.name: n for n in model.graph.node}
    names = {w.name for w in nodes}
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    reasons: dict[str, str] = {}

    def reads_input(t: str, depth: int = 0) -> bool:
        """``t`` is a streaming input moved, not computed: through Concat (with a state), Identity (a pad
        streamify removed), Pad and shape ops, e.g. Concat(state, Identity(Concat(audio, ref)))."""
        if t in inputs:
            return True
        src = producer.get(t)
        return (src is not None and src.op_type in _MOVES and depth < 8
                and any(reads_input(i, depth + 1) for i in src.input[:1 if src.op_type != "Concat" else None] if i))

    for w in nodes:
        if reads_input(w.data):
            reasons[w.name] = "first conv (reads the audio input)"
        elif w.in_channels == 1:
            reasons[w.name] = "1 input channel"
        elif w.out_channels == 1:
            reasons[w.name] = "1 output channel"
        elif is_copy_conv(by_name[w.name], inits):
            reasons[w.name] = "copy (one-hot weights)"
    # nodes the model itself declares quantization-sensitive (metadata written by its exporter)
    for name in declared_float_nodes(model):
        if name in names:
            reasons.setdefault(name, f"declared by the model ({KEEP_FLOAT_KEY})")
        else:
            LOG.warning("%s names %r, which is not a weighted node of this model: ignored", KEEP_FLOAT_KEY, name)
    # last convs: walk back from the audio output through non-weighted ops; the weighted ops met first
    stack, seen = [audio_output], set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        n = producer.get(t)
        if n is None:
            continue
        if n.name in names:
            reasons.setdefault(n.name, "last conv (feeds the audio output)")
            continue
        stack.extend(i for i in n.input if i)
    return reasons


def quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 quantization of a weight.

    Args:
        w (np.ndarray): float32 weight, any rank.
        axis (int): Channel axis (one scale per index on it).
    Returns:
        tuple[np.ndarray, np.ndarray]: ``(w_q, scale)``: int8 of ``w``'s shape in [-127, 127]
        (``round_half_even(w / scale)``) and float32 (C,) scales ``max |w[c]| / 127`` (1.0 for an
        all-zero channel, which TensorRT requires to be positive).
    """
    w = np.asarray(w, np.float32)
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.max(np.abs(w), axis=red)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


PLACEMENTS = ("trt", "ort", "ort_matmul")
"""tuple[str]: Q/DQ placements. ``trt``: TensorRT's rules (int8 symmetric activations, one Q/DQ pair per tensor on the
inputs of weighted ops, float outputs). ``ort``: ONNX Runtime's CPU ``QLinearConv`` fusion on x86 (see
:func:`insert_qdq`). ``ort_matmul``: one-frame convs rewritten to MatMuls that ONNX Runtime's x86 CPU EP fuses into
``MatMulIntegerToFloat`` (float outputs, no output Q; :mod:`cosyedge.precision.qdq_matmul`, applied by
:func:`cosyedge.precision.int8.int8_onnx`, not by :func:`insert_qdq`)."""


def check_placement(placement: str) -> str:
    """Return ``placement`` (str) when it is one of :data:`PLACEMENTS`.

    Raises:
        UsageError: one line naming the valid placements.
    """
    if placement not in PLACEMENTS:
        raise UsageError(f"--int8-placement {placement!r}: unknown Q/DQ placement (use one of {', '.join(PLACEMENTS)})")
    return placement


@gs.Graph.register()
def insert_qdq(self: Any, amax: dict[str, float], quantize: list[WeightedNode], placement: str = "trt") -> dict:
    """Insert Q/DQ pairs for the weighted nodes in ``quantize`` (see module docstring).

    Placement ``trt`` (TensorRT's rules): a per-tensor symmetric int8 Q/DQ pair on each quantized op's data
    input, shared by every quantized consumer of that tensor; outputs stay float.

    Placement ``ort`` (ONNX Runtime CPU on x86, ``QDQSelectorActionTransformer`` + ``QDQS8ToU8Transformer``):
    ORT turns ``DQ -> Conv -> Q`` into ``QLinearConv`` (and ``DQ -> MatMul -> Q`` into ``QLinearMatMul``) only
    when both ends are there with one activation type, each DQ feeds only that op and the op's output feeds
    only the Q; on x86 it converts int8 activation pairs to uint8 only when the Q has one consumer. So here:
    activations are **uint8** with zero point 128 and ``scale = amax / 127`` (the same grid as int8
    symmetric: ``[-128, 127] * scale``), weights stay per-channel symmetric int8 (QLinearConv u8 x s8), every
    consumer gets its **own DQ** (one Q per tensor), and a quantized op's **output** gets a Q (scale from its
    calibrated amax) followed by one DQ per consumer, so the next op can fuse too. Biases are int32
    (``scale = s_x * s_w[c]``, zero point 0), as QLinearConv takes them. An op whose output amax is missing keeps
    a float output (it cannot fuse; the fusion report counts it).

    Args:
        amax (dict[str, float]): Calibrated amax per activation tensor name (> 0; 0 becomes 1.0).
        quantize (list[WeightedNode]): Nodes to quantize (already filtered by excludes).
        placement (str): ``trt`` or ``ort`` (:data:`PLACEMENTS`).
    Returns:
        dict: ``{"activations": {tensor: scale}, "weights": {node: axis}, "qdq_pairs": int, "placement": str,
        "activation_type": "int8" | "uint8"}``; the caller ends the pass with ``graph.cleanup().toposort()``.
    Raises:
        ArtifactError: a node to quantize has no amax for its input (cache from another model), or is
            missing from the graph.
        UsageError: unknown ``placement``.
    """
    if check_placement(placement) == "ort_matmul":
        raise UsageError("Q/DQ placement 'ort_matmul' rewrites the graph first: use cosyedge.precision.int8.int8_onnx")
    ort_style = placement == "ort"
    by_name = {n.name: n for n in self.nodes}
    tensors = self.tensors()
    act_q: dict[str, tuple] = {}
    report = {"activations": {}, "weights": {}, "qdq_pairs": 0, "placement": placement,
              "activation_type": "uint8" if ort_style else "int8"}
    zp_dtype, zp_value = (np.uint8, 128) if ort_style else (np.int8, 0)

    def quantize_tensor(x: Any, a: float) -> tuple:
        """One Q of tensor ``x`` (its scale and zero point constants)."""
        scale = np.float32(a / INT8_MAX if a > 0 else 1.0)
        base = _safe(x.name)
        s = gs.Constant(f"{base}/act_scale", np.array(scale, np.float32))
        z = gs.Constant(f"{base}/act_zero_point", np.array(zp_value, zp_dtype))
        q = gs.Variable(f"{base}/QuantizeLinear_output", dtype=zp_dtype, shape=x.shape)
        self.layer(op="QuantizeLinear", name=f"{base}/QuantizeLinear", inputs=[x, s, z], outputs=[q])
        report["activations"][x.name] = float(scale)
        report["qdq_pairs"] += 1
        return q, s, z, x

    def dequantize(entry: tuple, suffix: str = "") -> Any:
        q, s, z, x = entry
        base = _safe(x.name)
        dq = gs.Variable(f"{base}/DequantizeLinear_output{suffix}", dtype=np.float32, shape=x.shape)
        self.layer(op="DequantizeLinear", name=f"{base}/DequantizeLinear{suffix}", inputs=[q, s, z], outputs=[dq])
        return dq

    shared_dq: dict[str, Any] = {}
    for w in quantize:
        node = by_name.get(w.name)
        if node is None:
            raise ArtifactError(f"node '{w.name}' not in the graph")
        if w.data not in amax:
            raise ArtifactError(f"no calibrated amax for tensor '{w.data}' (input of '{w.name}'): the amax cache "
                                f"is from another model; recalibrate")
        if w.data not in act_q:
            act_q[w.data] = quantize_tensor(tensors[w.data], float(amax[w.data]))
        if ort_style:  # a DQ of its own: ORT fuses a DQ only into its single consumer
            node.inputs[0] = dequantize(act_q[w.data], f"/{_safe(w.name)}")
        else:
            if w.data not in shared_dq:
                shared_dq[w.data] = dequantize(act_q[w.data])
            node.inputs[0] = shared_dq[w.data]
        # weight: int8 initializer + per-channel DQ
        wt = node.inputs[1]
        if not isinstance(wt, gs.Constant):
            raise ArtifactError(f"weight of '{w.name}' is not a constant")
        wq, wscale = quantize_weight(wt.values, w.axis)
        base = _safe(w.name)
        cq = gs.Constant(f"{base}/weight_int8", wq)
        cs = gs.Constant(f"{base}/weight_scale", wscale)
        cz = gs.Constant(f"{base}/weight_zero_point", np.zeros(wscale.shape, np.int8))
        wdq = gs.Variable(f"{base}/weight_DequantizeLinear_output", dtype=np.float32, shape=list(wt.shape))
        self.layer(op="DequantizeLinear", name=f"{base}/weight_DequantizeLinear", inputs=[cq, cs, cz],
                   outputs=[wdq], attrs={"axis": int(w.axis)})
        node.inputs[1] = wdq
        report["weights"][w.name] = int(w.axis)
        report["qdq_pairs"] += 1
        if ort_style and node.op == "Conv" and len(node.inputs) > 2 and isinstance(node.inputs[2], gs.Constant):
            sx = np.float32(report["activations"][w.data])
            bscale = (sx * wscale).astype(np.float32)
            bq = np.clip(np.rint(node.inputs[2].values / bscale), -2**31 + 1, 2**31 - 1).astype(np.int32)
            bdq = gs.Variable(f"{base}/bias_DequantizeLinear_output", dtype=np.float32, shape=[len(bq)])
            self.layer(op="DequantizeLinear", name=f"{base}/bias_DequantizeLinear",
                       inputs=[gs.Constant(f"{base}/bias_int32", bq), gs.Constant(f"{base}/bias_scale", bscale),
                               gs.Constant(f"{base}/bias_zero_point", np.zeros(bscale.shape, np.int32))],
                       outputs=[bdq], attrs={"axis": 0})
            node.inputs[2] = bdq
    if ort_style:
        for w in quantize:
            _quantize_output(self, by_name[w.name], amax, act_q, quantize_tensor, dequantize)
    return report


def _quantize_output(graph: Any, node: Any, amax: dict, act_q: dict, quantize_tensor, dequantize) -> None:
    """``ort`` placement: put a Q on ``node``'s output (one per tensor, shared with a quantized consumer's input
    Q) and give each consumer (and a graph output) its own DQ. Nothing happens when the output has no amax."""
    y = node.outputs[0]
    if y.name not in amax:
        return
    if y.name not in act_q:
        act_q[y.name] = quantize_tensor(y, float(amax[y.name]))
    q = act_q[y.name][0]
    consumers = [c for c in list(y.outputs) if c.op != "QuantizeLinear" or c.outputs[0] is not q]
    for i, c in enumerate(consumers):
        dq = dequantize(act_q[y.name], f"/out{i}")
        for j, t in enumerate(list(c.inputs)):
            if t is y:
                c.inputs[j] = dq
    if y in graph.outputs:  # a graph output keeps its float tensor: a DQ copy would change its name
        pass


def _safe(name: str) -> str:
    return name.rstrip("/") or "tensor"


def select_nodes(model: Any, audio_input: str | Iterable[str], audio_output: str,
                 exclude=()) -> tuple[list[WeightedNode], dict]:
    """Split the weighted ops into those to quantize and those kept in float.

    Args:
        model (onnx.ModelProto): Streaming FP32 model.
        audio_input (str | Iterable[str]): Contract audio input name, or every streaming input's name.
        audio_output (str): Contract audio output name.
        exclude (Iterable[str]): Extra node names to keep in float.
    Returns:
        tuple[list[WeightedNode], dict[str, str]]: nodes to quantize; kept-in-float node -> reason.
    Raises:
        UsageError: an ``exclude`` name is not a node of the graph, or not a weighted op (the message
            lists the weighted ops).
    """
    nodes = weighted_nodes(model)
    names = {w.name for w in nodes}
    all_names = {n.name for n in model.graph.node}
    kept = float_nodes(model, audio_input, audio_output)
    for e in exclude:
        if e not in all_names:
            raise UsageError(f"--exclude {e!r}: no node of that name (weighted nodes: {', '.join(sorted(names))})")
        if e not in names:
            raise UsageError(f"--exclude {e!r} is not a quantizable op ({'/'.join(WEIGHTED_OPS)} with constant "
                             f"weight); weighted nodes: {', '.join(sorted(names))}")
        kept.setdefault(e, "excluded by the user")
    return [w for w in nodes if w.name not in kept], kept
