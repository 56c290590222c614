"""Scan bodies for the precision stages: find the graphs that hold a model's compute and what their inputs are.

A model adopted with ``cosyedge adopt`` (DTLN, GTCRN, Silero VAD) keeps all its compute inside ONNX ``Scan``
bodies: a Scan over the hops of a chunk (:mod:`cosyedge.surgery.adopt.wrap`) and, for a graph that only runs at
batch 1, a Scan over the streams inside it (:mod:`cosyedge.surgery.adopt.streams`). The FP16 and 2:4 stages
enter them through this module:

* :func:`iter_graphs` walks the main graph and every ``Scan`` body under it (Scan in Scan), depth first;
* :func:`leaf_bodies` lists the *leaf* Scan bodies (bodies holding no further subgraph: the one-hop compute),
  each with a :class:`BodyContract` saying which body input is the audio, which inputs/outputs are the model's
  states (paired by the model's state index) and which output is the model's output, found by following the
  Scan's inputs and outputs through the plumbing adopt writes around it (Reshape, Identity, Transpose,
  Squeeze, Unsqueeze, Flatten) back to the model's inputs and outputs;
* :func:`body_model` / :func:`put_body` make a body a standalone ``onnx.ModelProto`` (the FP16 converter takes
  one) and put the converted graph back, with every name the conversion added prefixed by the body's name (a
  subgraph must not reuse a name of an enclosing scope).

Only ``Scan`` bodies are entered; ``If`` and ``Loop`` bodies are left as they are. A body that reads a tensor of an
enclosing scope (an outer-scope reference) cannot be made a standalone model and is not listed by
:func:`leaf_bodies` (its ``outer_refs`` says why in :func:`body_report`).

Source: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: the first ``N - num_scan_inputs`` inputs and
outputs of the body are the loop-carried state variables, the rest scan inputs/outputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from cosyedge._lazy import lazy_import

onnx = lazy_import("onnx")

PASS_THROUGH = ("Reshape", "Identity", "Transpose", "Squeeze", "Unsqueeze", "Flatten")
"""tuple[str]: ops adopt writes between a model input/output and a Scan (followed on their first input)."""


@dataclasses.dataclass
class BodyIO:
    """A streamed input or output of a body (name only: what :func:`~cosyedge.precision.fp16.fp32_node_plan`
    reads of a :class:`~cosyedge.artifacts.StreamIO`)."""

    name: str


@dataclasses.dataclass
class BodyState:
    """A state pair of a body: ``input``/``output`` names in the body, ``kind`` of the model's state it carries."""

    input: str
    output: str
    kind: str = "context"


@dataclasses.dataclass
class BodyContract:
    """The part of a :class:`~cosyedge.artifacts.StreamContract` the precision stages read, for one Scan body.

    Attributes:
        input (str): The body input carrying the model's (primary) audio input.
        stream_inputs (list[BodyIO]): Every body input carrying a streamed model input.
        output (str): The body output carrying the model's output (``contract.output``); ``""`` when none does.
        states (list[BodyState]): Body inputs/outputs carrying the model's states (or the Scan's loop-carried
            values), paired.
    """

    input: str
    stream_inputs: list
    output: str
    states: list


@dataclasses.dataclass
class Body:
    """A leaf Scan body: the ``node`` holding it, its ``attr`` (``body``), the ``graph`` and its :class:`BodyContract`."""

    node: Any
    attr: Any
    graph: Any
    contract: BodyContract


def subgraph_nodes(graph: Any) -> list:
    """Nodes of ``graph`` (onnx.GraphProto) with a graph attribute (Scan, Loop, If), in graph order."""
    return [n for n in graph.node if any(a.type == onnx.AttributeProto.GRAPH for a in n.attribute)]


def has_subgraphs(model: Any) -> bool:
    """bool: the main graph of ``model`` (onnx.ModelProto) has a Scan/Loop/If node."""
    return bool(subgraph_nodes(model.graph))


def iter_graphs(graph: Any) -> Iterator[Any]:
    """Yield ``graph`` then every Scan body under it, depth first (onnx.GraphProto objects, modifiable in place)."""
    yield graph
    for n in graph.node:
        if n.op_type != "Scan":
            continue
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(a.g)


