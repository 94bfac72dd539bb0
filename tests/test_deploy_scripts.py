"""The deploy on merge (.github/workflows/deploy.yml), script by script, with fake `pulumi` and `gh`:
the reviewed plan, read from the reviewed run's place in the plan store, applied with `pulumi up --plan`;
refused, with its message and nothing applied, when that run kept no plan (or the plan is another run's
or stack's), when main moved since the review, when the impact guard refuses, when main no longer points
at the deployed commit just before `up`, and when the plan no longer applies; the merged pull request and
its approved reviewing run found from GitHub (a direct push to main, a fork's pull request, a fork's run
of the same commit, a run approved only by its author: none). The workflow itself: per stack, behind
`deploy`, serialized per stack, no artifact read. The same script for real, on the simulated cluster:
tests/sim/test_deploy_script.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from components.offline.mock_engine import ROOT

CI = ROOT / "ci"
DEPLOY = ROOT / ".github" / "workflows" / "deploy.yml"
TREE = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
COMMIT = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
RUN = 700


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


def fake_main(bin_dir: Path, sha: str = COMMIT) -> None:
    """`gh api repos/o/r/git/ref/heads/main --jq .object.sha`: where main points now."""
    executable(bin_dir / "gh", f"""#!/usr/bin/env bash
printf '%s\\n' "$*" >> "{bin_dir}/gh.log"
case "$*" in
  "api repos/o/r/git/ref/heads/main --jq .object.sha") echo {sha} ;;
  *) echo "unexpected gh $*" >&2; exit 9 ;;
