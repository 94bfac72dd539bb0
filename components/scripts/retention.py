#!/usr/bin/env python3
"""Keep the newest K complete checkpoints of a run; delete older ones, safely.

Usage (the retention CronJob's command; components/workloads/retention.py sets every flag):

    python3 /scripts/retention.py --steps-dir DIR [--steps-dir DIR ...] --prefix global_step_ \
        --marks actor/dcp_checkpoint/.metadata,actor/model_state_dict/full_weights.pt --keep 3 \
        [--protect DIR=STEP ...] [--max-deletions 4] [--min-age-seconds 3600] [--dry-run]

A step directory is `<steps dir>/<prefix><N>`. It is *complete* when every mark loads: the same
test as /scripts/resume_wrapper.py and /scripts/export_hf.py (components/scripts/checkpoint_complete.py,
mounted beside this file: a torch.save archive with its zip directory, DCP metadata that parses to
its end), so a step whose full_weights.pt was torn mid-write never counts among the kept complete
ones, and never lets an older complete one be deleted. What a pass keeps:

- the newest `--keep` complete steps (K >= 1, so the step a restart resumes from, the newest
  complete one, is always kept until the trainer has written a newer one);
- every step newer than the newest complete one (it may be being written right now);
- any incomplete step modified in the last `--min-age-seconds` (a slow writer);
- every `--protect DIR=STEP` (the served step of that steps directory, for instance).

What it deletes: complete steps older than the K-th newest, and incomplete steps older than the
newest complete one and untouched for `--min-age-seconds` (a save killed mid-write, which no
resume will ever pick: the trainer never writes an older step again). Deletion is a rename to
`.rltrain-deleting-<name>` in the same directory (atomic: the resume wrapper and the trainer never
see a half-deleted step under its own name), then a removal; a pass first finishes any rename a
killed pass left behind, so a second pass is a no-op (idempotent). At most `--max-deletions`
steps per directory per pass (bounded: a backlog is worked off over several passes). Symbolic links
are never followed or deleted. Every decision is logged with the step and the bytes freed.

Exit codes: 0 done (also when a directory does not exist yet), 1 a deletion failed (named),
2 usage. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Optional, Sequence

# The shared completeness test, mounted beside this file (see resume_wrapper.py for the two ways in).
if __package__:
    from .checkpoint_complete import incomplete_reason
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    from checkpoint_complete import incomplete_reason

PREFIX = "[retention]"
DELETING = ".rltrain-deleting-"
EXIT_FAILED = 1
EXIT_USAGE = 2


def say(message: str) -> None:
    print(f"{PREFIX} {message}", flush=True)


@dataclass(frozen=True)
class Step:
    number: int
    path: str
    complete: bool
    mtime: float  # newest modification time of anything inside (seconds since the epoch)
    why: Optional[str] = None  # what is incomplete (checkpoint_complete.incomplete_reason)


def tree_stats(path: str) -> tuple[int, float]:
    """(bytes, newest mtime) of everything under `path`, links not followed."""
    size, newest = 0, os.lstat(path).st_mtime
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            newest = max(newest, st.st_mtime)
            if name in files:
                size += st.st_size
    return size, newest


def steps(steps_dir: str, prefix: str, marks: Sequence[str]) -> list[Step]:
    """The step directories of `steps_dir`, newest first (links skipped)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    out = []
    for name in os.listdir(steps_dir):
        m = pattern.match(name)
        path = os.path.join(steps_dir, name)
        if not m or os.path.islink(path) or not os.path.isdir(path):
            continue
        why = incomplete_reason(path, marks)
        out.append(Step(int(m.group(1)), path, why is None, tree_stats(path)[1], why))
    return sorted(out, key=lambda s: s.number, reverse=True)


