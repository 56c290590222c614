"""The addresses and ports ``cosyedge serve`` binds: defaults, a free port, and a port already in use refused in one
line before ``tritonserver`` starts.
"""

from __future__ import annotations

import socket

from cosyedge.errors import ArtifactError, UsageError

DEFAULT_HOST = "127.0.0.1"
"""str: the address every endpoint binds to unless told otherwise (loopback: not reachable from other machines)."""
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
"""dict[str, int]: Triton's own default ports."""


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
