"""What ``cosyedge compare`` compares: an engine folder or a streaming ONNX, as a Polygraphy runner.

:func:`load_compare_model` accepts an engine folder made by ``cosyedge build`` (ONNX Runtime or
TensorRT; the manifest and model hash are validated by :func:`cosyedge.runtime.engine.load_engine` /
:func:`cosyedge.runtime.trt.validate_trt_folder`) or a bare streaming ``.onnx`` with ``cosyedge.*``
metadata, and returns a :class:`CompareModel`: the stream contract, the precision label
(``fp32``, ``fp16``, ``int8``, ``int8-sparse``...) and a factory of Polygraphy runners:

* ONNX Runtime: ``polygraphy.backend.onnxrt.OnnxrtRunner`` on an ``onnxruntime.InferenceSession``
  (CPU, ``threads`` intra-op threads), optionally after
  ``polygraphy.backend.onnx.ModifyOutputs(model, outputs=constants.MARK_ALL)`` (every intermediate
  tensor becomes an output, for layer bisection);
* TensorRT: ``polygraphy.backend.trt.TrtRunner(EngineFromBytes(BytesFromPath(engine.plan)))``, imported
  only when the folder is a TensorRT engine; without TensorRT, pycuda or a GPU the engine cannot run
  here and that is a one-line :class:`~cosyedge.errors.UsageError` (exit 2).

:func:`check_compatible` refuses a candidate whose inputs/outputs, states, sample rate or hop differ from
the reference (exit 2, the differing names in the message); :func:`check_lineage` one built from another model
(its recorded parent SHA-256, exit 2).

Sources: Polygraphy API docs, ``polygraphy/backend/onnxrt/runner.py`` (``OnnxrtRunner``),
``polygraphy/backend/onnx/loader.py`` (``ModifyOutputs``, ``OnnxFromPath``, ``BytesFromOnnx``),
``polygraphy/backend/trt/{loader,runner}.py`` (``EngineFromBytes``, ``TrtRunner``).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from cosyedge._lazy import has_module, lazy_import
from cosyedge.artifacts import (
    MANIFEST_NAME,
    EngineManifest,
    StreamContract,
    load_manifest,
    load_onnx,
    sha256_file,
)
from cosyedge.builders.names import parse_precision_label, precision_label
from cosyedge.errors import (
    CosyEdgeError,
    DependencyError,
    UsageError,
    first_line,
)

onnx = lazy_import("onnx")

PRECISION_KEY = "cosyedge.precision"
SPARSITY_KEY = "cosyedge.sparsity"


def _graph_io(model: Any) -> tuple[dict, dict]:
    """``({input: (dims, elem_type)}, {output: (dims, elem_type)})`` of an ONNX ModelProto (initializers excluded)."""
    inits = {t.name for t in model.graph.initializer}

    def sig(v):
        t = v.type.tensor_type
        dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim] \
            if t.HasField("shape") else None
        return dims, int(t.elem_type)

    ins = {v.name: sig(v) for v in model.graph.input if v.name not in inits}
    outs = {v.name: sig(v) for v in model.graph.output}
    return ins, outs


@dataclasses.dataclass
class CompareModel:
    """A reference or candidate of a comparison.

    Attributes:
        path (Path): What the user gave (engine folder or ``.onnx``).
        model_path (Path): The streaming ONNX (run by ONNX Runtime; for TensorRT the ONNX the plan came from).
        contract (StreamContract): Stream contract (audio input/output names, rate, hop, states).
        backend (str): ``onnxruntime`` | ``tensorrt``.
        precision (str): ``fp32`` | ``fp16`` | ``int8``.
        sparse (bool): 2:4-pruned weights.
        model_sha256 (str): SHA-256 of ``model_path``.
        parent_sha256 (str | None): SHA-256 of the FP32 streaming ONNX it was built from (manifest), or None.
        manifest (dict | None): Engine manifest, None for a bare ``.onnx``.
        plan_path (Path | None): TensorRT plan (``engine.plan``) for TensorRT folders.
        inputs (dict): ONNX graph inputs ``{name: (dims, onnx elem type)}``.
        outputs (dict): ONNX graph outputs ``{name: (dims, onnx elem type)}``.
    """

    path: Path
    model_path: Path
    contract: StreamContract
    backend: str
    precision: str
    sparse: bool
    model_sha256: str
    parent_sha256: str | None = None
    manifest: dict | None = None
    plan_path: Path | None = None
    inputs: dict = dataclasses.field(default_factory=dict)
    outputs: dict = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        """str: precision label, e.g. ``int8-sparse``."""
        return precision_label(self.precision, self.sparse)

    @functools.cached_property
    def content_sha256(self) -> str:
        """str: :func:`~cosyedge.artifacts.model_content_sha256` of ``model_path`` (the hash without the proof
        figures measured on the exporting machine), computed once per model (an ONNX load and serialise)."""
        from cosyedge.artifacts import model_content_sha256

        return model_content_sha256(self.model_path)

    @property
    def root_sha256(self) -> str:
        """str: SHA-256 of the FP32 model this one derives from (its own hash when it is an FP32 ONNX)."""
        return self.parent_sha256 or self.model_sha256

    def runner(self, name: str, *, mark_all: bool = False, threads: int = 1) -> Any:
        """Return an inactive Polygraphy runner for this model.

        Args:
            name (str): Runner name (unique within a comparison).
            mark_all (bool): Mark every intermediate tensor as an output (ONNX Runtime only;
                ``ModifyOutputs(outputs=constants.MARK_ALL)``).
            threads (int): ONNX Runtime intra-op threads.
        Returns:
            polygraphy.backend.base.BaseRunner: ``OnnxrtRunner`` or ``TrtRunner``; ``infer(feed_dict)``
            takes ``{name: np.ndarray}`` and returns ``{name: np.ndarray}`` (buffers may be reused).
        Raises:
            UsageError: ``mark_all`` on a TensorRT engine.
            DependencyError: polygraphy is missing.
        """
        pg_onnxrt = _polygraphy("polygraphy.backend.onnxrt")
        if self.backend == "tensorrt":
            if mark_all:
                raise UsageError("--mark-all needs ONNX models or ONNX Runtime engines; give the engine's "
                                 f"model.onnx ({self.model_path}) instead of the TensorRT folder")
            pg_trt = _polygraphy("polygraphy.backend.trt")
            pg_common = _polygraphy("polygraphy.backend.common")
            return pg_trt.TrtRunner(pg_trt.EngineFromBytes(pg_common.BytesFromPath(str(self.plan_path))), name=name)
        model_path = self.model_path

        def make_session():
            from cosyedge.runtime.ort import session_from_onnx

            if mark_all:
                pg_onnx = _polygraphy("polygraphy.backend.onnx")
                constants = _polygraphy("polygraphy.constants")
                model = pg_onnx.ModifyOutputs(pg_onnx.OnnxFromPath(str(model_path)), outputs=constants.MARK_ALL)()
                src: Any = model.SerializeToString()
            else:
                src = str(model_path)
            try:
                # ONNX Runtime cannot optimise away marked tensors; fusions would rename them.
                return session_from_onnx(src, threads=int(threads), inter_threads=1, optimize=not mark_all,
                                         log_severity=3)
            except Exception as err:  # noqa: BLE001 -onnxruntime raises its own exception types
                raise UsageError(f"{self.path} cannot run in ONNX Runtime here: {first_line(err)}") from None

        return pg_onnxrt.OnnxrtRunner(make_session, name=name)


def _polygraphy(module: str) -> Any:
    """Import a polygraphy submodule or raise DependencyError with the pip command."""
    import importlib

    if not has_module("polygraphy"):
        raise DependencyError("cosyedge compare/check need Polygraphy: pip install polygraphy")
    from polygraphy.logger import G_LOGGER

    G_LOGGER.colors = False  # no 'colored' module nag; cosyedge logs its own lines
    return importlib.import_module(module)


def _onnx_flags(model: Any) -> tuple[str, bool]:
    meta = {p.key: p.value for p in model.metadata_props}
    return meta.get(PRECISION_KEY, "fp32"), SPARSITY_KEY in meta


def load_compare_model(path: str | Path) -> CompareModel:
    """Load an engine folder or streaming ONNX for comparison.

    Args:
        path (str | Path): Engine folder (``manifest.json`` + ``model.onnx`` [+ ``engine.plan``]) or a
            streaming ``.onnx`` with ``cosyedge.*`` metadata.
    Returns:
        CompareModel
    Raises:
        ArtifactError: missing path, invalid/stale manifest, model hash mismatch, no stream contract or
            no state (exit 3).
        UsageError: a TensorRT engine on a machine without TensorRT/pycuda/GPU (it cannot run here; exit 2).
    """
    from cosyedge.builders.cache import load_or_rebuild as load_engine

    path = Path(path)
    if path.is_file() and path.name == MANIFEST_NAME:
        path = path.parent
    if path.is_dir():
        manifest = load_manifest(path)
        if EngineManifest.from_dict(manifest).backend == "tensorrt":
            return _load_trt(path, manifest)
    engine = load_engine(path)  # validates manifest, model hash, contract, streaming state
    model = load_onnx(engine.model_path, load_external_data=False)
    ins, outs = _graph_io(model)
    if engine.manifest is not None:
        m = EngineManifest.from_dict(engine.manifest)
        precision, sparse, parent = m.precision, m.sparse, m.parent_sha256
    else:
        precision, sparse = _onnx_flags(model)
        meta = {p.key: p.value for p in model.metadata_props}
        parent = meta.get("cosyedge.parent_sha256")
    return CompareModel(path=path, model_path=Path(engine.model_path), contract=engine.contract,
                        backend="onnxruntime", precision=precision, sparse=sparse,
                        model_sha256=sha256_file(engine.model_path), parent_sha256=parent,
                        manifest=engine.manifest, inputs=ins, outputs=outs)


def _load_trt(path: Path, manifest: dict) -> CompareModel:
    """A TensorRT engine folder: runnable only with TensorRT + pycuda + a GPU (else UsageError)."""
    try:
        from cosyedge.builders.cache import load_or_rebuild as load_trt_engine

        engine = load_trt_engine(path, manifest)
    except DependencyError as err:
        raise UsageError(f"engine {path} is a TensorRT engine and cannot run on this machine "
                         f"({str(err).split(';')[0]}); compare it on its GPU machine, or compare its "
                         f"{path / 'model.onnx'} with ONNX Runtime") from None
    model_path = Path(getattr(engine, "model_path", path / "model.onnx"))
    plan_path = Path(getattr(engine, "plan_path", path / "engine.plan"))
    model = load_onnx(model_path, load_external_data=False)
    ins, outs = _graph_io(model)
    m = EngineManifest.from_dict(manifest)
    return CompareModel(path=path, model_path=model_path, contract=StreamContract.from_onnx(model),
                        backend="tensorrt", precision=m.precision, sparse=m.sparse,
                        model_sha256=sha256_file(model_path), parent_sha256=m.parent_sha256, manifest=manifest,
                        plan_path=plan_path, inputs=ins, outputs=outs)


def check_compatible(ref: CompareModel, cand: CompareModel) -> None:
    """Refuse a candidate that cannot be compared with the reference.

    Checked: graph input and output names (and declared ranks/static dims), the audio input/output
    names, sample rate (Hz), hop, total stride and delay (samples), each streaming input/output's
    ``frames_per_hop``, ``time_axis``, ``delay_frames`` and ``kind``, and every state pair (names and shapes).

    Raises:
        UsageError: the first difference found, naming the tensors (exit 2).
    """
    where = f"candidate {cand.path} and reference {ref.path}"
    for kind, a, b in (("inputs", ref.inputs, cand.inputs), ("outputs", ref.outputs, cand.outputs)):
        missing, extra = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if missing or extra:
            raise UsageError(f"{where} have different {kind}: missing in candidate {missing}, "
                             f"only in candidate {extra}")
        for name in a:
            da, db = a[name][0], b[name][0]
            if da is not None and db is not None and (
                    len(da) != len(db) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                              for x, y in zip(da, db))):
                raise UsageError(f"{where} differ in {kind[:-1]} '{name}': shape {db} vs reference {da}")
    rc, cc = ref.contract, cand.contract
    for field in ("input", "output", "sample_rate_hz", "hop_samples", "total_stride", "delay_samples"):
        if getattr(rc, field) != getattr(cc, field):
            raise UsageError(f"{where} differ in stream contract '{field}': {getattr(cc, field)!r} vs "
                             f"reference {getattr(rc, field)!r}")
    cio = {io.name: io for io in cc.stream_inputs + cc.stream_outputs}
    for io in rc.stream_inputs + rc.stream_outputs:
        other = cio.get(io.name)
        for field in ("frames_per_hop", "time_axis", "delay_frames", "kind"):
            if other is not None and getattr(io, field) != getattr(other, field):
                raise UsageError(f"{where} differ in stream contract 'io.{field}' of '{io.name}': "
                                 f"{getattr(other, field)!r} vs reference {getattr(io, field)!r}")
    rs = {(s.input, s.output): list(s.shape) for s in rc.states}
    cs = {(s.input, s.output): list(s.shape) for s in cc.states}
    if rs != cs:
        diff = [f"{k[0]}->{k[1]} {cs.get(k)} vs {rs.get(k)}" for k in sorted(set(rs) | set(cs)) if rs.get(k) != cs.get(k)]
        raise UsageError(f"{where} have different state pairs (candidate vs reference): {'; '.join(diff)}")


def check_lineage(cand: CompareModel, parent: CompareModel, where: str, compared: str = "") -> None:
    """Refuse a candidate built from another model than ``parent`` (``cosyedge compare`` and ``check --candidate``).

    The candidate's recorded FP32 parent (its manifest's ``parent_sha256``, or a bare ONNX's
    ``cosyedge.parent_sha256`` metadata) must be ``parent`` itself (its SHA-256) or, when ``parent`` is an engine,
    the FP32 model that engine was built from (:attr:`CompareModel.root_sha256`). A candidate that records no
    parent (a bare FP32 ONNX) passes: nothing says where it comes from.

    Args:
        cand (CompareModel): The candidate.
        parent (CompareModel): The model it is compared with.
        where (str): What the user gave, for the message (``candidate engines/x``, ``--candidate int8=PATH``).
        compared (str): Appended after the parent in the message (e.g. `` that 'int8' is compared with``).
    Raises:
        UsageError: one line, exit 2: ``<where> was built from another model (parent sha256 <12 hex>[, built from
            <path>]), not from <parent> (sha256 <12 hex>)<compared>; build it with 'cosyedge build --onnx <parent>
            ...'``.
    """
    if not cand.parent_sha256 or cand.parent_sha256 in (parent.model_sha256, parent.root_sha256):
        return
    was = (cand.manifest or {}).get("parent_path")
    raise UsageError(f"{where} was built from another model (parent sha256 {cand.parent_sha256[:12]}"
                     + (f", built from {was}" if was else "") + f"), not from {parent.model_path} (sha256 "
                     f"{parent.root_sha256[:12]}){compared}; build it with 'cosyedge build --onnx {parent.model_path} "
                     f"...'")


def _precision_rank(m: CompareModel) -> tuple[int, int]:
    """How exact ``m``'s arithmetic is, for ordering a reference against its candidate: FP32 > FP16 > INT8, a dense
    model above the 2:4-pruned one of the same precision (tuple, larger is more exact)."""
    return ({"fp32": 2, "fp16": 1}.get(m.precision, 0), 0 if m.sparse else 1)


def check_reference(ref: CompareModel, cand: CompareModel | None = None) -> None:
    """Refuse a reference that cannot judge its candidate, in one line (exit 2).

    ``cosyedge check`` (no ``cand``) measures every label against the FP32 reference: anything else (FP16, INT8, a
    2:4-pruned model) is refused. ``cosyedge compare REF CAND`` refuses a reference less exact than its candidate
    (:func:`_precision_rank`): the candidate's tolerance is that of its own precision, so an FP16 engine given as the
    reference of the FP32 model (``compare engines/x-fp16 s.stream.onnx``, the arguments swapped) exited 1 "fp32
    candidate ... outside tolerance", an accuracy regression that is none. Two builds of one precision (an INT8 engine
    against an INT8 variant, ``--mark-all`` naming where they part) and an FP32 2:4-pruned parent of its
    ``int8-sparse`` build stay comparable.

    Args:
        ref (CompareModel): The reference the user gave.
        cand (CompareModel | None): The candidate (``compare``); None for ``check``.
    Raises:
        UsageError: one line, exit 2; for ``compare`` it says the arguments may be swapped and gives them in order.
    """
    if cand is None:
        if ref.precision != "fp32" or ref.sparse:
            raise UsageError(f"the reference {ref.path} is a {ref.label} model; give the FP32 streaming ONNX")
        return
    if _precision_rank(ref) >= _precision_rank(cand):
        return
    raise UsageError(f"the reference {ref.path} is a {ref.label} model, less exact than the {cand.label} candidate "
                     f"{cand.path}: the arguments may be swapped; give the reference (FP32) first: cosyedge compare "
                     f"{cand.path} {ref.path}")

def reraise_runner_error(err: Exception, who: CompareModel, where: str) -> CosyEdgeError:
    """Turn an exception raised while running ``who`` into a one-line UsageError (exit 2)."""
    if isinstance(err, CosyEdgeError):
        return err
    return UsageError(f"{who.path} failed to run {where}: {first_line(err)}")


__all__ = ["CompareModel", "check_compatible", "check_lineage", "check_reference", "load_compare_model", "parse_precision_label", "precision_label"]
