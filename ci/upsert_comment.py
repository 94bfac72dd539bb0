"""Create or edit this workflow's one comment of a kind on a pull request, never anyone else's, never
with an older run's result.

    python3 ci/upsert_comment.py KIND BODY_FILE
        # env: GITHUB_REPOSITORY, PR_NUMBER, HEAD_SHA (the commit the body describes), RUN_ID,
        #      RUN_ATTEMPT (default 1), GH_TOKEN (for `gh`); COMMENT_AUTHOR (default github-actions[bot];
        #      for KIND review-fork required, and never github-actions[bot])
    python3 ci/upsert_comment.py --resolve-pr
        # env: GITHUB_REPOSITORY, HEAD_SHA, HEAD_REPO, HEAD_BRANCH: prints the one open pull request
        #      whose head is that commit of that repository's branch (the fork path), or nothing

KIND names the comment (`review`, `preview:p5`): the body is prefixed with `<!-- rltrain-KIND -->` and a
second hidden line naming the commit, the run and its attempt. Then, with the `gh` CLI:

1. The pull request's head must still be HEAD_SHA (`GET pulls/N`): a newer push has a newer run, which
   comments; an outdated result is not written at all.
2. Of the pull request's comments, ours are those that begin with the marker AND were written by
   COMMENT_AUTHOR (the token's user): anyone can paste the marker into a comment of their own, and
   editing that would put our text under their name, or let them steer what we overwrite. Every
   workflow token of the repository posts as `github-actions[bot]` (a same-repository pull request's
   workflow too), so for the fork's comment (`review-fork`) the author must be the review App's bot
   (`APP-SLUG[bot]`, .github/workflows/pr-comment.yml), which only that workflow's environment holds.
3. When our latest comment was written by a later run (run id, then attempt), nothing is written: an
   older run (a re-run of an old commit's workflow) never overwrites a newer comment.
4. Otherwise our latest comment is edited (PATCH), or a new one is created (POST).

On the fork path (ci/review-comment.sh under `workflow_run`) the pull request number never comes from
the fork's artifact: a head SHA alone does not name one pull request (a maintainer who mirrors a
fork's commit to a branch of this repository opens a second pull request with the same head), so
`--resolve-pr` asks GitHub for the pull requests of that commit (`GET commits/{sha}/pulls`, "List pull
requests associated with a commit": open pull requests when the commit is not on the default branch,
https://docs.github.com/en/rest/commits/commits#list-pull-requests-associated-with-a-commit) and keeps
the one whose head is the run's own head repository and branch (`workflow_run.head_repository`,
`workflow_run.head_branch`, set by GitHub, not by the fork). Fork comments also carry their own
marker (KIND `review-fork`), so a fork's run can never edit the review comment of a same-repository
pull request.

Prints what it did. Exit 0 also when it skips; non-zero when `gh` fails. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

MAX_COMMENT = 64_000  # GitHub refuses over 65,536 characters; pulumi/actions caps at 64,000 (src/libs/pr.ts)
DEFAULT_AUTHOR = "github-actions[bot]"
# Kinds whose author must be an identity of their own (a GitHub App's bot), not any workflow's token.
APP_ONLY = ("review-fork",)
_META = re.compile(r"<!-- rltrain-meta commit=([0-9a-f]+) run=(\d+) attempt=(\d+) -->")


def marker(kind: str) -> str:
    return f"<!-- rltrain-{kind} -->"


def meta(commit: str, run_id: int, attempt: int) -> str:
    return f"<!-- rltrain-meta commit={commit} run={run_id} attempt={attempt} -->"


def written_by(body: str) -> Optional[tuple[int, int]]:
    """(run id, attempt) recorded in a comment of ours; None for a comment without them. Only the
    second line counts: the rest of the body quotes a pull request's own text, which could carry a
    forged meta line claiming a far newer run (and freeze the comment)."""
    lines = (body or "").split("\n", 2)
    m = _META.fullmatch(lines[1].strip()) if len(lines) > 1 else None
    return (int(m.group(2)), int(m.group(3))) if m else None


def resolve_pr(repo: str, sha: str, head_repo: str, head_branch: str) -> tuple[Optional[str], str]:
    """(number, why): the one open pull request whose head is `sha` on `head_repo`:`head_branch`."""
    pulls = json_stream(gh("api", "--paginate", f"repos/{repo}/commits/{sha}/pulls",
                           "--jq", ".[] | {number: .number, state: .state, sha: .head.sha, "
                                   "repo: .head.repo.full_name, ref: .head.ref}"))
    match = [p for p in pulls if p.get("state") == "open" and p.get("sha") == sha
             and str(p.get("repo") or "").lower() == head_repo.lower() and p.get("ref") == head_branch]
    others = sorted(f"#{p.get('number')} ({p.get('repo')}:{p.get('ref')})" for p in pulls if p not in match)
    seen = f" (other pull requests of this commit, left alone: {', '.join(others)})" if others else ""
    if len(match) != 1:
        return None, (f"no single open pull request from {head_repo}:{head_branch} at {sha[:12]}: "
                      f"{len(match)} found{seen}; nothing to comment")
    return str(match[0]["number"]), f"#{match[0]['number']} is {head_repo}:{head_branch} at {sha[:12]}{seen}"


def compose(kind: str, body: str, commit: str, run_id: int, attempt: int) -> str:
    head = f"{marker(kind)}\n{meta(commit, run_id, attempt)}\n"
    room = MAX_COMMENT - len(head)
    if len(body) > room:
        note = "\n\n(trimmed to GitHub's comment size: the whole text is in the job summary and the artifact)\n"
        body = body[:room - len(note)] + note
    return head + body


def gh(*args: str) -> str:
    proc = subprocess.run(["gh", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"gh {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def json_stream(text: str) -> list[Any]:
    """Every JSON value in `text` (gh --paginate --jq prints one per line, pages concatenated)."""
    out, decoder, i = [], json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        value, i = decoder.raw_decode(text, i)
        out.append(value)


def ours(comments: list[dict[str, Any]], kind: str, author: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ours, foreign): comments beginning with the marker, split by who wrote them."""
    marked = [c for c in comments if str(c.get("body") or "").startswith(marker(kind))]
    return [c for c in marked if c.get("author") == author], [c for c in marked if c.get("author") != author]


