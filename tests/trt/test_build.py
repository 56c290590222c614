"""TensorRT build stage: profile derivation from the stream contract (pure), and build/load/rebuild driven
through fake TensorRT/pycuda modules that run the ONNX with ONNX Runtime (see tests/trt/fakes.py)."""

from __future__ import annotations

import json

import onnx
import pytest

from cosyedge.artifacts import StreamContract
from cosyedge.builders import trt as bt
from cosyedge.builders.cache import load_or_rebuild
from cosyedge.runtime.trt import load_trt_engine, rebuild_command
from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from tests.reference_structure import reference_structure
from tests.trt import fakes
from tests.trt.conftest import HOP


# ------------------------------------------------------------------------------------------ pure parts
def test_profile_of_the_reference_model_is_exact():
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    prof = bt.profile_from_contract(c, max_batch=8, opt_batch=2)
    assert list(prof)[0] == c.input
    assert prof[c.input] == ((1, 1, 160), (2, 1, 160), (8, 1, 160))
    assert set(prof) == {c.input} | {s.input for s in c.states}
    for s in c.states:
        mn, opt, mx = prof[s.input]
        assert mn[1:] == opt[1:] == mx[1:] == tuple(s.shape[1:])  # every non-batch dim exact
        assert (mn[0], opt[0], mx[0]) == (1, 2, 8)
    # dilated blocks: state frames (kernel - 1) * dilation (2, 4, ..., 64 for kernel 3, dilations 1..32), with
    # kernel and dilations from the bundled weights' config
    net = reference_structure()
    frames = [prof[f"state_in.{net.block_state(i):02d}"][0][2] for i in range(net.n_blocks)]
    assert frames == [(net.kernel_size - 1) * d for d in net.dilations] and len(prof) == 1 + net.n_states
    # the reference ONNX agrees with its own profile
    bt.check_onnx_against_profile(onnx.load(str(REFERENCE_STREAM_ONNX), load_external_data=False), c, prof)


def test_profile_chunk_is_a_fixed_hop_multiple():
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    assert bt.profile_from_contract(c, chunk_samples=320)[c.input][2] == (16, 1, 320)
    with pytest.raises(UsageError, match="not a positive multiple of the model's total stride 160"):
        bt.profile_from_contract(c, chunk_samples=100)


@pytest.mark.parametrize("kw, match", [(dict(max_batch=0), "max batch must be between 1 and 4096"),
                                       (dict(max_batch=5000), "max batch must be between 1 and 4096"),
                                       (dict(max_batch=4, opt_batch=5), "opt batch must be between 1 and max batch 4")])
def test_profile_batch_errors(kw, match):
    c = StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    with pytest.raises(UsageError, match=match):
        bt.profile_from_contract(c, **kw)


def test_profile_disagreeing_with_the_graph_is_caught(two_state, tmp_path):
    """A state shape in the metadata that is not the graph's (the field's '(kernel-1)*dilation' bug)."""
    model = onnx.load(str(two_state))
    c = StreamContract.from_onnx(model)
    c.states[1].shape = ["N", 1, 8]  # graph says 4
    prof = bt.profile_from_contract(c)
    with pytest.raises(ArtifactError, match="ONNX input 'state_in.01' has 4 on axis 2 but the contract says 8"):
        bt.check_onnx_against_profile(model, c, prof)
    c.states.pop()
    with pytest.raises(ArtifactError, match=r"ONNX inputs \['state_in.01'\] are not in the stream contract"):
        bt.check_onnx_against_profile(model, c, bt.profile_from_contract(c))


def test_precision_checks(two_state):
    stats = bt.onnx_precision_stats(onnx.load(str(two_state)))
    assert stats == {"qdq_nodes": 0, "int8_kernels": 0, "fp16_initializers": 0, "fp16_casts": 0}
    with pytest.raises(UsageError, match="no QuantizeLinear/DequantizeLinear nodes"):
        bt.check_precision("int8", stats, True, "m.onnx")
    with pytest.raises(UsageError, match="holds no FP16 tensors"):
        bt.check_precision("fp16", stats, True, "m.onnx")
    bt.check_precision("fp16", stats, False, "m.onnx")  # 8.6: the FP16 flag does it
    with pytest.raises(UsageError, match="it is an INT8 model, build it with --int8"):
        bt.check_precision("fp32", {"qdq_nodes": 6, "fp16_initializers": 0, "fp16_casts": 0}, True, "m.onnx")


