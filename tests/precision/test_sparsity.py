"""2:4 structured sparsity: masks, the ONNX pass on the reference model, Gemm/MatMul axes, CLI, torch masks."""

from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cosyedge.artifacts import StreamContract
from cosyedge.cli.main import main
from cosyedge.errors import UsageError
from cosyedge.models import REFERENCE_STREAM_ONNX
from cosyedge.precision.sparsity import (
    SPARSITY_KEY,
    check_2to4,
    format_report,
    mask_2to4,
    sparsify_onnx,
)
from tests.helpers import models
from tests.reference_structure import reference_structure

REF = REFERENCE_STREAM_ONNX
REF_NET = reference_structure()  # from the bundled weights' config (tests/reference_structure.py)
ELIGIBLE = set(REF_NET.sparse_eligible)
"""Both convs of every gated block and /out/Conv (input channels a multiple of 4)."""
N_PRUNED, N_LAYERS = len(ELIGIBLE), len(REF_NET.conv_nodes) + REF_NET.n_matmuls


def _groups_ok(w: np.ndarray, axis: int) -> bool:
    """Independent check: every 4 consecutive entries along ``axis`` hold <= 2 non-zeros."""
    a = np.moveaxis(w, axis, -1)
    for idx in itertools.product(*[range(d) for d in a.shape[:-1]]):
        row = a[idx]
        for j in range(0, row.size, 4):
            if np.count_nonzero(row[j:j + 4]) > 2:
                return False
    return True


def test_mask_keeps_two_largest_of_four():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 8, 2)).astype(np.float32)
    m = mask_2to4(w, axis=1)
    assert m.shape == w.shape and m.sum() == w.size // 2
    for o, k, g in itertools.product(range(3), range(2), range(2)):
        grp = np.abs(w[o, 4 * g:4 * g + 4, k])
        kept = set(np.flatnonzero(m[o, 4 * g:4 * g + 4, k]))
        assert kept == set(np.argsort(-grp)[:2])
    assert check_2to4(np.where(m, w, 0), axis=1) and not check_2to4(w, axis=1)
    assert not check_2to4(np.zeros((2, 6)), axis=1)  # not a multiple of 4
    with pytest.raises(UsageError, match="not a multiple of 4"):
        mask_2to4(np.ones((2, 6)), axis=1)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    out = tmp_path_factory.mktemp("sparse") / "reference.sparse.onnx"
    return out, sparsify_onnx(REF, out)


def test_reference_layers_pruned_and_verified(pruned):
    out, report = pruned
    rows = {r["node"]: r for r in report["layers"]}
    assert {n for n, r in rows.items() if r["eligible"]} == ELIGIBLE
    assert rows["/analysis/conv/Conv"]["reason"] == "1 input channels is not a multiple of 4"
    assert rows["/inp/Conv"]["reason"] == "161 input channels is not a multiple of 4"
    assert rows["/synthesis/conv/conv/Conv"]["reason"] == "322 input channels is not a multiple of 4"
    assert all(rows[n]["verified"] is True and rows[n]["sparsity"] == 0.5 for n in ELIGIBLE)
    assert not any(r["speedup_likely"] for r in rows.values())  # 96-channel layers are narrow
    s = report["summary"]
    assert s["pruned"] == N_PRUNED and s["layers"] == N_LAYERS and s["all_verified"]
    assert [r["node"] for r in report["layers"] if r["op"] == "Conv"] == REF_NET.conv_nodes  # every conv, in order
    matmuls = [r for r in report["layers"] if r["op"] == "MatMul"]  # the pitch comb's, constant first operand
    assert len(matmuls) == REF_NET.n_matmuls and not any(r["eligible"] for r in matmuls)
    # the written file, checked independently of the module's own checker
    m = onnx.load(str(out))
    ref = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(REF)).graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in ELIGIBLE:
        w = got[rows[n]["weight"]]
        assert _groups_ok(w, axis=1) and np.count_nonzero(w) == w.size // 2
        kept = w != 0
        assert np.array_equal(w[kept], ref[rows[n]["weight"]][kept])  # survivors unchanged
    for n in ("/analysis/conv/Conv", "/inp/Conv", "/synthesis/conv/conv/Conv"):
        assert np.array_equal(got[rows[n]["weight"]], ref[rows[n]["weight"]])
    assert StreamContract.from_onnx(out) == StreamContract.from_onnx(REF)
    assert {p.key: p.value for p in m.metadata_props}[SPARSITY_KEY] == "2:4"
    table = format_report(report)
    assert "/inp/Conv" in table and f"{N_PRUNED}/{N_LAYERS} layers pruned 2:4" in table
    assert "verified in the written ONNX: yes" in table


