"""Rank 0: start the Ray head, wait until NUM_NODES nodes are alive and their Kubernetes nodes
healthy, run the training command as a child, and when it fails tell a lost peer or an unhealthy
node (a disruption, exit 9) from the trainer's own failure; a stop is never a success."""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

from .auth import RAY_ADDRESS_ENV
from .common import (EXIT_HEAD_LOST, EXIT_HEAD_UNREACHABLE, EXIT_NO_PROGRESS, EXIT_NODES_TIMEOUT, EXIT_NOT_FOUND, EXIT_PEER_LOST,
                     EXIT_RAY_CONNECT_FAILED, EXIT_RAY_START_FAILED, EXIT_RAY_START_TIMEOUT, EXIT_USAGE,
                     USAGE, Launcher, flush_std_streams)
from .config import Config
from .node_health import NodeHealth, summary
from .node_wait import HEALTH_POLL_SECONDS, check_peers, wait_for_nodes
from .processes import exit_on_signal
from .start import head_start_command, ray_on_path, ray_stop
from .training import run_training

# The resume wrapper beside the launcher (mounted with it when the run has a resume mapping): the
# head records a wait that ran out in its start ledger (`--record-stall`), bounded like a restart
# without progress (workloads.infrastructureRestarts).
# The launcher's codes a pod failure policy may ignore: never passed on from a trainer that failed.
IGNORED_LAUNCHER_CODES = (EXIT_NODES_TIMEOUT, EXIT_HEAD_UNREACHABLE, EXIT_HEAD_LOST, EXIT_PEER_LOST)
WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resume_wrapper.py")
LEDGER_ENV = "RESUME_LEDGER"
STALL_RECORD_TIMEOUT_SECONDS = 60


def run_head(log: Launcher, cfg: Config, command: Sequence[str]) -> int:
    if not command:
        log.error(f"no training command given after '--'\n{USAGE}")
        return EXIT_USAGE
    if not ray_on_path(log):
        return EXIT_NOT_FOUND
    start = head_start_command(cfg)
    log.say(f"starting the Ray head: {shlex.join(start)}")
    flush_std_streams()
    try:
        # subprocess.run kills `ray start` at the timeout (and on SIGTERM,
        # which raises SystemExit here); ray_stop then removes whatever
        # daemons it had already started.
        result = subprocess.run(start, check=False, timeout=cfg.start_timeout_seconds)
    except subprocess.TimeoutExpired:
        log.error(
            f"`ray start --head` did not finish within "
            f"{cfg.start_timeout_seconds} s (RAY_START_TIMEOUT_SECONDS); "
            "giving up"
        )
        ray_stop(log)
        return EXIT_RAY_START_TIMEOUT
    except OSError as exc:
        log.error(f"cannot run the ray CLI (is it on PATH?): {exc}")
        return EXIT_NOT_FOUND
    if result.returncode != 0:
        log.error(f"`ray start --head` failed with exit code {result.returncode}")
        return EXIT_RAY_START_FAILED
    log.say(
        f"Ray head up; connecting to it at {cfg.ray_address} (up to "
        f"{cfg.connect_timeout_seconds} s)"
    )
    health = NodeHealth(log, os.environ)
    code, alive, problem = wait_for_whole_run(log, cfg, health)
    if code == EXIT_RAY_CONNECT_FAILED:
        log.error(
            f"cannot connect to this run's Ray head at {cfg.ray_address}: "
            f"{problem}; giving up"
        )
        ray_stop(log)
        return EXIT_RAY_CONNECT_FAILED
    if code != 0:
        if problem:
            log.error(f"{alive} of {cfg.num_nodes} Ray nodes alive, but within {cfg.node_wait_seconds} s "
                      f"(RAY_NODE_WAIT_SECONDS) a node of the run stayed unhealthy: {problem}")
        else:
            log.error(
                f"only {alive} of {cfg.num_nodes} Ray nodes joined within "
                f"{cfg.node_wait_seconds} s; check the worker pods' logs "
                f"(they must reach this pod on port {cfg.port}) and that all "
                f"{cfg.num_nodes} pods were scheduled"
            )
        ray_stop(log)
        return record_stall(log, f"nodes: {alive} of {cfg.num_nodes} alive within {cfg.node_wait_seconds} s"
                                 + (", a node unhealthy" if problem else ""))
    log.say(
        f"{alive} of {cfg.num_nodes} Ray nodes alive; starting training "
        f"with {RAY_ADDRESS_ENV}={cfg.ray_address}: {shlex.join(command)}"
    )
    flush_std_streams()
    finished = run_training(log, command, cfg.done_marker)
    if finished.stopped_by is not None:
        # Stopped by the kubelet (a drain, a deletion, the node's graceful shutdown) or a terminal:
        # the code is the trainer's, and whatever stopped the pod is the pod failure policy's to
        # judge, not Ray's. Never a success: a trainer that checkpoints and exits 0 on SIGTERM has
        # not finished the run, and the Job's success policy (index 0 succeeded) would complete it.
        if finished.code == 0:
            name = signal.Signals(finished.stopped_by).name
            log.say(f"the training command exited 0 after {name}: the run was stopped, not finished; "
                    f"exiting {128 + finished.stopped_by}")
            return 128 + finished.stopped_by
        return finished.code
    if finished.code == 0:
        return 0
    # Ray and the API are asked now, with no trainer left to pass signals to: SIGTERM ends the
    # check at once.
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    alive, unhealthy = check_peers(log, cfg, health)
    return failed_training_code(log, cfg, finished.code, alive, unhealthy)


