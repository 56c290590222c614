"""The lowest versions pyproject.toml allows are the ones CI tests: .ci/oldest.txt pins every base dependency at its
lower bound, and .ci/run runs the fast subset in a Python 3.10 environment made from it."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _oldest_pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f".ci/oldest.txt pins exact versions: {line}"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def _lower_bound(req: Requirement) -> Version:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    assert lows, f"pyproject.toml gives {req} no lower bound"
    return max(lows)


def test_oldest_set_pins_every_base_dependency_at_its_lower_bound():
    pins = _oldest_pins()
    wrong = []
    for text in _project()["dependencies"]:
        req = Requirement(text)
        name, low = canonicalize_name(req.name), _lower_bound(req)
        if pins.get(name) != low:
            wrong.append(f"{req.name}: pyproject allows {low}, .ci/oldest.txt tests {pins.get(name, 'nothing')}")
    assert not wrong, "\n".join(wrong)


def test_oldest_environment_runs_the_lowest_python_pyproject_allows():
    low = Version(re.match(r">=\s*([\d.]+)$", _project()["requires-python"]).group(1))
    ci = (ROOT / ".ci" / "run").read_text()
    assert low == Version("3.10") and "sys.version_info[:2] == (3, 10)" in ci


def test_ci_runs_the_subset_in_the_oldest_environment():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip" install -q -r .ci/oldest.txt' in ci and '-m pytest -q -ra -p no:cacheprovider $OLDEST_TESTS' in ci
    files = re.search(r'OLDEST_TESTS="([^"]*)"', ci).group(1).split()
    assert files and all((ROOT / f).is_file() for f in files), [f for f in files if not (ROOT / f).is_file()]
    # the areas the subset must cover: main job, streamify proofs, builds, gates, StreamPool
    for want in ("tests/test_cli_run.py", "tests/surgery/test_streamify.py", "tests/test_cli_build.py",
                 "tests/compare/test_check.py", "tests/runtime/test_pool.py"):
        assert want in files, want


def test_doctor_knows_the_oldest_onnxruntime():
    from cosyedge.doctor import ORT_OLDEST

    req = next(Requirement(t) for t in _project()["dependencies"] if t.startswith("onnxruntime"))
    assert Version(ORT_OLDEST) == _lower_bound(req)
