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
import dataclasses
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
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

SERVE_EXTRA = "pip install 'cosyedge[serve]'"
"""str: what installs the server (nvidia-pytriton) and the gRPC client (tritonclient[grpc])."""
DEFAULT_HOST = "127.0.0.1"
"""str: the address every endpoint binds to unless told otherwise (loopback: not reachable from other machines)."""
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
"""dict[str, int]: Triton's own default ports."""
DEFAULT_READY_TIMEOUT_S = 120.0
"""float: how long :meth:`TritonServer.start` waits for the server and its models to be ready."""
DEFAULT_EXIT_TIMEOUT_S = 30
"""int: Triton's ``--exit-timeout-secs``: how long, after SIGTERM, it waits for in-flight requests and live sequences
before it unloads anyway (Triton's own default)."""
STOP_GRACE_S = 10.0
"""float: how long after Triton's exit timeout :meth:`TritonServer.stop` waits before it SIGKILLs the server and its
stubs (Triton 2.51 logs "Exit timeout expired" and may then never exit while a stream is open)."""
SHM_DIR = Path("/dev/shm")
"""Path: where the Python backend's shared-memory regions live (POSIX shm on Linux)."""
SHM_PREFIX = "cosyedge_triton_"
"""str: start of the Python backend's shm region prefix of every ``cosyedge serve`` run
(``cosyedge_triton_<token>_``, a ``<token>.lock`` beside it held while the run's server lives)."""
SHELL_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+,:=@%-]+$")
"""re.Pattern: a path Triton's Python backend can put in its ``bash -c`` stub command line (it joins the model's
folder path and instance name into that line unquoted: a space or a shell character breaks the stub's launch)."""
WARMUP_CORRELATION_ID = 2**63 - 11
"""int: the correlation id of the warm-up sequence (one START+END request of zeros) :meth:`TritonServer.start` sends
each cosyedge Python-backend model before it reports ready."""
LOG_LINES_KEPT = 400
"""int: the server's last log lines kept (for error messages and :attr:`TritonServer.log_tail`)."""
_NOISE = re.compile(r"NVML|DCGM|nvml|dcgm|CUDA driver|cuda driver|GPU metrics|Unable to get power|pinned memory|"
                    r"CudaDriver|libcuda|GPU device|cuMemGetInfo|CUDA memory pool")
"""re.Pattern: warnings every CPU-only start prints (no NVIDIA driver): shown only with -v."""


@dataclasses.dataclass
class TritonInstall:
    """Where a ``tritonserver`` and its Python backend are.

    Attributes:
        binary (Path): The ``tritonserver`` executable.
        backends (Path): Its backend directory (holds ``python/libtriton_python.so``).
        libs (Path | None): Extra shared-library folder for ``LD_LIBRARY_PATH`` (the wheel's
            ``nvidia_pytriton.libs``), None for a system install.
        stub (Path | None): The Python-backend stub to place beside ``libtriton_python.so`` (the wheel's, for the
            running Python), None when the backend folder already has one (NVIDIA's container).
        source (str): ``"nvidia-pytriton"``, ``"--tritonserver"`` or ``"PATH"``.
    """

    binary: Path
    backends: Path
    libs: Path | None
    stub: Path | None
    source: str


