"""ci/deploy.sh end to end, for real, on the simulated cluster (docs/pr-review.md "Deploy on merge"): the
real Pulumi CLI and Kubernetes provider, the program and the policy pack run by the test harness's
language host (cluster/langhost), on a scratch repository of this tree whose `main` moves. GitHub is a
fake `gh` answering from that repository (the merged pull request, the runs of its head, their approvals,
where main points); the plan store is a directory (file://).

1. A pull request's approved run (101) reviews commit C1: ci/preview.sh saves the plan, ci/plan-store.sh
   keeps it under run 101. A fork's run of the same commit (102, newer, awaiting approval) is never the
   reviewed run: ci/deploy-find-plan.sh names 101, and ci/deploy.sh applies 101's plan.
2. A plan asked for under another run (102: none kept; 103: a copy of 101's) applies nothing.
3. Run 201 reviews C2 (a new image); main moves to C3 before the merge: the deploy of C3 with 201's plan
   is refused (another tree); the deploy of C2 while main already points at C3 (a re-run of an older
   deploy) is refused right before `up`. The cluster keeps C1's image.
4. main at C2, but the live stack drifted after the review (a ConfigMap deleted by hand): the real CLI
   refuses 201's plan and the ConfigMap stays deleted. The refreshed `up` finds no live ConfigMap, and
   the program's goal for it no longer matches what the plan recorded against the old inputs: "resource
   URN violates plan: properties changed" (pkg/v3 v3.274.0 resource/deploy/step_generator.go, the
   plan's `checkGoal`).

One cluster start (the module's `cluster`); the impact guard is a stand-in (`true`: it is
ci/render-review.sh, tested in tests/test_review_flow.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ENABLE, log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from cluster.binaries import toolset  # noqa: E402
from cluster.deploy import PLACEHOLDER_SECRET  # noqa: E402
from cluster.langhost.__main__ import install  # noqa: E402
from components.offline.mock_engine import ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]
NAMESPACE = "rltrain"
STACK = "sim"
# What the deploy needs of the repository: the program, its stack files, the policy pack and ci/.
SNAPSHOT = ("__main__.py", "Pulumi.yaml", f"Pulumi.{STACK}.yaml", "requirements.txt", "components", "policy", "ci")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    r = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"git {' '.join(args)}: {r.stderr}"
    return r.stdout.strip()


def snapshot(repo: Path) -> None:
    """This working tree's files of SNAPSHOT (tracked and untracked, not ignored), as they are now."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "--", *SNAPSHOT], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)


def set_image(repo: Path, tag: str) -> None:
    path = repo / f"Pulumi.{STACK}.yaml"
    doc = yaml.safe_load(path.read_text())
    workloads = doc["config"]["rltrain:workloads"]
    workloads["image"] = workloads["image"].rsplit(":", 1)[0] + ":" + tag
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


FAKE_GH = """#!/usr/bin/env bash
# GitHub, as the deploy's scripts ask it, answered from files and the scratch repository.
d="{d}"
printf '%s\\n' "$*" >> "$d/gh.log"
case "$*" in
  "api repos/o/r/commits/"*"/pulls") sha="${{2#repos/o/r/commits/}}"; cat "$d/pulls-${{sha%/pulls}}.json" ;;
  "api --paginate repos/o/r/actions/workflows/pr.yml/runs?"*) cat "$d/runs.json" ;;
  "api repos/o/r/actions/runs/"*"/approvals") id="${{2#repos/o/r/actions/runs/}}"
    cat "$d/approvals-${{id%/approvals}}.json" 2>/dev/null || echo '[]' ;;
  "api repos/o/r/git/ref/heads/main --jq .object.sha") git -C "{repo}" rev-parse refs/heads/main ;;
  *) echo "unexpected gh $*" >&2; exit 9 ;;
esac
"""


