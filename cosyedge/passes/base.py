"""The base of every graph pass: :class:`Target` (what the rewritten graph will run at), :class:`Pass` (match,
rewrite, report) and :func:`apply_passes`, the one driver the runtime and the builds call.

A pass lives in its own module ``cosyedge.passes.<name>`` holding its rewrite function and
``run(model, target) -> (model, counts)``, which works on a copy (or, for a pass whose doc says so, on the model
it is given) and returns the nodes it replaced by kind (all 0: nothing applied). The module is imported when the pass
first runs (onnx and numpy work stays lazy), and ``run`` looks its rewrite function up by name, so a test can
monkeypatch it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from cosyedge.errors import first_line
from cosyedge.log import LOG


@dataclasses.dataclass(frozen=True)
class Target:
    """The input shapes a rewritten graph will run at.

    Attributes:
        shapes (dict[str, list[int]]): Concrete shape of every graph input (stream inputs and states) for the
            passes' shape checks, e.g. ``{"audio": [1, 1, 160], "state_in.00": [1, 1, 160]}``.
        dims (dict[str, list[int | str]] | None): The same with the batch axis symbolic (``"N"``), for passes
            that write batch-free nodes from symbolic shapes (``batch_gemm``); None when not needed.
        any_batch (bool): The session's batch varies per run (StreamPool): passes write nodes valid at any batch.
    """

    shapes: dict
    dims: dict | None = None
    any_batch: bool = False


@dataclasses.dataclass(frozen=True)
class Pass:
    """One graph pass.

    Attributes:
        name (str): Its name, also its module ``cosyedge.passes.<name>`` and its switch (the name listed or not).
        ops (tuple[str, ...]): Op types it rewrites (match: a graph holding none of them is left alone).
        cpu_only (bool): It writes ONNX Runtime CPU kernels or is tuned for them (applied only on the CPU provider
            to a model without external data); False: applied for any provider (correctness, batching).
        summary (str): One line: what it replaces by what.
        optional (bool): True: a failure skips the pass (one warning line); False (a correctness pass): a failure
            is raised as one ``ArtifactError`` line (:func:`apply_passes`).
    """

    name: str
    ops: tuple
    cpu_only: bool
    summary: str
    optional: bool = True

    def match(self, model: Any) -> bool:
        """Whether ``model``'s (onnx.ModelProto) main graph holds a node this pass rewrites."""
        ops = set(self.ops)
        return any(n.op_type in ops for n in model.graph.node)

    def rewrite(self, model: Any, target: Target) -> tuple[Any, dict[str, int]]:
        """Run the pass: (rewritten model, nodes replaced by kind; a pass of one kind counts under its name).
        Raises what the pass raises (onnx shape inference errors)."""
        return importlib.import_module(f"cosyedge.passes.{self.name}").run(model, target)

    @staticmethod
    def report(counts: dict[str, int]) -> int:
        """Nodes a run replaced (int; 0: the pass did not apply and the model stays as it was). Kinds named
        ``kept_*`` count nodes left alone on purpose and are not added."""
        return sum(v for k, v in counts.items() if not k.startswith("kept_"))


IO_LAYOUT_PASSES = ("state_layout", "ring_state")
"""tuple[str, ...]: passes that change the layout of a graph's state inputs/outputs (only where the runtime binds
them in that layout: a StreamPool's top-level graph)."""


def apply_passes(model: Any, target: Target, passes: Any, where: str, cpu: bool = True) -> tuple[Any, dict]:
    """Apply ``passes`` in order, each to the previous one's result when it replaced something.

    An optional pass that fails (ONNX shape inference) is skipped, and said in one warning line (once per message):
    ``"<where>: graph pass <name> not applied (<error>); running without it"``; the others still apply.

    Args:
        model (onnx.ModelProto): The model (not modified unless a pass's doc says it works in place).
        target (Target): Input shapes the result runs at.
        passes (Iterable[Pass]): The passes, in order.
        where (str): Who applies them, for the warning (e.g. ``"stream pool: m.onnx"``).
        cpu (bool): The result runs on ONNX Runtime's CPU provider without external data (else ``cpu_only``
            passes are skipped).
    A model that runs a one-hop graph in a Scan over hops (:mod:`cosyedge.passes.hop_scan`, the INT8 ``ort_matmul``
    form) gets the passes applied to that one-hop graph (``target`` taken at one hop), put back in its Scan, except
    those that change the graph's state layout (:data:`IO_LAYOUT_PASSES`: the Scan carries the states in the layout
    the outer graph declares).

    Returns:
        tuple[onnx.ModelProto, dict[str, dict[str, int]]]: the result (``model`` itself when nothing applied) and,
        per pass that ran (failed and skipped ones left out), its counts by kind (``{}``: nothing to match).
    """
    from cosyedge.passes.hop_scan import one_hop_body, one_hop_target, with_body

    body = one_hop_body(model)
    if body is not None:  # a Scan over hops (INT8 ort_matmul): the passes rewrite its one-hop graph
        # ... but not the layout of its states: the Scan's carried states keep the layout the outer graph declares
        passes = [p for p in passes if p.name not in IO_LAYOUT_PASSES]
        dims = None if target.dims is None else one_hop_target(body, target.dims)
        inner = dataclasses.replace(target, shapes=one_hop_target(body, target.shapes), dims=dims)
        out, done = apply_passes(body, inner, passes, where, cpu)
        by_name = {p.name: p for p in passes}  # a pass may work in place: whether one replaced something decides
        changed = any(by_name[k].report(c) for k, c in done.items())
        return (with_body(model, out) if changed else model), done
    done: dict[str, dict] = {}
    for p in passes:
        if p.cpu_only and not cpu:
            continue
        if not p.match(model):
            done[p.name] = {}
            continue
        try:
            out, counts = p.rewrite(model, target)
        except Exception as err:  # noqa: BLE001 - onnx raises many types; the graph still runs without the pass
            if not p.optional:  # a correctness pass: the graph must not run without it, said in one line
                from cosyedge.errors import ArtifactError

                raise ArtifactError(f"{where}: graph pass {p.name} failed ({first_line(err)}); this model cannot run "
                                    f"here without it") from None
            LOG.warning_once(f"{where}: graph pass {p.name} not applied ({first_line(err)}); running without it")
            continue
        done[p.name] = dict(counts)
        if p.report(counts):
            model = out
    return model, done


__all__ = ["Pass", "Target", "apply_passes"]
