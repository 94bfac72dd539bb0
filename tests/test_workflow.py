"""The CI workflows: valid against GitHub's workflow schema, clean under actionlint (which runs
shellcheck on every `run:` script), and keeping the rules the PR workflow relies on: the offline job
works without secrets, no untrusted value is interpolated into a script, actions are pinned by commit,
the preview runs in the `preview` environment with a gate per step, the review reaches the pull request
as a comment for same-repository PRs and (workflow_run) for forks."""

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
    # shellcheck must be there: without it actionlint skips every `run:` script without a word. It is a
    # Debian package, not a pip one: skipped on a machine without it, failed under CI (.ci/run installs it).
    if shutil.which("shellcheck") is None and not (Path(sys.executable).parent / "shellcheck").is_file():
        if os.environ.get("CI"):
            pytest.fail("shellcheck missing: .ci/run installs it with apt-get")
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
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
    assert job["needs"] == ["offline"]
    stacks = job["strategy"]["matrix"]["stack"]
    assert stacks == ["dev", "p4de", "p5"]
    for stack in stacks:
        assert (ROOT / f"Pulumi.{stack}.yaml").is_file(), stack
    # actions: read for the gate's reading of the environment's protection rules (ci/preview-gate.sh).
    assert job["permissions"] == {"actions": "read", "contents": "read", "id-token": "write", "pull-requests": "write"}
    # The gate is a step, not the job's `if`: a job skipped by its `if` is never expanded, and its one
    # check is named "pulumi preview (${{ matrix.stack }})"; each stack keeps its own check.
    assert job["if"] == "${{ !cancelled() }}" and "${{ matrix.stack }}" in job["name"]
    # Credentials only in the `preview` environment (required reviewers), forks and Dependabot in one
    # without secrets.
    assert environment_of(job, same_repo=True) == "preview"
    assert environment_of(job, same_repo=False) == "no-secrets"

    # pulumi/actions installs the CLI only: with no `command` input it installs and exits
    # (pulumi/actions v7 src/main.ts: makeInstallationConfig / installOnly). It comments only after a
    # command succeeds, so the preview and the comment are ci/ scripts.
    actions = [step for step in job["steps"] if step.get("uses", "").startswith("pulumi/actions@")]
    assert len(actions) == 1 and "command" not in actions[0]["with"]
    assert "pulumi-version" in actions[0]["with"]
    by_script = {step["run"].split()[0]: step for step in job["steps"] if "run" in step}
    gate, preview, comment = by_script["ci/preview-gate.sh"], by_script["ci/preview.sh"], by_script["ci/pr-comment.sh"]
    assert "matrix.stack" in preview["env"]["STACK"]
    for name in ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_SECRETS_PROVIDER", "PULUMI_BACKEND_URL"):
        assert f"secrets.{name}" in preview["env"][name], name
    # Every step after the gate runs only when it said so (checkout and the gate itself always run).
    after_gate = job["steps"][job["steps"].index(gate) + 1:]
    assert all("steps.gate." in s.get("if", "") or "steps.prepare." in s.get("if", "") for s in after_gate
               if s is not comment), [s.get("name") or s.get("uses") for s in after_gate if "if" not in s]
    # The comment whatever became of the preview, naming the commit; same-repository PRs only.
    assert "!cancelled()" in comment["if"] and "head.repo.full_name == github.repository" in comment["if"]
    assert comment["env"]["PR_NUMBER"] == "${{ github.event.pull_request.number }}"
    assert comment["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    steps_order = [step.get("run", step.get("uses", "")).split()[0] for step in job["steps"]]
    # The AWS preflight runs where the credentials exist, before the preview.
    assert steps_order.index("ci/preview-gate.sh") < steps_order.index("ci/preview-install.sh") < \
        steps_order.index("ci/preflight.sh") < steps_order.index("ci/preview.sh") < steps_order.index("ci/pr-comment.sh")
    aws = next(i for i, s in enumerate(steps_order) if s.startswith("aws-actions/configure-aws-credentials@"))
    assert aws < steps_order.index("ci/preflight.sh")
    assert "python\" -m components.preflight --stack \"$stack\"" in (ROOT / "ci" / "preflight.sh").read_text()


# What the credentials gate is given about the secrets: whether each is set, never its value (GitHub
# evaluates these expressions before the step runs; docs.github.com "Evaluate expressions": `!=`,
# `startsWith`, `contains`, `fromJSON`, `||` returning its first truthy operand).
GATE_SECRET_FLAGS = {
    "HAS_AWS_ROLE_ARN": "${{ secrets.AWS_ROLE_ARN != '' }}",
    "HAS_PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN != '' }}",
    "HAS_PULUMI_CONFIG_PASSPHRASE": "${{ secrets.PULUMI_CONFIG_PASSPHRASE != '' }}",
    "BACKEND_IS_CLOUD": "${{ (secrets.PULUMI_BACKEND_URL || vars.PULUMI_BACKEND_URL) == '' || "
                        "startsWith(secrets.PULUMI_BACKEND_URL || vars.PULUMI_BACKEND_URL, 'https://') || "
                        "startsWith(secrets.PULUMI_BACKEND_URL || vars.PULUMI_BACKEND_URL, 'http://') }}",
    "PASSPHRASE_PROVIDER": "${{ contains(fromJSON('[\"\", \"default\", \"passphrase\"]'), "
                           "secrets.PULUMI_SECRETS_PROVIDER || vars.PULUMI_SECRETS_PROVIDER || '') }}",
}


@pytest.mark.parametrize("path,job_id", [(PR_WORKFLOW, "preview"), (WORKFLOW_DIR / "deploy.yml", "deploy")])
def test_the_gate_gets_only_whether_each_secret_is_set(path, job_id):
    """Before: the gate step's env held AWS_ROLE_ARN, PULUMI_ACCESS_TOKEN, PULUMI_CONFIG_PASSPHRASE...
    themselves, before the gate had decided anything (issue 47, finding 4)."""
    job = load(path)["jobs"][job_id]
    step = next(s for s in job["steps"] if s.get("id") == "gate")
    assert step["run"] == "ci/preview-gate.sh"
    for name, value in step["env"].items():
        if "secrets." in value:
            assert GATE_SECRET_FLAGS.get(name) == value, f"{name}: {value}"
    assert {k: v for k, v in step["env"].items() if k in GATE_SECRET_FLAGS} == GATE_SECRET_FLAGS
    # The environment the gate checks is the job's own; the preview's gate knows whose pull request it is.
    if job_id == "preview":
        assert step["env"]["PROTECTED_ENVIRONMENT"] == environment_of(job, same_repo=True)
        assert step["env"]["PR_AUTHOR"] == "${{ github.event.pull_request.user.login }}"
        assert "head.repo.full_name != github.repository" in step["env"]["FORK"]
        assert step["env"]["DEPENDABOT"] == ("${{ github.event_name == 'pull_request' && "
                                             "github.event.pull_request.user.login == 'dependabot[bot]' }}")
    else:
        assert step["env"]["PROTECTED_ENVIRONMENT"] == job["environment"]
        assert step["env"]["DEPLOY_BRANCH"] == "main"
    # The job's token may read the run's approvals and the environment (fine-grained: Actions read).
    assert job["permissions"]["actions"] == "read"


# --- a tiny evaluator for the one expression the environment is: A && B && 'x' || 'y' -------------

def environment_of(job: dict, same_repo: bool, author: str = "alice", event: str = "pull_request") -> str:
    """The environment the preview job runs in for a pull request, evaluated with Python's and/or
    (GitHub's && / || return operands the same way: docs.github.com, "Evaluate expressions")."""
    expr = job["environment"].strip()
    assert expr.startswith("${{") and expr.endswith("}}"), expr
    expr = expr[3:-2]
    values = {
        "github.event_name": repr(event),
        "github.event.pull_request.head.repo.full_name": repr("o/r" if same_repo else "fork/r"),
        "github.repository": repr("o/r"),
        "github.event.pull_request.user.login": repr(author),
    }
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    assert re.fullmatch(r"[\s'a-z0-9/\[\]\-_()!=]+", expr.replace(" and ", " ").replace(" or ", " ")), expr
    return eval(expr, {"__builtins__": {}})  # noqa: S307 - the workflow's own expression, literals only


def test_dependabot_runs_in_the_environment_without_secrets():
    """Before: Dependabot's pull requests (same repository) waited for an approval of `preview`, whose
    secrets GitHub never gives them. Now they go where forks go, and the gate says why."""
    job = load(PR_WORKFLOW)["jobs"]["preview"]
    assert environment_of(job, same_repo=True, author="dependabot[bot]") == "no-secrets"
    assert environment_of(job, same_repo=True, author="alice") == "preview"
    assert environment_of(job, same_repo=True, event="workflow_dispatch") == "preview"


def credentialed(job: dict) -> bool:
    text = json.dumps(job)
    return "secrets." in text or (job.get("permissions") or {}).get("id-token") == "write"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_cache_in_a_job_that_holds_credentials(path: Path):
    """Before: the preview job restored a pip cache (setup-python `cache: pip`) that an earlier,
    unapproved run of the same pull request could have written. A job with secrets or an OIDC token
    restores no cache at all."""
    for job_id, job in (load(path).get("jobs") or {}).items():
        if not credentialed(job):
            continue
        for step in job.get("steps") or []:
            uses = step.get("uses", "")
            assert not uses.startswith(("actions/cache@", "actions/cache/")), f"{path.name} {job_id}: {uses}"
            assert "cache" not in (step.get("with") or {}), f"{path.name} {job_id}: {uses} restores a cache"


# FACTS.md "PR review as GitHub runs it"; the others from the actions' own repositories (tags v7.0.0,
# v8.0.1, v6.2.3: `git rev-parse TAG^{commit}`).
PINNED = {"actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7"),
          "pulumi/actions": ("8e5e406f4007fca908480587cb9893c07090f58d", "v7"),
          "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
          "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
          "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
          "aws-actions/configure-aws-credentials": ("e6de054238d6b7531b4efff3b6587d9aade6a06c", "v6.2.3"),
          # `git rev-parse TAG^{commit}` in the actions' repositories (the snapshots read 2026-12-02).
          "actions/setup-go": ("b7ad1dad31e06c5925ef5d2fc7ad053ef454303e", "v7.0.0"),
          "actions/cache": ("27d5ce7f107fe9357f9df03efb73ab90386fccae", "v5.0.5"),
          # actions/create-github-app-token: `git rev-parse v3.1.1^{commit}` (snapshot read 2026-12-04).
          "actions/create-github-app-token": ("1b10c78c7865c340bc4f6099eb2f838309f1e8c3", "v3.1.1")}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_by_commit_with_the_version_as_a_comment(path: Path):
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", path.read_text(), re.M)
    assert uses
    for ref, rest in uses:
        action, _, sha = ref.partition("@")
        assert action in PINNED, f"{path.name}: {ref}: find its commit in the action's repository, add it here"
        assert (sha, rest.strip()) == (PINNED[action][0], f"# {PINNED[action][1]}"), ref


