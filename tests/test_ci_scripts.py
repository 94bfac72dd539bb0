"""The preview half of the pull-request workflow, script by script (ci/), with fake `pulumi` and `gh`
executables that record what they were asked: the credentials gate (Pulumi Cloud or a self-managed
backend), the secrets check that skips a stack, the preview itself (stack created when missing,
output and exit code captured whatever happens) and the comment (posted or edited, capped)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from components.offline.mock_engine import ROOT

CI = ROOT / "ci"

_spec = importlib.util.spec_from_file_location("pr_comment", CI / "pr_comment.py")
pr_comment = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pr_comment)


def fake(bin_dir: Path, name: str, body: str) -> None:
    """An executable `name` in bin_dir: logs its arguments and environment, then runs `body`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"""#!/usr/bin/env bash
log="{bin_dir}/{name}.log"
printf '%s\\n' "$*" >> "$log"
printf 'env PULUMI_CONFIG_PASSPHRASE=%s PULUMI_ACCESS_TOKEN=%s\\n' \\
  "${{PULUMI_CONFIG_PASSPHRASE-<unset>}}" "${{PULUMI_ACCESS_TOKEN-<unset>}}" >> "$log"
{body}
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run(script: str, *args: str, env: dict[str, str], bin_dir: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PULUMI_", "GITHUB_", "AWS_", "GH_")) and k not in ("PR_NUMBER", "RUN_URL")}
    if bin_dir is not None:
        base["PATH"] = f"{bin_dir}:{base['PATH']}"
    return subprocess.run([str(CI / script), *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def first_in_every_tier(cases: list) -> list:
    """A table of cases, each a fresh run of a script (bash and a Python interpreter, some 0.3 s of
    CPU): the first in every tier, the others in the slow tier (what CI runs). A case of several
    arguments is a tuple; anything else is the one argument."""
    return [cases[0], *(pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
                        for case in cases[1:])]


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


# --- the gate --------------------------------------------------------------------------------------

# `GET repos/o/r/environments/preview` (REST "Get an environment"): the fields the gate reads.
PROTECTED = {"name": "preview", "can_admins_bypass": False, "deployment_branch_policy": None, "protection_rules": [
    {"id": 1, "type": "required_reviewers", "prevent_self_review": True,
     "reviewers": [{"type": "Team", "reviewer": {"slug": "maintainers"}}]},
    {"id": 2, "type": "branch_policy"}]}
# `GET repos/o/r/actions/runs/900/approvals` (REST "Get the review history for a workflow run").
APPROVED = [{"state": "approved", "comment": "", "user": {"login": "maintainer"},
             "environments": [{"id": 3, "name": "preview"}]}]
# The gate gets whether each secret is set (the workflow's `secrets.X != ''`), never a secret.
CREDENTIALS = {"HAS_AWS_ROLE_ARN": "true", "HAS_PULUMI_ACCESS_TOKEN": "true", "BACKEND_IS_CLOUD": "true",
               "PASSPHRASE_PROVIDER": "true", "HAS_PULUMI_CONFIG_PASSPHRASE": "false"}


def fake_environment(bin_dir: Path, environment: dict | None, approvals: list | None = None,
                     policies: dict | None = None, name: str = "preview") -> None:
    """`gh api` answering the environment NAME (404 when None), run 900's approvals and NAME's
    deployment branch policies."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "environment.json").write_text(json.dumps(environment))
    (bin_dir / "approvals.json").write_text(json.dumps(APPROVED if approvals is None else approvals))
    (bin_dir / "policies.json").write_text(json.dumps(policies or {"total_count": 0, "branch_policies": []}))
    answer = (f'cat "{bin_dir}/environment.json"' if environment is not None
              else 'echo \'{"message":"Not Found","status":"404"}\'; echo "gh: Not Found (HTTP 404)" >&2; exit 1')
    fake(bin_dir, "gh", f"""case "$*" in
  "api repos/o/r/environments/{name}") {answer} ;;
  "api repos/o/r/actions/runs/900/approvals") cat "{bin_dir}/approvals.json" ;;
  "api repos/o/r/environments/{name}/deployment-branch-policies") cat "{bin_dir}/policies.json" ;;
  *) echo "unexpected gh $*" >&2; exit 9 ;;
esac""")