def find_tritonserver(path: str | Path | None = None) -> TritonInstall:
    """Locate ``tritonserver``: ``path``, else the nvidia-pytriton wheel, else ``tritonserver`` on ``PATH``.

    Nothing is imported (pytriton's Python package needs dependencies the server does not): the wheel is found
    with ``importlib.util.find_spec``.

    Args:
        path (str | Path | None): A ``tritonserver`` executable (``--tritonserver``), whose backends are in
            ``<bin>/../backends`` (NVIDIA's layout, ``/opt/tritonserver``).
    Returns:
        TritonInstall
    Raises:
        ArtifactError: ``path`` is not an executable file.
        DependencyError: no server found (the install command), not x86-64 Linux, or the wheel has no stub for
            this Python version.
    """
    if path is not None:
        p = Path(path)
        if not p.is_file() or not os.access(p, os.X_OK):
            raise ArtifactError(f"--tritonserver {p}: not an executable file (give the tritonserver binary, e.g. "
                                f"/opt/tritonserver/bin/tritonserver)")
        p = p.resolve()
        backends = p.parent.parent / "backends"
        return TritonInstall(p, backends, None, None, "--tritonserver")
    spec = importlib.util.find_spec("pytriton")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
        binary = root / "bin" / "tritonserver"
        if binary.is_file():
            ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
            stub = root / "python_backend_stubs" / ver / "triton_python_backend_stub"
            if not stub.is_file():
                have = sorted(p.name for p in (root / "python_backend_stubs").glob("3.*"))
                raise DependencyError(f"nvidia-pytriton has no Python-backend stub for Python {ver} (it has "
                                      f"{', '.join(have) or 'none'}): run cosyedge from one of those Pythons")
            libs = root.parent.parent / "nvidia_pytriton.libs"
            return TritonInstall(binary, root / "backends", libs if libs.is_dir() else None, stub, "nvidia-pytriton")
    found = shutil.which("tritonserver")
    if found:
        p = Path(found).resolve()
        return TritonInstall(p, p.parent.parent / "backends", None, None, "PATH")
    import platform

    where = f"{platform.system()} {platform.machine()}"
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        raise DependencyError(f"no tritonserver here: the nvidia-pytriton wheel exists for x86-64 Linux (glibc >= "
                              f"2.35) only, this is {where}; use NVIDIA's Triton container or give --tritonserver PATH")
    raise DependencyError(f"no tritonserver found: {SERVE_EXTRA} (x86-64 Linux, glibc >= 2.35), or give "
                          f"--tritonserver PATH (NVIDIA's container: /opt/tritonserver/bin/tritonserver)")