esac
""")


def store(tmp_path: Path, tree: str = TREE, stack: str = "p5", run: int = RUN, meta_run: int | None = None,
          meta_stack: str | None = None) -> Path:
    """A plan store (file://) holding `run`'s plan of `stack`, as ci/plan-store.sh put leaves it."""
    root = tmp_path / "store"
    d = root / stack / f"run-{run}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "plan.json").write_text(json.dumps({"resourcePlans": {}}))
    (d / "plan.meta").write_text(f"stack={meta_stack or stack}\ncommit={'a' * 40}\ntree={tree}\n"
                                 f"run={meta_run or run}\npr=12\nhead={'2' * 40}\n")
    return root


def deploy(tmp_path: Path, root: Path, guard_rc: int = 0, run: int | str = RUN, **extra: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    if not (bin_dir / "gh").exists():
        fake_main(bin_dir)
    guard = executable(tmp_path / "guard.sh", f"""#!/usr/bin/env bash
echo "guard $*" > "{tmp_path}/guard.log"
[ {guard_rc} -eq 0 ] || echo "Pulumi.p5.yaml: REFUSED: replace (data loss): LustreFileSystem storage-fs" >&2
exit {guard_rc}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "GITHUB_", "AWS_", "RLTRAIN_", "GH_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", REVIEWED_RUN_ID=str(run), PLAN_STORE_URL=f"file://{root}",
               BEFORE="b" * 40, GITHUB_REPOSITORY="o/r", GITHUB_SHA=COMMIT, GH_TOKEN="t",
               RLTRAIN_CI_OUT=str(tmp_path / "ci-out"), RLTRAIN_IMPACT_GUARD=str(guard),
               PULUMI_BACKEND_URL="file:///tmp/state", PULUMI_CONFIG_PASSPHRASE="x",
               GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"), **extra)
    return subprocess.run([str(CI / "deploy.sh"), "p5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def pulumi_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "bin" / "pulumi.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_reviewed_plan_is_applied(tmp_path):
    fake_pulumi(tmp_path / "bin")
    res = deploy(tmp_path, store(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    calls = pulumi_calls(tmp_path)
    assert calls[:2] == ["login --non-interactive file:///tmp/state",
                         "stack select --non-interactive p5"]  # never created here: the review's preview did that
    up = calls[2].split()
    plan = Path(up[up.index("--plan") + 1])
    assert plan.name == "plan-p5.json" and not plan.exists()  # fetched from the store into a scratch directory
    assert calls[2] == (f"up --yes --non-interactive --stack p5 --refresh --plan {plan} --diff --suppress-progress "
                        "--color never --policy-pack policy") and len(calls) == 3
    assert (tmp_path / "guard.log").read_text().strip() == f"guard --base {'b' * 40} p5"
    # Where main points is read after the stack is selected: immediately before `up`.
    assert (tmp_path / "bin" / "gh.log").read_text().splitlines() == [
        "api repos/o/r/git/ref/heads/main --jq .object.sha"]
    assert f"applied the plan reviewed by run {RUN} on aaaaaaaaaaaa to p5" in res.stdout


def test_main_moved_since_the_review_is_refused_before_anything_runs(tmp_path):
    fake_pulumi(tmp_path / "bin")
    res = deploy(tmp_path, store(tmp_path, tree="f" * 40))
    assert res.returncode == 1
    assert "REFUSED: main moved since the review: the plan was made on tree ffffffffffff" in res.stdout
    assert f"main is tree {TREE[:12]}" in res.stdout and "nothing was applied" in res.stdout
    assert pulumi_calls(tmp_path) == []
    assert "### `pulumi up` of `p5`: refused" in (tmp_path / "summary.md").read_text()


def test_no_reviewed_plan_is_refused(tmp_path):
    fake_pulumi(tmp_path / "bin")
    empty = tmp_path / "empty-store"
    empty.mkdir()
    res = deploy(tmp_path, empty)
    assert res.returncode == 1 and f"REFUSED: no reviewed plan for p5: run {RUN}" in res.stdout
    assert pulumi_calls(tmp_path) == []
    # A plan of another stack is not this stack's.
    res = deploy(tmp_path, store(tmp_path, stack="dev"))
    assert res.returncode == 1 and "REFUSED: no reviewed plan for p5" in res.stdout
    # No reviewed run at all (ci/deploy-find-plan.sh refused): nothing is read.
    res = deploy(tmp_path, store(tmp_path), run="")
    assert res.returncode == 1 and "REFUSED: no reviewed run" in res.stdout
    assert pulumi_calls(tmp_path) == []


def test_the_impact_guard_stops_the_deploy_as_it_stops_the_render(tmp_path):
    fake_pulumi(tmp_path / "bin")
    res = deploy(tmp_path, store(tmp_path), guard_rc=1)
    assert res.returncode == 1
    assert "REFUSED: the impact guard refuses this change of p5" in res.stdout
    assert "Pulumi.p5.yaml: REFUSED: replace (data loss)" in res.stdout  # the render's own words
    assert pulumi_calls(tmp_path) == []


def test_a_plan_that_no_longer_applies_is_refused_with_the_engines_error(tmp_path):
    fake_pulumi(tmp_path / "bin", up="echo 'error: resource violates plan: properties changed: ~storageCapacity' >&2; exit 255")
    res = deploy(tmp_path, store(tmp_path))
    assert res.returncode == 1
    assert "properties changed: ~storageCapacity" in res.stdout
    assert ("REFUSED: pulumi up --plan of p5 stopped (exit 255): the reviewed plan no longer applies "
            "(the live stack or its state changed since the review: drift, another deploy)") in res.stdout
    assert (tmp_path / "ci-out" / "deploy-p5.refused").is_file()


# --- the merged pull request and its approved reviewing run ------------------------------------------

SHA, HEAD = "1" * 40, "2" * 40
PULL = {"number": 12, "merged_at": "2026-12-02T10:00:00Z", "merge_commit_sha": SHA, "user": {"login": "alice"},
        "head": {"sha": HEAD, "ref": "feature", "repo": {"full_name": "o/r"}}}


def run_of(id_: int, repo: str = "o/r", branch: str = "feature", prs: tuple[int, ...] = (),
           conclusion: str = "success", trigger: str = "alice") -> dict:
    """A workflow run as `GET actions/workflows/pr.yml/runs` lists it (the fields ci/reviewed_run.py reads)."""
    return {"id": id_, "event": "pull_request", "head_sha": HEAD, "head_branch": branch,
            "head_repository": {"full_name": repo}, "pull_requests": [{"number": n} for n in prs],
            "status": "completed", "conclusion": conclusion, "triggering_actor": {"login": trigger}}


def approval(login: str, environment: str = "preview", state: str = "approved") -> dict:
    return {"state": state, "comment": "", "user": {"login": login}, "environments": [{"id": 1, "name": environment}]}


def fake_gh(bin_dir: Path, pulls: list[dict], runs: list[dict], approvals: dict[int, list[dict]]) -> None:
    """`gh api` answering the commit's pull requests, the head's runs of pr.yml and each run's approvals."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "pulls.json").write_text(json.dumps(pulls))
    (bin_dir / "runs.json").write_text(json.dumps({"total_count": len(runs), "workflow_runs": runs}))
    for run_id, answer in approvals.items():
        (bin_dir / f"approvals-{run_id}.json").write_text(json.dumps(answer))
    executable(bin_dir / "gh", f"""#!/usr/bin/env bash
printf '%s\\n' "$*" >> "{bin_dir}/gh.log"
case "$*" in
  "api repos/o/r/commits/{SHA}/pulls") cat "{bin_dir}/pulls.json" ;;
  "api --paginate repos/o/r/actions/workflows/pr.yml/runs?event=pull_request&head_sha={HEAD}&per_page=100")
    cat "{bin_dir}/runs.json" ;;
  "api repos/o/r/actions/runs/"*"/approvals") id="${{2#repos/o/r/actions/runs/}}"; id="${{id%/approvals}}"
    cat "{bin_dir}/approvals-$id.json" 2>/dev/null || echo '[]' ;;
  # How a2fe564's ci/deploy-find-plan.sh asked (gh's --jq is jq's language): tests/test_review_trust.py
  # shows that script picking a fork's run.
  "api repos/o/r/commits/{SHA}/pulls --jq "*) jq -r "$4" "{bin_dir}/pulls.json" ;;
  "api repos/o/r/actions/workflows/pr.yml/runs?event=pull_request&head_sha={HEAD}&status=completed&per_page=100 --jq "*)
    jq -r "$4" "{bin_dir}/runs.json" ;;
  *) echo "unexpected gh $*" >&2; exit 9 ;;
esac
""")


def find(tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_", "RUNNER_"))}
    env.update(PATH=f"{tmp_path / 'bin'}:{env['PATH']}", GITHUB_REPOSITORY="o/r", GITHUB_SHA=SHA, GH_TOKEN="t",
               GITHUB_OUTPUT=str(out), RUNNER_TEMP=str(tmp_path))
    res = subprocess.run([str(CI / "deploy-find-plan.sh")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    return res, dict(line.split("=", 1) for line in out.read_text().splitlines()) if out.exists() else {}


def test_the_merged_pull_request_and_its_newest_approved_run_are_found(tmp_path):
    pulls = [PULL,
             # an older pull request whose commits are in this one: merged as something else
             {**PULL, "number": 3, "merge_commit_sha": "9" * 40}]
    # pull_requests is empty once the pull request is merged (GitHub empties it): not required.
    runs = [run_of(700), run_of(701, conclusion="failure"), run_of(702, prs=(12,))]
    fake_gh(tmp_path / "bin", pulls, runs, {700: [approval("bob")], 701: [approval("carol")], 702: []})
    res, out = find(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out == {"pr-number": "12", "run-id": "701", "approved-by": "carol"}


@pytest.mark.parametrize("pulls,runs,approvals,why", [
    ([], [], {}, "no pull request was merged as 111111111111: a direct push to main"),
    ([{**PULL, "merged_at": None}], [], {}, "no pull request was merged as"),  # open: its test merge commit
    ([{**PULL, "head": {**PULL["head"], "repo": {"full_name": "fork/r"}}}], [run_of(700, repo="fork/r")],
     {700: [approval("bob")]}, "#12 came from fork/r: a fork's pull request never ran a preview with credentials"),
    ([PULL], [], {}, "#12 (head 222222222222 on feature) has no run of pr.yml from this repository"),
    ([PULL], [run_of(700)], {700: []}, "run 700 has no approval of `preview`"),
    ([PULL], [run_of(700)], {700: [approval("alice")]}, "run 700's `preview` was approved only by alice"),
    ([PULL], [run_of(700, trigger="bob")], {700: [approval("bob")]}, "approved only by bob"),  # a re-run's trigger
    ([PULL], [run_of(700)], {700: [approval("bob", state="rejected"), approval("bob", environment="deploy")]},
     "run 700 has no approval of `preview`"),
])
def test_nothing_approved_is_refused(tmp_path, pulls, runs, approvals, why):
    fake_gh(tmp_path / "bin", pulls, runs, approvals)
    res, out = find(tmp_path)
    assert res.returncode == 1 and "::error title=Deploy refused::" in res.stdout and why in res.stdout, res.stdout
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
    assert gate["env"]["DEPLOY_BRANCH"] == "main" == by_script["ci/deploy.sh"]["env"]["DEPLOY_BRANCH"]
    order = [s.get("run", s.get("uses", "")).split()[0] for s in job["steps"]]
    assert order.index("ci/preview-gate.sh") < order.index("ci/deploy-find-plan.sh") < order.index("ci/deploy.sh")
    # The plan comes from the reviewed run's place in the plan store, never from an artifact.
    assert not any(s.get("uses", "").startswith("actions/download-artifact@") for s in job["steps"])
    env = by_script["ci/deploy.sh"]["env"]
    assert env["REVIEWED_RUN_ID"] == "${{ steps.reviewed.outputs.run-id }}"
    assert env["PLAN_STORE_URL"] == "${{ vars.PLAN_STORE_URL }}" and "PLAN_DIR" not in env
    after_gate = job["steps"][job["steps"].index(gate) + 1:]
    assert all("steps.gate." in s.get("if", "") or "steps.prepare." in s.get("if", "") for s in after_gate)
    # The plan it applies is the one the pull request's preview kept in the same store.
    pr = yaml.safe_load((ROOT / ".github" / "workflows" / "pr.yml").read_text())
    keep = next(s for s in pr["jobs"]["preview"]["steps"] if s.get("name") == "Keep the update plan for the deploy")
    assert keep["run"] == 'ci/plan-store.sh put "$STACK"'
    assert keep["env"]["PLAN_STORE_URL"] == env["PLAN_STORE_URL"] and keep["env"]["RUN_ID"] == "${{ github.run_id }}"
