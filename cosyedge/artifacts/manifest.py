"""Artifacts and manifests: lazy pipeline stages, ``manifest.json`` and the typed views of a build's input and output.

A **manifest** (``manifest.json``) sits next to every built artifact: schema version, stage, cosyedge
version, parent hashes, flags, tool versions and a copy of the contract. :func:`load_manifest` names any
missing key.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cosyedge.artifacts.contract import SCHEMA_VERSION, StreamContract
from cosyedge.artifacts.files import load_onnx, sha256_file, write_json
from cosyedge.errors import ArtifactError


class Stage:
    """Base of the lazy pipeline stages (``OnnxFromTorch``, ``StatefulOnnxFromOnnx``, ...).

    ``__init__`` only stores the configuration; calling the stage runs :meth:`call_impl` and returns the
    artifact path. A stage accepts another stage wherever it takes an input path, so stages compose:
    ``StatefulOnnxFromOnnx(OnnxFromTorch(model, "m.onnx"), "m.stream.onnx")()``. Each stage has a
    function twin (``onnx_from_torch``, ``streamify``) that builds and calls it at once.

    Source: Polygraphy ``backend/base/loader.py`` (``BaseLoader.__call__`` -> ``call_impl``).
    """

    def __call__(self) -> Path:
        return self.call_impl()

    def call_impl(self) -> Path:
        """Run the stage and return the path (Path) of the artifact it wrote."""
        raise NotImplementedError


def resolve_artifact(src: "str | Path | Stage") -> Path:
    """Return the path of ``src``: a :class:`Stage` (any callable) is run first, a str/Path is returned as Path."""
    return Path(src()) if callable(src) else Path(src)



MANIFEST_NAME = "manifest.json"
MANIFEST_REQUIRED = ("schema_version", "stage", "cosyedge_version", "model", "contract")
MANIFEST_OBJECTS = ("model", "contract", "plan", "flags", "reports", "int8")
"""Manifest keys whose value, when present, must be a JSON object (a wrong type is a corrupt manifest, exit 3)."""
PRECISIONS = ("fp32", "fp16", "int8")
"""The compute precisions a build writes (``manifest["precision"]``; also TensorRT's and the CLI's choices)."""


def write_manifest(folder: str | Path, manifest: dict) -> Path:
    """Write ``folder/manifest.json`` atomically, adding ``schema_version`` and ``cosyedge_version``.

    Returns:
        Path: the manifest path.
    """
    from cosyedge import __version__

    data = {"schema_version": SCHEMA_VERSION, "cosyedge_version": __version__, **manifest}
    path = Path(folder) / MANIFEST_NAME
    write_json(path, data)
    return path


def load_manifest(folder: str | Path) -> dict:
    """Load and validate ``folder/manifest.json``.

    Returns:
        dict: the manifest; ``manifest["contract"]`` is the contract's metadata dict.
    Raises:
        ArtifactError: missing file, bad JSON, a missing required key (named in the message), a key of
            :data:`MANIFEST_OBJECTS` that is not a JSON object, a ``precision`` not in :data:`PRECISIONS`, or a
            ``schema_version`` that is not an integer or is newer than :data:`SCHEMA_VERSION` (written by a
            newer cosyedge: its fields may mean something else).
    """
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{path} not found (is {folder} an engine folder made by 'cosyedge build'?)")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} is not a manifest (a JSON object); rebuild it with 'cosyedge build'")
    for key in MANIFEST_REQUIRED:
        if key not in data:
            raise ArtifactError(f"{path} missing '{key}' (rebuild it with 'cosyedge build')")
    for key in MANIFEST_OBJECTS:
        if key in data and not isinstance(data[key], dict):
            raise ArtifactError(f"{path}: '{key}' is {type(data[key]).__name__}, not an object (rebuild it with "
                                f"'cosyedge build')")
    if "precision" in data and data["precision"] not in PRECISIONS:
        raise ArtifactError(f"{path}: 'precision' is {data['precision']!r}, not one of {', '.join(PRECISIONS)} "
                            f"(rebuild it with 'cosyedge build')")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{path} has schema_version {version!r}, not an integer (rebuild it with 'cosyedge build')")
    if version > SCHEMA_VERSION:
        raise ArtifactError(f"{path} has schema_version {version}, newer than this cosyedge understands "
                            f"({SCHEMA_VERSION}); upgrade cosyedge, or rebuild the engine with this one "
                            f"('cosyedge build')")
    return data


# ------------------------------------------------------------------------------------- typed artifacts
class SourceModel:
    """A streaming ONNX on disk, parsed and hashed once, passed down a build instead of its path.

    The SHA-256 and the stream contract are computed on first use and cached; the ModelProto is loaded
    lazily (without external data). The file must not change while the object is in use.

    Args:
        path (str | Path | SourceModel): The ``.onnx`` file (a SourceModel is returned as is by :meth:`of`).
    Attributes:
        path (Path): The file.
    Raises:
        ArtifactError: (on first use of a property) the file is missing or is not a readable ONNX with a
            ``cosyedge.*`` stream contract.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._sha256: str | None = None
        self._contract: StreamContract | None = None
        self._proto: Any = None

    @classmethod
    def of(cls, source: "str | Path | Stage | SourceModel") -> "SourceModel":
        """Return ``source`` if it is a SourceModel, else a new one for its path (a :class:`Stage` is run first,
        :func:`resolve_artifact`) (SourceModel)."""
        return source if isinstance(source, SourceModel) else cls(resolve_artifact(source))

    @property
    def sha256(self) -> str:
        """str: hex SHA-256 of the file (hashed once)."""
        if self._sha256 is None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    @property
    def proto(self) -> Any:
        """onnx.ModelProto: the model without external data (loaded once)."""
        if self._proto is None:
            self._proto = load_onnx(self.path, load_external_data=False)
        return self._proto

    @property
    def contract(self) -> StreamContract:
        """StreamContract: parsed once from the file's ``cosyedge.*`` metadata."""
        if self._contract is None:
            self._contract = StreamContract.from_onnx(self.path)
        return self._contract

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"SourceModel({str(self.path)!r})"


