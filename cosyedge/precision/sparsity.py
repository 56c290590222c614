"""2:4 structured sparsity on ONNX weights: prune, verify, report.

In every group of 4 consecutive weights along the **input-channel (reduction) axis** at most 2 are
non-zero; the 2 of largest magnitude are kept. This is the pattern NVIDIA Ampere+ sparse tensor cores
(and TensorRT's ``BuilderFlag.SPARSE_WEIGHTS``) use:

* ``Conv`` weight ``(C_out, C_in / group, k...)``: groups of 4 along axis 1, for each output channel and
  kernel tap;
* ``Gemm`` ``B`` ``(K, N)`` (``(N, K)`` with ``transB=1``) and ``MatMul`` with a constant 2-D right
  input ``(K, N)``: groups of 4 along K.

Layers are looked for in the main graph and in every ``Scan`` body under it (Scan in Scan: an adopted model's
compute sits in such bodies, :mod:`cosyedge.precision.bodies`); a weight is constant when it is an initializer
(of the graph or an enclosing one) or the value of a ``Constant`` node (Silero VAD's exported bodies hold their
conv weights so).

A layer is **eligible** when its weight is a constant initializer of rank >= 2 and its reduction length
(``C_in / group`` or ``K``) is a multiple of 4 and at least :data:`MIN_REDUCTION` (so the fixed 1-channel
STFT analysis conv, the 161-bin input conv and the 322-channel synthesis conv of the reference model are
reported ineligible). ``ConvTranspose`` is reported and left dense. TensorRT times sparse and dense
tactics and keeps the faster one; sparse kernels win only for wide layers (about 256+ channels, NVIDIA
maintainers), so the report flags narrow layers (``speedup_likely``) instead of promising speedups.

:func:`sparsify_onnx` writes the pruned ONNX atomically, re-reads it and verifies the pattern of every
pruned layer (:func:`check_2to4`), and returns a per-layer report (:func:`format_report` prints it as a
table; the dict is JSON-serialisable).

Sources: Mishra et al., "Accelerating Sparse Deep Neural Networks", arXiv:2104.08378 (2:4 pattern,
magnitude pruning then fine-tuning); NVIDIA TensorRT developer guide, "Structured Sparsity"
(docs.nvidia.com/deeplearning/tensorrt/developer-guide, reduction-axis groups of 4).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import (
    SourceModel,
    StreamContract,
    atomic_output,
    check_not_input,
    check_writable,
    load_onnx,
    sha256_file,
)
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG
from cosyedge.passes.edit import node_attrs
from cosyedge.precision.cost import output_cost

onnx = lazy_import("onnx")

N_KEEP = 2
M_GROUP = 4
MIN_REDUCTION = 8
"""int: smallest reduction length (input channels per group, or K) pruned; shorter layers stay dense."""
WIDE_CHANNELS = 256
"""int: channel count from which TensorRT's sparse tactics usually win (docs/design.md, maintainers)."""
SPARSITY_KEY = "cosyedge.sparsity"
"""str: ONNX ``metadata_props`` key set to ``"2:4"`` on pruned models."""
DENSE_PARENT_KEY = "cosyedge.dense_parent_sha256"
"""str: ONNX ``metadata_props`` key of a 2:4 fine-tuned FP32 model: the SHA-256 (hex) of the dense FP32 streaming
ONNX whose weights the fine-tune started from (:func:`stamp_dense_parent`)."""


@dataclasses.dataclass
class LayerReport:
    """One Conv/Gemm/MatMul layer in the sparsity report.

    Attributes:
        node (str): Node name.
        op (str): Op type.
        weight (str): Weight initializer name ("" when the weight is not a constant).
        shape (list[int]): Weight shape.
        reduction (int): Reduction length (input channels per group, or K).
        out_channels (int): Output channels (or N).
        eligible (bool): Pruned to 2:4.
        reason (str): Why not eligible ("" when eligible).
        sparsity (float): Fraction of zero weights after pruning (0..1).
        verified (bool | None): 2:4 pattern re-checked in the written ONNX (None when not pruned).
        speedup_likely (bool): Both channel counts >= :data:`WIDE_CHANNELS`.
    """

    node: str
    op: str
    weight: str
    shape: list
    reduction: int
    out_channels: int
    eligible: bool
    reason: str = ""
    sparsity: float = 0.0
    verified: bool | None = None
    speedup_likely: bool = False


