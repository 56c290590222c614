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
