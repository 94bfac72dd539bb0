"""Every rank but 0: wait until the head's port answers, join it with `ray start --block`, and when
that ends tell a lost head (a disruption, exit 6) from a failure of this node."""

from __future__ import annotations

import math
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from .common import (EXIT_HEAD_LOST, EXIT_HEAD_UNREACHABLE, EXIT_NOT_FOUND, EXIT_RAY_START_FAILED,
                     EXIT_RAY_START_TIMEOUT, PROGRESS_EVERY_SECONDS, Launcher, flush_std_streams, tuned)
from .config import Config, host_port
from .processes import ForwardSignals, relay, stop_child, wait_reaping
from .start import GCS_LOST_MARKER, RAY_STARTED_MARKER, ray_on_path, worker_start_command

# Pause between a worker's attempts to reach the head. The head's DNS record
# appears only once its pod exists and the headless Service publishes it, and
# its GCS port opens only once `ray start --head` is up, so early failures are
# the normal case.
JOIN_RETRY_SECONDS = tuned("JOIN_RETRY_SECONDS", 1.0)
# After a joined worker's `ray start --block` fails, how long the launcher
# keeps trying the head's port before calling the head lost. Ray itself has
# already waited (gcs_rpc_server_reconnect_timeout_s, 60 s by default) before
# its raylet gave up on the GCS, so this only needs to outlast a blip.
HEAD_PROBE_SECONDS = tuned("HEAD_PROBE_SECONDS", 3.0)


def wait_for_head(log: Launcher, cfg: Config) -> bool:
    """Retry until the head's GCS port accepts a TCP connection."""
    target = host_port(cfg.head_host, cfg.port)
    deadline = time.monotonic() + cfg.join_deadline_seconds
    last_report = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            # Resolving inside the loop matters: the head's DNS record (a
            # headless Service entry) only exists once its pod is running.
            with socket.create_connection(
                (cfg.head_host, cfg.port), timeout=min(5.0, max(0.5, remaining))
            ):
                return True
        except OSError as exc:
            reason = str(exc)
            if isinstance(exc, socket.gaierror):
                reason = f"DNS lookup failed: {exc}"
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            log.error(
                f"the Ray head {target} was not reachable within "
                f"{cfg.join_deadline_seconds} s (last error: {reason}); check "
                "that the rank-0 pod is running and RAY_HEAD_HOST/RAY_PORT "
                "are right"
            )
            return False
        if last_report is None or now - last_report >= PROGRESS_EVERY_SECONDS:
            log.say(
                f"head {target} not reachable yet ({reason}); retrying for "
                f"up to {math.ceil(remaining)} s more"
            )
            last_report = now
        time.sleep(min(JOIN_RETRY_SECONDS, remaining))


def head_reachable(cfg: Config, budget: float = HEAD_PROBE_SECONDS) -> bool:
    """Whether the head's GCS port accepts a connection within `budget` s."""
    deadline = time.monotonic() + budget
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection(
                (cfg.head_host, cfg.port), timeout=min(2.0, max(0.2, remaining))
            ):
                return True
        except OSError:
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(0.5, remaining))


def run_worker(log: Launcher, cfg: Config) -> int:
    if not ray_on_path(log):
        return EXIT_NOT_FOUND
    if not wait_for_head(log, cfg):
        return EXIT_HEAD_UNREACHABLE
    start = worker_start_command(cfg)
    log.say(f"head reachable; joining: {shlex.join(start)}")
    # `ray start --block` runs as our child, not in our place: its exit code
    # alone cannot tell a lost head (a disruption) from a failure of this
    # node, and joining must be bounded. Signals from the kubelet (SIGTERM)
    # or a terminal (SIGINT) are passed on; Ray drains the node on SIGTERM.
    signals = ForwardSignals()
    flush_std_streams()
    try:
        child = subprocess.Popen(
            start, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:
        log.error(f"cannot run the ray CLI (is it on PATH?): {exc}")
        return EXIT_NOT_FOUND
    signals.add(child)
    joined = threading.Event()
    gcs_lost = threading.Event()
    markers = {RAY_STARTED_MARKER: joined, GCS_LOST_MARKER: gcs_lost}
    relays = [
        threading.Thread(target=relay, args=(child.stdout, sys.stdout, markers), daemon=True),
        threading.Thread(target=relay, args=(child.stderr, sys.stderr, markers), daemon=True),
    ]
    for thread in relays:
        thread.start()

    def drain_output() -> None:
        # Processes that inherited the pipes may keep them open: bounded.
        for thread in relays:
            thread.join(timeout=2.0)

    deadline = time.monotonic() + cfg.start_timeout_seconds
    while not joined.is_set() and child.poll() is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log.error(
                f"`ray start` did not join the Ray cluster at {cfg.ray_address} "
                f"within {cfg.start_timeout_seconds} s "
                "(RAY_START_TIMEOUT_SECONDS); stopping it and giving up"
            )
            stop_child(child)
            drain_output()
            return EXIT_RAY_START_TIMEOUT
        joined.wait(min(0.2, remaining))
    if child.returncode is not None:
        # Exited before we saw it join; its last lines may still be in flight.
        drain_output()
    if not joined.is_set():
        code = child.returncode
        if signals.received:
            # A stop is never a success (head.py says why; here: a succeeded index of the Indexed
            # Job is never recreated, and the next Ray cluster would lack this worker).
            return 128 + signals.received[0]
        log.error(
            f"`ray start` exited with code {code} before joining the Ray "
            f"cluster at {cfg.ray_address}; see its output above (a token "
            "mismatch shows as InvalidAuthToken)"
        )
        return EXIT_RAY_START_FAILED
    log.say(f"joined the Ray cluster at {cfg.ray_address}")
    code = wait_reaping(child)
    code = 128 - code if code < 0 else code
    drain_output()
    if signals.received:
        name = signal.Signals(signals.received[0]).name
        log.say(f"`ray start --block` exited with code {code} after {name}")
        # Ray exits 1 after a SIGTERM it handled; report the signal instead, and never a success.
        return 128 + signals.received[0]
    if code == 0:
        return 0
    if gcs_lost.is_set():
        reason = "Ray reported it lost the GCS"
    elif not head_reachable(cfg):
        reason = f"its port no longer answers (tried for {HEAD_PROBE_SECONDS:g} s)"
    else:
        log.say(
            f"`ray start --block` exited with code {code} while the head "
            f"{cfg.ray_address} is still reachable"
        )
        return code
    log.error(
        f"lost the Ray head {cfg.ray_address}: `ray start --block` exited with "
        f"code {code} and {reason}; exiting {EXIT_HEAD_LOST} (head lost, a "
        "disruption)"
    )
    return EXIT_HEAD_LOST
