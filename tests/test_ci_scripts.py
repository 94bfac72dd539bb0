"""The preview half of the pull-request workflow, script by script (ci/), with fake `pulumi` and `gh`
executables that record what they were asked: the credentials gate (Pulumi Cloud or a self-managed
backend), the secrets check that skips a stack, the preview itself (stack created when missing,
output and exit code captured whatever happens) and the comment (posted or edited, capped)."""

from __future__ import annotations

import importlib.util
import json
import os
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


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


# --- the gate --------------------------------------------------------------------------------------


@pytest.mark.parametrize("env,ready,backend,named", [
    ({"AWS_ROLE_ARN": "arn", "PULUMI_ACCESS_TOKEN": "pul-x"}, "true", "cloud", None),
    ({"AWS_ROLE_ARN": "arn"}, "false", "cloud", "PULUMI_ACCESS_TOKEN"),
    ({"PULUMI_ACCESS_TOKEN": "pul-x"}, "false", "cloud", "AWS_ROLE_ARN"),
    # Self-managed: no Pulumi Cloud token asked for; a passphrase or a KMS provider instead.
    ({"AWS_ROLE_ARN": "arn", "PULUMI_BACKEND_URL": "s3://state", "PULUMI_CONFIG_PASSPHRASE": "pw"},
     "true", "self-managed", None),
    ({"AWS_ROLE_ARN": "arn", "PULUMI_BACKEND_URL": "s3://state",
      "PULUMI_SECRETS_PROVIDER": "awskms://alias/rltrain?region=us-east-1"}, "true", "self-managed", None),
    ({"AWS_ROLE_ARN": "arn", "PULUMI_BACKEND_URL": "s3://state"}, "false", "self-managed",
     "PULUMI_CONFIG_PASSPHRASE"),
    ({"AWS_ROLE_ARN": "arn", "PULUMI_BACKEND_URL": "s3://state", "PULUMI_SECRETS_PROVIDER": "passphrase"},
     "false", "self-managed", "PULUMI_CONFIG_PASSPHRASE"),
    # A self-hosted Pulumi Cloud is Pulumi Cloud: a token.
    ({"AWS_ROLE_ARN": "arn", "PULUMI_BACKEND_URL": "https://api.pulumi.example.com",
      "PULUMI_CONFIG_PASSPHRASE": "pw"}, "false", "cloud", "PULUMI_ACCESS_TOKEN"),
])
def test_gate(tmp_path, env, ready, backend, named):
    out, summary = tmp_path / "out", tmp_path / "summary"
    res = run("preview-gate.sh", env={**env, "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)})
    assert res.returncode == 0, res.stderr
    assert outputs(out) == {"has-credentials": ready, "backend": backend}
    if named:
        assert "::notice title=Pulumi preview skipped::" in res.stdout and named in res.stdout
        assert named in summary.read_text()
    else:
        assert "::notice" not in res.stdout


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


@pytest.mark.parametrize("env,login,select", [
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
])
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
    assert commands == [login, select, f"preview --non-interactive --stack {ref} --diff --suppress-progress "
                                       "--color never --policy-pack policy"]
    # An empty secret is no passphrase: removed, not passed as "".
    for e in calls[1::2]:
        if env.get("PULUMI_CONFIG_PASSPHRASE") == "":
            assert "PULUMI_CONFIG_PASSPHRASE=<unset>" in e
        if env.get("PULUMI_ACCESS_TOKEN") == "":
            assert "PULUMI_ACCESS_TOKEN=<unset>" in e
    assert (out / "preview-p5.rc").read_text().strip() == "0"
    assert "Resources:\n    + 180 to create" in (out / "preview-p5.txt").read_text()


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
    body = pr_comment.body("p5", tmp_path, "https://github.example/run/1")
    assert body.startswith("<!-- rltrain-preview:p5 -->\n### `pulumi preview` of `p5`: succeeded")
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


def test_comment_when_skipped_or_not_run(tmp_path):
    (tmp_path / "preview-p5.skipped").write_text(
        "rltrain:hfToken\tpulumi config set --secret rltrain:hfToken VALUE --stack p5\n")
    body = pr_comment.body("p5", tmp_path)
    assert "skipped, secrets not set" in body
    assert "- `rltrain:hfToken`: `pulumi config set --secret rltrain:hfToken VALUE --stack p5`" in body
    assert "did not run" in pr_comment.body("dev", tmp_path)


@pytest.mark.parametrize("existing", [None, "4242"])
def test_comment_posted_or_edited(tmp_path, existing):
    bin_dir = tmp_path / "bin"
    listing = f'echo {existing}' if existing else "true"
    fake(bin_dir, "gh", f"""case "$*" in *--paginate*) {listing} ;; esac
for a in "$@"; do [ -f "$a" ] && cp "$a" "{bin_dir}/payload.json"; done; exit 0""")
    out = tmp_path / "ci-out"
    write(out, "p5", "error: boom\n", 1)
    summary = tmp_path / "summary.md"
    env = {"RLTRAIN_CI_OUT": str(out), "GH_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "PR_NUMBER": "7",
           "RUN_URL": "https://github.example/run/1", "GITHUB_STEP_SUMMARY": str(summary)}
    res = run("pr-comment.sh", "p5", env=env, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    calls = (bin_dir / "gh.log").read_text().splitlines()[0::2]
    assert calls[0].startswith("api --paginate repos/o/r/issues/7/comments --jq ")
    if existing:
        assert calls[1].startswith("api --method PATCH repos/o/r/issues/comments/4242 --input ")
    else:
        assert calls[1].startswith("api --method POST repos/o/r/issues/7/comments --input ")
    payload = json.loads((bin_dir / "payload.json").read_text())
    assert payload["body"].startswith("<!-- rltrain-preview:p5 -->") and "**failed** (exit 1)" in payload["body"]
    assert "**failed** (exit 1)" in summary.read_text()


def test_no_comment_outside_a_pull_request(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "gh", "exit 1")
    out = tmp_path / "ci-out"
    write(out, "dev", PREVIEW_OUTPUT, 0)
    res = run("pr-comment.sh", "dev", env={"RLTRAIN_CI_OUT": str(out)}, bin_dir=bin_dir)
    assert res.returncode == 0, res.stderr
    assert not (bin_dir / "gh.log").exists()
