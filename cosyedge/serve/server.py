"""Start, watch and stop a real ``tritonserver`` on a cosyedge model repository (``cosyedge serve``).

:func:`find_tritonserver` locates a server: ``--tritonserver PATH``, else the ``nvidia-pytriton`` wheel (the
``serve`` extra: ``pytriton/tritonserver/bin/tritonserver``, its libraries in ``nvidia_pytriton.libs/``), else
``tritonserver`` on ``PATH`` (NVIDIA's container: ``/opt/tritonserver``). The wheel's Python backend
(``backends/python/libtriton_python.so``) has no stub beside it; the stub of the running Python
(``python_backend_stubs/<3.x>/triton_python_backend_stub``) must sit next to the library, as PyTriton places it, so
:class:`TritonServer` copies the backend and that stub into a private temporary ``backends/python`` folder (the wheel's
folder is never written). The server's environment gets the wheel's libraries on ``LD_LIBRARY_PATH``, the running
virtual environment's ``bin/`` first on ``PATH`` (the stub's Python then imports numpy, onnxruntime and cosyedge from
it) and the folder that holds the running ``cosyedge`` package first on ``PYTHONPATH`` (the server's model imports the
same cosyedge as the command that started it).

:class:`TritonServer` binds HTTP, gRPC and metrics to one address (loopback by default), checks the ports first (a
port in use: one line), waits for ``/v2/health/ready``, turns a repository Triton cannot load into one line with
Triton's own reason, and stops the server with SIGTERM (Triton's graceful shutdown), then SIGKILL after a grace
period. The server is also sent SIGTERM if the starting process dies (``PR_SET_PDEATHSIG``), so no server outlives
its owner.

Source: PyTriton ``pytriton/triton.py`` (``_prepare_triton_inference_server``: the stub copied beside the backend),
``pytriton/server/triton_server.py`` (environment); Triton server ``--help`` (address and port flags).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path

from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.log import LOG
from cosyedge.serve.ports import DEFAULT_HOST, DEFAULT_PORTS, check_port, free_port  # noqa: F401 - re-exported
from cosyedge.serve.repo_checks import SHELL_SAFE_PATH, RepositoryChecks, check_manifest_hashes  # noqa: F401
from cosyedge.serve.shm import SHM_DIR, SHM_PREFIX, ShmRegions, _flock, clean_stale_shm, glob_escape  # noqa: F401
from cosyedge.serve.triton_install import (SERVE_EXTRA, BackendSetup, TritonInstall,  # noqa: F401 - re-exported
                                           find_tritonserver, wheel_supported)
from cosyedge.serve.triton_log import (_NOISE, LogInterpretation, _clean_reason, _error_lines,  # noqa: F401
                                       _load_errors, parse_metrics)

DEFAULT_READY_TIMEOUT_S = 120.0
"""float: how long :meth:`TritonServer.start` waits for the server and its models to be ready."""
DEFAULT_EXIT_TIMEOUT_S = 30
"""int: Triton's ``--exit-timeout-secs``: how long, after SIGTERM, it waits for in-flight requests and live sequences
before it unloads anyway (Triton's own default)."""
STOP_GRACE_S = 10.0
"""float: how long after Triton's exit timeout :meth:`TritonServer.stop` waits before it SIGKILLs the server and its
stubs (Triton 2.51 logs "Exit timeout expired" and may then never exit while a stream is open)."""
WARMUP_CORRELATION_ID = 2**63 - 11
"""int: the correlation id of the warm-up sequence (one START+END request of zeros) :meth:`TritonServer.start` sends
each cosyedge Python-backend model before it reports ready."""
LOG_LINES_KEPT = 400
"""int: the server's last log lines kept (for error messages and :attr:`TritonServer.log_tail`)."""


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to send SIGTERM to this (child) process when its parent dies (Linux ``prctl``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: nothing to do
        pass


def _dead_stubs(server_pid: int) -> int:
    """How many Python-backend stub processes of the tritonserver ``server_pid`` have exited and wait unreaped
    (zombies: Triton 2.51 does not reap a stub that dies while its model loads, and goes on "loading" it until the
    ready timeout). Linux /proc; 0 where it is not readable."""
    n = 0
    try:
        procs = [d for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return 0
    for d in procs:
        try:
            comm, rest = (d / "stat").read_text().rsplit(")", 1)
            fields = rest.split()
            if int(fields[1]) == server_pid and fields[0] == "Z" and "triton_python_b" in comm:
                n += 1
        except (OSError, IndexError, ValueError):
            continue
    return n


class TritonServer(RepositoryChecks, BackendSetup, ShmRegions, LogInterpretation):
    """One ``tritonserver`` process serving a model repository.

    Usage::

        with TritonServer("engines/reference-fp32-triton-python", grpc_port=0, http_port=0, metrics_port=0) as srv:
            print(srv.grpc_url)       # "127.0.0.1:40123": give it to 'cosyedge run --server'
        # stopped (SIGTERM, Triton's graceful shutdown)

    Args:
        repo (str | Path): Model repository folder (``cosyedge build --backend triton``).
        host (str): Address of all three endpoints; loopback by default (other machines cannot connect). ``0.0.0.0``
            listens on every address: an explicit choice.
        http_port, grpc_port, metrics_port (int): Ports; 0 picks a free one (its number is then in the attributes).
        tritonserver (str | Path | None): The binary (:func:`find_tritonserver`).
        ready_timeout_s (float): Seconds to wait for the server and every model to be ready.
        extra_args (list[str]): More ``tritonserver`` flags (e.g. ``["--log-verbose=1"]``).
        on_log (Callable[[str], None] | None): Called with every log line of the server (its own thread).
        exit_timeout_s (int): Triton's ``--exit-timeout-secs``: after SIGTERM, how long it lets open sequences and
            in-flight requests finish; :meth:`stop` SIGKILLs it and its stubs :data:`STOP_GRACE_S` later.
        warmup (bool): Send each cosyedge Python-backend model one START+END request of zeros before reporting
            ready (a model whose first request fails is then refused at start, not at the first client's).
    Attributes:
        http_port, grpc_port, metrics_port (int): The ports in use.
        grpc_url (str): ``host:port`` of gRPC (what ``tritonclient.grpc`` and ``--server`` take).
        http_url, metrics_url (str): ``http://host:port`` and ``http://host:port/metrics``.
        models (list[str]): Models the repository holds (its sub-folders with a config.pbtxt).
        version (str | None): Triton's version (from its log) once started.
        returncode (int | None): The exit status once stopped (0: clean shutdown).
        forced (bool): :meth:`stop` had to SIGKILL the server (it outlived its exit timeout).
        shm_prefix (str | None): The Python backend's shm region prefix of this run (``/dev/shm/<prefix>*``; kept
            after :meth:`stop`, which removes the files).
    Raises:
        ArtifactError: (on :meth:`start`) repository missing or without models, a port in use, a model Triton cannot
            load (Triton's reason), the server exiting early.
        DependencyError: no tritonserver (:func:`find_tritonserver`), or the Python-backend stub cannot load.
    """

    def __init__(self, repo: str | Path, host: str = DEFAULT_HOST, http_port: int = DEFAULT_PORTS["http"],
                 grpc_port: int = DEFAULT_PORTS["grpc"], metrics_port: int = DEFAULT_PORTS["metrics"],
                 tritonserver: str | Path | None = None, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
                 extra_args: list[str] | None = None, on_log: Callable[[str], None] | None = None,
                 exit_timeout_s: int = DEFAULT_EXIT_TIMEOUT_S, warmup: bool = True):
        self.repo = Path(repo)
        self.host = str(host)
        self.ports = {"http": int(http_port), "grpc": int(grpc_port), "metrics": int(metrics_port)}
        for k, v in self.ports.items():
            if not 0 <= v <= 65535:
                raise UsageError(f"--{k}-port {v}: a port is 0..65535 (0 picks a free one)")
        self.tritonserver = tritonserver
        self.ready_timeout_s = float(ready_timeout_s)
        self.extra_args = list(extra_args or [])
        self.on_log = on_log
        self.exit_timeout_s = int(exit_timeout_s)
        if self.exit_timeout_s < 0:
            raise UsageError(f"--exit-timeout {exit_timeout_s}: give seconds >= 0")
        self.warmup = bool(warmup)
        self.shm_prefix: str | None = None
        self._lock_fd: int | None = None
        self._link_repo: Path | None = None
        self.version: str | None = None
        self.returncode: int | None = None
        self.models: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._tmp: Path | None = None
        self._lines: deque = deque(maxlen=LOG_LINES_KEPT)
        self._reader: threading.Thread | None = None
        self.forced = False

    # ------------------------------------------------------------------ addresses
    @property
    def http_port(self) -> int:
        """int: the HTTP port (the one picked when 0 was given)."""
        return self.ports["http"]

    @property
    def grpc_port(self) -> int:
        """int: the gRPC port."""
        return self.ports["grpc"]

    @property
    def metrics_port(self) -> int:
        """int: the metrics port."""
        return self.ports["metrics"]

    def _url_host(self) -> str:
        h = "127.0.0.1" if self.host in ("0.0.0.0", "") else "::1" if self.host == "::" else self.host
        return f"[{h}]" if ":" in h else h

    @property
    def grpc_url(self) -> str:
        """str: ``host:port`` of gRPC, what ``cosyedge run --server`` and tritonclient take."""
        return f"{self._url_host()}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        """str: ``http://host:port`` (health: ``/v2/health/ready``)."""
        return f"http://{self._url_host()}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """str: ``http://host:port/metrics`` (Prometheus text)."""
        return f"http://{self._url_host()}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        """int | None: the server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log_tail(self) -> list[str]:
        """list[str]: the server's last :data:`LOG_LINES_KEPT` log lines."""
        return list(self._lines)

    # ------------------------------------------------------------------ life cycle


    def start(self) -> TritonServer:
        """Start the server and wait until it and all its models are ready.

        Returns:
            TritonServer: self.
        Raises:
            see the class.
        """
        self._check_repo()
        inst = find_tritonserver(self.tritonserver)
        for what in ("http", "grpc", "metrics"):
            if self.ports[what] == 0:
                self.ports[what] = free_port(self.host)
            else:
                check_port(self.host, self.ports[what], what)
        if len(set(self.ports.values())) < 3:
            raise UsageError(f"the HTTP, gRPC and metrics ports must differ, got {self.ports}")
        backends = self._backends(inst)
        repo_path = self._repo_for_triton()
        shm_args = self._claim_shm()
        cmd = [str(inst.binary), f"--model-repository={repo_path}", f"--backend-directory={backends}",
               f"--http-address={self.host}", f"--grpc-address={self.host}", f"--metrics-address={self.host}",
               f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
               f"--metrics-port={self.metrics_port}", "--allow-gpu-metrics=false", "--allow-cpu-metrics=true",
               f"--exit-timeout-secs={self.exit_timeout_s}", *shm_args,
               "--log-info=true", "--log-warning=true", "--log-error=true", *self.extra_args]
        LOG.debug("starting %s", " ".join(cmd))
        try:
            # its own session: a terminal's Ctrl-C reaches only cosyedge, which forwards one signal (serve()); the
            # shm lock's descriptor goes with it, so the run's regions count as live while the server lives
            self._proc = subprocess.Popen(cmd, env=self._env(inst), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, preexec_fn=_set_pdeathsig, text=True,
                                          errors="replace", bufsize=1, start_new_session=True,
                                          pass_fds=() if self._lock_fd is None else (self._lock_fd,))
        except OSError as err:
            self._cleanup()
            raise DependencyError(f"cannot run {inst.binary}: {err.strerror or err}") from None
        self._reader = threading.Thread(target=self._read, name="tritonserver-log", daemon=True)
        self._reader.start()
        try:
            self._wait_ready()
            if self.warmup:
                self._warm_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _private_dir(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="cosyedge-triton-"))
        return self._tmp


    def _read(self) -> None:
        proc = self._proc
        for line in proc.stdout:
            line = line.rstrip("\n")
            self._lines.append(line)
            if self.version is None:
                m = re.search(r"server_version\s*\|\s*(\S+)", line)
                if m:
                    self.version = m.group(1)
            if self.on_log is not None:
                self.on_log(line)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=1.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_ready(self) -> None:
        """Wait for ``/v2/health/ready``; stop at once when the server exits, logs that a model failed to load, or
        its repository index says a model is UNAVAILABLE with a reason (Triton 2.51 may go on running, not ready,
        with a model that failed: waiting out the timeout would say nothing more)."""
        t_end = time.monotonic() + self.ready_timeout_s
        next_index = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            if self._proc.poll() is not None:
                self._reader.join(timeout=5.0)
                raise self._startup_error()
            if self._ready():
                return
            loads = _load_errors(self.log_tail)
            if not loads and time.monotonic() >= next_index:
                next_index = time.monotonic() + 1.0
                loads = [f"model '{e['name']}': {_clean_reason(e['reason'])}" for e in self._index()
                         if e.get("state") == "UNAVAILABLE" and e.get("reason")]
                if not loads and _dead_stubs(self._proc.pid):
                    names = ([e["name"] for e in self._index() if e.get("state") not in ("READY", None)]
                             or sorted(d.name for d in self.repo.iterdir() if (d / "config.pbtxt").is_file())
                             or ["?"])
                    loads = [f"model '{n}': its Python-backend stub process exited while the model loaded (its "
                             f"model.py crashed or exited at import: run it by hand with this Python to see why)"
                             for n in names]
            if loads:
                raise self._load_failure(loads)
            time.sleep(0.1)
        raise ArtifactError(f"tritonserver was not ready after {self.ready_timeout_s:g} s "
                            f"({self._last_words() or 'no error in its log'})")

    def _http_json(self, path: str, body: dict | None = None, timeout: float = 2.0) -> tuple[int, object]:
        """(status, parsed JSON body or None) of an HTTP request to the server; status 0 when nothing answers."""
        import json

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.http_url}{path}", data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read()
        except (urllib.error.URLError, OSError, ValueError):
            return 0, None
        try:
            return status, json.loads(text or b"null")
        except ValueError:
            return status, None

    def _index(self) -> list[dict]:
        """Triton's repository index (``POST /v2/repository/index``): list of {name, version, state, reason}."""
        status, out = self._http_json("/v2/repository/index", {})
        return [e for e in out if isinstance(e, dict)] if status == 200 and isinstance(out, list) else []

    def _warm_up(self) -> None:
        """Send each cosyedge model (``cosyedge.chunk_samples`` in its config) one sequence of one request of zeros
        (START and END together, correlation id :data:`WARMUP_CORRELATION_ID`) and check that its outputs come back
        whole and finite: a model whose first request would fail (its Python stub crashing, tensors lost between
        numpy and the stub) is refused now, in one line, not at the first client's request.

        Raises:
            ArtifactError: the model answers with an error, not at all, or with outputs of the wrong size.
        """
        import math
        from urllib.parse import quote

        for name in self.models:
            status, cfg = self._http_json(f"/v2/models/{quote(name)}/config", timeout=10.0)
            if status != 200 or not isinstance(cfg, dict) or "cosyedge.chunk_samples" not in (cfg.get("parameters")
                                                                                            or {}):
                continue
            batched = int(cfg.get("max_batch_size") or 0) > 0
            inputs = []
            for i in cfg.get("input") or []:
                dims = [int(d) for d in i.get("dims") or []]
                dtype = str(i.get("data_type", "")).removeprefix("TYPE_")
                if any(d < 0 for d in dims) or dtype in ("STRING", "BYTES"):
                    inputs = None
                    break
                shape = [1, *dims] if batched else dims
                n = math.prod(shape)
                inputs.append({"name": i["name"], "shape": shape, "datatype": dtype,
                               "data": [False] * n if dtype == "BOOL" else [0] * n})
            if not inputs:
                continue
            body = {"inputs": inputs, "parameters": {"sequence_id": WARMUP_CORRELATION_ID, "sequence_start": True,
                                                     "sequence_end": True}}
            status, out = self._http_json(f"/v2/models/{quote(name)}/infer", body, timeout=60.0)
            if status != 200 or not isinstance(out, dict):
                why = out.get("error") if isinstance(out, dict) else None
                if status == 0:
                    why = "no answer within 60 s"
                if self._proc.poll() is not None:
                    why = f"{why or 'no answer'}; tritonserver exited ({self._last_words() or 'see -v'})"
                raise ArtifactError(f"model '{name}' fails its first request: "
                                    f"{_clean_reason(str(why or f'HTTP {status}'))} (the server was not started; "
                                    f"-v shows Triton's log)")
            got = {o.get("name"): o for o in out.get("outputs") or []}
            for o in cfg.get("output") or []:
                want = math.prod([1, *[int(d) for d in o.get("dims") or []]] if batched
                                 else [int(d) for d in o.get("dims") or []])
                data = (got.get(o["name"]) or {}).get("data")
                if not isinstance(data, list) or (want >= 0 and len(data) != want):
                    raise ArtifactError(f"model '{name}' fails its first request: output '{o['name']}' came back "
                                        f"with {len(data) if isinstance(data, list) else 'no'} values, not {want} "
                                        f"(the server was not started)")
                if any(isinstance(v, float) and not math.isfinite(v) for v in data):
                    raise ArtifactError(f"model '{name}' fails its first request: output '{o['name']}' is NaN/Inf "
                                        f"for a chunk of zeros (the server was not started)")
            LOG.debug("model '%s' answered its warm-up request", name)


    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the server to exit; returns its status (int), None on timeout."""
        try:
            self.returncode = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def is_running(self) -> bool:
        """bool: the process runs."""
        return self._proc is not None and self._proc.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server (e.g. SIGINT/SIGTERM: graceful shutdown); nothing when it has exited."""
        if self.is_running():
            self._proc.send_signal(signum)

    def stop(self, grace_s: float | None = None) -> int | None:
        """Stop the server: SIGTERM (Triton lets in-flight requests and open sequences finish for up to its exit
        timeout, unloads its models and exits), SIGKILL of the server and its stubs when it has not exited
        ``grace_s`` later; then its shm regions and private folder are removed.

        Args:
            grace_s (float | None): Seconds to wait after SIGTERM; None: the exit timeout plus
                :data:`STOP_GRACE_S`.
        Returns:
            int | None: its exit status (0: clean shutdown; negative: killed), None when it was never started.
        """
        if grace_s is None:
            grace_s = self.exit_timeout_s + STOP_GRACE_S
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    LOG.warning("tritonserver did not exit within %g s of SIGTERM (a stream still open?): killed it "
                                "and its stubs", grace_s)
                    self.forced = True
                    self._kill_group()
                    self._proc.wait()
            self.returncode = self._proc.returncode
            self._kill_group()
            if self._reader is not None:
                self._reader.join(timeout=5.0)
        self._cleanup()
        return self.returncode

    def _kill_group(self) -> None:
        """SIGKILL what is left of the server's process group (its Python-backend stubs, should the server have died
        without stopping them: they would otherwise live on, orphaned)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the server and its stubs at once (as a crash would), without a graceful shutdown; its shm regions
        are removed by :meth:`stop` (or by the next ``cosyedge serve``)."""
        if self._proc is not None:
            self._kill_group()
            self._proc.wait()

    def _cleanup(self) -> None:
        self._release_shm()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def metrics(self) -> dict[str, float]:
        """Triton's Prometheus metrics summed over labels: name -> value (dict[str, float]), e.g.
        ``nv_inference_request_success``, ``nv_inference_exec_count`` (mean batch = their ratio).

        Raises:
            ArtifactError: the metrics endpoint does not answer.
        """
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5.0) as r:
                text = r.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as err:
            raise ArtifactError(f"no metrics at {self.metrics_url}: {err}") from None
        return parse_metrics(text)