def test_names_and_rebuild_command(tmp_path):
    assert bt.engine_folder_name("reference", "int8", True) == "reference-int8-sparse-tensorrt"
    assert bt.engine_folder_name("reference", "fp16", False, 0) == "reference-fp16-dla0-tensorrt"
    assert bt.timing_cache_path(tmp_path, "10.3.0", "8.7") == tmp_path / "timing-cache" / "tensorrt-10.3.0-sm87.cache"
    man = {"name": "ref", "flags": {"precision": "int8", "sparse": True, "dla_core": 1, "gpu_fallback": True}}
    assert rebuild_command(man, tmp_path) == (f"cosyedge build --backend tensorrt --onnx {tmp_path / 'model.onnx'} "
                                                 f"--name ref --int8 --sparse --dla-core 1 --gpu-fallback")


def test_build_without_tensorrt_names_what_is_missing(two_state, tmp_path):
    pytest.importorskip("onnxruntime")
    try:
        import tensorrt  # noqa: F401
        pytest.skip("tensorrt is installed here")
    except ImportError:
        pass
    with pytest.raises(DependencyError, match=r"to build TensorRT engines cosyedge needs tensorrt .*\(missing\); "
                                              r"install: pip install 'cosyedge\[trt\]'"):
        bt.build_trt(two_state, out_dir=tmp_path)
    assert not list(tmp_path.iterdir())


# -------------------------------------------------------------------------------- build through fakes
def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_build_writes_plan_manifest_and_timing_cache(fake10, two_state, tmp_path):
    out = bt.build_trt(two_state, out_dir=tmp_path, sparse=True, max_batch=4, workspace_mib=256)
    assert out == tmp_path / "two_state-fp32-sparse-tensorrt"
    assert sorted(p.name for p in out.iterdir()) == ["engine.plan", "manifest.json", "model.onnx"]
    assert (out / "model.onnx").read_bytes() == two_state.read_bytes()
    m = _manifest(out)
    assert m["backend"] == "tensorrt" and m["precision"] == "fp32" and m["sparse"] is True
    assert m["tools"]["tensorrt"] == "10.3.0"
    assert m["gpu"]["name"] == "NVIDIA Orin" and m["gpu"]["compute_capability"] == "8.7"
    assert m["chunk_samples"] == HOP and m["max_batch"] == 4
    assert m["layers"]["sparse_eligible"] == ["conv_a", "conv_b"]
    assert m["layers"]["sparse_picked"] == ["conv_b"]
    assert m["layers"]["sparse_tactics"] == ["conv_b"]
    assert m["build_plan"]["network_flags"] == ["STRONGLY_TYPED"]
    calls = fake10.trt.calls
    assert calls["network_flags"] == 1 << 1  # STRONGLY_TYPED
    assert calls["builder_flags"] == ["SPARSE_WEIGHTS"]
    assert calls["workspace"] == ("WORKSPACE", 256 << 20)
    c = StreamContract.from_onnx(two_state)
    assert calls["profile"] == bt.profile_from_contract(c, max_batch=4)
    assert m["profile"]["state_in.01"] == [[1, 1, 4], [1, 1, 4], [4, 1, 4]]
    # timing cache saved under the engines root, reused by the next build
    cache = tmp_path / "timing-cache" / "tensorrt-10.3.0-sm87.cache"
    assert cache.read_bytes() == b"+tactics"
    assert calls["timing_cache_in"] == b""
    bt.build_trt(two_state, out_dir=tmp_path, precision="fp32")
    assert calls["timing_cache_in"] == b"+tactics"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_build_on_86_sets_precision_flags(monkeypatch, two_state, tmp_path):
    f = fakes.install(monkeypatch, version="8.6.1")
    out = bt.build_trt(two_state, out_dir=tmp_path, precision="fp16")  # 8.6: FP16 flag, no strong typing
    # the FP32 plan of this FP32 ONNX (its boundary convs) is pinned to FP32 (tests/trt/test_fp32_pins.py)
    assert f.trt.calls["builder_flags"] == ["FP16", "PREFER_PRECISION_CONSTRAINTS"]
    assert f.trt.calls["layer_precisions"] and _manifest(out)["layers"]["fp32_pinned"]["count"] > 0
    assert f.trt.calls["network_flags"] == 1 << 0  # EXPLICIT_BATCH
    assert _manifest(out)["build_plan"]["strongly_typed"] is False


