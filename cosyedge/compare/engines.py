"""The engines ``cosyedge check`` gates: reuse-or-build of each label's ONNX Runtime engine
(:func:`ensure_engine`) and the FP32 sparse parent its sparse labels are built from (:func:`sparse_parent`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from cosyedge.artifacts import EngineManifest, atomic_output, check_writable
from cosyedge.compare.baseline import amax_cache_path
from cosyedge.builders.names import parse_precision_label
from cosyedge.compare.models import CompareModel, load_compare_model
from cosyedge.errors import ArtifactError, UsageError
from cosyedge.log import LOG


def sparse_parent(ref: CompareModel, sparse_onnx: str | Path | None = None) -> CompareModel:
    """Return the FP32 model the sparse labels of a check of ``ref`` are built from and compared with.

    Args:
        ref (CompareModel): The FP32 streaming reference of the check.
        sparse_onnx (str | Path | None): FP32 streaming ONNX with 2:4-pruned, fine-tuned weights. Default:
            :data:`cosyedge.models.REFERENCE_SPARSE_STREAM_ONNX` when ``ref`` is the bundled reference model
            (that path, and that file exists), else ``ref`` itself (sparse builds then prune ``ref`` on the fly;
            a copy elsewhere passes ``sparse_onnx``). The dense parent the sparse model records matches ``ref``
            by file hash, or by :func:`~cosyedge.artifacts.model_content_sha256` (the same graph and weights
            with another machine-measured proof).
    Returns:
        CompareModel: the sparse parent (``ref`` when there is none).
    Raises:
        UsageError: the sparse parent is not an FP32 streaming ONNX, has another model name, or its inputs,
            outputs, stream contract or state pairs differ from ``ref``'s (names the tensor; for the bundled
            default, says to re-run ``scripts/training/finetune_sparse.py`` or pass ``--sparse-onnx``).
        UsageError: the sparse parent records (:func:`cosyedge.precision.sparsity.stamp_dense_parent`) that it
            was fine-tuned from a dense ONNX other than ``ref`` (a stale sparse model; exit 2).
        ArtifactError: ``sparse_onnx`` does not exist or is not a readable streaming ONNX (exit 3).
    """
    from cosyedge.compare.models import check_compatible
    from cosyedge.models import REFERENCE_SPARSE_STREAM_ONNX, REFERENCE_STREAM_ONNX
    from cosyedge.precision.sparsity import dense_parent_sha256

    what = "--sparse-onnx"
    if sparse_onnx is None:
        bundled = Path(ref.model_path).resolve() == REFERENCE_STREAM_ONNX.resolve()
        if not (bundled and REFERENCE_SPARSE_STREAM_ONNX.is_file()):
            return ref
        sparse_onnx = REFERENCE_SPARSE_STREAM_ONNX
        what = (f"the bundled sparse model {REFERENCE_SPARSE_STREAM_ONNX.name} (re-run "
                f"scripts/training/finetune_sparse.py after changing the model, or pass --sparse-onnx)")
    if not Path(sparse_onnx).exists():
        raise ArtifactError(f"--sparse-onnx {sparse_onnx} not found (give the FP32 streaming ONNX of the 2:4 "
                         f"fine-tuned model, e.g. made by scripts/training/finetune_sparse.py)")
    parent = load_compare_model(sparse_onnx)
    if parent.precision != "fp32":
        raise UsageError(f"{what}: {parent.path} is a {parent.label} build; give the FP32 streaming ONNX "
                         f"of the 2:4 fine-tuned model")
    if parent.contract.name != ref.contract.name:
        raise UsageError(f"{what}: {parent.path} is model '{parent.contract.name}', the reference is "
                         f"'{ref.contract.name}'")
    try:
        check_compatible(ref, parent)
    except UsageError as err:
        raise UsageError(f"{what} does not fit the reference: {err}") from None
    recorded = dense_parent_sha256(parent.model_path)
    if recorded and recorded != ref.root_sha256 and not (
            not ref.parent_sha256 and recorded == ref.content_sha256):  # a copy, proof changed
        raise UsageError(f"{what}: {parent.path} was fine-tuned from another dense model (SHA-256 {recorded[:12]}, "
                         f"the reference {ref.path} is {ref.root_sha256[:12]}); fine-tune it again from the "
                         f"reference's weights with scripts/training/finetune_sparse.py")
    return parent


def ensure_engine(ref: CompareModel, label: str, engines_dir: Path, *, baseline: Path, update: bool,
                  calib: str | Path | None, derived: bool | None = None) -> Path:
    """Return an ONNX Runtime engine folder of ``ref`` for ``label``, building it when needed.

    The folder is ``<engines_dir>/<model>-<label>-onnxruntime``, ``<model>`` as ``cosyedge build`` names it
    (:func:`cosyedge.builders.names.engine_model_name`): the model's name for the dense reference, and
    ``<name>-<sha256[:8]>`` for the sparse parent (``derived``; the bundled fine-tuned model records its dense
    parent, so a plain ``cosyedge build --onnx reference.sparse.stream.onnx --sparse [--int8]`` writes the same
    folder), so check's builds of the sparse parent and the user's builds of the dense model (``--sparse``
    prunes it on the fly) never replace each other.

    Reused when that folder loads, its manifest's ``parent_sha256``
    is the reference's hash and it was built without ``--exclude`` (INT8: and from the amax cache kept
    next to the baseline, or from ``calib``: same quantized model and same calibration manifest SHA-256;
    a user's own ``cosyedge build --int8 --calib DIR`` in that folder is rebuilt, not gated). INT8 builds
    use that amax cache; with ``update`` (or ``calib``) they calibrate instead (reusing the calibration
    set's own cache when current) and the cache is copied next to the baseline. An INT8 build that calibrates
    nothing (ONNX Runtime's default ``ort_matmul`` with dynamic activations,
    :func:`cosyedge.precision.int8.needs_calibration`) needs no amax cache and keeps none.

    Args:
        ref (CompareModel): The FP32 parent the label is built from (the reference or the sparse parent).
        label (str): Normalized precision label.
        engines_dir (Path): Engines root.
        baseline (Path): The baseline file (INT8 amax caches are kept next to it).
        update (bool): ``--update-baseline``: INT8 calibrates instead of using the kept amax.
        calib (str | Path | None): INT8 calibration set to calibrate on.
        derived (bool | None): ``ref`` is not the model its name stands for (check's sparse parent): the folder
            name gets its hash even when the ONNX records no dense parent. None: from ``ref``'s metadata.
    Raises:
        UsageError: INT8 without its amax cache and without ``update``/``calib`` (says what to run);
            the cache belongs to another model.
        ArtifactError / DependencyError / AccuracyError: from the build.
    """
    from cosyedge.builders import build_engine
    from cosyedge.builders.cache import amax_matches, label_fresh, reuse_or_build
    from cosyedge.builders.names import default_placement, engine_folder_name, engine_model_name
    from cosyedge.precision.int8 import needs_calibration

    precision, sparse = parse_precision_label(label)
    name = ref.contract.name
    engine_name = engine_model_name(name, ref.model_path, derived=derived)
    plain = default_placement("onnxruntime", ref.model_path)[0]  # the placement a plain --int8 build gets
    folder = Path(engines_dir) / engine_folder_name(engine_name, precision, "onnxruntime", sparse, plain_placement=plain)
    amax = amax_cache_path(baseline, name, label)
    calibrates = precision == "int8" and needs_calibration(ref.model_path, plain)
    # an INT8 build that calibrates nothing (dynamic activations) reads no amax cache: none is needed or kept
    use_amax = calibrates and not update and calib is None
    if use_amax and not amax.is_file():
        raise UsageError(f"no INT8 calibration for '{label}' of this model ({amax} missing); run "
                         f"'cosyedge check --update-baseline' (calibrates on calib/, made from Debian packages "
                         f"on first use) or pass --calib DIR")
    kwargs: dict[str, Any] = {}
    if precision == "int8":
        kwargs = {"amax": amax} if use_amax else {"calib": calib}

    def build() -> Path:
        try:
            return build_engine(ref.model_path, backend="onnxruntime", out_dir=engines_dir, name=engine_name,
                                precision=precision, sparse=sparse, **kwargs)
        except ArtifactError as err:
            if use_amax and "amax" in str(err):
                raise UsageError(f"INT8 calibration {amax} does not belong to this model ({err}); run "
                                 f"'cosyedge check --update-baseline'") from None
            raise

    folder = reuse_or_build(ref.model_path, folder, build=build, reused="reusing engine %s",
                            fresh=lambda f: label_fresh(f, ref.model_sha256, label,
                                                        amax=amax if use_amax else None, calib=calib,
                                                        placement=plain, calibrated=calibrates))
    if precision == "int8" and not use_amax:
        manifest = EngineManifest.load(folder)
        used = manifest.int8.get("amax_path")
        if used and amax_matches(Path(used), manifest) and Path(used).resolve() != amax.resolve():
            check_writable(amax)
            with atomic_output(amax) as tmp:
                shutil.copyfile(used, tmp)
            LOG.info("INT8 calibration of '%s' kept as %s", label, amax)
    return folder


__all__ = ["ensure_engine", "sparse_parent"]