def gate(tmp_path: Path, environment: dict | None, approvals: list | None = None, policies: dict | None = None,
         **extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out, ci_out, bin_dir = tmp_path / "out", tmp_path / "ci-out", tmp_path / "bin"
    fake_environment(bin_dir, environment, approvals, policies, extra.get("PROTECTED_ENVIRONMENT", "preview"))
    res = run("preview-gate.sh", env={**CREDENTIALS, "GITHUB_OUTPUT": str(out), "RLTRAIN_CI_OUT": str(ci_out),
                                      "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "900", "GH_TOKEN": "t",
                                      "PR_AUTHOR": "alice", "GITHUB_TRIGGERING_ACTOR": "alice", **extra},
              bin_dir=bin_dir)
    return res, outputs(out), ci_out / "preview.unavailable"


@pytest.mark.parametrize("environment,why", first_in_every_tier([
    (None, "`gh api repos/o/r/environments/preview` failed: "),  # no such environment (404)
    ({**PROTECTED, "protection_rules": []}, "has no required reviewers"),   # private repo on Team
    ({**PROTECTED, "protection_rules": [{"type": "wait_timer", "wait_timer": 5}]}, "has no required reviewers"),
    ({**PROTECTED, "protection_rules": [{"type": "required_reviewers", "prevent_self_review": True, "reviewers": []}]},
     "has no required reviewers"),
]))
def test_gate_fails_closed_without_required_reviewers(tmp_path, environment, why):
    """Before: every credential set was enough; an environment without reviewers (required reviewers
    exist only in public repositories on Free, Pro and Team) handed its secrets to any run."""
    res, out, unavailable = gate(tmp_path, environment)
    assert res.returncode == 1
    assert out == {"backend": "cloud", "has-credentials": "false"}
    assert "::error title=Environment not protected::pulumi preview refused: " in res.stdout
    assert why in res.stdout and why in unavailable.read_text()
    assert "pulumi preview refused" in pr_comment.body("p5", tmp_path / "ci-out")


def test_gate_passes_a_protected_environment_approved_by_someone_else(tmp_path):
    res, out, unavailable = gate(tmp_path, PROTECTED)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out == {"backend": "cloud", "has-credentials": "true"} and not unavailable.exists()
    assert ("protected: the environment `preview` needs an approval by one of 1 reviewer(s), no administrator "
            "bypass, no self-review; this run was approved by maintainer") in res.stdout
    assert "::warning" not in res.stdout and "::error" not in res.stdout
    calls = (tmp_path / "bin" / "gh.log").read_text().splitlines()[0::2]
    assert calls == ["api repos/o/r/environments/preview", "api repos/o/r/actions/runs/900/approvals"]


def test_gate_on_dependabot_says_why_without_reading_anything(tmp_path):
    res, out, unavailable = gate(tmp_path, None, DEPENDABOT="true")
    assert res.returncode == 0, res.stderr
    assert out == {"backend": "none", "has-credentials": "false"}
    assert "Dependabot's" in unavailable.read_text() and not (tmp_path / "bin" / "gh.log").exists()


@pytest.mark.parametrize("env,ready,backend,named", first_in_every_tier([
    ({"HAS_AWS_ROLE_ARN": "true", "HAS_PULUMI_ACCESS_TOKEN": "true"}, "true", "cloud", None),
    ({"HAS_AWS_ROLE_ARN": "true", "HAS_PULUMI_ACCESS_TOKEN": "false"}, "false", "cloud", "PULUMI_ACCESS_TOKEN"),
    ({"HAS_AWS_ROLE_ARN": "false", "HAS_PULUMI_ACCESS_TOKEN": "true"}, "false", "cloud", "AWS_ROLE_ARN"),
    # Self-managed: no Pulumi Cloud token asked for; a passphrase or a KMS provider instead.
    ({"HAS_AWS_ROLE_ARN": "true", "BACKEND_IS_CLOUD": "false", "PASSPHRASE_PROVIDER": "true",
      "HAS_PULUMI_CONFIG_PASSPHRASE": "true"}, "true", "self-managed", None),
    ({"HAS_AWS_ROLE_ARN": "true", "BACKEND_IS_CLOUD": "false", "PASSPHRASE_PROVIDER": "false"},
     "true", "self-managed", None),
    ({"HAS_AWS_ROLE_ARN": "true", "BACKEND_IS_CLOUD": "false", "PASSPHRASE_PROVIDER": "true",
      "HAS_PULUMI_CONFIG_PASSPHRASE": "false"}, "false", "self-managed", "PULUMI_CONFIG_PASSPHRASE"),
    # A self-hosted Pulumi Cloud is Pulumi Cloud: a token.
    ({"HAS_AWS_ROLE_ARN": "true", "BACKEND_IS_CLOUD": "true", "HAS_PULUMI_CONFIG_PASSPHRASE": "true"},
     "false", "cloud", "PULUMI_ACCESS_TOKEN"),
]))
def test_gate(tmp_path, env, ready, backend, named):
    out, summary = tmp_path / "out", tmp_path / "summary"
    bin_dir = tmp_path / "bin"
    fake_environment(bin_dir, PROTECTED)
    res = run("preview-gate.sh", env={**env, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary),
                                      "RLTRAIN_CI_OUT": str(tmp_path / "ci-out"), "GITHUB_REPOSITORY": "o/r",
                                      "GITHUB_RUN_ID": "900", "GH_TOKEN": "t"}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert outputs(out) == {"has-credentials": ready, "backend": backend}
    unavailable = tmp_path / "ci-out" / "preview.unavailable"
    if named:
        assert "::notice title=Pulumi preview skipped::" in res.stdout and named in res.stdout
        assert named in summary.read_text() and named in unavailable.read_text()
    else:
        assert "::notice" not in res.stdout and not unavailable.exists()


def test_gate_on_a_fork_says_previews_run_after_a_maintainer_approves(tmp_path):
    out = tmp_path / "out"
    res = run("preview-gate.sh", env={"FORK": "true", "HAS_AWS_ROLE_ARN": "true", "HAS_PULUMI_ACCESS_TOKEN": "true",
                                      "GITHUB_OUTPUT": str(out), "RLTRAIN_CI_OUT": str(tmp_path / "ci-out")})
    assert res.returncode == 0, res.stderr
    assert outputs(out) == {"backend": "none", "has-credentials": "false"}
    body = pr_comment.body("p5", tmp_path / "ci-out", commit="0123456789abcdef")
    assert body.startswith("### `pulumi preview` of `p5` at `0123456789ab`: not run here")
    assert "comes from a fork" in body and "Previews run after a maintainer approves" in body


# --- secrets not set: the stack is skipped ---------------------------------------------------------


def test_stack_without_its_secrets_is_skipped_with_a_notice_naming_each_key(tmp_path):
    out = tmp_path / "gh-out"
    env = {"GITHUB_OUTPUT": str(out), "RLTRAIN_CI_OUT": str(tmp_path / "ci-out"),
           "RLTRAIN_SKIP_PULUMI_INSTALL": "1", "RLTRAIN_PREVIEW_PYTHON": sys.executable, "PULUMI_ORG": "acme"}
    res = run("preview-install.sh", "p5", env=env)
    assert res.returncode == 0, res.stderr
    assert outputs(out) == {"ready": "false"}
    for key in ("rltrain:hfToken", "rltrain:grafanaAdminPassword"):
        assert f"::notice title=pulumi preview of p5 skipped::{key} is not set in Pulumi.p5.yaml: " \
               f"pulumi config set --secret {key} VALUE --stack acme/p5, then commit Pulumi.p5.yaml." in res.stdout
    skipped = (tmp_path / "ci-out" / "preview-p5.skipped").read_text()
    assert "rltrain:hfToken\tpulumi config set --secret rltrain:hfToken VALUE --stack acme/p5" in skipped.splitlines()


# --- the preview -----------------------------------------------------------------------------------

PREVIEW_OUTPUT = """Previewing update (p5):
    +  pulumi:pulumi:Stack rltrain-p5 create
 +  aws:fsx:LustreFileSystem storage-fs create

Policies:
    ✅ rltrain@v0.0.1 (local: policy)

Resources:
    + 180 to create

Duration: 41s
"""


@pytest.mark.parametrize("env,login,select", first_in_every_tier([
    # Pulumi Cloud, stacks in an organization.
    ({"PULUMI_ACCESS_TOKEN": "pul-x", "PULUMI_ORG": "acme", "PULUMI_CONFIG_PASSPHRASE": ""},
     "login --non-interactive", "stack select --non-interactive --create --secrets-provider default acme/p5"),
    # Self-managed, passphrase: no organization in the name.
    ({"PULUMI_BACKEND_URL": "s3://state", "PULUMI_CONFIG_PASSPHRASE": "pw", "PULUMI_ORG": "acme",
      "PULUMI_ACCESS_TOKEN": ""},
     "login --non-interactive s3://state", "stack select --non-interactive --create --secrets-provider default p5"),
    # Self-managed, KMS.
    ({"PULUMI_BACKEND_URL": "s3://state", "PULUMI_SECRETS_PROVIDER": "awskms://alias/rltrain",
      "PULUMI_CONFIG_PASSPHRASE": ""},
     "login --non-interactive s3://state",
     "stack select --non-interactive --create --secrets-provider awskms://alias/rltrain p5"),
]))
def test_preview_logs_in_creates_the_stack_and_captures_its_output(tmp_path, env, login, select):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "pulumi", f"""if [ "$1" = preview ]; then cat <<'OUT'
{PREVIEW_OUTPUT}OUT
fi""")
    out = tmp_path / "ci-out"
    res = run("preview.sh", "p5", env={**env, "RLTRAIN_CI_OUT": str(out)}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    calls = (bin_dir / "pulumi.log").read_text().splitlines()
    commands = calls[0::2]
    ref = select.rsplit(" ", 1)[-1]
    assert commands == [login, select,
                        f"refresh --preview-only --non-interactive --stack {ref} --diff --suppress-progress --color never",
                        f"preview --non-interactive --stack {ref} --refresh --diff --suppress-progress --color never "
                        f"--save-plan {out}/plan-p5.json --policy-pack policy"]
    # An empty secret is no passphrase: removed, not passed as "".
    for e in calls[1::2]:
        if env.get("PULUMI_CONFIG_PASSPHRASE") == "":
            assert "PULUMI_CONFIG_PASSPHRASE=<unset>" in e
        if env.get("PULUMI_ACCESS_TOKEN") == "":
            assert "PULUMI_ACCESS_TOKEN=<unset>" in e
    assert (out / "preview-p5.rc").read_text().strip() == "0"
    assert "Resources:\n    + 180 to create" in (out / "preview-p5.txt").read_text()


DRIFT_OUTPUT = """Refreshing (p5):
    ~  aws:fsx:LustreFileSystem storage-fs update [diff: ~storageCapacity]
    -  kubernetes:core/v1:ConfigMap cm-extra delete

Resources:
    ~ 1 to update
    - 1 to delete
    178 unchanged

Duration: 12s
"""

NO_DRIFT_OUTPUT = """Refreshing (p5):

Resources:
    180 unchanged

Duration: 9s
"""


def fake_pulumi(bin_dir: Path, drift: str, drift_rc: int = 0) -> None:
    fake(bin_dir, "pulumi", f"""case "$1" in
  refresh) cat <<'OUT'
{drift}OUT
  exit {drift_rc} ;;
  preview) cat <<'OUT'
{PREVIEW_OUTPUT}OUT
  for a in "$@"; do case "$prev" in --save-plan) echo '{{"resourcePlans": {{}}}}' > "$a" ;; esac; prev="$a"; done ;;
esac""")


def test_drift_is_shown_apart_from_the_change_and_the_preview_refreshes(tmp_path):
    """Before: `pulumi preview` without --refresh judged the change against the state as last written:
    a resource changed by hand showed as part of this PR's change, or not at all."""
    bin_dir, out = tmp_path / "bin", tmp_path / "ci-out"
    fake_pulumi(bin_dir, DRIFT_OUTPUT)
    res = run("preview.sh", "p5", env={"PULUMI_BACKEND_URL": "file:///tmp/state", "PULUMI_CONFIG_PASSPHRASE": "x",
                                       "RLTRAIN_CI_OUT": str(out)}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert (out / "drift-p5.rc").read_text().strip() == "0"
    body = pr_comment.body("p5", out, commit=HEAD)
    assert ("**Drift**: the live stack differs from its state, apart from this pull request's change "
            "(`pulumi refresh --preview-only`: ~ 1 to update, - 1 to delete)") in body
    assert "~  aws:fsx:LustreFileSystem storage-fs update [diff: ~storageCapacity]" in body
    assert body.index("**Drift**") < body.index("Summary:") < body.index("+ 180 to create")
    # The update plan, and the tree it was made on (what the deploy checks against main).
    meta = dict(line.split("=", 1) for line in (out / "plan-p5.meta").read_text().splitlines())
    tree = subprocess.run(["git", "rev-parse", "HEAD^{tree}"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert meta["stack"] == "p5" and meta["tree"] == tree and (out / "plan-p5.json").is_file()


def test_no_drift_and_a_failed_drift_check_are_said(tmp_path):
    bin_dir, out = tmp_path / "bin", tmp_path / "ci-out"
    env = {"PULUMI_BACKEND_URL": "file:///tmp/state", "PULUMI_CONFIG_PASSPHRASE": "x", "RLTRAIN_CI_OUT": str(out)}
    fake_pulumi(bin_dir, NO_DRIFT_OUTPUT)
    assert run("preview.sh", "p5", env=env, bin_dir=bin_dir).returncode == 0
    assert "No drift: the live stack matches its state" in pr_comment.body("p5", out)
    fake_pulumi(bin_dir, "error: AccessDenied: eks:DescribeCluster\n", drift_rc=255)
    res = run("preview.sh", "p5", env=env, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr  # the preview still ran
    body = pr_comment.body("p5", out)
    assert "**Drift check failed** (`pulumi refresh --preview-only`, exit 255)" in body
    assert "error: AccessDenied: eks:DescribeCluster" in body and "succeeded" in body


def test_a_failed_preview_is_captured_and_fails_the_step(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "pulumi", """if [ "$1" = stack ]; then
  echo 'error: failed to decrypt config: incorrect passphrase' >&2; exit 255
fi""")
    out = tmp_path / "ci-out"
    res = run("preview.sh", "p5", env={"PULUMI_BACKEND_URL": "file:///tmp/state", "PULUMI_CONFIG_PASSPHRASE": "x",
                                       "RLTRAIN_CI_OUT": str(out)}, bin_dir=bin_dir)
    assert res.returncode == 255
    assert (out / "preview-p5.rc").read_text().strip() == "255"
    assert "failed to decrypt config" in (out / "preview-p5.txt").read_text()
    assert "failed to decrypt config" in res.stdout  # in the job log too


# --- the comment -----------------------------------------------------------------------------------


def write(out: Path, stack: str, text: str | None, rc: int | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if text is not None:
        (out / f"preview-{stack}.txt").write_text(text)
    if rc is not None:
        (out / f"preview-{stack}.rc").write_text(f"{rc}\n")


def test_comment_on_success_shows_the_summary_first(tmp_path):
    write(tmp_path, "p5", PREVIEW_OUTPUT, 0)
    body = pr_comment.body("p5", tmp_path, "https://github.example/run/1", "0123456789abcdef0123")
    assert body.startswith("### `pulumi preview` of `p5` at `0123456789ab`: succeeded")
    assert body.index("+ 180 to create") < body.index("<details>")
    assert "rltrain@v0.0.1" in body


def test_comment_on_failure_says_so_with_the_errors(tmp_path):
    write(tmp_path, "p5", "Previewing update (p5):\nerror: failed to decrypt config: incorrect passphrase\n", 255)
    body = pr_comment.body("p5", tmp_path)
    assert "### `pulumi preview` of `p5`: **failed** (exit 255)" in body
    assert body.index("error: failed to decrypt config") < body.index("<details>")


def test_a_huge_output_is_trimmed_from_the_front_keeping_the_summary(tmp_path):
    noise = "".join(f"    ~ kubernetes:core/v1:ConfigMap cm-{i} update [diff: ~data]\n" for i in range(5000))
    write(tmp_path, "p5", "Previewing update (p5):\n" + noise + "\x1b[32m" + PREVIEW_OUTPUT + "```\n", 0)
    body = pr_comment.body("p5", tmp_path)
    assert len(body) <= pr_comment.MAX_COMMENT
    assert "trimmed from the front" in body
    assert body.rstrip().endswith("</details>")
    tail = body[body.index("<details>"):]
    assert "Resources:\n    + 180 to create\n\nDuration: 41s" in tail  # the end of the output stays
    assert "\x1b" not in body and body.count("```") % 2 == 0


def test_comment_when_preflight_failed(tmp_path):
    (tmp_path / "preflight-p5.rc").write_text("1\n")
    (tmp_path / "preflight-p5.txt").write_text("p5.48xlarge: On-Demand P instances quota 0 vCPU < 192\n")
    body = pr_comment.body("p5", tmp_path)
    assert "**preflight failed** (exit 1)" in body and "quota 0 vCPU < 192" in body


def test_comment_when_skipped_or_not_run(tmp_path):
    (tmp_path / "preview-p5.skipped").write_text(
        "rltrain:hfToken\tpulumi config set --secret rltrain:hfToken VALUE --stack p5\n")
    body = pr_comment.body("p5", tmp_path)
    assert "skipped, secrets not set" in body
    assert "- `rltrain:hfToken`: `pulumi config set --secret rltrain:hfToken VALUE --stack p5`" in body
    assert "did not run" in pr_comment.body("dev", tmp_path)


# --- the upsert: this workflow's comment only, never an older run's result ------------------------

BOT = "github-actions[bot]"
APP_BOT = "rltrain-review[bot]"  # the review App's bot: the fork path's author (pr-comment.yml)
HEAD = "c0ffee" + "0" * 34
OLD_HEAD = "bad" + "0" * 37
_up = importlib.util.spec_from_file_location("upsert_comment", CI / "upsert_comment.py")
upsert_comment = importlib.util.module_from_spec(_up)
_up.loader.exec_module(upsert_comment)


def fake_github(bin_dir: Path, comments: list[dict], head: str = HEAD, pulls: list[dict] | None = None) -> None:
    """`gh api` serving pull request 7 whose head is `head` and its comments; PATCH/POST payloads kept.
    `pulls`: the pull requests of commit HEAD (`commits/{sha}/pulls`, as the --jq of upsert_comment.py
    prints them), each also served as `pulls/N`; by default PR 7 from the fork `fork/r`, branch `feature`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    if pulls is None:
        pulls = [{"number": 7, "state": "open", "sha": head, "repo": "fork/r", "ref": "feature"}]
    (bin_dir / "comments.jsonl").write_text("".join(json.dumps(c) + "\n" for c in comments))
    (bin_dir / "commit-pulls.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pulls))
    for pr in pulls:
        (bin_dir / f"pull-{pr['number']}.json").write_text(json.dumps({"number": pr["number"], "head": {"sha": pr["sha"]}}))
    (bin_dir / "pull-7.json").write_text(json.dumps({"number": 7, "head": {"sha": head}}))
    fake(bin_dir, "gh", f"""case "$*" in
  "api --paginate repos/o/r/commits/"*"/pulls "*) cat "{bin_dir}/commit-pulls.jsonl" ;;
  *--paginate*) cat "{bin_dir}/comments.jsonl" ;;
  "api repos/o/r/pulls/"*) n="${{2##*/}}"; cat "{bin_dir}/pull-$n.json" ;;
  "api repos/o/r/issues/"*"/labels --jq .[].name") cat "{bin_dir}/labels.txt" 2>/dev/null ;;
  *"/labels"*) for a in "$@"; do [ -f "$a" ] && cp "$a" "{bin_dir}/labels-payload.json"; done ;;
  *--method*) for a in "$@"; do [ -f "$a" ] && cp "$a" "{bin_dir}/payload.json"; done ;;