def wheel_supported() -> str | None:
    """Why the nvidia-pytriton wheel cannot install here (str), or None where it can (x86-64 Linux, glibc >= 2.35).

    What the tests that start a real server skip on."""
    import platform

    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        return f"the nvidia-pytriton wheel is x86-64 Linux only (this is {platform.system()} {platform.machine()})"
    lib, ver = platform.libc_ver()
    try:
        if lib != "glibc" or tuple(int(x) for x in ver.split(".")[:2]) < (2, 35):
            return f"the nvidia-pytriton wheel needs glibc >= 2.35 (this has {lib} {ver})"
    except ValueError:
        return f"the nvidia-pytriton wheel needs glibc >= 2.35 (cannot read this C library's version: {lib} {ver})"
    return None


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port (int) nothing listens on at ``host`` now (the kernel's pick; another process may take it later).

    Raises:
        UsageError: ``host`` is not an address of this machine (one line, as :func:`check_port` says it).
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError as err:  # socket.gaierror too: an unresolvable or impossible address
            raise UsageError(f"cannot listen on {host}: {err.strerror or err} (--host takes an address of this "
                             "machine; 0.0.0.0 listens on all of them)") from None
        return int(s.getsockname()[1])


def check_port(host: str, port: int, what: str) -> None:
    """Refuse a port that something already listens on at ``host``.

    Raises:
        ArtifactError: the port is in use (one line: which endpoint, the port, the fix).
        UsageError: ``host`` is not an address of this machine.
    """
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as err:
            if err.errno == 98:  # EADDRINUSE
                raise ArtifactError(f"{what} port {port} on {host} is in use (another server?): stop it or give "
                                    f"--{what}-port N (0 picks a free one)") from None
            raise UsageError(f"cannot listen on {host}:{port} for {what}: {err.strerror or err} (--host takes an "
                             f"address of this machine; 0.0.0.0 listens on all of them)") from None


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to send SIGTERM to this (child) process when its parent dies (Linux ``prctl``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: nothing to do
        pass


def _load_errors(lines: list[str]) -> list[str]:
    """Triton's own reasons for models it could not load, from its log: ``model 'x': reason`` (list[str])."""
    out = []
    for line in lines:
        m = re.search(r"failed to load '([^']+)'(?: version \d+)?: (.*)$", line)
        if m:
            out.append(f"model '{m.group(1)}': {_clean_reason(m.group(2))}")
    if not out:  # the model status table: "| name | 1 | UNAVAILABLE: reason |"
        for line in lines:
            m = re.match(r"\|\s*(\S+)\s*\|\s*\d+\s*\|\s*UNAVAILABLE: (.*?)\s*\|\s*$", line)
            if m:
                out.append(f"model '{m.group(1)}': {_clean_reason(m.group(2))}")
    return out


def _clean_reason(text: str) -> str:
    """Triton's reason without the Python traceback it carries (escaped ``\\n`` or real newlines, ``At:`` and
    the stack below): its first meaningful line (str)."""
    text = text.replace("\\n", "\n").replace("\\t", " ")
    lines = [ln.strip() for ln in text.splitlines()]
    keep = []
    for ln in lines:
        if ln in ("At:", "Traceback (most recent call last):") or ln.startswith("At: "):
            break
        if ln:
            keep.append(ln)
    out = keep[0] if keep else text.strip()
    return out.rstrip(chr(34)).strip()


def check_manifest_hashes(repo: str | Path) -> int:
    """Check every file a repository's ``manifest.json`` hashes (any ``{"file": ..., "sha256": ...}`` entry with a
    path inside the repository: ``model``, ``artifact`` (config.pbtxt), ``triton.model_py``) against its sha256,
    before Triton loads it.

    A folder without manifest.json (a repository not written by cosyedge, or one assembled from several) is not
    checked.

    Args:
        repo (str | Path): The model repository.
    Returns:
        int: the number of files checked.
    Raises:
        ArtifactError: a hashed file is missing or differs from its hash (edited or corrupt): one line naming it.
    """
    import json

    from cosyedge.artifacts import sha256_file

    repo = Path(repo)
    path = repo / "manifest.json"
    if not path.is_file():
        return 0
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ArtifactError(f"{path} is not readable JSON ({err}): rebuild the repository") from None
    entries: list[tuple[str, str]] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            f, h = node.get("file"), node.get("sha256")
            if (isinstance(f, str) and isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)
                    and not Path(f).is_absolute() and ".." not in Path(f).parts):  # files of the repository only
                entries.append((f, h))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(manifest)
    for f, h in dict.fromkeys(entries):
        p = repo / f
        if not p.is_file():
            raise ArtifactError(f"{repo}: {f} is missing (the manifest lists it): rebuild the repository with "
                                f"'cosyedge build --backend triton'")
        if sha256_file(p) != h:
            raise ArtifactError(f"{repo}: {f} does not match its sha256 in manifest.json (edited or corrupt): "
                                f"rebuild the repository with 'cosyedge build --backend triton'")
    return len(entries)


def _flock(fd: int, blocking: bool) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except OSError:
        return False


def clean_stale_shm(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove the Python-backend shm regions of ``cosyedge serve`` runs that are over (a server killed with
    SIGKILL leaves ``/dev/shm/<prefix>*``): a run's regions are known by its prefix, and the run is over when
    nobody holds its ``<prefix>lock`` (the serving process and its tritonserver hold it while they live).

    Returns:
        list[str]: the names removed.
    """
    removed: list[str] = []
    if not shm_dir.is_dir():
        return removed
    for lock in shm_dir.glob(f"{SHM_PREFIX}*_lock"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:
            continue
        try:
            if not _flock(fd, blocking=False):
                continue  # a live run
            prefix = lock.name[:-len("lock")]
            for f in shm_dir.glob(f"{glob_escape(prefix)}*"):
                if f != lock:
                    with contextlib.suppress(OSError):
                        f.unlink()
                        removed.append(f.name)
            with contextlib.suppress(OSError):
                lock.unlink()
                removed.append(lock.name)
        finally:
            os.close(fd)
    return removed


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped (str)."""
    import glob

    return glob.escape(text)


def _error_lines(lines: list[str]) -> list[str]:
    """Triton's error lines (``E1207 ...] message`` -> ``message``), noise removed."""
    return [re.sub(r"^E\d{4} [\d:.]+ +\d+ [^\]]*\] ", "", ln).strip() for ln in lines
            if re.match(r"^E\d{4} ", ln) and not _NOISE.search(ln)]


class TritonServer:
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
    def _check_repo(self) -> None:
        if not self.repo.is_dir():
            raise ArtifactError(f"model repository {self.repo} not found (build one with 'cosyedge build --backend "
                                f"triton --triton-backend python')")
        self.models = sorted(p.name for p in self.repo.iterdir() if (p / "config.pbtxt").is_file())
        if not self.models:
            raise ArtifactError(f"{self.repo} holds no model (no <model>/config.pbtxt): give the folder 'cosyedge "
                                f"build --backend triton' printed")
        check_manifest_hashes(self.repo)
        for m in self.models:
            cfg = (self.repo / m / "config.pbtxt").read_text(errors="replace")
            if re.search(r'^\s*backend\s*:\s*"python"', cfg, re.M) and not SHELL_SAFE_PATH.match(m):
                raise ArtifactError(f"{self.repo}: model folder {m!r} cannot be served by Triton's Python backend "
                                    f"(it launches the model through a shell command line: letters, digits and "
                                    f"'_.+,:=@%-' only); rebuild with another --name")

    def _backends(self, inst: TritonInstall) -> Path:
        """The backend folder to give Triton: the install's own, or (a stub to place) a private copy of its
        Python backend with the stub beside ``libtriton_python.so``."""
        if inst.stub is None:
            return inst.backends
        dst = self._private_dir() / "backends" / "python"
        dst.mkdir(parents=True)
        for f in (inst.backends / "python").iterdir():
            if f.is_file():
                shutil.copy2(f, dst / f.name)
        shutil.copy2(inst.stub, dst / "triton_python_backend_stub")
        self._check_stub(dst / "triton_python_backend_stub", inst)
        return self._tmp / "backends"

    def _check_stub(self, stub: Path, inst: TritonInstall) -> None:
        """Refuse a stub whose shared libraries are missing (it links ``libpython3.X.so.1.0``, which a Python built
        without ``--enable-shared`` does not provide: the system's package does)."""
        env = self._env(inst)
        try:
            r = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, env=env, timeout=30)
        except (OSError, subprocess.TimeoutExpired):  # no ldd: Triton's own error will say it
            return
        missing = [ln.split("=>")[0].strip() for ln in r.stdout.splitlines() if "not found" in ln]
        if missing:
            ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
            self._cleanup()
            raise DependencyError(f"Triton's Python-backend stub cannot load {', '.join(missing)}: install it "
                                  f"(Debian/Ubuntu: apt-get install libpython{ver})")

    def _env(self, inst: TritonInstall) -> dict[str, str]:
        import cosyedge

        env = dict(os.environ)
        if inst.libs is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(inst.libs), env.get("LD_LIBRARY_PATH")]))
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        pkg_parent = str(Path(cosyedge.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_parent, env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

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

    def _repo_for_triton(self) -> Path:
        """The repository path to give Triton: the real one, or a symlink to it in the private folder when the path
        holds a character the Python backend's stub command line cannot take (a space, a quote...)."""
        real = self.repo.resolve()
        if SHELL_SAFE_PATH.match(str(real)):
            return real
        link = self._private_dir() / "repository"
        link.symlink_to(real, target_is_directory=True)
        if not SHELL_SAFE_PATH.match(str(link)):
            raise ArtifactError(f"the path of {self.repo} has a character Triton's Python backend cannot take "
                                f"(a space or a shell character), and so has the temporary folder {link.parent}: "
                                f"move the repository or set TMPDIR")
        LOG.debug("serving %s through %s (its path has a character Triton's stub command line cannot take)", real,
                  link)
        return link

    def _claim_shm(self) -> list[str]:
        """Clean the shm regions of ``cosyedge serve`` runs that are over, then claim this run's prefix: a lock
        file ``/dev/shm/<prefix>lock`` held (flock) by this process and the server. Returns the tritonserver flags
        (``--backend-config=python,shm-region-prefix-name=<prefix>``), none where there is no ``/dev/shm``."""
        if not SHM_DIR.is_dir() or not os.access(SHM_DIR, os.W_OK):
            return []
        stale = clean_stale_shm()
        if stale:
            LOG.info("removed %d shared-memory regions of Triton servers that are gone: %s", len(stale),
                     ", ".join(stale[:4]) + (" ..." if len(stale) > 4 else ""))
        import secrets

        prefix = f"{SHM_PREFIX}{os.getpid()}{secrets.token_hex(4)}_"
        tmp_lock = SHM_DIR / f".{prefix}lock.tmp"
        try:
            fd = os.open(tmp_lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            _flock(fd, blocking=True)
            os.rename(tmp_lock, SHM_DIR / f"{prefix}lock")  # appears already locked: never taken for stale
        except OSError as err:
            LOG.debug("no shm lock (%s): Triton's default shm prefix", err)
            return []
        self._lock_fd, self.shm_prefix = fd, prefix
        return [f"--backend-config=python,shm-region-prefix-name={prefix}"]

    def _release_shm(self) -> None:
        """Remove this run's shm regions (after the server and its stubs are gone) and its lock."""
        if self.shm_prefix is None or self._lock_fd is None:
            return
        for f in SHM_DIR.glob(f"{glob_escape(self.shm_prefix)}*"):
            with contextlib.suppress(OSError):
                f.unlink()
        os.close(self._lock_fd)
        self._lock_fd = None

    def shm_regions(self) -> list[Path]:
        """list[Path]: this run's shm files now (its regions and its lock)."""
        if self.shm_prefix is None:
            return []
        return sorted(SHM_DIR.glob(f"{glob_escape(self.shm_prefix)}*"))

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

    def _last_words(self) -> str:
        errs = _error_lines(self.log_tail)
        return errs[-1] if errs else ""

    def _load_failure(self, loads: list[str]) -> ArtifactError:
        """The one-line error of a model Triton could not load (its reason, and the fix for a missing backend)."""
        hint = ""
        m = re.search(r"unable to find backend library for backend '([^']+)'", loads[0])
        if m:
            hint = (f" (this tritonserver has no '{m.group(1)}' backend: the nvidia-pytriton wheel has only the "
                    f"Python backend; build with --triton-backend python, or serve this repository in NVIDIA's "
                    f"container)")
        return ArtifactError(f"Triton cannot load the repository {self.repo}: {loads[0]}{hint}")

    def _startup_error(self) -> Exception:
        """The one-line error of a server that exited while starting (Triton's reason)."""
        lines = self.log_tail
        code = self._proc.returncode
        loads = _load_errors(lines)
        text = "\n".join(lines)
        if loads:
            return self._load_failure(loads)
        m = re.search(r"(Socket '[^']+' already in use|Address already in use|failed to start [A-Za-z]+ service[^\n]*)",
                      text)
        if m:
            return ArtifactError(f"tritonserver cannot listen: {m.group(1)} (stop the other server or give other "
                                 f"ports; 0 picks free ones)")
        m = re.search(r"(error while loading shared libraries: [^\n]*)", text)
        if m:
            return DependencyError(f"tritonserver cannot start: {m.group(1)}")
        why = self._last_words() or (lines[-1] if lines else "no output")
        return ArtifactError(f"tritonserver exited with status {code} while starting: {why}")

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


def parse_metrics(text: str) -> dict[str, float]:
    """Sum Prometheus text-format samples by metric name (labels dropped): dict[str, float]."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+(\S+)", line)
        if m:
            with contextlib.suppress(ValueError):
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


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
