"""cosyedge doctor: one screen of what this machine can do; exit 0 whatever is missing or broken."""

from __future__ import annotations

import importlib.abc
import json
import subprocess
import sys
import types

import pytest

from cosyedge import doctor

AREAS = ("python", "cosyedge", "onnxruntime", "tensorrt", "gpu", "cuda bindings", "cpu", "audio", "triton", "engines")

ORIN_CPUINFO = """processor\t: 0
model name\t: ARMv8 Processor rev 1 (v8l)
BogoMIPS\t: 62.50
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat
CPU implementer\t: 0x41
CPU part\t: 0xd42

processor\t: 1
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat
"""
XEON_CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512_vnni amx_bf16 amx_tile amx_int8
"""


class _RaiseOnImport(importlib.abc.MetaPathFinder):
    """Makes ``import <name>`` raise ``exc`` (a TensorRT whose libnvinfer is missing, a PortAudio that fails)."""

    def __init__(self, name: str, exc: BaseException):
        self.name, self.exc = name, exc

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise self.exc
        return None


def _break_import(monkeypatch, name: str, exc: BaseException) -> None:
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(sys, "meta_path", [_RaiseOnImport(name, exc), *sys.meta_path])


@pytest.fixture
def report(cli, tmp_path, monkeypatch):
    """Run ``cosyedge doctor --json`` (engines in an empty private folder): (exit code, {name: check})."""
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))

    def run():
        rc, out, err = cli("doctor", "--json")
        return rc, json.loads(out)["checks"]

    return run


def test_doctor_prints_one_line_per_area_and_exits_0(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    rc, out, err = cli("doctor")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("cosyedge doctor (")
    for area in AREAS:
        assert any(line[3:].startswith(area + " ") for line in lines), (area, out)
    assert len(lines) <= 40  # one screen


def test_every_missing_piece_says_how_to_get_it(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # not installed
    monkeypatch.setitem(sys.modules, "pycuda", None)
    rc, checks = report()
    assert rc == 0 and set(AREAS) <= set(checks), checks.keys()
    assert checks["tensorrt"]["status"] == "missing" and "pip install 'cosyedge[trt]'" in checks["tensorrt"]["hint"]
    assert "system-site-packages" in checks["tensorrt"]["hint"]  # the Jetson way
    for name, c in checks.items():
        assert c["status"] in ("ok", "missing", "broken", "info"), (name, c)
        if c["status"] in ("missing", "broken"):
            assert c["hint"], (name, c)


@pytest.mark.parametrize("exc, status", [
    (OSError("libnvinfer.so.10: cannot open shared object file: No such file or directory"), "broken"),
    (ImportError("libnvinfer.so.10: cannot open shared object file: No such file or directory"), "broken"),
    (RuntimeError("TensorRT initialisation failed"), "broken"),
])
def test_broken_tensorrt_is_reported_and_doctor_exits_0(report, monkeypatch, exc, status):
    _break_import(monkeypatch, "tensorrt", exc)
    rc, checks = report()
    assert rc == 0
    trt = checks["tensorrt"]
    assert trt["status"] == status and str(exc) in trt["summary"] and trt["hint"], trt
    assert checks["onnxruntime"]["status"] == "ok"  # the rest of the report is still there


def test_tensorrt_package_without_its_compiled_module_is_broken_not_missing(report, monkeypatch):
    """JetPack's bindings seen from another Python: the ``tensorrt`` package is there, ``tensorrt.tensorrt`` is not."""
    err = ModuleNotFoundError("No module named 'tensorrt.tensorrt'", name="tensorrt.tensorrt")
    _break_import(monkeypatch, "tensorrt", err)
    rc, checks = report()
    assert rc == 0 and checks["tensorrt"]["status"] == "broken", checks["tensorrt"]
    assert "tensorrt.tensorrt is missing" in checks["tensorrt"]["summary"]


