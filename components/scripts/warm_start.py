#!/usr/bin/env python3
"""A warm start: a run's first attempt starts from another run's checkpoint step (issue 43).

Usage (a run with `workloads.runs[].resumeFrom`; the program puts it in front of the resume wrapper):

    python3 /scripts/warm_start.py -- python3 /scripts/resume_wrapper.py -- <training command>

Environment: the resume wrapper's (RESUME_STEPS_DIR, RESUME_STEP_PREFIX, RESUME_COMPLETE_MARKS,
RESUME_ENV, RESUME_FORMAT; components/scripts/resume_wrapper.py) and

    RESUME_FROM   the other run's step directory (its steps directory/<prefix><step>)

While the run has no complete step of its own (the resume wrapper's own test, newest_complete), the
other run's step must be complete (every mark present), else this exits EXIT_USAGE naming it: a step
never saved, or still being written, is refused instead of silently training from scratch. It then
appends the trainer's own resume setting for that step (RESUME_FORMAT, `runner.resume_dir=<step>` for
RLinf) to RESUME_ENV, and the resume wrapper, finding no step of its own, starts the command with
it. Once the run has a complete step of its own this adds nothing and the resume wrapper resumes
from that step as for any run. It then replaces itself with the rest of the command (exec).

Only the standard library and the resume wrapper beside it (the same /scripts directory).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_complete  # noqa: E402  (mounted beside this file)
import resume_wrapper  # noqa: E402  (mounted beside this file)

EXIT_USAGE = resume_wrapper.EXIT_USAGE
RESUME_FROM = "RESUME_FROM"
PREFIX = "[warm-start]"


def say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def warm_env(env: Mapping[str, str]) -> tuple[dict[str, str], Optional[str]]:
    """(the command's environment, the other run's step it starts from, or None)."""
    missing = [k for k in (*resume_wrapper.REQUIRED, RESUME_FROM) if not env.get(k)]
    if missing:
        raise ValueError(f"not set: {', '.join(missing)}")
    marks = [m.strip() for m in env["RESUME_COMPLETE_MARKS"].split(",") if m.strip()]
    own, _ = resume_wrapper.newest_complete(env["RESUME_STEPS_DIR"], env["RESUME_STEP_PREFIX"], marks)
    out = dict(env)
    if own is not None:
        say(f"the run has its own complete step {own}: {RESUME_FROM} not used")
        return out, None
    warm = env[RESUME_FROM]
    # The one test of a complete step (checkpoint_complete.py): every mark present and loadable, so a
    # torn full_weights.pt of the other run is refused here as the resume wrapper skips its own.
    why = checkpoint_complete.incomplete_reason(warm, marks)
    if why:
        raise ValueError(f"{RESUME_FROM}={warm} is not a complete step ({why}): resumeFrom names "
                         "a step that was never saved, was deleted, is torn, or is still being written")
    arg = env["RESUME_FORMAT"].replace("{step_dir}", warm)
    name = env["RESUME_ENV"]
    out[name] = f"{out[name]} {arg}" if out.get(name) else arg
    say(f"warm start from {warm}: {name}+={arg}")
    return out, warm


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        say("usage: warm_start.py -- <command> [args...]")
        return EXIT_USAGE
    try:
        env, _ = warm_env(os.environ)
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        say(f"cannot run {args[0]!r}: {exc}")
        return resume_wrapper.EXIT_NOT_FOUND
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
