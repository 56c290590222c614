"""Real TensorRT on a real GPU (skipped without tensorrt, pycuda and an NVIDIA GPU): the reference model's
FP32 engine streams like ONNX Runtime FP32, CUDA-graph replay matches plain enqueues, state stays carried."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge._lazy import has_module
from tests.helpers.metrics import snr_db


def _gpu_reason() -> str | None:
    if not has_module("tensorrt"):
        return "tensorrt is not installed (pip install 'cosyedge[trt]' on a GPU machine)"
    if not has_module("pycuda"):
        return "pycuda is not installed"
    try:
        import pycuda.driver as cuda

        cuda.init()
        if cuda.Device.count() < 1:
            return "no NVIDIA GPU"
    except Exception as err:  # noqa: BLE001 - any driver failure means: no usable GPU here
        return f"no usable CUDA driver/GPU ({type(err).__name__})"
    return None


REASON = _gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=str(REASON))]


@pytest.fixture(scope="module")
def reference_engine(tmp_path_factory):
    from cosyedge.builders.cache import load_or_rebuild
    from cosyedge.builders.trt import build_trt
    from cosyedge.models import REFERENCE_STREAM_ONNX

    folder = build_trt(REFERENCE_STREAM_ONNX, out_dir=tmp_path_factory.mktemp("engines"), max_batch=4)
    return load_or_rebuild(folder)


@pytest.fixture(scope="module")
def speech():
    from pathlib import Path

    import soundfile as sf

    x, sr = sf.read(str(Path(__file__).resolve().parents[1] / "data" / "speech_librivox_0890.wav"), dtype="float32")
    assert sr == 16000
    return x[: 3 * sr]


def test_fp32_engine_streams_like_onnxruntime(reference_engine, speech):
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import stream_array

    with OrtStreamSession(reference_engine.model_path) as s:
        ref = stream_array(s, speech)
    with reference_engine() as s:
        y = stream_array(s, speech)
        assert np.median(s.gpu_latencies_ms) > 0
    assert np.isfinite(y).all()
    assert snr_db(ref, y) > 40.0  # FP32 (TF32 allowed by TensorRT's defaults)


def test_cuda_graph_matches_plain(reference_engine, speech):
    from cosyedge.runtime.stream import stream_array

    with reference_engine() as s:
        a = stream_array(s, speech[:16000])
    with reference_engine(cuda_graph=True) as s:
        b = stream_array(s, speech[:16000])
    assert np.abs(a - b).max() < 1e-5


def test_state_carried_and_reset_on_gpu(reference_engine, speech):
    with reference_engine() as s:
        c = s.chunk_samples
        chunk = speech[c * 50: c * 51].reshape(1, 1, c)
        first = s.push(chunk)[s.contract.output].copy()
        second = s.push(chunk)[s.contract.output].copy()
        assert np.abs(first - second).max() > 0
        s.reset()
        assert all(not v.any() for v in s.state().values())
        np.testing.assert_allclose(s.push(chunk)[s.contract.output], first, atol=1e-6)
        a, b = zip(*s.state_addresses)
        assert len(set(a) | set(b)) == 2 * len(a)


def test_batch_of_streams_on_gpu(reference_engine, speech):
    from cosyedge.runtime.stream import stream_array

    x = np.stack([speech[:8000], speech[8000:16000], speech[16000:24000]])
    with reference_engine(batch=3) as s:
        y = stream_array(s, x)
    with reference_engine() as s:
        y1 = stream_array(s, x[1])
    assert np.abs(y[1] - y1).max() < 1e-4