def test_pruned_model_still_streams(pruned):
    from cosyedge.runtime import OrtStreamSession, stream_array

    x = np.random.default_rng(1).standard_normal(3200).astype(np.float32) * 0.1
    with OrtStreamSession(pruned[0]) as s:
        y = stream_array(s, x)
    assert np.isfinite(y).all() and np.abs(y).max() > 0


def _gemm_matmul_model(path, k_gemm: int = 8, k_mm: int = 12, k_bad: int = 6):
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((8, k_gemm)).astype(np.float32), "wg"),  # (N, K), transB
             numpy_helper.from_array(rng.standard_normal((8, k_mm)).astype(np.float32), "wm0"),
             numpy_helper.from_array(rng.standard_normal((k_mm, 3)).astype(np.float32), "wm"),  # (K, N)
             numpy_helper.from_array(rng.standard_normal((3, k_bad)).astype(np.float32), "wb0"),
             numpy_helper.from_array(rng.standard_normal((k_bad, 2)).astype(np.float32), "wb")]
    nodes = [helper.make_node("Gemm", ["x", "wg"], ["g"], transB=1, name="gemm"),
             helper.make_node("MatMul", ["g", "wm0"], ["h"], name="mm0"),
             helper.make_node("MatMul", ["h", "wm"], ["i"], name="mm"),
             helper.make_node("MatMul", ["i", "wb0"], ["j"], name="mb0"),
             helper.make_node("MatMul", ["j", "wb"], ["y"], name="mb")]
    g = helper.make_graph(nodes, "gm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k_gemm])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_gemm_and_matmul_reduction_axes(tmp_path):
    src = _gemm_matmul_model(tmp_path / "gm.onnx")
    report = sparsify_onnx(src, tmp_path / "gm.sparse.onnx", exclude=["mm0"])
    rows = {r["node"]: r for r in report["layers"]}
    assert rows["gemm"]["eligible"] and rows["gemm"]["reduction"] == 8  # transB: K is axis 1 of (N, K)
    assert rows["mm"]["eligible"] and rows["mm"]["reduction"] == 12  # MatMul: K is axis 0 of (K, N)
    assert rows["mm0"]["reason"] == "excluded"
    assert rows["mb0"]["reason"] == "3 input channels is not a multiple of 4"
    assert rows["mb"]["reason"] == "6 input channels is not a multiple of 4"
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "gm.sparse.onnx")).graph.initializer}
    assert _groups_ok(w["wg"], axis=1) and np.count_nonzero(w["wg"]) == w["wg"].size // 2
    assert _groups_ok(w["wm"], axis=0) and np.count_nonzero(w["wm"]) == w["wm"].size // 2
    assert np.count_nonzero(w["wm0"]) == w["wm0"].size  # excluded: dense