def plan(found: Sequence[Step], keep: int, protect: set[int], min_age: float, now: float) -> list[tuple[Step, str]]:
    """(step, why) for each step to delete, oldest first. `found` newest first."""
    complete = [s for s in found if s.complete]
    if not complete:
        return []  # nothing is known good: delete nothing
    kept = {s.number for s in complete[:keep]}
    newest = complete[0].number
    out = []
    for s in found:
        if s.number in kept or s.number in protect or s.number > newest:
            continue
        if s.complete:
            out.append((s, f"complete, older than the newest {keep} complete"))
        elif now - s.mtime >= min_age:
            out.append((s, f"incomplete ({s.why}), older than the newest complete step {newest}, "
                           f"untouched for {now - s.mtime:,.0f} s"))
    return sorted(out, key=lambda x: x[0].number)


def remove(path: str) -> int:
    size, _ = tree_stats(path)
    shutil.rmtree(path)
    return size


def finish_leftovers(steps_dir: str, dry_run: bool) -> None:
    for name in sorted(os.listdir(steps_dir)):
        path = os.path.join(steps_dir, name)
        if name.startswith(DELETING) and os.path.isdir(path) and not os.path.islink(path):
            if dry_run:
                say(f"would finish deleting {path}")
                continue
            say(f"finishing an interrupted deletion: {path} ({remove(path):,} bytes freed)")


def prune(steps_dir: str, prefix: str, marks: Sequence[str], keep: int, protect: set[int],
          max_deletions: int, min_age: float, dry_run: bool, now: Optional[float] = None) -> bool:
    """One pass over one steps directory. False when a deletion failed."""
    if not os.path.isdir(steps_dir):
        say(f"{steps_dir}: no checkpoints yet")
        return True
    finish_leftovers(steps_dir, dry_run)
    found = steps(steps_dir, prefix, marks)
    todo = plan(found, keep, protect, min_age, time.time() if now is None else now)
    complete = [s.number for s in found if s.complete]
    for s in found:
        if not s.complete and (not complete or s.number > complete[0]):
            say(f"{s.path}: incomplete, {s.why}; kept (it may be being written), not counted as complete")
    say(f"{steps_dir}: {len(found)} step(s), complete {complete[:keep + 2]}{'...' if len(complete) > keep + 2 else ''}; "
        f"keeping the newest {keep} complete" + (f" and protected {sorted(protect)}" if protect else "")
        + f"; {len(todo)} to delete" + (f", {max_deletions} this pass" if len(todo) > max_deletions else ""))
    ok = True
    for s, why in todo[:max_deletions]:
        if dry_run:
            say(f"would delete {s.path}: {why}")
            continue
        doomed = os.path.join(steps_dir, DELETING + os.path.basename(s.path))
        try:
            os.rename(s.path, doomed)
            say(f"deleted {s.path}: {why} ({remove(doomed):,} bytes freed)")
        except FileNotFoundError:
            say(f"{s.path}: already gone (another pass?)")
        except OSError as exc:
            say(f"FAILED to delete {s.path}: {exc}")
            ok = False
    return ok


def parse_protect(values: Sequence[str]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for v in values:
        d, sep, step = v.rpartition("=")
        if not sep or not d or not step.isdigit():
            raise ValueError(f"--protect {v!r}: expected DIR=STEP")
        out.setdefault(os.path.normpath(d), set()).add(int(step))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-dir", action="append", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--marks", required=True, help="comma-separated files relative to a step directory")
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--protect", action="append", default=[], help="DIR=STEP, never deleted")
    ap.add_argument("--max-deletions", type=int, default=4)
    ap.add_argument("--min-age-seconds", type=float, default=3600)
    ap.add_argument("--dry-run", action="store_true")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    marks = [m.strip() for m in args.marks.split(",") if m.strip()]
    try:
        protect = parse_protect(args.protect)
        if args.keep < 1:
            raise ValueError(f"--keep {args.keep}: at least 1 (the step a restart resumes from is the newest complete)")
        if args.max_deletions < 1:
            raise ValueError(f"--max-deletions {args.max_deletions}: at least 1")
        if not marks:
            raise ValueError("--marks: at least one file")
    except ValueError as exc:
        say(str(exc))
        return EXIT_USAGE
    ok = True
    for d in args.steps_dir:
        ok &= prune(d, args.prefix, marks, args.keep, protect.get(os.path.normpath(d), set()),
                    args.max_deletions, args.min_age_seconds, args.dry_run)
    return 0 if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
