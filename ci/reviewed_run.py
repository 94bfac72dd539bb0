"""Which pull-request run reviewed this commit of main, with an approved preview? The deploy applies that
run's update plan (ci/plan-store.sh), nothing else.

    python3 ci/reviewed_run.py     # env: GITHUB_REPOSITORY, GITHUB_SHA (the pushed commit), GH_TOKEN (for `gh`)
                                   #      REVIEW_WORKFLOW (default pr.yml), REVIEW_ENVIRONMENT (default preview)

Prints `pr-number=N`, `run-id=ID` and `approved-by=LOGIN` lines; exit 1 with a refusal on stderr when
there is none. With the `gh` CLI:

1. The pull request merged as GITHUB_SHA: `GET commits/{sha}/pulls` ("List pull requests associated with a
   commit": the merged pull request that introduced a commit of the default branch,
   https://docs.github.com/en/rest/commits/commits#list-pull-requests-associated-with-a-commit), kept only
   when its `merge_commit_sha` is this very commit. A direct push has none: nothing was reviewed. A pull
   request from a fork is refused: its preview never ran with credentials (a maintainer mirrors it first,
   ci/mirror-fork.sh).
2. The runs of the review workflow for that head commit (`GET actions/workflows/{id}/runs?event=pull_request
   &head_sha=...`, "List workflow runs for a workflow",
   https://docs.github.com/en/rest/actions/workflow-runs#list-workflow-runs-for-a-workflow). The head SHA
   alone names no pull request: the list holds the run of every fork that opened a pull request with the
   same commit, approval-pending ones (`conclusion: action_required`) included. Kept: runs whose
   `head_repository` is this repository and `head_branch` the pull request's head branch (set by GitHub,
   not by the run's code), and whose `pull_requests` names this pull request or nothing. Not required to
   name it: GitHub empties `pull_requests` once the pull request is merged or closed, and never fills it
   for a fork's run (con/tinuous#28, reproduced by GitHub support; github/docs#22501), and its own
   documentation says the list "do[es] not necessarily indicate pull requests that triggered the run".
3. Of those, newest first, the first whose preview was approved: the run's review history (`GET
   actions/runs/{id}/approvals`, "Get the review history for a workflow run",
   https://docs.github.com/en/rest/actions/workflow-runs#get-the-review-history-for-a-workflow-run) holds an
   `approved` review of REVIEW_ENVIRONMENT by someone other than the pull request's author and the run's
   triggering actor. A run nobody else approved never held the preview's credentials, so it saved no plan
   the deploy could trust.

Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

# Beside this script (python3 ci/reviewed_run.py puts ci/ first on sys.path): every JSON value of a
# `gh --paginate` answer, one per page.
from upsert_comment import json_stream as stream


class Refused(Exception):
    pass


def gh(*args: str) -> str:
    proc = subprocess.run(["gh", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Refused(f"gh {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def merged_pull(repo: str, sha: str) -> dict[str, Any]:
    pulls = [p for page in stream(gh("api", f"repos/{repo}/commits/{sha}/pulls")) for p in
             (page if isinstance(page, list) else [page])]
    merged = [p for p in pulls if p.get("merged_at") and p.get("merge_commit_sha") == sha]
    if len(merged) != 1:
        raise Refused(f"no pull request was merged as {sha[:12]}: a direct push to main, so nothing was reviewed and "
                      "nothing is deployed. Open a pull request; its reviewed plan is deployed when it merges.")
    pull = merged[0]
    head_repo = str(((pull.get("head") or {}).get("repo") or {}).get("full_name") or "")
    if head_repo.lower() != repo.lower():
        raise Refused(f"#{pull['number']} came from {head_repo or 'a deleted fork'}: a fork's pull request never "
                      "ran a preview with credentials, so no reviewed plan exists. A maintainer mirrors it to a "
                      "branch of this repository (ci/mirror-fork.sh) and merges that pull request instead.")
    return pull


def candidates(repo: str, pull: dict[str, Any], workflow: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(runs of this pull request's head branch in this repository, newest first; why others were left)."""
    head = pull["head"]
    pages = stream(gh("api", "--paginate",
                      f"repos/{repo}/actions/workflows/{workflow}/runs?event=pull_request&head_sha={head['sha']}"
                      "&per_page=100"))
    runs = [r for page in pages for r in (page.get("workflow_runs") or [])]
    kept, left = [], []
    for run in sorted(runs, key=lambda r: int(r["id"]), reverse=True):
        from_repo = str((run.get("head_repository") or {}).get("full_name") or "")
        prs = [p.get("number") for p in run.get("pull_requests") or []]
        if from_repo.lower() != repo.lower():
            left.append(f"run {run['id']} is {from_repo or 'a deleted repository'}'s ({run.get('conclusion')})")
        elif run.get("head_branch") != head["ref"] or run.get("event") != "pull_request":
            left.append(f"run {run['id']} is of branch {run.get('head_branch')} ({run.get('event')})")
        elif prs and pull["number"] not in prs:
            left.append(f"run {run['id']} is of #{', #'.join(map(str, prs))}")
        else:
            kept.append(run)
    return kept, left


def approved_by(repo: str, run: dict[str, Any], environment: str, not_by: set[str]) -> tuple[str, str]:
    """(approver, "") or ("", why not)."""
    reviews = stream(gh("api", f"repos/{repo}/actions/runs/{run['id']}/approvals"))
    reviews = [r for page in reviews for r in (page if isinstance(page, list) else [page])]
    approved = [r for r in reviews if r.get("state") == "approved"
                and environment in [e.get("name") for e in r.get("environments") or []]]
    for review in approved:
        login = str((review.get("user") or {}).get("login") or "")
        if login and login.lower() not in not_by:
            return login, ""
    if approved:
        who = ", ".join(sorted({str((r.get("user") or {}).get("login")) for r in approved}))
        return "", f"run {run['id']}'s `{environment}` was approved only by {who}, its author or trigger"
    return "", f"run {run['id']} has no approval of `{environment}` ({run.get('conclusion') or run.get('status')})"


def find(repo: str, sha: str, workflow: str = "pr.yml", environment: str = "preview") -> dict[str, str]:
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise Refused(f"GITHUB_SHA {sha!r} is not a commit id")
    pull = merged_pull(repo, sha)
    runs, left = candidates(repo, pull, workflow)
    author = str((pull.get("user") or {}).get("login") or "").lower()
    for run in runs:
        not_by = {author, str((run.get("triggering_actor") or {}).get("login") or "").lower()} - {""}
        who, why = approved_by(repo, run, environment, not_by)
        if who:
            return {"pr-number": str(pull["number"]), "run-id": str(run["id"]), "approved-by": who}
        left.append(why)
    seen = f" ({'; '.join(left)})" if left else ""
    raise Refused(f"#{pull['number']} (head {pull['head']['sha'][:12]} on {pull['head']['ref']}) has no run of "
                  f"{workflow} from this repository whose `{environment}` someone other than its author approved"
                  f"{seen}: no reviewed plan to apply.")


def main() -> int:
    missing = [k for k in ("GITHUB_REPOSITORY", "GITHUB_SHA") if not os.environ.get(k)]
    if missing:
        print(f"ci/reviewed_run.py: {', '.join(missing)} not set", file=sys.stderr)
        return 2
    try:
        found = find(os.environ["GITHUB_REPOSITORY"], os.environ["GITHUB_SHA"],
                     os.environ.get("REVIEW_WORKFLOW") or "pr.yml", os.environ.get("REVIEW_ENVIRONMENT") or "preview")
    except Refused as e:
        print(e, file=sys.stderr)
        return 1
    for key, value in found.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
