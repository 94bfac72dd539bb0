#!/usr/bin/env python3
"""Resume a trainer from its newest complete checkpoint, in the trainer's own terms, then run it.

Usage (the training command, or the command the Ray launcher runs on the head):

    python3 /scripts/resume_wrapper.py -- <training command> [args...]

Environment (set by the Pulumi program from the trainer profile, components/stack/trainers.py):

    RESUME_STEPS_DIR       directory where the trainer writes its step directories, inside this
                           run's own checkpoint directory (for RLinf through the reference script:
                           $CKPT_PATH/<experiment>/<config experiment>/checkpoints)
    RESUME_STEP_PREFIX     a step directory is this prefix + the step number (global_step_)
    RESUME_COMPLETE_MARKS  comma-separated files, relative to a step directory, that all exist
                           once the step is complete (the trainer writes them last)
    RESUME_ENV             the variable the resume argument is appended to (HYDRA_OVERRIDES)
    RESUME_FORMAT          the argument, {step_dir} replaced by the step directory
                           (runner.resume_dir={step_dir})

The newest step whose marks all exist wins; a step without them (killed mid-write) is skipped
and left for the trainer to overwrite. No complete step: the command starts fresh, unchanged.
The wrapper then replaces itself with the command (exec), so the trainer gets SIGTERM directly
and its exit code is the container's.

Exit codes: 2 a missing or invalid variable or no command (named in the message), 127 the
command was not found (the message names PATH).
Only the standard library is used: the wrapper runs in any Python of the image.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Mapping, Optional, Sequence

EXIT_USAGE = 2
EXIT_NOT_FOUND = 127
REQUIRED = ("RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT")
PREFIX = "[resume-wrapper]"


def say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def newest_complete(steps_dir: str, prefix: str, marks: Sequence[str]) -> tuple[Optional[str], list[str]]:
    """(the newest complete step directory or None, the incomplete ones seen newer than it)."""
    try:
        names = os.listdir(steps_dir)
    except FileNotFoundError:
        return None, []
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    steps = sorted(((int(m.group(1)), n) for n in names if (m := pattern.match(n))
                    and os.path.isdir(os.path.join(steps_dir, n))), reverse=True)
    skipped = []
    for _, name in steps:
        path = os.path.join(steps_dir, name)
        if all(os.path.isfile(os.path.join(path, mark)) for mark in marks):
            return path, skipped
        skipped.append(path)
    return None, skipped


def resumed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: `env` with the resume argument appended, if there is a step."""
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise ValueError(f"not set: {', '.join(missing)}")
    if "{step_dir}" not in env["RESUME_FORMAT"]:
        raise ValueError(f"RESUME_FORMAT={env['RESUME_FORMAT']!r} has no {{step_dir}}")
    marks = [m.strip() for m in env["RESUME_COMPLETE_MARKS"].split(",") if m.strip()]
    step, skipped = newest_complete(env["RESUME_STEPS_DIR"], env["RESUME_STEP_PREFIX"], marks)
    for path in skipped:
        say(f"skipping {path}: incomplete (missing one of {', '.join(marks)})")
    out = dict(env)
    if step is None:
        say(f"no complete checkpoint under {env['RESUME_STEPS_DIR']}: starting fresh")
        return out
    arg = env["RESUME_FORMAT"].replace("{step_dir}", step)
    name = env["RESUME_ENV"]
    out[name] = f"{out[name]} {arg}" if out.get(name) else arg
    say(f"resuming from {step}: {name}+={arg}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        say("usage: resume_wrapper.py -- <training command> [args...]")
        return EXIT_USAGE
    try:
        env = resumed_env(os.environ)
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        say(f"cannot run {args[0]!r} (looked up on PATH={env.get('PATH', '')}): {exc}")
        return EXIT_NOT_FOUND
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
