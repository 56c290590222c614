"""A real Triton Inference Server (``tritonserver`` 2.51 from the nvidia-pytriton wheel) on loopback with free ports,
serving ``--triton-backend python`` repositories of the bundled model and Silero VAD: concurrent real-speech
sequences equal their solo runs (more than ``--max-sequences`` wait in Triton's backlog), VAD segments equal the
local run's, a killed client's slot is freed after the idle timeout for the next sequence (which starts from zero), bad
requests fail alone, clients fail in one line (server down, model missing or mismatched, server killed mid-stream), and
``cosyedge serve`` prints its endpoints, stops cleanly on SIGINT/SIGTERM and refuses a port in use or a repository
Triton cannot load in one line.

Skipped only where the wheel cannot install (not x86-64 Linux, or glibc < 2.35).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.serve.server import wheel_supported

_why = wheel_supported()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
LIBRIVOX = ROOT / "tests" / "data" / "speech_librivox_0890.wav"
IDLE_MS = 4000  # longer than the backlog waits of the concurrent test (Triton ends a sequence that waits longer)
MAX_SEQUENCES = 2


def snr_db(ref: np.ndarray, x: np.ndarray) -> float:
    d = np.asarray(x, np.float64) - np.asarray(ref, np.float64)
    if not d.any():
        return float("inf")
    return float(10 * np.log10((np.asarray(ref, np.float64) ** 2).sum() / (d ** 2).sum()))


def clips() -> list[np.ndarray]:
    """Four real-speech clips of 2.5-3 s (16 kHz, float32): the demo recording's parts and a LibriVox reading."""
    demo, sr = sf.read(DEMO, dtype="float32")
    lib, sr2 = sf.read(LIBRIVOX, dtype="float32")
    assert sr == sr2 == 16000
    return [demo[8000:56000], demo[120000:164000], lib[:40000], demo[200000:246000]]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """Python-backend repositories of the bundled model (2 sequences per instance, 4 s idle timeout) and Silero VAD,
    the local ONNX Runtime engine of the bundled model, and one folder holding both models (what the server serves)."""
    from cosyedge.builders import build
    from cosyedge.builders.triton import build_triton
    from cosyedge.cli.main import main
    from cosyedge.models import REFERENCE_STREAM_ONNX

    tmp = tmp_path_factory.mktemp("triton")
    ref = build_triton(REFERENCE_STREAM_ONNX, tmp / "engines", triton_backend="python", max_sequences=MAX_SEQUENCES,
                       max_batch_size=8, idle_us=IDLE_MS * 1000)
    pytest.importorskip("silero_vad")  # installed by tests/requirements-thirdparty.txt
    assert main(["export", "silero-vad", "-q", "-o", str(tmp / "vad.stream.onnx")]) == 0
    vad = build_triton(tmp / "vad.stream.onnx", tmp / "engines", triton_backend="python", max_sequences=4)
    both = tmp / "both"
    both.mkdir()
    for r in (ref, vad):
        for model in [p for p in r.iterdir() if (p / "config.pbtxt").is_file()]:
            (both / model.name).symlink_to(model, target_is_directory=True)
    ort_engine = build(REFERENCE_STREAM_ONNX, out_dir=tmp / "engines")
    return {"ref": ref, "vad": vad, "both": both, "vad_onnx": tmp / "vad.stream.onnx", "ort": ort_engine, "tmp": tmp}


@pytest.fixture(scope="module")
def server(repos):
    from cosyedge.serve.server import TritonServer

    with TritonServer(repos["both"], http_port=0, grpc_port=0, metrics_port=0) as srv:
        yield srv


def local_enhanced(repos, x: np.ndarray) -> np.ndarray:
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array

    with OrtStreamSession(repos["ort"] / "model.onnx") as s:
        return enhance_array(s, x)


def served_enhanced(url: str, x: np.ndarray, pace_s: float = 0.0, first: list | None = None) -> np.ndarray:
    """Stream ``x`` as one sequence (delay compensated as enhance_array does); ``first`` gets the first round trip."""
    from cosyedge.runtime.stream import enhance_array
    from cosyedge.serve.client import connect

    m = connect(url, "reference")
    with m() as s:
        if pace_s or first is not None:
            push = s.push

            def paced(chunk, copy=True):
                t0 = time.perf_counter()
                y = push(chunk, copy=copy)
                if first is not None and not first:
                    first.append(time.perf_counter() - t0)
                time.sleep(pace_s)
                return y

            s.push = paced
        return enhance_array(s, x)


