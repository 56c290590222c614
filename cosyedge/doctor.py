"""``cosyedge doctor``: what this machine can do, in one screen (or one JSON object).

Each check returns a :class:`Finding`: found (with its version or value), missing (with the command that gets
it) or broken (the library is there but fails to load: a ``libnvinfer`` that does not match, a PortAudio
that cannot open ALSA); informational findings (CPU, engines) carry no verdict. No check raises: a failure
of any kind becomes a finding, so ``cosyedge doctor`` always exits 0.

Heavy or optional modules (onnxruntime, tensorrt, pycuda, cuda-python, sounddevice) are imported inside
their check, never at import time; the CPU features are read from ``/proc/cpuinfo`` (no subprocess).

Sources: INT8 instruction names as the Linux kernel prints them in ``/proc/cpuinfo`` (x86 ``flags``:
``avx2``, ``avx512_vnni``, ``avx_vnni``, ``amx_int8``; arm64 ``Features``: ``asimddp`` = dot product,
``i8mm``, ``sve``, ``sve2``, ``sme``); Jetson identification from ``/proc/device-tree/model`` and
``/etc/nv_tegra_release`` (L4T release line), as NVIDIA's jetson-stats reads them.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from cosyedge import __version__
from cosyedge.errors import first_line

TRT_HINT = ("pip install 'cosyedge[trt]' on an NVIDIA GPU machine; on Jetson use JetPack's TensorRT "
            "(sudo apt install nvidia-jetpack) in a venv made with --system-site-packages (docs/jetson.md)")
PYCUDA_HINT = "pip install pycuda (builds against the CUDA toolkit: nvcc on PATH; JetPack ships it)"
CUDA_PYTHON_HINT = ("pip install 'cuda-python>=12.0' (CUDA graphs: TrtStreamSession(..., cuda_graph=True) from "
                    "Python)")
ORT_OLDEST = "1.23.2"
"""str: pyproject's lower bound of onnxruntime (tests/test_dependency_bounds.py keeps them equal)."""
ORT_HINT = "pip install onnxruntime"
AUDIO_HINT = "pip install 'cosyedge[audio]'"
PORTAUDIO_HINT = "apt-get install libportaudio2 (Debian/Ubuntu/Jetson)"
TRITON_HINT = ("pip install -e '.[serve]' (x86-64, glibc >= 2.35: nvidia-pytriton 0.7.0 brings a tritonserver binary, "
               "tritonclient the gRPC client) or use NVIDIA's Triton container; docs/triton.md")

X86_INT8 = (("avx2", "AVX2"), ("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"), ("amx_int8", "AMX-INT8"))
"""tuple[tuple[str, str]]: x86 ``/proc/cpuinfo`` flag -> name, for the instructions ONNX Runtime's INT8 kernels use."""
ARM_INT8 = (("asimddp", "dot product (SDOT/UDOT)"), ("i8mm", "I8MM (SMMLA)"), ("sve", "SVE"), ("sve2", "SVE2"),
            ("sme", "SME"))
"""tuple[tuple[str, str]]: arm64 ``Features`` -> name, same purpose."""
DOT_PRODUCT = ("AVX-512 VNNI", "AVX-VNNI", "AMX-INT8", "dot product (SDOT/UDOT)", "I8MM (SMMLA)")
"""tuple[str]: the features above that multiply-accumulate INT8 in one instruction."""


@dataclasses.dataclass
class Finding:
    """One line of the report.

    Attributes:
        name (str): What was checked (``onnxruntime``, ``tensorrt``...).
        status (str): ``ok`` | ``missing`` | ``broken`` | ``info``.
        summary (str): One line: the version / value, or what is wrong.
        hint (str): How to get or repair it (empty when ``ok``/``info``).
        details (dict): Structured values for ``--json`` (versions, providers, devices...).
    """

    name: str
    status: str
    summary: str
    hint: str = ""
    details: dict = dataclasses.field(default_factory=dict)