esac
exit 0""")


def gh_calls(bin_dir: Path, labels: bool = False) -> list[str]:
    """The `gh` calls, without those of ci/review_labels.py (the labels' own test reads them)."""
    calls = (bin_dir / "gh.log").read_text().splitlines()[0::2]
    if labels:
        return calls
    first_label = next((i for i, c in enumerate(calls) if "/labels" in c), None)
    # ci/review_labels.py re-reads the pull request's head just before its label calls.
    return calls if first_label is None else calls[:first_label - 1]


def comment_env(out: Path, **extra: str) -> dict[str, str]:
    return {"RLTRAIN_CI_OUT": str(out), "GH_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "PR_NUMBER": "7",
            "HEAD_SHA": HEAD, "RUN_ID": "500", "RUN_ATTEMPT": "1", "RUN_URL": "https://github.example/run/500",
            **extra}


def ours(run_id: int, attempt: int = 1, kind: str = "preview:p5", author: str = BOT, id_: int = 4242) -> dict:
    return {"id": id_, "author": author,
            "body": f"{upsert_comment.marker(kind)}\n{upsert_comment.meta(OLD_HEAD, run_id, attempt)}\nold text"}


@pytest.mark.parametrize("existing,method", first_in_every_tier([
    ([], "POST"),
    ([ours(400)], "PATCH"),                        # an older run's comment: replaced
    ([ours(500, attempt=1)], "PATCH"),             # this run, re-run (attempt 2 below) or same attempt
    ([ours(400, id_=1), ours(450, id_=9)], "PATCH"),  # the latest of ours is edited
]))
def test_comment_posted_or_edited(tmp_path, existing, method):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, existing)
    out = tmp_path / "ci-out"
    write(out, "p5", "error: boom\n", 1)
    summary = tmp_path / "summary.md"
    res = run("pr-comment.sh", "p5", env={**comment_env(out), "GITHUB_STEP_SUMMARY": str(summary)}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    calls = gh_calls(bin_dir)
    assert calls[0] == "api repos/o/r/pulls/7"
    assert calls[1].startswith("api --paginate repos/o/r/issues/7/comments --jq ")
    if method == "PATCH":
        assert calls[2].startswith(f"api --method PATCH repos/o/r/issues/comments/{max(c['id'] for c in existing)} ")
    else:
        assert calls[2].startswith("api --method POST repos/o/r/issues/7/comments --input ")
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    assert body.startswith(f"<!-- rltrain-preview:p5 -->\n<!-- rltrain-meta commit={HEAD} run=500 attempt=1 -->\n")
    assert f"### `pulumi preview` of `p5` at `{HEAD[:12]}`: **failed** (exit 1)" in body  # names the commit
    assert "**failed** (exit 1)" in summary.read_text()


def test_someone_elses_comment_with_the_marker_is_never_edited(tmp_path):
    """Before: the first comment starting with the marker was edited, whoever wrote it."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [ours(400, author="mallory", id_=13)])
    out = tmp_path / "ci-out"
    write(out, "p5", PREVIEW_OUTPUT, 0)
    res = run("pr-comment.sh", "p5", env=comment_env(out), bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert gh_calls(bin_dir)[2].startswith("api --method POST repos/o/r/issues/7/comments ")
    # Comment 13 is neither edited nor deleted (match its endpoint: a tmp path may hold "13").
    assert not any(re.search(r"comments/13\b", call) for call in gh_calls(bin_dir))
    assert "left alone: mallory" in res.stdout


def test_an_older_run_never_overwrites_a_newer_comment(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [ours(600)])
    out = tmp_path / "ci-out"
    write(out, "p5", PREVIEW_OUTPUT, 0)
    res = run("pr-comment.sh", "p5", env=comment_env(out), bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert len(gh_calls(bin_dir)) == 2 and not (bin_dir / "payload.json").exists()
    assert "written by run 600 attempt 1, newer than this run 500" in res.stdout
    # A re-run (attempt 2) of the newest run does replace its own first attempt's comment.
    fake_github(bin_dir, [ours(500, attempt=1)])
    res = run("pr-comment.sh", "p5", env=comment_env(out, RUN_ATTEMPT="2"), bin_dir=bin_dir)
    assert "updated comment 4242" in res.stdout


def test_a_result_for_a_commit_that_is_no_longer_the_head_is_not_written(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [], head="f" * 40)  # a newer push
    out = tmp_path / "ci-out"
    write(out, "p5", PREVIEW_OUTPUT, 0)
    res = run("pr-comment.sh", "p5", env=comment_env(out), bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert gh_calls(bin_dir) == ["api repos/o/r/pulls/7"] and "the run of the newer commit comments" in res.stdout


# --- the review comment: same repository and fork (workflow_run) paths -----------------------------


def review_artifact(d: Path, pr: str | None = "7") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.md").write_text("## What this change does to each stack\n\nCommit `c0ffee000000`, judged ...\n")
    (d / "review.json").write_text(json.dumps({"head_sha": HEAD, "exit": 0, "pr_number": pr}))
    return d


def fork_comment(tmp_path: Path, art: Path, **extra: str) -> subprocess.CompletedProcess:
    """ci/review-comment.sh as pr-comment.yml runs it: FORK=true, the head from workflow_run, no PR_NUMBER."""
    bin_dir = tmp_path / "bin"
    env = {k: v for k, v in comment_env(tmp_path / "ci-out", FORK="true").items() if k != "PR_NUMBER"}
    env.update({"HEAD_REPO": "fork/r", "HEAD_BRANCH": "feature", "COMMENT_AUTHOR": APP_BOT, **extra})
    base = {k: v for k, v in os.environ.items() if k not in ("PR_NUMBER", "GITHUB_REPOSITORY")}
    return subprocess.run([str(CI / "review-comment.sh"), str(art)], cwd=tmp_path,  # no checkout of the PR
                          env={**base, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env},
                          capture_output=True, text=True, timeout=60)


def test_review_comment_of_a_fork_with_its_own_marker_and_the_approval_note(tmp_path):
    """The fork path: the PR resolved from the run's head repository and branch, commit from
    workflow_run.head_sha, the fork's own marker, the note on previews."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review", pr="123"))  # the artifact's number is ignored
    assert res.returncode == 0, res.stderr
    calls = gh_calls(bin_dir)
    assert calls[0].startswith(f"api --paginate repos/o/r/commits/{HEAD}/pulls --jq ")
    assert calls[1] == "api repos/o/r/pulls/7"
    assert calls[3].startswith("api --method POST repos/o/r/issues/7/comments ")
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    assert body.startswith("<!-- rltrain-review-fork -->\n<!-- rltrain-meta commit=" + HEAD + " run=500 attempt=1 -->\n"
                           "## Review of #7, a pull request from a fork\n\n" f"**Commit `{HEAD}`**")
    assert body.index("Previews run after a maintainer approves") < body.index("> ## What this change does to each stack")


def test_a_forks_rerun_never_lands_on_the_mirror_pull_request(tmp_path):
    """The documented mirror flow: a maintainer pushes the fork's commit to `pr-7` of this repository
    and opens PR 9, same head SHA. Before: the fork's artifact named 9, the head SHA matched, and the
    fork's "no change, all pass" replaced PR 9's reviewed comment. Now the PR is the one whose head is
    the run's own repository and branch, and the fork's marker never matches PR 9's comment."""
    bin_dir = tmp_path / "bin"
    pulls = [{"number": 9, "state": "open", "sha": HEAD, "repo": "o/r", "ref": "pr-7"},
             {"number": 7, "state": "open", "sha": HEAD, "repo": "fork/r", "ref": "feature"}]
    fake_github(bin_dir, [ours(400, kind="review", id_=99)], pulls=pulls)
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review", pr="9"))
    assert res.returncode == 0, res.stderr
    calls = gh_calls(bin_dir)
    assert "api repos/o/r/pulls/7" in calls and not any("/9" in c or "comments/99" in c for c in calls), calls
    assert calls[-1].startswith("api --method POST repos/o/r/issues/7/comments ")
    assert "left alone: #9 (o/r:pr-7)" in res.stderr


@pytest.mark.parametrize("pulls", first_in_every_tier([
    [],                                                                            # no pull request of that commit
    [{"number": 7, "state": "closed", "sha": HEAD, "repo": "fork/r", "ref": "feature"}],
    [{"number": 7, "state": "open", "sha": HEAD, "repo": "fork/r", "ref": "other-branch"}],
    [{"number": 7, "state": "open", "sha": HEAD, "repo": "someone/r", "ref": "feature"}],
]))
def test_a_fork_run_without_its_own_open_pull_request_writes_nothing(tmp_path, pulls):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [], pulls=pulls)
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review", pr="7"))
    assert res.returncode == 0, res.stderr
    assert len(gh_calls(bin_dir)) == 1 and not (bin_dir / "payload.json").exists()
    assert "nothing to comment" in res.stdout + res.stderr