def run_threads(fns) -> list:
    out, errs = [None] * len(fns), []

    def go(i, f):
        try:
            out[i] = f()
        except BaseException as err:  # noqa: BLE001 - reported below
            errs.append(err)

    ts = [threading.Thread(target=go, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    return out


# ------------------------------------------------------------------------------ streams through the real server
def test_concurrent_speech_sequences_equal_their_solo_runs_and_extra_ones_wait_in_the_backlog(repos, server):
    xs = clips()
    before = server.metrics()
    ys = run_threads([lambda x=x: served_enhanced(server.grpc_url, x) for x in xs])
    after = server.metrics()
    requests = sum(-(-(x.size + 160) // 160) + 1 for x in xs)  # the delay flush, and END on one zero chunk
    done = after["nv_inference_request_success"] - before.get("nv_inference_request_success", 0)
    runs = after["nv_inference_exec_count"] - before.get("nv_inference_exec_count", 0)
    failed = after.get("nv_inference_request_failure", 0) - before.get("nv_inference_request_failure", 0)
    assert done == requests and failed == 0
    snrs = [snr_db(local_enhanced(repos, x), y) for x, y in zip(xs, ys)]
    print(f"\n{len(xs)} sequences (max {MAX_SEQUENCES} at once), {int(done)} requests in {int(runs)} executions "
          f"(mean batch {done / runs:.2f}); SNR vs the local run {[round(s, 1) for s in snrs]} dB")
    assert min(snrs) >= 100.0
    assert after["cosyedge_sequences_ended"] - before.get("cosyedge_sequences_ended", 0) == len(xs)


def test_vad_sequences_give_the_local_segments(repos, server, tmp_path, cli):
    from cosyedge.serve.client import connect
    from cosyedge.vad.stream import detect_file

    files = []
    for i, x in enumerate(clips()[:3]):
        files.append(tmp_path / f"clip{i}.wav")
        sf.write(files[-1], x, 16000, subtype="FLOAT")
    served = connect(server.grpc_url, "silero-vad")
    reps = run_threads([lambda f=f: detect_file(f, served) for f in files])
    for f, rep in zip(files, reps):
        local = detect_file(f, repos["vad_onnx"])
        assert rep["segments"] == local["segments"] and rep["segments"]
        assert np.abs(np.array(rep["probs"]) - local["probs"]).max() < 1e-4
    rc, out, err = cli("run", DEMO, "--vad", "-o", tmp_path / "srv.json", "--server", server.grpc_url,
                       "--server-model", "silero-vad", "-q")
    assert rc == 0, err
    rc, _, err = cli("run", DEMO, "--vad", "-o", tmp_path / "loc.json", "--engine", repos["vad_onnx"], "-q")
    assert rc == 0, err
    srv, loc = (json.loads((tmp_path / n).read_text()) for n in ("srv.json", "loc.json"))
    assert srv["segments"] == loc["segments"] and len(srv["segments"]) >= 2


def test_cli_run_through_the_server_writes_the_local_runs_file(repos, server, tmp_path, cli):
    rc, out, err = cli("run", DEMO, "-o", tmp_path / "srv.wav", "--server", server.grpc_url, "--server-model",
                       "reference", "-q")
    assert rc == 0, err
    assert "through model 'reference' at" in out and "round trip p50" in out
    rc, _, err = cli("run", DEMO, "-o", tmp_path / "loc.wav", "--engine", repos["ort"], "-q")
    assert rc == 0, err
    a, _ = sf.read(tmp_path / "srv.wav", dtype="int16")
    b, _ = sf.read(tmp_path / "loc.wav", dtype="int16")
    assert a.shape == b.shape and np.abs(a.astype(int) - b).max() <= 1  # float outputs >= 100 dB apart (above)


# ------------------------------------------------------------------------------ faults
CLIENT = """
import sys, time, numpy as np
from cosyedge.serve.client import connect
s = connect(sys.argv[1], "reference")()
s.activate()
x = np.load(sys.argv[2]).astype(np.float32)
for k in range(40):
    s.push(x[k * 160:(k + 1) * 160].reshape(1, 1, 160))
print("pushed", flush=True)
time.sleep(120)
"""


def test_killed_client_frees_its_slot_after_the_idle_timeout_for_a_sequence_that_starts_from_zero(repos, server,
                                                                                                  tmp_path):
    xs = clips()
    np.save(tmp_path / "a.npy", xs[3])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    a = subprocess.Popen([sys.executable, "-c", CLIENT, server.grpc_url, str(tmp_path / "a.npy")], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout.readline().strip() == "pushed"
        before = server.metrics()
        first_c: list = []
        t_b = threading.Thread  # B holds the second slot, paced, for longer than A's idle timeout
        res = {}
        b = t_b(target=lambda: res.__setitem__("b", served_enhanced(server.grpc_url, xs[0][:32000], pace_s=0.03)))
        b.start()
        time.sleep(0.3)
        a.kill()  # A holds a slot and will never send END
        res["c"] = served_enhanced(server.grpc_url, xs[1][:16000], first=first_c)  # waits for A's slot
        b.join(60)
    finally:
        a.kill()
        a.wait()
    after = server.metrics()
    assert first_c[0] > 0.5, f"sequence C got a slot after {first_c[0]:.3f} s: it did not wait for A's idle timeout"
    assert after["cosyedge_sequences_idle_freed"] - before.get("cosyedge_sequences_idle_freed", 0) == 1
    assert snr_db(local_enhanced(repos, xs[0][:32000]), res["b"]) >= 100.0
    assert snr_db(local_enhanced(repos, xs[1][:16000]), res["c"]) >= 100.0
    print(f"\nkilled client's slot went to the next sequence after {first_c[0]:.2f} s (idle timeout {IDLE_MS} ms)")


def test_bad_requests_fail_alone_and_the_server_keeps_serving(repos, server):
    import queue

    import tritonclient.grpc as grpcclient

    x = clips()[2][:24000]
    res = {}
    t = threading.Thread(target=lambda: res.__setitem__("y", served_enhanced(server.grpc_url, x, pace_s=0.002)))
    t.start()
    c = grpcclient.InferenceServerClient(server.grpc_url)
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    errors = []
    for shape, dtype, kw in (([1, 1, 80], np.float32, {"sequence_start": True}), ([1, 1, 160], np.float64,
                                                                                 {"sequence_start": True}),
                             ([1, 1, 160], np.float32, {})):
        inp = grpcclient.InferInput("audio", shape, "FP32" if dtype == np.float32 else "FP64")
        inp.set_data_from_numpy(np.zeros(shape, dtype))
        c.async_stream_infer("reference", [inp], sequence_id=424242 + len(errors), **kw)
        result, error = q.get(timeout=30)
        errors.append(str(error))
    c.stop_stream()
    c.close()
    t.join(60)
    assert "unexpected shape" in errors[0] and "data-type is 'FP64'" in errors[1] and "START" in errors[2]
    assert snr_db(local_enhanced(repos, x), res["y"]) >= 100.0
    assert snr_db(local_enhanced(repos, x[:8000]), served_enhanced(server.grpc_url, x[:8000])) >= 100.0


def test_client_failures_are_one_line_with_no_output_left(repos, server, tmp_path, cli):
    out = tmp_path / "out.wav"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    cases = [
        (["run", DEMO, "-o", out, "--server", dead], 6, r"no Triton server answers at 127\.0\.0\.1:\d+"),
        (["run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "nope"], 6, r"has no model 'nope'"),
        (["run", DEMO, "-o", out, "--server", server.grpc_url], 2, r"several cosyedge models"),
        (["run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "reference", "--chunk-ms", "20"], 2,
         r"takes chunks of 160 samples \(10 ms at 16000 Hz\) per request, not 320"),
        (["run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "silero-vad"], 2,
         r"voice activity detector"),
        (["run", DEMO, "--vad", "--server", server.grpc_url, "--server-model", "reference"], 2, r"--vad needs a voice"),
        (["run", DEMO, "-o", out, "--server", "localhost"], 2, r"HOST:PORT"),
        (["run", DEMO, "-o", out, "--server", server.grpc_url, "--engine", repos["ort"]], 2, r"give one of them"),
    ]
    for args, code, pattern in cases:
        rc, stdout, err = cli(*args)
        lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
        assert rc == code and len(lines) == 1 and re.search(pattern, lines[0]), (args, rc, err)
        assert not out.exists() and not list(tmp_path.glob("*.wav"))


def test_server_killed_mid_stream_each_client_one_line_and_no_output(repos, tmp_path):
    from cosyedge.serve.server import TritonServer

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with TritonServer(repos["ref"], http_port=0, grpc_port=0, metrics_port=0) as srv:
        outs = [tmp_path / f"out{i}.wav" for i in range(2)]
        clients = [subprocess.Popen([sys.executable, "-m", "cosyedge.cli.main", "run", str(DEMO), "-o", str(o),
                                     "--server", srv.grpc_url, "-q"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for o in outs]
        t_end = time.monotonic() + 60
        while srv.metrics().get("nv_inference_request_success", 0) < 400 and time.monotonic() < t_end:
            time.sleep(0.05)
        srv.kill()  # the server and its stubs, SIGKILL
        results = [c.communicate(timeout=90) for c in clients]
    for c, (stdout, err), o in zip(clients, results, outs):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert c.returncode == 6 and len(lines) == 1 and lines[0].startswith("[!] "), err
        assert "stopped mid-stream" in lines[0] or "no Triton server answers" in lines[0], lines[0]
        assert not o.exists() and not list(tmp_path.glob("*.wav*"))


def test_cosyedge_serve_prints_endpoints_and_stops_cleanly_on_sigint_and_sigterm(repos):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for sig in (signal.SIGINT, signal.SIGTERM):
        p = subprocess.Popen([sys.executable, "-m", "cosyedge.cli.main", "serve", str(repos["ref"]), "--grpc-port",
                              "0", "--http-port", "0", "--metrics-port", "0", "-q"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.search(r"gRPC (127\.0\.0\.1:\d+), HTTP http://127\.0\.0\.1:\d+, metrics http://127\.0\.0\.1:\d+/metrics",
                      line)
        assert m and "serving reference" in line, line
        from cosyedge.serve.client import connect

        assert connect(m.group(1)).name == "reference"
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "stopped cleanly" in out, (sig, err)


def test_cosyedge_serve_refuses_a_port_in_use_and_a_repository_triton_cannot_load(repos, tmp_path, cli):
    import shutil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, _, err = cli("serve", repos["ref"], "--grpc-port", port, "--http-port", 0, "--metrics-port", 0)
    assert rc == 3 and err.strip().count("\n") == 0 and f"grpc port {port} on 127.0.0.1 is in use" in err, err
    bad = tmp_path / "bad"
    shutil.copytree(repos["ref"], bad)
    (bad / "manifest.json").unlink()  # serve would refuse the changed model.onnx by its hash, before Triton
    (bad / "reference" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    rc, _, err = cli("serve", bad, "--grpc-port", 0, "--http-port", 0, "--metrics-port", 0)
    warning, error = err.strip().split("\n")  # the missing manifest is said first: nothing was checked
    assert rc == 3 and "has no manifest.json" in warning and error.startswith("[!]"), err
    assert "Triton cannot load the repository" in err and "model 'reference'" in err and "model.onnx" in err, err
    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX

    gpu = build_triton(REFERENCE_STREAM_ONNX, tmp_path / "gpu", max_sequences=4)  # the onnxruntime backend
    rc, _, err = cli("serve", gpu, "--grpc-port", 0, "--http-port", 0, "--metrics-port", 0, "-q")
    err = err[err.index("[!]"):]  # after the build's log lines
    assert rc == 3 and err.strip().count("\n") == 0, err
    assert "unable to find backend library for backend 'onnxruntime'" in err and "--triton-backend python" in err


def test_cli_run_mic_through_the_server_replays_offline_to_the_live_output(repos, server, tmp_path, cli, monkeypatch):
    """`run mic --server` (a fake 48 kHz device): what the model heard (--save-input), run offline in process,
    gives the live output; `run mic --vad --server` gives segments."""
    from cosyedge.realtime import devices as devmod
    from tests.realtime.fakes import fake_sounddevice
    from tests.realtime.test_live import DEVICES

    x = clips()[0]
    import soxr

    sd = fake_sounddevice(DEVICES, signal=soxr.resample(np.tile(x, 2), 16000, 48000).astype(np.float32))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    rc, out, err = cli("run", "mic", "--device", "headset", "-o", tmp_path / "live.wav", "--save-input",
                       tmp_path / "heard.wav", "--duration", "1.0", "--server", server.grpc_url, "--server-model",
                       "reference")
    assert rc == 0, err
    assert "mic 2 'USB Headset Mic' at 48000 Hz -> " in out
    rc, _, err = cli("run", tmp_path / "heard.wav", "-o", tmp_path / "replay.wav", "--engine", repos["ort"], "-q")
    assert rc == 0, err
    live, _ = sf.read(tmp_path / "live.wav", dtype="float32")
    replay, _ = sf.read(tmp_path / "replay.wav", dtype="float32")
    assert live.size >= 0.9 * 16000 and np.abs(replay[: live.size - 160] - live[160:]).max() <= 1.0 / 32768
    rc, out, err = cli("run", "mic", "--vad", "--device", "headset", "--duration", "2.0", "--server", server.grpc_url,
                       "--server-model", "silero-vad")
    assert rc == 0, err
    assert "speech segment(s)" in out.strip().splitlines()[-1]
