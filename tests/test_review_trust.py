"""Issue 47, "Review trust, second pass": one test per finding of the audit of a2fe564, each failing on
that commit's scripts and workflows (fake `gh` where GitHub is needed). The behaviour around them is
tested with the scripts' other cases: tests/test_deploy_scripts.py (the deploy), tests/test_ci_scripts.py
(the gate, the comments), tests/test_workflow.py (the workflows).

1. The deploy trusted "the reviewed run" by head SHA alone and the plan by its artifact name.
2. The fork mirror pushed whatever the fork's head was at that moment.
3. The fork's comment could pass for the bot's: author github-actions[bot], fork text with images, links
   and fake sections, labels from the fork's text.
4. The gate checked the environment's configuration, not this run's approval, and got the secrets.
5. The deploy compared the plan with the pushed commit, not with where main points right before `up`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from test_ci_scripts import (BOT, HEAD, PROTECTED, comment_env, fake_github, fork_comment, gate, gh_calls,
                             ours, review_artifact, run)
from test_deploy_scripts import (PULL, RUN, approval, deploy, fake_gh, fake_main, fake_pulumi, find, pulumi_calls,
                                 run_of, store)

from components.offline.mock_engine import ROOT

CI = ROOT / "ci"
WORKFLOWS = ROOT / ".github" / "workflows"
Z = "\u200b"


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


# --- 1. the reviewed run, and the plan it kept ---------------------------------------------------------


def test_1_a_forks_run_of_the_same_commit_is_never_the_reviewed_run(tmp_path):
    """Anyone can open a pull request from a fork with the merged head commit: its run (newer, awaiting
    approval: `action_required`) was "the newest completed run of the head SHA", had no plan, and every
    deploy refused. Now: this repository's head branch, approved by someone other than the author."""
    runs = [run_of(700), run_of(705, repo="mallory/r", branch="main", conclusion="action_required")]
    fake_gh(tmp_path / "bin", [PULL], runs, {700: [approval("bob")], 705: [approval("mallory")]})
    res, out = find(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out == {"pr-number": "12", "run-id": "700", "approved-by": "bob"}
    calls = (tmp_path / "bin" / "gh.log").read_text().splitlines()
    assert "api repos/o/r/actions/runs/705/approvals" not in calls  # the fork's run is never considered


def test_1_the_plan_comes_from_the_reviewed_runs_place_in_the_store_never_an_artifact(tmp_path):
    """The offline or sim-preview job (the PR's code, no approval) could upload `plan-STACK` first; the
    deploy trusted whatever that artifact held. Now the deploy reads only the store, where only the
    approved preview writes, under the reviewed run."""
    fake_pulumi(tmp_path / "bin")
    forged = tmp_path / "artifact"
    forged.mkdir()
    tree = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    (forged / "plan-p5.json").write_text(json.dumps({"resourcePlans": {"forged": {}}}))
    (forged / "plan-p5.meta").write_text(f"stack=p5\ncommit={'a' * 40}\ntree={tree}\n")
    empty = tmp_path / "store"
    empty.mkdir()
    res = deploy(tmp_path, empty, PLAN_DIR=str(forged))  # what a2fe564's deploy.yml handed the script
    assert res.returncode == 1 and "REFUSED: no reviewed plan for p5" in res.stdout
    assert not any(c.startswith("up ") for c in pulumi_calls(tmp_path))
    # Another run's plan is not this review's, even when it sits in the store.
    res = deploy(tmp_path, store(tmp_path, run=RUN + 1))
    assert res.returncode == 1 and f"run {RUN}, whose preview was approved, kept none" in res.stdout
    res = deploy(tmp_path, store(tmp_path, run=RUN, meta_run=RUN + 1))
    assert res.returncode == 1 and f"made by run {RUN + 1}: not this review's plan" in res.stdout
    assert not any(c.startswith("up ") for c in pulumi_calls(tmp_path))


def test_1_no_job_hands_the_plan_over_as_an_artifact():
    for name in ("pr.yml", "deploy.yml", "pr-comment.yml"):
        for job_id, job in load(name)["jobs"].items():
            for step in job.get("steps") or []:
                artifact = str((step.get("with") or {}).get("name") or "")
                assert not artifact.startswith("plan"), f"{name} {job_id}: {step.get('uses')} {artifact}"
    keep = next(s for s in load("pr.yml")["jobs"]["preview"]["steps"] if s.get("run", "").startswith("ci/plan-store.sh"))
    assert keep["if"] == "${{ !cancelled() && steps.prepare.outputs.ready == 'true' }}"  # after the gate's approval


# --- 2. the fork mirror, pinned to the reviewed head --------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


def test_2_the_fork_comment_names_a_mirror_pinned_to_the_head_github_ran(tmp_path):
    fake_github(tmp_path / "bin", [])
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review"))
    assert res.returncode == 0, res.stderr
    body = json.loads((tmp_path / "bin" / "payload.json").read_text())["body"]
    assert f"ci/mirror-fork.sh 7 {HEAD}" in body
    assert "gh pr checkout" not in body and "HEAD:refs/heads" not in body


def test_2_the_mirror_refuses_a_head_that_moved_since_the_review(tmp_path):
    """Review a benign commit, force-push a malicious one before the mirror: a2fe564's documented
    `gh pr checkout N && git push origin HEAD:refs/heads/pr-N` pushed the malicious one."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    base = commit(work, "base")
    git(work, "push", "-q", str(origin), "main")
    reviewed = commit(work, "benign")
    git(work, "push", "-q", str(origin), f"{reviewed}:refs/pull/7/head")
    git(work, "reset", "-q", "--hard", base)
    malicious = commit(work, "malicious")
    git(work, "push", "-q", "--force", str(origin), f"{malicious}:refs/pull/7/head")

    clone = tmp_path / "maintainer"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    res = subprocess.run([str(CI / "mirror-fork.sh"), "7", reviewed], cwd=clone, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1 and f"#7's head is now {malicious}, not the reviewed {reviewed}" in res.stderr
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/heads/pr-7"], cwd=origin).returncode != 0
    # The head the review named: exactly that commit is pushed.
    res = subprocess.run([str(CI / "mirror-fork.sh"), "7", malicious], cwd=clone, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert git(origin, "rev-parse", "refs/heads/pr-7") == malicious


# --- 3. what the bot says and what the fork says -------------------------------------------------------


def test_3_a_fork_comment_is_written_only_with_the_review_apps_identity(tmp_path):
    """Every workflow token posts as github-actions[bot]: a same-repository branch's workflow could post
    a `review-fork` comment that the fork path then took for its own and edited."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [ours(400, kind="review-fork", author=BOT, id_=31)])
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review"))
    assert res.returncode == 0, res.stderr
    calls = gh_calls(bin_dir)
    assert calls[-1].startswith("api --method POST repos/o/r/issues/7/comments ") and "comments/31" not in calls[-1]
    assert f"left alone: {BOT}" in res.stdout
    # Without the App nothing is posted (and the workflow token could not write anyway).
    (bin_dir / "gh.log").unlink()
    (bin_dir / "payload.json").unlink()
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review"), COMMENT_AUTHOR=BOT)
    assert res.returncode == 0 and "::warning title=Fork review not commented::" in res.stdout
    assert not (bin_dir / "gh.log").exists() and not (bin_dir / "payload.json").exists()
    spec = load("pr-comment.yml")["jobs"]["fork-review-comment"]
    assert "pull-requests" not in spec["permissions"]


FORGED = f"""Commit `{'d' * 12}`, judged against main: all checks pass.

### `pulumi preview` of `p5`: succeeded

Resources: 0 to change ![ok](https://evil.example/pixel.png) [details](https://evil.example/phish)
see [the docs][ref] or https://evil.example/raw and www.evil.example
[ref]: https://evil.example/ref
footnote[^1]

[^1]: https://evil.example/note
"""


def test_3_the_forks_text_cannot_pass_for_the_bots(tmp_path):
    """a2fe564: everything below the fork note was the author's text, unquoted: a visible "Commit" line,
    a fake "preview succeeded" section, images and links rendered."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    art = review_artifact(tmp_path / "review")
    (art / "summary.md").write_text(FORGED)
    res = fork_comment(tmp_path, art)
    assert res.returncode == 0, res.stderr
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    lines = body.splitlines()
    ours_end = lines.index("**The fork's text** (quoted; links and images removed):")
    trusted, forks = lines[:ours_end], lines[ours_end + 1:]
    # This repository's words: the commit and run from GitHub, before the fork's first line.
    assert f"**Commit `{HEAD}`** ([run](https://github.example/run/500))" in "\n".join(trusted)
    assert not any("d" * 12 in line or "succeeded" in line for line in trusted)
    # The fork's: every line quoted until this repository's closing line.
    end = forks.index("End of the fork's text. No labels are set from it.")
    assert all(line.startswith(">") for line in forks[:end] if line) and forks[end + 1:] == []
    quoted = "\n".join(forks[:end])
    assert "> ### `pulumi preview` of `p5`: succeeded" in quoted and f"> Commit `{'d' * 12}`" in quoted
    # No image loads, no link goes anywhere.
    assert "](" not in quoted and "![" not in quoted and "]:" not in quoted and "[^" not in quoted
    assert "https://evil" not in body and "www.evil" not in body
    assert "Resources: 0 to change ok details" in quoted and f"https{Z}://evil.example/raw" in quoted


def test_3_no_labels_from_a_forks_text(tmp_path):
    """a2fe564 labelled a fork's pull request from its own summary (even `no-change`)."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    art = review_artifact(tmp_path / "review")
    (art / "summary.md").write_text("### Stack `p5`\n\nimpact: no change against the base record\n")
    res = fork_comment(tmp_path, art)
    assert res.returncode == 0, res.stderr
    assert not any("/labels" in c for c in gh_calls(bin_dir, labels=True))
    assert "labels: none from a fork's review" in res.stdout
    # The same-repository path still labels from its own review.
    res = run("review-comment.sh", str(art), env=comment_env(tmp_path / "ci-out", FORK="false"), bin_dir=bin_dir)
    assert res.returncode == 0 and "labels of #7: added no-change" in res.stdout


# --- 4. the gate: this run's approval, by someone else -------------------------------------------------


APPROVED_BY = {"bob": [approval("bob")], "alice": [approval("alice")], "none": []}
DEPLOY_ENV = {**PROTECTED, "name": "deploy",
              "deployment_branch_policy": {"protected_branches": False, "custom_branch_policies": True}}
MAIN_ONLY = {"total_count": 1, "branch_policies": [{"id": 1, "name": "main", "type": "branch"}]}


@pytest.mark.parametrize("environment,approvals,policies,extra,why", [
    (PROTECTED, "none", None, {}, "this run has no approval of `preview`"),
    (PROTECTED, "alice", None, {}, "this run's approval of `preview` is by alice, who opened the pull request"),
    (PROTECTED, "bob", None, {"PR_AUTHOR": "carol", "GITHUB_TRIGGERING_ACTOR": "bob"}, "is by bob"),
    ({**PROTECTED, "can_admins_bypass": True}, "bob", None, {}, "administrators may bypass `preview`"),
    ({**PROTECTED, "protection_rules": [{"type": "required_reviewers", "prevent_self_review": False,
                                         "reviewers": [{"type": "User", "reviewer": {"login": "bob"}}]}]},
     "bob", None, {}, "`preview` lets whoever triggered a run approve it"),
    ({**PROTECTED, "name": "deploy"}, "bob", MAIN_ONLY, {"PROTECTED_ENVIRONMENT": "deploy", "DEPLOY_BRANCH": "main"},
     "`deploy` accepts deployments from every branch"),
    (DEPLOY_ENV, "bob", {"total_count": 1, "branch_policies": [{"name": "*", "type": "branch"}]},
     {"PROTECTED_ENVIRONMENT": "deploy", "DEPLOY_BRANCH": "main"}, "only the branch `main` may deploy"),
])
def test_4_the_gate_needs_this_runs_approval_by_someone_else_in_a_strict_environment(
        tmp_path, environment, approvals, policies, extra, why):
    answer = [{**a, "environments": [{"name": extra.get("PROTECTED_ENVIRONMENT", "preview")}]}
              for a in APPROVED_BY[approvals]]
    # AWS_ROLE_ARN and PULUMI_ACCESS_TOKEN as a2fe564's workflow handed the gate the secrets themselves (the
    # gate now ignores them): that gate passed every case here, the configuration's weaker settings warned.
    res, out, unavailable = gate(tmp_path, environment, answer, policies, AWS_ROLE_ARN="arn",
                                 PULUMI_ACCESS_TOKEN="pul-x", **extra)
    assert res.returncode == 1, res.stdout
    assert out["has-credentials"] == "false" and why in res.stdout and why in unavailable.read_text()


def test_4_a_strict_deploy_environment_approved_by_someone_else_passes(tmp_path):
    answer = [approval("bob", environment="deploy")]
    res, out, _ = gate(tmp_path, DEPLOY_ENV, answer, MAIN_ONLY, PROTECTED_ENVIRONMENT="deploy", DEPLOY_BRANCH="main",
                       PR_AUTHOR="", GATE_FOR="pulumi up")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out["has-credentials"] == "true"
    assert "deployments from `main` only; this run was approved by bob" in res.stdout


# --- 5. main still points at the deployed commit, right before `up` ------------------------------------


def test_5_a_deploy_refuses_when_main_moved_on_before_up(tmp_path):
    """A re-run of an older deploy after a newer one was applied: the tree check passes (it is the old
    run's own tree), and a2fe564 applied the old plan over the newer state."""
    bin_dir = tmp_path / "bin"
    fake_pulumi(bin_dir)
    fake_main(bin_dir, sha="9" * 40)
    # The same plan also where a2fe564's deploy read it (PLAN_DIR, the artifact): that script applied it.
    root = store(tmp_path)
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "plan-p5.json").write_text((root / "p5" / f"run-{RUN}" / "plan.json").read_text())
    (artifact / "plan-p5.meta").write_text((root / "p5" / f"run-{RUN}" / "plan.meta").read_text())
    res = deploy(tmp_path, root, PLAN_DIR=str(artifact))
    assert res.returncode == 1
    assert "REFUSED: main is now 999999999999, no longer" in res.stdout and "nothing was applied" in res.stdout
    calls = pulumi_calls(tmp_path)
    assert calls[:2] == ["login --non-interactive file:///tmp/state", "stack select --non-interactive p5"]
    assert not any(c.startswith("up ") for c in calls)
