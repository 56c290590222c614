"""Adopt, batch by a Scan over streams: a graph that only runs at batch 1 is run once per stream of a batch.

Some exported graphs cannot be given a dynamic batch by rewriting their shapes: GTCRN folds the batch with
frequency in one state (``inter_cache`` (2, 1, B*33, 16)), keeps it on axis 3 of another and bakes ``1`` and
``-1`` into its Reshapes. Such a batch-1 one-hop graph becomes the body of an outer ONNX ``Scan`` over axis 0
of every streamed input and state (no loop-carried value: the streams are independent): each iteration sees one
stream at batch 1, and each state is stored ``(N, *its batch-1 shape)``, so the contract and every backend see
batch-first states and ``StreamPool`` / Triton can batch. The streams run one after the other inside the model
(batch 2 costs two batch-1 runs) wherever the stored graph runs; ``StreamPool`` rewrites the Scan into one batched
body (:mod:`cosyedge.passes.batch_streams`, proved against this Scan when the pool starts); the batch test (:func:`cosyedge.surgery.adopt.batch._batch_test`) proves
batch 2 == two batch-1 streams.

Source: ONNX ``Scan`` (onnx.ai/onnx/operators/onnx__Scan.html: scan inputs sliced along ``scan_input_axes``,
scan outputs stacked along ``scan_output_axes``; zero state variables allowed).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from cosyedge._lazy import lazy_import
from cosyedge.artifacts import BATCH_DIM
from cosyedge.surgery import io
from cosyedge.surgery.adopt.pairs import AdoptedState

gs = lazy_import("onnx_graphsurgeon")

STREAMS_PREFIX = "one_stream/"
"""str: prefix of every tensor name inside the Scan body (a subgraph must not reuse an outer name)."""


def scan_over_streams(model: Any, stream_shapes: dict[str, tuple], states: list[AdoptedState]) -> tuple[Any, list]:
    """Wrap the batch-1 ``model`` in a Scan over axis 0 of its streamed inputs, outputs and states.

    Args:
        model (onnx.ModelProto): The canonical batch-1 graph (stream inputs/outputs batch-first with batch 1).
        stream_shapes (dict[str, tuple]): Every streamed (non-state) input and output by name: its shape at batch
            1 with -1 where the size varies with the chunk (the time axis of a graph without a fixed hop), e.g.
            ``{"audio": (1, 1, 512), "prob": (1, 1, 1)}``.
        states (list[AdoptedState]): The state pairs (``shape`` = the state's batch-1 shape).
    Returns:
        tuple[onnx.ModelProto, list[AdoptedState]]: the wrapped graph (streamed tensors ``(N, ...)``, states
        ``(N, *shape)``, names unchanged) and the states as the wrapped graph has them (batch axis 0, shape
        ``(1, *shape)``).
    """
    from cosyedge.surgery.adopt.wrap import _unique_node_names

    graph = gs.import_onnx(_unique_node_names(model))
    outer_names = [t.name for t in graph.inputs] + [t.name for t in graph.outputs]
    by_in = {t.name: t for t in graph.inputs}
    by_out = {t.name: t for t in graph.outputs}
    for t in graph.tensors().values():
        t.name = STREAMS_PREFIX + t.name
    body_in, body_out, outer_in, outer_out = [], [], [], []
    # streamed inputs: the slice (batch axis dropped) reshaped back to batch 1
    for name, t in by_in.items():
        if name not in stream_shapes:
            continue
        shape = list(stream_shapes[name])
        sl = gs.Variable(f"{STREAMS_PREFIX}{name}/slice", dtype=t.dtype, shape=None)
        graph.nodes.append(gs.Node("Reshape", name=f"{STREAMS_PREFIX}{name}/batch_1", inputs=[
            sl, gs.Constant(f"{STREAMS_PREFIX}{name}/batch_1_shape", np.array([1] + shape[1:], np.int64))],
            outputs=[t]))
        t.shape = None
        body_in.append(sl)
        outer_in.append(gs.Variable(name, dtype=t.dtype, shape=[BATCH_DIM] + _dims(shape[1:])))
    for s in states:  # a state is sliced as it is: (N, *shape)[b] = shape
        t = by_in[s.input]
        t.shape = list(s.shape)
        body_in.append(t)
        outer_in.append(gs.Variable(s.input, dtype=t.dtype, shape=[BATCH_DIM] + list(s.shape)))
    outs = [n for n in by_out if n in stream_shapes]
    for name in outs:
        t = by_out[name]
        shape = list(stream_shapes[name])
        y = gs.Variable(f"{STREAMS_PREFIX}{name}/unbatched", dtype=t.dtype, shape=None)
        graph.nodes.append(gs.Node("Reshape", name=f"{STREAMS_PREFIX}{name}/drop_batch", inputs=[
            t, gs.Constant(f"{STREAMS_PREFIX}{name}/drop_batch_shape", np.array(shape[1:], np.int64))], outputs=[y]))
        t.shape = None
        body_out.append(y)
        outer_out.append(gs.Variable(name, dtype=t.dtype, shape=[BATCH_DIM] + _dims(shape[1:])))
    for s in states:
        t = by_out[s.output]
        t.shape = list(s.shape)
        body_out.append(t)
        outer_out.append(gs.Variable(s.output, dtype=t.dtype, shape=[BATCH_DIM] + list(s.shape)))
    for t in graph.tensors().values():
        if isinstance(t, gs.Variable) and t not in body_in and t not in body_out:
            t.shape = None
    graph.inputs, graph.outputs = body_in, body_out
    graph.name = "one_stream"
    graph.cleanup().toposort()
    outer = gs.Graph(opset=graph.opset, name="streams")
    outer.import_domains = graph.import_domains
    outer.nodes.append(gs.Node("Scan", name="adopt/scan_streams", inputs=outer_in, outputs=outer_out,
                               attrs={"body": graph, "num_scan_inputs": len(outer_in),
                                      "scan_input_axes": [0] * len(outer_in),
                                      "scan_output_axes": [0] * len(outer_out)}))
    outer.inputs = [next(t for t in outer_in if t.name == n) for n in outer_names if n in {t.name for t in outer_in}]
    outer.outputs = [next(t for t in outer_out if t.name == n) for n in outer_names
                     if n in {t.name for t in outer_out}]
    new = io.graph_to_model(outer, like=model)
    new.ir_version = model.ir_version
    wrapped = [copy.copy(s) for s in states]
    for s in wrapped:
        s.shape, s.batch_axis = (1, *s.shape), 0
    return new, wrapped


def _dims(shape: list) -> list:
    """Declared dims: -1 (varies with the chunk) becomes a symbolic name."""
    return [d if isinstance(d, int) and d >= 0 else "T" for d in shape]
