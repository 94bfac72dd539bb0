"""What a base's committed record misses of its own program: the base's "drift", in Markdown.

    python ci/record_drift.py STACK COMMITTED_RECORD BASE_RENDER    # prints Markdown; nothing when equal

Both files are rendered/STACK/resources.json rows: the record committed on the base branch and the
base program's own render (ci/base_render.py). When they differ, someone merged a change of the
program without re-rendering: those changes are the base's, not the pull request's, and the review
shows them here, apart from the pull request's own impact (which is judged against BASE_RENDER).
The classification is components/offline/impact.py's (this checkout's), without verdicts: accepting
them was the base's business.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.offline import impact, unset_secrets  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python ci/record_drift.py STACK COMMITTED_RECORD BASE_RENDER", file=sys.stderr)
        return 2
    stack, committed, fresh = argv[0], json.loads(Path(argv[1]).read_text()), json.loads(Path(argv[2]).read_text())
    if committed == fresh:
        return 0
    try:
        _, _, cfg = unset_secrets.load_stack(stack)
    except Exception as e:  # noqa: BLE001 - this change broke or removed the stack file: still list the drift
        before = {(r["type"], r["name"]): r for r in committed}
        after = {(r["type"], r["name"]): r for r in fresh}
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        rows = [f"| changed | `{t.split(':')[-1]} {n}` | not classified ({type(e).__name__}) |" for t, n in keys]
    else:
        impacts = impact.classify(committed, fresh, cfg)
        rows = [f"| {i.kind} | `{i.type.split(':')[-1]} {i.name}` | {i.why.replace('|', '/')} |" for i in impacts]
    print("\n".join([
        f"> **The base is stale: these changes are not this PR's.** The base's committed "
        f"`rendered/{stack}/resources.json` is older than the base's own program (a change was merged "
        "without re-rendering). This pull request is judged against what the base's program renders; "
        "what that adds to the base's record is listed here, and lands on the stack with the next "
        "deploy whether or not this PR merges. Whoever owns the base should re-render it: "
        f"`python -m components.offline.render --stack {stack} --accept-impact` on the base branch.",
        "",
        "| base drift | resource | what |", "|---|---|---|",
        *(rows or ["| (order or formatting only) | | |"]), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
