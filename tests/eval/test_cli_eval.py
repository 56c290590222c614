"""``cosyedge eval`` end to end: the bundled engine on the bundled demo pair, JSON keys, PNGs, noisy-only
mode, and one-line errors naming the file for bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile as sf

from cosyedge._lazy import has_module
from tests.eval.conftest import DEMO_CLEAN, DEMO_NOISY, one_line_error, read, write_pair_folder

HAVE_METRICS = all(has_module(m) for m in ("pesq", "pystoi", "pyrnnoise", "matplotlib"))
HAVE_DNSMOS = has_module("speechmos") and has_module("librosa")
needs_metrics = pytest.mark.skipif(not HAVE_METRICS, reason="metric libraries missing: pip install 'cosyedge[eval]'")
needs_dnsmos = pytest.mark.skipif(not HAVE_DNSMOS, reason="speechmos/librosa missing: pip install 'cosyedge[eval]'")


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """Run 'cosyedge eval' once on the bundled demo pair (17 s, engine noise at 5 dB) with --json and --plot.

    DNSMOS is left out here to keep the test fast (it is tested in test_metrics and the noisy-only test)."""
    from cosyedge.cli.main import main

    if not HAVE_METRICS:
        pytest.skip("metric libraries missing: pip install 'cosyedge[eval]'")
    tmp = tmp_path_factory.mktemp("demo")
    manifest = tmp / "demo.json"
    manifest.write_text(json.dumps([{"name": "demo", "noisy": str(DEMO_NOISY), "clean": str(DEMO_CLEAN),
                                     "snr_db": 5, "condition": "camaro-engine"}]))
    mp = pytest.MonkeyPatch()
    mp.setenv("COSYEDGE_ENGINES_DIR", str(tmp / "engines"))
    try:
        args = ["eval", manifest, "--json", tmp / "out" / "report.json", "--plot", tmp / "plots", "--no-dnsmos"]
        rc = main([str(a) for a in args])
    finally:
        mp.undo()
    assert rc == 0
    return tmp, json.loads((tmp / "out" / "report.json").read_text())


def test_demo_pair_cosyedge_improves_si_snr(demo_report):
    _, rep = demo_report
    item = rep["items"][0]
    noisy, ours, rn = (item["scores"][s] for s in ("noisy", "cosyedge", "rnnoise"))
    assert noisy["si_snr_db"] == pytest.approx(4.4, abs=0.3)  # the demo is mixed at 5 dB active-speech SNR
    assert noisy["si_snri_db"] == 0.0
    assert ours["si_snri_db"] > 0.5
    assert ours["si_snr_db"] == pytest.approx(noisy["si_snr_db"] + ours["si_snri_db"])
    assert ours["delay_ms"] == 0.0  # the engine's output is delay-compensated
    assert noisy["delay_ms"] == 0.0
    assert rn["delay_ms"] == pytest.approx(20.0, abs=1.0)  # RNNoise is late; found and aligned
    assert rn["si_snri_db"] > 0.5
    for s in (noisy, ours, rn):
        assert 1.0 <= s["pesq_wb"] <= 4.64 and 0.0 < s["stoi"] <= 1.0


def test_demo_report_json_keys(demo_report):
    _, rep = demo_report
    assert {"schema_version", "tool", "input", "engine", "engine_sha256", "mode", "sample_rate_hz", "chunk_ms",
            "max_delay_ms", "systems", "metrics", "versions", "summary", "items", "elapsed_s"} <= set(rep)
    assert rep["mode"] == "paired" and rep["sample_rate_hz"] == 16000 and rep["chunk_ms"] == 10.0
    assert rep["systems"] == ["noisy", "cosyedge", "rnnoise"]
    assert rep["metrics"] == ["si_snr_db", "si_snri_db", "pesq_wb", "stoi", "delay_ms"]
    item = rep["items"][0]
    assert {"name", "group", "condition", "snr_db", "noisy_file", "clean_file", "duration_s", "scores"} <= set(item)
    assert item["noisy_file"] == str(DEMO_NOISY) and item["clean_file"] == str(DEMO_CLEAN)
    assert set(item["scores"]) == {"noisy", "cosyedge", "rnnoise"}
    assert item["group"] == "camaro-engine@5dB" and item["duration_s"] == pytest.approx(17.29)
    assert list(rep["summary"]) == ["camaro-engine@5dB"]  # one group: no separate 'overall'
    summ = rep["summary"]["camaro-engine@5dB"]
    assert summ["n"] == 1
    assert summ["cosyedge"]["si_snri_db"] == pytest.approx(item["scores"]["cosyedge"]["si_snri_db"])
    assert summ["rnnoise"]["pesq_wb"] == pytest.approx(item["scores"]["rnnoise"]["pesq_wb"])


def test_demo_plot_writes_png(demo_report):
    tmp, _ = demo_report
    pngs = sorted((tmp / "plots").glob("*.png"))
    assert [p.name for p in pngs] == ["demo.png"]
    data = pngs[0].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a real image, not an empty canvas


@needs_metrics
@needs_dnsmos
def test_noisy_only_folder_gives_dnsmos_only(cli, tmp_path):
    x, sr = read(DEMO_NOISY)
    c, _ = read(DEMO_CLEAN)
    (tmp_path / "rec").mkdir()
    sf.write(str(tmp_path / "rec" / "call_noisy.wav"), x[sr: 4 * sr], sr)
    sf.write(str(tmp_path / "rec" / "call_clean.wav"), c[sr: 4 * sr], sr)
    rc, out, err = cli("eval", tmp_path / "rec", "--json", tmp_path / "r.json", "--no-baseline")
    assert rc == 0, err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["mode"] == "noisy-only"
    assert rep["metrics"] == ["delay_ms", "dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808"]
    assert rep["systems"] == ["noisy", "cosyedge"]
    assert list(rep["summary"]) == ["overall"] and rep["summary"]["overall"]["n"] == 2
    by_name = {it["name"]: it for it in rep["items"]}
    for item in rep["items"]:
        assert item["clean_file"] is None
        assert set(item["scores"]) == {"noisy", "cosyedge"}
        for sc in item["scores"].values():
            assert not {"si_snr_db", "pesq_wb", "stoi"} & set(sc)
            assert 1.0 <= sc["dnsmos_ovrl"] <= 5.0
    # DNSMOS needs no reference: it rates the clean recording above the noisy one
    assert by_name["call_clean"]["scores"]["noisy"]["dnsmos_bak"] > by_name["call_noisy"]["scores"]["noisy"][
        "dnsmos_bak"] + 0.3
    assert "SI-SNR" not in out and "OVRL" in out and "cosyedge" in out



def test_noisy_only_folder_without_dnsmos_is_nothing_to_score(cli, tmp_path):
    """Noisy-only input is scored by DNSMOS alone: with --no-dnsmos an empty table and exit 0 would look like
    a pass; it is a one-line usage error, and an existing --json report is kept."""
    x, sr = read(DEMO_NOISY)
    (tmp_path / "rec").mkdir()
    sf.write(str(tmp_path / "rec" / "call.wav"), x[sr: 2 * sr], sr)
    (tmp_path / "r.json").write_text("keep")
    rc, out, err = cli("eval", tmp_path / "rec", "--no-dnsmos", "--no-baseline", "--json", tmp_path / "r.json")
    line = one_line_error(rc, err, code=2)
    assert "nothing to score" in line and "drop --no-dnsmos" in line and out == ""
    assert (tmp_path / "r.json").read_text() == "keep"


@needs_metrics
def test_folder_pairs_with_groups_no_baseline(cli, tmp_path):
    write_pair_folder(tmp_path / "set", seconds=2.0, names=("engine/a_0dB", "engine/b_5dB", "wind/c_0dB"))
    rc, out, err = cli("eval", tmp_path / "set", "--no-baseline", "--no-dnsmos", "--json", tmp_path / "r.json")
    assert rc == 0, err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert list(rep["summary"]) == ["engine@0dB", "engine@5dB", "wind@0dB", "all@0dB", "all@5dB", "overall"]
    assert rep["summary"]["all@0dB"]["n"] == 2 and rep["summary"]["overall"]["n"] == 3
    assert rep["systems"] == ["noisy", "cosyedge"]
    assert "rnnoise" not in out and "engine@5dB" in out
    ov = rep["summary"]["overall"]["cosyedge"]["si_snri_db"]
    assert ov == pytest.approx(np.mean([it["scores"]["cosyedge"]["si_snri_db"] for it in rep["items"]]))
    assert math.isfinite(ov)


# ------------------------------------------------------------------------------------------- bad input
def test_bad_pairs_fail_with_one_line_naming_the_file(cli, tmp_path):
    root = write_pair_folder(tmp_path / "set", seconds=1.0, names=("a",))
    clean = root / "clean" / "a.wav"
    x, sr = sf.read(str(clean), dtype="float32")

    sf.write(str(clean), x[:-160], sr)  # different length
    line = one_line_error(*cli("eval", root)[::2], code=2)
    assert str(clean) in line and "15840 samples" in line

    sf.write(str(clean), x, 22050)  # different sample rate
    line = one_line_error(*cli("eval", root)[::2], code=2)
    assert str(clean) in line and "22050 Hz" in line

    clean.write_bytes(b"RIFF\x00\x00garbage, not a wav file")  # not audio
    line = one_line_error(*cli("eval", root)[::2], code=3)
    assert str(clean) in line and "cannot decode" in line

    clean.unlink()  # missing clean file
    line = one_line_error(*cli("eval", root)[::2], code=3)
    assert "clean reference missing" in line and str(root / "noisy" / "a.wav") in line


def test_bad_manifest_and_arguments(cli, tmp_path):
    m = tmp_path / "m.json"
    m.write_text(json.dumps([{"noisy": "nope.wav", "clean": "nope_clean.wav"}]))
    line = one_line_error(*cli("eval", m)[::2], code=3)
    assert str(tmp_path / "nope.wav") in line
    (tmp_path / "x.txt").write_text("hello")
    line = one_line_error(*cli("eval", tmp_path / "x.txt")[::2], code=2)
    assert "x.txt" in line
    line = one_line_error(*cli("eval", tmp_path / "missing")[::2], code=3)
    assert "missing" in line
    write_pair_folder(tmp_path / "set", seconds=1.0, names=("a",))
    line = one_line_error(*cli("eval", tmp_path / "set", "--threads", "0")[::2], code=2)
    assert "--threads" in line
    line = one_line_error(*cli("eval", tmp_path / "set", "--json", tmp_path / "set")[::2], code=3)
    assert "is a folder" in line


@needs_metrics
def test_48k_stereo_pairs_and_chunk_size_give_the_same_scores(cli, tmp_path):
    """Files at 48 kHz stereo are mixed to mono and scored at 16 kHz; a 20 ms chunk streams the same output."""
    import soxr

    write_pair_folder(tmp_path / "a", seconds=3.0, names=("x_5dB",))
    x, sr = read(tmp_path / "a" / "noisy" / "x_5dB.wav")
    c, _ = read(tmp_path / "a" / "clean" / "x_5dB.wav")
    for sub, sig in (("noisy", x), ("clean", c)):
        (tmp_path / "b" / sub).mkdir(parents=True)
        (tmp_path / "r" / sub).mkdir(parents=True)
        s48 = soxr.resample(sig, sr, 48000)
        sf.write(str(tmp_path / "b" / sub / "x_5dB.wav"), np.stack([s48, s48], axis=1), 48000, subtype="FLOAT")
        # the same content at 16 kHz (the round trip band-limits it): what the 48 kHz files must score like
        sf.write(str(tmp_path / "r" / sub / "x_5dB.wav"), soxr.resample(s48, 48000, sr), sr, subtype="FLOAT")
    reps = {}
    for key, folder, extra in (("16k", "a", []), ("48k", "b", []), ("16k-rt", "r", []),
                               ("chunk20", "a", ["--chunk-ms", "20"])):
        rc, _, err = cli("eval", tmp_path / folder, "--no-dnsmos", "--no-baseline", "--json", tmp_path / f"{key}.json",
                         *extra)
        assert rc == 0, err
        reps[key] = json.loads((tmp_path / f"{key}.json").read_text())
    s = {k: r["items"][0]["scores"]["cosyedge"] for k, r in reps.items()}
    assert reps["48k"]["items"][0]["sample_rate_hz_in"] == 48000 and reps["chunk20"]["chunk_ms"] == 20.0
    assert s["chunk20"]["si_snr_db"] == pytest.approx(s["16k"]["si_snr_db"], abs=1e-3)  # chunk-size invariant
    # 48 kHz stereo is mixed to mono and resampled to 16 kHz exactly as a 16 kHz copy of the same content
    assert s["48k"]["si_snri_db"] == pytest.approx(s["16k-rt"]["si_snri_db"], abs=0.02)
    assert s["48k"]["pesq_wb"] == pytest.approx(s["16k-rt"]["pesq_wb"], abs=0.02)
    assert s["48k"]["si_snri_db"] == pytest.approx(s["16k"]["si_snri_db"], abs=0.5)  # soxr HQ cuts the top 0.7 kHz
