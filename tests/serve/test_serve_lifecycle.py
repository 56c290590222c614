"""``cosyedge serve``'s life cycle against the real tritonserver 2.51 (nvidia-pytriton wheel): the model works under
numpy 1 (what ``pip install cosyedge[serve]`` resolves) and numpy 2, and a model whose first request would fail is
refused at start by the warm-up request; a tampered repository is refused before Triton starts; a load failure is
reported at once, without Triton's escaped Python traceback; SIGTERM with a stream still open stops the server within
its exit timeout plus the grace period, leaving no tritonserver, stub or shm region; a tritonserver killed with
SIGKILL leaves no shm region either; a sequence that waits in Triton's backlog longer than the idle timeout is ended
by Triton (the documented rule), and one that waits less completes equal to its solo run.

Skipped where the wheel cannot install (not x86-64 Linux, or glibc < 2.35). The numpy-1 test needs a Python whose
numpy is 1.x with cosyedge's dependencies: ``$COSYEDGE_NUMPY1_PYTHON`` or ``.cache/np1/bin/python`` (a venv with
``numpy==1.26.4`` and a ``.pth`` line naming the main environment's site-packages); skipped without one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cosyedge.serve.server import SHM_DIR, wheel_supported

_why = wheel_supported()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav"
PORTS = ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
ENDPOINTS = re.compile(r"gRPC (127\.0\.0\.1:\d+), HTTP (http://127\.0\.0\.1:\d+)")


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """Python-backend repositories of the bundled model: ``one`` (1 sequence per instance, 1 s idle timeout) and
    ``long`` (1 sequence, 6 s idle timeout, model name ``reference_long``), both in ``both/``; the local engine."""
    from cosyedge.builders import build
    from cosyedge.builders.triton import build_triton
    from cosyedge.models import REFERENCE_STREAM_ONNX

    tmp = tmp_path_factory.mktemp("life")
    one = build_triton(REFERENCE_STREAM_ONNX, tmp / "e1", triton_backend="python", max_sequences=1,
                       idle_us=1_000_000)
    long = build_triton(REFERENCE_STREAM_ONNX, tmp / "e2", name="reference_long", triton_backend="python",
                        max_sequences=1, idle_us=6_000_000)
    both = tmp / "both"
    both.mkdir()
    for r in (one, long):
        for model in [p for p in r.iterdir() if (p / "config.pbtxt").is_file()]:
            (both / model.name).symlink_to(model, target_is_directory=True)
    return {"one": one, "long": long, "both": both, "ort": build(REFERENCE_STREAM_ONNX, out_dir=tmp / "ort"),
            "tmp": tmp}


def start_serve(repo: Path, *extra: str, python: str = sys.executable, env: dict | None = None
                ) -> subprocess.Popen:
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.Popen([python, "-m", "cosyedge.cli.main", "serve", str(repo), *PORTS, *extra], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def endpoints(p: subprocess.Popen) -> tuple[str, str]:
    line = p.stdout.readline()
    m = ENDPOINTS.search(line)
    if not m:
        p.kill()
        _, err = p.communicate(timeout=30)
        raise AssertionError(f"no endpoints: {line!r} {err}")
    return m.group(1), m.group(2)


def processes_naming(text: str) -> list[int]:
    """Process ids whose command line holds ``text`` (tritonserver and its stubs name the repository)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def shm_prefix_of(repo: Path) -> str:
    """The shm region prefix the running tritonserver of ``repo`` was given."""
    for pid in processes_naming(str(repo.resolve())):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for a in args:
            m = re.match(rb"--backend-config=python,shm-region-prefix-name=(\S+)", a)
            if m:
                return m.group(1).decode()
    raise AssertionError(f"no tritonserver serving {repo}")


def local_enhanced(repos, x):
    from cosyedge.runtime.ort import OrtStreamSession
    from cosyedge.runtime.stream import enhance_array

    with OrtStreamSession(repos["ort"] / "model.onnx") as s:
        return enhance_array(s, x)


def served_enhanced(url: str, x, model: str = "reference"):
    from cosyedge.runtime.stream import enhance_array
    from cosyedge.serve.client import connect

    with connect(url, model)() as s:
        return enhance_array(s, x)


def numpy1_python() -> str | None:
    cand = os.environ.get("COSYEDGE_NUMPY1_PYTHON") or str(ROOT / ".cache" / "np1" / "bin" / "python")
    if not Path(cand).is_file():
        return None
    r = subprocess.run([cand, "-c", "import numpy, onnxruntime, click; print(numpy.__version__)"],
                       capture_output=True, text=True, timeout=120)
    return cand if r.returncode == 0 and r.stdout.strip().startswith("1.") else None


