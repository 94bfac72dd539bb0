"""The deploy on merge (.github/workflows/deploy.yml), script by script, with fake `pulumi` and `gh`:
the reviewed plan applied with `pulumi up --plan`; refused, with its message and nothing applied, when
main moved since the review, when there is no reviewed plan, when the impact guard refuses, and when
the plan no longer applies; the merged pull request and its reviewing run found from GitHub (a direct
push to main has none). The workflow itself: per stack, behind `deploy`, serialized per stack."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from components.offline.mock_engine import ROOT

CI = ROOT / "ci"
DEPLOY = ROOT / ".github" / "workflows" / "deploy.yml"
TREE = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_pulumi(bin_dir: Path, up: str = "echo 'Resources:'; echo '    ~ 1 updated'") -> None:
    executable(bin_dir / "pulumi", f"""#!/usr/bin/env bash
printf '%s\\n' "$*" >> "{bin_dir}/pulumi.log"
if [ "$1" = up ]; then {up}; fi
""")


def plan(tmp_path: Path, tree: str = TREE, stack: str = "p5") -> Path:
    d = tmp_path / "plan"
    d.mkdir(exist_ok=True)
    (d / f"plan-{stack}.json").write_text(json.dumps({"resourcePlans": {}}))
    (d / f"plan-{stack}.meta").write_text(f"stack={stack}\ncommit={'a' * 40}\ntree={tree}\n")
    return d


def deploy(tmp_path: Path, plan_dir: Path, guard_rc: int = 0) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    guard = executable(tmp_path / "guard.sh", f"""#!/usr/bin/env bash
echo "guard $*" > "{tmp_path}/guard.log"
[ {guard_rc} -eq 0 ] || echo "Pulumi.p5.yaml: REFUSED: replace (data loss): LustreFileSystem storage-fs" >&2
exit {guard_rc}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "GITHUB_", "AWS_", "RLTRAIN_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", PLAN_DIR=str(plan_dir), BEFORE="b" * 40,
               RLTRAIN_CI_OUT=str(tmp_path / "ci-out"), RLTRAIN_IMPACT_GUARD=str(guard),
               PULUMI_BACKEND_URL="file:///tmp/state", PULUMI_CONFIG_PASSPHRASE="x",
               GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
    return subprocess.run([str(CI / "deploy.sh"), "p5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def pulumi_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "bin" / "pulumi.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_reviewed_plan_is_applied(tmp_path):
    fake_pulumi(tmp_path / "bin")
    plan_dir = plan(tmp_path)
    res = deploy(tmp_path, plan_dir)
    assert res.returncode == 0, res.stdout + res.stderr
    assert pulumi_calls(tmp_path) == [
        "login --non-interactive file:///tmp/state",
        "stack select --non-interactive p5",  # never created here: the review's preview did that
        f"up --yes --non-interactive --stack p5 --refresh --plan {plan_dir}/plan-p5.json --diff --suppress-progress "
        "--color never --policy-pack policy"]
    assert (tmp_path / "guard.log").read_text().strip() == f"guard --base {'b' * 40} p5"
    assert "applied the plan reviewed on aaaaaaaaaaaa to p5" in res.stdout


def test_main_moved_since_the_review_is_refused_before_anything_runs(tmp_path):
    fake_pulumi(tmp_path / "bin")
    res = deploy(tmp_path, plan(tmp_path, tree="f" * 40))
    assert res.returncode == 1
    assert "REFUSED: main moved since the review: the plan was made on tree ffffffffffff" in res.stdout
    assert f"main is tree {TREE[:12]}" in res.stdout and "nothing was applied" in res.stdout
    assert pulumi_calls(tmp_path) == []
    assert "### `pulumi up` of `p5`: refused" in (tmp_path / "summary.md").read_text()


def test_no_reviewed_plan_is_refused(tmp_path):
    fake_pulumi(tmp_path / "bin")
    empty = tmp_path / "plan"
    empty.mkdir()
    res = deploy(tmp_path, empty)
    assert res.returncode == 1 and "REFUSED: no reviewed plan for p5" in res.stdout
    assert pulumi_calls(tmp_path) == []
    # A plan of another stack is not this stack's.
    res = deploy(tmp_path, plan(tmp_path, stack="dev"))
    assert res.returncode == 1 and "REFUSED: no reviewed plan for p5" in res.stdout


def test_the_impact_guard_stops_the_deploy_as_it_stops_the_render(tmp_path):
    fake_pulumi(tmp_path / "bin")
    res = deploy(tmp_path, plan(tmp_path), guard_rc=1)
    assert res.returncode == 1
    assert "REFUSED: the impact guard refuses this change of p5" in res.stdout
    assert "Pulumi.p5.yaml: REFUSED: replace (data loss)" in res.stdout  # the render's own words
    assert pulumi_calls(tmp_path) == []


def test_a_plan_that_no_longer_applies_is_refused_with_the_engines_error(tmp_path):
    fake_pulumi(tmp_path / "bin", up="echo 'error: resource violates plan: properties changed: ~storageCapacity' >&2; exit 255")
    res = deploy(tmp_path, plan(tmp_path))
    assert res.returncode == 1
    assert "properties changed: ~storageCapacity" in res.stdout
    assert ("REFUSED: pulumi up --plan of p5 stopped (exit 255): the reviewed plan no longer applies "
            "(the live stack or its state changed since the review: drift, another deploy)") in res.stdout
    assert (tmp_path / "ci-out" / "deploy-p5.refused").is_file()


# --- the merged pull request and the run that reviewed it -------------------------------------------

SHA, HEAD = "1" * 40, "2" * 40


def fake_gh(bin_dir: Path, pulls: list[dict], runs: list[dict]) -> None:
    """`gh api` with --jq applied by jq to the answer (gh's --jq is jq's language, printed raw)."""
    if shutil.which("jq") is None:
        if os.environ.get("CI"):
            pytest.fail("jq missing: apt-get install jq")
        pytest.skip("jq not installed (apt-get install jq)")
    (bin_dir).mkdir(parents=True, exist_ok=True)
    (bin_dir / "pulls.json").write_text(json.dumps(pulls))
    (bin_dir / "runs.json").write_text(json.dumps({"total_count": len(runs), "workflow_runs": runs}))
    executable(bin_dir / "gh", f"""#!/usr/bin/env bash
printf '%s\\n' "$2" >> "{bin_dir}/gh.log"
case "$2" in
  repos/o/r/commits/{SHA}/pulls) answer="{bin_dir}/pulls.json" ;;
  "repos/o/r/actions/workflows/pr.yml/runs?event=pull_request&head_sha={HEAD}&status=completed&per_page=100") answer="{bin_dir}/runs.json" ;;
  *) echo "unexpected gh $*" >&2; exit 9 ;;
esac
jq -r "$4" "$answer"
""")


def find(tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_"))}
    env.update(PATH=f"{tmp_path / 'bin'}:{env['PATH']}", GITHUB_REPOSITORY="o/r", GITHUB_SHA=SHA, GH_TOKEN="t",
               GITHUB_OUTPUT=str(out))
    res = subprocess.run([str(CI / "deploy-find-plan.sh")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    return res, dict(line.split("=", 1) for line in out.read_text().splitlines()) if out.exists() else {}


def test_the_merged_pull_request_and_its_newest_run_are_found(tmp_path):
    pulls = [{"number": 12, "merged_at": "2026-12-02T10:00:00Z", "merge_commit_sha": SHA, "head": {"sha": HEAD}},
             # an older pull request whose commits are in this one: merged as something else
             {"number": 3, "merged_at": "2026-11-01T10:00:00Z", "merge_commit_sha": "9" * 40, "head": {"sha": "8" * 40}}]
    runs = [{"id": 700, "conclusion": "success"}, {"id": 701, "conclusion": "failure"}]
    fake_gh(tmp_path / "bin", pulls, runs)
    res, out = find(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out == {"pr-number": "12", "run-id": "701"}


@pytest.mark.parametrize("pulls,runs,why", [
    ([], [], "no pull request was merged as 111111111111: a direct push to main"),
    ([{"number": 12, "merged_at": None, "merge_commit_sha": SHA, "head": {"sha": HEAD}}], [],
     "no pull request was merged as"),                                    # open, its test merge commit
    ([{"number": 12, "merged_at": "2026-12-02T10:00:00Z", "merge_commit_sha": SHA, "head": {"sha": HEAD}}], [],
     "#12 (head 222222222222) has no completed run of the pr workflow"),
])
def test_nothing_reviewed_is_refused(tmp_path, pulls, runs, why):
    fake_gh(tmp_path / "bin", pulls, runs)
    res, out = find(tmp_path)
    assert res.returncode == 1 and "::error title=Deploy refused::" in res.stdout and why in res.stdout
    assert "run-id" not in out


# --- the workflow ------------------------------------------------------------------------------------


def test_deploy_workflow_per_stack_behind_deploy_serialized():
    workflow = yaml.safe_load(DEPLOY.read_text())
    on = workflow.get("on", workflow.get(True))
    assert on == {"push": {"branches": ["main"]}}
    (job,) = workflow["jobs"].values()
    assert job["environment"] == "deploy"
    assert job["strategy"]["matrix"]["stack"] == ["dev", "p4de", "p5"]
    # One `up` per stack at a time, a running one never cancelled.
    assert job["concurrency"] == {"group": "deploy-${{ matrix.stack }}", "cancel-in-progress": False}
    by_script = {s["run"].split()[0]: s for s in job["steps"] if "run" in s}
    gate = by_script["ci/preview-gate.sh"]
    assert gate["env"]["PROTECTED_ENVIRONMENT"] == job["environment"]  # fails closed without reviewers
    order = [s.get("run", s.get("uses", "")).split()[0] for s in job["steps"]]
    assert order.index("ci/preview-gate.sh") < order.index("ci/deploy-find-plan.sh") < order.index("ci/deploy.sh")
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["run-id"] == "${{ steps.reviewed.outputs.run-id }}"
    assert download["with"]["name"] == "plan-${{ matrix.stack }}"
    assert by_script["ci/deploy.sh"]["env"]["PLAN_DIR"] == download["with"]["path"] == "${{ runner.temp }}/plan"
    after_gate = job["steps"][job["steps"].index(gate) + 1:]
    assert all("steps.gate." in s.get("if", "") or "steps.prepare." in s.get("if", "") for s in after_gate)
    # The plan it applies is the one the pull request's preview uploaded.
    pr = yaml.safe_load((ROOT / ".github" / "workflows" / "pr.yml").read_text())
    upload = next(s for s in pr["jobs"]["preview"]["steps"] if s.get("name") == "Keep the update plan for the deploy")
    assert upload["with"]["name"] == download["with"]["name"]
    assert "ci-out/plan-${{ matrix.stack }}.meta" in upload["with"]["path"]
