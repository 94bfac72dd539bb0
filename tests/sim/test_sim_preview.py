"""ci/sim-preview.sh, the pull request's real preview on the simulated cluster (docs/pr-review.md),
as the workflow runs it: on a merge commit like the one actions/checkout checks out for
`pull_request`, for a change that edits a script and the image, printing the real engine's operations
beside the offline impact (cluster/preview_compare.py) and agreeing with it.

One pull request carries both edits (before: one script run each, two cluster starts); each still
shows on a resource only it changes: the resume wrapper's ConfigMap (the script edit: its content
names it) and the validation Job (the image: validation does not mount the wrapper), besides the
single-node Job both replace. The script starts its own cluster (in a lane of the machine's
semaphore, tests/sim/conftest.py, taken around it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ENABLE, give_back, missing_binaries, sim_requested, take_lane

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from components.offline.mock_engine import ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> None:
    r = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **IDENTITY}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def edit_script(repo: Path) -> None:
    path = repo / "components" / "scripts" / "resume_wrapper.py"
    path.write_text(path.read_text() + "\n# a pull request's edit of the resume wrapper\n")


def edit_image(repo: Path) -> None:
    path = repo / "Pulumi.sim.yaml"
    doc = yaml.safe_load(path.read_text())
    workloads = doc["config"]["rltrain:workloads"]
    workloads["image"] = workloads["image"].rsplit(":", 1)[0] + ":20261202-000000"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


# The rows each edit must show as a replacement: the script's ConfigMap only the script edit changes,
# the validation Job only the image; the single-node Job both.
CHANGED = ("workloads-scripts-resume-wrapper", "workloads-validation-job", "workloads-single-node-job")


def test_the_pull_requests_real_preview_beside_the_offline_impact(tmp_path):
    missing = missing_binaries()
    if missing:
        pytest.fail(f"simulated cluster: missing {', '.join(missing)}: run cluster/build.sh", pytrace=False)
    repo = tmp_path / "rltrain"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "pr")
    edit_script(repo)
    edit_image(repo)
    git(repo, "commit", "-q", "-am", "the change")
    git(repo, "checkout", "-q", "--detach", "main")
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "pr")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RLTRAIN_SIM_STATE"))}
    env["RLTRAIN_CI_VENV"] = os.environ.get("RLTRAIN_CI_VENV") or sys.prefix
    # Its own output directory: under .ci/run, ci/env.sh has exported the outer run's (absolute)
    # RLTRAIN_CI_OUT, where the script would write instead (seen in .ci/run: the first case failed
    # reading ci-out/sim-preview.md that had gone to the outer ci-out).
    env["RLTRAIN_CI_OUT"] = str(repo / "ci-out")
    lane = take_lane()
    try:
        r = subprocess.run([str(repo / "ci" / "sim-preview.sh")], cwd=repo, env=env, capture_output=True,
                           text=True, timeout=1800)
    finally:
        give_back(lane)
    print(r.stdout[-6000:])
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-4000:]
    md = (repo / "ci-out" / "sim-preview.md").read_text()
    for changed in CHANGED:
        row = next(line for line in md.splitlines() if line.startswith(f"| `{changed}` |"))
        assert "| replace |" in row and "disagree" not in row, md
    assert "The offline impact and the real engine agree on every resource." in md, md
