"""Graph passes: each list the runtime and the builds apply names registered passes, one module each; a pass that
fails, or a rewritten graph ONNX Runtime will not load, is said in one warning line and the stored graph (or the
graph without that pass) runs."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from cosyedge.log import LOG
from cosyedge.models import REFERENCE_STREAM_ONNX

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_pass_is_one_registered_module():
    from cosyedge.passes import MATMUL_FORM_PASSES, PASSES, POOL_PASSES, SESSION_OPTIONAL, SESSION_PASSES

    for name in SESSION_PASSES + SESSION_OPTIONAL + POOL_PASSES + MATMUL_FORM_PASSES:
        assert PASSES[name].name == name
        assert callable(importlib.import_module(f"cosyedge.passes.{name}").run)
    assert set(PASSES) == {p.stem for p in (ROOT / "cosyedge" / "passes").glob("*.py")} - {
        "__init__", "base", "edit", "shapes", "hop_scan"}


def _chunks(n=50):
    rng = np.random.default_rng(0)
    return (0.1 * rng.standard_normal((n, 1, 1, 160))).astype(np.float32)


def _run(**kw):
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(REFERENCE_STREAM_ONNX, **kw) as s:
        y = np.concatenate([s.push(c)["enhanced"].copy() for c in _chunks()], axis=-1)
        return y, dict(s.rewritten)


def _warned(records, phrase):
    return [r.getMessage() for r in records if phrase in r.getMessage()]


def test_a_failing_pass_is_one_warning_and_the_others_apply(monkeypatch, warnings_seen):
    import cosyedge.passes.conv_sum as mod

    monkeypatch.setattr(LOG, "_once", set())

    def boom(model, shapes):
        raise ValueError("shape inference failed\nsecond line")

    monkeypatch.setattr(mod, "fuse_conv_sum", boom)
    y, rewritten = _run()
    lines = _warned(warnings_seen, "graph pass conv_sum not applied")
    assert len(lines) == 1 and "shape inference failed" in lines[0] and "\n" not in lines[0]
    assert "conv_sum" not in rewritten
    plain, _ = _run(rewrites=())
    np.testing.assert_array_equal(y, plain)  # nothing else applies to the reference: the stored graph ran


def test_a_rewritten_graph_that_does_not_load_is_one_warning_and_the_stored_graph_runs(monkeypatch, warnings_seen):
    import onnx

    import cosyedge.passes.conv_sum as mod

    monkeypatch.setattr(LOG, "_once", set())

    def broken(model, shapes):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.node[0].op_type = "NoSuchOp"
        return m, 3

    monkeypatch.setattr(mod, "fuse_conv_sum", broken)
    y, rewritten = _run()
    lines = _warned(warnings_seen, "running the stored graph")
    assert len(lines) == 1 and "['conv_sum']" in lines[0] and "cannot load" in lines[0]
    assert rewritten == {}
    plain, _ = _run(rewrites=())
    np.testing.assert_array_equal(y, plain)


def test_a_pool_pass_that_fails_is_one_warning(monkeypatch, warnings_seen):
    import cosyedge.passes.batch_gemm as mod
    from cosyedge.runtime.pool import StreamPool

    monkeypatch.setattr(LOG, "_once", set())

    def boom(model, dims):
        raise RuntimeError("no shapes")

    monkeypatch.setattr(mod, "batch_rewrite", boom)
    with StreamPool(REFERENCE_STREAM_ONNX, max_streams=2) as pool:
        assert not {"conv_gemm", "conv_depthwise", "matmul_gemm", "kept_sensitive"} & set(pool.rewritten)
        sid = pool.join()
        out = pool.push({sid: _chunks(1)[0, 0, 0]})
        assert np.isfinite(out[sid]).all()
    lines = _warned(warnings_seen, "graph pass batch_gemm not applied")
    assert len(lines) == 1 and lines[0].startswith("stream pool: ") and "no shapes" in lines[0]


def test_a_correctness_pass_that_fails_is_raised(monkeypatch):
    from cosyedge.passes import PASSES, Target, apply_passes

    p = PASSES["dqmm_per_row"]
    assert not p.optional
    monkeypatch.setattr(type(p), "match", lambda self, model: True)
    monkeypatch.setattr(importlib.import_module("cosyedge.passes.dqmm_per_row"), "per_row_dynamic_quant",
                        lambda model: (_ for _ in ()).throw(ValueError("bad")))
    import onnx

    from cosyedge.errors import ArtifactError

    line = r"^x: graph pass dqmm_per_row failed \(ValueError: bad\); this model cannot run"
    with pytest.raises(ArtifactError, match=line):
        apply_passes(onnx.load(str(REFERENCE_STREAM_ONNX)), Target({}), [p], where="x")
