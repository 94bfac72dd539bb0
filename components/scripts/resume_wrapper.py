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

Optional, the bound on restarts that make no progress (issue 31):

    RESUME_LEDGER          a file inside this run's own checkpoint directory
                           (<checkpoint dir>/.rltrain/starts.jsonl): the start ledger. Unset: no
                           ledger and no bound, the wrapper does exactly what it did before.
    RESUME_MAX_STALLED_RESTARTS  an integer >= 0 (workloads.infrastructureRestarts): how many
                           times the trainer may be started again from the same step (or fresh
                           again) without a newer complete checkpoint in between. Read only
                           with RESUME_LEDGER; unset, the ledger only records.

The newest step whose marks all exist wins; a step without them (killed mid-write) is skipped
and left for the trainer to overwrite. No complete step: the command starts fresh, unchanged.
The wrapper then replaces itself with the command (exec), so the trainer gets SIGTERM directly
and its exit code is the container's.

The ledger: at every start, after choosing the step, the wrapper reads the ledger (one JSON object
a line: time in UTC, the step directory or null for a fresh start, hostname, node) and counts the
trailing entries that started from the same step. More than RESUME_MAX_STALLED_RESTARTS of them:
this start would be restart number max+1 without a newer complete checkpoint (a node that keeps
failing, capacity that never holds, a trainer that dies before its first checkpoint), so the
wrapper says so and exits EXIT_NO_PROGRESS instead of training; the pod failure policy fails the
Job on that code. The refused start is not recorded: once the cause is fixed, deleting the ledger
file lets the run start again (a replaced run with the same checkpoint directory keeps its
ledger). Otherwise it appends its own line (O_APPEND, one write, fsync) and trains. This bound holds
whatever restarted the trainer (a pod recreated after its node was lost, a Kueue eviction and
requeue of any reason, a retried crash), which no single Kubernetes or Kueue counter does.
A truncated or unreadable line (a crash mid-write) is skipped; past LEDGER_KEEP lines the file
is rewritten (temporary file, rename) with the newest LEDGER_KEEP; a ledger that cannot be read
or written is a warning and the trainer runs unbounded: the bookkeeping never stops training.

Exit codes (module-level EXIT_* names, importable by the Pulumi program):

    2   EXIT_USAGE: a missing or invalid variable or no command (named in the message)
    10  EXIT_NO_PROGRESS: more than RESUME_MAX_STALLED_RESTARTS starts from the same step in a
        row; the message names the step, the starts' times and what to do
    127 EXIT_NOT_FOUND: the command was not found (the message names PATH)
    otherwise the command's own exit code (the wrapper execs it)

The codes 2-8 are also the Ray launcher's (components/scripts/ray_launcher.py), which runs this
wrapper on the head and passes its exit code through; 10 is distinct from all of them.
Only the standard library is used: the wrapper runs in any Python of the image.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from typing import Mapping, Optional, Sequence

EXIT_USAGE = 2
EXIT_NO_PROGRESS = 10
EXIT_NOT_FOUND = 127
REQUIRED = ("RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT")
PREFIX = "[resume-wrapper]"
LEDGER = "RESUME_LEDGER"
MAX_STALLED = "RESUME_MAX_STALLED_RESTARTS"
# The config key whose value the program puts in RESUME_MAX_STALLED_RESTARTS (components/workloads/trainer.py).
SETTING = "workloads.infrastructureRestarts"
# Lines kept when the ledger is compacted: far more than any bound (the key allows at most 20).
LEDGER_KEEP = 200


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


def resume_plan(env: Mapping[str, str]) -> tuple[dict[str, str], Optional[str]]:
    """(the command's environment, the step it resumes from or None for a fresh start)."""
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
        return out, None
    arg = env["RESUME_FORMAT"].replace("{step_dir}", step)
    name = env["RESUME_ENV"]
    out[name] = f"{out[name]} {arg}" if out.get(name) else arg
    say(f"resuming from {step}: {name}+={arg}")
    return out, step


