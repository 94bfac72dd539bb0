"""The pull-request comment of the offline review (ci/render-review.sh's summary), for either path:

    python3 ci/review_comment.py OUT_DIR [RUN_URL]     # prints the comment (Markdown)
        # env: FORK=true on the fork path, with PR_NUMBER and HEAD_SHA (resolved from GitHub)

OUT_DIR holds what the offline job uploaded as the `review` artifact: summary.md and review.json
(ci/render-review.sh), and, when the simulated-cluster preview ran, sim-preview.md (the `sim-preview`
artifact, ci/sim-preview.sh: the real engine's operations beside the offline impact), appended. Missing
files (the offline job failed before the review) make a comment that says so. Standard library only: it
runs with any python3.

Same repository: the summary was written by the pull request's own code, so it is text, never markup of
ours: `neutralise` breaks every @mention (GitHub would notify whoever it names) and every HTML tag or
comment (an image that tracks readers, a forged `<!-- rltrain-... -->` marker) with a zero-width space,
which the reader does not see. Anything in OUT_DIR that is not a regular file (a symlink) is treated as
missing.

A fork (FORK=true: the `workflow_run` path, .github/workflows/pr-comment.yml): everything in OUT_DIR was
written by the fork's own workflow, so what this repository says and what the fork says must never be
confused. The comment's own words come first and name only what GitHub says: the commit
(`workflow_run.head_sha`), the run, that the review below is the author's claim, and the mirror command
pinned to that commit (ci/mirror-fork.sh: it refuses when the fork pushed since). Then the fork's text,
every line of it inside one block quote, neutralised as above and with every image and link removed
(`strip_links`: a link's text stays, its target goes; bare URLs and reference definitions are broken), so
that a forged "Commit ..." line, a fake "preview succeeded" section or a tracking image renders, if at
all, as quoted text inside the fork's block. Nothing of review.json is shown on that path.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

MAX_BODY = 55_000  # ci/upsert_comment.py trims at GitHub's cap; keep the end notes inside it
MAX_SIM = 6_000    # the simulated-cluster preview's table

# The fork path's own words, before any of the fork's text (format: pr, sha, short, run).
FORK_HEAD = (
    "## Review of #{pr}, a pull request from a fork\n\n"
    "**Commit `{sha}`**{run}: the head GitHub ran (`workflow_run.head_sha`). This comment's own words are "
    "the lines outside the quoted block below; everything inside it was written by this pull request's own "
    "code (its offline job ran the fork's workflow and scripts), so read it as the author's claim, not as a "
    "check.\n\n"
    "**Previews run after a maintainer approves.** GitHub gives a fork's workflows no secrets, so no real "
    "`pulumi preview` runs for it, and this comment comes from a separate workflow that never checks out "
    "the fork's code. A maintainer who has read the change **at `{short}`** mirrors exactly that commit to a "
    "branch of this repository, from a clone of it on `main`:\n\n"
    "```sh\nci/mirror-fork.sh {pr} {sha}\n```\n\n"
    "It refuses if the fork has pushed since; otherwise it pushes `{short}` to `pr-{pr}`. A pull request "
    "from `pr-{pr}` then waits for someone else's approval of the `preview` environment before its preview "
    "runs with the cloud role (docs/pr-review.md \"Pull requests from forks\").\n\n"
    "**The fork's text** (quoted; links and images removed):")
FORK_END = "End of the fork's text. No labels are set from it."


ZWSP = "\u200b"
# GitHub mentions: @user, @org/team after a non-word character (an e-mail address is not one).
_MENTION = re.compile(r"(?<!\w)@(?=[A-Za-z0-9])")
# What starts HTML: a tag, an end tag, a comment or declaration, a processing instruction.
_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def neutralise(text: str) -> str:
    """No mention notifies anyone, no HTML renders: a zero-width space after `@` and `<`."""
    return _TAG.sub("<" + ZWSP, _MENTION.sub("@" + ZWSP, text))


# Markdown's images and links (CommonMark: inline `[text](target)`, full references `[text][label]`,
# definitions `[label]: target`; GitHub's footnotes `[^1]`, and its autolinks of bare http(s):// and
# www. addresses, GitHub Flavored Markdown spec "Autolinks (extension)").
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\s*(?:\([^)\n]*\)|\[[^\]\n]*\])")
_LINK = re.compile(r"\[([^\]\n]*)\]\s*(?:\([^)\n]*\)|\[[^\]\n]*\])")
_LINK_SYNTAX = re.compile(r"\](?=[(\[:])")
_FOOTNOTE = re.compile(r"\[(?=\^)")
_URL = re.compile(r"(?i)\b(https?|ftp)(?=://)|\b(www)(?=\.)")


def strip_links(text: str) -> str:
    """No image loads and no link goes anywhere: an image keeps its alt text, a link its text; what is
    left of the syntax (a reference definition, a link split over lines) and every bare URL is broken
    with a zero-width space, so GitHub renders it as plain text."""
    text = _LINK.sub(r"\1", _IMAGE.sub(r"\1", text))
    text = _FOOTNOTE.sub("[" + ZWSP, _LINK_SYNTAX.sub("]" + ZWSP, text))
    return _URL.sub(lambda m: (m.group(1) or m.group(2)) + ZWSP, text)


def quoted(text: str) -> str:
    """Every line inside one block quote (an empty line as `>`, so the quote never ends early)."""
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.rstrip("\n").split("\n"))


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _text(path: Path, limit: int) -> str:
    text = neutralise(path.read_text(errors="replace"))
    if len(text) > limit:
        text = text[:limit] + "\n\n(trimmed: the whole review is the run's job summary and `review` artifact)\n"
    return text.rstrip("\n")


def fork_body(out_dir: Path, run_url: str, pr: str, sha: str) -> str:
    """The fork path: this repository's words from GitHub's facts, then the fork's text, quoted."""
    run = f" ([run]({run_url}))" if run_url else ""
    lines = [FORK_HEAD.format(pr=pr, sha=sha, short=sha[:12], run=run), ""]
    summary, sim = out_dir / "summary.md", out_dir / "sim-preview.md"
    parts = [_text(summary, MAX_BODY)] if _regular(summary) else []
    if _regular(sim):
        parts.append(_text(sim, MAX_SIM))
    if parts:
        lines += [quoted(strip_links("\n\n".join(parts))), ""]
    else:
        lines += ["(none: the offline job stopped before its review; see the run)", ""]
    lines.append(FORK_END)
    return "\n".join(lines) + "\n"