def serve(repo: str | Path, host: str = DEFAULT_HOST, http_port: int = DEFAULT_PORTS["http"],
          grpc_port: int = DEFAULT_PORTS["grpc"], metrics_port: int = DEFAULT_PORTS["metrics"],
          tritonserver: str | Path | None = None, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
          on_ready: Callable[[TritonServer], None] | None = None, exit_timeout_s: int = DEFAULT_EXIT_TIMEOUT_S,
          on_stop: Callable[[TritonServer], None] | None = None) -> int:
    """Serve ``repo`` until SIGINT/SIGTERM (forwarded to Triton) or the server exits; what ``cosyedge serve`` runs.

    Triton's log is kept: its errors and warnings are logged as they come (CPU-only noise about NVML/DCGM only at
    debug level, ``-v``). After the first signal Triton has ``exit_timeout_s`` to let open sequences finish; a server
    still running :data:`STOP_GRACE_S` after that (Triton 2.51 logs "Exit timeout expired" and may hang) is killed
    with its stubs: the stop still counts as asked for (0), with a warning that open streams were cut
    (:attr:`TritonServer.forced`).

    Args:
        repo, host, http_port, grpc_port, metrics_port, tritonserver, ready_timeout_s, exit_timeout_s: see
            :class:`TritonServer`.
        on_ready (Callable[[TritonServer], None] | None): Called once the server is ready (prints the endpoints).
        on_stop (Callable[[TritonServer], None] | None): Called after a signal-driven stop (says how it ended).
    Returns:
        int: 0 after a shutdown on SIGINT/SIGTERM.
    Raises:
        ArtifactError / DependencyError / UsageError: see :class:`TritonServer`; the server exiting by itself
            (its last error).
    """
    from cosyedge.errors import ServerError

    ready = threading.Event()

    def on_log(line: str) -> None:
        if line[:1] in ("E", "W") and re.match(r"^[EW]\d{4} ", line) and ready.is_set():
            (LOG.debug if _NOISE.search(line) else LOG.warning)("tritonserver: %s", line)
        else:
            LOG.debug("tritonserver: %s", line)

    stop = {"sig": None, "count": 0, "at": None}

    def forward(signum, frame) -> None:
        """First signal: Triton's graceful shutdown (SIGTERM); second: say so; third: SIGKILL."""
        stop["sig"] = signum
        stop["count"] += 1
        if stop["count"] == 1:
            stop["at"] = time.monotonic()
            srv.signal(signal.SIGTERM)
        elif stop["count"] == 2:
            LOG.warning("tritonserver is finishing its in-flight requests and unloading (at most %d s more); signal "
                        "again to kill it", srv.exit_timeout_s)
        else:
            srv.forced = True
            srv.kill()

    srv = TritonServer(repo, host, http_port, grpc_port, metrics_port, tritonserver, ready_timeout_s, on_log=on_log,
                       exit_timeout_s=exit_timeout_s)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in old:
            signal.signal(s, forward)
        srv.start()
        ready.set()
        if stop["sig"] is not None:  # a signal that came before the process existed
            stop["at"] = time.monotonic()
            srv.signal(signal.SIGTERM)
        if on_ready is not None:
            on_ready(srv)
        while srv.wait(0.5) is None:
            if stop["at"] is not None and time.monotonic() - stop["at"] > srv.exit_timeout_s + STOP_GRACE_S:
                LOG.warning("tritonserver did not exit within %g s of SIGTERM (a stream still open?): killed it and "
                            "its stubs", srv.exit_timeout_s + STOP_GRACE_S)
                srv.forced = True
                srv.kill()
        code = srv.returncode
        if srv._reader is not None:
            srv._reader.join(timeout=5.0)  # its last log lines (what it said when it exited)
        if stop["sig"] is None:
            raise ServerError(f"tritonserver exited by itself with status {code}: "
                              f"{srv._last_words() or 'see its log with -v'}")
        if any("Exit timeout expired" in ln for ln in srv.log_tail):
            srv.forced = True  # Triton gave up waiting for open sequences: they were cut
        if code != 0 and not srv.forced:
            raise ServerError(f"tritonserver did not shut down cleanly (status {code}): "
                              f"{srv._last_words() or 'see its log with -v'}")
        srv.stop()  # its stubs and shm regions
        if on_stop is not None:
            on_stop(srv)
        return 0
    finally:
        srv.stop()
        for s, h in old.items():
            signal.signal(s, h)
