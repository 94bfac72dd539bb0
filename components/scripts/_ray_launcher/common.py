"""What every part shares: the exit codes, the configuration error and the log lines."""

from __future__ import annotations

import os
import sys

# The exit codes of the contract (ray_launcher.py's docstring); the entry script re-exports them
# for the Pulumi program, which maps them in the pod failure policy.
EXIT_USAGE = 2
EXIT_NODES_TIMEOUT = 3
EXIT_HEAD_UNREACHABLE = 4
EXIT_RAY_START_FAILED = 5
EXIT_HEAD_LOST = 6
EXIT_RAY_START_TIMEOUT = 7
EXIT_RAY_CONNECT_FAILED = 8
EXIT_PEER_LOST = 9
# The resume wrapper's (components/scripts/resume_wrapper.py EXIT_NO_PROGRESS): the head passes it on
# when the start ledger refuses another attempt after a wait for nodes ran out.
EXIT_NO_PROGRESS = 10
EXIT_NOT_FOUND = 127

USAGE = "usage: ray_launcher.py -- <training command> [args...]"
# The prefix of the variables that shorten the launcher's fixed waits (tuned()).
TUNED_PREFIX = "RAY_LAUNCHER_"


def tuned(name: str, default: float) -> float:
    """One of the launcher's fixed waits, in seconds: `default`, unless RAY_LAUNCHER_<name> sets
    another. Only the launcher's own tests set them (tests/scripts/test_ray_launcher.py runs it as a
    program and need not sleep through the production waits; one test keeps these defaults); no
    manifest of the program does. A value that is not a number >= 0 stops the launcher (exit 2)."""
    raw = os.environ.get(TUNED_PREFIX + name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        print(f"{USAGE}\nERROR: {TUNED_PREFIX}{name} must be a number of seconds >= 0, got {raw!r}",
              file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE)
    return value

# Progress lines while waiting are rate-limited so logs stay readable over a
# wait of several minutes.
PROGRESS_EVERY_SECONDS = 10.0


class ConfigError(Exception):
    """A missing or invalid environment variable or argument (exit 2)."""


class Launcher:
    def __init__(self, rank_label: str) -> None:
        self.prefix = f"[ray-launcher rank={rank_label}]"

    def say(self, message: str) -> None:
        # flush: stdout is a pipe in a container, and these lines must appear
        # in `kubectl logs` before a long `ray start` or the trainer's output.
        print(f"{self.prefix} {message}", flush=True)

    def error(self, message: str) -> None:
        print(f"{self.prefix} ERROR: {message}", file=sys.stderr, flush=True)


def flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
