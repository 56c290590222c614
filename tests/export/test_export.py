"""Stage 1 (export) and export -> streamify of the reference enhancer, checked against PyTorch.

The streaming ONNX is run chunk by chunk with raw ONNX Runtime (zeros from StateSpec, state_out fed
back as state_in) and must equal the full-sequence PyTorch output within 1e-5, for both exporters,
chunks of 1, 3 and 10 hops, on random input and on real speech.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
sf = pytest.importorskip("soundfile")

from tests.models_torch import PointwiseNet, UserCausalNet, run_streaming  # noqa: E402
from tests.reference_structure import reference_structure  # noqa: E402

from cosyedge.artifacts import StreamContract  # noqa: E402
from cosyedge.errors import ArtifactError, UsageError  # noqa: E402
from cosyedge.export import OnnxFromTorch, onnx_from_torch  # noqa: E402
from cosyedge.train.reference.export import export_reference  # noqa: E402
from cosyedge.models import REFERENCE_WEIGHTS  # noqa: E402
from cosyedge.train.reference.model import ReferenceEnhancer  # noqa: E402
from cosyedge.surgery import StatefulOnnxFromOnnx, streamify  # noqa: E402

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech_librivox_0890.wav"
ATOL = 1e-5
N_SAMPLES = 48000  # 3 s at 16 kHz: a multiple of every chunk tested (160, 480, 1600)
MAX_ERR: dict = {}  # (dynamo, signal, chunk) -> max abs error, printed with -s


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    return ReferenceEnhancer().eval()


@pytest.fixture(scope="module", params=[False, True], ids=["torchscript", "dynamo"])
def exported(request, reference, tmp_path_factory):
    """(dynamo, full ONNX path, streaming ONNX path, contract) for a random-init ReferenceEnhancer."""
    folder = tmp_path_factory.mktemp(f"ref_dynamo{request.param}")
    full = onnx_from_torch(reference, folder / "reference.onnx", dynamo=request.param)
    stream = folder / "reference.stream.onnx"
    contract = streamify(full, stream)
    return request.param, full, stream, contract


@pytest.fixture(scope="module")
def signals():
    gen = np.random.default_rng(0)
    speech, rate = sf.read(SPEECH, dtype="float32")
    assert rate == 16000 and speech.ndim == 1 and len(speech) >= N_SAMPLES
    return {"random": (0.1 * gen.standard_normal(N_SAMPLES)).astype(np.float32), "speech": speech[:N_SAMPLES]}


def _torch_out(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def test_full_onnx_io_and_metadata(exported):
    dynamo, full, _, _ = exported
    model = onnx.load(str(full))
    assert [i.name for i in model.graph.input] == ["audio"]
    assert [o.name for o in model.graph.output] == ["enhanced"]
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["N", 1, "T"]
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "N"
    c = StreamContract.from_onnx(full)
    assert (c.input, c.output, c.sample_rate_hz, c.hop_samples, c.total_stride, c.delay_samples, c.name) == (
        "audio", "enhanced", 16000, 160, 160, 160, "reference")
    assert c.states == []
    # one self-contained file: no .onnx.data next to it, no initializer stored externally
    assert sorted(p.name for p in full.parent.iterdir() if p.name.startswith("reference.onnx")) == ["reference.onnx"]
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in model.graph.initializer)
    ops = {n.op_type for n in model.graph.node}
    assert ("Pad" in ops) == (not dynamo)  # docs/design.md: dynamo folds F.pad into Conv pads


def test_full_onnx_matches_torch_incl_digital_silence(exported, reference, signals):
    """Batch of 2: speech, and silence followed by speech (torch's dynamo optimizer used to drop the
    ``+ 1e-8`` before the log, giving NaN on silence)."""
    import onnxruntime as ort

    _, full, _, _ = exported
    x = signals["speech"][None, None, :16000]
    x = np.concatenate([x, np.concatenate([np.zeros_like(x[..., :8000]), x[..., :8000]], axis=-1)])
    y = ort.InferenceSession(str(full), providers=["CPUExecutionProvider"]).run(None, {"audio": x})[0]
    ref = _torch_out(reference, x)
    assert y.shape == (2, 1, 16000) and np.isfinite(y).all()
    assert np.abs(y - ref).max() <= ATOL


def test_dynamo_keeps_a_tiny_log_epsilon(tmp_path):
    """torch's dynamo optimizer deletes ``x + c`` for |c| <= 1e-8 (onnxscript add_0 rule): an enhancer with
    ``log(power + 1e-8)`` must still give finite output on digital silence after our export."""
    import onnxruntime as ort

    from cosyedge.train.reference.model import EnhancerConfig

    torch.manual_seed(0)
    model = ReferenceEnhancer(EnhancerConfig(log_eps=1e-8)).eval()
    path = onnx_from_torch(model, tmp_path / "eps.onnx", dynamo=True)
    x = np.zeros((1, 1, 1600), np.float32)
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"audio": x})[0]
    assert np.isfinite(y).all()
    assert np.abs(y - _torch_out(model, x)).max() <= ATOL


def test_verify_catches_a_wrong_export(tmp_path):
    from cosyedge.errors import AccuracyError
    from cosyedge.export.torch_to_onnx import _verify

    torch.manual_seed(3)
    path = onnx_from_torch(PointwiseNet(), tmp_path / "p.onnx")
    other = PointwiseNet()
    with torch.no_grad():
        other.conv.weight.add_(1.0)
    with pytest.raises(AccuracyError, match="differs from PyTorch"):
        _verify(other, onnx.load(str(path)), 160, where="p.onnx")


def test_stream_contract(exported, reference):
    _, _, stream, contract = exported
    assert contract == StreamContract.from_onnx(stream)  # metadata round-trip
    assert contract.total_stride == 160 and contract.hop_samples == 160
    cfg = reference.config
    expected = [(1, cfg.win_samples - cfg.hop_samples)]  # analysis: k - s
    expected += [(cfg.channels, (cfg.kernel_size - 1) * d) for d in cfg.dilations]  # (k-1)*d
    expected += [(2 * cfg.n_bins, 1)]  # synthesis: kernel 2 frames
    assert [(s.shape[1], s.shape[2]) for s in contract.states] == expected
    assert all(s.shape[0] == "N" and s.dtype == "float32" and s.init == 0.0 for s in contract.states)
    names = [s.input for s in contract.states] + [s.output for s in contract.states] + ["audio", "enhanced"]
    assert not [(a, b) for a in names for b in names if a != b and b.startswith(a)]
    # the ONNX declares the same static state shapes (batch symbolic)
    model = onnx.load(str(stream))
    decl = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*model.graph.input, *model.graph.output]}
    for s in contract.states:
        assert decl[s.input] == decl[s.output] == s.shape


@pytest.mark.parametrize("chunk", [160, 480, 1600])
@pytest.mark.parametrize("signal", ["random", "speech"])
def test_streaming_equals_full_torch(exported, reference, signals, signal, chunk):
    dynamo, _, stream, contract = exported
    contract.check_chunk(chunk)
    x = signals[signal][None, None, :]
    y = run_streaming(stream, contract, x, chunk)
    ref = _torch_out(reference, x)
    assert y.shape == ref.shape == x.shape
    err = float(np.abs(y - ref).max())
    MAX_ERR[(dynamo, signal, chunk)] = err
    print(f"dynamo={dynamo} {signal} chunk={chunk}: max abs err {err:.2e}")
    assert err <= ATOL
    assert np.abs(ref).max() > 1e-3  # not trivially zero


def test_chunk_not_multiple_of_stride_is_rejected(exported):
    _, _, _, contract = exported
    for bad in (100, 161, 0):
        with pytest.raises(UsageError, match=r"multiple of the model's total stride 160 samples"):
            contract.check_chunk(bad)


def test_weight_norm_removed_and_caller_model_untouched(tmp_path):
    torch.manual_seed(1)
    model = UserCausalNet().eval()
    path = onnx_from_torch(model, tmp_path / "user.onnx", sample_rate_hz=8000, hop_samples=2)
    names = [t.name for t in onnx.load(str(path)).graph.initializer]
    assert not [n for n in names if "parametrizations" in n or "original" in n or "weight_g" in n]
    assert torch.nn.utils.parametrize.is_parametrized(model.convs[1])  # deep copy was exported
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((1, 1, 64)).astype(np.float32)
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"audio": x})[0]
    assert np.abs(y - _torch_out(model, x)).max() <= ATOL
    c = StreamContract.from_onnx(path)
    assert (c.sample_rate_hz, c.hop_samples, c.name) == (8000, 2, "model")


def test_stages_compose(tmp_path):
    torch.manual_seed(2)
    model = UserCausalNet().eval()
    stage = StatefulOnnxFromOnnx(OnnxFromTorch(model, tmp_path / "u.onnx", sample_rate_hz=8000, hop_samples=4,
                                               name="user"), tmp_path / "u.stream.onnx")
    assert not (tmp_path / "u.onnx").exists()  # lazy: nothing runs before the call
    assert stage() == tmp_path / "u.stream.onnx"
    assert stage.contract.name == "user" and stage.contract.total_stride == 2 and len(stage.contract.states) == 6
    x = np.random.default_rng(2).standard_normal((2, 1, 96)).astype(np.float32)
    y = run_streaming(tmp_path / "u.stream.onnx", stage.contract, x, 4)
    assert np.abs(y - _torch_out(model, x)).max() <= ATOL


def test_export_without_metadata_and_bad_args(tmp_path):
    path = onnx_from_torch(PointwiseNet(), tmp_path / "p.onnx")
    assert not [p for p in onnx.load(str(path)).metadata_props if p.key.startswith("cosyedge.")]
    with pytest.raises(ArtifactError, match="no cosyedge metadata"):
        StreamContract.from_onnx(path)
    with pytest.raises(UsageError, match="hop_samples"):
        onnx_from_torch(PointwiseNet(), tmp_path / "q.onnx", sample_rate_hz=16000)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match="not a folder"):
        onnx_from_torch(PointwiseNet(), tmp_path / "file" / "r.onnx")
    with pytest.raises(ArtifactError, match="is a folder"):
        onnx_from_torch(PointwiseNet(), tmp_path)


def test_export_reference_missing_weights(tmp_path):
    with pytest.raises(ArtifactError, match="weights file not found"):
        export_reference(weights=tmp_path / "none.safetensors", out=tmp_path / "r.stream.onnx")
    assert not (tmp_path / "r.stream.onnx").exists()


@pytest.fixture(scope="module")
def bundled_export(tmp_path_factory) -> Path:
    """The bundled weights exported once (full ONNX, streamify, proof) for the tests that read the result;
    ``reference.onnx`` (the full graph) lies beside the returned stream ONNX."""
    if not REFERENCE_WEIGHTS.is_file():
        pytest.skip(f"{REFERENCE_WEIGHTS.name} not trained yet")
    folder = tmp_path_factory.mktemp("bundled_export")
    return export_reference(out=folder / "reference.stream.onnx", full_onnx=folder / "reference.onnx")


def test_export_reference_bundled_weights(bundled_export, signals):
    from cosyedge.train.reference.model import load_reference

    out = bundled_export
    contract = StreamContract.from_onnx(out)
    assert (out.parent / "reference.onnx").is_file() and contract.name == "reference"
    want = reference_structure()  # from the config in the weights' safetensors header, not from the export
    assert [(s.input, s.output, s.shape, s.node) for s in contract.states] == list(
        zip(want.state_inputs, want.state_outputs, want.state_shapes, want.state_nodes))
    x = signals["speech"][None, None, :16000]
    y = run_streaming(out, contract, x, 160)
    assert np.abs(y - _torch_out(load_reference(), x)).max() <= ATOL


def test_modules_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import cosyedge.export, cosyedge.surgery, cosyedge.cli.export\n"
            "from cosyedge.errors import DependencyError\n"
            "try:\n    cosyedge.export.onnx_from_torch(None, 'x.onnx')\n"
            "except DependencyError as e:\n    print('DEP', e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "DEP" in res.stdout and "pip install torch" in res.stdout


def test_cli_export_missing_weights(tmp_path):
    res = subprocess.run([sys.executable, "-m", "cosyedge.cli.main", "export", "-q", "--weights",
                          str(tmp_path / "none.safetensors"), "-o", str(tmp_path / "r.onnx")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3
    assert res.stderr.strip().startswith("[!] weights file not found") and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_foreign_weights_are_named_in_one_line(tmp_path):
    from safetensors.torch import save_file

    from cosyedge.train.reference.model import load_reference

    save_file({"encoder.weight": torch.zeros(3, 3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ArtifactError, match=r"do not fit the reference model: \d+ missing .* 1 unexpected"):
        load_reference(tmp_path / "other.safetensors")


def test_rule_based_streamify_is_bit_identical_to_the_bundled_stream_onnx(bundled_export):
    """The reference re-exported through the rule-based streamify streams the demo recording to
    exactly the bundled stream ONNX's output (chunks 160 and 480), with the same state contract."""
    from cosyedge.audio import load_audio
    from cosyedge.models import REFERENCE_STREAM_ONNX

    out = bundled_export
    new, old = StreamContract.from_onnx(out), StreamContract.from_onnx(REFERENCE_STREAM_ONNX)
    assert [(s.input, s.output, s.shape) for s in new.states] == [(s.input, s.output, s.shape) for s in old.states]
    assert (new.total_stride, new.delay_samples, new.hop_samples) == (old.total_stride, old.delay_samples,
                                                                      old.hop_samples)
    assert new.proof["max_abs"] <= 1e-5 and new.proof["chunks_ticks"] == [160, 480]
    x, _ = load_audio(Path(__file__).resolve().parents[2] / "cosyedge/assets/demo/noisy.wav")
    x = x.reshape(-1)[None, None, : x.size // 480 * 480].astype(np.float32)
    for chunk in (160, 480):
        a = run_streaming(out, new, x, chunk)
        b = run_streaming(REFERENCE_STREAM_ONNX, old, x, chunk)
        assert np.array_equal(a, b), chunk