def test_model_serves_under_numpy_1_and_the_wrong_tensor_exchange_is_refused_at_start(repos):
    """Under numpy 1.26 the model exchanges tensors with as_numpy()/Tensor(name, array) and gives the local run's
    output; DLPack forced there gives it too (the capsule handed over: a bare array's capsule crashed the stub on the
    first request while serve said ready); the numpy exchange forced under numpy 2 is refused by the warm-up request,
    one line, exit 3."""
    x = sf.read(DEMO, dtype="float32")[0][8000:40000]
    want = local_enhanced(repos, x)
    forced = dict(os.environ, COSYEDGE_TRITON_TENSORS="numpy")
    p = start_serve(repos["one"], "-q", env=forced)  # numpy 2 here: Tensor(name, array) sends 0 bytes
    out, err = p.communicate(timeout=180)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 3 and len(lines) == 1 and "fails its first request" in lines[0], err
    py1 = numpy1_python()
    if py1 is None:
        pytest.skip("no numpy-1 Python ($COSYEDGE_NUMPY1_PYTHON or .cache/np1/bin/python with numpy 1.x)")
    for exchange in ("numpy", "dlpack"):  # the default under numpy 1, then DLPack forced
        p = start_serve(repos["one"], "-q", python=py1, env=dict(os.environ, COSYEDGE_TRITON_TENSORS=exchange))
        try:
            grpc, _ = endpoints(p)
            got = served_enhanced(grpc, x)
        finally:
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "stopped cleanly" in out, (exchange, err)
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5, (exchange, np.abs(got - want).max())


def test_tampered_repository_is_refused_before_triton_starts(repos, tmp_path, cli):
    for rel in ("reference/1/model.onnx", "reference/config.pbtxt", "reference/1/model.py"):
        bad = tmp_path / rel.replace("/", "_")
        shutil.copytree(repos["one"], bad)
        with open(bad / rel, "ab") as f:
            f.write(b"\n#")
        t0 = time.monotonic()
        rc, out, err = cli("serve", bad, *PORTS, "-q")
        assert rc == 3 and err.strip().count("\n") == 0, err
        assert f"{rel} does not match its sha256 in manifest.json" in err, err
        assert time.monotonic() - t0 < 10 and not out


def unchecked_said(err: str) -> list[str]:
    """The lines of ``err`` but the warning that a repository without manifest.json is served unchecked (each test
    here removes the manifest so that Triton, not the hash check, meets the broken file)."""
    lines = err.strip().splitlines()
    assert any("has no manifest.json" in line for line in lines), err
    return [line for line in lines if "has no manifest.json" not in line]


