"""Graph-edit helpers shared by the passes (and by the precision builds): copy a model, read a node's attributes,
splice replacement nodes in, order nodes topologically.

Every function works on ``onnx`` protobufs (``ModelProto``, ``GraphProto``, ``NodeProto``); onnx is imported lazily.
"""

from __future__ import annotations

from typing import Any

from cosyedge._lazy import lazy_import

onnx = lazy_import("onnx")

DEFAULT_DOMAINS = ("", "ai.onnx")
"""tuple[str, str]: the spellings of the default ONNX operator domain."""


def copy_model(model: Any) -> Any:
    """A deep copy (onnx.ModelProto) of ``model``: the passes rewrite copies, never their input."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def copy_with(model: Any, op_type: str) -> tuple:
    """A copy of ``model`` to rewrite: (ModelProto, its graph, initializer name -> TensorProto, [(index, node)] of the
    default-domain ``op_type`` nodes)."""
    m = copy_model(model)
    g = m.graph
    return (m, g, {t.name: t for t in g.initializer},
            [(i, n) for i, n in enumerate(g.node) if n.op_type == op_type and n.domain in DEFAULT_DOMAINS])


def rewrite_each(model: Any, op_type: str, rewrite: Any, key: str) -> tuple[Any, dict[str, int]]:
    """A copy of ``model`` where every default-domain ``op_type`` node that ``rewrite`` takes is replaced by its
    nodes, and the count: ``rewrite(node, inits)`` returns a builder with ``nodes`` and ``inits`` (e.g.
    :class:`Builder`), or None to leave the node as it is.

    Returns:
        tuple[onnx.ModelProto, dict[str, int]]: the copy and ``{key: <nodes replaced>}``.
    """
    m, _, inits, found = copy_with(model, op_type)
    replace, new_inits = {}, []
    for i, node in found:
        b = rewrite(node, inits)
        if b is not None:
            replace[i] = b.nodes
            new_inits += b.inits
    return spliced(m, replace, new_inits)[0], {key: len(replace)}


def opset(model: Any) -> int:
    """The default-domain opset (int) of ``model`` (onnx.ModelProto); 13 when it declares none."""
    return next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 13)


def node_attrs(node: Any) -> dict:
    """``node``'s (onnx.NodeProto) attributes as a dict of Python values (name -> int, float, bytes, list, ...)."""
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class Builder:
    """New nodes and initializers for one rewrite, named after the node they replace (``<base>/<tag>_<what>_<k>``).

    Attributes:
        nodes (list[onnx.NodeProto]): The nodes made, in order.
        inits (list[onnx.TensorProto]): The initializers made.
    """

    def __init__(self, base: str, tag: str = "batched"):
        self.base, self.tag, self.nodes, self.inits, self._n = base, tag, [], [], 0

    def name(self, what: str) -> str:
        """A fresh name (str) for ``what``."""
        self._n += 1
        return f"{self.base}/{self.tag}_{what}_{self._n}"

    def const(self, what: str, a: Any) -> str:
        """Add the initializer ``a`` (np.ndarray, stored contiguous); return its name."""
        import numpy as np

        n = self.name(what)
        self.inits.append(onnx.numpy_helper.from_array(np.ascontiguousarray(a), n))
        return n

    def node(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        """Add a default-domain node ``op`` on ``inputs`` writing ``out`` (a fresh name when None); return it."""
        out = out or self.name(op.lower() + "_out")
        self.nodes.append(onnx.helper.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out


def splice(m: Any, replace: dict[int, list], new_inits: list) -> None:
    """In place: splice ``replace`` (node index -> its new nodes; by index, since protobuf wrappers' ``id()`` is not
    stable) into ``m`` (onnx.ModelProto), add ``new_inits`` (onnx.TensorProto list) and drop the initializers no node
    or graph output reads any more."""
    g = m.graph
    out = []
    for idx, node in enumerate(g.node):
        out.extend(replace.get(idx, [node]))
    del g.node[:]
    g.node.extend(out)
    g.initializer.extend(new_inits)
    used = {i for n in g.node for i in n.input}
    used |= {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)


def spliced(m: Any, replace: dict[int, list], new_inits: list) -> tuple[Any, int]:
    """:func:`splice` ``replace`` and ``new_inits`` into ``m`` when anything is replaced: the end of a pass on its
    copy ``m``. Returns (m, the number of nodes replaced)."""
    if replace:
        splice(m, replace, new_inits)
    return m, len(replace)


def outer_refs(graph: Any) -> list[str]:
    """Names ``graph``'s (onnx.GraphProto) nodes read that it neither takes as input, holds as initializer nor
    computes (list[str], sorted): references to an enclosing scope (nested bodies' own references included)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output}
    used = set()
    for n in graph.node:
        used.update(i for i in n.input if i)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                used.update(outer_refs(a.g))
    return sorted(used - defined)


def toposort(graph: Any) -> None:
    """Order ``graph``'s nodes (onnx.GraphProto) so each comes after the producers of its inputs, in place (the
    FP16 converter appends its Casts at the end). Names produced by no node of the graph (inputs, initializers,
    outer-scope tensors, those read inside a nested body) count as available. (onnx-graphsurgeon graphs have their
    own ``Graph.toposort``; this one is for bare protobufs.)

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


__all__ = ["Builder", "DEFAULT_DOMAINS", "copy_model", "copy_with", "node_attrs", "opset", "outer_refs", "splice",
           "spliced",
           "toposort"]
