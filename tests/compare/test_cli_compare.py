"""`cosyedge compare` on the command line: exit codes, printed figures, --json, --mark-all, no torch needed."""

from __future__ import annotations

import json

from cosyedge.cli.main import main
from tests.helpers.cli_errors import one_error_line
from tests.compare.conftest import QDQ_SCALE
from tests.test_imports import _run


def test_compare_identical_without_torch_exit_0_and_json(ref_onnx, fp32_engine, utt_dir, tmp_path):
    """The runtime path (compare) works with torch blocked; an identical candidate passes (exit 0)."""
    js = tmp_path / "cmp.json"
    code = ("from cosyedge.cli.main import main\n"
            f"rc = main(['compare', {str(ref_onnx)!r}, {str(fp32_engine)!r}, '--utterances', {str(utt_dir)!r},"
            f" '--json', {str(js)!r}])\n"
            "assert 'torch' not in sys.modules\nsys.exit(rc)\n")
    r = _run(code, {"torch", "tensorrt", "pycuda"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "PASS: fp32 within tolerance on 2 utterance(s)" in r.stdout
    data = json.loads(js.read_text())
    assert data["passed"] is True and data["candidate"]["precision"] == "fp32"
    fr = data["modes"]["free-running"]["utterances"]["demo-late-noisy"]
    assert fr["outputs"]["enhanced"]["snr_db"] == 150.0 and fr["audio"]["pesq_delta"] == 0.0


def test_compare_without_polygraphy_is_one_line_exit_4(ref_onnx, utt_dir):
    code = ("from cosyedge.cli.main import main\n"
            f"sys.exit(main(['compare', {str(ref_onnx)!r}, {str(ref_onnx)!r}, '--utterances', {str(utt_dir)!r}]))\n")
    r = _run(code, {"polygraphy"})
    assert r.returncode == 4, r.stderr[-2000:]
    assert "need Polygraphy: pip install polygraphy" in one_error_line(r.stderr)


def test_compare_dropped_state_exit_1_names_state(ref_onnx, drop_state, utt_dir, capsys):
    rc = main(["compare", str(ref_onnx), str(drop_state), "--utterances", str(utt_dir), "--no-pesq"])
    assert rc == 1
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.startswith("[!]")]
    assert len(err) == 1 and "is outside tolerance: teacher-forced 'demo-late-clean' state_out.00" in err[0]
    assert "FAIL free-running 'demo-late-noisy' enhanced: SNR" in cap.out


def test_mark_all_names_the_scaled_qdq_tensor(int8_flat_engine, qdq_x4_flat, utt_dir, tmp_path, capsys):
    """--mark-all bisects a flat INT8 graph (placement trt); the default ort_matmul engine keeps its layers in a Scan
    body."""
    js = tmp_path / "b.json"
    main(["compare", str(int8_flat_engine), str(qdq_x4_flat), "--mark-all", "--seconds", "1", "--mode", "teacher-forced",
          "--utterances", str(utt_dir), "--no-pesq", "--json", str(js)])
    out = capsys.readouterr().out
    jump = json.loads(js.read_text())["bisection"]["first_jump"]
    assert jump["op"] == "DequantizeLinear" and jump["node"].startswith(QDQ_SCALE.rsplit("/", 1)[0])
    assert f"error jumps first at tensor '{jump['tensor']}' (node '{jump['node']}', DequantizeLinear)" in out


def test_pair_at_two_sample_rates_is_refused_by_compare_check_and_eval_alike(tmp_path, capsys):
    """A clean file at 8 kHz next to its 16 kHz noisy file once passed 'compare --utterances' (each
    file resampled on its own: a PESQ against band-limited speech) while 'eval' refused it. One pair loader
    (cosyedge.eval.pairs) now refuses it for all three, with the same line naming both files and rates."""
    import numpy as np
    import soundfile as sf

    from cosyedge.models import REFERENCE_STREAM_ONNX
    from tests.compare.conftest import eval_segments

    name, noisy, clean = eval_segments()[0]
    for sub in ("noisy", "clean"):
        (tmp_path / sub).mkdir()
    sf.write(str(tmp_path / "noisy" / f"{name}.wav"), noisy, 16000, subtype="FLOAT")
    sf.write(str(tmp_path / "clean" / f"{name}.wav"), np.ascontiguousarray(clean[::2]), 8000, subtype="FLOAT")
    want = (f"[!] {tmp_path / 'clean' / f'{name}.wav'} is at 8000 Hz but {tmp_path / 'noisy' / f'{name}.wav'} "
            f"at 16000 Hz: a pair must share one sample rate")
    lines = []
    for args in (["compare", str(REFERENCE_STREAM_ONNX), str(REFERENCE_STREAM_ONNX), "--no-pesq"],
                 ["check", "--precisions", "fp32", "--no-pesq", "--engines-dir", str(tmp_path / "eng")],
                 ["eval", str(tmp_path), "--no-baseline", "--no-dnsmos"]):
        if args[0] in ("compare", "check"):
            args = [*args, "--utterances", str(tmp_path)]
        rc = main(args)
        err = capsys.readouterr().err
        bang = [ln for ln in err.splitlines() if ln.startswith("[!]")]
        assert rc == 2 and len(bang) == 1 and "Traceback" not in err, (args[0], rc, err)
        lines.append(bang[0])
    assert lines == [want] * 3
    assert not (tmp_path / "eng").exists()


def test_mark_all_on_the_default_int8_engine_says_its_layers_are_out_of_reach(int8_engine, ref_onnx, utt_dir,
                                                                              tmp_path, caplog):
    """The default INT8 engine (ort_matmul) runs its layers in a Scan over hops: --mark-all says in one warning that
    it compares the outer tensors only, and how to bisect layer by layer."""
    js = tmp_path / "b.json"
    main(["compare", str(ref_onnx), str(int8_engine), "--mark-all", "--seconds", "1", "--mode", "teacher-forced",
          "--utterances", str(utt_dir), "--no-pesq", "--json", str(js)])
    said = [r.getMessage() for r in caplog.records if "Scan over hops" in r.getMessage()]
    assert len(said) == 1 and "--int8-placement trt" in said[0]
    assert json.loads(js.read_text())["bisection"]["compared"] < 50  # the outer graph's tensors only
