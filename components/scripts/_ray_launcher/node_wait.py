"""The head's questions to its Ray, in a child process it can abandon: the wait for NUM_NODES
alive nodes before training (wait_for_nodes), and after a failed trainer whether a peer is gone
(check_peers), which also asks the Kubernetes API whether a node of the run went unhealthy
(node_health.py: a GPU fault leaves every Ray node alive).

The child is the entry script again (`python ray_launcher.py NODE_WAIT_FLAG <address> <num_nodes>
[<watch seconds>]`): it connects to the head's Ray, the only place `ray` is imported, and reports
on stdout in lines starting with NODE_WAIT_TAG; the parent enforces RAY_CONNECT_TIMEOUT_SECONDS and
its other deadline (RAY_NODE_WAIT_SECONDS, RAY_PEER_CHECK_SECONDS) and kills it at either.
"""

from __future__ import annotations

import logging
import math
import os
import select
import subprocess
import sys
import time
from typing import Optional

from .common import EXIT_NODES_TIMEOUT, EXIT_RAY_CONNECT_FAILED, PROGRESS_EVERY_SECONDS, Launcher, tuned
from .config import Config
from .node_health import NodeHealth
from .processes import CHILD_STOP_GRACE_SECONDS

# The child's command line and its protocol lines on stdout.
NODE_WAIT_FLAG = "--internal-node-wait"
NODE_WAIT_TAG = "@ray-launcher-node-wait@"
# The entry script beside this package: the ConfigMap mounts both under one directory (/scripts).
PROGRAM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ray_launcher.py")

# How often the head asks Ray how many nodes are alive. Each poll is one cheap
# GCS request, so a short interval only shortens the time to start training.
NODE_POLL_SECONDS = tuned("NODE_POLL_SECONDS", 2.0)
# After the head's trainer failed, how long past RAY_PEER_CHECK_SECONDS the head waits for the
# counting child's last report: one ray.nodes() call, a single GCS request.
PEER_REPLY_SECONDS = tuned("PEER_REPLY_SECONDS", 5.0)
# How often the head asks the Kubernetes API about its nodes while it watches: the agent writes its
# conditions every 15 s (node_health.py), so a shorter interval would only read the same state.
HEALTH_POLL_SECONDS = tuned("HEALTH_POLL_SECONDS", 10.0)