def test_comment_jobs():
    """Same-repository PRs: a job with pull-requests: write comments the review; forks: pr-comment.yml,
    on workflow_run, with the artifact and never the fork's code."""
    workflow = load(PR_WORKFLOW)
    upload = next(s for _, s in steps(workflow) if s.get("uses", "").startswith("actions/upload-artifact@"))
    job = workflow["jobs"]["comment"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert "head.repo.full_name == github.repository" in job["if"]
    run = next(s for s in job["steps"] if "run" in s)
    assert run["run"] == 'ci/review-comment.sh "$REVIEW_DIR"' and run["env"]["FORK"] == "false"
    assert run["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["path"] == run["env"]["REVIEW_DIR"] == "${{ runner.temp }}/review"

    fork = load(WORKFLOW_DIR / "pr-comment.yml")
    on = fork.get("on", fork.get(True))  # YAML 1.1 reads `on` as True
    assert on == {"workflow_run": {"workflows": [workflow["name"]], "types": ["completed"]}}
    (job,) = fork["jobs"].values()
    assert "head_repository.full_name != github.repository" in job["if"]
    # The workflow's own token only reads; the comment is written with the review App's token, whose
    # key only the `review-bot` environment (deployments from main only) holds.
    assert job["permissions"] == {"contents": "read", "actions": "read"}
    assert job["environment"] == "review-bot"
    app = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/create-github-app-token@"))
    assert app["with"] == {"client-id": "${{ vars.REVIEW_APP_CLIENT_ID }}",
                           "private-key": "${{ secrets.REVIEW_APP_PRIVATE_KEY }}", "permission-pull-requests": "write"}
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert not {"ref", "repository"} & set(checkout.get("with") or {})  # the default branch, never the fork's
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["name"] == upload["with"]["name"] == "review"
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    # The fork's artifact is data: unpacked under the runner's temp directory, never in the checkout
    # beside the scripts (before: `path: review`, inside the workspace).
    assert download["with"]["path"] == "${{ runner.temp }}/review" and download.get("continue-on-error") is True
    run = next(s for s in job["steps"] if "run" in s)
    assert run["run"] == 'ci/review-comment.sh "$REVIEW_DIR"' and run["env"]["FORK"] == "true"
    assert run["env"]["REVIEW_DIR"] == download["with"]["path"]
    assert run["env"]["GH_TOKEN"] == "${{ steps.app.outputs.token }}" and "github.token" not in run["env"]["GH_TOKEN"]
    assert run["env"]["COMMENT_AUTHOR"] == ("${{ steps.app.outputs.app-slug && "
                                            "format('{0}[bot]', steps.app.outputs.app-slug) || '' }}")
    # The pull request comes from what GitHub says about the run, never from the artifact.
    assert run["env"]["HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}"
    assert run["env"]["HEAD_REPO"] == "${{ github.event.workflow_run.head_repository.full_name }}"
    assert run["env"]["HEAD_BRANCH"] == "${{ github.event.workflow_run.head_branch }}"
    assert "PR_NUMBER" not in run["env"]


def test_fork_comment_skips_cancelled_runs_one_at_a_time():
    """Before: no condition on the run's conclusion, no concurrency: every cancelled `pr` run (a newer
    push cancels the older) started a comment job that failed on the missing artifact."""
    fork = load(WORKFLOW_DIR / "pr-comment.yml")
    (job,) = fork["jobs"].values()
    assert "github.event.workflow_run.conclusion != 'cancelled'" in job["if"]
    group = fork["concurrency"]["group"]
    assert "workflow_run.head_repository.full_name" in group and "workflow_run.head_branch" in group
    assert fork["concurrency"]["cancel-in-progress"] is True


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_steps_are_thin_calls_of_repository_scripts(path: Path):
    """Every `run:` is one line calling an executable script of ci/: the same scripts run in the tests
    and on a laptop; no logic lives in the workflow."""
    for job_id, step in steps(load(path)):
        if "run" not in step:
            continue
        lines = step["run"].strip().splitlines()
        assert len(lines) == 1, f"{job_id} / {step.get('name')}: one line, a ci/ script"
        script = ROOT / lines[0].split()[0]
        assert lines[0].startswith("ci/") and script.is_file() and os.access(script, os.X_OK), lines[0]


def test_offline_job_runs_the_install_and_the_test_command_of_ci_run():
    steps_run = [step["run"] for _, step in steps({"jobs": {"offline": load(PR_WORKFLOW)["jobs"]["offline"]}})
                 if "run" in step]
    assert steps_run[:2] == ["ci/install.sh", "ci/test.sh"]
    assert steps_run[2:] == ["ci/render-current.sh", "ci/render-review.sh"]
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^ci/install\.sh$", ci_run, re.M) and re.search(r"^exec ci/test\.sh$", ci_run, re.M)
    # ci/test.sh runs exactly the README's CI test command (every tier), and nothing else.
    readme_command = 'python -m pytest -q -m "slow or not slow"'
    assert f"`{readme_command}` is the test command of CI" in (ROOT / "README.md").read_text()
    commands = [line for line in (ROOT / "ci" / "test.sh").read_text().splitlines()
                if line.strip() and not line.startswith(("#", "set ", ". ", "cd "))]
    assert commands == [readme_command]


# --- docs/pr-review.md: what it cites exists; the setup checklist and the trust model are there ------

PR_REVIEW_DOC = ROOT / "docs" / "pr-review.md"
_CITED_PATH = re.compile(r"`((?:ci|tests|docs|components|policy|cluster|\.github)/[\w./-]*\w)`")
_CITED_DOC = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9_-]*\.md)\b")
_LINKED = re.compile(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)")


def test_pr_review_doc_cites_only_files_in_the_repository():
    """Before: "The facts behind the design are in FACTS.md", a file that is not in the repository."""
    text = PR_REVIEW_DOC.read_text()
    missing = sorted({p for p in _CITED_PATH.findall(text) if not (ROOT / p).exists()}
                     | {p for p in _CITED_DOC.findall(text) if not (ROOT / p).exists()}
                     | {p for p in _LINKED.findall(text) if not (PR_REVIEW_DOC.parent / p).exists()})
    assert not missing, f"docs/pr-review.md cites what the repository does not hold: {missing}"


def test_pr_review_doc_has_the_setup_checklist_and_the_trust_model():
    text = PR_REVIEW_DOC.read_text()
    assert "\n## Trust model\n" in text and "\n## Setting it up\n" in text
    header = next(line for line in text.splitlines() if line.startswith("| job (workflow) |"))
    assert header == ("| job (workflow) | same-repository pull request | pull request from a fork | "
                      "Dependabot's pull request | merge to `main` |")
    checklist = text.split("\n## Setting it up\n", 1)[1].split("\n## ", 1)[0]
    for must in ("required reviewers", "public", "Prevent self-review", "Allow administrators to bypass",
                 "`no-secrets`", "`deploy`", "`review-bot`", "`PLAN_STORE_URL`",
                 "the first approved run previews nothing until the secrets are set",
                 "Require\n   branches to be up to date before merging"):
        assert must in checklist, must
    # Every environment a workflow names is in the checklist.
    for path in WORKFLOWS:
        for env in re.findall(r"'([a-z-]+)'|environment: ([a-z-]+)$", path.read_text(), re.M):
            name = env[0] or env[1]
            if name in ("preview", "deploy", "no-secrets", "review-bot"):
                assert f"`{name}`" in checklist, name


def test_sim_preview_job_holds_nothing_and_feeds_the_comment():
    """The real preview on the simulated cluster runs the pull request's code (forks' too): no secret,
    a read-only token, its cache only the cluster's binaries keyed by what they are built from."""
    workflow = load(PR_WORKFLOW)
    job = workflow["jobs"]["sim-preview"]
    assert not credentialed(job) and job["permissions"] == {"contents": "read"}
    assert [s["run"] for s in job["steps"] if "run" in s] == ["ci/install.sh", "ci/sim-preview.sh"]
    cache = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "~/.cache/rltrain-sim"
    assert "hashFiles('cluster/versions.env', 'cluster/go/**')" in cache["with"]["key"]
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "sim-preview"
    # The review comment is not held back for it: posted after the offline job, then posted again
    # (same run: it replaces the first) with the simulated-cluster preview, after the first.
    jobs = workflow["jobs"]
    assert jobs["comment"]["needs"] == ["offline"]
    assert jobs["comment-with-sim"]["needs"] == ["offline", "sim-preview", "comment"]
    assert jobs["comment-with-sim"]["if"] == jobs["comment"]["if"]
    assert jobs["comment-with-sim"]["permissions"] == jobs["comment"]["permissions"]
    same = [s for s in jobs["comment-with-sim"]["steps"] if "run" in s] == [s for s in jobs["comment"]["steps"] if "run" in s]
    assert same
    # Both paths with the simulated-cluster preview download it beside the review (sim-preview.md appended).
    for path, job_id in ((PR_WORKFLOW, "comment-with-sim"), (WORKFLOW_DIR / "pr-comment.yml", "fork-review-comment")):
        steps_ = load(path)["jobs"][job_id]["steps"]
        names = {s["with"]["name"]: s["with"]["path"] for s in steps_ if s.get("uses", "").startswith("actions/download-artifact@")}
        assert names == {"review": "${{ runner.temp }}/review", "sim-preview": "${{ runner.temp }}/review"}, path
