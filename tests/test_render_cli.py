"""The render CLI as a newcomer meets it: `--help` names the stacks and the exit codes, files are
written 0644, the byo summary prints `$0/h`, and the fast exit (gc off, `os._exit` after flushing)
changes no byte of the output, printed or written. The cases that start the CLI in a fresh interpreter
(some 3 s of CPU each) are in the slow tier but `--help`, the one every tier runs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import rendered

from components.offline import render
from components.offline.mock_engine import ROOT
from components.stack import stackfile


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "components.offline.render", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_help_lists_stacks_and_exit_codes():
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"stacks: {', '.join(stackfile.stack_names())}" in out
    assert "exit codes:" in out
    for code, words in (("0", "written"), ("1", "policy rule"), ("2", "invalid config")):
        assert any(line.strip().startswith(code) and words in line for line in out.splitlines()), out


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_are_0644_and_keep_their_mode(tmp_path):
    r = rendered("byo")
    render.write(r, tmp_path)
    assert {_mode(tmp_path / n) for n in ("manifests.yaml", "resources.json")} == {0o644}
    (tmp_path / "manifests.yaml").chmod(0o664)
    render.write(r, tmp_path)
    assert _mode(tmp_path / "manifests.yaml") == 0o664
    assert _mode(tmp_path / "resources.json") == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_byo_summary_prints_zero_dollars():
    line = next(x for x in render.summary(rendered("byo")).splitlines() if "estimated cost" in x)
    assert line.strip().startswith("estimated cost: $0/h (bring-your-own cluster"), line


@pytest.mark.slow  # fresh interpreters: the CLI's default-tier case is test_help_lists_stacks_and_exit_codes
def test_fast_exit_changes_no_byte(tmp_path):
    """The CLI (gc off, os._exit) against the same render done in-process with a normal interpreter."""
    # A project without committed renders: the change-impact guard has nothing to compare with.
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("__main__.py", "Pulumi.yaml", "Pulumi.byo.yaml"):
        (proj / name).write_bytes((ROOT / name).read_bytes())
    (proj / "components").symlink_to(ROOT / "components")
    proc = cli("--stack", "byo", "--out", str(tmp_path / "cli"), "--project-dir", str(proj))
    assert proc.returncode == 0, proc.stderr
    r = render.render_stack("byo", proj)  # fresh, in this (normal) interpreter, from the same files
    render.write(r, tmp_path / "lib")
    for name in ("manifests.yaml", "resources.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "lib" / name).read_bytes(), name
    # Everything printed reached the pipe before os._exit: the summary, then the last line. (Compared
    # as lines: the fit report lists pods in the engine's registration order, which varies by run.)
    wrote = f"  wrote {tmp_path / 'cli'}/manifests.yaml, {tmp_path / 'cli'}/resources.json"
    assert proc.stdout.endswith(wrote + "\n")
    assert sorted(proc.stdout.splitlines()) == sorted(render.summary(r).splitlines() + [wrote])


@pytest.mark.slow  # a fresh interpreter, as above
def test_cli_exit_code_of_a_refusal():
    proc = cli("--stack", "no-such-stack", "--out", os.devnull)
    assert proc.returncode == 2
    assert "no stack file Pulumi.no-such-stack.yaml" in proc.stderr
