"""Q/DQ placement ``ort_matmul``: INT8 that ONNX Runtime's x86 CPU EP fuses into ``MatMulIntegerToFloat``.

ONNX Runtime fuses ``DQ(x_u8) , DQ(W_s8) -> MatMul`` with a **float** output (no Q after it) into
``com.microsoft.MatMulIntegerToFloat`` (``qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``,
``MatMulIntegerToFloat`` action). That kernel quantizes nothing at its output, so no Q/DQ is added after it,
no NHWC Transposes appear (they do around ``QLinearConv``) and the output keeps float precision. This placement:

1. **Conv -> MatMul** (:func:`matmul_form`): every one-frame Conv of the per-chunk graph becomes
   ``[Slice] -> Reshape (N, C*K) -> MatMul (C*K, M) -> Reshape (N, M, 1) -> Add bias (M, 1)``
   (pass ``batch_gemm``, :func:`cosyedge.passes.batch_gemm.batch_rewrite`, with the chunk fixed at one hop, then
   the bias Add moved after the Reshape: before it, ORT's ``MatMulAddFusion`` makes a ``Gemm`` first and the Q/DQ fusion is lost). The
   FP32 rewritten graph is the same function (>= 120 dB vs the original on the demo recording, tested). Its audio
   input's time axis is fixed to one hop (the form holds for one frame per conv and one GRU step); the INT8 build
   then writes that one-hop graph as the body of a Scan over hops (:mod:`cosyedge.passes.hop_scan`), so the model
   takes any whole number of hops per call with outputs bit-identical to one hop per call.
2. **Q/DQ** (:func:`insert_qdq_matmul`): one ``QuantizeLinear`` per activation tensor (uint8, zero point 128,
   ``scale = amax / 127``: the int8 symmetric grid), placed on the tensor the original Conv read, so the amax
   cache of the FP32 model (same tensor names) serves as is, no recalibration; the rewrite's Slice/Reshape then
   move uint8 bytes; each MatMul gets its **own** ``DequantizeLinear`` right before it; weights are
   per-column symmetric int8 (axis 1 of (K, M)) + DQ; **no Q on the MatMul output**. MatMuls that were already
   MatMuls with a constant 2-D weight (NSNet2, DeepFilterNet3) get the same. Biases stay float.
3. Everything else stays float: the first/last layers and the declared sensitive ones
   (:func:`cosyedge.precision.qdq.select_nodes`), convs that are not one-frame (2-D convs, ConvTranspose), convs
   in the cone of an ArgMax/Log (kept by the rewrite), GRUs. Such a layer could only be quantized with
   float convs wrapped in Q/DQ, which is slower than FP32 on ORT CPU (it cannot pay), so it is left float and
   reported with the reason.

Bias correction (:func:`bias_corrections`): ``b' = b - E[W_q Q(x) - W x]`` per output channel, the expectation over
frames of the calibration set streamed one hop at a time through the FP32 matmul-form graph (Nagel et al.,
"Data-Free Quantization Through Weight Equalization and Bias Correction", ICCV 2019, section 4.2, empirical
variant, https://arxiv.org/abs/1906.04721).

Source: ONNX Runtime ``onnxruntime/core/optimizer/qdq_transformer/`` (``qdq_s8_to_u8.cc``,
``selectors_actions/qdq_selectors.cc`` ``MatMulSelector``/``MatMulIntegerToFloat``),
https://github.com/microsoft/onnxruntime; ONNX operator specs (QuantizeLinear/DequantizeLinear ``axis``).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.passes.edit import toposort
from cosyedge.errors import ArtifactError
from cosyedge.precision.qdq import INT8_MAX, quantize_weight

onnx = lazy_import("onnx")

PLACEMENT = "ort_matmul"
"""str: the name of this placement in :data:`cosyedge.precision.qdq.PLACEMENTS`."""

_MOVES = ("Slice", "Reshape")
MS_DOMAIN = "com.microsoft"


def _inits(model: Any) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def _move_bias_after_reshape(model: Any) -> int:
    """In place: ``MatMul -> Add(b) -> Reshape`` becomes ``MatMul -> Reshape -> Add(b as (M, 1))`` (the output tensor
    keeps its name). Returns how many were moved (int)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    cons: dict[str, list] = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            cons[i].append(n)
    moved = 0
    for n in list(g.node):
        if n.op_type != "MatMul" or n.input[1] not in inits:
            continue
        c = cons.get(n.output[0], [])
        if len(c) != 1 or c[0].op_type != "Add" or c[0].input[0] != n.output[0] or c[0].input[1] not in inits:
            continue
        add = c[0]
        r = cons.get(add.output[0], [])
        if len(r) != 1 or r[0].op_type != "Reshape":
            continue
        rs = r[0]
        b = onnx.numpy_helper.to_array(inits[add.input[1]])
        out = rs.output[0]
        rs.input[0], rs.output[0] = n.output[0], out + "/pre_bias"
        col = add.input[1] + "/col"
        g.initializer.append(onnx.numpy_helper.from_array(b.reshape(-1, 1).astype(np.float32), col))
        add.input[0], add.input[1], add.output[0] = rs.output[0], col, out
        moved += 1
    toposort(model.graph)
    return moved


