"""The offline job's scripts, in the workflow's order, on a fresh repository whose base branch differs
by an FSx capacity decrease on p5: what the pull-request summary says, and that the whole sequence
passes under CI=true. Then the review as GitHub runs it, on a merge commit like the one
actions/checkout checks out for `pull_request`: the base is its first parent even after the base
branch moves on, a stale base record is shown apart and not blamed on the pull request, and a
pull request that did not re-render gets told so instead of "no change to rendered/".

The repository is a snapshot of this working tree (tracked and untracked, not ignored) committed as
`main`, with every stack rendered into its own rendered/ (never this checkout's). Its scripts run
in the environment ci/install.sh already made (RLTRAIN_CI_VENV, else this interpreter's; the checkov
of RLTRAIN_CHECKOV, else .venv-scan): the test installs nothing and runs no ci/install.sh. In place
of the whole suite (which includes this file) it runs the tests that CI=true turns from skips into
failures. Slow (a clone, every stack rendered several times, checkov): `python -m pytest -q -m slow`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.offline.mock_engine import ROOT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("RLTRAIN_REVIEW_FLOW_NESTED") == "1",
                                 reason="inside the full suite this test itself runs")]
GIT = shutil.which("git")
# The tests that need a Debian tool or checkov: skipped on a newcomer's machine, failed under CI
# (the same list as tests/test_lint.py's check of that rule).
TOOL_TESTS = ("tests/test_lint.py::test_shellcheck_clean", "tests/test_workflow.py::test_actionlint_with_shellcheck",
              "tests/scripts/test_efa_metrics.py::test_promtool_accepts_output",
              "tests/test_checkov.py::test_checkov_finds_nothing")


def sh(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return ok(sh([GIT, *args], repo, env)).stdout


def ci_venv() -> str:
    """The environment ci/install.sh made (ci/env.sh exports RLTRAIN_CI_VENV), else this interpreter's."""
    made = os.environ.get("RLTRAIN_CI_VENV")
    return made if made and Path(made, "bin", "python").is_file() else sys.prefix


def checkov() -> str | None:
    """The checkov ci/install.sh installed (RLTRAIN_CHECKOV, else .venv-scan/bin/checkov), or None."""
    for candidate in (os.environ.get("RLTRAIN_CHECKOV"), str(ROOT / ".venv-scan" / "bin" / "checkov")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def ci_env(repo: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "PYTEST_", "RLTRAIN_")) and k != "CI"}
    env.update(CI="true", RLTRAIN_REVIEW_FLOW_NESTED="1", RLTRAIN_CI_VENV=ci_venv())
    if checkov():
        env["RLTRAIN_CHECKOV"] = checkov()
    env.update(extra)
    return env


def render(repo: Path, *args: str) -> None:
    ok(sh([sys.executable, "-m", "components.offline.render", *args], repo))