def _version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _import_failure(name: str, err: BaseException) -> tuple[str, str]:
    """Classify a failed ``import name``: (``missing``, ...) when the module itself is not installed, else
    (``broken``, ...): installed but failing (an OSError from a shared library, an ImportError inside it...)."""
    if isinstance(err, ModuleNotFoundError) and (err.name or "") == name:
        return "missing", f"{name} is not installed"
    if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == name.split(".")[0]:
        # the package is there but its compiled part is not (e.g. tensorrt.tensorrt: JetPack's bindings seen from
        # another Python version)
        return "broken", (f"{name} is installed but its module {err.name} is missing (built for another Python or "
                          f"platform?)")
    return "broken", f"{name} is installed but does not import: {first_line(err)}"


def _import(name: str):
    """Import module ``name``: (module, None), or (None, :func:`_import_failure`)."""
    try:
        return importlib.import_module(name), None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - ImportError, OSError (a missing .so), RuntimeError, a
        # module that calls sys.exit(): reported, not raised (doctor always exits 0)
        return None, _import_failure(name, err)


# ------------------------------------------------------------------------------------------------ checks
def check_python() -> Finding:
    """Python version and executable."""
    v = platform.python_version()
    return Finding("python", "ok" if sys.version_info >= (3, 10) else "broken",
                   f"{v} ({platform.python_implementation()}, {sys.executable})",
                   "" if sys.version_info >= (3, 10) else "cosyedge needs Python >= 3.10",
                   {"version": v, "executable": sys.executable})


def check_cosyedge() -> Finding:
    """cosyedge version, location, and the versions of its base dependencies (numpy, onnx)."""
    where = str(Path(__file__).resolve().parent)
    deps = {d: _version_of(d) for d in ("numpy", "onnx", "onnx-graphsurgeon", "polygraphy")}
    dep_text = ", ".join(f"{d} {v or 'missing'}" for d, v in deps.items())
    missing = [d for d, v in deps.items() if v is None]
    return Finding("cosyedge", "broken" if missing else "ok", f"{__version__} ({where}); {dep_text}",
                   f"pip install {' '.join(missing)}" if missing else "",
                   {"version": __version__, "path": where, "dependencies": deps})


def check_onnxruntime() -> Finding:
    """onnxruntime version and execution providers."""
    ort, err = _import("onnxruntime")
    if ort is None:
        return Finding("onnxruntime", err[0], err[1], ORT_HINT)
    try:
        providers = list(ort.get_available_providers())
    except Exception as e:  # noqa: BLE001 - a broken build
        return Finding("onnxruntime", "broken", f"{ort.__version__}: get_available_providers failed: {first_line(e)}",
                       f"pip install --force-reinstall onnxruntime=={ort.__version__}")
    short = [p.replace("ExecutionProvider", "") for p in providers]
    details = {"version": ort.__version__, "providers": providers}
    if _release(ort.__version__) < _release(ORT_OLDEST):
        return Finding("onnxruntime", "broken", f"{ort.__version__} is older than {ORT_OLDEST}, the oldest cosyedge is "
                       f"tested with; providers: {', '.join(short)}", f"pip install 'onnxruntime>={ORT_OLDEST}'", details)
    return Finding("onnxruntime", "ok", f"{ort.__version__}; providers: {', '.join(short)}", "", details)