def test_precision_rebuild_of_the_same_parent_does_not_warn_of_another_model(monkeypatch, two_state, tmp_path,
                                                                            warnings_seen):
    """The manifest records the FP32 parent (``parent_path``), not the precision ONNX built from it, so a rebuild
    from the same parent is quiet and one from another parent warns."""
    fakes.install(monkeypatch, version="8.6.1")
    m = onnx.load(str(two_state))
    onnx.helper.set_model_props(m, {**{p.key: p.value for p in m.metadata_props}, "made_by": "precision stage"})
    precision_onnx = tmp_path / "model.fp16.onnx"  # other bytes than its parent, same contract
    onnx.save(m, str(precision_onnx))
    for _ in range(2):
        bt.build_trt(precision_onnx, out_dir=tmp_path, precision="fp16", parent_path=two_state)
        assert not [r for r in warnings_seen if "another model" in r.getMessage()]
    out = bt.build_trt(precision_onnx, out_dir=tmp_path, precision="fp16", parent_path=precision_onnx)
    assert [r for r in warnings_seen if r.getMessage().startswith(f"{out} holds an engine built from another model")]


def test_build_on_11_refuses_int8_without_qdq(monkeypatch, two_state, tmp_path):
    f = fakes.install(monkeypatch, version="11.1.0")
    with pytest.raises(UsageError, match="no QuantizeLinear/DequantizeLinear nodes"):
        bt.build_trt(two_state, out_dir=tmp_path, precision="int8")
    out = bt.build_trt(two_state, out_dir=tmp_path, sparse=True)
    assert f.trt.calls["network_flags"] == 0 and f.trt.calls["builder_flags"] == ["SPARSE_WEIGHTS"]
    assert out.name == "two_state-fp32-sparse-tensorrt"


def test_dla_build(monkeypatch, two_state, tmp_path):
    f = fakes.install(monkeypatch, version="8.6.1", dla_cores=2)
    out = bt.build_trt(two_state, out_dir=tmp_path, precision="fp16", dla_core=1, gpu_fallback=True)
    assert out.name == "two_state-fp16-dla1-tensorrt"
    assert f.trt.calls["dla"] == ("DLA", 1)
    assert f.trt.calls["builder_flags"] == ["FP16", "GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS"]  # DLA: weak
    with pytest.raises(UsageError, match="--dla-core 2: this device has 2 DLA core"):
        bt.build_trt(two_state, out_dir=tmp_path, precision="fp16", dla_core=2)


def test_dla_on_a_desktop_gpu(fake10, two_state, tmp_path):
    with pytest.raises(UsageError, match=r"this device has 0 DLA core\(s\) \(DLA exists on Jetson"):
        bt.build_trt(two_state, out_dir=tmp_path, precision="fp16", dla_core=0)
    assert not list(tmp_path.glob("two_state-*"))


def test_failed_build_keeps_the_previous_engine(monkeypatch, two_state, tmp_path):
    fakes.install(monkeypatch, version="10.3.0")
    out = bt.build_trt(two_state, out_dir=tmp_path)
    before = (out / "engine.plan").read_bytes()
    fakes.install(monkeypatch, version="10.3.0", fail_build=True)
    with pytest.raises(ArtifactError, match="failed to build model.onnx: .*no implementation for layer conv_x"):
        bt.build_trt(two_state, out_dir=tmp_path)
    assert (out / "engine.plan").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".two_state")]


