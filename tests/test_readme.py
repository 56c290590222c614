"""README and CI stay in sync: exactly two set-up commands, and .ci/run runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [c.strip() for c in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_readme_has_exactly_two_setup_commands():
    cmds = _setup_commands()
    assert len(cmds) == 2, cmds
    assert "cosyedge run cosyedge/assets/demo/noisy.wav" in cmds[0]
    assert "pytest" in cmds[1]
    assert (ROOT / "cosyedge/assets/demo/noisy.wav").is_file()


def test_ci_runs_the_readme_test_command():
    test_cmd = _setup_commands()[1]
    ci_lines = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    # .ci/run may add quiet flags to pip; the command otherwise matches word for word.
    ci_cmd = next(ln for ln in ci_lines if "pytest" in ln).replace("pip install -q ", "pip install ")
    assert ci_cmd == test_cmd


def test_readme_python_api_block_runs(tmp_path, monkeypatch):
    """The README's Python API block runs as written once `cosyedge build --fp16` has made its engine folder (in
    $COSYEDGE_ENGINES_DIR, which the block honours through engines_root()); ``chunk`` is real speech."""
    import numpy as np
    import soundfile as sf

    from cosyedge.cli.main import main

    monkeypatch.setenv("COSYEDGE_ENGINES_DIR", str(tmp_path / "engines"))
    assert main(["build", "-q", "--fp16"]) == 0
    text = (ROOT / "README.md").read_text()
    block = text.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    speech, _ = sf.read(ROOT / "cosyedge" / "assets" / "demo" / "noisy.wav", dtype="float32", frames=1600)
    scope = {"chunk": np.ascontiguousarray(speech[800:960].reshape(1, 1, 160))}
    exec(compile(block, "README.md (Python API)", "exec"), scope)
    assert scope["y"].shape == (1, 1, 160) and scope["y"].dtype == np.float32 and np.isfinite(scope["y"]).all()
    assert np.abs(scope["y"]).max() > 0
    assert scope["outs"][scope["sid"]].shape == (160,)
