"""Scripts and code pass ruff; every shell script passes shellcheck."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.offline.mock_engine import ROOT


def tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def shell_scripts() -> list[Path]:
    candidates = [ROOT / ".ci" / "run", *ROOT.glob("**/*.sh")]
    # Skip virtual environments (.venv, .venv-ci, .venv-scan): their scripts are not ours.
    return [p for p in candidates if p.is_file() and not any(part.startswith(".venv") for part in p.parts)]


def test_ruff_clean():
    ruff = tool("ruff")
    assert ruff, "ruff is in requirements-dev.txt"
    res = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_shellcheck_clean():
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck missing: .ci/run installs it with apt-get")
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    scripts = shell_scripts()
    assert scripts, "at least .ci/run"
    res = subprocess.run([shellcheck, *map(str, scripts)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_leaves_virtual_environments_alone_without_git(tmp_path):
    """A tree without .git (an unpacked archive): ruff does not read .gitignore there, so the
    pyproject's excludes alone must keep it out of every virtual environment."""
    ruff = tool("ruff")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "ok.py").write_text("x = 1\n")
    bad = "import os\n"  # F401, in every virtual environment below
    for venv in (".venv", ".venv-scan", ".venv-ci", "venv", "policy/venv"):
        for sub in ("bin/tool.py", "share/doc/example.py", "lib/python3.11/site-packages/pkg/mod.py"):
            path = tmp_path / venv / sub
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(bad)
        (tmp_path / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert not (tmp_path / ".git").exists()
    res = subprocess.run([ruff, "check", "--no-cache", "--show-files", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [Path(line).name for line in res.stdout.split() if line.endswith(".py")] == ["ok.py"], res.stdout
    res = subprocess.run([ruff, "check", "--no-cache", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# The tests that need a Debian tool or checkov (not pip-installed into the project's environment).
TOOL_TESTS = ("tests/test_lint.py::test_shellcheck_clean", "tests/test_workflow.py::test_actionlint_with_shellcheck",
              "tests/scripts/test_efa_metrics.py::test_promtool_accepts_output",
              "tests/test_checkov.py::test_checkov_finds_nothing")


@pytest.mark.slow  # a nested pytest run per case
@pytest.mark.parametrize("ci", [False, True], ids=["newcomer", "CI"])
def test_tool_tests_skip_for_a_newcomer_and_fail_under_ci(ci, tmp_path):
    """On a machine without shellcheck, promtool and checkov, their tests skip; under CI they fail."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "RLTRAIN_CHECKOV", "PYTEST_ADDOPTS")}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's tools only: no shellcheck, promtool
    env["RLTRAIN_CHECKOV"] = str(tmp_path / "no-checkov")  # hides .venv-scan/bin/checkov
    if ci:
        env["CI"] = "true"
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra",
                          # checkov once (the byo stack), not once per stack
                          "-k", "not checkov_finds_nothing or checkov_finds_nothing[byo]", *TOOL_TESTS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    summary = res.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (failed|errors?|skipped|passed)", summary)}
    if ci:  # a missing checkov fails in its fixture: an error rather than a failure
        assert res.returncode == 1 and counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0) == 4 \
            and "skipped" not in counts and "passed" not in counts, res.stdout[-3000:]
    else:
        assert res.returncode == 0 and counts == {"skipped": 4}, res.stdout[-3000:]