@dataclasses.dataclass(frozen=True)
class EngineManifest:
    """An engine folder's ``manifest.json`` with named fields; the one place that knows old key spellings.

    Attributes:
        raw (dict): The manifest as loaded (validated by :func:`load_manifest` when read from a folder).
        stage (str | None): ``build``.
        name (str | None): Engine (model) name.
        backend (str | None): ``onnxruntime`` | ``tensorrt`` | ``triton``.
        precision (str): ``fp32`` | ``fp16`` | ``int8`` (``fp32`` when absent).
        sparse (bool): 2:4-pruned.
        model_file (str | None): File name of the model (``model.file``), None when absent.
        model_sha256 (str | None): Its SHA-256 (``model.sha256``).
        plan_file (str | None): TensorRT plan file name (``plan.file``).
        plan_sha256 (str | None): Its SHA-256 (``plan.sha256``).
        parent_sha256 (str | None): SHA-256 of the FP32 streaming ONNX it was built from.
        parent_path (str | None): Path of that ONNX when built.
        flags (dict): Build flags (``{}`` when absent).
        chunk_samples (int | None): Chunk length the engine was built for.
        max_batch (int | None): TensorRT: the profile's largest batch.
        calibration_sha256 (str | None): INT8 calibration set manifest hash.
        reports (dict): ``sparsity``/``fp16``/``int8`` reports (``{}`` when absent).
    """

    raw: dict
    stage: str | None = None
    name: str | None = None
    backend: str | None = None
    precision: str = "fp32"
    sparse: bool = False
    model_file: str | None = None
    model_sha256: str | None = None
    plan_file: str | None = None
    plan_sha256: str | None = None
    parent_sha256: str | None = None
    parent_path: str | None = None
    flags: dict = dataclasses.field(default_factory=dict)
    chunk_samples: int | None = None
    max_batch: int | None = None
    calibration_sha256: str | None = None
    reports: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: "dict | EngineManifest") -> "EngineManifest":
        """Wrap a manifest dict (an EngineManifest is returned as is)."""
        if isinstance(raw, EngineManifest):
            return raw
        model = raw.get("model") or {}
        plan = raw.get("plan") or {}
        return cls(raw=raw, stage=raw.get("stage"), name=raw.get("name"), backend=raw.get("backend"),
                   precision=str(raw.get("precision", "fp32")), sparse=bool(raw.get("sparse", False)),
                   model_file=model.get("file"), model_sha256=model.get("sha256"), plan_file=plan.get("file"),
                   plan_sha256=plan.get("sha256"), parent_sha256=raw.get("parent_sha256"),
                   parent_path=raw.get("parent_path"), flags=dict(raw.get("flags") or {}),
                   chunk_samples=raw.get("chunk_samples"), max_batch=raw.get("max_batch"),
                   calibration_sha256=raw.get("calibration_sha256"), reports=dict(raw.get("reports") or {}))

    @classmethod
    def load(cls, folder: str | Path) -> "EngineManifest":
        """Load and validate ``folder/manifest.json`` (:func:`load_manifest`).

        Raises:
            ArtifactError: see :func:`load_manifest`.
        """
        return cls.from_dict(load_manifest(folder))

    @property
    def int8(self) -> dict:
        """dict: the INT8 report: ``reports.int8``, or the top-level ``int8`` of old manifests; ``{}`` when none."""
        rep = self.reports.get("int8") or self.raw.get("int8") or {}
        return rep if isinstance(rep, dict) else {}

    @property
    def contract_metadata(self) -> dict:
        """dict: the stream contract's metadata (``contract``)."""
        return self.raw["contract"]