def test_unparsable_onnx(fake10, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(ArtifactError, match="cannot read ONNX file"):
        bt.build_trt(bad, out_dir=tmp_path)


# ------------------------------------------------------------------------------- load, portability
def test_load_checks_hashes(fake10, two_state, tmp_path):
    out = bt.build_trt(two_state, out_dir=tmp_path)
    eng = load_or_rebuild(out)
    assert eng.plan_path == out / "engine.plan" and eng.contract.name == "two_state"
    plan = out / "engine.plan"
    plan.write_bytes(plan.read_bytes() + b" ")
    with pytest.raises(ArtifactError, match="stale or corrupt: engine.plan sha256 .* rebuild: cosyedge build "
                                            "--backend tensorrt --onnx"):
        load_or_rebuild(out)
    plan.unlink()
    with pytest.raises(ArtifactError, match="has no engine.plan; rebuild"):
        load_or_rebuild(out)


def test_other_tensorrt_version_rebuilds_from_the_stored_onnx(monkeypatch, two_state, tmp_path):
    fakes.install(monkeypatch, version="10.3.0")
    out = bt.build_trt(two_state, out_dir=tmp_path, sparse=True, max_batch=3)
    f = fakes.install(monkeypatch, version="10.7.0")
    with pytest.raises(ArtifactError, match=r"cannot run here: plan built with TensorRT 10.3.0, this machine has "
                                            r"10.7.0; rebuild: cosyedge build --backend tensorrt --onnx .*--sparse"):
        load_trt_engine(out, rebuild=False)
    assert f.trt.calls["builds"] == 0
    eng = load_or_rebuild(out)  # rebuilds in place with the stored flags
    assert f.trt.calls["builds"] == 1 and eng.folder == out
    m = _manifest(out)
    assert m["tools"]["tensorrt"] == "10.7.0" and m["sparse"] is True and m["max_batch"] == 3
    assert (out / "model.onnx").read_bytes() == two_state.read_bytes()


def test_other_gpu_rebuilds(monkeypatch, two_state, tmp_path):
    fakes.install(monkeypatch, version="10.3.0")
    out = bt.build_trt(two_state, out_dir=tmp_path)
    f = fakes.install(monkeypatch, version="10.3.0", gpus=(("NVIDIA A10", (8, 6)),))
    load_or_rebuild(out)
    assert f.trt.calls["builds"] == 1
    assert _manifest(out)["gpu"]["compute_capability"] == "8.6"


def test_stage_twin(fake10, two_state, tmp_path):
    stage = bt.TrtEngineFromOnnx(two_state, out_dir=tmp_path, precision="fp32", max_batch=2)
    assert fake10.trt.calls["builds"] == 0  # lazy
    assert stage() == tmp_path / "two_state-fp32-tensorrt"
    assert _manifest(stage())["max_batch"] == 2


def test_smoke_test_catches_non_finite_output(fake10, tmp_path):
    """A model that gives -inf for a zero chunk (Log after the FIR) never becomes an engine folder."""
    from onnx import helper

    from tests.helpers import models

    path = models.make_fir_model(tmp_path / "log.onnx", hop=HOP, name="logm")
    model = onnx.load(str(path))
    model.graph.node[1].output[0] = "pre_log"
    model.graph.node.append(helper.make_node("Log", ["pre_log"], [models.OUTPUT], name="log"))
    onnx.save(model, str(path))
    with pytest.raises(ArtifactError, match="produced NaN/Inf for a zero chunk"):
        bt.build_trt(path, out_dir=tmp_path / "engines")
    assert [p.name for p in (tmp_path / "engines").iterdir()] == ["timing-cache"]


def test_profile_covers_every_stream_input_of_a_feature_model():
    """A multi-input feature model (DeepFilterNet3's shapes) gets one profile entry per input, with
    its frames per chunk from the contract, and every state batch-first; nothing typed by hand."""
    from cosyedge.artifacts import StateSpec, StreamContract, StreamIO

    c = StreamContract(input="feat_erb", output="m", sample_rate_hz=48000, hop_samples=480, total_stride=480,
                       states=[StateSpec("state_in.00", "state_out.00", ["N", 1, 256], kind="recurrent")],
                       inputs=[StreamIO("feat_erb", ["N", 1, "T", 32], time_axis=2),
                               StreamIO("feat_spec", ["N", 2, "T", 96], time_axis=2)],
                       outputs=[StreamIO("m", ["N", 1, "T", 32], time_axis=2)])
    prof = bt.profile_from_contract(c, chunk_samples=960, max_batch=8, opt_batch=2)
    assert prof == {"feat_erb": ((1, 1, 2, 32), (2, 1, 2, 32), (8, 1, 2, 32)),
                    "feat_spec": ((1, 2, 2, 96), (2, 2, 2, 96), (8, 2, 2, 96)),
                    "state_in.00": ((1, 1, 256), (2, 1, 256), (8, 1, 256))}
