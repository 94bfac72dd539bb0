"""The pull-request comment of the offline review (ci/render-review.sh's summary), for either path:

    python3 ci/review_comment.py OUT_DIR [RUN_URL]     # prints the comment (Markdown)

OUT_DIR holds what the offline job uploaded as the `review` artifact: summary.md and review.json
(ci/render-review.sh), and, when the simulated-cluster preview ran, sim-preview.md (the `sim-preview`
artifact, ci/sim-preview.sh: the real engine's operations beside the offline impact), appended. On a pull request from a fork (FORK=true: the `workflow_run` path,
.github/workflows/pr-comment.yml) the comment adds that the real preview runs only after a maintainer
approves (docs/pr-review.md "Pull requests from forks"). Missing files (the offline job failed before
the review) make a comment that says so. Standard library only: it runs with any python3.

The summary was written by the pull request's own code (on the fork path, by the fork's workflow), so
it is text, never markup of ours: `neutralise` breaks every @mention (GitHub would notify whoever it
names) and every HTML tag or comment (an image that tracks readers, a forged `<!-- rltrain-... -->`
marker) with a zero-width space, which the reader does not see. Anything in OUT_DIR that is not a
regular file (a symlink) is treated as missing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

MAX_BODY = 55_000  # ci/upsert_comment.py trims at GitHub's cap; keep the end notes inside it
MAX_SIM = 6_000    # the simulated-cluster preview's table

# First in a fork's comment, before any of the fork's text: the offline job ran the fork's own code,
# so what follows is what that code says, and no text of the fork can come before this.
FORK_NOTE = (
    "> **From a fork: the review below was computed by this pull request's own code** (its offline job "
    "ran the fork's workflow and scripts), so read it as the author's claim, not as a check. "
    "**Previews run after a maintainer approves.** This pull request comes from a fork: GitHub gives "
    "its workflows no secrets, so no real `pulumi preview` runs for it, and this comment comes from a "
    "separate workflow that never checks out the fork's code. A maintainer who has reviewed the change "
    "pushes it to a branch of this repository (`gh pr checkout N`, then `git push origin HEAD:refs/heads/pr-N`) "
    "and opens a pull request from there: its preview job waits for an approval in the `preview` "
    "environment, then runs with the cloud role (docs/pr-review.md).")


ZWSP = "\u200b"
# GitHub mentions: @user, @org/team after a non-word character (an e-mail address is not one).
_MENTION = re.compile(r"(?<!\w)@(?=[A-Za-z0-9])")
# What starts HTML: a tag, an end tag, a comment or declaration, a processing instruction.
_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def neutralise(text: str) -> str:
    """No mention notifies anyone, no HTML renders: a zero-width space after `@` and `<`."""
    return _TAG.sub("<" + ZWSP, _MENTION.sub("@" + ZWSP, text))


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def body(out_dir: Path, run_url: str = "", fork: bool = False) -> str:
    summary = out_dir / "summary.md"
    meta_file = out_dir / "review.json"
    log = f" ([run]({run_url}))" if run_url else ""
    lines: list[str] = [FORK_NOTE, ""] if fork else []
    if not _regular(summary):
        lines += [f"## What this change does to each stack: no review{log}", "",
                  "The offline job stopped before its review (install, tests or the render check failed): "
                  "see the run."]
    else:
        try:
            meta = json.loads(meta_file.read_text()) if _regular(meta_file) else {}
        except ValueError:
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        text = neutralise(summary.read_text(errors="replace"))
        if len(text) > MAX_BODY:
            text = text[:MAX_BODY] + "\n\n(trimmed: the whole review is the run's job summary and `review` artifact)\n"
        lines += [text.rstrip("\n"), ""]
        if meta.get("exit"):
            code = meta["exit"] if isinstance(meta["exit"], int) else "?"
            lines += [f"The review refused at least one stack (exit {code}){log}."]
        elif log:
            lines += [f"From the offline job{log}."]
    sim = out_dir / "sim-preview.md"
    if _regular(sim):
        lines += ["", neutralise(sim.read_text(errors="replace"))[:MAX_SIM].rstrip("\n")]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python3 ci/review_comment.py OUT_DIR [RUN_URL]", file=sys.stderr)
        return 2
    sys.stdout.write(body(Path(argv[0]), argv[1] if len(argv) == 2 else "", os.environ.get("FORK") == "true"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