def test_a_forged_pr_number_in_a_forks_artifact_writes_nothing(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [], head="e" * 40)  # PR 7's head is not the commit the run reviewed
    res = fork_comment(tmp_path, review_artifact(tmp_path / "review"))
    assert res.returncode == 0 and not (bin_dir / "payload.json").exists()


def test_the_forks_text_mentions_nobody_and_renders_no_html(tmp_path):
    """Before: the fork's summary was posted as-is: `@org/team` pinged people, `<img>` loaded, and a
    forged meta line (run=999999999) in the body froze the comment against every later run."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    art = review_artifact(tmp_path / "review")
    forged = upsert_comment.meta(HEAD, 999999999, 9)
    (art / "summary.md").write_text(f"Hi @alice and @acme/platform, mail me at bob@example.com\n"
                                    f"<img src=https://evil.example/t.png><details open>x</details>\n{forged}\n"
                                    "quota 0 vCPU < 192; `4800 -> 2400`\n")
    res = fork_comment(tmp_path, art)
    assert res.returncode == 0, res.stderr
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    z = "\u200b"
    assert f"@{z}alice" in body and f"@{z}acme/platform" in body and "bob@example.com" in body
    assert "<img" not in body and f"<{z}img" in body and f"<{z}/details>" in body and "<details" not in body
    assert body.count("<!-- rltrain-meta") == 1 and "quota 0 vCPU < 192; `4800 -> 2400`" in body
    assert upsert_comment.written_by(body) == (500, 1)  # the real meta line, not the forged one
    assert upsert_comment.written_by(f"{upsert_comment.marker('review')}\nx\n{forged}") is None


def test_a_symlink_in_the_artifact_is_not_followed(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    art = tmp_path / "review"
    art.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("AKIA-not-for-comments\n")
    (art / "summary.md").symlink_to(secret)
    res = fork_comment(tmp_path, art)
    assert res.returncode == 0, res.stderr
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    assert "AKIA" not in body and "the offline job stopped before its review" in body


def test_review_comment_when_the_offline_job_stopped_early(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    res = run("review-comment.sh", str(tmp_path / "missing"), env=comment_env(tmp_path / "ci-out", FORK="false"),
              bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    assert "no review" in body and "stopped before its review" in body and "maintainer approves" not in body


def test_no_comment_outside_a_pull_request(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "gh", "exit 1")
    out = tmp_path / "ci-out"
    write(out, "dev", PREVIEW_OUTPUT, 0)
    res = run("pr-comment.sh", "dev", env={"RLTRAIN_CI_OUT": str(out)}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert not (bin_dir / "gh.log").exists()


def test_preflight_runs_the_aws_preflight_and_keeps_its_result_for_the_comment(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "python", 'echo "p5.48xlarge: On-Demand P instances quota 0 vCPU < 192" >&2; exit 3')
    out = tmp_path / "ci-out"
    res = run("preflight.sh", "p5", env={"RLTRAIN_CI_OUT": str(out), "RLTRAIN_PREVIEW_PYTHON": str(bin_dir / "python")})
    assert res.returncode == 3
    assert (bin_dir / "python.log").read_text().splitlines()[0] == "-m components.preflight --stack p5"
    assert (out / "preflight-p5.rc").read_text().strip() == "3"
    assert "quota 0 vCPU < 192" in (out / "preflight-p5.txt").read_text()
    assert "**preflight failed** (exit 3)" in pr_comment.body("p5", out)


# --- labels from the impact ----------------------------------------------------------------------------

_lab = importlib.util.spec_from_file_location("review_labels", CI / "review_labels.py")
review_labels = importlib.util.module_from_spec(_lab)
_lab.loader.exec_module(review_labels)

SUMMARY_P5_SHRINK = """### Stack `p5`