def _release(version: str) -> tuple[int, ...]:
    """(1, 23, 2) from ``"1.23.2"`` / ``"1.23.2.dev0"``: the leading numbers."""
    out = []
    for part in str(version).split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def check_tensorrt() -> Finding:
    """TensorRT bindings: version and whether cosyedge's version shim supports it."""
    try:
        import tensorrt as trt
    except (Exception, SystemExit) as err:  # noqa: BLE001 - ImportError, OSError (libnvinfer missing): reported
        return Finding("tensorrt", *_import_failure("tensorrt", err), TRT_HINT)
    from cosyedge.errors import CosyEdgeError
    from cosyedge.runtime.trt_compat import features

    version = str(getattr(trt, "__version__", "?"))
    try:
        feat = features(version, trt)
    except CosyEdgeError as e:
        return Finding("tensorrt", "broken", f"{version}: {e}", TRT_HINT, {"version": version})
    typing = "always strongly typed" if feat.always_strongly_typed else (
        "strongly typed" if feat.strongly_typed else "weakly typed (precision flags)")
    return Finding("tensorrt", "ok", f"{version} ({typing}; DLA {'yes' if feat.dla else 'refused'})", "",
                   {"version": version, "strongly_typed": feat.strongly_typed, "dla": feat.dla})


def cuda_toolkit(roots=("/usr/local/cuda",)) -> str | None:
    """The CUDA toolkit version: ``version.json`` of ``/usr/local/cuda`` (JetPack and NVIDIA's packages install it
    there), else ``nvcc --version`` on PATH; None when neither is found."""
    for root in roots:
        try:
            data = json.loads((Path(root) / "version.json").read_text())
            return f"{data['cuda']['version']} ({root})"
        except (OSError, ValueError, KeyError, TypeError):
            continue
    nvcc = shutil.which("nvcc")
    if nvcc:
        out = _run([nvcc, "--version"])
        for line in (out or "").splitlines():
            if "release" in line:
                return f"{line.split('release', 1)[1].split(',')[0].strip()} ({nvcc})"
    return None


def _run(cmd: list[str], timeout_s: float = 10.0) -> str | None:
    """stdout of ``cmd``, or None when it fails or times out."""
    import subprocess

    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _gpus_from_nvidia_smi() -> list[dict]:
    smi = shutil.which("nvidia-smi")
    out = _run([smi, "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"]) if smi else None
    gpus = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            mem = int(float(parts[2])) if len(parts) > 2 and parts[2].replace(".", "", 1).isdigit() else None
            gpus.append({"name": parts[0], "compute_capability": parts[1], "total_memory_mib": mem})
    return gpus


def check_gpu() -> Finding:
    """CUDA toolkit, driver and GPUs (name, compute capability, memory) through pycuda; without pycuda, what
    ``nvidia-smi`` says."""
    toolkit = cuda_toolkit()
    tk = f"CUDA toolkit {toolkit}" if toolkit else "no CUDA toolkit found (/usr/local/cuda, nvcc)"
    details: dict = {"cuda_toolkit": toolkit}
    try:
        import pycuda.driver as cuda
    except Exception as err:  # noqa: BLE001 - ImportError, OSError (libcuda missing): reported, not raised
        why = _import_failure("pycuda.driver", err)[1]
        gpus = _gpus_from_nvidia_smi()
        if gpus:
            text = "; ".join(f"{g['name']} (compute capability {g['compute_capability']})" for g in gpus)
            return Finding("gpu", "ok", f"{tk}; nvidia-smi: {text} ({why}: see 'cuda bindings')", "",
                           {**details, "gpus": gpus, "source": "nvidia-smi"})
        return Finding("gpu", "missing", f"{tk}; GPU not queried ({why}) and no nvidia-smi answered",
                       "a CUDA GPU and pycuda: " + PYCUDA_HINT, details)
    try:
        from cosyedge.runtime.trt import device_info

        cuda.init()
        count = cuda.Device.count()
        gpus = [device_info(cuda, i) for i in range(count)]
        driver = cuda.get_driver_version()
    except Exception as e:  # noqa: BLE001 - pycuda._driver.Error: no driver, no device
        return Finding("gpu", "missing", f"{tk}; no CUDA GPU answered: {first_line(e)}",
                       "check 'nvidia-smi' (desktop) or 'tegrastats' (Jetson) sees the GPU and the driver is loaded",
                       details)
    if not gpus:
        return Finding("gpu", "missing", f"{tk}; the CUDA driver found no GPU", "check 'nvidia-smi' / 'tegrastats'",
                       details)
    cuda_v = f"{driver // 1000}.{driver % 1000 // 10}"
    text = "; ".join(f"{i}: {g['name']} (compute capability {g['compute_capability']}, {g['total_memory_mib']} MiB)"
                     for i, g in enumerate(gpus))
    return Finding("gpu", "ok", f"{tk}; driver CUDA {cuda_v}; {text}", "",
                   {**details, "cuda_driver": cuda_v, "gpus": gpus, "source": "pycuda"})


