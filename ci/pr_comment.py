"""The pull-request comment of one stack's real preview, whatever became of it.

    python3 ci/pr_comment.py STACK OUT_DIR [RUN_URL [COMMIT]]    # prints the comment (Markdown)

Reads what the preview job's scripts left in OUT_DIR: preview.unavailable (ci/preview-gate.sh: no
preview here, and why: a fork, credentials not set), preview-STACK.skipped (ci/preview-install.sh:
secrets not set, KEY<TAB>COMMAND lines), preflight-STACK.txt and .rc (ci/preflight.sh),
preview-STACK.txt (the captured output of login, stack select and `pulumi preview`) and
preview-STACK.rc (its exit code), drift-STACK.txt and .rc (`pulumi refresh --preview-only`: the
live stack against its state, shown apart from this change). The heading names the commit the comment describes. The comment says whether the preview
succeeded, failed or was skipped, shows the summary first (Pulumi's `Resources:` block, the policy
violations, the errors) and then the output, trimmed from the front so that its end (where Pulumi
prints the summary) always stays. GitHub refuses a comment over 65,536 characters; pulumi/actions
caps its own at 64,000 (src/libs/pr.ts), and so does this.

Standard library only: it runs with any python3.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAX_COMMENT = 64_000 - 200  # room for ci/upsert_comment.py's two marker lines
# Begins every comment of this workflow for a stack (ci/upsert_comment.py's marker of "preview:STACK").
MARKER = "<!-- rltrain-preview:{stack} -->"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_FENCE = "```"


def marker(stack: str) -> str:
    return MARKER.format(stack=stack)


def clean(text: str) -> str:
    """No colour codes, no carriage-return progress, nothing that closes a code fence."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    return text.replace(_FENCE, "`\u200b``")


def summary_lines(output: str) -> list[str]:
    """What a reviewer needs first: the last `Resources:` block, policy violations, errors."""
    lines = output.splitlines()
    picked: list[str] = []
    for title in ("Policies:", "Policy Violations:", "Resources:"):
        starts = [i for i, line in enumerate(lines) if line.strip() == title or line.startswith(title)]
        if not starts:
            continue
        block = [lines[starts[-1]]]
        for line in lines[starts[-1] + 1:]:
            if not line.strip() or (line[:1].strip() and not line.startswith(" ")):
                break
            block.append(line)
        picked += block[:40] + [""]
    errors = [line.strip() for line in lines if re.match(r"\s*error:", line)]
    if errors:
        picked += errors[:15] + [""]
    return picked[:-1] if picked and picked[-1] == "" else picked


# A resource line of Pulumi's diff display: the op symbol(s), then `type name` (types have colons).
_RESOURCE_LINE = re.compile(r"^\s*(\+-|-\+|[~+-]|\+\+|--|<=|=>?)\s+\S+:\S+\s+\S+")


def drift_lines(stack: str, out_dir: Path) -> list[str]:
    """The drift paragraph: what `pulumi refresh --preview-only` found, apart from this change."""
    rc_file, text_file = out_dir / f"drift-{stack}.rc", out_dir / f"drift-{stack}.txt"
    if not rc_file.exists():
        return []
    rc = rc_file.read_text().strip()
    output = clean(text_file.read_text(errors="replace")) if text_file.exists() else ""
    if rc != "0":
        errors = [line.strip() for line in output.splitlines() if re.match(r"\s*error:", line)][:10]
        return [f"**Drift check failed** (`pulumi refresh --preview-only`, exit {rc}): whether the live stack "
                "differs from its state is not known; the preview below still ran with `--refresh`.", "",
                *([_FENCE + "text", *errors, _FENCE, ""] if errors else [])]
    counts = [line.strip() for line in (summary_lines(output) or []) if line.strip()
              and line.strip() != "Resources:" and not line.strip().endswith("unchanged")
              and not line.strip().startswith(("Policies:", "Policy Violations:", "error:"))]
    counts = [c for c in counts if re.match(r"^(\+-|[~+-]|\+\+|--)\s*\d+ to ", c)]
    if not counts:
        return ["No drift: the live stack matches its state (`pulumi refresh --preview-only`).", ""]
    resources = [line.rstrip() for line in output.splitlines() if _RESOURCE_LINE.match(line)
                 and "pulumi:pulumi:Stack" not in line][:40]
    return [f"**Drift**: the live stack differs from its state, apart from this pull request's change "
            f"(`pulumi refresh --preview-only`: {', '.join(counts)}). The preview below ran with `--refresh`: "
            "its operations are this change against what is live; a `pulumi up` would also write the "
            "refreshed state.", "",
            *([_FENCE + "text", *resources, _FENCE, ""] if resources else [])]


def body(stack: str, out_dir: Path, run_url: str = "", commit: str = "") -> str:
    skipped = out_dir / f"preview-{stack}.skipped"
    unavailable = out_dir / "preview.unavailable"
    output_file = out_dir / f"preview-{stack}.txt"
    rc_file = out_dir / f"preview-{stack}.rc"
    preflight_rc = out_dir / f"preflight-{stack}.rc"
    head: list[str] = []
    log = f" ([job log]({run_url}))" if run_url else ""
    at = f" at `{commit[:12]}`" if commit else ""
    title = f"### `pulumi preview` of `{stack}`{at}"
    if unavailable.exists():
        head += [f"{title}: not run here{log}", "", unavailable.read_text().strip(), ""]
        return "\n".join(head)
    if skipped.exists():
        head += [f"{title}: skipped, secrets not set{log}", "",
                 f"`Pulumi.{stack}.yaml` does not hold these secrets yet, and a real preview refuses without them. "
                 "Set each (it encrypts the value into the stack file) and commit the stack file:", ""]
        for line in skipped.read_text().splitlines():
            key, _, cmd = line.partition("\t")
            head.append(f"- `{key}`: `{cmd}`")
        head += ["", "The offline job's summary still shows this stack's impact, cost and checks."]
        return "\n".join(head) + "\n"
    if preflight_rc.exists() and preflight_rc.read_text().strip() != "0":
        text = clean((out_dir / f"preflight-{stack}.txt").read_text(errors="replace")) \
            if (out_dir / f"preflight-{stack}.txt").exists() else ""
        head += [f"{title}: **preflight failed** (exit {preflight_rc.read_text().strip()}){log}", "",
                 f"`python -m components.preflight --stack {stack}` refused before the preview:", "",
                 _FENCE + "text", *text.splitlines()[-60:], _FENCE, ""]
        return "\n".join(head)[:MAX_COMMENT]
    if not rc_file.exists():
        head += [f"{title}: did not run{log}", "",
                 "A step before it failed (installing the CLI or the program, the AWS credentials): see the job log."]
        return "\n".join(head) + "\n"
    rc = rc_file.read_text().strip()
    output = clean(output_file.read_text(errors="replace")) if output_file.exists() else ""
    status = "succeeded" if rc == "0" else f"**failed** (exit {rc})"
    head += [f"{title}: {status}{log}", ""]
    head += drift_lines(stack, out_dir)
    summary = summary_lines(output)
    if summary:
        head += ["Summary:", "", _FENCE + "text", *summary, _FENCE, ""]
    text = "\n".join(head)
    opening = "<details><summary>Output{note}</summary>\n\n" + _FENCE + "text\n"
    closing = "\n" + _FENCE + "\n</details>\n"
    room = MAX_COMMENT - len(text) - len(opening) - len(closing) - 80
    if room < 0:  # a summary that alone exceeds the cap (never seen): keep its start
        return text[:MAX_COMMENT - 40] + "\n\n(summary trimmed)\n"
    note = ""
    if len(output) > room:
        note = f" (the last {room:,} of {len(output):,} characters: trimmed from the front)"
        cut = output[len(output) - room:]
        output = cut.split("\n", 1)[-1] if "\n" in cut else cut
    return text + opening.format(note=note) + output.rstrip("\n") + closing


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 4:
        print("usage: python3 ci/pr_comment.py STACK OUT_DIR [RUN_URL [COMMIT]]", file=sys.stderr)
        return 2
    text = body(argv[0], Path(argv[1]), *argv[2:])
    assert len(text) <= MAX_COMMENT, len(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