def test_cli_table_json_and_errors(tmp_path, capsys):
    out, js = tmp_path / "s.onnx", tmp_path / "s.json"
    assert main(["sparsify", str(REF), str(out), "--json", str(js)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == str(out) and lines[0].split()[:2] == ["node", "op"]
    report = json.loads(js.read_text())
    assert report["summary"]["pruned"] == N_PRUNED and len(report["layers"]) == N_LAYERS
    assert main(["sparsify", str(REF), str(tmp_path / "t.onnx"), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["pattern"] == "2:4"
    # a model with nothing to prune: one-line error, exit 2, nothing written
    fir = models.make_fir_model(tmp_path / "fir.onnx")
    assert main(["sparsify", str(fir), str(tmp_path / "fir.sparse.onnx")]) == 2
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[!] ")]
    assert len(errors) == 1 and "no layer can be pruned 2:4 (c0_conv: 1 input channels is not a multiple of 4)" in errors[0]
    assert not (tmp_path / "fir.sparse.onnx").exists()
    assert main(["sparsify", str(tmp_path / "missing.onnx"), str(tmp_path / "m.onnx")]) == 3


def test_torch_masks_stay_fixed_during_finetune():
    torch = pytest.importorskip("torch")
    from cosyedge.train.reference.model import load_reference
    from cosyedge.precision.sparse_torch import (
        apply_2to4,
        eligible_modules,
        masks_hold,
        reapply_masks,
    )

    ref = load_reference()
    names = set(eligible_modules(ref))
    assert names == set(REF_NET.sparse_eligible_modules) == {
        *REF_NET.block_convs("torch"), "out", *(["lw_inp"] if REF_NET.lw_window and REF_NET.lw_bins % 4 == 0 else []),
        *(["pc_out"] if REF_NET.pitch_comb else [])}

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv1d(8, 16, 3), torch.nn.Tanh(), torch.nn.Conv1d(16, 4, 1),
                              torch.nn.Conv1d(4, 1, 1))
    masks = apply_2to4(net)
    assert set(masks) == {"0", "2"}  # the 4-channel conv is too narrow (< 8 input channels)
    assert masks_hold(net, masks)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1)

    def step():
        loss = net(torch.randn(2, 8, 20)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    assert not masks_hold(net, masks)  # a plain step revives pruned weights ...
    reapply_masks(net, masks)
    assert masks_hold(net, masks)  # ... re-applying the fixed masks restores the pattern
    for _ in range(3):
        step()
        reapply_masks(net, masks)
    assert masks_hold(net, masks)
    w = net[0].weight.detach().numpy()
    assert _groups_ok(w, axis=1) and np.count_nonzero(w) == w.size // 2


def test_dense_parent_must_be_a_dense_streaming_onnx_unchanged_since_the_start(pruned, tmp_path):
    """stamp_dense_parent records only a real dense parent, and only the file hashed when the fine-tune began."""
    import shutil

    from cosyedge.artifacts import sha256_file
    from cosyedge.errors import ArtifactError
    from cosyedge.models import REFERENCE_WEIGHTS
    from cosyedge.precision.sparsity import check_dense_parent, dense_parent_sha256, stamp_dense_parent

    out = pruned[0]
    sparse = tmp_path / "finetuned.sparse.stream.onnx"
    shutil.copy(out, sparse)
    dense = tmp_path / "dense.stream.onnx"
    shutil.copy(REF, dense)
    with pytest.raises(ArtifactError, match="cannot read ONNX file"):
        check_dense_parent(sparse, REFERENCE_WEIGHTS)  # safetensors, not an ONNX
    with pytest.raises(ArtifactError, match="not found"):
        check_dense_parent(sparse, tmp_path / "missing.onnx")
    with pytest.raises(UsageError, match="is the sparse model itself"):
        check_dense_parent(sparse, sparse)
    with pytest.raises(UsageError, match="is a 2:4-pruned model"):
        check_dense_parent(sparse, out)  # sparsify_onnx output carries cosyedge.sparsity
    start = check_dense_parent(sparse, dense)
    assert start == sha256_file(REF)
    m = onnx.load(str(dense))
    m.doc_string = "re-exported meanwhile"
    onnx.save(m, str(dense))
    before = sparse.read_bytes()
    with pytest.raises(ArtifactError, match=f"changed during the fine-tune \\(SHA-256 {start[:12]} at the start"):
        stamp_dense_parent(sparse, dense, expect_sha256=start)
    assert sparse.read_bytes() == before and dense_parent_sha256(sparse) is None  # nothing written
    assert stamp_dense_parent(sparse, dense) == sha256_file(dense) == dense_parent_sha256(sparse)