def outer_refs(graph: Any) -> list[str]:
    """Names ``graph``'s nodes read that it neither takes as input, holds as initializer nor computes (list[str],
    sorted): references to an enclosing scope (nested bodies' own references included)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output}
    used = set()
    for n in graph.node:
        used.update(i for i in n.input if i)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                used.update(outer_refs(a.g))
    return sorted(used - defined)


def _roles(graph: Any, roles: dict) -> list[tuple]:
    """(scan node, body attr, body roles) for every Scan in ``graph`` given the roles of ``graph``'s tensors.

    A role is ``("in", primary)``, ``("state_in", k)``, ``("out", main)`` or ``("state_out", k)``."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def back(name: str):
        for _ in range(64):
            if name in roles:
                return roles[name]
            p = producer.get(name)
            if p is None or p.op_type not in PASS_THROUGH:
                return None
            name = p.input[0]
        return None

    def forward(name: str):
        for _ in range(64):
            if name in roles:
                return roles[name]
            cs = [c for c in consumers.get(name, []) if c.op_type in PASS_THROUGH]
            if len(cs) != 1:
                return None
            name = cs[0].output[0]
        return None

    found = []
    for n in graph.node:
        if n.op_type != "Scan":
            continue
        attr = next(a for a in n.attribute if a.name == "body")
        body = attr.g
        n_scan = next(a.i for a in n.attribute if a.name == "num_scan_inputs")
        n_state = len(n.input) - n_scan
        broles: dict = {}
        for k, (outer, inner) in enumerate(zip(n.input, body.input)):
            r = back(outer)
            if r is None:
                r = ("state_in", f"{n.name}#{k}") if k < n_state else ("in", False)
            broles[inner.name] = r
        for k, (outer, inner) in enumerate(zip(n.output, body.output)):
            r = forward(outer)
            if r is None:
                r = ("state_out", f"{n.name}#{k}") if k < n_state else ("out", False)
            broles[inner.name] = r
        found.append((n, attr, broles))
    return found


def _contract_of(body: Any, broles: dict, kinds: dict) -> BodyContract:
    """The :class:`BodyContract` of ``body`` from its roles (``kinds``: state key -> kind)."""
    ins = [i.name for i in body.input if broles.get(i.name, ("",))[0] == "in"]
    primary = next((i for i in ins if broles[i][1]), ins[0] if ins else "")
    outs = [o.name for o in body.output if broles.get(o.name, ("",))[0] == "out"]
    main = next((o for o in outs if broles[o][1]), outs[0] if outs else "")
    s_in = {broles[i.name][1]: i.name for i in body.input if broles.get(i.name, ("",))[0] == "state_in"}
    s_out = {broles[o.name][1]: o.name for o in body.output if broles.get(o.name, ("",))[0] == "state_out"}
    states = [BodyState(s_in[k], s_out[k], kinds.get(k, "context")) for k in s_in if k in s_out]
    return BodyContract(input=primary, stream_inputs=[BodyIO(i) for i in ins], output=main, states=states)


def leaf_bodies(model: Any, contract: Any) -> list[Body]:
    """The leaf Scan bodies of ``model`` (bodies without a further Scan/Loop/If) with their roles.

    Args:
        model (onnx.ModelProto): A streaming model whose compute sits in Scan bodies (modified in place by callers
            through the returned graphs).
        contract (StreamContract): Its stream contract (audio input/output, states).
    Returns:
        list[Body]: in depth-first order; bodies with outer-scope references are left out.
    """
    roles: dict = {}
    for io in contract.stream_inputs:
        roles[io.name] = ("in", io.name == contract.input)
    roles.setdefault(contract.input, ("in", True))
    for io in getattr(contract, "stream_outputs", []):
        roles[io.name] = ("out", io.name == contract.output)
    roles[contract.output] = ("out", True)
    kinds = {}
    for k, s in enumerate(contract.states):
        roles[s.input], roles[s.output] = ("state_in", k), ("state_out", k)
        kinds[k] = s.kind
    out: list[Body] = []

    def visit(graph: Any, groles: dict) -> None:
        for node, attr, broles in _roles(graph, groles):
            body = attr.g
            if subgraph_nodes(body):
                visit(body, broles)
            elif not outer_refs(body):
                out.append(Body(node, attr, body, _contract_of(body, broles, kinds)))

    visit(model.graph, roles)
    return out