def resumed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: `env` with the resume argument appended, if there is a step."""
    return resume_plan(env)[0]


def ledger_settings(env: Mapping[str, str]) -> tuple[Optional[str], Optional[int]]:
    """(RESUME_LEDGER or None, RESUME_MAX_STALLED_RESTARTS or None); ValueError naming the variable."""
    ledger = env.get(LEDGER) or None
    raw = env.get(MAX_STALLED, "").strip()
    if ledger is None or not raw:
        return ledger, None  # no ledger: the wrapper as before, nothing counted or bounded
    if not re.fullmatch(r"\d+", raw):
        raise ValueError(f"{MAX_STALLED}={raw!r} is not an integer >= 0")
    return ledger, int(raw)


def read_ledger(path: str) -> list[dict]:
    """The ledger's entries, oldest first; none when the file does not exist. A line that is not a
    JSON object with a `step` (a truncated last line after a crash) is skipped. OSError propagates."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "step" in entry and (entry["step"] is None or isinstance(entry["step"], str)):
            out.append(entry)
    return out


def stalled_starts(entries: Sequence[dict], step: Optional[str]) -> list[dict]:
    """The trailing entries that started from `step` (None: fresh), oldest first."""
    n = 0
    for entry in reversed(entries):
        if entry["step"] != step:
            break
        n += 1
    return list(entries[len(entries) - n:])


def new_entry(step: Optional[str], env: Mapping[str, str], now: Optional[float] = None) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    return {"time": stamp, "step": step, "hostname": socket.gethostname(), "node": env.get("NODE_NAME") or None}


def append_entry(path: str, item: dict) -> None:
    """One line, one write, O_APPEND and fsync: a crash leaves at most a truncated last line, and a
    line is started anew after one (else this entry would be glued to it and lost too)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    line = (json.dumps(item, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def compact(path: str, entries: Sequence[dict], keep: int = LEDGER_KEEP) -> None:
    """Rewrite the ledger with its newest `keep` entries (temporary file, fsync, rename)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.writelines(json.dumps(e, sort_keys=True) + "\n" for e in entries[-keep:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def refusal(path: str, step: Optional[str], starts: Sequence[dict], limit: int) -> str:
    where = f"step {step}" if step else "a fresh start (no complete checkpoint)"
    times = ", ".join(f"{e.get('time', '?')} on {e.get('node') or e.get('hostname') or '?'}" for e in starts[-25:])
    return (f"refusing to start: the trainer was already started {len(starts)} times in a row from {where} "
            f"without a newer complete checkpoint ({times}); this would be restart {len(starts)}, over the "
            f"bound of {limit} ({SETTING}, {MAX_STALLED}={limit}). The run is failed instead of retried for ever "
            f"(exit {EXIT_NO_PROGRESS}). Find out why it keeps failing (a node that keeps failing or is replaced "
            f"by one that fails, capacity that does not hold, a trainer that dies before its next checkpoint: "
            f"kubectl get events, the node conditions, the previous pods' logs), fix it, then delete {path} "
            f"and start the run again (a replaced run with the same checkpoint directory keeps this ledger), "
            f"or raise {SETTING}.")


def keep_ledger(path: str, limit: Optional[int], step: Optional[str], env: Mapping[str, str]) -> bool:
    """Record this start; False when it is over the bound (the message said why). Bookkeeping that
    fails is a warning: the start goes on."""
    try:
        entries = read_ledger(path)
    except OSError as exc:
        say(f"warning: cannot read the start ledger {path} ({exc}): starting without the bound on restarts")
        return True
    starts = stalled_starts(entries, step)
    if limit is not None and len(starts) > limit:
        say(refusal(path, step, starts, limit))
        return False
    item = new_entry(step, env)
    try:
        if len(entries) >= LEDGER_KEEP:
            compact(path, [*entries, item])
        else:
            append_entry(path, item)
    except OSError as exc:
        say(f"warning: cannot write the start ledger {path} ({exc}): this start is not counted")
        return True
    if limit is not None:
        say(f"start {len(starts) + 1} in a row from {step or 'a fresh start'} (at most {limit + 1}: {SETTING}={limit})")
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        say("usage: resume_wrapper.py -- <training command> [args...]")
        return EXIT_USAGE
    try:
        ledger, limit = ledger_settings(os.environ)
        env, step = resume_plan(os.environ)
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    if ledger is not None and not keep_ledger(ledger, limit, step, os.environ):
        return EXIT_NO_PROGRESS
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
