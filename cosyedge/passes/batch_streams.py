"""Pass ``batch_streams``: a Scan that runs a batch-1 body once per stream becomes one batched run of that body.

A graph exported for batch 1 only (constant Reshape shapes with the batch baked in, the batch folded into another
axis: GTCRN's ``inter_cache`` holds ``batch * 33`` sub-bands on one axis) is adopted as a ``Scan`` over axis 0 of
every streamed input and state (:mod:`cosyedge.surgery.adopt.streams`): each stream runs alone, no GEMM sees more
than one row. This pass finds such a *map* Scan (every input scanned on axis 0, every output stacked on axis 0, no
loop-carried value, a body without further subgraphs) and writes its body once for any number of streams ``B``:

* **A batch fact per tensor** (as tract's ``StreamInfo`` carries a stream axis per tensor): ``axis`` = the dim
  that holds the batch, *outermost*: at batch ``B`` that dim has ``B * k`` entries (``k`` its size at batch 1),
  entry ``b * k + j`` being stream ``b``'s entry ``j``. ``k`` = 1 is a plain batch axis, ``k`` > 1 a folded
  one (``batch * 33``). ``None``: the tensor is the same for every stream (weights, constants). A scanned input
  ``x`` (one stream's slice) starts folded into its axis 0.
* **A rule per op kind** reads the facts of a node's inputs, asks for the batch where the op needs it, rewrites
  what depends on it and sets the facts of its outputs: elementwise ops broadcast (the batch where every
  stream-independent operand has size 1); a constant-shape ``Reshape`` gets ``-1`` on axis 0 with the batch
  outermost of everything (its batch-1 output shape otherwise); ``Conv``/``ConvTranspose``/``BatchNormalization``
  take it on axis 0, ``GRU``/``LSTM``/``RNN`` on their batch axis (so the sub-band GRU runs ``B * 33`` rows, as the
  original model does at batch ``B``) with an all-zero constant initial state dropped (its default);
  ``Gather``/``Slice``/``Pad``/``Concat``/``Squeeze``/reductions keep it off the axes they touch; a ``ScatterND``
  whose constant indices address the batch axis (index 0 throughout) scatters with the batch moved last.
* **Adapters** move the batch between axes when a rule asks for it elsewhere: one ``Reshape`` when only size-1
  dims lie between the two places, else ``Reshape`` (split ``B``) -> ``Transpose`` -> ``Reshape`` (merge).
  A ``Slice``/``Gather``/``Concat`` on the very axis the batch is folded into runs in **split form** instead (the
  batch as its own axis in front, the op one axis further, merged back): no Transpose of a state.
* **Copies the batch makes expensive** are written another way, each the same function: a ``ScatterND`` whose
  constant indices enumerate a box is ``Slice`` + ``Concat`` (a chain of them rebuilding a cache copies it once:
  the pieces are tracked and later Slices/Gathers read them); a ``Gather`` whose index rows are contiguous ranges
  (a sliding window) is Slices + ``Concat``; a one-value ``PRelu`` is ``LeakyRelu``; a stride-1
  ``ConvTranspose`` is the ``Conv`` it equals (GTCRN's one-frame dilated decoder convs: 1 output frame computed,
  not 11 scattered); two GRUs that share their attributes and input shape (GTCRN's grouped RNN: one GRU per
  channel group) run as one GRU with block-diagonal weights. GTCRN, 64 streams, one ONNX Runtime thread: 10.8 ms
  per tick against 0.7 ms per stream in the Scan (``docs/bench/bench_streams_gtcrn_batched.json``).

Anything it cannot prove batch-independent is refused in one line naming the node and the reason (an op without a
rule, a Reshape to a computed shape, a per-stream tensor joined with a constant one, ``Shape`` of a per-stream
tensor, a ScatterND whose indices write one stream's place with another's...). The rewritten model is then
**proved** before it is returned: :data:`PROOF_STREAMS` streams of real speech (the bundled demo recording, each
from another offset and gain) are streamed hop by hop for :data:`PROOF_HOPS` hops through the stored model (the
Scan: each stream alone) and through the rewritten one (one batched run), states carried; every output and state of
every stream must be bit-identical or at least :data:`MIN_PROOF_SNR_DB` dB from the Scan's. A refusal or a failed
proof raises (ArtifactError): :func:`cosyedge.passes.base.apply_passes` says it in one warning line and the stored
graph (the Scan over streams) runs.

Applied by :class:`~cosyedge.runtime.pool.StreamPool` with more than one stream and ``batch_rewrite``
(:data:`cosyedge.passes.POOL_PASSES`, any provider), hence by ``cosyedge serve`` and the Triton Python backend.

Source: ONNX operator specs (onnx.ai/onnx/operators: Scan, Reshape, ScatterND, GRU); the per-tensor stream fact and
per-op rules after sonos/tract ``pulse/src/fact.rs`` and ``pulse/src/ops/`` (design only).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.errors import ArtifactError
from cosyedge.passes.edit import DEFAULT_DOMAINS, copy_model, node_attrs, opset

onnx = lazy_import("onnx")

PROOF_STREAMS = 3
"""int: streams the proof runs at once (batch 3 against each stream alone in the Scan)."""
PROOF_HOPS = 48
"""int: hops of real speech the proof streams (GTCRN: 0.77 s)."""
MIN_PROOF_SNR_DB = 120.0
"""float: every output and state of every stream must be this close to the Scan's (or bit-identical)."""

ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Where", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "And", "Or", "Not", "Xor", "Mod",
    "Identity", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Relu", "LeakyRelu", "Elu",
    "Selu", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Erf", "Gelu", "Floor", "Ceil", "Round", "Sign",
    "Sin", "Cos", "Clip", "Cast", "Dropout", "IsNaN", "IsInf",
})
"""frozenset[str]: ops applied element by element with numpy broadcasting (every input, outputs the same shape)."""
REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                    "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
RECURRENT = frozenset({"GRU", "LSTM", "RNN"})
MAX_GATHER_RANGES = 8
"""int: a Gather whose constant index rows are contiguous ranges (a sliding window over an axis) is written as one
Slice per row (at most this many) joined by a Concat: ONNX Runtime's Gather copies element by element."""


class Refused(ArtifactError):
    """The body cannot be batched (the message says which node and why)."""


def _map_scans(graph: Any) -> list[tuple[Any, Any]]:
    """[(parent GraphProto, Scan NodeProto)] of every map Scan in ``graph`` and the bodies under it."""
    found = []
    for n in graph.node:
        if n.op_type != "Scan" or n.domain not in DEFAULT_DOMAINS:
            continue
        a = node_attrs(n)
        body = a["body"]
        nested = any(at.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                     for m in body.node for at in m.attribute)
        if nested:
            found += _map_scans(body)
            continue
        k = int(a["num_scan_inputs"])
        if (k == len(n.input) and not any(a.get("scan_input_axes") or []) and not any(a.get("scan_output_axes") or [])
                and not any(a.get("scan_input_directions") or []) and not any(a.get("scan_output_directions") or [])):
            found.append((graph, n))
    return found


