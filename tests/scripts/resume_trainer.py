#!/usr/bin/env python3
"""A minimal trainer that keeps the resume contract, run as the launcher's training command.

    resume_trainer.py --last-step N [--step-seconds S]

Environment:

    CKPT_DIR     required: this run's checkpoint directory on the shared volume
                 (/fsx/runs/<experiment>/<identity>/). A changed identity (e.g. another model
                 path) is another directory, so such a run starts from step 0.
    RESUME       "auto": continue after the newest COMPLETE checkpoint in CKPT_DIR;
                 "never": start at step 0 whatever CKPT_DIR holds.
    RAY_ADDRESS  required: the explicit head address the launcher passes; ray.init() connects
                 there and nowhere else.

Steps are numbered from 0. Step N runs one tiny Ray task and then writes checkpoint
`step-NNNN` (the state after step N): into a temporary directory first, `COMPLETE` written and
synced last, then renamed into place, so a directory named step-NNNN without COMPLETE is never
produced by this writer and is ignored (and replaced) when found. Resuming from step-NNNN starts
at step N+1.

SIGTERM (the kubelet stopping the pod, forwarded by the launcher or delivered directly when the
launcher exec'd this program) lets the current step and its checkpoint finish, then the trainer
exits 143 before starting another: a stopped run is not a finished one. The handler is installed after ray.init(),
which replaces any earlier SIGTERM handler with one that exits at once.

Output lines (the tests read them): `resume: ...`, `step N value=V`, `stopping before step N`,
`finished at step N value=V`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

COMPLETE = "COMPLETE"
STATE = "state.json"
_STEP_DIR = re.compile(r"step-(\d+)")
MODULUS = 1_000_000_007


def advance(value: int, step: int) -> int:
    """One step's work: deterministic, so a resumed run can be checked against a fresh one."""
    return (value * 31 + step + 1) % MODULUS


def checkpoint_name(step: int) -> str:
    return f"step-{step:04d}"


def newest_complete(ckpt_dir: Path):
    """(step, value) of the newest checkpoint with a COMPLETE marker, or None."""
    best = None
    for entry in sorted(ckpt_dir.iterdir()) if ckpt_dir.is_dir() else []:
        match = _STEP_DIR.fullmatch(entry.name)
        if match is None or not entry.is_dir():
            continue  # temporary directories and anything else
        if not (entry / COMPLETE).is_file():
            say(f"resume: ignoring {entry.name} (no {COMPLETE} marker: an interrupted write)")
            continue
        step = int(match.group(1))
        if best is None or step > best[0]:
            state = json.loads((entry / STATE).read_text())
            if state["step"] != step:
                raise SystemExit(f"{entry}: state.json says step {state['step']}")
            best = (step, state["value"])
    return best


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def save_checkpoint(ckpt_dir: Path, step: int, value: int) -> None:
    final = ckpt_dir / checkpoint_name(step)
    tmp = ckpt_dir / f".tmp-{checkpoint_name(step)}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    _write_synced(tmp / STATE, json.dumps({"step": step, "value": value}))
    _write_synced(tmp / COMPLETE, f"{step}\n")  # last: its presence means the rest is there
    _fsync_dir(tmp)
    if final.exists():
        # Only an incomplete leftover (we resumed from an older step) or, with RESUME=never, an
        # old run's checkpoint: a directory cannot be renamed over a non-empty one.
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)


def say(message: str) -> None:
    print(message, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--last-step", type=int, required=True)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()

    ckpt = os.environ.get("CKPT_DIR", "").strip()
    resume = os.environ.get("RESUME", "").strip()
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if not ckpt or resume not in ("auto", "never") or not address:
        say(f"need CKPT_DIR, RESUME=auto|never and RAY_ADDRESS; got {ckpt!r}, {resume!r}, {address!r}")
        return 2
    ckpt_dir = Path(ckpt)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    start, value = 0, 0
    found = newest_complete(ckpt_dir) if resume == "auto" else None
    if found is None:
        say(f"resume: no complete checkpoint in {ckpt_dir} (RESUME={resume}); starting at step 0")
    else:
        done, value = found
        start = done + 1
        say(f"resume: from {checkpoint_name(done)} value={value}; starting at step {start}")

    import ray

    # The explicit address the launcher passed, never "auto" or discovery.
    ray.init(address=address, log_to_driver=False)
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))

    @ray.remote(num_cpus=0)
    def train_step(current: int, step: int) -> int:
        return advance(current, step)

    for step in range(start, args.last_step + 1):
        if stop:
            # Between steps: everything done so far is checkpointed.
            say(f"stopping before step {step} (SIGTERM); the last complete checkpoint is step {step - 1}")
            ray.shutdown()
            return 128 + signal.SIGTERM
        value = ray.get(train_step.remote(value, step))
        save_checkpoint(ckpt_dir, step, value)
        say(f"step {step} value={value}")
        if args.step_seconds and step < args.last_step:
            time.sleep(args.step_seconds)
    say(f"finished at step {args.last_step} value={value}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