def _hop_dims(model: Any, contract: Any) -> dict[str, list]:
    """Graph input name -> its dims for one hop per call at batch 1 (list of int | str)."""
    dims: dict[str, list] = {}
    for vi in model.graph.input:
        d = [x.dim_value if x.HasField("dim_value") else x.dim_param for x in vi.type.tensor_type.shape.dim]
        dims[vi.name] = d
    for s in contract.stream_inputs:
        frames = s.frames(contract.hop_samples, contract.hop_samples)
        dims[s.name] = [1 if v == "N" else frames if v == "T" else v for v in s.shape]
    for s in contract.states:
        dims[s.input] = [1 if v == "N" else v for v in s.shape]
    return dims


def float_note(model: Any, contract: Any, left: list[str], total: int) -> str | None:
    """Why this placement leaves weighted layers float, in one line, when that is most of them or a whole-model cause.

    The Conv -> MatMul form exists for a conv that computes exactly one output frame per call. A model whose hop
    gives a conv several frames per call (streamified with a hop of 2+ conv frames, e.g. ``--hop-samples 320`` over
    a stride-160 analysis conv) has none: its INT8 ``ort_matmul`` build quantizes nothing there.

    Args:
        model (onnx.ModelProto): The FP32 streaming model.
        contract (StreamContract): Its contract (hop).
        left (list[str]): Weighted node names selected for INT8 that got no MatMul form.
        total (int): Weighted nodes selected for INT8 (before this placement's filter).
    Returns:
        str | None: ``"Q/DQ placement ort_matmul quantizes one-frame convs only: at one hop (320 samples) per call,
        25 convs compute 2 frames each, so 25 of 25 weighted layers stay float; use placement trt (build
        --int8-placement trt), or streamify with a hop of one conv frame (--hop-samples 160)"``; a line naming 2-D
        convs etc. when no layer at all has the form; None otherwise (some layers float for their own reasons).
    """
    if not left:
        return None
    from cosyedge.passes.shapes import partial_shapes

    try:
        shapes = partial_shapes(model, _hop_dims(model, contract))
    except Exception:  # noqa: BLE001  (onnx shape inference errors)
        shapes = {}
    names = set(left)
    frames = {}
    for n in model.graph.node:
        ys = shapes.get(n.output[0]) if n.name in names and n.op_type == "Conv" else None
        if ys and len(ys) == 3 and ys[2] and ys[2] > 1:
            frames[n.name] = int(ys[2])
    hop = contract.hop_samples
    stay = f"{len(left)} of {total} weighted layers stay float"
    if frames:
        per = sorted(set(frames.values()))
        span = f"{per[0]}" if len(per) == 1 else f"{per[0]}-{per[-1]}"
        hint = (f" (--hop-samples {hop // per[0]})" if len(per) == 1 and hop % per[0] == 0 else "")
        return (f"Q/DQ placement ort_matmul quantizes one-frame convs only: at one hop ({hop} samples) per call, "
                f"{len(frames)} convs compute {span} frames each, so {stay}; use placement trt (build "
                f"--int8-placement trt), or streamify with a hop of one conv frame{hint}")
    if len(left) == total:
        return (f"Q/DQ placement ort_matmul quantizes one-frame 1-D convs and 2-D MatMuls only: {stay} (none has that "
                f"form: 2-D convs, ConvTranspose, ArgMax/Log cones; reasons in the manifest's excluded_nodes); use "
                f"placement trt (build --int8-placement trt)")
    return None


