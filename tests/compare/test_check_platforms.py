"""cosyedge check on another kind of platform: an FP16 label is gated only by a baseline entry measured on the same
kind of platform (x86-64 computes FP16 in FP32; arm64 with FP16 arithmetic, e.g. Jetson Orin, in half precision).

The platform is simulated (``this_platform`` monkeypatched); the engines are real FP32/FP16 ONNX Runtime builds of
the (copied) bundled model on 3 s pieces of the demo recording, 100 ms chunks.
"""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cosyedge.artifacts import SCHEMA_VERSION, sha256_file
from cosyedge.cli.main import main
from cosyedge.compare.baseline import default_baseline_path, entry_for
from cosyedge.compare.platforms import platform_key, platform_of

X86 = {"machine": "x86_64", "fp16_compute": "fp32"}
ORIN = {"machine": "aarch64", "fp16_compute": "half"}
LENIENT = {"teacher-forced/demo-late-noisy/enhanced/max_abs": 1.0}

# /proc/cpuinfo as Linux prints it (the Features line of a Jetson AGX Orin's Cortex-A78AE, of a Cortex-A57)
ORIN_CPUINFO = ("processor\t: 0\nmodel name\t: ARMv8 Processor rev 1 (v8l)\nFeatures\t: fp asimd evtstrm aes pmull sha1 "
                "sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg\n")
A57_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\n"
X86_CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu sse2 avx2 avx512f avx512_fp16 f16c\n"


def _simulate(monkeypatch, plat: dict) -> None:
    for mod in ("cosyedge.compare.check", "cosyedge.compare.baseline"):
        monkeypatch.setattr(f"{mod}.this_platform", lambda: dict(plat))


def _utts(d):
    from cosyedge.compare.utterances import utterances_from

    return utterances_from(d, 16000)


def _legacy_baseline(ref_onnx: Path, utt_dir: Path, path: Path) -> Path:
    """A baseline as cosyedge wrote them before platforms were recorded: fp16 and fp32, lenient, no 'platform'."""
    sha = sha256_file(ref_onnx)
    data = {"kind": "cosyedge.accuracy-baseline", "schema_version": SCHEMA_VERSION, "cosyedge_version": "0.1.0",
            "model": {"name": "reference", "path": ref_onnx.name, "sha256": sha},
            "utterances": [u.describe() for u in _utts(utt_dir)], "chunk_samples": 1600,
            "labels": {lab: {"reference": {"path": ref_onnx.name, "sha256": sha}, "metrics": dict(LENIENT),
                             "amax": None} for lab in ("fp16", "fp32")}}
    path.write_text(json.dumps(data))
    return path


def _check(ref_onnx, base, utt_dir, eng, *extra) -> list[str]:
    return ["check", "--onnx", str(ref_onnx), "--baseline", str(base), "--precisions", "fp16,fp32",
            "--engines-dir", str(eng), "--utterances", str(utt_dir), "--no-pesq", *extra]


def test_platform_of_reads_fp16_arithmetic_from_cpuinfo():
    assert platform_of("aarch64", ORIN_CPUINFO) == ORIN
    assert platform_of("aarch64", A57_CPUINFO) == {"machine": "aarch64", "fp16_compute": "fp32"}
    assert platform_of("x86_64", X86_CPUINFO) == X86  # AVX512-FP16 on x86: ONNX Runtime still computes in FP32
    assert platform_of("AMD64", None) == X86 and platform_of("arm64", None) == ORIN  # no /proc (macOS, Windows)
    assert [platform_key(p) for p in (X86, ORIN, None)] == ["x86_64", "aarch64+fp16", "x86_64"]


