"""The gRPC client (``cosyedge run ... --server``) against a real Triton server on loopback: the served chunk is the
default (a repository built with ``--chunk-samples 320`` streams without ``--chunk-ms``) and the advice names it;
``--vad`` on a served enhancer and ``--threads`` beside ``--server`` are one usage line that fits --server; the
server's errors name the client's sequence id; ``run mic --server`` keeps its recording when the server dies and says
so; a client killed with SIGKILL leaves a part file that the next run of the same output removes; ``serve``'s
ready timeout is one clean line.

Skipped only where the wheel cannot install (not x86-64 Linux, or glibc < 2.35).
"""

from __future__ import annotations

import re
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


def one_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("[!]")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """Python-backend repositories of the bundled model: 'reference' (10 ms chunks) and 'reference20' (built with
    --chunk-samples 320), served from one folder."""
    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX

    tmp = tmp_path_factory.mktemp("triton_client")
    ref = build_triton(REFERENCE_STREAM_ONNX, tmp / "engines", triton_backend="python", max_sequences=4)
    ref20 = build_triton(REFERENCE_STREAM_ONNX, tmp / "engines20", "reference20", triton_backend="python",
                         max_sequences=4, chunk_samples=320)
    both = tmp / "both"
    both.mkdir()
    for r in (ref, ref20):
        for model in [p for p in r.iterdir() if (p / "config.pbtxt").is_file()]:
            (both / model.name).symlink_to(model, target_is_directory=True)
    return {"ref": ref, "ref20": ref20, "both": both}


@pytest.fixture(scope="module")
def server(repos):
    from cosyedge.serve.server import TritonServer

    with TritonServer(repos["both"], http_port=0, grpc_port=0, metrics_port=0) as srv:
        yield srv


def test_the_served_chunk_is_the_default_and_the_advice_names_it(server, tmp_path, cli):
    out = tmp_path / "out.wav"
    rc, stdout, err = cli("run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "reference20", "-q")
    assert rc == 0, err
    assert "chunk 20 ms x" in stdout and sf.info(str(out)).frames == sf.info(str(DEMO)).frames
    out.unlink()
    rc, _, err = cli("run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "reference20",
                     "--chunk-ms", "10")
    line = one_error(err)
    assert rc == 2 and "takes chunks of 320 samples (20 ms at 16000 Hz) per request, not 160 (10 ms)" in line, err
    assert "give --chunk-ms 20" in line and "leave out --chunk-ms" not in line
    assert not out.exists() and not list(tmp_path.glob(".*part*"))


def test_vad_on_a_served_enhancer_says_the_served_model_is_not_a_vad(server, cli):
    rc, _, err = cli("run", DEMO, "--vad", "--server", server.grpc_url, "--server-model", "reference")
    line = one_error(err)
    assert rc == 2 and f"the served model 'reference' at {server.grpc_url} is an enhancer" in line, err
    assert "not a VAD: drop --vad" in line and "serve a VAD model's repository" in line
    assert "--server-model NAME" in line and "--engine" not in line and " --model" not in line


def test_threads_beside_server_is_refused_without_the_cpu_warning(server, tmp_path, cli):
    for n in ("64", "1"):
        rc, _, err = cli("run", DEMO, "-o", tmp_path / "out.wav", "--server", server.grpc_url, "--server-model",
                         "reference", "--threads", n)
        line = one_error(err)
        assert rc == 2 and "with --server the server runs the model: leave out --threads" in line, err
        assert "CPU core" not in err and len([ln for ln in err.splitlines() if ln.strip()]) == 1
    assert not list(tmp_path.iterdir())


def test_a_request_the_server_refuses_names_the_clients_sequence_id(server):
    from cosyedge.errors import ServerError
    from cosyedge.serve.client import connect

    m = connect(server.grpc_url, "reference")
    with m() as s:
        s.push(np.zeros((1, 1, 160), np.float32))
        bad = np.full((1, 1, 160), np.nan, np.float32)
        with pytest.raises(ServerError) as info:
            s.push_impl(bad)  # past the client's own NaN check: what the server says
        sid = s.sequence_id
    msg = str(info.value)
    assert info.value.exit_code == 6 and "\n" not in msg
    assert f"refused request 1 of sequence {sid}: chunk of sequence {sid} holds NaN/Inf samples" in msg, msg
    assert not re.search(r"\bstream \d+", msg)


def test_serve_ready_timeout_is_one_line_without_a_stray_repository(repos, cli, monkeypatch):
    from cosyedge.serve.server import TritonServer

    monkeypatch.setattr(TritonServer, "_ready", lambda self: False)  # a server that never gets ready
    rc, _, err = cli("serve", repos["ref"], "--grpc-port", 0, "--http-port", 0, "--metrics-port", 0,
                     "--ready-timeout", 1, "-q")
    line = one_error(err)
    assert rc == 3 and "tritonserver was not ready after 1 s (" in line and line.endswith(")"), err
    assert str(repos["ref"]) not in line


def test_a_client_killed_with_sigkill_leaves_a_part_file_the_next_run_removes(server, tmp_path, cli):
    from tests.test_stale_part_files import kill_when_writing, parts

    out = tmp_path / "clean.wav"
    kill_when_writing([sys.executable, "-m", "cosyedge.cli.main", "run", str(DEMO), "-o", str(out), "--server",
                       server.grpc_url, "--server-model", "reference", "-q"], tmp_path, out.name)
    stale = parts(tmp_path, out.name)
    assert len(stale) == 1 and not out.exists()
    rc, _, err = cli("run", DEMO, "-o", out, "--server", server.grpc_url, "--server-model", "reference", "-q")
    assert rc == 0, err
    assert not parts(tmp_path, out.name) and sf.info(str(out)).frames == sf.info(str(DEMO)).frames


def test_mic_through_a_server_that_dies_keeps_the_recording_and_says_so(repos, tmp_path, cli, monkeypatch):
    """Like a local 'run mic' whose device fails, the live recording so far is kept (a capture cannot be run again);
    the one '[!]' line names it; exit 6. A file run in the same situation leaves nothing
    (tests/serve/test_triton_server.py)."""
    import soxr

    from cosyedge.realtime import devices as devmod
    from cosyedge.serve.server import TritonServer
    from tests.realtime.fakes import fake_sounddevice
    from tests.realtime.test_live import DEVICES

    x, _ = sf.read(DEMO, dtype="float32")
    sd = fake_sounddevice(DEVICES, signal=soxr.resample(x, 16000, 48000).astype(np.float32))
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    live, heard = tmp_path / "live.wav", tmp_path / "heard.wav"
    with TritonServer(repos["ref"], http_port=0, grpc_port=0, metrics_port=0) as srv:
        def killer():
            t_end = time.monotonic() + 60
            while srv.metrics().get("nv_inference_request_success", 0) < 100 and time.monotonic() < t_end:
                time.sleep(0.02)
            srv.kill()

        t = threading.Thread(target=killer)
        t.start()
        rc, _, err = cli("run", "mic", "--device", "headset", "-o", live, "--save-input", heard, "--duration", "12",
                         "--server", srv.grpc_url)
        t.join(60)
    line = one_error(err)
    assert rc == 6 and "stopped mid-stream" in line, err
    assert line.endswith(f"; the recording so far is kept in {live} and {heard}"), line
    y, sr = sf.read(live, dtype="float32")
    assert sr == 16000 and 0.5 * 16000 < y.size < 12 * 16000
    assert sf.info(str(heard)).frames > 0 and not list(tmp_path.glob(".*part*"))