def mask_2to4(w: np.ndarray, axis: int) -> np.ndarray:
    """Magnitude 2:4 mask of ``w`` along ``axis``.

    Args:
        w (np.ndarray): Float weights of any rank; ``w.shape[axis]`` must be a multiple of 4.
        axis (int): Reduction axis (1 for Conv, 0 for MatMul/Gemm B ``(K, N)``).
    Returns:
        np.ndarray: bool mask with ``w``'s shape; in every 4 consecutive entries along ``axis`` exactly
        the 2 of largest ``|w|`` are True (ties broken by position, lower index first).
    Raises:
        UsageError: the axis length is not a multiple of 4.
    """
    if w.shape[axis] % M_GROUP:
        raise UsageError(f"axis {axis} of a weight of shape {list(w.shape)} is not a multiple of {M_GROUP}")
    a = np.moveaxis(np.abs(w), axis, -1)
    g = a.reshape(*a.shape[:-1], a.shape[-1] // M_GROUP, M_GROUP)
    order = np.argsort(-g, axis=-1, kind="stable")
    keep = np.zeros(g.shape, dtype=bool)
    np.put_along_axis(keep, order[..., :N_KEEP], True, axis=-1)
    return np.moveaxis(keep.reshape(a.shape), -1, axis)


def check_2to4(w: np.ndarray, axis: int) -> bool:
    """Return True (bool) when every group of 4 consecutive entries of ``w`` along ``axis`` has <= 2
    non-zeros (``w.shape[axis]`` a multiple of 4)."""
    if w.shape[axis] % M_GROUP:
        return False
    a = np.moveaxis(w != 0, axis, -1)
    g = a.reshape(*a.shape[:-1], a.shape[-1] // M_GROUP, M_GROUP)
    return bool((g.sum(-1) <= N_KEEP).all())


def _scopes(model: Any) -> list[tuple[Any, dict]]:
    """(graph, constants in scope) for the main graph and every Scan body under it, depth first (an adopted
    model's compute sits in Scan bodies, :mod:`cosyedge.precision.bodies`).

    The constants of a graph are its initializers, the ``value`` tensors of its ``Constant`` nodes and those of
    the enclosing graphs (a body may read an outer initializer): name -> ``(owner, onnx.TensorProto)``, where
    ``owner`` (int) numbers the graph that holds the tensor (the TensorProto is modified in place by pruning)."""
    out: list = []

    def visit(graph: Any, outer: dict) -> None:
        owner = len(out)
        consts = dict(outer)
        for t in graph.initializer:
            consts[t.name] = (owner, t)
        for n in graph.node:
            if n.op_type == "Constant" and n.output:
                value = next((a for a in n.attribute if a.name == "value"), None)
                if value is not None:
                    consts[n.output[0]] = (owner, value.t)
        out.append((graph, consts))
        for n in graph.node:
            if n.op_type == "Scan":
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        visit(a.g, consts)

    visit(model.graph, {})
    return out


def _layers(model: Any) -> list[tuple[Any, Any, tuple | None, int, LayerReport]]:
    """(node, weight TensorProto or None, weight key (owner, name) or None, reduction axis, report) per
    Conv/ConvTranspose/Gemm/MatMul of the main graph and of every Scan body, in that order (graph by graph)."""
    from onnx import numpy_helper

    rows = []
    for graph, consts in _scopes(model):
        for n in graph.node:
            if n.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
                continue
            w_name = n.input[1] if len(n.input) > 1 else ""
            owner, t = consts.get(w_name, (None, None))
            rows.append(_layer(n, w_name, t, numpy_helper) + ((owner, w_name) if t is not None else None,))
    return [(n, t, key, axis, rep) for n, t, axis, rep, key in rows]


def _layer(n: Any, w_name: str, t: Any, numpy_helper: Any) -> tuple:
    """(node, weight TensorProto or None, reduction axis, LayerReport) of one Conv/ConvTranspose/Gemm/MatMul."""
    attrs = node_attrs(n)
    shape = list(t.dims) if t is not None else []
    rep = LayerReport(node=n.name, op=n.op_type, weight=w_name if t is not None else "", shape=shape,
                      reduction=0, out_channels=0, eligible=False)
    axis = 1
    if t is None:
        rep.reason = "weight is not a constant initializer"
    elif t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
        rep.reason = f"weight dtype {onnx.TensorProto.DataType.Name(t.data_type)} (prune the FP32 model)"
    elif n.op_type == "ConvTranspose":
        rep.reduction, rep.out_channels = shape[0], shape[1] * int(attrs.get("group", 1))
        rep.reason = "ConvTranspose is left dense"
    elif n.op_type == "Conv":
        axis = 1
        rep.reduction, rep.out_channels = shape[1], shape[0]
        if int(attrs.get("group", 1)) > 1 and shape[1] < M_GROUP:
            rep.reason = f"depthwise/grouped conv ({shape[1]} input channel(s) per group)"
    elif n.op_type == "Gemm":
        if len(shape) != 2:
            rep.reason = f"weight rank {len(shape)}"
        else:
            axis = 1 if int(attrs.get("transB", 0)) else 0
            rep.reduction, rep.out_channels = shape[axis], shape[1 - axis]
    else:  # MatMul: the constant must be the right operand (K, N)
        if len(shape) != 2:
            rep.reason = "constant right operand of rank != 2"
        else:
            axis = 0
            rep.reduction, rep.out_channels = shape[0], shape[1]
    if not rep.reason:
        if rep.reduction % M_GROUP:
            rep.reason = f"{rep.reduction} input channels is not a multiple of {M_GROUP}"
        elif rep.reduction < MIN_REDUCTION:
            rep.reason = f"{rep.reduction} input channels is too few (< {MIN_REDUCTION})"
        else:
            rep.eligible = True
    rep.speedup_likely = rep.eligible and min(rep.reduction, rep.out_channels) >= WIDE_CHANNELS
    if t is not None and rep.shape:
        w = numpy_helper.to_array(t)
        rep.sparsity = float((w == 0).mean()) if w.size else 0.0
    return n, t, axis, rep


def is_dsp_node(name: str) -> bool:
    """bool: ``name`` is a node of a recipe's signal processing (:class:`cosyedge.recipes.dsp.GraphBuilder` names
    them ``<recipe>_dsp/...``, e.g. ``gtcrn_dsp/rfft_re_4``: the STFT bases around an adopted network). Their
    weights are fixed transforms, not learned: pruning them 2:4 breaks the transform (measured: GTCRN 4.2 dB,
    DTLN 5.8 dB output SNR vs FP32 with the analysis bases pruned), so they stay dense."""
    return any(part.endswith("_dsp") for part in name.split("/")[:-1])


def sparsify_model(model: Any, exclude: Iterable[str] = ()) -> list[LayerReport]:
    """Prune eligible weights of ``model`` to 2:4 in place (main graph and Scan bodies).

    Args:
        model (onnx.ModelProto): FP32 model with weights loaded (no external data left unread).
        exclude (Iterable[str]): Node names left dense (reported with reason ``excluded``).
    Returns:
        list[LayerReport]: one row per Conv/ConvTranspose/Gemm/MatMul, in graph order (main graph first, then
        each Scan body depth first).
    Raises:
        UsageError: a name in ``exclude`` is not a node.
    """
    from onnx import numpy_helper

    exclude = set(exclude)
    names = {n.name for g, _ in _scopes(model) for n in g.node}
    missing = sorted(exclude - names)
    if missing:
        raise UsageError(f"--exclude {missing[0]!r} is not a node of the model")
    done: dict[tuple, float] = {}
    reports = []
    for node, t, key, axis, rep in _layers(model):
        if rep.eligible and node.name in exclude:
            rep.eligible, rep.reason = False, "excluded"
        if rep.eligible and is_dsp_node(node.name):
            rep.eligible, rep.reason = False, "signal processing of a recipe (STFT basis, filterbank), not learned"
        if rep.eligible:
            if key not in done:
                w = numpy_helper.to_array(t)
                pruned = np.where(mask_2to4(w, axis), w, np.zeros((), w.dtype)).astype(w.dtype)
                t.CopyFrom(numpy_helper.from_array(pruned, name=t.name))
                done[key] = float((pruned == 0).mean())
            rep.sparsity = done[key]
        reports.append(rep)
    return reports


def verify_onnx(path: str | Path, reports: list[LayerReport]) -> list[LayerReport]:
    """Re-read ``path`` and set ``verified`` on every pruned row of ``reports`` (pattern re-checked).

    Args:
        path (str | Path): The written ONNX.
        reports (list[LayerReport]): :func:`sparsify_model`'s rows for this model (same layers, same order).
    Returns:
        list[LayerReport]: ``reports`` (same objects).
    Raises:
        ArtifactError: a pruned layer does not hold the 2:4 pattern in the written file.
    """
    from onnx import numpy_helper

    model = load_onnx(path)
    layers = _layers(model)
    for rep, (node, t, _key, axis, _) in zip(reports, layers):
        if not rep.eligible:
            continue
        rep.verified = node.name == rep.node and t is not None and check_2to4(numpy_helper.to_array(t), axis)
        if not rep.verified:
            raise ArtifactError(f"{path}: layer {rep.node} does not hold the 2:4 pattern after writing")
    return reports


def summarize(reports: list[LayerReport]) -> dict:
    """Return totals (dict): ``layers``, ``pruned``, ``weights``, ``weights_pruned_layers``,
    ``zero_fraction_pruned_layers`` and ``zero_fraction_all`` (0..1, over Conv/Gemm/MatMul weights)."""
    def size(r):
        return int(np.prod(r.shape)) if r.shape else 0

    total = sum(size(r) for r in reports)
    pr = [r for r in reports if r.eligible]
    pw = sum(size(r) for r in pr)
    return {
        "layers": len(reports),
        "pruned": len(pr),
        "weights": total,
        "weights_pruned_layers": pw,
        "zero_fraction_pruned_layers": sum(r.sparsity * size(r) for r in pr) / pw if pw else 0.0,
        "zero_fraction_all": sum(r.sparsity * size(r) for r in reports) / total if total else 0.0,
        "all_verified": all(r.verified for r in pr),
    }


def format_report(report: dict) -> str:
    """Format the dict of :func:`sparsify_onnx` as a text table (str), one row per layer, plus totals."""
    rows = report["layers"]
    head = ("node", "op", "weight shape", "red.", "2:4", "sparsity", "verified", "note")
    body = []
    for r in rows:
        note = r["reason"] or ("wide: sparse tactic likely" if r["speedup_likely"] else "narrow: speedup unlikely")
        ver = "-" if r["verified"] is None else ("yes" if r["verified"] else "NO")
        body.append((r["node"], r["op"], "x".join(map(str, r["shape"])) or "-", str(r["reduction"] or "-"),
                     "yes" if r["eligible"] else "no", f"{100 * r['sparsity']:.1f}%", ver, note))
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    s = report["summary"]
    lines.append(f"{s['pruned']}/{s['layers']} layers pruned 2:4; {100 * s['zero_fraction_pruned_layers']:.1f}% "
                 f"zeros in pruned layers, {100 * s['zero_fraction_all']:.1f}% of all {s['weights']} "
                 f"Conv/Gemm/MatMul weights; pattern verified in the written ONNX: "
                 f"{'yes' if s['all_verified'] else 'NO'}")
    return "\n".join(lines)


def sparsify_onnx(in_onnx: Any, out_onnx: str | Path, *, exclude: Iterable[str] = ()) -> dict:
    """Prune a (streaming) FP32 ONNX to 2:4 and write it atomically, with the pattern verified.

    Args:
        in_onnx (str | Path | Stage | SourceModel): FP32 ONNX (Q/DQ or FP16 models: prune before quantizing);
            a SourceModel's SHA-256 is reused (what a build passes).
        out_onnx (str | Path): Destination ``.onnx`` (one file; external data is inlined).
        exclude (Iterable[str]): Node names left dense.
    Returns:
        dict: ``{"input", "output", "parent_sha256", "sha256", "pattern": "2:4", "axis": "reduction",
        "layers": [LayerReport as dict...], "summary": summarize(...), "seconds", "output_snr_db"}``
        (JSON-serialisable; ``output_snr_db``: the pruned model's output vs the dense one on 1.5 s of speech, dB,
        None for a model that does not stream audio; a warning is logged below :data:`cosyedge.precision.cost.WARN_SNR_DB`).
    Raises:
        ArtifactError: input missing/corrupt, same path as the output, output not writable.
        UsageError: unknown node in ``exclude``; no layer is eligible.
    """
    t0 = time.perf_counter()
    source = SourceModel.of(in_onnx)
    src = source.path
    out_onnx = check_writable(out_onnx)
    check_not_input(src, out_onnx)
    model = load_onnx(src)
    with LOG.stage(f"sparsify 2:4 {src.name} -> {out_onnx}"):
        reports = sparsify_model(model, exclude=exclude)
        if not any(r.eligible for r in reports):
            why = "; ".join(f"{r.node}: {r.reason}" for r in reports[:4]) or "no Conv/Gemm/MatMul layer"
            raise UsageError(f"{src}: no layer can be pruned 2:4 ({why})")
        keep = [(p.key, p.value) for p in model.metadata_props if p.key != SPARSITY_KEY]
        del model.metadata_props[:]
        for k, v in keep + [(SPARSITY_KEY, "2:4")]:
            p = model.metadata_props.add()
            p.key, p.value = k, v
        with atomic_output(out_onnx) as tmp:
            onnx.save(model, str(tmp))
            verify_onnx(tmp, reports)
        report = {
            "input": str(src), "output": str(out_onnx), "parent_sha256": source.sha256,
            "sha256": sha256_file(out_onnx), "pattern": f"{N_KEEP}:{M_GROUP}", "axis": "reduction (input channels)",
            "layers": [dataclasses.asdict(r) for r in reports], "summary": summarize(reports),
            "seconds": time.perf_counter() - t0,
        }
    LOG.info("sparsify: %d/%d layers pruned 2:4", report["summary"]["pruned"], len(reports))
    report["output_snr_db"] = output_cost(
        source, out_onnx, "sparsify", "2:4 magnitude pruning without fine-tuning",
        "fine-tune with 2:4 masks, cosyedge.precision.sparse_torch, or build without --sparse")
    return report



def is_sparse_onnx(path: str | Path) -> bool:
    """Return True (bool) when the ONNX file carries ``cosyedge.sparsity`` metadata (written by
    :func:`sparsify_onnx`)."""
    model = load_onnx(path, load_external_data=False)
    return any(p.key == SPARSITY_KEY for p in model.metadata_props)


def check_dense_parent(sparse_onnx: str | Path, dense_onnx: str | Path) -> str:
    """Check that ``dense_onnx`` can be the dense parent of ``sparse_onnx`` and return its SHA-256.

    Args:
        sparse_onnx (str | Path): FP32 streaming ONNX (or, before it exists, any path other than ``dense_onnx``).
        dense_onnx (str | Path): a cosyedge streaming ONNX (stream contract in its metadata).
    Returns:
        str: SHA-256 of ``dense_onnx`` (64 hex characters).
    Raises:
        ArtifactError: ``dense_onnx`` is missing, not a readable ONNX, or has no cosyedge stream contract.
        UsageError: ``dense_onnx`` is ``sparse_onnx`` itself, or a 2:4-pruned model.
    """
    dense = Path(dense_onnx)
    if not dense.is_file():
        raise ArtifactError(f"dense parent {dense} not found")
    if Path(sparse_onnx).exists() and dense.resolve() == Path(sparse_onnx).resolve():
        raise UsageError(f"dense parent {dense} is the sparse model itself")
    StreamContract.from_onnx(dense)  # a streaming ONNX made by cosyedge, not any file
    if is_sparse_onnx(dense):
        raise UsageError(f"dense parent {dense} is a 2:4-pruned model (cosyedge.sparsity), not a dense one")
    return sha256_file(dense)


def stamp_dense_parent(sparse_onnx: str | Path, dense_onnx: str | Path, expect_sha256: str | None = None) -> str:
    """Record in ``sparse_onnx`` which dense model it was fine-tuned from: the SHA-256 of ``dense_onnx`` under
    :data:`DENSE_PARENT_KEY`, so ``cosyedge check`` can tell a sparse model left over from an older dense one.

    The file is rewritten in place through a temp file and a rename; graph and weights are unchanged. Whether
    ``dense_onnx`` holds the weights the fine-tune started from is the caller's knowledge (e.g. the bundled
    ``reference.stream.onnx`` for the bundled ``reference.safetensors``); this only checks that it is a dense
    streaming ONNX (:func:`check_dense_parent`).

    Args:
        sparse_onnx (str | Path): FP32 streaming ONNX with 2:4 fine-tuned weights (e.g. from
            ``scripts/training/finetune_sparse.py``).
        dense_onnx (str | Path): the dense FP32 streaming ONNX of the weights the fine-tune started from.
        expect_sha256 (str | None): SHA-256 ``dense_onnx`` had when the fine-tune started; a different one now
            (the file was replaced meanwhile) is an error.
    Returns:
        str: the recorded SHA-256 (64 hex characters).
    Raises:
        ArtifactError: ``sparse_onnx`` is missing or not a readable ONNX; ``dense_onnx`` is missing, not a
            streaming ONNX, or no longer has ``expect_sha256``.
        UsageError: ``dense_onnx`` is ``sparse_onnx`` itself or a 2:4-pruned model.
    """
    sha = check_dense_parent(sparse_onnx, dense_onnx)
    if expect_sha256 is not None and sha != expect_sha256:
        raise ArtifactError(f"dense parent {dense_onnx} changed during the fine-tune (SHA-256 {expect_sha256[:12]} "
                            f"at the start, {sha[:12]} now); fine-tune again from the current one")
    model = load_onnx(sparse_onnx)
    keep = [(p.key, p.value) for p in model.metadata_props if p.key != DENSE_PARENT_KEY]
    del model.metadata_props[:]
    for k, v in keep + [(DENSE_PARENT_KEY, sha)]:
        p = model.metadata_props.add()
        p.key, p.value = k, v
    with atomic_output(sparse_onnx) as tmp:
        onnx.save(model, str(tmp))
    return sha


def dense_parent_sha256(path: str | Path) -> str | None:
    """Return the SHA-256 (str, hex) recorded by :func:`stamp_dense_parent` in the ONNX at ``path``, or None
    when it records none (a model pruned on the fly, or one fine-tuned without a known dense ONNX).

    Raises:
        ArtifactError: ``path`` is missing or not a readable ONNX.
    """
    model = load_onnx(path, load_external_data=False)
    return next((p.value for p in model.metadata_props if p.key == DENSE_PARENT_KEY), None)


def report_json(report: dict) -> str:
    """Return the report (dict) as indented JSON text (str)."""
    return json.dumps(report, indent=2)


__all__ = ["LayerReport", "check_2to4", "format_report", "is_sparse_onnx", "mask_2to4",
           "report_json", "sparsify_model", "sparsify_onnx", "summarize", "verify_onnx"]
