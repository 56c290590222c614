"""Several ONNX files that form one model -> one ONNX graph (before streamify).

DeepFilterNet3 ships its network as three graphs: ``enc.onnx`` (inputs ``feat_erb``, ``feat_spec``; outputs
``e0``..``e3``, ``emb``, ``c0``, ``lsnr``) feeding ``erb_dec.onnx`` and ``df_dec.onnx``. An input of one file
that has the name of another file's output is connected to it; every other input is a model input, and every
output no other file consumes is a model output (in file order). Internal tensor, node and initializer names
get the file's stem as prefix (``enc/...``) so the graphs cannot collide; model inputs and outputs keep
their names. The opset is the highest of the files' (the default domain must agree within one major
behaviour: files of different opsets are refused).

Source: ONNX IR spec (graph inputs/outputs, initializers, ``opset_import``); onnx ``compose.merge_models``
(the same connection by name, without its prefixing of I/O names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import load_onnx
from cosyedge.errors import UsageError

onnx = lazy_import("onnx")


def _rename_graph(graph: Any, prefix: str, keep: set[str]) -> None:
    """Prefix every tensor and node name of ``graph`` (in place) except those in ``keep``."""
    def rn(name: str) -> str:
        return name if not name or name in keep else f"{prefix}/{name}"

    for node in graph.node:
        node.name = f"{prefix}/{node.name}" if node.name else ""
        for i, n in enumerate(node.input):
            node.input[i] = rn(n)
        for i, n in enumerate(node.output):
            node.output[i] = rn(n)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                raise UsageError(f"node '{node.name}' has a subgraph ({node.op_type}): merging control flow is not "
                                 "supported")
    for t in graph.initializer:
        t.name = rn(t.name)
    for v in graph.value_info:
        v.name = rn(v.name)


def merge_models(paths: list[str | Path]) -> Any:
    """Merge ONNX files into one ModelProto (module doc).

    Args:
        paths (list[str | Path]): Two or more ONNX files, in data-flow order or any order.
    Returns:
        onnx.ModelProto: one graph; inputs are the inputs no file produces, outputs the outputs no file
        consumes.
    Raises:
        ArtifactError: a file is missing or corrupt.
        UsageError: two files produce the same output, opsets differ, or a file has control flow.
    """
    models = [load_onnx(p, load_external_data=True) for p in paths]
    opsets = {next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None) for m in models}
    if len(opsets) > 1:
        raise UsageError(f"the files have different opsets {sorted(opsets)}: export them with one opset")
    produced: dict[str, str] = {}
    for p, m in zip(paths, models):
        for o in m.graph.output:
            if o.name in produced:
                raise UsageError(f"output '{o.name}' is produced by both {produced[o.name]} and {p}")
            produced[o.name] = str(p)
    consumed = {i.name for m in models for i in m.graph.input}
    io_names = set(produced) | consumed
    merged = onnx.helper.make_graph([], "+".join(Path(p).stem for p in paths), [], [])
    seen_inputs = set()
    for p, m in zip(paths, models):
        g = m.graph
        _rename_graph(g, Path(p).stem, io_names)
        merged.node.extend(g.node)
        merged.initializer.extend(g.initializer)
        merged.value_info.extend(g.value_info)
        init_names = {i.name for i in g.initializer}
        for i in g.input:
            if i.name in produced or i.name in init_names or i.name in seen_inputs:
                continue
            merged.input.append(i)
            seen_inputs.add(i.name)
    for p, m in zip(paths, models):
        for o in m.graph.output:
            if o.name not in consumed:
                merged.output.append(o)
    base = models[0]
    out = onnx.helper.make_model(merged, opset_imports=list(base.opset_import))
    out.ir_version = max(m.ir_version for m in models)
    return out
