"""Rank 0: start the Ray head, wait until NUM_NODES nodes are alive, run the training command as a
child, and when it fails tell a lost peer (a disruption, exit 9) from the trainer's own failure."""

from __future__ import annotations

import shlex
import signal
import subprocess
from typing import Optional, Sequence

from .auth import RAY_ADDRESS_ENV
from .common import (EXIT_HEAD_LOST, EXIT_NODES_TIMEOUT, EXIT_NOT_FOUND, EXIT_PEER_LOST, EXIT_RAY_CONNECT_FAILED,
                     EXIT_RAY_START_FAILED, EXIT_RAY_START_TIMEOUT, EXIT_USAGE, USAGE, Launcher,
                     flush_std_streams)
from .config import Config
from .node_wait import check_peers, wait_for_nodes
from .processes import exit_on_signal
from .start import head_start_command, ray_on_path, ray_stop
from .training import run_training


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
    code, alive, problem = wait_for_nodes(log, cfg)
    if code == EXIT_RAY_CONNECT_FAILED:
        log.error(
            f"cannot connect to this run's Ray head at {cfg.ray_address}: "
            f"{problem}; giving up"
        )
        ray_stop(log)
        return EXIT_RAY_CONNECT_FAILED
    if code != 0:
        log.error(
            f"only {alive} of {cfg.num_nodes} Ray nodes joined within "
            f"{cfg.node_wait_seconds} s; check the worker pods' logs "
            f"(they must reach this pod on port {cfg.port}) and that all "
            f"{cfg.num_nodes} pods were scheduled"
        )
        ray_stop(log)
        return EXIT_NODES_TIMEOUT
    log.say(
        f"{alive} of {cfg.num_nodes} Ray nodes alive; starting training "
        f"with {RAY_ADDRESS_ENV}={cfg.ray_address}: {shlex.join(command)}"
    )
    flush_std_streams()
    finished = run_training(log, command, cfg.done_marker)
    if finished.code == 0 or finished.stopped_by is not None:
        # Stopped by the kubelet (a drain, a deletion) or a terminal: the code is the trainer's,
        # and whatever stopped the pod is the pod failure policy's to judge, not Ray's.
        return finished.code
    # Ray is asked now, with no trainer left to pass signals to: SIGTERM ends the check at once.
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return failed_training_code(log, cfg, finished.code, check_peers(log, cfg))


def failed_training_code(log: Launcher, cfg: Config, code: int, alive: Optional[int]) -> int:
    """The head's exit code after the trainer exited with `code` (non-zero, not stopped) while
    `alive` of NUM_NODES Ray nodes were alive (None: Ray could not tell).

    Fewer nodes than NUM_NODES: a worker's node or pod was lost and the trainer failed on the lost
    peer, a disruption like a lost head; EXIT_PEER_LOST lets the pod failure policy ignore it, so
    the retry budget (workloads.retries) is kept for the trainer's own failures.
    """
    if alive is not None and alive < cfg.num_nodes:
        log.error(
            f"the training command exited with code {code} and only {alive} of {cfg.num_nodes} "
            f"Ray nodes are alive: a peer was lost; exiting {EXIT_PEER_LOST} (peer lost, a "
            "disruption)"
        )
        return EXIT_PEER_LOST
    if code in (EXIT_HEAD_LOST, EXIT_PEER_LOST):
        # The pod failure policy of a Ray run ignores both (components/workloads/runs.py): a
        # trainer's own 6 or 9 passed through would be retried without ever counting against the
        # retry budget. The other codes the launcher reserves (2-5, 7, 8) stay the trainer's, as
        # ray_launcher.py's docstring says: a trainer should not use them.
        why = f"{alive} of {cfg.num_nodes} Ray nodes are alive" if alive is not None else (
            "Ray could not tell whether a peer was lost")
        log.say(
            f"the training command exited with code {code}, which the launcher keeps for a lost "
            f"peer or head, and {why}; exiting 1"
        )
        return 1
    if alive is not None:
        log.say(f"{alive} of {cfg.num_nodes} Ray nodes are alive: the training command failed on its own")
    return code