def test_load_failures_stop_at_once_with_tritons_reason_and_no_traceback(repos, tmp_path, cli):
    """A model whose initialize() raises: Triton's reason, its first line only; a model folder the Python backend
    cannot launch (a space): refused at once, not after the ready timeout."""
    bad = tmp_path / "bad"
    shutil.copytree(repos["one"], bad)
    (bad / "manifest.json").unlink()  # not a cosyedge repository any more: Triton finds the broken model
    (bad / "reference" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    t0 = time.monotonic()
    rc, _, err = cli("serve", bad, *PORTS, "--ready-timeout", 120, "-q")
    assert rc == 3 and len(unchecked_said(err)) == 1, err
    assert "Triton cannot load the repository" in err and "model 'reference'" in err and "model.onnx" in err, err
    assert "\\n" not in err and "At:" not in err and "initialize" not in err, err
    assert time.monotonic() - t0 < 60
    spaced = tmp_path / "spaced"
    spaced.mkdir()
    shutil.copytree(repos["one"] / "reference", spaced / "a b")
    cfg = spaced / "a b" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "reference"', 'name: "a b"'))
    t0 = time.monotonic()
    rc, _, err = cli("serve", spaced, *PORTS, "--ready-timeout", 120, "-q")
    assert rc == 3 and len(unchecked_said(err)) == 1 and "model folder 'a b'" in err, err
    assert time.monotonic() - t0 < 10


def test_a_model_whose_stub_dies_at_import_is_refused_at_once(repos, tmp_path, cli):
    """Triton 2.51 leaves a Python-backend stub that exits while its model loads unreaped and goes on "loading" until
    the ready timeout: serve sees the exited stub and refuses in one line, naming the model."""
    bad = tmp_path / "dies"
    shutil.copytree(repos["one"], bad)
    (bad / "manifest.json").unlink()
    (bad / "reference" / "1" / "model.py").write_text("import os\nos._exit(1)\n")
    t0 = time.monotonic()
    rc, _, err = cli("serve", bad, *PORTS, "--ready-timeout", 120, "-q")
    assert rc == 3 and len(unchecked_said(err)) == 1, err
    assert "model 'reference'" in err and "stub process exited while the model loaded" in err, err
    assert time.monotonic() - t0 < 30


def test_repository_path_with_a_space_is_served(repos, tmp_path):
    """Triton's Python backend launches its stub through an unquoted shell line: serve hands it a safe link."""
    spaced = tmp_path / "my engines"
    shutil.copytree(repos["one"], spaced)
    x = sf.read(DEMO, dtype="float32")[0][8000:24000]
    p = start_serve(spaced, "-q")
    try:
        grpc, _ = endpoints(p)
        got = served_enhanced(grpc, x)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "stopped cleanly" in out, err
    assert np.abs(got - local_enhanced(repos, x)).max() < 1e-5


STREAM_FOREVER = r"""
import sys, numpy as np
from cosyedge.serve.client import connect
with connect(sys.argv[1], "reference")() as s:
    print("streaming", flush=True)
    while True:
        s.push(np.zeros((1, 1, s.chunk_samples), np.float32))
"""


def test_sigterm_with_a_stream_open_stops_within_the_exit_timeout_and_leaves_nothing(repos, tmp_path):
    repo = tmp_path / "sigterm"
    shutil.copytree(repos["one"], repo)
    p = start_serve(repo, "--exit-timeout", "2")
    grpc, _ = endpoints(p)
    prefix = shm_prefix_of(repo)
    assert list(SHM_DIR.glob(f"{prefix}*")), prefix
    c = subprocess.Popen([sys.executable, "-c", STREAM_FOREVER, grpc], cwd=ROOT, env=dict(os.environ,
                         PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert c.stdout.readline().strip() == "streaming"
        time.sleep(1.0)
        assert c.poll() is None
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        c.kill()
        c.wait()
    assert p.returncode == 0, err
    assert took < 2 + 10 + 8, took
    assert "Triton stopped" in out, out
    print(f"\nSIGTERM with a stream open (--exit-timeout 2): serve exited 0 in {took:.1f} s: "
          f"{out.strip().splitlines()[-1]}")
    assert not processes_naming(str(repo.resolve())), "tritonserver or a stub outlived serve"
    assert not list(SHM_DIR.glob(f"{prefix}*"))


def test_sigkilled_tritonserver_leaves_no_shm_region_and_stale_regions_are_cleaned(repos, tmp_path):
    from cosyedge.serve.server import SHM_PREFIX, clean_stale_shm

    repo = tmp_path / "killed"
    shutil.copytree(repos["one"], repo)
    p = start_serve(repo, "-q")
    endpoints(p)
    prefix = shm_prefix_of(repo)
    assert list(SHM_DIR.glob(f"{prefix}*"))
    server_pid = next(pid for pid in processes_naming(str(repo.resolve()))
                      if b"tritonserver" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0])
    os.kill(server_pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 6 and err.strip().count("\n") == 0 and "exited by itself" in err, err
    assert not list(SHM_DIR.glob(f"{prefix}*"))
    time.sleep(1.0)
    assert not processes_naming(str(repo.resolve()))
    # regions of a dead run (no one holds its lock) go at the next start; a live run's stay
    import fcntl

    dead, live = f"{SHM_PREFIX}test{os.getpid()}dead_", f"{SHM_PREFIX}test{os.getpid()}live_"
    for pre in (dead, live):
        for suffix in ("lock", "1", "2"):
            (SHM_DIR / f"{pre}{suffix}").write_bytes(b"x")
    fd = os.open(SHM_DIR / f"{live}lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        removed = clean_stale_shm()
        assert {f"{dead}lock", f"{dead}1", f"{dead}2"} <= set(removed)
        assert not list(SHM_DIR.glob(f"{dead}*")) and len(list(SHM_DIR.glob(f"{live}*"))) == 3
    finally:
        os.close(fd)
        for f in SHM_DIR.glob(f"{live}*"):
            f.unlink()


def test_backlog_wait_longer_than_the_idle_timeout_ends_the_sequence_shorter_completes(repos):
    """Triton 2.51's rule (sequence batcher): a backlogged sequence's idle clock is not restarted when it gets a
    slot, so one that waited longer than max_sequence_idle_microseconds is force-ended by the reaper (it runs every
    50 ms for backlogged sequences) unless its next request arrives first; the client's next request then fails
    with "must specify the START flag". One slot, two 0.5 s streams paced at 60 ms a chunk (3 s each): with a 1 s
    idle timeout the second fails on its second request; with 6 s (longer than its 3 s wait) both complete, equal to
    their solo runs."""
    import threading

    from cosyedge.serve.server import TritonServer

    x = sf.read(DEMO, dtype="float32")[0][8000:16000]
    want = local_enhanced(repos, x)
    with TritonServer(repos["both"], http_port=0, grpc_port=0, metrics_port=0) as srv:
        for model, ok in (("reference_long", True), ("reference", False)):
            results: list = [None, None]

            def go(i, model=model, results=results):
                from cosyedge.runtime.stream import enhance_array
                from cosyedge.serve.client import connect

                try:
                    with connect(srv.grpc_url, model)() as s:
                        push = s.push

                        def paced(chunk, copy=True):
                            y = push(chunk, copy=copy)
                            time.sleep(0.06)
                            return y

                        s.push = paced
                        results[i] = enhance_array(s, x)
                except Exception as err:  # noqa: BLE001 - what the second client sees
                    results[i] = err

            ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            ts[0].start()
            time.sleep(0.3)
            ts[1].start()
            for t in ts:
                t.join(120)
            errors = [r for r in results if isinstance(r, Exception)]
            if ok:
                assert not errors, errors
                for r in results:
                    assert np.abs(r - want).max() < 1e-5
            else:
                assert len(errors) == 1 and "must specify the START flag" in str(errors[0]), results
                assert np.abs(results[0] - want).max() < 1e-5