class Scratch:
    """The scratch repository, its fake GitHub and the environment the ci/ scripts run in."""

    def __init__(self, tmp: Path, kubeconfig: Path, request):
        self.tmp, self.request = tmp, request
        self.repo = tmp / "repo"
        self.repo.mkdir()
        self.github = tmp / "github"
        self.store = tmp / "store"
        cli = Path(toolset().require("pulumi"))
        install(tmp / "langhost")
        (tmp / "state").mkdir()
        self.github.mkdir()
        gh = self.github / "gh"
        gh.write_text(FAKE_GH.format(d=self.github, repo=self.repo))
        gh.chmod(0o755)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PULUMI_", "GITHUB_", "GH_", "RLTRAIN_CI", "AWS_"))}
        self.env.update(
            PATH=f"{self.github}:{tmp / 'langhost'}:{cli.parent}:{self.env['PATH']}",
            RLTRAIN_CI_VENV=sys.prefix, PULUMI_HOME=str(tmp / "home"), PULUMI_BACKEND_URL=f"file://{tmp / 'state'}",
            PULUMI_CONFIG_PASSPHRASE="rltrain-simulated-cluster", PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true", NO_COLOR="1", GITHUB_REPOSITORY="o/r", GH_TOKEN="t",
            PLAN_STORE_URL=f"file://{self.store}", RLTRAIN_IMPACT_GUARD=shutil.which("true") or "/bin/true")
        snapshot(self.repo)
        git(self.repo, "init", "-q", "-b", "main")
        # The stack exists with its secrets, as after its first `pulumi stack init` and config (docs).
        self.pulumi("stack", "init", STACK)
        self.pulumi("config", "set", "--stack", STACK, "--secret", "rltrain:kubeconfig", kubeconfig.read_text())
        self.pulumi("config", "set", "--stack", STACK, "--secret", "rltrain:hfToken", PLACEHOLDER_SECRET)

    def pulumi(self, *args: str) -> None:
        r = subprocess.run(["pulumi", *args, "--non-interactive"], cwd=self.repo, env=self.env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr

    def commit(self, message: str) -> str:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", message)
        return git(self.repo, "rev-parse", "HEAD")

    def script(self, name: str, *args: str, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        r = subprocess.run([str(self.repo / "ci" / name), *args], cwd=self.repo, env={**self.env, **env},
                           capture_output=True, text=True, timeout=timeout)
        log(self.request, f"ci/{name} {' '.join(args)} {env.get('REVIEWED_RUN_ID', env.get('RUN_ID', ''))}: "
                          f"exit {r.returncode} in {time.monotonic() - t0:.0f}s")
        return r

    def review(self, commit: str, run: int) -> None:
        """The approved preview job of run `run` on `commit`: ci/preview.sh, then ci/plan-store.sh put."""
        git(self.repo, "checkout", "-q", commit)
        out = str(self.tmp / f"ci-out-{run}")
        r = self.script("preview.sh", STACK, RLTRAIN_CI_OUT=out)
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
        r = self.script("plan-store.sh", "put", STACK, RLTRAIN_CI_OUT=out, RUN_ID=str(run), PR_NUMBER="5",
                        HEAD_SHA=commit)
        assert r.returncode == 0 and f"kept the plan of {STACK} (run {run})" in r.stdout, r.stdout + r.stderr

    def merged(self, commit: str, runs: list[dict], approvals: dict[int, list[dict]]) -> None:
        """GitHub after pull request 5 (head `commit`, this repository) was merged as `commit`."""
        pull = {"number": 5, "merged_at": "2026-12-04T10:00:00Z", "merge_commit_sha": commit,
                "user": {"login": "alice"}, "head": {"sha": commit, "ref": "feature", "repo": {"full_name": "o/r"}}}
        (self.github / f"pulls-{commit}.json").write_text(json.dumps([pull]))
        (self.github / "runs.json").write_text(json.dumps({"total_count": len(runs), "workflow_runs": runs}))
        for run_id, answer in approvals.items():
            (self.github / f"approvals-{run_id}.json").write_text(json.dumps(answer))

    def deploy(self, commit: str, run: int) -> subprocess.CompletedProcess:
        git(self.repo, "checkout", "-q", commit)
        return self.script("deploy.sh", STACK, REVIEWED_RUN_ID=str(run), GITHUB_SHA=commit, BEFORE=commit,
                           RLTRAIN_CI_OUT=str(self.tmp / f"deploy-{run}-{commit[:8]}"))


def run_of(id_: int, repo: str = "o/r", branch: str = "feature", conclusion: str = "success") -> dict:
    return {"id": id_, "event": "pull_request", "head_branch": branch, "head_repository": {"full_name": repo},
            "pull_requests": [], "status": "completed", "conclusion": conclusion,
            "triggering_actor": {"login": "alice"}}


def approved(login: str) -> list[dict]:
    return [{"state": "approved", "comment": "", "user": {"login": login}, "environments": [{"name": "preview"}]}]


def image(cluster) -> str:
    job = cluster.get("batch/v1", "Job", "rltrain-training", NAMESPACE)
    return job["spec"]["template"]["spec"]["containers"][0]["image"] if job else ""


def test_deploy_applies_the_reviewed_plan_and_refuses_every_other(cluster, tmp_path, request):
    s = Scratch(tmp_path, cluster.kubeconfig, request)
    c1 = s.commit("base: the sim stack")

    # 1. Reviewed by run 101 (approved by bob), merged as C1; a fork's run 102 of the same commit is newer.
    s.review(c1, 101)
    s.merged(c1, [run_of(101), run_of(102, repo="mallory/r", branch="main", conclusion="action_required")],
             {101: approved("bob"), 102: approved("mallory")})
    out = tmp_path / "find-out"
    found = s.script("deploy-find-plan.sh", GITHUB_SHA=c1, GITHUB_OUTPUT=str(out), RUNNER_TEMP=str(tmp_path))
    assert found.returncode == 0, found.stdout + found.stderr
    assert "run-id=101" in out.read_text().splitlines() and "approved-by=bob" in out.read_text()
    applied = s.deploy(c1, 101)
    assert applied.returncode == 0, applied.stdout[-8000:] + applied.stderr[-3000:]
    assert f"applied the plan reviewed by run 101 on {c1[:12]} to {STACK}" in applied.stdout
    assert image(cluster).endswith(":20260401-085549")

    # 2. Another run's plan: none kept under 102; a copy of 101's under 103 names run 101.
    refused = s.deploy(c1, 102)
    assert refused.returncode == 1 and "REFUSED: no reviewed plan for sim: run 102" in refused.stdout
    shutil.copytree(s.store / STACK / "run-101", s.store / STACK / "run-103")
    refused = s.deploy(c1, 103)
    assert refused.returncode == 1 and "made by run 101: not this review's plan" in refused.stdout

    # 3. Run 201 reviews C2; main moves to C3 before the merge.
    git(s.repo, "checkout", "-q", "-b", "feature", c1)
    set_image(s.repo, "20261204-000002")
    c2 = s.commit("a new image")
    s.review(c2, 201)
    git(s.repo, "checkout", "-q", "main")
    git(s.repo, "merge", "-q", "--ff-only", c2)
    set_image(s.repo, "20261204-000003")
    c3 = s.commit("main moves on")
    s.merged(c3, [run_of(201)], {201: approved("bob")})
    refused = s.deploy(c3, 201)
    assert refused.returncode == 1 and "REFUSED: main moved since the review" in refused.stdout, refused.stdout
    refused = s.deploy(c2, 201)  # a re-run of C2's deploy after main moved to C3
    assert refused.returncode == 1, refused.stdout
    assert f"REFUSED: main is now {c3[:12]}, no longer {c2[:12]}" in refused.stdout
    assert image(cluster).endswith(":20260401-085549")

    # 4. main at C2 again, but the live stack drifted after the review: the real CLI refuses the plan.
    git(s.repo, "branch", "-f", "main", c2)
    maps = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/configmaps")["items"]
    drifted = next(m["metadata"]["name"] for m in maps
                   if m["metadata"]["name"].startswith("rltrain-script-validate-node-"))
    cluster.api(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{drifted}", method="DELETE")
    refused = s.deploy(c2, 201)
    assert refused.returncode == 1, refused.stdout[-6000:]
    assert f"REFUSED: pulumi up --plan of {STACK} stopped" in refused.stdout
    assert "workloads-scripts-validate-node violates plan: properties changed" in refused.stdout, refused.stdout[-6000:]
    assert cluster.get("v1", "ConfigMap", drifted, NAMESPACE) is None
