"""The launcher's duties as PID 1 of its container: signals, passing them on to the children it
waits for, stopping and reaping children."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Mapping

# How long a child (`ray start`, the node-wait process) gets to exit after
# SIGTERM before it is killed.
CHILD_STOP_GRACE_SECONDS = 10.0


def exit_on_signal(signum, _frame) -> None:
    # In a container this launcher is PID 1, and the kernel does not deliver
    # a signal whose disposition is the default to PID 1. Without a handler,
    # SIGTERM during `ray start` or the node wait would be ignored and the pod
    # would linger for the whole termination grace period.
    raise SystemExit(128 + signum)


class ForwardSignals:
    """Pass the signals the kubelet (SIGTERM) or a terminal (SIGINT) sends us on to the children we
    wait for, while we stay in between.

    Create it before starting the child, so that no signal falls in a gap; `add` sends a signal that
    arrived while the child was being created. `received` lists the signals in arrival order.
    """

    def __init__(self) -> None:
        self.received: list = []
        self._children: list = []
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)

    def _forward(self, signum, _frame) -> None:
        self.received.append(signum)
        for child in self._children:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    def add(self, child: subprocess.Popen) -> None:
        self._children.append(child)
        if self.received:
            child.send_signal(self.received[-1])


def stop_child(proc: subprocess.Popen, grace: float = CHILD_STOP_GRACE_SECONDS) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; always reaps."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def wait_reaping(proc: subprocess.Popen) -> int:
    """Wait for proc, reaping any other child on the way.

    In a container this launcher is PID 1, so Ray processes orphaned by a
    dying raylet become its children; reap them instead of leaving zombies.
    """
    while proc.returncode is None:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            proc.wait()
            break
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def relay(source, target, markers: Mapping[str, threading.Event]) -> None:
    """Copy a child's output to ours line by line, noting marker strings."""
    out = getattr(target, "buffer", target)
    for raw in iter(source.readline, b""):
        try:
            out.write(raw)
            out.flush()
        except (OSError, ValueError):
            pass
        text = raw.decode("utf-8", errors="replace")
        for marker, seen in markers.items():
            if marker in text:
                seen.set()
    source.close()
