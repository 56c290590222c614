"""Finding tritonserver, reading its log and metrics, and the client's address check: the parts of serving that need
no server (they run everywhere, also where the nvidia-pytriton wheel cannot install)."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from cosyedge.errors import ArtifactError, DependencyError, UsageError
from cosyedge.serve import server as srvmod
from cosyedge.serve.client import parse_server


def test_no_tritonserver_is_one_line_with_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytriton" else real(name, *a))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    with pytest.raises(DependencyError, match=r"no tritonserver found: pip install 'cosyedge\[serve\]'"):
        srvmod.find_tritonserver()
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    with pytest.raises(DependencyError, match="x86-64 Linux .* only, this is Linux aarch64"):
        srvmod.find_tritonserver()
    with pytest.raises(ArtifactError, match="--tritonserver .*: not an executable file"):
        srvmod.find_tritonserver(tmp_path / "tritonserver")
    exe = tmp_path / "bin" / "tritonserver"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    inst = srvmod.find_tritonserver(exe)
    assert inst.backends == tmp_path / "backends" and inst.stub is None and inst.source == "--tritonserver"


def test_wheel_support_names_the_platform(monkeypatch):
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setattr("platform.libc_ver", lambda: ("glibc", "2.31"))
    assert "glibc >= 2.35 (this has glibc 2.31)" in srvmod.wheel_supported()
    monkeypatch.setattr("platform.libc_ver", lambda: ("glibc", "2.36"))
    assert srvmod.wheel_supported() is None
    monkeypatch.setattr("platform.system", lambda: "Darwin")
    assert "x86-64 Linux only" in srvmod.wheel_supported()


def test_triton_load_errors_and_metrics_are_read_from_its_own_text():
    log = ['I1207 12:00:00.1 1 model_lifecycle.cc:472] "loading: m:1"',
           "E1207 12:00:01.2 1 model_lifecycle.cc:642] \"failed to load 'm' version 1: Internal: ArtifactError: "
           "bad model\"",
           "| m     | 1       | UNAVAILABLE: Internal: ArtifactError: bad model |"]
    assert srvmod._load_errors(log) == ["model 'm': Internal: ArtifactError: bad model"]
    assert srvmod._load_errors(log[2:]) == ["model 'm': Internal: ArtifactError: bad model"]
    text = ('# HELP nv_inference_exec_count x\nnv_inference_exec_count{model="a",version="1"} 3\n'
            'nv_inference_exec_count{model="b",version="1"} 4\ncosyedge_sequences_active{model="a"} 2\n')
    assert srvmod.parse_metrics(text) == {"nv_inference_exec_count": 7.0, "cosyedge_sequences_active": 2.0}


def test_a_port_in_use_is_refused_before_the_server_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ArtifactError, match=f"grpc port {port} on 127.0.0.1 is in use"):
            srvmod.check_port("127.0.0.1", port, "grpc")
    with pytest.raises(UsageError, match="--host takes an address of this machine"):
        srvmod.check_port("192.0.2.1", 0, "grpc")  # TEST-NET-1: never an address of this machine
    assert 0 < srvmod.free_port() < 65536


@pytest.mark.parametrize("spec", ["localhost", "localhost:0", "localhost:70000", "http://localhost:8001", ":8001",
                                  "a b:8001", ""])
def test_server_addresses_are_checked(spec):
    with pytest.raises(UsageError, match="HOST:PORT|no scheme"):
        parse_server(spec)


@pytest.mark.parametrize("spec", ["127.0.0.1:8001", "localhost:1", "[::1]:8001", "triton.example:65535"])
def test_good_server_addresses_pass(spec):
    assert parse_server(spec) == spec


def test_serving_a_missing_or_empty_folder_is_one_line(tmp_path, cli):
    rc, _, err = cli("serve", tmp_path / "none")
    assert rc == 3 and "model repository" in err and "not found" in err and err.count("\n") == 1
    rc, _, err = cli("serve", tmp_path)
    assert rc == 3 and "holds no model" in err and err.count("\n") == 1
    rc, _, err = cli("serve", tmp_path, "--grpc-port", "70000")
    assert rc == 2 and "--grpc-port" in err


@pytest.mark.parametrize("host", ["999.1.1.1", "no-such-host.invalid"])
def test_a_free_port_on_an_address_that_is_not_this_machines_is_one_usage_error(host):
    """Was a socket.gaierror traceback (exit 1) from ``serve --host 999.1.1.1`` with a port of 0."""
    from cosyedge.errors import UsageError
    from cosyedge.serve.server import free_port

    with pytest.raises(UsageError, match=f"cannot listen on {host}: .*--host takes an address of this machine"):
        free_port(host)


def test_tensor_exchange_follows_the_running_numpy(monkeypatch):
    """numpy 1 (what cosyedge[serve] resolves): Tensor(name, array)/as_numpy(); numpy 2: DLPack (Triton 2.51's stub
    reads numpy 2 arrays wrongly, and its from_dlpack fails under numpy 1)."""
    import numpy as np

    from cosyedge.serve import model

    monkeypatch.delenv(model.TENSOR_EXCHANGE_ENV, raising=False)
    monkeypatch.setattr(np, "__version__", "1.26.4")
    assert model.tensor_exchange() == "numpy"
    monkeypatch.setattr(np, "__version__", "2.4.6")
    assert model.tensor_exchange() == "dlpack"
    monkeypatch.setenv(model.TENSOR_EXCHANGE_ENV, "numpy")
    assert model.tensor_exchange() == "numpy"

    class T:
        def __init__(self, name=None, a=None):
            self.a = a

        def as_numpy(self):
            return self.a

        def __dlpack__(self, *args, **kw):
            return self.a.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

        @classmethod
        def from_dlpack(cls, name, obj):
            return cls(name, np.from_dlpack(obj))

    pb = type("pb", (), {"Tensor": T})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for ex in ("numpy", "dlpack"):
        t = model.output_tensor(pb, "y", x[:, ::2], ex)  # a strided view: the tensor owns a contiguous copy
        assert t.a.flags.c_contiguous and (model.tensor_array(t, ex) == x[:, ::2]).all()


def test_load_failure_reason_is_its_first_line_without_the_python_stack():
    lines = ['E1207 15:40:34.802922 16166 model_lifecycle.cc:642] "failed to load \'reference\' version 1: Internal: '
             'ArtifactError: cannot read ONNX file /r/reference/1/model.onnx: bad\\n\\nAt:\\n  '
             '/x/cosyedge/artifacts/files.py(44): load_onnx\\n  /x/cosyedge/serve/model.py(298): initialize\\n"']
    assert srvmod._load_errors(lines) == ["model 'reference': Internal: ArtifactError: cannot read ONNX file "
                                          "/r/reference/1/model.onnx: bad"]


def test_manifest_hashes_are_checked(tmp_path):
    import hashlib
    import json

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.bin").write_bytes(b"abc")
    h = hashlib.sha256(b"abc").hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps({"model": {"file": "m/a.bin", "sha256": h},
                                                         "parent": {"file": "/elsewhere/src.onnx", "sha256": h}}))
    assert srvmod.check_manifest_hashes(tmp_path) == 1
    (tmp_path / "m" / "a.bin").write_bytes(b"abd")
    with pytest.raises(ArtifactError, match=r"m/a.bin does not match its sha256 in manifest.json"):
        srvmod.check_manifest_hashes(tmp_path)
    (tmp_path / "m" / "a.bin").unlink()
    with pytest.raises(ArtifactError, match=r"m/a.bin is missing"):
        srvmod.check_manifest_hashes(tmp_path)


def test_a_repository_without_manifest_is_served_with_a_warning(tmp_path, capsys):
    """A folder not written by cosyedge has nothing to check its files against: serve says so (it used to say
    nothing)."""
    from cosyedge.serve.repo_checks import RepositoryChecks

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "python"\n')
    checks = RepositoryChecks()
    checks.repo = tmp_path
    checks._check_repo()
    assert checks.models == ["m"]
    assert "has no manifest.json" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text("{}")
    checks._check_repo()
    assert "manifest.json" not in capsys.readouterr().err