def check_cuda_bindings() -> Finding:
    """pycuda and cuda-python versions (installed or not; nothing is initialised here)."""
    pycuda_v = _version_of("pycuda")
    cp = _version_of("cuda-python") or _version_of("cuda-bindings")
    parts = [f"pycuda {pycuda_v or 'missing'}", f"cuda-python {cp or 'missing'}"]
    hints = ([PYCUDA_HINT] if pycuda_v is None else []) + ([CUDA_PYTHON_HINT] if cp is None else [])
    status = "ok" if pycuda_v and cp else "missing"
    return Finding("cuda bindings", status, ", ".join(parts), "; ".join(hints), {"pycuda": pycuda_v, "cuda_python": cp})


def cpu_features(cpuinfo: str, machine: str) -> dict:
    """The INT8-relevant CPU features in a ``/proc/cpuinfo`` text.

    Args:
        cpuinfo (str): The file's text (x86 ``flags`` lines, arm64 ``Features`` lines).
        machine (str): ``platform.machine()`` (``x86_64``, ``aarch64``...).
    Returns:
        dict: ``{"model": str, "cores": int, "int8": {name: bool}}``; ``int8`` lists the features of that
        architecture (:data:`X86_INT8` or :data:`ARM_INT8`), empty for others.
    """
    flags: set[str] = set()
    model, cores = "", 0
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "processor":
            cores += 1
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key in ("model name", "hardware") and not model:
            model = value.strip()
    table = X86_INT8 if machine in ("x86_64", "AMD64", "i686") else ARM_INT8 if machine in ("aarch64", "arm64") else ()
    return {"model": model, "cores": cores, "int8": {name: flag in flags for flag, name in table}}


def check_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> Finding:
    """CPU architecture and the instructions INT8 speed on ONNX Runtime depends on."""
    machine = platform.machine()
    try:
        text = Path(cpuinfo_path).read_text(errors="replace")
    except OSError:
        text = ""
    info = cpu_features(text, machine)
    have = [n for n, ok in info["int8"].items() if ok]
    dot = [n for n in have if n in DOT_PRODUCT]
    if not info["int8"]:
        verdict = "INT8 features not known for this architecture"
    elif dot:
        verdict = f"INT8 instructions: {', '.join(have)} (dot product: {', '.join(dot)})"
    else:
        verdict = (f"INT8 instructions: {', '.join(have) or 'none'}; no INT8 dot product (VNNI / SDOT): INT8 on ONNX "
                   f"Runtime gains little or nothing over FP32 here")
    try:
        from cosyedge.compare.platforms import platform_of

        plat = platform_of(machine, text or None)
    except Exception:  # noqa: BLE001 - a broken numpy/onnx (imported by cosyedge.compare) is another check's line
        plat = {"fp16_compute": None}
    if plat["fp16_compute"] == "half":  # what cosyedge check's FP16 gate depends on (cosyedge.compare.platforms)
        verdict += ("; FP16 arithmetic (asimdhp): ONNX Runtime computes FP16 in half precision here, so `cosyedge "
                    "check` gates FP16 only against a baseline recorded on such a CPU")
    model = f" {info['model']}" if info["model"] else ""
    return Finding("cpu", "info", f"{machine}{model}, {os.cpu_count()} cores; {verdict}", "",
                   {"machine": machine, **info, "fp16_compute": plat["fp16_compute"]})