def body_model(model: Any, body: Any) -> Any:
    """``body`` (onnx.GraphProto) as a standalone onnx.ModelProto (a copy) with ``model``'s opsets and IR version."""
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    m.producer_name = model.producer_name
    m.graph.CopyFrom(body)
    return m


def put_body(attr: Any, converted: Any, original: Any) -> None:
    """Make ``converted`` (onnx.GraphProto, from :func:`body_model` then a conversion) the graph of ``attr`` in
    place; names of tensors and nodes that are not in ``original`` (the body before) get the prefix
    ``<body name>/``, so they cannot clash with a name of an enclosing scope. Body inputs/outputs keep their names."""
    old = {i.name for i in original.input} | {t.name for t in original.initializer}
    old |= {o for n in original.node for o in n.output} | {o.name for o in original.output}
    old_nodes = {n.name for n in original.node}
    prefix = f"{original.name or 'body'}/"
    g = onnx.GraphProto()
    g.CopyFrom(converted)
    rename = {}
    for t in g.initializer:
        if t.name not in old:
            rename[t.name] = prefix + t.name
    for n in g.node:
        for o in n.output:
            if o and o not in old:
                rename[o] = prefix + o
        if n.name and n.name not in old_nodes:
            n.name = prefix + n.name
    for t in g.initializer:
        t.name = rename.get(t.name, t.name)
    for n in g.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
        n.output[:] = [rename.get(o, o) for o in n.output]
    for v in g.value_info:
        v.name = rename.get(v.name, v.name)
    g.name = original.name
    toposort(g)
    attr.g.CopyFrom(g)


def toposort(graph: Any) -> None:
    """Order ``graph``'s nodes (onnx.GraphProto) so each comes after the producers of its inputs, in place (the
    FP16 converter appends its Casts at the end). Names produced by no node of the graph (inputs, initializers,
    outer-scope tensors, those read inside a nested body) count as available.

    Raises:
        ArtifactError: the nodes form a cycle (a rewrite wired a node's output back into its own inputs): named,
            never left in some order for ONNX Runtime to refuse later or the checker to blame on the order.
    """
    nodes = list(graph.node)
    produced = {o: k for k, n in enumerate(nodes) for o in n.output if o}

    def needs(n) -> set:
        names = {i for i in n.input if i}
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names.update(outer_refs(a.g))
        return {produced[i] for i in names if i in produced}

    deps = [needs(n) for n in nodes]
    done: set = set()
    order: list = []
    pending = list(range(len(nodes)))
    while pending:
        rest = [k for k in pending if not deps[k] <= done]
        ready = [k for k in pending if deps[k] <= done]
        if not ready:  # a cycle: what is left cannot be ordered (a node waits, through others, for itself)
            from cosyedge.errors import ArtifactError

            cyc = _cycle(rest, deps, done)
            names = [nodes[k].name or f"{nodes[k].op_type} #{k}" for k in cyc]
            raise ArtifactError(f"graph '{graph.name}': nodes form a cycle ({' -> '.join(names + names[:1])}); a "
                                f"rewrite fed a node's output back into its own inputs, so it has no order")
        order.extend(ready)
        done.update(ready)
        pending = rest
    sorted_nodes = [nodes[k] for k in order]
    del graph.node[:]
    graph.node.extend(sorted_nodes)


def _cycle(rest: list[int], deps: list[set], done: set) -> list[int]:
    """One cycle among the unordered nodes ``rest`` (list of node indices, in dependency order): every one of them
    waits for another of them, so following waits from any node must come back to one already seen."""
    path: list[int] = []
    k = rest[0]
    while k not in path:
        path.append(k)
        k = min(deps[k] - done)
    return path[path.index(k):][::-1]


__all__ = ["Body", "BodyContract", "BodyIO", "BodyState", "PASS_THROUGH", "body_model", "has_subgraphs",
           "iter_graphs", "leaf_bodies", "outer_refs", "put_body", "subgraph_nodes", "toposort"]
