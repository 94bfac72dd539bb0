"""The run-done marker (RUN_DONE_MARKER): a pod whose run already finished idles instead of training
again; the head writes the marker once the training command succeeded."""

from __future__ import annotations

import datetime
import os
import shlex
import signal
import subprocess
from typing import Sequence

from .common import EXIT_NOT_FOUND, Launcher
from .processes import ForwardSignals


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


def run_and_mark(log: Launcher, command: Sequence[str], marker: str) -> int:
    """Run the trainer as a child; record success in the marker file."""
    # We stay in between Kubernetes and the trainer here, so pass on the
    # signals the kubelet (SIGTERM) or a terminal (SIGINT) sends us.
    signals = ForwardSignals()
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        log.error(f"cannot run {command[0]!r}: {exc}")
        return EXIT_NOT_FOUND
    signals.add(child)
    returncode = child.wait()
    code = 128 - returncode if returncode < 0 else returncode
    if code == 0 and signals.received:
        # A trainer that checkpoints and exits 0 on SIGTERM has been stopped,
        # not finished: marking it done would skip the rest of the run.
        log.say(
            "training command exited 0 after "
            f"{signal.Signals(signals.received[0]).name}; not writing {marker}"
        )
    elif code == 0:
        try:
            write_marker(marker, command)
        except OSError as exc:
            log.error(f"training succeeded but writing {marker} failed: {exc}")
            return 1
        log.say(f"training command succeeded; wrote {marker}")
    else:
        log.say(f"training command exited with code {code}")
    return code