def set_image(repo: Path, tag: str) -> None:
    """A new training image for p5 (one the team brings, instead of the one the stack builds), its
    run restart accepted by the stack."""
    path = repo / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    workloads = doc["config"]["rltrain:workloads"]
    workloads["image"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:" + tag
    workloads["allowRunRestart"] = True
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def set_fsx(repo: Path, gib: int, allow: bool = False) -> None:
    path = repo / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    storage = doc["config"]["rltrain:storage"]
    storage["fsx"]["storageCapacityGiB"] = gib
    if allow:
        storage["allowReplacement"] = True
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    if GIT is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("clone") / "rltrain"
    repo.mkdir()
    files = ok(sh([GIT, "ls-files", "-co", "--exclude-standard", "-z"], ROOT)).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    render(repo, "--all", "--accept-impact")  # the base's records, current for its code
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base: render")
    git(repo, "tag", "base0")
    assert yaml.safe_load((repo / "Pulumi.p5.yaml").read_text())["config"]["rltrain:storage"]["fsx"][
        "storageCapacityGiB"] == 4800
    return repo


def test_fsx_decrease_without_opt_in_is_refused_and_the_summary_says_data_loss(repo):
    git(repo, "checkout", "-q", "-B", "pr-fsx-decrease", "main")
    set_fsx(repo, 2400)
    git(repo, "commit", "-q", "-am", "p5: FSx 2400 GiB")
    step_summary = repo.parent / "step-summary-refused.md"
    proc = sh([str(repo / "ci" / "render-review.sh"), "--base", "main", "p5"], repo,
              ci_env(repo, GITHUB_STEP_SUMMARY=str(step_summary)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = (repo / "ci-out" / "summary.md").read_text()
    assert step_summary.read_text() == summary
    fsx = next(line for line in summary.splitlines() if "LustreFileSystem storage-fs" in line)
    assert fsx.startswith("| **replace (data loss)** |") and "4800 -> 2400" in fsx
    assert "refused: set `rltrain:storage.allowReplacement: true`" in fsx
    assert "**Refused** (exit 1)" in summary and "REFUSED: replace (data loss): LustreFileSystem storage-fs" in summary
    # The cost before (the base's own render) and after.
    assert "| before (base) | $" in summary and "FSx 4800 GiB" in summary
    assert "FSx 2400 GiB" in summary and "| change | −$" in summary
    assert "Preflight: config valid; **2 secret(s) not set**" in summary
    assert "Policy and deploy-model rules:" in summary
    # Nothing written into the clone's rendered/.
    assert git(repo, "status", "--porcelain", "--", "rendered/") == ""


def test_offline_sequence_passes_under_ci_with_an_accepted_fsx_replacement(repo):
    git(repo, "checkout", "-q", "-B", "pr-fsx-allowed", "main")
    set_fsx(repo, 2400, allow=True)
    render(repo, "--stack", "p5")  # what the author commits with the change
    git(repo, "commit", "-q", "-am", "p5: FSx 2400 GiB, replacement accepted")
    env = ci_env(repo, GITHUB_STEP_SUMMARY=str(repo.parent / "step-summary.md"))

    # Instead of ci/install.sh (which installs): what it would have provided must be there. Under CI
    # (.ci/run ran ci/install.sh first) a missing piece fails; on a laptop without it, the test skips.
    missing = [what for what, there in (("checkov (RLTRAIN_CHECKOV or .venv-scan)", checkov()),
                                        ("shellcheck", shutil.which("shellcheck")),
                                        ("promtool", shutil.which("promtool"))) if not there]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"not installed: {', '.join(missing)} (ci/install.sh installs them)")
        pytest.skip(f"not installed: {', '.join(missing)} (ci/install.sh installs them)")
    # The tests CI=true turns from skips into failures: the scanner and the Debian tools are there.
    res = ok(sh(["bash", "-c", '. ci/env.sh && exec python -m pytest -q -p no:cacheprovider -o addopts= "$@"',
                 "pytest", *TOOL_TESTS], repo, env))
    assert "skipped" not in res.stdout.splitlines()[-1], res.stdout
    ok(sh([str(repo / "ci" / "render-current.sh")], repo, env))
    ok(sh([str(repo / "ci" / "render-review.sh"), "--base", "main"], repo, env))

    summary = (repo / "ci-out" / "summary.md").read_text()
    for stack in ("byo", "dev", "p4de", "p5"):
        assert f"### Stack `{stack}`" in summary
    fsx = next(line for line in summary.splitlines() if "LustreFileSystem storage-fs" in line)
    assert fsx.startswith("| **replace (data loss)** |") and "refused" not in fsx
    assert "| `rendered/p5/resources.json` |" in summary
    patch = (repo / "ci-out" / "render-diff.patch").read_text()
    assert any(line.startswith("+") and "2400" in line for line in patch.splitlines())


# --- the base, as GitHub gives it; stale records; a summary that never contradicts itself ----------


def merge_ref(repo: Path, base: str, branch: str) -> str:
    """What actions/checkout checks out for `pull_request`: the merge of the branch into its base."""
    git(repo, "checkout", "-q", "--detach", base)
    git(repo, "merge", "-q", "--no-ff", "--no-edit", branch)
    return git(repo, "rev-parse", "HEAD").strip()


def stack_section(summary: str, stack: str) -> str:
    start = summary.index(f"### Stack `{stack}`", summary.index("## What this change does"))
    rest = summary[start + 1:]
    ends = [i for i in (rest.find("\n### "), rest.find("\n## ")) if i >= 0]
    return summary[start:start + 1 + min(ends)] if ends else summary[start:]


def review(repo: Path, *args: str, code: int = 0) -> str:
    proc = sh([str(repo / "ci" / "render-review.sh"), *args], repo, ci_env(repo, BASE_NAME="main-like"))
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    return (repo / "ci-out" / "summary.md").read_text()


def test_base_is_the_merge_commits_first_parent_after_the_base_branch_moves(repo):
    """A re-run (or a busy base branch) fetches the base branch as it is now: its later changes must
    not be blamed on the pull request. Before: `render-review.sh main` judged against the moved branch."""
    git(repo, "checkout", "-q", "-B", "m-moves", "base0")
    git(repo, "checkout", "-q", "-B", "pr-moves", "m-moves")
    (repo / "docs").mkdir(exist_ok=True)
    (repo / "docs" / "note.md").write_text("a change that renders nothing\n")
    git(repo, "add", "docs/note.md")
    git(repo, "commit", "-q", "-m", "docs only")
    merge = merge_ref(repo, "m-moves", "pr-moves")
    # The base branch moves on: a larger FSx, rendered and committed there.
    git(repo, "checkout", "-q", "m-moves")
    set_fsx(repo, 7200)
    render(repo, "--stack", "p5")
    git(repo, "commit", "-q", "-am", "p5: FSx 7200 GiB")
    git(repo, "checkout", "-q", "--detach", merge)

    summary = review(repo, "p5")  # the workflow's call: the base is HEAD^1
    assert "impact: no change against the base record" in stack_section(summary, "p5")
    assert "7200" not in summary and "No change to `rendered/`" in summary
    assert f"(the first parent of the merge commit `{merge[:7]}`)" in summary
    review_json = json.loads((repo / "ci-out" / "review.json").read_text())
    assert review_json["merge_sha"] == merge and review_json["head_sha"] == git(repo, "rev-parse", "pr-moves").strip()

    # The old call, against the branch as fetched now, blames the pull request for main's change.
    moved = review(repo, "--base", "m-moves", "p5", code=1)
    assert "storageCapacity 7200 -> 4800" in stack_section(moved, "p5")


def test_a_stale_base_record_is_shown_apart_and_not_blamed_on_the_pull_request(repo):
    """The base merged a change of p5 without re-rendering: its record says 4800 GiB, its program 7200."""
    git(repo, "checkout", "-q", "-B", "m-stale", "base0")
    set_fsx(repo, 7200)
    git(repo, "commit", "-q", "-am", "p5: FSx 7200 GiB, not re-rendered")
    git(repo, "checkout", "-q", "-B", "pr-stale", "m-stale")
    (repo / "docs").mkdir(exist_ok=True)
    (repo / "docs" / "note.md").write_text("unrelated\n")
    git(repo, "add", "docs/note.md")
    git(repo, "commit", "-q", "-m", "docs only")
    merge_ref(repo, "m-stale", "pr-stale")

    summary = review(repo, "p5")
    assert "## `main-like` is stale: these changes are not this PR's" in summary
    drift = summary[summary.index("is stale: these changes"):summary.index("### Stack `p5`")]
    assert "### `p5`: the base's drift" in drift
    fsx = next(line for line in drift.splitlines() if "LustreFileSystem storage-fs" in line)
    assert fsx.startswith("| in place |") and "storageCapacity" in fsx
    assert "`python -m components.offline.render --stack p5 --accept-impact` on the base branch" in drift
    # The pull request's own impact: none (before: the FSx change, blamed on it).
    assert "impact: no change against the base record" in stack_section(summary, "p5")
    assert json.loads((repo / "ci-out" / "review.json").read_text())["stale_base"] == ["p5"]
    assert "(this change left the record as `main-like` has it: the staleness is the base's, shown above)" in summary


def test_the_summary_never_says_no_change_under_a_table_of_restarts(repo):
    """The author changed the training image (run restart accepted) and did not re-render: the summary
    says the record is stale and what to run, not "No change to rendered/" (before)."""
    git(repo, "checkout", "-q", "-B", "m-contra", "base0")
    git(repo, "checkout", "-q", "-B", "pr-contra", "m-contra")
    set_image(repo, "20260402-085549")
    git(repo, "commit", "-q", "-am", "p5: new image, not re-rendered")
    merge_ref(repo, "m-contra", "pr-contra")

    summary = review(repo, "p5")
    assert "| **run restart** |" in stack_section(summary, "p5")
    assert "No change to `rendered/`" not in summary
    assert "**The committed `rendered/` of this change is stale** for p5" in summary
    assert "- `python -m components.offline.render --stack p5 --accept-impact`" in summary
    assert json.loads((repo / "ci-out" / "review.json").read_text())["stale_record"] == ["p5"]


def test_no_merge_commit_and_no_base_is_an_error_naming_the_flag(repo):
    git(repo, "checkout", "-q", "-B", "m-none", "base0")
    proc = sh([str(repo / "ci" / "render-review.sh"), "p5"], repo, ci_env(repo))
    assert proc.returncode == 2 and "ci/render-review.sh --base main" in proc.stderr