def test_a_module_that_exits_at_import_does_not_end_the_report(report, monkeypatch):
    _break_import(monkeypatch, "tensorrt", SystemExit(1))
    rc, checks = report()
    assert rc == 0 and checks["tensorrt"]["status"] == "broken" and checks["onnxruntime"]["status"] == "ok"


def test_engines_path_that_is_a_file_is_named_not_a_folder(cli, tmp_path, monkeypatch):
    f = tmp_path / "engines"
    f.write_text("x")
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(f))
    rc, out, err = cli("doctor", "--json")
    eng = json.loads(out)["checks"]["engines"]
    assert rc == 0 and eng["status"] == "broken" and "not a folder" in eng["summary"], eng


def test_portaudio_missing_is_reported_with_the_package_to_install(report, monkeypatch):
    _break_import(monkeypatch, "sounddevice", OSError("PortAudio library not found"))
    rc, checks = report()
    assert rc == 0
    audio = checks["audio"]
    assert audio["status"] in ("missing", "broken") and "PortAudio library not found" in audio["summary"]
    assert "libportaudio2" in audio["hint"], audio


def test_audio_library_failing_while_listing_devices_is_reported(report, monkeypatch):
    from tests.realtime.fakes import PortAudioError, fake_sounddevice

    sd = fake_sounddevice([])

    def broken():
        raise PortAudioError("Error querying device -1")

    sd.query_devices = broken
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    rc, checks = report()
    assert rc == 0 and checks["audio"]["status"] == "broken", checks["audio"]
    assert "Error querying device" in checks["audio"]["summary"] and checks["audio"]["hint"]


def test_audio_lists_input_devices_only(report, monkeypatch):
    from tests.realtime.fakes import fake_sounddevice

    devices = [{"name": "USB PnP Sound Device", "max_input_channels": 1, "max_output_channels": 0,
                "default_samplerate": 48000.0},
               {"name": "HDMI out", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 48000.0}]
    monkeypatch.setitem(sys.modules, "sounddevice", fake_sounddevice(devices, default=(0, 1)))
    rc, checks = report()
    audio = checks["audio"]
    assert rc == 0 and audio["status"] == "ok" and "0: USB PnP Sound Device (default)" in audio["summary"]
    assert "HDMI" not in audio["summary"] and len(audio["details"]["inputs"]) == 1


def test_tensorrt_and_gpu_of_a_jetson_are_named(report, monkeypatch):
    from tests.trt import fakes

    stack = fakes.install(monkeypatch, version="10.3.0", gpus=(("Orin", (8, 7)),))
    monkeypatch.setattr(stack.cuda, "get_driver_version", lambda: 12060, raising=False)
    rc, checks = report()
    assert rc == 0
    assert checks["tensorrt"]["status"] == "ok" and checks["tensorrt"]["summary"].startswith("10.3.0 (strongly typed")
    gpu = checks["gpu"]
    assert gpu["status"] == "ok" and "Orin (compute capability 8.7" in gpu["summary"] and "CUDA 12.6" in gpu["summary"]


def test_tensorrt_too_old_for_cosyedge_is_reported_not_raised(report, monkeypatch):
    from tests.trt import fakes

    fakes.install(monkeypatch, version="8.2.1")
    rc, checks = report()
    assert rc == 0 and checks["tensorrt"]["status"] == "broken"
    assert "TensorRT 8.2.1 is too old" in checks["tensorrt"]["summary"]


def test_gpu_without_an_answering_driver_is_missing_with_a_hint(report, monkeypatch):
    from tests.trt import fakes

    stack = fakes.install(monkeypatch)

    def no_driver():
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")

    monkeypatch.setattr(stack.cuda, "init", no_driver)
    rc, checks = report()
    assert rc == 0 and checks["gpu"]["status"] == "missing"
    assert "no CUDA-capable device" in checks["gpu"]["summary"] and "tegrastats" in checks["gpu"]["hint"]


