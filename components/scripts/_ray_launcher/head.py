"""Rank 0: start the Ray head, wait until NUM_NODES nodes are alive, then run the training command
(in this process's place, or as a child when the run has a done marker)."""

from __future__ import annotations

import os
import shlex
import subprocess
from typing import Sequence

from .auth import RAY_ADDRESS_ENV
from .common import (EXIT_NODES_TIMEOUT, EXIT_NOT_FOUND, EXIT_RAY_CONNECT_FAILED, EXIT_RAY_START_FAILED,
                     EXIT_RAY_START_TIMEOUT, EXIT_USAGE, USAGE, Launcher, flush_std_streams)
from .config import Config
from .marker import run_and_mark
from .node_wait import wait_for_nodes
from .processes import reset_signals_for_exec
from .start import head_start_command, ray_on_path, ray_stop


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
    if cfg.done_marker is not None:
        return run_and_mark(log, command, cfg.done_marker)
    # Replace this process: the trainer then receives the kubelet's SIGTERM
    # directly and its exit code becomes the container's, with no wrapper in
    # between to get either wrong.
    flush_std_streams()
    reset_signals_for_exec()
    try:
        os.execvp(command[0], list(command))
    except OSError as exc:
        log.error(f"cannot run {command[0]!r}: {exc}")
        return EXIT_NOT_FOUND
