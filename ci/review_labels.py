"""Label a pull request with what its offline review found: `replaces`, `data-loss`, `node-roll`,
`run-restart`, or `no-change`; labels of this set that no longer apply are removed, others are left alone.

    python3 ci/review_labels.py DIR     # DIR: the `review` artifact (summary.md)
        # env: GITHUB_REPOSITORY, PR_NUMBER, HEAD_SHA, GH_TOKEN (for `gh`)

The impact comes from the summary's impact tables (components/offline/impact.py `table`: the header
`| impact | resource | why | verdict |`, the kind in the first cell, bold for the notable ones); a stack
without a change says "impact: no change against the base record". Nothing is labelled when the
pull request's head is no longer HEAD_SHA (the newer push's run labels) or when there is no summary.
On the fork path the summary was written by the fork's workflow, as the comment's text is: its labels
say what it says, no more (a real preview of a fork's change needs a maintainer's mirror).
Labels on a pull request are the issue's (`POST`/`DELETE repos/{repo}/issues/{n}/labels`); a label the
repository does not have yet is created by GitHub with a default colour. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

LABELS = ("replaces", "data-loss", "node-roll", "run-restart", "no-change")
# components/offline/impact.py kinds -> labels.
BY_KIND = {"replace": ("replaces",), "replace (data loss)": ("replaces", "data-loss"),
           "node roll": ("node-roll",), "run restart": ("run-restart",)}
_HEADER = "| impact | resource | why | verdict |"


def kinds(summary: str) -> list[str]:
    """Every impact kind of every stack's table, in order."""
    found, in_table = [], False
    for line in summary.splitlines():
        if line.strip() == _HEADER:
            in_table = True
            continue
        if in_table and line.startswith("|"):
            cell = line.split("|")[1].strip().strip("*").strip()
            if not re.fullmatch(r"-+", cell):
                found.append(cell)
            continue
        in_table = False
    return found


def labels(summary: str) -> set[str]:
    found = kinds(summary)
    if not found:
        return {"no-change"} if "impact: no change against the base record" in summary else set()
    return {label for kind in found for label in BY_KIND.get(kind, ())}


def gh(*args: str) -> str:
    proc = subprocess.run(["gh", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"gh {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def apply(repo: str, pr: str, head_sha: str, wanted: set[str]) -> str:
    if not re.fullmatch(r"[0-9]+", pr):
        raise SystemExit(f"PR_NUMBER {pr!r} is not a pull request number")
    head = json.loads(gh("api", f"repos/{repo}/pulls/{pr}"))["head"]["sha"]
    if head != head_sha:
        return f"labels skipped: #{pr}'s head is {head[:12]} now, not {head_sha[:12]}"
    current = set(gh("api", f"repos/{repo}/issues/{pr}/labels", "--jq", ".[].name").split())
    add, remove = sorted(wanted - current), sorted((set(LABELS) & current) - wanted)
    if add:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"labels": add}, f)
        try:
            gh("api", "--method", "POST", f"repos/{repo}/issues/{pr}/labels", "--input", f.name, "--silent")
        finally:
            os.unlink(f.name)
    for name in remove:
        gh("api", "--method", "DELETE", f"repos/{repo}/issues/{pr}/labels/{quote(name)}", "--silent")
    return f"labels of #{pr}: added {', '.join(add) or 'none'}; removed {', '.join(remove) or 'none'}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 ci/review_labels.py DIR", file=sys.stderr)
        return 2
    summary = Path(argv[0]) / "summary.md"
    if not summary.is_file() or summary.is_symlink():
        print("no review summary: no labels")
        return 0
    missing = [k for k in ("GITHUB_REPOSITORY", "PR_NUMBER", "HEAD_SHA") if not os.environ.get(k)]
    if missing:
        print(f"ci/review_labels.py: {', '.join(missing)} not set", file=sys.stderr)
        return 2
    wanted = labels(summary.read_text(errors="replace"))
    print(apply(os.environ["GITHUB_REPOSITORY"], os.environ["PR_NUMBER"], os.environ["HEAD_SHA"], wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