def matmul_form(model: Any, contract: Any) -> tuple[Any, dict]:
    """Return the FP32 matmul form of a streaming graph (one-frame Convs as MatMuls, chunk fixed at one hop): the
    passes :data:`cosyedge.passes.MATMUL_FORM_PASSES` (``batch_gemm``, then ``gru_cell``), the bias moved after each
    Reshape in between.

    Args:
        model (onnx.ModelProto): FP32 streaming model (no subgraphs).
        contract (StreamContract): Its stream contract (hop, stream inputs, states).
    Returns:
        tuple[onnx.ModelProto, dict]: the rewritten copy and ``{"origin": {matmul name: original node name},
        "counts": batch_rewrite's counts plus ``bias_moved`` and ``gru_cell``, "gru_cells": {GRU name: its cell's
        MatMul names}}`` (one-step GRUs written as their cell, :func:`cosyedge.passes.gru_cell.gru_cell`). A MatMul
        that was a MatMul keeps its name.
    Raises:
        ArtifactError: ONNX shape inference fails on the model.
    """
    from cosyedge.passes import MATMUL_FORM_PASSES, Target, passes

    batch_gemm, gru_cell = passes(MATMUL_FORM_PASSES)
    dims = _hop_dims(model, contract)
    target = Target(dims, dims)  # one hop at batch 1; dims may hold symbols (gru_cell then leaves the GRUs alone)
    try:
        out, counts = batch_gemm.rewrite(model, target)
    except Exception as err:  # onnx's own errors (shape inference)
        raise ArtifactError(f"the Conv -> MatMul rewrite cannot infer the graph's shapes: {err}") from None
    counts = dict(counts, bias_moved=_move_bias_after_reshape(out))
    grus = [n.name for n in out.graph.node if n.op_type == "GRU"]
    try:
        celled, done = gru_cell.rewrite(out, target)
        counts["gru_cell"] = done["gru_cell"]
    except Exception:  # noqa: BLE001  (shape inference: GRUs stay GRUs, in float)
        counts["gru_cell"] = 0
    cells: dict[str, list[str]] = {}
    if counts["gru_cell"]:
        out = celled
        names = {n.name for n in out.graph.node}
        for gru in grus:
            mms = [f"{gru}/cell/{k}" for k in ("x_proj", "h_proj", "hn_proj") if f"{gru}/cell/{k}" in names]
            if mms:
                cells[gru] = mms
    # the chunk is one hop now: fix the stream inputs' time axis so another chunk length is refused by ORT
    for vi in out.graph.input:
        if vi.name in {s.name for s in contract.stream_inputs}:
            want = dims[vi.name]
            for d, v in zip(vi.type.tensor_type.shape.dim, want):
                if isinstance(v, int) and d.HasField("dim_param") and d.dim_param == "T":
                    d.dim_value = v
    originals = {n.name for n in model.graph.node}
    origin = {}
    for n in out.graph.node:
        if n.op_type != "MatMul":
            continue
        if n.name in originals:
            origin[n.name] = n.name
        elif "/batched_" in n.name:
            origin[n.name] = n.name.rsplit("/batched_", 1)[0]
    return out, {"origin": origin, "counts": counts, "gru_cells": cells}


def data_tensor(model: Any, matmul: Any) -> tuple[str, list]:
    """The tensor a MatMul's input A is moved from (str: back through the rewrite's Slice/Reshape nodes, each read
    only by the next) and those nodes (list of NodeProto, producer first)."""
    prod = {o: n for n in model.graph.node for o in n.output}
    cons = collections.Counter(i for n in model.graph.node for i in n.input)
    t, chain = matmul.input[0], []
    while t in prod and prod[t].op_type in _MOVES and cons[t] == 1 and "/batched_" in prod[t].name:
        chain.insert(0, prod[t])
        t = prod[t].input[0]
    return t, chain


def quantizable(model: Any) -> list[Any]:
    """MatMul nodes (list[NodeProto], graph order) with a constant float 2-D weight as input B."""
    inits = _inits(model)
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits
            and inits[n.input[1]].ndim == 2 and inits[n.input[1]].dtype == np.float32 and n.input[0] not in inits]