def report_nodes(address: str, num_nodes: int, watch_seconds: Optional[float] = None) -> int:
    """Child process of the head: connect to Ray, report alive nodes.

    Without `watch_seconds` (the wait before training) it reports until
    `num_nodes` are alive; with it (the check after a failed trainer,
    check_peers) until fewer than `num_nodes` are alive or `watch_seconds`
    have passed since connecting, at least once either way.

    Runs in its own process so the head can abandon it: `ray.init` on an
    address that does not answer retries on its own schedule, and a GCS that
    accepts connections but never replies could hold it (or ray.nodes())
    indefinitely. The parent enforces its deadlines and kills this process
    at any of them.
    """

    def report(kind: str, detail: str = "") -> None:
        # One line per message; Ray's own errors may span several.
        detail = " | ".join(part.strip() for part in detail.splitlines() if part.strip())
        print(f"{NODE_WAIT_TAG} {kind} {detail}".rstrip(), flush=True)

    try:
        # Imported here, not at module level: the launcher must import (and
        # its tests run) without Ray, and workers never need the package.
        import ray
    except ImportError as exc:
        report("error", f"cannot import ray in {sys.executable}: {exc}")
        return 1
    try:
        # The explicit address: never "auto", which would take an inherited
        # RAY_ADDRESS, the temp dir's last cluster or any GCS on this host.
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # Ray raises several unrelated types here.
        report("error", f"{type(exc).__name__}: {exc}")
        return 1
    try:
        report("connected")
        watch_end = None if watch_seconds is None else time.monotonic() + watch_seconds
        while True:
            # ray.nodes() also lists nodes that joined and died since.
            alive = sum(1 for node in ray.nodes() if node.get("Alive"))
            report("alive", str(alive))
            if watch_end is None and alive >= num_nodes:
                return 0
            if watch_end is not None and (alive < num_nodes or time.monotonic() >= watch_end):
                return 0
            time.sleep(NODE_POLL_SECONDS)
    except Exception as exc:
        report("error", f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        # Disconnect before the trainer starts, so it is this driver and not
        # the trainer's that Ray sees end.
        ray.shutdown()


class LineReader:
    """Lines from a pipe, each read bounded by a deadline."""

    def __init__(self, stream) -> None:
        self.fd = stream.fileno()
        self.buffer = b""
        self.closed = False

    def readline(self, timeout: float) -> Optional[str]:
        """A line, or None on timeout or end of file (then .closed is set)."""
        end = time.monotonic() + max(0.0, timeout)
        while b"\n" not in self.buffer and not self.closed:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if chunk:
                self.buffer += chunk
            else:
                self.closed = True
        if b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
        elif self.buffer:
            line, self.buffer = self.buffer, b""
        else:
            return None
        return line.decode("utf-8", errors="replace")


class Probe:
    """The child process of report_nodes and its protocol lines, each read bounded by a deadline."""

    def __init__(self, cfg: Config, watch_seconds: Optional[float] = None) -> None:
        command = [sys.executable, PROGRAM, NODE_WAIT_FLAG, cfg.ray_address, str(cfg.num_nodes)]
        if watch_seconds is not None:
            command.append(str(watch_seconds))
        # OSError (no interpreter) is the caller's to report.
        self.child = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.reader = LineReader(self.child.stdout)

    def message(self, deadline: float) -> Optional[tuple]:
        """The next (kind, detail) before `deadline` (time.monotonic()); None when the deadline
        passes first; ("exited", code) when the child ended without another message."""
        while True:
            line = self.reader.readline(deadline - time.monotonic())
            if line is None:
                if self.reader.closed:
                    return "exited", str(self.child.wait())
                if time.monotonic() >= deadline:
                    return None
                continue
            if not line.startswith(NODE_WAIT_TAG + " "):
                # Anything Ray printed to stdout: pass it on.
                print(line, flush=True)
                continue
            kind, _, detail = line[len(NODE_WAIT_TAG) + 1 :].partition(" ")
            return kind, detail

    def close(self, grace: float) -> None:
        """Wait up to `grace` s for the child to exit by itself (after ray.shutdown()); one that
        is stuck is abandoned: killed, not waited for longer."""
        try:
            self.child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        self.child.stdout.close()


def wait_for_nodes(log: Launcher, cfg: Config, until: Optional[float] = None) -> tuple:
    """Connect to the head's Ray and wait for NUM_NODES alive nodes.

    Returns (exit code, alive nodes, problem, deadline): 0 once all nodes are alive,
    EXIT_RAY_CONNECT_FAILED when the connection fails or does not succeed
    within RAY_CONNECT_TIMEOUT_SECONDS, EXIT_NODES_TIMEOUT when too few nodes
    are alive after RAY_NODE_WAIT_SECONDS more (or at `until`, a time.monotonic()
    deadline of an earlier wait); `deadline` is the one this wait kept to.
    """
    try:
        probe = Probe(cfg)
    except OSError as exc:
        return EXIT_RAY_CONNECT_FAILED, 0, f"cannot run {sys.executable}: {exc}"
    deadline = time.monotonic() + cfg.connect_timeout_seconds
    connected = False
    alive = 0
    last_report = None
    last_alive = -1
    try:
        while True:
            message = probe.message(deadline)
            if message is None:
                if not connected:
                    return (
                        EXIT_RAY_CONNECT_FAILED,
                        0,
                        f"no connection within {cfg.connect_timeout_seconds} s "
                        "(RAY_CONNECT_TIMEOUT_SECONDS)",
                        deadline,
                    )
                return EXIT_NODES_TIMEOUT, alive, None, deadline
            kind, detail = message
            if kind == "exited":
                return (
                    EXIT_RAY_CONNECT_FAILED,
                    alive,
                    f"the connection process exited with code {detail} "
                    "without a result",
                    deadline,
                )
            if kind == "error":
                return EXIT_RAY_CONNECT_FAILED, alive, detail, deadline
            if kind == "connected":
                connected = True
                deadline = time.monotonic() + cfg.node_wait_seconds if until is None else until
                log.say(
                    f"connected to Ray at {cfg.ray_address}; waiting up to "
                    f"{math.ceil(max(0.0, deadline - time.monotonic()))} s for {cfg.num_nodes} nodes"
                )
            elif kind == "alive":
                alive = int(detail)
                if alive >= cfg.num_nodes:
                    return 0, alive, None, deadline
                now = time.monotonic()
                if (
                    alive != last_alive
                    or last_report is None
                    or now - last_report >= PROGRESS_EVERY_SECONDS
                ):
                    log.say(
                        f"{alive} of {cfg.num_nodes} Ray nodes alive; waiting "
                        f"up to {math.ceil(max(0.0, deadline - now))} s more"
                    )
                    last_report, last_alive = now, alive
    finally:
        probe.close(CHILD_STOP_GRACE_SECONDS if alive >= cfg.num_nodes else 0.1)


def check_peers(log: Launcher, cfg: Config, health: Optional[NodeHealth] = None) -> tuple:
    """After the trainer failed: (how many Ray nodes are alive or None when Ray cannot tell,
    {node: why} of the run's unhealthy nodes or None when the API cannot tell).

    Watches for RAY_PEER_CHECK_SECONDS after connecting and returns at the
    first count below NUM_NODES, or the first unhealthy node of the run (asked
    every HEALTH_POLL_SECONDS: the agent's condition follows an XID within its
    15 s report interval): the trainer may fail on a lost peer (an NCCL
    error on a reset connection) before the GCS has declared that node dead,
    which can take up to DEFAULT_PEER_CHECK_SECONDS (config.py says why).
    Bounded whole: RAY_CONNECT_TIMEOUT_SECONDS to connect, then
    RAY_PEER_CHECK_SECONDS plus PEER_REPLY_SECONDS for the counts, plus 1 s for
    the child to exit; a Ray that hangs in ray.init() or ray.nodes() is
    abandoned at either deadline and the count is None.
    """
    nodes = f" and the Kubernetes API about {health.describe()}" if health is not None and health.enabled else ""
    log.say(
        f"asking Ray at {cfg.ray_address} how many of the {cfg.num_nodes} nodes "
        f"are alive{nodes} (for up to {cfg.peer_check_seconds} s)"
    )
    unhealthy: Optional[dict] = None
    next_health = time.monotonic()

    def ask_health() -> bool:
        """True once a node of the run is unhealthy."""
        nonlocal unhealthy, next_health
        if health is None or not health.enabled or time.monotonic() < next_health:
            return False
        next_health = time.monotonic() + HEALTH_POLL_SECONDS
        found = health.check()
        if found is not None:
            unhealthy = found
        return bool(found)

    if ask_health():
        return None, unhealthy
    try:
        probe = Probe(cfg, watch_seconds=cfg.peer_check_seconds)
    except OSError as exc:
        log.error(f"cannot count the Ray nodes: cannot run {sys.executable}: {exc}")
        return None, unhealthy
    deadline = time.monotonic() + cfg.connect_timeout_seconds
    alive = None
    problem = f"no connection within {cfg.connect_timeout_seconds} s (RAY_CONNECT_TIMEOUT_SECONDS)"
    try:
        while True:
            message = probe.message(deadline)
            if message is None:
                break
            kind, detail = message
            if kind == "exited":
                problem = f"the counting process exited with code {detail} without a result"
                break
            if kind == "error":
                problem = detail
                break
            if kind == "connected":
                deadline = time.monotonic() + cfg.peer_check_seconds + PEER_REPLY_SECONDS
                problem = (
                    f"no node count within {cfg.peer_check_seconds + PEER_REPLY_SECONDS:g} s "
                    "of connecting"
                )
            elif kind == "alive":
                alive = int(detail)
                if alive < cfg.num_nodes or ask_health():
                    break
    finally:
        # No trainer follows this driver: a polite ray.shutdown() gets a second, not the grace.
        probe.close(1.0 if alive is not None else 0.1)
    if alive is None:
        log.error(f"cannot count the Ray nodes at {cfg.ray_address}: {problem}")
        # Ray could not tell: the API still can (its own bound).
        next_health = 0.0
        ask_health()
    return alive, unhealthy
