#!/usr/bin/env python3
"""Resume a trainer from its newest complete checkpoint, in the trainer's own terms, then run it.

Usage (the training command, or the command the Ray launcher runs on the head):

    python3 /scripts/resume_wrapper.py -- <training command> [args...]
    python3 /scripts/resume_wrapper.py --record-stall <why>   (the Ray launcher's head, below)

Environment (set by the Pulumi program from the trainer profile, components/stack/trainers.py):

    RESUME_STEPS_DIR       directory where the trainer writes its step directories, inside this
                           run's own checkpoint directory (for RLinf through the reference script:
                           $CKPT_PATH/<experiment>/<config experiment>/checkpoints)
    RESUME_STEP_PREFIX     a step directory is this prefix + the step number (global_step_)
    RESUME_COMPLETE_MARKS  comma-separated files, relative to a step directory, that all load
                           once the step is complete (the trainer writes them last; what "load"
                           means per file: components/scripts/checkpoint_complete.py)
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
    RESUME_LEDGER_SCOPE    the UID of the Job this pod belongs to (the downward API, the pod's
                           `batch.kubernetes.io/controller-uid` label): only the starts of this
                           Job count. Empty: every entry counts (a StatefulSet's or RayJob's pod).

The newest step whose marks all load wins (checkpoint_complete.py: a torch.save archive with its
zip directory, DCP metadata that parses to its end); a step without them (killed mid-write, a
torn full_weights.pt) is skipped with the mark and the reason, and left for the trainer to
overwrite: the newest complete step before it is used. No complete step: the command starts
fresh, unchanged.
The wrapper then replaces itself with the command (exec), so the trainer gets SIGTERM directly
and its exit code is the container's.

The ledger: at every start, after choosing the step, the wrapper reads the ledger (one JSON object
a line: time in UTC, the step directory or null for a fresh start, hostname, node, the Job's UID)
and counts the trailing entries of the current Job (RESUME_LEDGER_SCOPE) that started from the
same step: a run that ended (BackoffLimitExceeded, a refused start, a replacement by `pulumi up`)
leaves its entries behind, and a new Job on the same checkpoint directory starts its own count.
More than RESUME_MAX_STALLED_RESTARTS of them:
this start would be restart number max+1 without a newer complete checkpoint (a node that keeps
failing, capacity that never holds, a trainer that dies before its first checkpoint), so the
wrapper says so and exits EXIT_NO_PROGRESS instead of training; the pod failure policy fails the
Job on that code. The refused start is not recorded: once the cause is fixed, a new Job (the run
replaced, `pulumi up`) counts afresh; deleting the ledger file does too. Otherwise it appends its
own line (O_APPEND, one write, fsync) and trains. This bound holds whatever restarted the trainer
(a pod recreated after its node was lost or repaired, a Kueue eviction and requeue of any reason,
a retried crash), which no single Kubernetes or Kueue counter does.

`--record-stall WHY` counts an attempt of the run that ended before any trainer started: the Ray
launcher's head runs it when its nodes did not all come (healthy) within RAY_NODE_WAIT_SECONDS
(ray_launcher.py, exit 3), so that waiting for nodes that never come is bounded the same way as
restarting without progress. It records an entry with `kind` WHY and exits 0, or refuses like a
start over the bound (EXIT_NO_PROGRESS, nothing recorded); without RESUME_LEDGER it does nothing.
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

# The one test of a complete step (components/scripts/checkpoint_complete.py), mounted beside this
# file: imported as components.scripts.resume_wrapper by the Pulumi program and the tests, run as
# /scripts/resume_wrapper.py in the pods (whose directory Python puts first on sys.path, except
# under `python -P` or PYTHONSAFEPATH, which an image may set).
if __package__:
    from .checkpoint_complete import newest_complete
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    from checkpoint_complete import newest_complete

EXIT_USAGE = 2
EXIT_NO_PROGRESS = 10
EXIT_NOT_FOUND = 127
REQUIRED = ("RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT")
PREFIX = "[resume-wrapper]"
LEDGER = "RESUME_LEDGER"
MAX_STALLED = "RESUME_MAX_STALLED_RESTARTS"
# The current run's identity: the UID of the batch/v1 Job whose pod this is (the program sets it
# from the pod's `batch.kubernetes.io/controller-uid` label through the downward API). Empty or
# unset (a StatefulSet's or KubeRay's pod, or an older pod spec): every entry counts.
SCOPE = "RESUME_LEDGER_SCOPE"
# `--record-stall WHY`: record an attempt that ended before the trainer started (the Ray launcher's
# head when its nodes did not come within RAY_NODE_WAIT_SECONDS) and check the same bound.
RECORD_STALL = "--record-stall"
# The config key whose value the program puts in RESUME_MAX_STALLED_RESTARTS (components/workloads/trainer.py).
SETTING = "workloads.infrastructureRestarts"
# Lines kept when the ledger is compacted: far more than any bound (the key allows at most 20).
LEDGER_KEEP = 200


def say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def resume_plan(env: Mapping[str, str]) -> tuple[dict[str, str], Optional[str]]:
    """(the command's environment, the step it resumes from or None for a fresh start)."""
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise ValueError(f"not set: {', '.join(missing)}")
    if "{step_dir}" not in env["RESUME_FORMAT"]:
        raise ValueError(f"RESUME_FORMAT={env['RESUME_FORMAT']!r} has no {{step_dir}}")
    marks = [m.strip() for m in env["RESUME_COMPLETE_MARKS"].split(",") if m.strip()]
    step, skipped = newest_complete(env["RESUME_STEPS_DIR"], env["RESUME_STEP_PREFIX"], marks)
    for path, why in skipped:
        say(f"skipping {path}: incomplete, {why}")
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


def ledger_scope(env: Mapping[str, str]) -> Optional[str]:
    """The current Job's UID (RESUME_LEDGER_SCOPE), or None: every entry counts."""
    return (env.get(SCOPE) or "").strip() or None


def stalled_starts(entries: Sequence[dict], step: Optional[str], scope: Optional[str] = None) -> list[dict]:
    """The trailing entries that started from `step` (None: fresh), oldest first, counting only the
    entries of the Job `scope` when there is one: a Job that ended (failed, replaced) leaves its
    starts in the ledger, and the next Job on the same checkpoint directory starts its own count."""
    mine = [e for e in entries if scope is None or e.get("job") == scope]
    n = 0
    for entry in reversed(mine):
        if entry["step"] != step:
            break
        n += 1
    return list(mine[len(mine) - n:])


def new_entry(step: Optional[str], env: Mapping[str, str], now: Optional[float] = None,
              kind: Optional[str] = None) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    out = {"time": stamp, "step": step, "hostname": socket.gethostname(), "node": env.get("NODE_NAME") or None,
           "job": ledger_scope(env)}
    if kind:
        out["kind"] = kind
    return out


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
    times = ", ".join(f"{e.get('time', '?')} on {e.get('node') or e.get('hostname') or '?'}"
                      + (f" ({e['kind']})" if e.get("kind") else "") for e in starts[-25:])
    return (f"refusing to start: the trainer was already started {len(starts)} times in a row from {where} "
            f"without a newer complete checkpoint ({times}); this would be restart {len(starts)}, over the "
            f"bound of {limit} ({SETTING}, {MAX_STALLED}={limit}). The run is failed instead of retried for ever "
            f"(exit {EXIT_NO_PROGRESS}). Find out why it keeps failing (a node that keeps failing or is replaced "
            f"by one that fails, capacity that does not hold, a trainer that dies before its next checkpoint: "
            f"kubectl get events, the node conditions, the previous pods' logs), fix it, then delete {path} "
            f"and start the run again (a replaced run with the same checkpoint directory keeps this ledger), "
            f"or raise {SETTING}.")


def keep_ledger(path: str, limit: Optional[int], step: Optional[str], env: Mapping[str, str],
                kind: Optional[str] = None) -> bool:
    """Record this start (or, with `kind`, an attempt that ended before the trainer started);
    False when it is over the bound (the message said why). Bookkeeping that fails is a warning:
    the start goes on."""
    try:
        entries = read_ledger(path)
    except OSError as exc:
        say(f"warning: cannot read the start ledger {path} ({exc}): starting without the bound on restarts")
        return True
    scope = ledger_scope(env)
    starts = stalled_starts(entries, step, scope)
    if limit is not None and len(starts) > limit:
        say(refusal(path, step, starts, limit))
        return False
    item = new_entry(step, env, kind=kind)
    try:
        if len(entries) >= LEDGER_KEEP:
            compact(path, [*entries, item])
        else:
            append_entry(path, item)
    except OSError as exc:
        say(f"warning: cannot write the start ledger {path} ({exc}): this start is not counted")
        return True
    if limit is not None:
        what = f"attempt ({kind})" if kind else "start"
        job = f" of Job {scope}" if scope else ""
        say(f"{what} {len(starts) + 1} in a row{job} from {step or 'a fresh start'} "
            f"(at most {limit + 1}: {SETTING}={limit})")
    return True


def settings() -> Optional[tuple]:
    """(ledger, limit, the command's env, step) from this process's environment; None after saying
    what is wrong with it."""
    try:
        ledger, limit = ledger_settings(os.environ)
        env, step = resume_plan(os.environ)
    except ValueError as exc:
        say(str(exc))
        return None
    return ledger, limit, env, step


def record_stall(why: str) -> int:
    """`--record-stall WHY`: count an attempt that ended before the trainer started, against the same
    bound; EXIT_NO_PROGRESS when it is over it. Without a ledger: nothing to do (0)."""
    found = settings()
    if found is None:
        return EXIT_USAGE
    ledger, limit, _, step = found
    if ledger is None:
        return 0
    return 0 if keep_ledger(ledger, limit, step, os.environ, kind=why) else EXIT_NO_PROGRESS


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [RECORD_STALL]:
        if len(args) != 2 or not args[1].strip():
            say(f"usage: resume_wrapper.py {RECORD_STALL} <why>")
            return EXIT_USAGE
        return record_stall(args[1].strip())
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        say("usage: resume_wrapper.py -- <training command> [args...]")
        return EXIT_USAGE
    found = settings()
    if found is None:
        return EXIT_USAGE
    ledger, limit, env, step = found
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