def insert_qdq_matmul(model: Any, amax: dict[str, float], names: list[str],
                      bias_shift: dict[str, np.ndarray] | None = None) -> dict:
    """In place: Q/DQ for the MatMuls ``names`` of a :func:`matmul_form` graph (see module docstring).

    Args:
        model (onnx.ModelProto): The matmul-form graph.
        amax (dict[str, float]): Calibrated amax per activation tensor (the FP32 model's names).
        names (list[str]): MatMul node names to quantize.
        bias_shift (dict[str, np.ndarray] | None): Per MatMul name, float32 (M,) subtracted from its bias Add's
            constant (bias correction); a MatMul without a bias Add gets none.
    Returns:
        dict: ``{"activations": {tensor: scale}, "weights": {matmul: 1}, "qdq_pairs": int, "placement":
        "ort_matmul", "activation_type": "uint8", "bias_norms": {matmul: L2 norm of the bias before correction}}``
        (only the corrected MatMuls: those with a bias Add).
    Raises:
        ArtifactError: a MatMul to quantize has no amax for its data tensor, or is missing.
    """
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    by_name = {n.name: n for n in g.node}
    report = {"activations": {}, "weights": {}, "qdq_pairs": 0, "placement": PLACEMENT, "activation_type": "uint8",
              "bias_norms": {}}
    qs: dict[str, str] = {}
    new_nodes: list = []
    pre: dict[int, list] = collections.defaultdict(list)  # nodes to insert before node id
    for name in names:
        mm = by_name.get(name)
        if mm is None:
            raise ArtifactError(f"node '{name}' not in the graph")
        t, chain = data_tensor(model, mm)
        if t not in amax:
            raise ArtifactError(f"no calibrated amax for tensor '{t}' (input of '{name}'): the amax cache is from "
                                f"another model; recalibrate")
        scale = np.float32(amax[t] / INT8_MAX if amax[t] > 0 else 1.0)
        s_name, z_name = f"{t}/act_scale", f"{t}/act_zero_point"
        if t not in qs:
            g.initializer.extend([onnx.numpy_helper.from_array(np.array(scale, np.float32), s_name),
                                  onnx.numpy_helper.from_array(np.array(128, np.uint8), z_name)])
            qs[t] = f"{t}/QuantizeLinear_output"
            new_nodes.append(onnx.helper.make_node("QuantizeLinear", [t, s_name, z_name], [qs[t]],
                                                   name=f"{t}/QuantizeLinear"))
            report["activations"][t] = float(scale)
            report["qdq_pairs"] += 1
        if chain:  # the rewrite's Slice/Reshape move the uint8 bytes
            chain[0].input[0] = qs[t]
            src = chain[-1].output[0]
        else:
            src = qs[t]
        dq = f"{name}/input_DequantizeLinear_output"
        pre[id(mm)].append(onnx.helper.make_node("DequantizeLinear", [src, s_name, z_name], [dq],
                                                 name=f"{name}/input_DequantizeLinear"))
        w = onnx.numpy_helper.to_array(inits[mm.input[1]])
        wq, ws = quantize_weight(w, 1)
        base = name
        g.initializer.extend([onnx.numpy_helper.from_array(wq, f"{base}/weight_int8"),
                              onnx.numpy_helper.from_array(ws, f"{base}/weight_scale"),
                              onnx.numpy_helper.from_array(np.zeros(ws.shape, np.int8), f"{base}/weight_zero_point")])
        wdq = f"{base}/weight_DequantizeLinear_output"
        pre[id(mm)].append(onnx.helper.make_node(
            "DequantizeLinear", [f"{base}/weight_int8", f"{base}/weight_scale", f"{base}/weight_zero_point"], [wdq],
            name=f"{base}/weight_DequantizeLinear", axis=1))
        mm.input[0], mm.input[1] = dq, wdq
        report["weights"][name] = 1
        report["qdq_pairs"] += 1
        if bias_shift and name in bias_shift:
            add = _bias_add(model, mm)
            if add is not None:
                b = onnx.numpy_helper.to_array(inits[add.input[1]])
                nb = (b - bias_shift[name].reshape(b.shape)).astype(np.float32)
                cname = f"{name}/bias_corrected"
                g.initializer.append(onnx.numpy_helper.from_array(nb, cname))
                add.input[1] = cname
                report["bias_norms"][name] = float(np.linalg.norm(b))
    out = list(new_nodes)
    for n in g.node:
        out += pre.get(id(n), [])
        out.append(n)
    del g.node[:]
    g.node.extend(out)
    toposort(model.graph)
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return report


