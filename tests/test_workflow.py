"""The CI workflows: valid against GitHub's workflow schema, clean under actionlint (which runs
shellcheck on every `run:` script), and keeping the rules the PR workflow relies on: the offline job
works without secrets, no untrusted value is interpolated into a script, the preview comments on
the pull request through pulumi/actions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted(p for p in WORKFLOW_DIR.glob("*") if p.suffix in (".yml", ".yaml"))
PR_WORKFLOW = WORKFLOW_DIR / "pr.yml"

# `${{ github.event.* }}` (PR title and body, branch names, commit messages) and `${{ github.head_ref }}`
# are set by whoever opens the pull request: inside a script they are script injection.
UNTRUSTED_IN_SCRIPT = re.compile(r"\$\{\{\s*github\s*\.\s*(event\s*\.|head_ref\b)")


def tool(name: str, install: str = "pip install -r requirements-dev.txt") -> str:
    """The executable next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is neither next to {sys.executable} nor on PATH: {install}")
    return found


def run(args: list[str]) -> None:
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def steps(workflow: dict):
    for job_id, job in (workflow.get("jobs") or {}).items():
        for step in job.get("steps") or []:
            yield job_id, step


def test_there_are_workflows():
    assert PR_WORKFLOW in WORKFLOWS, f"{PR_WORKFLOW.relative_to(ROOT)} is missing"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_schema(path: Path):
    run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)])


def test_actionlint_with_shellcheck():
    # shellcheck must be there: without it actionlint skips every `run:` script without a word.
    shellcheck = tool("shellcheck", install="apt-get install shellcheck (.ci/run does)")
    run([tool("actionlint"), "-no-color", f"-shellcheck={shellcheck}", *map(str, WORKFLOWS)])


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_untrusted_input_in_scripts(path: Path):
    bad = [
        f"{job_id} / {step.get('name') or step['run'].splitlines()[0]}"
        for job_id, step in steps(load(path))
        if "run" in step and UNTRUSTED_IN_SCRIPT.search(step["run"])
    ]
    assert not bad, f"{path.name}: pass github.event.* / github.head_ref through env:, not into run: {bad}"


def test_offline_job_needs_no_secrets():
    job = load(PR_WORKFLOW)["jobs"]["offline"]
    assert "secrets." not in json.dumps(job), "the offline job must run for forks, which get no secrets"
    assert job.get("permissions") == {"contents": "read"}


def test_preview_job():
    workflow = load(PR_WORKFLOW)
    job = workflow["jobs"]["preview"]
    assert "offline" in job["needs"]
    stacks = job["strategy"]["matrix"]["stack"]
    assert stacks == ["dev", "p4de", "p5"]
    for stack in stacks:
        assert (ROOT / f"Pulumi.{stack}.yaml").is_file(), stack
    assert job["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}

    previews = [
        step
        for step in job["steps"]
        if re.fullmatch(r"pulumi/actions@v\d+", step.get("uses", ""))
        and step.get("with", {}).get("command") == "preview"
    ]
    assert len(previews) == 1, "one pulumi/actions@v<major> step with command: preview"
    inputs = previews[0]["with"]
    assert inputs["comment-on-pr"] in (True, "true")
    assert inputs["work-dir"] == "."
    assert "matrix.stack" in inputs["stack-name"]
    assert "secrets.PULUMI_ACCESS_TOKEN" in previews[0]["env"]["PULUMI_ACCESS_TOKEN"]
    # Skipped, not failed, when the secrets are absent (forks): gated on the credentials check.
    assert "has-credentials" in job["if"]
