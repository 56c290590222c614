"""A report path of ``compare``/``check`` is never one of the command's inputs (reference, engine, baseline,
model, amax files): refused in one ``[!]`` line, the input kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.helpers.files import sha256

HOP = 160


@pytest.fixture(scope="module")
def delay_onnx(tmp_path_factory) -> Path:
    """A stream ONNX (pure delay: hop 160, delay 160 at 16 kHz), made by hand."""
    from tests.helpers import models

    return models.make_delay_model(tmp_path_factory.mktemp("m") / "delay.onnx", delay_samples=HOP, hop=HOP)


def _copy(src: Path, dest: Path) -> Path:
    dest.write_bytes(Path(src).read_bytes())
    return dest


def test_compare_json_refuses_the_reference_and_engine_files(tmp_path, delay_onnx, capsys):
    """'compare REF CAND --json REF' replaced the reference model with JSON, exit 0."""
    ref = _copy(delay_onnx, tmp_path / "ref.onnx")
    before = sha256(ref)
    assert main(["compare", str(ref), str(delay_onnx), "--no-pesq", "--json", str(ref)]) == 2
    assert f"--json {ref} is the input {ref}" in one_error_line(capsys)
    assert sha256(ref) == before
    # another spelling of the candidate (a symlink) is the same file
    link = tmp_path / "link.json"
    link.symlink_to(delay_onnx)
    assert main(["compare", str(ref), str(delay_onnx), "--no-pesq", "--json", str(link)]) == 2
    assert one_error_line(capsys).startswith(f"[!] --json {link} is the input {delay_onnx}")
    # a file of an engine folder given as the candidate
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "manifest.json").write_text("{}")
    assert main(["compare", str(ref), str(eng), "--no-pesq", "--json", str(eng / "manifest.json")]) == 2
    assert f"--json {eng / 'manifest.json'} is a file of the input folder {eng}" in one_error_line(capsys)
    assert (eng / "manifest.json").read_text() == "{}"


def test_check_reports_refuse_the_baseline_model_amax_and_engine_files(tmp_path, delay_onnx, capsys):
    """'check --junit <baseline>' replaced the committed baseline with JUnit XML; '--json <--onnx model>' likewise."""
    ref = _copy(delay_onnx, tmp_path / "ref.onnx")
    baseline = tmp_path / "bl.json"
    baseline.write_text('{"kind": "my baseline"}\n')
    amax = tmp_path / "delay.int8.amax.json"
    amax.write_text("{}\n")
    engines = tmp_path / "engines"
    (engines / "delay-fp16-onnxruntime").mkdir(parents=True)
    manifest = engines / "delay-fp16-onnxruntime" / "manifest.json"
    manifest.write_text("{}\n")
    base = ["check", "--onnx", str(ref), "--baseline", str(baseline), "--engines-dir", str(engines), "--no-pesq"]
    cases = [(["--junit", str(baseline)], f"[!] --junit {baseline} is the input {baseline}"),
             (["--json", str(ref)], f"[!] --json {ref} is the input {ref}"),
             (["--json", str(amax)], f"[!] --json {amax} is the input {amax}"),
             (["--junit", str(manifest)], f"[!] --junit {manifest} is a file of the input folder {manifest.parent}"),
             (["--json", str(tmp_path / "r"), "--junit", str(tmp_path / "." / "r")],
              f"[!] --json {tmp_path / 'r'} and --junit {tmp_path / '.' / 'r'} are the same file: give two paths")]
    for extra, start in cases:
        assert main(base + extra) == 2, extra
        assert one_error_line(capsys).startswith(start), extra
    assert baseline.read_text() == '{"kind": "my baseline"}\n'
    assert sha256(ref) == sha256(delay_onnx) and amax.read_text() == "{}\n" and manifest.read_text() == "{}\n"
    assert not (tmp_path / "r").exists()