def _int8_weight(g: Any, inits: dict, by_name: dict, name: str, what: str) -> tuple[Any, list[str], np.ndarray]:
    """The MatMul ``name``, the first four inputs of its ``DynamicQuantizeMatMul`` (its A, then the weight as int8 per
    column, symmetric, with its scales and zero points, added to ``g``'s initializers) and its float weight.

    Raises:
        ArtifactError: the MatMul is missing or has no constant 2-D float32 weight (``what`` names it).
    """
    mm = by_name.get(name)
    if mm is None or mm.input[1] not in inits:
        raise ArtifactError(f"{what} '{name}' not in the graph or its weight is not constant")
    w = onnx.numpy_helper.to_array(inits[mm.input[1]])
    if w.ndim != 2 or w.dtype != np.float32:
        raise ArtifactError(f"{what} '{name}' has a {w.ndim}-D {w.dtype} weight, not 2-D float32")
    wq, ws = quantize_weight(w, 1)
    ins = [mm.input[0], f"{name}/weight_int8", f"{name}/weight_scale", f"{name}/weight_zero_point"]
    g.initializer.extend([onnx.numpy_helper.from_array(wq, ins[1]),
                          onnx.numpy_helper.from_array(ws.reshape(-1).astype(np.float32), ins[2]),
                          onnx.numpy_helper.from_array(np.zeros(ws.size, np.int8), ins[3])])
    return mm, ins, w


def quantize_dynamic(model: Any, cells: dict[str, list[str]], keep: Any = ()) -> dict:
    """In place: the GRU cells' MatMuls become ``com.microsoft.DynamicQuantizeMatMul`` (INT8 weight per column,
    symmetric; the activation quantized to uint8 on every call from its own min/max; the bias Add folded in).

    A GRU cell's inputs (the layer input and the hidden state) have no calibrated amax (the FP32 graph's GRU
    kernel hides them), and its output feeds the recurrence: a per-call activation scale needs no calibration and
    follows the state's range. ONNX Runtime runs the op as one u8 x s8 GEMM (MLAS, VNNI where the CPU has it) that
    writes float. Measured on DeepFilterNet3 (5 GRUs, 2 x 196 k weights each): INT8 p50 per hop 1.5x the FP32
    session's, 37 dB vs FP32 on the demo speech (``docs/bench/bench_precision_int8_ort_dfn3.json``).

    Args:
        model (onnx.ModelProto): The :func:`matmul_form` graph.
        cells (dict[str, list[str]]): GRU name -> its cell's MatMul names (``matmul_form``'s ``gru_cells``).
        keep (Iterable[str]): GRU names to leave in float (``--exclude``).
    Returns:
        dict: ``{"gru": {GRU name: [MatMul names quantized]}, "kept": {GRU name: reason}}``.
    Raises:
        ArtifactError: a named MatMul is missing or has no constant 2-D float weight.

    Source: ONNX Runtime contrib op ``com.microsoft.DynamicQuantizeMatMul`` (A float, B int8, b_scale per column,
    b_zero_point, bias), ``onnxruntime/contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc``.
    """
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    keep = set(keep)
    cons: dict[str, list] = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            cons[i].append(n)
    by_name = {n.name: n for n in g.node}
    drop: set[int] = set()
    report: dict = {"gru": {}, "kept": {}}
    for gru, names in cells.items():
        if gru in keep:
            report["kept"][gru] = "excluded (float GRU cell)"
            continue
        for name in names:
            mm, ins, _ = _int8_weight(g, inits, by_name, name, "GRU cell MatMul")
            out = mm.output[0]
            c = cons.get(out, [])
            if (len(c) == 1 and c[0].op_type == "Add" and c[0].input[0] == out and c[0].input[1] in inits
                    and len(inits[c[0].input[1]].dims) == 1):
                ins.append(c[0].input[1])
                out = c[0].output[0]
                drop.add(id(c[0]))
            mm.CopyFrom(onnx.helper.make_node("DynamicQuantizeMatMul", ins, [out], name=name, domain=MS_DOMAIN))
            report["gru"].setdefault(gru, []).append(name)
    if drop:
        nodes = [n for n in g.node if id(n) not in drop]
        del g.node[:]
        g.node.extend(nodes)
    if report["gru"] and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    used = {i for n in g.node for i in n.input}
    keep_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits)
    return report


