"""The head's training command, run as its child: signals passed on, the exit code reported with
whether this pod was being stopped, and the run-done marker written on success when there is one."""

from __future__ import annotations

import signal
import subprocess
from typing import NamedTuple, Optional, Sequence

from .common import EXIT_NOT_FOUND, Launcher
from .marker import write_marker
from .processes import ForwardSignals


class Finished(NamedTuple):
    # The trainer's exit code (128+N when signal N killed it), or the launcher's when it could not
    # start the trainer or write the marker.
    code: int
    # The first SIGTERM/SIGINT this pod received while the trainer ran, or None.
    stopped_by: Optional[int]


def run_training(log: Launcher, command: Sequence[str], marker: Optional[str] = None) -> Finished:
    """Run the trainer as a child; with `marker`, record its success in that file.

    A child and not this process's replacement (exec): only after the trainer exits can the head
    tell a lost peer from the trainer's own failure (head.py), and write the marker.
    """
    # We stay in between Kubernetes and the trainer, so pass on the signals the kubelet (SIGTERM)
    # or a terminal (SIGINT) sends us.
    signals = ForwardSignals()
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        log.error(f"cannot run {command[0]!r}: {exc}")
        return Finished(EXIT_NOT_FOUND, signals.received[0] if signals.received else None)
    signals.add(child)
    returncode = child.wait()
    code = 128 - returncode if returncode < 0 else returncode
    stopped_by = signals.received[0] if signals.received else None
    if stopped_by is not None:
        # A trainer that checkpoints and exits 0 on SIGTERM has been stopped, not finished:
        # marking it done would skip the rest of the run.
        log.say(
            f"training command exited with code {code} after {signal.Signals(stopped_by).name}"
            + (f"; not writing {marker}" if marker is not None and code == 0 else "")
        )
    elif code == 0 and marker is not None:
        try:
            write_marker(marker, command)
        except OSError as exc:
            log.error(f"training succeeded but writing {marker} failed: {exc}")
            return Finished(1, None)
        log.say(f"training command succeeded; wrote {marker}")
    elif code == 0:
        log.say("training command succeeded")
    else:
        log.say(f"training command exited with code {code}")
    return Finished(code, stopped_by)