| impact | resource | why | verdict |
|---|---|---|---|
| **replace (data loss)** | `LustreFileSystem storage-fs` | storageCapacity 4800 -> 2400 | refused: set `rltrain:storage.allowReplacement: true` |
| replace | `PersistentVolume storage-pv` | spec.capacity.storage | ok |
| in place | `PersistentVolumeClaim storage-claim` | spec.resources ignored | ok |

### Stack `dev`

| impact | resource | why | verdict |
|---|---|---|---|
| **node roll** | `NodeGroup gpu` | launch template | ok |

### Stack `p4de`

impact: no change against the base record
"""


@pytest.mark.parametrize("summary,labels", [
    (SUMMARY_P5_SHRINK, {"replaces", "data-loss", "node-roll"}),
    ("### Stack `p5`\n\nimpact: no change against the base record\n", {"no-change"}),
    ("| impact | resource | why | verdict |\n|---|---|---|---|\n| **run restart** | `Job train` | image | ok |\n",
     {"run-restart"}),
    ("## What this change does to each stack: no review\n", set()),
])
def test_labels_from_the_impact_tables(summary, labels):
    assert review_labels.labels(summary) == labels


def test_labels_added_and_stale_ones_removed_on_the_pull_request(tmp_path):
    """The review's impact as labels: `no-change` from an earlier push is removed, others' labels kept."""
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    (bin_dir / "labels.txt").write_text("no-change\nneeds-docs\nrun-restart\n")
    art = review_artifact(tmp_path / "review")
    (art / "summary.md").write_text(SUMMARY_P5_SHRINK)
    res = run("review-comment.sh", str(art), env=comment_env(tmp_path / "ci-out", FORK="false"), bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    calls = gh_calls(bin_dir, labels=True)
    assert "api --method POST repos/o/r/issues/7/labels --input" in " ".join(calls)
    assert json.loads((bin_dir / "labels-payload.json").read_text()) == {"labels": ["data-loss", "node-roll", "replaces"]}
    deletes = sorted(c.split()[3] for c in calls if c.startswith("api --method DELETE"))
    assert deletes == ["repos/o/r/issues/7/labels/no-change", "repos/o/r/issues/7/labels/run-restart"]
    assert "labels of #7: added data-loss, node-roll, replaces; removed no-change, run-restart" in res.stdout


def test_the_simulated_cluster_preview_is_appended_to_the_review_comment(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_github(bin_dir, [])
    art = review_artifact(tmp_path / "review")
    (art / "sim-preview.md").write_text("### Real preview of `sim` on the simulated cluster\n\n"
                                        "| resource | offline impact | real preview | |\n|---|---|---|---|\n"
                                        "| `workloads-staging-job` | run restart | update | **disagree** |\n@someone\n")
    res = run("review-comment.sh", str(art), env=comment_env(tmp_path / "ci-out", FORK="false"), bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    body = json.loads((bin_dir / "payload.json").read_text())["body"]
    assert body.index("## What this change does to each stack") < body.index("### Real preview of `sim`")
    assert "| update | **disagree** |" in body and "@\u200bsomeone" in body