@pytest.mark.parametrize("text, machine, want, absent", [
    (ORIN_CPUINFO, "aarch64", {"dot product (SDOT/UDOT)"}, {"I8MM (SMMLA)", "SVE"}),
    (XEON_CPUINFO, "x86_64", {"AVX2", "AVX-512 VNNI", "AMX-INT8"}, {"AVX-VNNI"}),
])
def test_cpu_int8_features_are_read_from_cpuinfo(text, machine, want, absent):
    info = doctor.cpu_features(text, machine)
    have = {n for n, ok in info["int8"].items() if ok}
    assert want <= have and not (absent & have), info
    assert info["cores"] == text.count("processor\t:")


def test_cpu_line_says_when_int8_has_no_dot_product(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd aes crc32\n")
    monkeypatch.setattr(doctor.platform, "machine", lambda: "aarch64")
    f = doctor.check_cpu(str(cpuinfo))
    assert f.status == "info" and "no INT8 dot product (VNNI / SDOT)" in f.summary


def test_engines_folder_lists_cached_engines_and_unreadable_ones(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    assert cli("build", "-q")[0] == 0
    bad = tmp_path / "engines" / "broken-fp32-onnxruntime"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    rc, out, _ = cli("doctor", "--json")
    engines = json.loads(out)["checks"]["engines"]
    assert rc == 0 and [e["folder"] for e in engines["details"]["engines"]] == ["reference-fp32-onnxruntime"]
    assert engines["details"]["engines"][0]["backend"] == "onnxruntime"
    assert "broken-fp32-onnxruntime" in engines["summary"] and "unreadable" in engines["summary"]


def test_a_check_that_raises_becomes_a_broken_line():
    def check_exploding():
        raise ValueError("unexpected")

    (f,) = doctor.collect((check_exploding,))
    assert f.name == "exploding" and f.status == "broken" and "unexpected" in f.summary


def test_doctor_module_imports_no_heavy_dependency():
    code = ("import sys, cosyedge.doctor, cosyedge.cli.doctor; "
            "print([m for m in ('onnxruntime', 'tensorrt', 'pycuda', 'sounddevice', 'onnx', 'torch') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_triton_is_found_on_path(report, monkeypatch, tmp_path):
    binary = tmp_path / "bin" / "tritonserver"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}:{__import__('os').environ['PATH']}")
    rc, checks = report()
    assert rc == 0 and checks["triton"]["status"] == "ok" and str(binary) in checks["triton"]["summary"]


def test_jetson_board_and_release_are_named(tmp_path):
    model, release = tmp_path / "model", tmp_path / "nv_tegra_release"
    model.write_text("NVIDIA Jetson Orin Nano Developer Kit\x00")
    release.write_text("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64\n")
    f = doctor.check_jetson(str(model), str(release))
    assert f is not None and "Jetson Orin Nano" in f.summary and "R36 (release), REVISION: 4.3" in f.summary
    assert doctor.check_jetson(str(tmp_path / "absent"), str(release)) is None


def test_audio_server_is_found_by_its_socket(tmp_path):
    (tmp_path / "pulse").mkdir()
    (tmp_path / "pulse" / "native").write_text("")
    assert doctor.audio_server({"XDG_RUNTIME_DIR": str(tmp_path)}).startswith("PulseAudio")
    assert doctor.audio_server({"XDG_RUNTIME_DIR": str(tmp_path / "none")}) is None
    assert "tcp:host" in doctor.audio_server({"PULSE_SERVER": "tcp:host"})


def test_doctor_is_listed_in_the_cli_help(cli):
    rc, out, _ = cli("--help")
    assert rc == 0 and "doctor" in out


def test_onnxruntime_older_than_the_oldest_tested_is_flagged(report, monkeypatch):
    fake = types.ModuleType("onnxruntime")
    fake.__version__ = "1.17.3"
    fake.get_available_providers = lambda: ["CPUExecutionProvider"]
    monkeypatch.setitem(sys.modules, "onnxruntime", fake)
    rc, checks = report()
    ort = checks["onnxruntime"]
    assert rc == 0 and ort["status"] == "broken" and "older than 1.23.2" in ort["summary"]
    assert ort["hint"] == "pip install 'onnxruntime>=1.23.2'"
