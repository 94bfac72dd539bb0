"""Scripts and code pass ruff; every shell script passes shellcheck."""

import os
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
