"""Precision labels of ``cosyedge check``: the ``--precisions`` list and the ``--candidate LABEL=PATH`` checks.

A label is a precision with an optional ``-sparse`` (``fp16``, ``int8-sparse``; written and parsed by
:func:`cosyedge.builders.names.precision_label` / :func:`~cosyedge.builders.names.parse_precision_label`).
A candidate given for a label must be what the label says and be built from the label's FP32 parent.
"""

from __future__ import annotations

from pathlib import Path

from cosyedge.artifacts import EngineManifest
from cosyedge.builders.names import parse_precision_label, precision_label
from cosyedge.compare.models import CompareModel, check_lineage, load_compare_model
from cosyedge.errors import ArtifactError, UsageError

DEFAULT_PRECISIONS = ("fp16", "int8-sparse")


def parse_precisions(text: str | None) -> list[str]:
    """Parse ``"fp16,int8-sparse"`` into normalized labels (list[str]).

    Raises:
        UsageError: empty list or unknown label.
    """
    if text is None:
        return list(DEFAULT_PRECISIONS)
    labels = []
    for part in str(text).split(","):
        if part.strip():
            lab = precision_label(*parse_precision_label(part))
            if lab not in labels:
                labels.append(lab)
    if not labels:
        raise UsageError("--precisions is empty (e.g. --precisions fp16,int8-sparse)")
    return labels


# --------------------------------------------------------------------------------------------- candidates
def load_candidate(label: str, target: str | Path, parent: CompareModel) -> CompareModel:
    """Load ``--candidate label=target`` and check that it is what the label says, built from ``parent``.

    Args:
        label (str): Normalized precision label (``fp16``, ``int8-sparse``...).
        target (str | Path): Engine folder or streaming ONNX given for it.
        parent (CompareModel): The FP32 model the label is compared with.
    Returns:
        CompareModel: the candidate.
    Raises:
        UsageError: built from another model than ``parent`` (manifest ``parent_sha256``,
            :func:`cosyedge.compare.models.check_lineage`), or not the label's
            precision/sparsity (:func:`check_candidate_label`); exit 2.
        ArtifactError: missing/invalid engine, a manifest whose ``schema_version`` is newer than this
            cosyedge (:func:`cosyedge.artifacts.load_manifest`); exit 3.
    """
    try:
        cand = load_compare_model(target)
    except ArtifactError as err:
        raise ArtifactError(f"--candidate {label}={target}: {err}") from None
    check_lineage(cand, parent, f"--candidate {label}={target}", f" that '{label}' is compared with")
    check_candidate_label(cand, label, f"--candidate {label}={target}")
    return cand


def check_candidate_label(cand: CompareModel, label: str, where: str) -> None:
    """Refuse a candidate that is not what its precision label says.

    Checked, in order:

    1. what the candidate says it is: an engine folder's manifest ``precision`` and ``sparse``; for a bare
       ONNX its ``cosyedge.precision`` and ``cosyedge.sparsity`` metadata, when present;
    2. the ONNX content (:func:`cosyedge.builders.trt.onnx_precision_stats`): ``int8`` needs QuantizeLinear/
       DequantizeLinear nodes; ``fp16`` needs FP16 initializers or Casts to FP16 and no Q/DQ; ``fp32`` has
       neither.

    Args:
        cand (CompareModel): The loaded candidate.
        label (str): Normalized precision label it is checked for.
        where (str): What the user gave (``--candidate fp16=PATH``), for the message.
    Raises:
        UsageError: the first contradiction, one line naming the field or the ONNX markers (exit 2).
    """
    from cosyedge.artifacts import load_onnx
    from cosyedge.builders.trt import onnx_precision_stats
    from cosyedge.compare.models import PRECISION_KEY, SPARSITY_KEY

    precision, sparse = parse_precision_label(label)
    model = load_onnx(cand.model_path, load_external_data=False)
    stats = onnx_precision_stats(model)
    qdq, f16 = stats["qdq_nodes"] + stats["int8_kernels"], stats["fp16_initializers"] + stats["fp16_casts"]
    content = "int8" if qdq else "fp16" if f16 else "fp32"  # what the ONNX holds
    if cand.manifest is not None:
        m = EngineManifest.from_dict(cand.manifest)
        said, said_sparse = m.precision, m.sparse
        src, src_sparse = "its manifest says", "its manifest says"
    else:
        meta = {p.key: p.value for p in model.metadata_props}
        said, said_sparse = meta.get(PRECISION_KEY), (True if SPARSITY_KEY in meta else None)
        src, src_sparse = f"its ONNX metadata ({PRECISION_KEY}) says", f"its ONNX metadata ({SPARSITY_KEY}) says"
    actual = precision_label(said or content, sparse if said_sparse is None else said_sparse)
    fix = (f"give the {label} build, or check this one as --candidate {actual}=..." if actual != label else
           f"give the {label} build made by 'cosyedge build'")
    if said is not None and said != precision:
        raise UsageError(f"{where}: {src} precision '{said}', not the label's '{precision}'; {fix}")
    if said_sparse is not None and said_sparse != sparse:
        what = "2:4 sparse (sparse: true)" if said_sparse else "dense (sparse: false)"
        raise UsageError(f"{where}: {src_sparse} {what}, but the label '{label}' is "
                         f"{'2:4 sparse' if sparse else 'dense'}; {fix}")
    onnx_path = cand.model_path
    if precision == "int8" and not qdq:
        raise UsageError(f"{where}: {onnx_path} has no QuantizeLinear/DequantizeLinear nodes and no INT8 kernel, so "
                         f"it is not an INT8 model (label '{label}'); {fix}")
    if precision != "int8" and qdq:
        raise UsageError(f"{where}: {onnx_path} has {qdq} Q/DQ nodes or INT8 kernels, so it is an INT8 "
                         f"model, not {precision.upper()} (label '{label}'); {fix}")
    if precision == "fp16" and not f16:
        raise UsageError(f"{where}: {onnx_path} holds no FP16 tensor (no FP16 initializer, no Cast to FP16), so it "
                         f"is not an FP16 model (label '{label}'); {fix}")
    if precision == "fp32" and f16:
        raise UsageError(f"{where}: {onnx_path} holds {stats['fp16_initializers']} FP16 initializers and "
                         f"{stats['fp16_casts']} Casts to FP16, so it is an FP16 model, not FP32 (label '{label}'); "
                         f"{fix}")


__all__ = ["DEFAULT_PRECISIONS", "check_candidate_label", "load_candidate", "parse_precisions"]