def check_jetson(model_path: str = "/proc/device-tree/model",
                 release_path: str = "/etc/nv_tegra_release") -> Finding | None:
    """A Jetson board and its L4T release, or None on other machines."""
    try:
        model = Path(model_path).read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None
    if "jetson" not in model.lower() and "nvidia" not in model.lower():
        return None
    try:
        release = Path(release_path).read_text(errors="replace").splitlines()[0].strip("# ")
    except (OSError, IndexError):
        release = "L4T release unknown (/etc/nv_tegra_release missing)"
    return Finding("jetson", "info", f"{model}; {release}; power mode: 'sudo nvpmodel -q' (docs/jetson.md)", "",
                   {"model": model, "l4t": release})


def audio_server(env: dict | None = None) -> str | None:
    """Name the audio server whose socket exists (``PulseAudio`` / ``PipeWire``), or None (ALSA only)."""
    env = dict(os.environ) if env is None else env
    if env.get("PULSE_SERVER"):
        return f"PulseAudio ({env['PULSE_SERVER']})"
    runtime = env.get("XDG_RUNTIME_DIR") or (f"/run/user/{os.getuid()}" if hasattr(os, "getuid") else "")
    for name, rel in (("PulseAudio", "pulse/native"), ("PipeWire", "pipewire-0")):
        sock = Path(runtime) / rel if runtime else None
        if sock is not None and sock.exists():
            return f"{name} ({sock})"
    return None


def check_audio() -> Finding:
    """Audio server and input devices (sounddevice/PortAudio, imported here only)."""
    server = audio_server()
    where = server or "no PulseAudio/PipeWire socket (ALSA devices only)"
    try:
        from cosyedge.realtime.devices import list_devices, load_sounddevice

        sd = load_sounddevice()
        devices = list_devices(sd)
    except ImportError as err:
        return Finding("audio", "broken", f"{where}; sounddevice fails to import: {first_line(err)}", AUDIO_HINT)
    except Exception as err:  # noqa: BLE001 - DependencyError (no sounddevice / PortAudio), PortAudioError
        text = first_line(err, with_type=False)
        status = "missing" if "pip install" in text or "libportaudio2" in text else "broken"
        hint = AUDIO_HINT if "sounddevice" in text and "pip" in text else PORTAUDIO_HINT
        return Finding("audio", status, f"{where}; {text}", hint)
    inputs = [d for d in devices if d.max_input_channels > 0]
    if not inputs:
        return Finding("audio", "missing", f"{where}; no input device",
                       "plug in a microphone; start PulseAudio/PipeWire (apt-get install pulseaudio "
                       "libasound2-plugins) or check 'arecord -l'",
                       {"server": server, "inputs": []})
    names = [f"{d.index}: {d.name}{' (default)' if d.default_input else ''}" for d in inputs]
    return Finding("audio", "ok", f"{where}; inputs: {'; '.join(names)}", "",
                   {"server": server, "inputs": [dataclasses.asdict(d) for d in inputs]})


def check_triton() -> Finding:
    """A tritonserver binary: nvidia-pytriton's, or one on PATH (or NVIDIA's container path)."""
    found = []
    v = _version_of("nvidia-pytriton")
    if v is not None:
        try:
            import importlib.util

            spec = importlib.util.find_spec("pytriton")
            base = Path(spec.origin).parent if spec and spec.origin else None
        except (ImportError, ValueError):
            base = None
        binary = base / "tritonserver" / "bin" / "tritonserver" if base else None
        found.append(f"nvidia-pytriton {v}" + (f" ({binary})" if binary and binary.is_file() else " (no binary)"))
    for cand in (shutil.which("tritonserver"), "/opt/tritonserver/bin/tritonserver"):
        if cand and Path(cand).is_file() and not any(str(cand) in f for f in found):
            found.append(str(cand))
    client = _version_of("tritonclient")
    text = ", ".join(found) if found else "no tritonserver binary"
    text += f"; tritonclient {client or 'missing'}"
    return Finding("triton", "ok" if found else "missing", text, "" if found else TRITON_HINT,
                   {"servers": found, "tritonclient": client})