def wait_for_whole_run(log: Launcher, cfg: Config, health: NodeHealth) -> tuple:
    """(exit code, alive, problem) once NUM_NODES Ray nodes are alive and none of the run's
    Kubernetes nodes is unhealthy, within RAY_NODE_WAIT_SECONDS (after connecting).

    A node the API calls unhealthy (a GPU fault the agent reported, a node NotReady or about to be
    repaired) is waited for rather than trained on: the trainer would fail on it, and each start
    counts in the start ledger. The repair takes the run's pod on that node down (its graceful
    shutdown on a reboot, the pod garbage collector on a replacement); the Job recreates it, it
    rejoins, and the wait for NUM_NODES starts again within what is left. Without the API's
    answer (no token, refused), Ray's count alone decides, as it always did.
    """
    end: Optional[float] = None
    told = ""
    while True:
        code, alive, problem, end = wait_for_nodes(log, cfg, end)
        if code != 0:
            return code, alive, problem
        unhealthy = health.check()
        if not unhealthy:
            return 0, alive, None
        while unhealthy and time.monotonic() < end:
            now = summary(unhealthy)
            if now != told:
                log.say(f"{alive} of {cfg.num_nodes} Ray nodes alive, but a node of the run is unhealthy "
                        f"({now}); waiting up to {math.ceil(end - time.monotonic())} s more for its repair "
                        "before training (a trainer started on it would fail)")
                told = now
            time.sleep(min(HEALTH_POLL_SECONDS, max(0.0, end - time.monotonic())))
            unhealthy = health.check()
        if unhealthy:
            return EXIT_NODES_TIMEOUT, alive, summary(unhealthy)
        log.say(f"the run's nodes are healthy again; waiting for {cfg.num_nodes} Ray nodes "
                f"(up to {math.ceil(max(0.0, end - time.monotonic()))} s more)")


def record_stall(log: Launcher, why: str) -> int:
    """EXIT_NODES_TIMEOUT, recorded in the run's start ledger when it has one; EXIT_NO_PROGRESS
    when that attempt is over the ledger's bound (the resume wrapper says why). The pod failure
    policy ignores EXIT_NODES_TIMEOUT only where this record bounds it (a resume mapping)."""
    if not os.environ.get(LEDGER_ENV) or not os.path.isfile(WRAPPER):
        return EXIT_NODES_TIMEOUT
    flush_std_streams()
    try:
        done = subprocess.run([sys.executable, WRAPPER, "--record-stall", why], check=False,
                              timeout=STALL_RECORD_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.error(f"could not record this attempt in the start ledger ({exc})")
        return EXIT_NODES_TIMEOUT
    if done.returncode == EXIT_NO_PROGRESS:
        log.error(f"the start ledger refuses another attempt; exiting {EXIT_NO_PROGRESS} (no progress)")
        return EXIT_NO_PROGRESS
    return EXIT_NODES_TIMEOUT


def failed_training_code(log: Launcher, cfg: Config, code: int, alive: Optional[int],
                         unhealthy: Optional[dict] = None) -> int:
    """The head's exit code after the trainer exited with `code` (non-zero, not stopped) while
    `alive` of NUM_NODES Ray nodes were alive (None: Ray could not tell) and `unhealthy` of the
    run's Kubernetes nodes were going away or to be repaired (node_health.py; None: the API could
    not tell).

    Fewer nodes than NUM_NODES: a worker's node or pod was lost and the trainer failed on the lost
    peer, a disruption like a lost head. A node of the run unhealthy (a GPU fault the node
    monitoring agent reported, which leaves every Ray node alive; a node NotReady, cordoned or
    tainted NoExecute): the trainer failed on its node, which repair reboots or replaces. Either
    way EXIT_PEER_LOST lets the pod failure policy ignore it, so the retry budget
    (workloads.retries) is kept for the trainer's own failures.
    """
    if alive is not None and alive < cfg.num_nodes:
        log.error(
            f"the training command exited with code {code} and only {alive} of {cfg.num_nodes} "
            f"Ray nodes are alive: a peer was lost; exiting {EXIT_PEER_LOST} (peer lost, a "
            "disruption)"
        )
        return EXIT_PEER_LOST
    if unhealthy:
        log.error(
            f"the training command exited with code {code} while a node of the run is unhealthy "
            f"({summary(unhealthy)}): the node failed, not the trainer; exiting {EXIT_PEER_LOST} "
            "(a disruption)"
        )
        return EXIT_PEER_LOST
    if code in IGNORED_LAUNCHER_CODES:
        # The pod failure policy of a Ray run ignores these (components/workloads/runs.py
        # ray_ignored_exit_codes: 6 and 9, and 3 and 4 with a resume mapping): a trainer's own code
        # passed through would be retried without ever counting against the retry budget. The other
        # codes the launcher reserves (2, 5, 7, 8) stay the trainer's, as ray_launcher.py's docstring
        # says: a trainer should not use them.
        why = f"{alive} of {cfg.num_nodes} Ray nodes are alive" if alive is not None else (
            "Ray could not tell whether a peer was lost")
        log.say(
            f"the training command exited with code {code}, which the launcher keeps for a lost "
            f"peer or head or a wait that ran out, and {why}; exiting 1"
        )
        return 1
    if alive is not None:
        log.say(f"{alive} of {cfg.num_nodes} Ray nodes are alive: the training command failed on its own")
    return code