def quantize_matmuls_dynamic(model: Any, names: list[str]) -> dict:
    """In place: the MatMuls ``names`` of a :func:`matmul_form` graph become ``com.microsoft.DynamicQuantizeMatMul``
    (the activation placement ``dynamic``, the default of ``ort_matmul``): INT8 weight per column, symmetric; the
    float activation quantized to uint8 on every call from its own min/max; the bias folded in (``MatMul -> Reshape
    -> Add(b)`` as the matmul form writes a conv, or ``MatMul -> Add(b)``: the Add dropped, the Reshape kept).

    Against the static placement (:func:`insert_qdq_matmul`: a calibrated ``QuantizeLinear`` per activation, then
    ``MatMulIntegerToFloat``, then the bias Add) a layer is one kernel instead of three, and its step follows the
    signal: on the bundled reference (24 one-frame convs of 9-55 k MACs) 44.7 dB vs FP32 on the noisy demo instead of
    38.1 dB, and about 5 % less time per hop (ONNX Runtime 1.32, one thread, ``docs/bench/bench_targets.json``).
    The calibration's amax are then not used by these layers (bias correction, which needs them, takes the static
    placement).

    Args:
        model (onnx.ModelProto): The matmul-form graph.
        names (list[str]): MatMul node names to quantize (each with a constant float 2-D weight).
    Returns:
        dict: the same keys as :func:`insert_qdq_matmul`'s report: ``activations`` ({}: no static scale),
        ``weights`` ({matmul: 1}), ``qdq_pairs`` (0: no Q/DQ node), ``placement`` ("ort_matmul"),
        ``activation_type`` ("uint8 per call"), ``bias_norms`` ({}), and ``bias_folded`` (int).
    Raises:
        ArtifactError: a named MatMul is missing or has no constant 2-D float weight.

    Source: ONNX Runtime contrib op ``com.microsoft.DynamicQuantizeMatMul``
    (``onnxruntime/contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc``).
    """
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    by_name = {n.name: n for n in g.node}
    report = {"activations": {}, "weights": {}, "qdq_pairs": 0, "placement": PLACEMENT,
              "activation_type": "uint8 per call", "bias_norms": {}, "bias_folded": 0}
    drop: set[str] = set()
    for name in names:
        mm, ins, w = _int8_weight(g, inits, by_name, name, "MatMul")
        out = mm.output[0]
        add = _bias_add(model, mm)
        if add is not None:
            b = onnx.numpy_helper.to_array(inits[add.input[1]]).astype(np.float32)
            if b.size == w.shape[1]:
                ins.append(f"{name}/bias")
                g.initializer.append(onnx.numpy_helper.from_array(b.reshape(-1), ins[-1]))
                reader = next(n for n in g.node if out in n.input)  # the Add, or the Reshape before it
                if reader is add:
                    out = add.output[0]
                else:
                    reader.output[0] = add.output[0]
                drop.add(add.name or add.output[0])
                report["bias_folded"] += 1
        mm.CopyFrom(onnx.helper.make_node("DynamicQuantizeMatMul", ins, [out], name=name, domain=MS_DOMAIN))
        report["weights"][name] = 1
    if drop:
        nodes = [n for n in g.node if (n.name or n.output[0]) not in drop or n.op_type != "Add"]
        del g.node[:]
        g.node.extend(nodes)
    if report["weights"] and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    toposort(model.graph)
    used = {i for n in g.node for i in n.input}
    keep_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits)
    return report


