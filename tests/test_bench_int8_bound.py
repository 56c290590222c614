"""scripts/benchmarks/bench_int8_bound.py: the 'free weighted ops' model keeps every output's shape and drops the work
(the timing itself is a benchmark, never asserted here)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from cosyedge.artifacts import StreamContract
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.qdq import select_nodes, weighted_nodes
from tests.scripts import load_script


def _run(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def test_free_model_keeps_shapes_and_drops_the_weights():
    bench = load_script("benchmarks/bench_int8_bound")
    m = onnx.load(str(REFERENCE_STREAM_ONNX))
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    quantized, _ = select_nodes(m, [i.name for i in c.stream_inputs], c.output)
    free, replaced, kept = bench.free_weighted_ops(m, {w.name for w in quantized})
    assert sorted(replaced) == sorted(w.name for w in quantized) and len(replaced) == 24 and kept == []
    everything, replaced_all, kept_all = bench.free_weighted_ops(m)
    assert len(replaced_all) + len(kept_all) == len(weighted_nodes(m)) == 30
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        if i.name == c.input:
            shape[-1] = c.hop_samples
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32) * 0.1
    ref, got = _run(m, feeds), _run(free, feeds)
    assert [r.shape for r in ref] == [g.shape for g in got]
    assert not np.allclose(ref[0], got[0])  # the work is gone, not the same model
    n_weights = lambda model: sum(int(np.prod(t.dims)) for t in model.graph.initializer)  # noqa: E731
    assert n_weights(everything) < 0.45 * n_weights(m)  # 545915 of 1360450 left: 1-channel analysis conv, grouped conv