def test_committed_baselines_without_platform_are_x86_64():
    """The committed baselines predate the field: they load, their FP16 entry gates x86-64 only, INT8 any CPU."""
    base = json.loads(default_baseline_path("reference").read_text())
    assert "platform" not in base["labels"]["fp16"]
    entry, others = entry_for(base, "fp16", X86)
    assert entry is base["labels"]["fp16"] and others == []
    assert entry_for(base, "fp16", ORIN) == (None, [X86])
    assert entry_for(base, "int8-sparse", ORIN) == (base["labels"]["int8-sparse"], [])
    assert entry_for(base, "fp32", ORIN) == (None, [])  # no entry at all: the usual 'no entry' refusal


def test_fp16_baseline_from_x86_is_not_gated_on_orin_exit_2_with_the_command(ref_onnx, utt_dir, tmp_path,
                                                                              monkeypatch, capsys):
    """On a CPU that computes FP16 in half precision, the FP16 label of an x86-64 baseline is measured but not gated:
    its rows say NO BASELINE, one line names both platforms and the command that records it here, FP32 is still
    gated, JSON says passed false, JUnit has an error per FP16 case, exit 2 (not 1: nothing regressed)."""
    base = _legacy_baseline(ref_onnx, utt_dir, tmp_path / "b.json")
    eng, js, ju = tmp_path / "eng", tmp_path / "r.json", tmp_path / "r.xml"
    _simulate(monkeypatch, X86)
    assert main(_check(ref_onnx, base, utt_dir, eng)) == 0  # where it was measured: gated, passes
    capsys.readouterr()
    _simulate(monkeypatch, ORIN)
    rc = main(_check(ref_onnx, base, utt_dir, eng, "--json", str(js), "--junit", str(ju)))
    cap = capsys.readouterr()
    assert rc == 2, cap.out + cap.err
    notes = [ln for ln in cap.out.splitlines() if ln.startswith("NO BASELINE")]
    command = (f"cosyedge check --update-baseline --precisions fp16 --onnx {ref_onnx} --baseline {base} "
               f"--utterances {utt_dir} --no-pesq")
    assert notes == [f"NO BASELINE fp16: no baseline for this platform, not gated: b.json's fp16 entry was measured "
                     f"on x86-64 (FP16 computed in FP32), and this CPU is aarch64 with FP16 arithmetic (FP16 computed "
                     f"in half precision); record a baseline here with: {command}"]
    rows = [ln.split() for ln in cap.out.splitlines() if ln.startswith(("fp16 ", "fp32 "))]
    assert len(rows) == 8
    assert all(r[-2:] == ["NO", "BASELINE"] for r in rows if r[0] == "fp16")
    assert all(r[-1] == "ok" for r in rows if r[0] == "fp32")
    err = [ln for ln in cap.err.splitlines() if ln.startswith("[!]")]
    assert len(err) == 1 and "Traceback" not in cap.err
    assert err[0].startswith("[!] fp16 has no baseline for this platform and was not gated (fp32 passed; ")
    assert err[0].endswith(command)
    rep = json.loads(js.read_text())
    assert rep["passed"] is False and rep["regressions"] == [] and rep["platform"] == ORIN
    assert rep["no_baseline"][0]["measured_on"] == [X86] and rep["no_baseline"][0]["command"] == command
    gated = rep["labels"]["fp32"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/max_abs"]
    assert gated["baseline"] == 1.0
    unbased = rep["labels"]["fp16"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/max_abs"]
    assert unbased["baseline"] is None and 0 < unbased["value"] < 0.01
    suite = ET.parse(ju).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("8", "0", "4")
    assert suite.find("testcase/error").get("type") == "no-baseline-for-platform"


def test_recording_the_orin_baseline_keeps_the_x86_entry_and_gates_both(ref_onnx, utt_dir, tmp_path, monkeypatch,
                                                                         capsys):
    """The printed command records the FP16 entry of this platform; the x86-64 entry moves to by_platform, FP32 is
    kept; then each platform is gated by its own entry (exit 0 on both), and a new x86-64 update keeps Orin's."""
    base = _legacy_baseline(ref_onnx, utt_dir, tmp_path / "b.json")
    eng, js = tmp_path / "eng", tmp_path / "r.json"
    _simulate(monkeypatch, ORIN)
    assert main(_check(ref_onnx, base, utt_dir, eng)) == 2
    note = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("NO BASELINE"))
    command = note.split("record a baseline here with: ")[1]
    argv = shlex.split(command)
    assert argv[:2] == ["cosyedge", "check"]
    assert main([*argv[1:], "--engines-dir", str(eng), "-q"]) == 0
    data = json.loads(base.read_text())
    assert data["platform"] == ORIN and data["labels"]["fp16"]["platform"] == ORIN
    assert data["labels"]["fp32"]["metrics"] == LENIENT and "platform" not in data["labels"]["fp32"]  # kept as was
    assert data["by_platform"] == {"x86_64": {"fp16": {"reference": {"path": ref_onnx.name,
                                                                     "sha256": sha256_file(ref_onnx)},
                                                       "metrics": LENIENT, "amax": None, "platform": X86}}}
    orin_value = data["labels"]["fp16"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/snr_db"]
    orin_max = data["labels"]["fp16"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/max_abs"]
    for plat, want, want_max in ((ORIN, orin_value, orin_max), (X86, None, 1.0)):
        _simulate(monkeypatch, plat)
        capsys.readouterr()
        rc = main(_check(ref_onnx, base, utt_dir, eng, "--json", str(js)))
        out = capsys.readouterr().out
        assert rc == 0 and "NO BASELINE" not in out, out
        m = json.loads(js.read_text())["labels"]["fp16"]["metrics"]
        assert m["teacher-forced/demo-late-noisy/enhanced/snr_db"]["baseline"] == want
        assert m["teacher-forced/demo-late-noisy/enhanced/max_abs"]["baseline"] == want_max
    _simulate(monkeypatch, X86)  # re-measuring on x86-64 keeps Orin's entry beside it
    assert main(_check(ref_onnx, base, utt_dir, eng, "--update-baseline", "--precisions", "fp16", "-q")) == 0
    data = json.loads(base.read_text())
    assert data["labels"]["fp16"]["platform"] == X86 and data["labels"]["fp16"]["metrics"] != LENIENT
    assert list(data["by_platform"]) == ["aarch64+fp16"]
    assert data["by_platform"]["aarch64+fp16"]["fp16"]["metrics"]["teacher-forced/demo-late-noisy/enhanced/snr_db"] \
        == orin_value


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["labels"]["fp16"].update(platform={"machine": "aarch64", "fp16_compute": "fp8"}),
     "'labels.fp16.platform.fp16_compute' must be \"fp32\" or \"half\""),
    (lambda d: d.update(by_platform={"aarch64+fp16": {"fp16": {**d["labels"]["fp16"], "platform": X86}}}),
     "'by_platform.aarch64+fp16.fp16.platform' must be a platform of kind 'aarch64+fp16'"),
])
def test_malformed_platform_is_exit_3_naming_the_field(edit, field, ref_onnx, utt_dir, tmp_path, capsys):
    base = _legacy_baseline(ref_onnx, utt_dir, tmp_path / "b.json")
    data = json.loads(base.read_text())
    edit(data)
    base.write_text(json.dumps(data))
    assert main(_check(ref_onnx, base, utt_dir, tmp_path / "eng")) == 3
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[!]")]
    assert len(err) == 1 and field in err[0], err


def test_doctor_says_fp16_is_computed_in_half_precision_on_orin(tmp_path, monkeypatch):
    from cosyedge import doctor

    cpuinfo = tmp_path / "cpuinfo"
    for text, machine, half in ((ORIN_CPUINFO, "aarch64", True), (A57_CPUINFO, "aarch64", False),
                                (X86_CPUINFO, "x86_64", False)):
        cpuinfo.write_text(text)
        monkeypatch.setattr(doctor.platform, "machine", lambda m=machine: m)
        f = doctor.check_cpu(str(cpuinfo))
        assert f.details["fp16_compute"] == ("half" if half else "fp32")
        assert ("ONNX Runtime computes FP16 in half precision here" in f.summary) is half, f.summary