def body(out_dir: Path, run_url: str = "", fork: bool = False, pr: str = "", sha: str = "") -> str:
    if fork:
        return fork_body(out_dir, run_url, pr, sha)
    summary = out_dir / "summary.md"
    meta_file = out_dir / "review.json"
    log = f" ([run]({run_url}))" if run_url else ""
    lines: list[str] = []
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
        lines += [_text(summary, MAX_BODY), ""]
        if meta.get("exit"):
            code = meta["exit"] if isinstance(meta["exit"], int) else "?"
            lines += [f"The review refused at least one stack (exit {code}){log}."]
        elif log:
            lines += [f"From the offline job{log}."]
    sim = out_dir / "sim-preview.md"
    if _regular(sim):
        lines += ["", _text(sim, MAX_SIM)]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python3 ci/review_comment.py OUT_DIR [RUN_URL]", file=sys.stderr)
        return 2
    fork = os.environ.get("FORK") == "true"
    pr, sha = os.environ.get("PR_NUMBER", ""), os.environ.get("HEAD_SHA", "")
    if fork and not (re.fullmatch(r"[0-9]+", pr) and re.fullmatch(r"[0-9a-f]{40}", sha)):
        print("ci/review_comment.py: a fork's comment needs PR_NUMBER and HEAD_SHA (a full commit id) from GitHub",
              file=sys.stderr)
        return 2
    sys.stdout.write(body(Path(argv[0]), argv[1] if len(argv) == 2 else "", fork, pr, sha))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