def check_engines(root: str | Path | None = None) -> Finding:
    """The engines folder and the engines cached there (name, backend, precision; TensorRT: built with)."""
    from cosyedge.artifacts import EngineManifest
    from cosyedge.runtime.engine import engines_root

    root = Path(root) if root is not None else engines_root()
    if root.exists() and not root.is_dir():
        return Finding("engines", "broken", f"{root}: not a folder", "set COSYEDGE_ENGINES_DIR to a folder",
                       {"root": str(root)})
    if not root.is_dir():
        return Finding("engines", "info", f"{root}: none yet (cosyedge build / run make them)", "", {"root": str(root)})
    rows, bad = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and (p / "manifest.json").is_file()):
        try:
            m = EngineManifest.load(folder)
        except Exception as err:  # noqa: BLE001 - a corrupt manifest is reported, not raised
            bad.append(f"{folder.name} ({first_line(err, with_type=False)})")
            continue
        row = {"folder": folder.name, "backend": m.backend, "precision": m.precision, "sparse": m.sparse}
        if m.backend == "tensorrt":
            row["tensorrt"] = (m.raw.get("tools") or {}).get("tensorrt")
            row["gpu"] = m.raw.get("gpu")
        rows.append(row)
    text = f"{root}: {len(rows)} engine(s)"
    if rows:
        text += ": " + ", ".join(r["folder"] + (f" [TensorRT {r['tensorrt']}]" if r.get("tensorrt") else "")
                                for r in rows)
    if bad:
        text += f"; unreadable: {', '.join(bad)}"
    return Finding("engines", "info", text, "", {"root": str(root), "engines": rows, "unreadable": bad})


CHECKS: tuple[Callable[[], Finding | None], ...] = (
    check_python, check_cosyedge, check_onnxruntime, check_tensorrt, check_gpu, check_cuda_bindings, check_cpu,
    check_jetson, check_audio, check_triton, check_engines)
"""The checks, in report order."""


def collect(checks=CHECKS) -> list[Finding]:
    """Run every check; a check that raises (a bug, or a library failing in an unforeseen way) becomes a
    ``broken`` finding named after the check.

    Returns:
        list[Finding]: in :data:`CHECKS` order (checks that do not apply, e.g. Jetson elsewhere, are left out).
    """
    out = []
    for check in checks:
        try:
            f = check()
        except (Exception, SystemExit) as err:  # noqa: BLE001 - doctor never fails
            f = Finding(check.__name__.replace("check_", ""), "broken", f"check failed: {first_line(err)}")
        if f is not None:
            out.append(f)
    return out


_MARK = {"ok": "ok", "missing": "--", "broken": "!!", "info": "  "}


def format_report(findings: list[Finding]) -> str:
    """One screen: a mark (``ok``, ``--`` missing, ``!!`` broken), the name, the summary, and on the next line
    the hint of what is missing."""
    width = max(len(f.name) for f in findings) if findings else 0
    lines = [f"cosyedge doctor ({platform.system()} {platform.machine()})"]
    for f in findings:
        lines.append(f"{_MARK.get(f.status, '  ')} {f.name:<{width}}  {f.summary}")
        if f.hint and f.status != "ok":
            lines.append(f"   {'':<{width}}  -> {f.hint}")
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> str:
    """The report as JSON text: ``{"cosyedge_version", "checks": {name: {status, summary, hint, details}}}``."""
    data = {"cosyedge_version": __version__,
            "checks": {f.name: {"status": f.status, "summary": f.summary, "hint": f.hint, "details": f.details}
                       for f in findings}}
    return json.dumps(data, indent=2, default=str)