def _bias_add(model: Any, mm: Any) -> Any:
    """The bias ``Add`` of a MatMul (NodeProto, or None): ``MatMul -> Add(const)`` or ``MatMul -> Reshape ->
    Add(const)`` (the matmul form), the MatMul's output read by that path only."""
    inits = {t.name for t in model.graph.initializer}
    cons = collections.defaultdict(list)
    for n in model.graph.node:
        for i in n.input:
            cons[i].append(n)
    t = mm.output[0]
    for _ in range(2):
        c = cons.get(t, [])
        if len(c) != 1:
            return None
        if c[0].op_type == "Add" and c[0].input[0] == t and c[0].input[1] in inits:
            return c[0]
        if c[0].op_type != "Reshape":
            return None
        t = c[0].output[0]
    return None


def bias_corrections(model: Any, contract: Any, amax: dict[str, float], names: list[str], calib: Any,
                     utterances: int = 32, threads: int = 1) -> dict[str, np.ndarray]:
    """Per MatMul, ``E[W_q Q(x) - W x]`` (float32 (M,)) over ``utterances`` of the calibration set.

    The FP32 matmul-form ``model`` streams each utterance one hop at a time from zero state; ``x`` is the MatMul's
    float input A for every frame, ``Q(x)`` its fake-quantized value (uint8 zero point 128, the scale
    :func:`insert_qdq_matmul` uses: ``round(x / s)`` clipped to [-128, 127], times ``s``), ``W_q`` the dequantized
    per-column int8 weight. Since the expectation is linear, ``E[x]`` and ``E[Q(x)]`` (per input feature) are
    accumulated and ``E[Q(x)] @ W_q - E[x] @ W`` returned.

    Args:
        model (onnx.ModelProto): :func:`matmul_form` graph (FP32, before Q/DQ).
        contract (StreamContract): Its stream contract.
        amax (dict[str, float]): Calibrated amax per data tensor (:func:`data_tensor`).
        names (list[str]): MatMul names to correct.
        calib (CalibrationSet): The calibration set.
        utterances (int): How many of its utterances (>= 1; fewer when the set is smaller).
        threads (int): ONNX Runtime threads.
    Returns:
        dict[str, np.ndarray]: MatMul name -> correction (M,) to subtract from its bias.
    Raises:
        ArtifactError: ONNX Runtime cannot load the model; a calibration file is missing.
    """
    from cosyedge.precision.calibrate import _session_with_outputs, _stream_utterance
    from cosyedge.runtime.feeds import pick_partners

    by_name = {n.name: n for n in model.graph.node}
    inits = _inits(model)
    inputs = {nm: by_name[nm].input[0] for nm in names}
    scales = {nm: np.float32(amax[data_tensor(model, by_name[nm])[0]] / INT8_MAX) for nm in names}
    tensors = list(dict.fromkeys(inputs.values()))
    sess = _session_with_outputs(model, tensors, threads)
    sx = {nm: 0.0 for nm in names}
    sq = {nm: 0.0 for nm in names}
    rows = {nm: 0 for nm in names}

    def fn(vals: list) -> None:
        got = dict(zip(tensors, vals))
        for nm in names:
            x = got[inputs[nm]].reshape(-1, got[inputs[nm]].shape[-1]).astype(np.float64)
            s = scales[nm] if scales[nm] > 0 else 1.0
            q = np.clip(np.rint(x / s), -128, 127) * s
            sx[nm] = sx[nm] + x.sum(0)
            sq[nm] = sq[nm] + q.sum(0)
            rows[nm] += x.shape[0]

    n = min(int(utterances), len(calib))
    readers = [lambda i=i: calib.read(i) for i in range(len(calib))]
    for i in range(n):
        _stream_utterance(sess, contract, calib.read(i), contract.hop_samples, tensors, fn,
                          pick_partners(contract, readers, i))
    out = {}
    for nm in names:
        w = inits[by_name[nm].input[1]].astype(np.float64)
        wq, ws = quantize_weight(w.astype(np.float32), 1)
        wdq = wq.astype(np.float64) * ws.astype(np.float64)
        ex, eq = np.asarray(sx[nm]) / max(rows[nm], 1), np.asarray(sq[nm]) / max(rows[nm], 1)
        out[nm] = (eq @ wdq - ex @ w).astype(np.float32)
    return out


__all__ = ["PLACEMENT", "bias_corrections", "data_tensor", "float_note", "insert_qdq_matmul", "matmul_form",
           "quantizable"]
