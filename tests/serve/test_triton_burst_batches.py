"""A burst of concurrent sequences through a real Triton (``tritonserver`` 2.51 from the nvidia-pytriton wheel) serving
a ``--triton-backend python`` repository of the bundled model: 20 sequences, each on its own gRPC stream, send all
their chunks at once, so the sequence batcher runs batches of many requests while more wait. Every request succeeds,
each sequence's outputs equal its solo run through the local engine, and the server's log holds no traceback: numpy
2's DLPack capsule destructor used to print "PyCapsule_GetPointer called with incorrect name" for every output tensor
inside the stub (``cosyedge.serve.model._dlpack_handover``).

Skipped only where the wheel cannot install (not x86-64 Linux, or glibc < 2.35).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import soundfile as sf

from cosyedge.serve.server import wheel_supported

_why = wheel_supported()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

SEQUENCES = 20
CHUNKS = 40  # 0.4 s of 16 kHz audio per sequence
HOP = 160


def speech_chunks() -> list[np.ndarray]:
    """SEQUENCES real-speech clips of CHUNKS chunks (float32, (1, 1, 160) each), from different parts of the demo."""
    from cosyedge.models import REFERENCE_STREAM_ONNX

    x, sr = sf.read(REFERENCE_STREAM_ONNX.parents[1] / "assets" / "demo" / "noisy.wav", dtype="float32")
    assert sr == 16000 and x.size >= SEQUENCES * 4000 + CHUNKS * HOP
    return [[x[k * 4000 + j * HOP:k * 4000 + (j + 1) * HOP].reshape(1, 1, HOP) for j in range(CHUNKS)]
            for k in range(SEQUENCES)]


@pytest.fixture(scope="module")
def burst_server(tmp_path_factory):
    """A server of a Python-backend repository with a slot for every sequence, and the lines of its log."""
    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX
    from cosyedge.serve.server import TritonServer

    tmp = tmp_path_factory.mktemp("burst")
    repo = build_triton(REFERENCE_STREAM_ONNX, tmp, triton_backend="python", max_sequences=32, max_batch_size=32,
                        idle_us=30_000_000)
    lines: list[str] = []
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, on_log=lines.append) as srv:
        yield srv, repo, lines


def solo(model_onnx, chunks: list[np.ndarray]) -> np.ndarray:
    """The sequence's outputs from the local engine, alone, chunk by chunk: (CHUNKS, 160) float32."""
    from cosyedge.runtime.ort import OrtStreamSession

    with OrtStreamSession(model_onnx) as s:
        return np.stack([s.push(c)["enhanced"].reshape(-1) for c in chunks])


def test_a_burst_of_20_sequences_runs_in_big_batches_with_no_failure_and_each_equals_its_solo_run(burst_server):
    import tritonclient.grpc as g

    srv, repo, lines = burst_server
    xs = speech_chunks()
    got: dict[tuple[int, int], np.ndarray] = {}
    errors: list[str] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(result, error) -> None:
        with lock:
            if error is not None:
                errors.append(str(error).splitlines()[0])
            else:
                k, j = map(int, result.get_response().id.split(":"))
                got[k, j] = result.as_numpy("enhanced").reshape(-1).copy()
            if errors or len(got) == SEQUENCES * CHUNKS:
                done.set()

    before = srv.metrics()
    clients = [g.InferenceServerClient(srv.grpc_url) for _ in range(SEQUENCES)]
    try:
        for c in clients:
            c.start_stream(callback=callback)
        for j in range(CHUNKS):  # one burst: every chunk of every sequence, no pacing
            for k, c in enumerate(clients):
                inp = g.InferInput("audio", [1, 1, HOP], "FP32")
                inp.set_data_from_numpy(xs[k][j])
                c.async_stream_infer("reference", [inp], request_id=f"{k}:{j}", sequence_id=1000 + k,
                                     sequence_start=j == 0, sequence_end=j == CHUNKS - 1)
        assert done.wait(120), f"{len(got)} of {SEQUENCES * CHUNKS} responses after 120 s"
    finally:
        for c in clients:
            c.stop_stream()
            c.close()
    assert not errors, errors[:3]
    time.sleep(0.5)  # the metrics endpoint refreshes its counters
    after = srv.metrics()
    ok = after["nv_inference_request_success"] - before.get("nv_inference_request_success", 0)
    failed = after.get("nv_inference_request_failure", 0) - before.get("nv_inference_request_failure", 0)
    runs = after["nv_inference_exec_count"] - before.get("nv_inference_exec_count", 0)
    assert ok == SEQUENCES * CHUNKS and failed == 0
    assert ok / runs >= 4, f"mean batch {ok / runs:.1f}: the burst did not batch"
    model_onnx = next(repo.glob("*/1/model.onnx"))
    for k in range(SEQUENCES):
        y = np.stack([got[k, j] for j in range(CHUNKS)])
        ref = solo(model_onnx, xs[k])
        assert np.abs(y - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max())), f"sequence {k}"
    bad = [ln for ln in lines if "PyCapsule" in ln or "Traceback" in ln or "Signal (" in ln]
    assert not bad, bad[:5]
    print(f"\n{SEQUENCES} sequences x {CHUNKS} chunks in one burst: {int(ok)} requests, {int(runs)} executions "
          f"(mean batch {ok / runs:.1f}), 0 failures, outputs equal the solo runs, no traceback in the server log")
