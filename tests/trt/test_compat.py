"""Version shim decisions (TensorRT 8.6 / 10.x / 11.x), sparsity report parsing and plan portability, on CPU."""

from __future__ import annotations

import json
import types

import pytest

from cosyedge.runtime import trt_compat as tc
from cosyedge.errors import ArtifactError, DependencyError, UsageError
from tests.trt import fakes


@pytest.mark.parametrize("text, want", [("10.3.0.26", (10, 3, 0)), ("8.6.1.post1", (8, 6, 1)), ("11.0", (11, 0, 0)),
                                        ("10", (10, 0, 0))])
def test_parse_version(text, want):
    assert tc.parse_version(text) == want


def test_parse_version_garbage_is_dependency_error():
    with pytest.raises(DependencyError, match="cannot read the TensorRT version 'dev'"):
        tc.parse_version("dev")


@pytest.mark.parametrize("version, match", [("8.5.3", "too old: cosyedge needs TensorRT 8.6, 10.x or 11.x"),
                                            ("7.2.1", "too old"), ("12.0.0", "newer than this cosyedge knows")])
def test_unsupported_versions_are_refused(version, match):
    with pytest.raises(DependencyError, match=match):
        tc.features(version)


def test_features_by_version():
    f8, f10, f11 = tc.features("8.6.1"), tc.features("10.3.0"), tc.features("11.1.0")
    assert (f8.explicit_batch_flag, f8.strongly_typed, f8.precision_flags, f8.calibrators) == (True, False, True, True)
    assert (f10.explicit_batch_flag, f10.strongly_typed, f10.precision_flags) == (False, True, True)
    assert f11.always_strongly_typed and not f11.precision_flags and not f11.calibrators and not f11.dla
    assert {f8.execute_api, f10.execute_api, f11.execute_api} == {"v3"}  # 8.5+ has execute_async_v3
    assert (f8.inspector_io_key, f11.inspector_io_key) == ("Bindings", "I/O Tensors")


def test_features_read_from_the_module_when_given():
    state = fakes.FakeCudaState()
    t11 = fakes.make_fake_trt("11.0.0", state)
    assert not hasattr(t11.BuilderFlag, "FP16") and hasattr(t11.BuilderFlag, "SPARSE_WEIGHTS")
    f = tc.features(t11.__version__, t11)
    assert f.precision_flags is False and f.strongly_typed is True
    # an 8.6 build whose IExecutionContext lacks execute_async_v3 falls back to bindings + execute_async_v2
    t8 = fakes.make_fake_trt("8.6.1", state)
    t8.IExecutionContext = type("IExecutionContext", (), {"execute_async_v2": lambda *a: True})
    assert tc.features("8.6.1", t8).execute_api == "v2"
    assert tc.features("8.6.1", fakes.make_fake_trt("8.6.1", state)).execute_api == "v3"


# version, precision, sparse, dla, fallback -> network flags, builder flags, strongly typed
PLAN_TABLE = [
    ("8.6.1", "fp32", False, None, False, ["EXPLICIT_BATCH"], [], False),
    ("8.6.1", "fp16", False, None, False, ["EXPLICIT_BATCH"], ["FP16"], False),
    ("8.6.1", "int8", True, None, False, ["EXPLICIT_BATCH"], ["INT8", "FP16", "SPARSE_WEIGHTS"], False),
    ("8.6.1", "int8", False, 1, True, ["EXPLICIT_BATCH"], ["INT8", "FP16", "GPU_FALLBACK"], False),
    ("10.3.0", "fp32", False, None, False, ["STRONGLY_TYPED"], [], True),
    ("10.3.0", "fp16", True, None, False, ["STRONGLY_TYPED"], ["SPARSE_WEIGHTS"], True),
    ("10.3.0", "int8", True, None, False, ["STRONGLY_TYPED"], ["SPARSE_WEIGHTS"], True),
    ("10.3.0", "fp16", False, 0, False, [], ["FP16"], False),  # DLA: weakly typed with precision flags
    ("11.1.0", "int8", True, None, False, [], ["SPARSE_WEIGHTS"], True),
    ("11.1.0", "fp32", False, None, False, [], [], True),
]


@pytest.mark.parametrize("version, precision, sparse, dla, fallback, net, flags, typed", PLAN_TABLE)
def test_plan_build_table(version, precision, sparse, dla, fallback, net, flags, typed):
    plan = tc.plan_build(tc.features(version), precision, sparse, dla, fallback)
    assert plan.network_flags == net
    assert plan.builder_flags == flags
    assert plan.strongly_typed is typed
    assert plan.dla_core == dla
    assert not ({"FP16", "INT8"} & set(plan.builder_flags)) or not typed  # never precision flags when strongly typed


