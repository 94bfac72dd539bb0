"""The base the review judges a pull request against, held fast (default tier): a small repository
whose pull request changes p5's training image (and re-renders it), merged the way actions/checkout
checks out a `pull_request` (GitHub's merge commit into the base). ci/render-review.sh without
--base takes the merge commit's first parent, HEAD^1, and shows the change; judged against HEAD^2 (the
pull request compared with itself) the same script prints "no change", so a review that picked the
wrong parent would be caught here (that second review is in the slow tier: what CI runs). The slow,
whole-flow version is tests/test_review_flow.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.offline.mock_engine import ROOT

GIT = shutil.which("git")
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def sh(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def git(repo: Path, *args: str) -> str:
    proc = sh([GIT, *args], repo, {**os.environ, **IDENTITY})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> Path:
    if GIT is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("review-base") / "rltrain"
    repo.mkdir()
    listed = sh([GIT, "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "pr-image")
    path = repo / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    workloads = doc["config"]["rltrain:workloads"]
    workloads["image"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20261202-000000"
    workloads["allowRunRestart"] = True
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    render = sh([sys.executable, "-m", "components.offline.render", "--stack", "p5"], repo)
    assert render.returncode == 0, render.stdout + render.stderr
    git(repo, "commit", "-q", "-am", "p5: new training image, re-rendered")
    git(repo, "checkout", "-q", "--detach", "main")
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "pr-image")  # refs/pull/N/merge
    return repo


def review(repo: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTEST_", "RLTRAIN_"))}
    env["RLTRAIN_CI_VENV"] = sys.prefix  # ci/env.sh puts this interpreter's environment on PATH
    proc = sh([str(repo / "ci" / "render-review.sh"), *args, "p5"], repo, env)
    return proc, (repo / "ci-out" / "summary.md").read_text()


def test_the_merge_commits_first_parent_is_the_base_and_the_change_shows(merged):
    proc, summary = review(merged)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    base = git(merged, "rev-parse", "--short", "HEAD^1")
    assert f"judged against `HEAD^1` at `{base}`" in summary
    assert "| **run restart** |" in summary and "| `rendered/p5/resources.json` |" in summary
    assert "No change to `rendered/`" not in summary


@pytest.mark.slow  # a second review in fresh interpreters (some 6 s of CPU); the first one runs in every tier
def test_the_pull_request_against_itself_would_say_no_change(merged):
    """What a review based on HEAD^2 (the PR's own head) would print: the test above tells them apart."""
    proc, summary = review(merged, "--base", "HEAD^2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No change to `rendered/`" in summary and "impact: no change against the base record" in summary
