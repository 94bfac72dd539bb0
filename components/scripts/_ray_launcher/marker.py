"""The run-done marker (RUN_DONE_MARKER): a pod whose run already finished idles instead of training
again; the head writes the marker once the training command succeeded (training.run_training)."""

from __future__ import annotations

import datetime
import os
import shlex
import signal
from typing import Sequence

from .common import Launcher


def idle_until_stopped(log: Launcher, marker: str) -> int:
    """The run already finished: stay up doing nothing until asked to stop.

    A StatefulSet restarts containers with policy Always, so exiting here
    would only start a restart loop (and CrashLoopBackOff noise); idling keeps
    the finished pods quiet until the run is deleted.
    """
    # Block first, then wait: a signal arriving in between stays pending
    # instead of being lost.
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        with open(marker, encoding="utf-8", errors="replace") as handle:
            content = handle.read(2000)
    except OSError as exc:
        content = f"<unreadable: {exc}>"
    content = " | ".join(line.strip() for line in content.splitlines() if line.strip())
    log.say(
        f"run already completed (marker {marker}: {content or '<empty>'}); "
        "not starting Ray or training; idling until SIGTERM/SIGINT"
    )
    received = signal.sigwait(signals)
    log.say(f"received {signal.Signals(received).name}; exiting")
    return 0


def write_marker(marker: str, command: Sequence[str]) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    parent = os.path.dirname(os.path.abspath(marker))
    os.makedirs(parent, exist_ok=True)
    # Write then rename, so a crash mid-write never leaves a truncated marker
    # that would still stop the next start from training.
    tmp = f"{marker}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(f"completed_at: {stamp}\ncommand: {shlex.join(command)}\n")
    os.replace(tmp, marker)