class _Batcher:
    """The batched body being written: facts, batch-1 shapes, constants, new nodes."""

    def __init__(self, body: Any, shapes: dict[str, tuple], prefix: str, version: int):
        self.body, self.shapes, self.prefix, self.version = body, shapes, prefix, version
        self.consts = {t.name: onnx.numpy_helper.to_array(t) for t in body.initializer}
        self.fact: dict[str, int | None] = {t.name: None for t in body.initializer}
        self.nodes: list = []
        self.inits: list = []
        self._adapted: dict[tuple[str, int], str] = {}
        self.merged: dict[str, tuple[str, int]] = {}  # merge() outputs: (split-form tensor, axis)
        self.pieces: dict[str, tuple[int, list]] = {}  # scatter-box outputs: (axis, [(start, end, source, offset)])
        self._n = 0
        self.counts = collections.Counter()

    # ------------------------------------------------------------------ helpers
    def new(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}{what}_{self._n}"

    def const(self, what: str, a: np.ndarray) -> str:
        name = self.new(what)
        self.inits.append(onnx.numpy_helper.from_array(np.ascontiguousarray(a), name))
        self.consts[name], self.fact[name], self.shapes[name] = a, None, tuple(np.shape(a))
        return name

    def emit(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.new(op.lower())
        self.nodes.append(onnx.helper.make_node(op, inputs, [out], name=self.new(op), **attrs))
        return out

    def shape(self, name: str, node: Any) -> tuple:
        s = self.shapes.get(name)
        if s is None:
            raise Refused(f"node '{node.name}' ({node.op_type}): the batch-1 shape of '{name}' is not known")
        return s

    def value(self, name: str, node: Any, what: str) -> np.ndarray:
        if name not in self.consts:
            raise Refused(f"node '{node.name}' ({node.op_type}): its {what} '{name}' is computed at run time, so "
                          f"it cannot be proved the same for every stream")
        return self.consts[name]

    def need(self, name: str, axis: int) -> str:
        """``name`` with its batch on ``axis`` (outermost there): itself, or an adapter's output."""
        a = self.fact[name]
        if a == axis:
            return name
        key = (name, axis)
        if key in self._adapted:
            return self._adapted[key]
        s = list(self.shapes[name])
        crossed = s[min(a, axis):max(a, axis)]
        target = list(s)
        target[axis] = -1
        if all(d == 1 for d in crossed):  # only size-1 dims in between: the same memory, one Reshape
            out = self.emit("Reshape", [name, self.const("shape", np.array(target, np.int64))])
        else:
            split = s[:a] + [-1] + s[a:]
            x = self.emit("Reshape", [name, self.const("shape", np.array(split, np.int64))])
            order = [i for i in range(len(s) + 1) if i != a]
            order.insert(axis, a)
            x = self.emit("Transpose", [x], perm=order)
            out = self.emit("Reshape", [x, self.const("shape", np.array(target, np.int64))])
            self.counts["batch_moved"] += 1
        self.shapes[out] = tuple(s)
        self.fact[out] = axis
        self._adapted[key] = out
        return out

    def free_axis(self, name: str, avoid: set[int]) -> int:
        """An axis of ``name`` outside ``avoid`` to hold the batch: its current one when free, else a size-1 one,
        else the first free one."""
        s = self.shapes[name]
        a = self.fact[name]
        if a not in avoid:
            return a
        free = [i for i in range(len(s)) if i not in avoid]
        if not free:
            raise Refused(f"'{name}': every axis is touched by the op, none can hold the batch")
        return next((i for i in free if s[i] == 1), free[0])

    def axes_of(self, node: Any, index: int, attr: str) -> list[int] | None:
        """A node's axes list: its input ``index`` (a constant) or its attribute ``attr``; None when absent."""
        if len(node.input) > index and node.input[index]:
            return [int(v) for v in np.asarray(self.value(node.input[index], node, "axes")).reshape(-1)]
        a = node_attrs(node).get(attr)
        return None if a is None else [int(v) for v in a]

    # ------------------------------------------------------------------ the walk
    def run(self, inputs: list[str]) -> None:
        for name in inputs:
            self.fact[name] = 0
        merged: set[int] = set()
        nodes = list(self.body.node)
        for at, node in enumerate(nodes):
            if at in merged:
                self.counts["nodes"] += 1
                continue
            if node.op_type == "GRU" and node.domain in DEFAULT_DOMAINS:
                partner = _gru_partner(self, nodes, at, merged)
                if partner is not None:
                    _gru_merged(self, node, nodes[partner])
                    merged.add(partner)
                    self.counts["nodes"] += 1
                    continue
            if node.op_type == "Constant":
                self.nodes.append(node)
                t = next((a.t for a in node.attribute if a.name == "value"), None)
                if t is not None:
                    self.consts[node.output[0]] = onnx.numpy_helper.to_array(t)
                for o in node.output:
                    self.fact[o] = None
                continue
            for i in node.input:
                if i and i not in self.fact:
                    raise Refused(f"node '{node.name}' ({node.op_type}) reads '{i}' from outside its body")
            if not any(self.fact.get(i) is not None for i in node.input if i):
                self.nodes.append(node)  # the same for every stream
                for o in node.output:
                    self.fact[o] = None
                continue
            self.apply(node)
            self.counts["nodes"] += 1

    def apply(self, node: Any) -> None:
        """Batch one node whose inputs have their facts (its rule appends the nodes and sets its outputs' facts)."""
        rule = RULES.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
        if node.op_type in ELEMENTWISE and node.domain in DEFAULT_DOMAINS:
            rule = _elementwise
        if rule is None:
            raise Refused(f"node '{node.name}' ({node.op_type}) has no batching rule")
        rule(self, node)

    def split(self, name: str) -> str:
        """``name`` (batch folded outermost into its axis ``a``) viewed with the batch as its own axis ``a`` and the
        batch-1 dim after it (rank + 1; the same memory)."""
        s, a = list(self.shapes[name]), self.fact[name]
        return self.emit("Reshape", [name, self.const("shape", np.array(s[:a] + [-1] + s[a:], np.int64))])

    def merge(self, x: str, out: str, axis: int) -> None:
        """``out`` = ``x`` (the batch as its own axis ``axis``, the batch-1 dims of ``out`` after it) with the batch
        folded outermost into ``out``'s axis ``axis``."""
        t = list(self.shapes[out])
        t[axis] = -1
        self.emit("Reshape", [x, self.const("shape", np.array(t, np.int64))], out=out)
        self.fact[out] = axis
        self.merged[out] = (x, axis)
        self.counts["split_form"] += 1


def _copy(node: Any, inputs: list[str]) -> Any:
    n = onnx.NodeProto()
    n.CopyFrom(node)
    del n.input[:]
    n.input.extend(inputs)
    return n


def _elementwise(b: _Batcher, node: Any) -> None:
    ins = [i for i in node.input]
    out_s = b.shape(node.output[0], node)
    rank = len(out_s)
    shapes = {i: b.shape(i, node) for i in ins if i}

    def fits(c: int) -> bool:
        for i in ins:
            if not i:
                continue
            s = shapes[i]
            ci = c - (rank - len(s))
            if b.fact[i] is None:
                if ci >= 0 and s[ci] != 1:
                    return False
            elif ci < 0 or s[ci] != out_s[c]:
                return False
        return True

    first = next(i for i in ins if i and b.fact[i] is not None)
    natural = b.fact[first] + rank - len(shapes[first])
    c = next((c for c in [natural] + list(range(rank)) if fits(c)), None)
    if c is None:
        raise Refused(f"node '{node.name}' ({node.op_type}): a stream-independent operand spans every axis the "
                      f"batch could take (shapes {[list(shapes[i]) for i in ins if i]})")
    new = [b.need(i, c - (rank - len(shapes[i]))) if i and b.fact[i] is not None else i for i in ins]
    slope = b.consts.get(ins[1]) if node.op_type == "PRelu" and len(ins) > 1 else None
    if slope is not None and slope.size == 1 and slope.dtype == np.float32 and b.fact[ins[1]] is None:
        # one slope for every element: LeakyRelu (the same max(x, 0) + slope * min(x, 0), without broadcasting)
        b.emit("LeakyRelu", [new[0]], out=node.output[0], alpha=float(slope.reshape(-1)[0]))
        b.fact[node.output[0]] = c
        b.counts["prelu_leaky"] += 1
        return
    b.nodes.append(_copy(node, new))
    for o in node.output:
        b.fact[o] = c


def _batch_norm(b: _Batcher, node: Any) -> None:
    if any(b.fact.get(i) is not None for i in node.input[1:] if i) or len([o for o in node.output if o]) > 1:
        raise Refused(f"node '{node.name}' (BatchNormalization): per-stream statistics or training outputs")
    b.nodes.append(_copy(node, [b.need(node.input[0], 0)] + list(node.input[1:])))
    b.fact[node.output[0]] = 0


def _conv(b: _Batcher, node: Any) -> None:
    if any(b.fact.get(i) is not None for i in node.input[1:] if i):
        raise Refused(f"node '{node.name}' ({node.op_type}): its weight differs per stream")
    x = b.need(node.input[0], 0)
    if node.op_type == "ConvTranspose" and _transposed_as_conv(b, node, x):
        return
    b.nodes.append(_copy(node, [x] + list(node.input[1:])))
    b.fact[node.output[0]] = 0


def _transposed_as_conv(b: _Batcher, node: Any, x: str) -> bool:
    """A stride-1 ``ConvTranspose`` as the ``Conv`` it equals (kernel flipped, in/out channels swapped per group,
    pads ``dilation * (kernel - 1) - pad``): ONNX Runtime's ConvTranspose scatters every input position (a
    one-frame causal window of 11 frames: 11 times the work of the one output frame a Conv computes). False when
    it does not apply (strides, output padding or shape, auto_pad, a pad larger than the dilated kernel)."""
    a = node_attrs(node)
    w = b.consts.get(node.input[1])
    if w is None or w.dtype != np.float32 or w.ndim < 3:
        return False
    k = list(w.shape[2:])
    dil = list(a.get("dilations") or [1] * len(k))
    pads = list(a.get("pads") or [0] * (2 * len(k)))
    if (any(v != 1 for v in a.get("strides") or [1]) or any(a.get("output_padding") or []) or a.get("output_shape")
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or list(a.get("kernel_shape") or k) != k):
        return False
    span = [d * (kk - 1) for d, kk in zip(dil, k)]
    new_pads = [span[i % len(k)] - p for i, p in enumerate(pads)]
    if min(new_pads) < 0:
        return False
    g = int(a.get("group", 1))
    cig, cog = w.shape[0] // g, w.shape[1]
    wc = w.reshape(g, cig, cog, *k).swapaxes(1, 2)
    wc = np.flip(wc, axis=tuple(range(3, 3 + len(k)))).reshape(g * cog, cig, *k)
    ins = [x, b.const("weight", np.ascontiguousarray(wc))] + list(node.input[2:3])
    b.emit("Conv", ins, out=node.output[0], dilations=dil, group=g, kernel_shape=k, pads=new_pads,
           strides=[1] * len(k))
    b.fact[node.output[0]] = 0
    b.counts["deconv_as_conv"] += 1
    return True


def _reshape(b: _Batcher, node: Any) -> None:
    if b.fact.get(node.input[1]) is not None:
        raise Refused(f"node '{node.name}' (Reshape): its shape is per stream")
    b.value(node.input[1], node, "shape")
    x = node.input[0]
    s_in, s_out = b.shape(x, node), b.shape(node.output[0], node)
    if not s_out or 0 in s_out or 0 in s_in:
        raise Refused(f"node '{node.name}' (Reshape): a scalar or empty output {list(s_out)} cannot hold the batch")
    a = b.fact[x]
    if not all(d == 1 for d in s_in[:a]):  # the batch must be outermost of the whole tensor
        x = b.need(x, 0)
    shape = b.const("shape", np.array([-1, *s_out[1:]], np.int64))
    b.nodes.append(_copy(node, [x, shape]))
    b.fact[node.output[0]] = 0
    b.counts["reshape"] += 1


def _transpose(b: _Batcher, node: Any) -> None:
    rank = len(b.shape(node.input[0], node))
    perm = node_attrs(node).get("perm") or list(range(rank))[::-1]
    b.nodes.append(node)
    b.fact[node.output[0]] = list(perm).index(b.fact[node.input[0]])


def _unsqueeze(b: _Batcher, node: Any) -> None:
    axes = b.axes_of(node, 1, "axes")
    r_out = len(b.shape(node.output[0], node))
    axes = sorted(a % r_out for a in axes)
    kept = [i for i in range(r_out) if i not in axes]
    b.nodes.append(node)
    b.fact[node.output[0]] = kept[b.fact[node.input[0]]]


def _squeeze(b: _Batcher, node: Any) -> None:
    x = node.input[0]
    s = b.shape(x, node)
    axes = b.axes_of(node, 1, "axes")
    axes = sorted(a % len(s) for a in axes) if axes is not None else [i for i, d in enumerate(s) if d == 1]
    c = b.free_axis(x, set(axes))
    x = b.need(x, c)
    if b.version >= 13:
        b.emit("Squeeze", [x, b.const("axes", np.array(axes, np.int64))], out=node.output[0])
    else:
        b.emit("Squeeze", [x], out=node.output[0], axes=axes)
    b.fact[node.output[0]] = c - sum(a < c for a in axes)


def _slice(b: _Batcher, node: Any) -> None:
    if _slice_of_pieces(b, node):
        return
    x = node.input[0]
    s = b.shape(x, node)
    if b.version >= 10:
        for i in node.input[1:]:
            if i and b.fact.get(i) is not None:
                raise Refused(f"node '{node.name}' (Slice): its bounds are per stream")
        starts = b.value(node.input[1], node, "starts")
        axes = b.axes_of(node, 3, "axes")
        axes = axes if axes is not None else list(range(len(np.asarray(starts).reshape(-1))))
    else:
        axes = node_attrs(node).get("axes") or list(range(len(node_attrs(node)["starts"])))
    axes = {v % len(s) for v in axes}
    a = b.fact[x]
    if a in axes and b.version >= 10 and len(b.shape(node.output[0], node)) == len(s):
        # slicing the axis the batch is folded into: slice the batch-1 dim after the batch, in split form
        ins = list(node.input) + [""] * (5 - len(node.input))
        given = b.axes_of(node, 3, "axes")
        n_axes = np.asarray(b.value(ins[1], node, "starts")).size
        given = [v % len(s) for v in (given if given is not None else range(n_axes))]
        new_axes = b.const("axes", np.array([v + (v >= a) for v in given], np.int64))
        y = b.emit("Slice", [b.split(x), ins[1], ins[2], new_axes] + ([ins[4]] if ins[4] else []))
        b.merge(y, node.output[0], a)
        return
    c = b.free_axis(x, axes)
    b.nodes.append(_copy(node, [b.need(x, c)] + list(node.input[1:])))
    b.fact[node.output[0]] = c


def _gather(b: _Batcher, node: Any) -> None:
    x, idx = node.input[0], node.input[1]
    if b.fact.get(idx) is not None:
        raise Refused(f"node '{node.name}' (Gather): its indices are per stream")
    s = b.shape(x, node)
    g = int(node_attrs(node).get("axis", 0)) % len(s)
    idx_rank = len(b.shape(idx, node))
    out_s = b.shape(node.output[0], node)
    if x in b.pieces and b.pieces[x][0] == g and idx in b.consts and np.asarray(b.consts[idx]).ndim == 0:
        i = int(b.consts[idx]) % s[g]
        (s0, _e0, src, off), = _cut(b.pieces[x][1], i, i + 1)
        b.apply(onnx.helper.make_node("Gather", [src, b.const("index", np.array(i - s0 + off, np.int64))],
                                      [node.output[0]], name=b.new("Gather"), axis=g))
        b.counts["gather_of_piece"] += 1
        return
    rows = np.asarray(b.consts[idx]) if idx in b.consts else None
    if (rows is not None and rows.ndim == 2 and 1 < rows.shape[0] <= MAX_GATHER_RANGES and b.fact[x] != g
            and np.all(rows == rows[:, :1] + np.arange(rows.shape[1])) and rows.min() >= 0
            and rows.max() < s[g]):
        # each row a contiguous range (a sliding window): Slices joined on a new axis, no per-element gather
        parts = []
        for r in rows[:, 0]:
            sl, un = b.new("window"), b.new("window")
            b.shapes[sl] = tuple(s[:g]) + (rows.shape[1],) + tuple(s[g + 1:])
            b.shapes[un] = tuple(s[:g]) + (1, rows.shape[1]) + tuple(s[g + 1:])
            b.apply(onnx.helper.make_node("Slice", [x, b.const("starts", np.array([r], np.int64)),
                                                    b.const("ends", np.array([r + rows.shape[1]], np.int64)),
                                                    b.const("axes", np.array([g], np.int64))], [sl],
                                          name=b.new("Slice")))
            b.apply(onnx.helper.make_node("Unsqueeze", [sl, b.const("axes", np.array([g], np.int64))], [un],
                                          name=b.new("Unsqueeze")) if b.version >= 13 else
                    onnx.helper.make_node("Unsqueeze", [sl], [un], name=b.new("Unsqueeze"), axes=[g]))
            parts.append(un)
        b.apply(onnx.helper.make_node("Concat", parts, [node.output[0]], name=b.new("Concat"), axis=g))
        b.counts["gather_windows"] += 1
        return
    if b.fact[x] == g and len(out_s) > g:  # gather inside each stream's block of the folded axis: split form
        y = b.emit("Gather", [b.split(x), idx], axis=g + 1)
        b.merge(y, node.output[0], g)
        return
    c = b.free_axis(x, {g})
    b.nodes.append(_copy(node, [b.need(x, c), idx]))
    b.fact[node.output[0]] = c if c < g else c - 1 + idx_rank


def _concat(b: _Batcher, node: Any) -> None:
    ins = [i for i in node.input if i]
    if any(b.fact[i] is None for i in ins):
        raise Refused(f"node '{node.name}' (Concat) joins a per-stream tensor with a stream-independent one")
    rank = len(b.shape(ins[0], node))
    ax = int(node_attrs(node)["axis"]) % rank
    if all(b.fact[i] == ax for i in ins):  # joining along the folded axis: join each stream's blocks
        y = b.emit("Concat", [b.split(i) for i in ins], axis=ax + 1)
        b.merge(y, node.output[0], ax)
        return
    c = b.free_axis(ins[0], {ax})
    b.nodes.append(_copy(node, [b.need(i, c) for i in ins]))
    b.fact[node.output[0]] = c


def _pad(b: _Batcher, node: Any) -> None:
    x = node.input[0]
    s = b.shape(x, node)
    if b.version >= 11:
        if any(b.fact.get(i) is not None for i in node.input[1:] if i):
            raise Refused(f"node '{node.name}' (Pad): its pads or value are per stream")
        pads = [int(v) for v in np.asarray(b.value(node.input[1], node, "pads")).reshape(-1)]
        axes = b.axes_of(node, 3, "axes") if len(node.input) > 3 else None
    else:
        pads, axes = list(node_attrs(node)["pads"]), None
    axes = [a % len(s) for a in axes] if axes is not None else list(range(len(s)))
    padded = {a for k, a in enumerate(axes) if pads[k] or pads[k + len(axes)]}
    c = b.free_axis(x, padded)
    b.nodes.append(_copy(node, [b.need(x, c)] + list(node.input[1:])))
    b.fact[node.output[0]] = c


def _reduce(b: _Batcher, node: Any) -> None:
    x = node.input[0]
    s = b.shape(x, node)
    a = node_attrs(node)
    from_input = node.op_type == "ReduceSum" and b.version >= 13 or b.version >= 18
    axes = b.axes_of(node, 1, "axes") if from_input else a.get("axes")
    if not axes:
        raise Refused(f"node '{node.name}' ({node.op_type}) reduces every axis, the batch's too")
    axes = sorted(v % len(s) for v in axes)
    c = b.free_axis(x, set(axes))
    b.nodes.append(_copy(node, [b.need(x, c)] + list(node.input[1:])))
    b.fact[node.output[0]] = c if a.get("keepdims", 1) else c - sum(v < c for v in axes)


def _matmul(b: _Batcher, node: Any) -> None:
    a_name, w_name = node.input[0], node.input[1]
    if b.fact[a_name] is None or b.fact.get(w_name) is not None:
        raise Refused(f"node '{node.name}' (MatMul): only a per-stream left operand times a stream-independent "
                      f"right one is batched")
    sa, sw = b.shape(a_name, node), b.shape(w_name, node)
    if len(sa) < 2:
        raise Refused(f"node '{node.name}' (MatMul): a 1-D per-stream operand has no row axis for the batch")
    rank = max(len(sa), len(sw))
    avoid = {len(sa) - 1} | {i for i in range(len(sa) - 2) if (i + rank - len(sa)) - (rank - len(sw)) >= 0
                             and sw[(i + rank - len(sa)) - (rank - len(sw))] != 1}
    c = b.free_axis(a_name, avoid)
    b.nodes.append(_copy(node, [b.need(a_name, c), w_name]))
    b.fact[node.output[0]] = c + rank - len(sa)


def _recurrent(b: _Batcher, node: Any) -> None:
    a = node_attrs(node)
    layout = int(a.get("layout", 0))
    ins = list(node.input) + [""] * (8 - len(node.input))
    if any(b.fact.get(i) is not None for i in ins[1:4] if i) or (ins[4] and ins[4] not in b.consts):
        raise Refused(f"node '{node.name}' ({node.op_type}): per-stream weights or sequence lengths")
    batch_x, batch_h = (0, 0) if layout else (1, 1)
    if b.fact[ins[0]] is None:
        raise Refused(f"node '{node.name}' ({node.op_type}): a stream-independent input with a per-stream state")
    new = [b.need(ins[0], batch_x)] + ins[1:5]
    for k in (5, 6):  # initial_h, initial_c
        i = ins[k]
        if not i or b.fact.get(i) is not None:
            new.append(b.need(i, batch_h) if i else "")
            continue
        v = b.consts.get(i)
        if v is None or np.any(v != 0):
            raise Refused(f"node '{node.name}' ({node.op_type}): its initial state '{i}' is the same for every "
                          f"stream and not all zeros (it would need repeating per stream)")
        new.append("")  # all zeros: the op's default, at any batch
    if ins[7] and b.fact.get(ins[7]) is not None:
        raise Refused(f"node '{node.name}' (LSTM): per-stream peepholes")
    new.append(ins[7])
    while new and not new[-1]:
        new.pop()
    b.nodes.append(_copy(node, new))
    outs = list(node.output)
    if outs and outs[0]:
        b.fact[outs[0]] = 0 if layout else 2
    for o in outs[1:]:
        if o:
            b.fact[o] = 0 if layout else 1
    b.counts["recurrent"] += 1


def _gru_key(b: _Batcher, node: Any) -> tuple | None:
    """What two GRUs must share to run as one (attributes, input shape and fact, kind of initial state); None: this
    GRU cannot be merged (weights computed at run time, sequence lengths, a stream-independent input)."""
    ins = list(node.input) + [""] * (6 - len(node.input))
    if (any(i not in b.consts for i in ins[1:3]) or (ins[3] and ins[3] not in b.consts) or ins[4]
            or len(node.input) > 6 or b.fact.get(ins[0]) is None):
        return None
    a = node_attrs(node)
    if int(a.get("layout", 0)) or a.get("activations") or a.get("clip") is not None:
        return None
    h = ins[5]
    init = "none" if not h else "batched" if b.fact.get(h) is not None else (
        "zero" if h in b.consts and not np.any(b.consts[h]) else None)
    if init is None:
        return None
    return (a.get("direction", b"forward"), int(a["hidden_size"]), int(a.get("linear_before_reset", 0)),
            tuple(b.shapes.get(ins[0], ())), init)


def _gru_partner(b: _Batcher, nodes: list, at: int, taken: set) -> int | None:
    """Index of a later GRU of the body that can run merged with ``nodes[at]``: the same key, every input already
    known here (so it does not depend on this GRU). GTCRN splits its channels into two groups, each its own GRU
    (its grouped RNN): two tiny GRUs per call where one with both groups side by side does the same work."""
    key = _gru_key(b, nodes[at])
    if key is None:
        return None
    for k in range(at + 1, len(nodes)):
        n = nodes[k]
        if (k not in taken and n.op_type == "GRU" and n.domain in DEFAULT_DOMAINS
                and all(not i or i in b.fact for i in n.input) and _gru_key(b, n) == key):
            return k
    return None


def _gru_merged(b: _Batcher, ga: Any, gb: Any) -> None:
    """Run GRUs ``ga`` and ``gb`` (:func:`_gru_partner`) as one with both hidden states side by side: inputs and
    initial states joined on their last axis, weights block-diagonal per gate (the groups never mix: the same sums
    plus exact zeros), outputs sliced back apart."""
    hid = int(node_attrs(ga)["hidden_size"])
    wa, wb = b.consts[ga.input[1]], b.consts[gb.input[1]]
    ra, rb = b.consts[ga.input[2]], b.consts[gb.input[2]]
    d, inp = wa.shape[0], wa.shape[2]
    zero_b = np.zeros((d, 6 * hid), np.float32)
    ba = b.consts[ga.input[3]] if len(ga.input) > 3 and ga.input[3] else zero_b
    bb = b.consts[gb.input[3]] if len(gb.input) > 3 and gb.input[3] else zero_b
    w = np.zeros((d, 6 * hid, 2 * inp), np.float32)
    r = np.zeros((d, 6 * hid, 2 * hid), np.float32)
    bias = np.zeros((d, 12 * hid), np.float32)
    for g in range(3):
        rows_a, rows_b, src = slice(2 * g * hid, (2 * g + 1) * hid), slice((2 * g + 1) * hid, (2 * g + 2) * hid), \
            slice(g * hid, (g + 1) * hid)
        w[:, rows_a, :inp], w[:, rows_b, inp:] = wa[:, src], wb[:, src]
        r[:, rows_a, :hid], r[:, rows_b, hid:] = ra[:, src], rb[:, src]
        for off in (0, 3):  # Wb then Rb
            bias[:, off * 2 * hid:][:, rows_a], bias[:, off * 2 * hid:][:, rows_b] = \
                ba[:, off * hid:][:, src], bb[:, off * hid:][:, src]

    def joined(xa: str, xb: str, what: str) -> str:
        out = b.new(what)
        s = b.shapes[xa]
        b.shapes[out] = tuple(s[:-1]) + (2 * s[-1],)
        b.apply(onnx.helper.make_node("Concat", [xa, xb], [out], name=b.new("Concat"), axis=len(s) - 1))
        return out

    x = joined(ga.input[0], gb.input[0], "gru_x")
    h = ""
    if len(ga.input) > 5 and ga.input[5] and b.fact.get(ga.input[5]) is not None:
        h = joined(ga.input[5], gb.input[5], "gru_h")
    attrs = {k: v for k, v in node_attrs(ga).items() if k != "hidden_size"}
    outs = [b.new("gru_y") if o else "" for o in list(ga.output) + [""] * (2 - len(ga.output))]
    node = onnx.helper.make_node("GRU", [x, b.const("W", w), b.const("R", r), b.const("B", bias), "", h], outs,
                                 name=b.new("GRU"), hidden_size=2 * hid, **attrs)
    for k, o in enumerate(outs):
        if o:
            s = b.shapes[ga.output[k]] if k < len(ga.output) and ga.output[k] else b.shapes[gb.output[k]]
            b.shapes[o] = tuple(s[:-1]) + (2 * hid,)
    b.apply(node)
    for k, o in enumerate(outs):
        for g, part in ((ga, 0), (gb, 1)):
            name = g.output[k] if k < len(g.output) else ""
            if not o or not name:
                continue
            axis = len(b.shapes[o]) - 1
            b.apply(onnx.helper.make_node("Slice", [o, b.const("starts", np.array([part * hid], np.int64)),
                                                    b.const("ends", np.array([(part + 1) * hid], np.int64)),
                                                    b.const("axes", np.array([axis], np.int64))], [name],
                                          name=b.new("Slice")))
    b.counts["gru_merged"] += 1


def _scatter_nd(b: _Batcher, node: Any) -> None:
    data, idx, upd = node.input[0], node.input[1], node.input[2]
    if b.fact.get(idx) is not None:
        raise Refused(f"node '{node.name}' (ScatterND): its indices are per stream")
    if b.fact[data] is None or b.fact[upd] is None:
        raise Refused(f"node '{node.name}' (ScatterND) writes stream-independent values into per-stream ones (or "
                      f"the reverse)")
    sd, si = b.shape(data, node), b.shape(idx, node)
    k = si[-1]
    qi = len(si) - 1
    if idx in b.consts and not node_attrs(node).get("reduction") and _scatter_box(b, node):
        return
    a = b.fact[data]
    if a < k and len(sd) > k:  # move it off the addressed axes when the slices have one
        a = b.free_axis(data, set(range(k)))
        data = b.need(data, a)
    if a >= k:  # the batch is inside the slices the indices address: update rows carry it at the same place
        b.nodes.append(_copy(node, [data, idx, b.need(upd, qi + a - k)]))
        b.fact[node.output[0]] = a
        return
    # the indices address the batch axis: they must write stream 0's place of a plain batch axis
    indices = np.asarray(b.value(idx, node, "indices"))
    if sd[a] != 1 or np.any(indices[..., a] != 0):
        raise Refused(f"node '{node.name}' (ScatterND): its indices address the batch axis {a} (of {list(sd)}) "
                      f"with other values than 0, so they would write one stream into another")
    su = b.shape(upd, node)
    u = next((i for i in range(qi) if si[i] == 1 and su[i] == 1), None)
    if u is None:
        raise Refused(f"node '{node.name}' (ScatterND): its updates have no size-1 index axis to carry the batch")
    upd = b.need(upd, u)
    rd, ru = len(sd), len(su)
    to_last = [i for i in range(rd) if i != a] + [a]
    dt = b.emit("Transpose", [data], perm=to_last)
    ut = b.emit("Transpose", [upd], perm=[i for i in range(ru) if i != u] + [u])
    new_idx = np.take(np.delete(indices, a, axis=-1), 0, axis=u)
    y = b.emit("ScatterND", [dt, b.const("indices", new_idx.astype(np.int64)), ut],
               **{k2: v for k2, v in node_attrs(node).items() if k2 == "reduction"})
    b.emit("Transpose", [y], out=node.output[0], perm=[to_last.index(i) for i in range(rd)])
    b.fact[node.output[0]] = a
    b.counts["scatter_nd"] += 1


def _scatter_box(b: _Batcher, node: Any) -> bool:
    """A ScatterND whose constant indices enumerate a box (every index dim one axis of the data, in order, each a
    contiguous range, all but one covering their axis) as Slice + Concat along that axis, batched by their rules.
    False (nothing written) when the indices are not such a box."""
    data, idx, upd = node.input[0], node.input[1], node.input[2]
    sd = list(b.shape(data, node))
    ind = np.asarray(b.consts[idx])
    k = ind.shape[-1]
    box = list(ind.shape[:-1])
    lo = [int(v) for v in ind.reshape(-1, k)[0]] if ind.size else []
    if not ind.size or len(box) != k:
        return False
    grid = np.stack(np.meshgrid(*[lo[j] + np.arange(box[j]) for j in range(k)], indexing="ij"), axis=-1)
    if grid.shape != ind.shape or np.any(grid != ind) or any(lo[j] < 0 or lo[j] + box[j] > sd[j] for j in range(k)):
        return False
    partial = [j for j in range(k) if box[j] != sd[j]]
    if len(partial) > 1:
        return False
    if not partial:  # the updates replace the whole tensor
        out = node.output[0]
        b.apply(onnx.helper.make_node("Identity", [upd], [out], name=b.new("scatter_all")))
        b.counts["scatter_box"] += 1
        return True
    p = partial[0]
    hi = lo[p] + box[p]
    axis, base = b.pieces.get(data, (p, None))
    if base is None or axis != p:
        base = [(0, sd[p], data, 0)]
    pieces = _cut(base, 0, lo[p]) + [(lo[p], hi, upd, 0)] + _cut(base, hi, sd[p])
    ins = []
    for start, end, src, off in pieces:
        whole = off == 0 and end - start == b.shapes[src][p]
        if whole:
            ins.append(src)
            continue
        name = b.new("scatter_keep")
        b.shapes[name] = tuple(sd[:p] + [end - start] + sd[p + 1:])
        b.apply(onnx.helper.make_node("Slice", [src, b.const("starts", np.array([off], np.int64)),
                                                b.const("ends", np.array([off + end - start], np.int64)),
                                                b.const("axes", np.array([p], np.int64))], [name],
                                      name=b.new("Slice")))
        ins.append(name)
    b.apply(onnx.helper.make_node("Concat", ins, [node.output[0]], name=b.new("Concat"), axis=p))
    b.pieces[node.output[0]] = (p, pieces)
    b.counts["scatter_box"] += 1
    return True


def _cut(pieces: list, start: int, end: int) -> list:
    """The parts of ``pieces`` ([(start, end, source, offset)], covering an axis in order) inside [start, end)."""
    out = []
    for s0, e0, src, off in pieces:
        a, e = max(s0, start), min(e0, end)
        if e > a:
            out.append((a, e, src, off + a - s0))
    return out


def _slice_of_pieces(b: _Batcher, node: Any) -> bool:
    """A one-axis step-1 Slice of a scatter-box output that lies inside one of its pieces, read from that piece's
    source instead (so a chain of box ScatterNDs copies the cache once, not once per ScatterND). False: not such."""
    x = node.input[0]
    if x not in b.pieces or b.version < 10 or len(node.input) < 4 or any(
            i not in b.consts for i in node.input[1:] if i):
        return False
    p, pieces = b.pieces[x]
    starts, ends, axes = (np.asarray(b.consts[node.input[k]]).reshape(-1) for k in (1, 2, 3))
    steps = np.asarray(b.consts[node.input[4]]).reshape(-1) if len(node.input) > 4 and node.input[4] else [1]
    n = b.shapes[x][p]
    if len(axes) != 1 or int(axes[0]) % len(b.shapes[x]) != p or int(steps[0]) != 1:
        return False
    lo = int(starts[0]) + n if int(starts[0]) < 0 else min(int(starts[0]), n)
    hi = int(ends[0]) + n if int(ends[0]) < 0 else min(int(ends[0]), n)
    part = _cut(pieces, lo, hi)
    if len(part) != 1 or hi <= lo:
        return False
    s0, e0, src, off = part[0]
    if off == 0 and e0 - s0 == b.shapes[src][p]:
        b.apply(onnx.helper.make_node("Identity", [src], [node.output[0]], name=b.new("piece")))
    else:
        b.apply(onnx.helper.make_node("Slice", [src, b.const("starts", np.array([off], np.int64)),
                                                b.const("ends", np.array([off + e0 - s0], np.int64)),
                                                b.const("axes", np.array([p], np.int64))], [node.output[0]],
                                      name=b.new("Slice")))
    b.counts["slice_of_piece"] += 1
    return True


def _qdq(b: _Batcher, node: Any) -> None:
    """QuantizeLinear / DequantizeLinear: elementwise with a per-tensor scale; per-axis (``axis``, a 1-D scale), the
    batch kept off that axis."""
    x = node.input[0]
    if any(b.fact.get(i) is not None for i in node.input[1:] if i):
        raise Refused(f"node '{node.name}' ({node.op_type}): a per-stream scale or zero point")
    s = b.shape(x, node)
    scale = b.shapes.get(node.input[1], ())
    avoid = {int(node_attrs(node).get("axis", 1)) % len(s)} if int(np.prod(scale or (1,))) > 1 else set()
    c = b.free_axis(x, avoid)
    b.nodes.append(_copy(node, [b.need(x, c)] + list(node.input[1:])))
    b.fact[node.output[0]] = c


RULES = {"QuantizeLinear": _qdq, "DequantizeLinear": _qdq, "BatchNormalization": _batch_norm, "Conv": _conv,
         "ConvTranspose": _conv, "Reshape": _reshape, "Transpose": _transpose, "Unsqueeze": _unsqueeze,
         "Squeeze": _squeeze, "Slice": _slice, "Gather": _gather, "Concat": _concat, "Pad": _pad, "MatMul": _matmul,
         "ScatterND": _scatter_nd, **{op: _reduce for op in REDUCE}, **{op: _recurrent for op in RECURRENT}}
"""dict[str, callable]: the rule of each op kind (:data:`ELEMENTWISE` ops share one); an op without a rule is
refused."""


def _body_shapes(body: Any, model: Any) -> dict[str, tuple]:
    """Batch-1 shapes of every tensor of ``body`` (as its own model): ONNX inference, then one run on zeros."""
    from cosyedge.passes.shapes import known_shapes

    m = onnx.helper.make_model(body, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    names = [o for n in body.node for o in n.output if o]
    dims = {}
    for vi in body.input:
        d = [x.dim_value if x.HasField("dim_value") else None for x in vi.type.tensor_type.shape.dim]
        if None in d:
            raise Refused(f"body input '{vi.name}' has no fixed batch-1 shape")
        dims[vi.name] = d
    shapes = known_shapes(m, names, dims)
    shapes.update({k: tuple(v) for k, v in dims.items()})
    for t in body.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def batch_scan(parent: Any, scan: Any, model: Any) -> dict[str, int]:
    """In place: replace the map ``scan`` (NodeProto in ``parent``, a GraphProto) by its body batched.

    Raises:
        Refused: a node of the body cannot be batched (named, with the reason).
    """
    body = node_attrs(scan)["body"]
    prefix = f"{scan.name or 'scan'}/batched/"
    shapes = _body_shapes(body, model)
    # inline names: every body tensor gets the prefix (no clash with the enclosing scopes)
    ren = {}
    for t in body.initializer:
        ren[t.name] = prefix + t.name
    for n in body.node:
        for o in n.output:
            if o:
                ren[o] = prefix + o
    for vi in body.input:
        ren[vi.name] = prefix + vi.name
    b = _Batcher(_renamed(body, ren), {ren.get(k, k): v for k, v in shapes.items()}, prefix + "bs/",
                 opset(model))
    pre = []
    for outer, vi in zip(scan.input, body.input):  # (B, *slice) -> slice with B folded into axis 0
        s = shapes[vi.name]
        if not s:
            raise Refused(f"body input '{vi.name}' is a scalar per stream: no axis to hold the batch")
        pre.append(onnx.helper.make_node("Reshape", [outer, b.const("shape", np.array([-1, *s[1:]], np.int64))],
                                         [ren[vi.name]], name=b.new("unscan")))
    b.run([ren[vi.name] for vi in body.input])
    post, wired = [], set()
    for outer, vo in zip(scan.output, body.output):
        name = ren.get(vo.name, vo.name)
        if b.fact.get(name) is None:
            raise Refused(f"body output '{vo.name}' is the same for every stream (it would need repeating)")
        s = b.shapes[name]
        split = b.merged.get(name)
        if split is not None and split[1] == 0 and outer not in wired:
            # the split-form tensor is already (B, *s): its producer writes the Scan's output itself
            producer = next(n for n in b.nodes if split[0] in n.output)
            producer.output[list(producer.output).index(split[0])] = outer
            for n in b.nodes:
                n.input[:] = [outer if i == split[0] else i for i in n.input]
            wired.add(outer)
            continue
        x = b.need(name, 0)
        post.append(onnx.helper.make_node("Reshape", [x, b.const("shape", np.array([-1, *s], np.int64))], [outer],
                                          name=b.new("rescan")))
    new_nodes = _live(pre + b.nodes + post, set(scan.output))
    at = list(parent.node).index(scan)
    nodes = list(parent.node)
    nodes[at:at + 1] = new_nodes
    del parent.node[:]
    parent.node.extend(nodes)
    used = {i for n in new_nodes for i in n.input}
    parent.initializer.extend([t for t in [_renamed_tensor(t, ren) for t in body.initializer] + b.inits
                               if t.name in used])
    return dict(b.counts)


def _live(nodes: list, outputs: set[str]) -> list:
    """``nodes`` without those whose outputs nothing reads (a cache copy the pieces made unneeded)."""
    used, keep = set(outputs), []
    for n in reversed(nodes):
        if any(o in used for o in n.output if o):
            keep.append(n)
            used.update(i for i in n.input if i)
    return keep[::-1]


def _renamed(body: Any, ren: dict[str, str]) -> Any:
    g = onnx.GraphProto()
    g.CopyFrom(body)
    for n in g.node:
        for k, i in enumerate(n.input):
            n.input[k] = ren.get(i, i)
        for k, o in enumerate(n.output):
            n.output[k] = ren.get(o, o)
        n.name = ren.get(n.name, (body.name + "/" if body.name else "") + n.name)
    for t in g.initializer:
        t.name = ren.get(t.name, t.name)
    return g


def _renamed_tensor(t: Any, ren: dict[str, str]) -> Any:
    c = onnx.TensorProto()
    c.CopyFrom(t)
    c.name = ren.get(t.name, t.name)
    return c


def batch_streams(model: Any) -> tuple[Any, dict[str, int]]:
    """A copy of ``model`` with every map Scan (module docstring) replaced by its batched body, unproved.

    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and counts: ``scan_batched`` (Scans replaced), ``nodes``
        (body nodes given a batch), ``reshape`` (constant shapes rewritten), ``recurrent``, ``scatter_nd``,
        ``batch_moved`` (adapters with a Transpose).
    Raises:
        Refused: a map Scan's body cannot be batched (which node, why).
    """
    out = copy_model(model)
    counts = collections.Counter(scan_batched=0)
    for parent, scan in _map_scans(out.graph):
        counts.update(batch_scan(parent, scan, out))
        counts["scan_batched"] += 1
    return out, dict(counts)


def prove(original: Any, rewritten: Any, streams: int = PROOF_STREAMS, hops: int = PROOF_HOPS) -> float:
    """Stream ``streams`` streams of real speech through both models hop by hop (states carried) and compare.

    Returns:
        float: the lowest SNR (dB, 200 when bit-identical) of any output or state of any stream.
    Raises:
        ArtifactError: the model has no stream contract, or a stream of the rewritten model is further than
            :data:`MIN_PROOF_SNR_DB` from the original's (named: which tensor, which stream, how far).
    """
    from cosyedge.artifacts import BATCH_DIM, StreamContract
    from cosyedge.surgery import proof

    c = StreamContract.from_onnx(original, where="the model")
    if not c.is_streaming:
        raise ArtifactError("the model has no stream contract to prove the batched body on")
    speech = _speech(c.sample_rate_hz)
    feeds_per_hop = []
    for h in range(hops):
        f = {}
        for k, io in enumerate(c.stream_inputs):
            shape = io.concrete_shape(streams, io.frames_per_hop)
            per = int(np.prod(shape[1:]))
            rows = []
            for s in range(streams):
                start = (h * per + s * 7919 + k * 1009) % max(1, speech.size - per)
                rows.append((0.4 + 0.3 * s) * speech[start:start + per])
            f[io.name] = np.stack(rows).reshape(shape).astype(io.dtype)
        feeds_per_hop.append(f)
    sessions = [proof.session(original), proof.session(rewritten)]
    states = [{s.input: s.zeros(streams) for s in c.states} for _ in sessions]
    out_names = [o.name for o in c.stream_outputs] + [s.output for s in c.states]
    axes = {o.name: o.shape.index(BATCH_DIM) for o in c.stream_outputs}
    axes.update({s.output: s.batch_axis for s in c.states})
    err = {name: np.zeros((2, streams)) for name in out_names}  # (error energy, signal energy) per stream
    for h in range(hops):
        res = []
        for k, sess in enumerate(sessions):
            got = sess.run(out_names, {**feeds_per_hop[h], **states[k]})
            res.append(dict(zip(out_names, got)))
            states[k] = {s.input: res[k][s.output] for s in c.states}
        for name in out_names:
            ref, new = res[0][name], res[1][name]
            if ref.shape != new.shape:
                raise ArtifactError(f"batched body: '{name}' has shape {list(new.shape)}, the Scan's "
                                    f"{list(ref.shape)}")
            ref = np.moveaxis(ref, axes[name], 0).reshape(streams, -1).astype(np.float64)
            new = np.moveaxis(new, axes[name], 0).reshape(streams, -1).astype(np.float64)
            err[name][0] += ((new - ref) ** 2).sum(axis=1)
            err[name][1] += (ref ** 2).sum(axis=1)
    worst, where = float("inf"), ""
    for name, (e2, s2) in err.items():
        for s in range(streams):
            snr = 200.0 if e2[s] == 0 else min(200.0, 10 * np.log10(max(s2[s], 1e-300) / e2[s]))
            if snr < worst:
                worst, where = float(snr), f"'{name}' of stream {s}"
    if worst < MIN_PROOF_SNR_DB:
        raise ArtifactError(f"batched body differs from the Scan over streams on real speech: {where} is "
                            f"{worst:.1f} dB from it over {hops} hops (< {MIN_PROOF_SNR_DB:g} dB)")
    return worst


def _speech(rate_hz: int) -> np.ndarray:
    """float32 mono real speech at ``rate_hz``: the bundled demo recording (cosyedge/assets/demo/noisy.wav)."""
    from pathlib import Path

    from cosyedge.audio_read import load_audio, to_model_input

    x, sr = load_audio(Path(__file__).resolve().parents[1] / "assets" / "demo" / "noisy.wav")
    x = x.mean(axis=1) if x.ndim > 1 else x
    return np.ascontiguousarray(to_model_input(x, sr, rate_hz), dtype=np.float32).reshape(-1)


def run(model: Any, target: Any) -> tuple[Any, dict[str, int]]:
    """The pass (:class:`cosyedge.passes.base.Pass`): :func:`batch_streams`, then :func:`prove` (a refusal or a
    failed proof raises: the pool warns once and runs the stored Scan). ``target`` is not needed (batch-free)."""
    if not _map_scans(model.graph):
        return model, {"scan_batched": 0}
    new, counts = batch_streams(model)
    db = prove(model, new)
    LAST_PROOF_DB.append(db)
    return new, {**counts, "kept_proof_snr_db": int(db)}  # kept_*: recorded, not counted as replaced nodes


LAST_PROOF_DB: list[float] = []
"""list[float]: the SNR (dB) of each proof run in this process, in order (for benchmarks and tests)."""


__all__ = ["MIN_PROOF_SNR_DB", "PROOF_HOPS", "PROOF_STREAMS", "Refused", "batch_streams", "prove", "run"]
