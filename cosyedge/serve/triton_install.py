"""Find a ``tritonserver`` and set up what it needs to run cosyedge's Python-backend models.

:func:`find_tritonserver` locates the server (``--tritonserver PATH``, the nvidia-pytriton wheel, or ``PATH``) as a
:class:`TritonInstall`; :func:`wheel_supported` says whether the wheel can install here; :class:`BackendSetup` (mixed
into :class:`~cosyedge.serve.server.TritonServer`) builds the backend folder Triton is given (a private copy of the
wheel's Python backend with the running Python's stub beside it) and the server's environment (the wheel's libraries,
the running virtual environment and cosyedge package first on the search paths).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cosyedge.errors import ArtifactError, DependencyError

SERVE_EXTRA = "pip install 'cosyedge[serve]'"
"""str: what installs the server (nvidia-pytriton) and the gRPC client (tritonclient[grpc])."""


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


class BackendSetup:
    """The backend folder and environment of a :class:`~cosyedge.serve.server.TritonServer` (a mixin: it uses the
    server's ``_private_dir()``, ``_tmp`` and ``_cleanup()``)."""

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