def upsert(kind: str, body: str, env: dict[str, str]) -> str:
    repo, pr, commit = env["GITHUB_REPOSITORY"], env["PR_NUMBER"], env["HEAD_SHA"]
    run_id, attempt = int(env["RUN_ID"]), int(env.get("RUN_ATTEMPT") or 1)
    author = env.get("COMMENT_AUTHOR") or DEFAULT_AUTHOR
    if kind in APP_ONLY and author in (DEFAULT_AUTHOR, "[bot]"):
        raise SystemExit(f"a `{kind}` comment is written only with the review App's token (COMMENT_AUTHOR "
                         f"APP-SLUG[bot]), never as {DEFAULT_AUTHOR}, which every workflow token posts as")
    if not re.fullmatch(r"[0-9]+", pr):
        raise SystemExit(f"PR_NUMBER {pr!r} is not a pull request number")
    head = json.loads(gh("api", f"repos/{repo}/pulls/{pr}"))["head"]["sha"]
    if head != commit:
        return (f"skipped: #{pr}'s head is {head[:12]} now, not {commit[:12]}: the run of the newer commit "
                "comments (an outdated result is never written)")
    comments = json_stream(gh("api", "--paginate", f"repos/{repo}/issues/{pr}/comments",
                              "--jq", ".[] | {id: .id, author: .user.login, body: .body}"))
    mine, foreign = ours(comments, kind, author)
    note = (f" ({len(foreign)} comment(s) with the marker by someone else left alone: "
            f"{', '.join(sorted({str(c.get('author')) for c in foreign}))})") if foreign else ""
    latest = max(mine, key=lambda c: int(c["id"]), default=None)
    if latest is not None:
        theirs = written_by(str(latest.get("body")))
        if theirs is not None and theirs > (run_id, attempt):
            return (f"skipped: comment {latest['id']} was written by run {theirs[0]} attempt {theirs[1]}, "
                    f"newer than this run {run_id} attempt {attempt}{note}")
    payload = json.dumps({"body": compose(kind, body, commit, run_id, attempt)})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(payload)
    try:
        if latest is not None:
            gh("api", "--method", "PATCH", f"repos/{repo}/issues/comments/{latest['id']}", "--input", f.name, "--silent")
            return f"updated comment {latest['id']} on #{pr} for {commit[:12]}{note}"
        gh("api", "--method", "POST", f"repos/{repo}/issues/{pr}/comments", "--input", f.name, "--silent")
        return f"commented on #{pr} for {commit[:12]}{note}"
    finally:
        os.unlink(f.name)


def main(argv: list[str]) -> int:
    if argv == ["--resolve-pr"]:
        need = ("GITHUB_REPOSITORY", "HEAD_SHA", "HEAD_REPO", "HEAD_BRANCH")
        missing = [k for k in need if not os.environ.get(k)]
        if missing:
            print(f"ci/upsert_comment.py --resolve-pr: {', '.join(missing)} not set", file=sys.stderr)
            return 2
        number, why = resolve_pr(*(os.environ[k] for k in need))
        print(why, file=sys.stderr)
        print(number or "")
        return 0
    if len(argv) != 2:
        print("usage: python3 ci/upsert_comment.py KIND BODY_FILE | --resolve-pr", file=sys.stderr)
        return 2
    missing = [k for k in ("GITHUB_REPOSITORY", "PR_NUMBER", "HEAD_SHA", "RUN_ID") if not os.environ.get(k)]
    if missing:
        print(f"ci/upsert_comment.py: {', '.join(missing)} not set", file=sys.stderr)
        return 2
    print(upsert(argv[0], Path(argv[1]).read_text(), dict(os.environ)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
