"""ONNX files <-> onnx-graphsurgeon graphs: the only module calling ``gs.import_onnx`` / ``gs.export_onnx``.

Loading resolves external data (``.onnx.data`` written by ``torch.onnx.export(dynamo=True)``), saving
always writes ONE self-contained file atomically. :func:`graph_to_model` carries over what
``gs.export_onnx`` drops (model ``metadata_props``, doc string, model version) and :func:`finalize_model`
runs strict ONNX shape inference and the checker.

Sources: onnx-graphsurgeon ``importers/onnx_importer.py`` / ``exporters/onnx_exporter.py`` (the exporter
keeps ``ir_version``, producer and opset imports, not ``metadata_props``); ONNX Python API docs
(``onnx.shape_inference.infer_shapes(strict_mode=True)``, ``onnx.checker.check_model``, external data:
``onnx.save_model(save_as_external_data=False)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import atomic_output, load_onnx, writing
from cosyedge.errors import ArtifactError, first_line

gs = lazy_import("onnx_graphsurgeon")
onnx = lazy_import("onnx")

_PROTOBUF_LIMIT_BYTES = 2**31 - 1


def load_graph(path: str | Path) -> tuple[Any, Any]:
    """Load an ONNX file (with any external data) as an onnx-graphsurgeon graph.

    Args:
        path (str | Path): ``.onnx`` file; a sibling ``.onnx.data`` is read if the model refers to it.
    Returns:
        tuple[gs.Graph, onnx.ModelProto]: the graph and the source model (for metadata / versions).
    Raises:
        ArtifactError: missing, corrupt or unreadable file (or missing external data).
    """
    model = load_onnx(path, load_external_data=True)
    try:
        graph = gs.import_onnx(model)
    except Exception as err:  # malformed graph that protobuf parsed
        raise ArtifactError(f"cannot import ONNX graph {path}: {first_line(err)}") from None
    return graph, model


def default_opset(model: Any) -> int:
    """int: the default-domain (``ai.onnx``) opset of ``model`` (onnx.ModelProto); 1 when none is declared."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def at_least_opset(model: Any, minimum: int, where: str, why: str) -> Any:
    """Return ``model`` converted to opset ``minimum`` when its default opset is older (else unchanged).

    Args:
        model (onnx.ModelProto): Model.
        minimum (int): Lowest opset the caller needs.
        where (str): Name for messages.
        why (str): What needs the opset (for messages), e.g. ``"per-channel Q/DQ"``.
    Returns:
        onnx.ModelProto: the model at opset >= ``minimum`` (metadata kept).
    Raises:
        UsageError: the conversion failed (the message asks for a re-export at that opset).
    Source: ``onnx.version_converter.convert_version`` (onnx.ai/onnx/api/version_converter.html).
    """
    import onnx
    from onnx import version_converter

    from cosyedge.errors import UsageError
    from cosyedge.log import LOG

    have = default_opset(model)
    if have >= minimum:
        return model
    try:
        new = version_converter.convert_version(model, int(minimum))
        onnx.checker.check_model(new)
    except Exception as err:  # an op without a version adapter
        raise UsageError(f"{where} is ONNX opset {have}; {why} needs opset >= {minimum} and the automatic "
                         f"conversion failed ({first_line(err)}): re-export the model at opset {minimum} or "
                         f"newer") from None
    LOG.info("%s: opset %d converted to %d (%s)", where, have, minimum, why)
    return new


def graph_to_model(graph: Any, like: Any | None = None) -> Any:
    """Export a gs graph to ``onnx.ModelProto``, copying model-level fields from ``like``.

    Args:
        graph (gs.Graph): Graph to export (should be cleaned up and topologically sorted).
        like (onnx.ModelProto | None): Source model whose ``metadata_props``, ``doc_string``,
            ``model_version`` and ``domain`` are copied (gs drops them).
    Returns:
        onnx.ModelProto: with weights inline.
    """
    model = gs.export_onnx(graph)
    if like is not None:
        for p in like.metadata_props:
            q = model.metadata_props.add()
            q.key, q.value = p.key, p.value
        model.doc_string = like.doc_string
        model.model_version = like.model_version
        model.domain = like.domain
    return model


def finalize_model(model: Any, where: str = "model") -> Any:
    """Run strict shape inference and the ONNX checker.

    Args:
        model (onnx.ModelProto): Model to check (weights inline, < 2 GiB).
        where (str): Name for error messages (e.g. the source path).
    Returns:
        onnx.ModelProto: the model with inferred ``value_info`` shapes.
    Raises:
        ArtifactError: shape inference or the checker rejects the graph (first line of the reason).
    """
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        onnx.checker.check_model(model)
    except Exception as err:
        raise ArtifactError(f"{where}: rewritten graph fails ONNX shape inference/checker ({first_line(err)})") from None
    return model


def save_model(model: Any, path: str | Path) -> Path:
    """Write ``model`` to ``path`` as one self-contained ONNX file (no external data), atomically.

    Args:
        model (onnx.ModelProto): Model with all weights loaded.
        path (str | Path): Destination ``.onnx``; parent folders are created.
    Returns:
        Path: ``path``.
    Raises:
        ArtifactError: the model exceeds the 2 GiB protobuf limit or the file cannot be written.
    """
    path = Path(path)
    size = model.ByteSize()
    if size > _PROTOBUF_LIMIT_BYTES:
        raise ArtifactError(f"cannot write {path} as one file: model is {size / 2**30:.2f} GiB "
                            "(> 2 GiB protobuf limit)")
    with atomic_output(path) as tmp, writing(path):  # a full disk: one line naming the cause and path
        onnx.save_model(model, str(tmp), save_as_external_data=False)
    return path


def model_stem(path: str | Path, suffixes: tuple[str, ...] = (".onnx",)) -> str:
    """The model name a file stands for: its file name without any of ``suffixes`` (removed in order);
    ``"model"`` when nothing is left.

    Args:
        path (str | Path): The file.
        suffixes (tuple[str, ...]): Suffixes to strip, in order (e.g. ``(".onnx", ".full", ".stream")``).
    Returns:
        str: the stem.
    """
    name = Path(path).name
    for suffix in suffixes:
        name = name.removesuffix(suffix)
    return name or "model"