def test_plan_build_never_uses_removed_flags_on_11():
    state = fakes.FakeCudaState()
    t11 = fakes.make_fake_trt("11.2.0", state)
    names = [n for n in vars(t11.BuilderFlag) if n.isupper()]
    for precision in tc.PRECISIONS:
        for sparse in (False, True):
            plan = tc.plan_build(tc.features("11.2.0", t11), precision, sparse, available_builder_flags=names)
            assert set(plan.builder_flags) <= set(names)


@pytest.mark.parametrize("version, kwargs, exc, match", [
    ("10.3.0", dict(precision="bf16"), UsageError, "unknown precision 'bf16'"),
    ("10.3.0", dict(gpu_fallback=True), UsageError, "--gpu-fallback only applies to DLA builds: add --dla-core N"),
    ("10.3.0", dict(dla_core=-1, precision="fp16"), UsageError, "--dla-core must be >= 0"),
    ("10.3.0", dict(dla_core=0, precision="fp32"), UsageError, "DLA runs FP16 and INT8 only"),
    ("11.0.0", dict(dla_core=0, precision="int8"), UsageError, "DLA builds need TensorRT 10.x or 8.6"),
])
def test_plan_build_refusals(version, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tc.plan_build(tc.features(version), **kwargs)


def test_plan_build_missing_flag_is_named():
    with pytest.raises(DependencyError, match="no BuilderFlag SPARSE_WEIGHTS"):
        tc.plan_build(tc.features("10.3.0"), "fp32", True, available_builder_flags=["TF32", "FP16"])


def test_network_flags_mask():
    enum = types.SimpleNamespace(EXPLICIT_BATCH=0, STRONGLY_TYPED=1)
    assert tc.network_flags_mask([], enum) == 0
    assert tc.network_flags_mask(["STRONGLY_TYPED"], enum) == 2
    assert tc.network_flags_mask(["EXPLICIT_BATCH", "STRONGLY_TYPED"], enum) == 3


def test_sparse_layers_from_log():
    lines = [
        "[03/23/2021-00:14:05] [I] [TRT] (Sparsity) Layers eligible for sparse math: conv1, conv2, conv3",
        "[I] some other line",
        ("[03/23/2021-00:14:05] [I] [TRT] (Sparsity) TRT inference plan picked sparse implementation for layers: "
         "conv2, conv3"),
    ]
    assert tc.sparse_layers_from_log(lines) == {"eligible": ["conv1", "conv2", "conv3"], "picked": ["conv2", "conv3"]}
    assert tc.sparse_layers_from_log(["nothing"]) == {"eligible": [], "picked": []}


def test_layers_from_inspector():
    info = json.dumps({"Layers": [
        {"Name": "/blocks.0/conv", "LayerType": "CaskConvolution", "TacticName": "sm80_xmma_fprop_sparse_conv_f16"},
        {"Name": "/act", "LayerType": "PointWiseV2", "TacticName": "0x1"},
        "name_only_layer"], "Bindings": ["audio"]})
    layers = tc.layers_from_inspector(info)
    assert [layer["name"] for layer in layers] == ["/blocks.0/conv", "/act", "name_only_layer"]
    assert [layer["sparse"] for layer in layers] == [True, False, False]
    with pytest.raises(ArtifactError, match="not the expected JSON"):
        tc.layers_from_inspector("{not json")
    with pytest.raises(ArtifactError, match="not the expected JSON"):
        tc.layers_from_inspector(json.dumps({"Bindings": []}))


MANIFEST = {"tools": {"tensorrt": "10.3.0"}, "gpu": {"name": "Orin", "compute_capability": "8.7"}}


@pytest.mark.parametrize("version, name, cc, action, words", [
    ("10.3.0", "Orin", (8, 7), "ok", ""),
    ("10.3.0", "Orin", "8.7", "ok", ""),
    ("10.7.0", "Orin", (8, 7), "rebuild", "plan built with TensorRT 10.3.0, this machine has 10.7.0"),
    ("10.3.0", "NVIDIA A10", (8, 6), "rebuild", "compute capability 8.7 (Orin), this GPU is 8.6 (NVIDIA A10)"),
    ("10.3.0", "Orin NX", (8, 7), "warn", "plan built on Orin, running on Orin NX"),
])
def test_check_engine_compat(version, name, cc, action, words):
    d = tc.check_engine_compat(MANIFEST, version, name, cc)
    assert d.action == action
    assert words in d.reason


def test_check_engine_compat_foreign_manifest():
    with pytest.raises(ArtifactError, match="no TensorRT version or GPU entry"):
        tc.check_engine_compat({"tools": {"onnxruntime": "1.32"}}, "10.3.0", "Orin", (8, 7))


@pytest.mark.parametrize("cc, want", [((8, 7), "8.7"), ([9, 0], "9.0"), ("8.6", "8.6"), ("sm87", "8.7"),
                                      ("sm_90", "9.0")])
def test_format_cc(cc, want):
    assert tc.format_cc(cc) == want
