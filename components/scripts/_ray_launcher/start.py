"""The `ray start` command lines of the head and the workers, and the ray CLI around them."""

from __future__ import annotations

import os
import shutil
import subprocess

from .common import Launcher
from .config import Config

# What `ray start` prints once its node is up (scripts.py in Ray 2.60, both
# for the head and for a worker; a worker with --block then blocks). A worker
# counts as joined only after this line: a test against the pinned Ray fails
# should a new version reword it.
RAY_STARTED_MARKER = "Ray runtime started."
# What a worker's raylet logs (rpc_client.h) before it exits because the GCS
# went away; `ray start --block` prints the raylet log's tail on its way out.
GCS_LOST_MARKER = "Failed to connect to GCS"

# Appended after RAY_START_EXTRA_ARGS so they win (click keeps the last value
# of a repeated option). The dashboard serves the Jobs API, which runs
# arbitrary code, and Ray has no authentication unless RAY_AUTH_TOKEN is set:
# it must never listen on the pod IP, where anything in the cluster network
# could reach it.
# It is disabled (training does not need it). Ray 2.60 still starts the
# dashboard process in a minimal mode with its HTTP server off; binding it to
# 127.0.0.1 keeps it loopback-only should any version serve HTTP regardless,
# while `kubectl port-forward` (which connects to the pod's loopback) still
# reaches it for debugging. The Ray Client server (port 10001 on the head)
# cannot be disabled or bound to loopback through `ray start` when grpcio is
# installed: restricting who reaches the pods (a NetworkPolicy) is what keeps
# it private, and with RAY_AUTH_TOKEN its gRPC server also requires the token
# (ray/_private/grpc_utils.py, create_grpc_server_with_interceptors).
HEAD_SAFETY_ARGS = (
    "--include-dashboard=false",
    "--dashboard-host=127.0.0.1",
)
# RAY_DASHBOARD=loopback: the dashboard on, still bound to 127.0.0.1 only.
HEAD_LOOPBACK_DASHBOARD_ARGS = (
    "--include-dashboard=true",
    "--dashboard-host=127.0.0.1",
)
# Ray's usage statistics are sent from the head to an Internet endpoint; a
# training cluster has no reason to phone home, and egress may be blocked.
NO_TELEMETRY_ARGS = ("--disable-usage-stats",)


def head_start_command(cfg: Config) -> list:
    return [
        "ray",
        "start",
        "--head",
        f"--port={cfg.port}",
        *cfg.extra_start_args,
        *(HEAD_LOOPBACK_DASHBOARD_ARGS if cfg.dashboard == "loopback" else HEAD_SAFETY_ARGS),
        *NO_TELEMETRY_ARGS,
    ]


def worker_start_command(cfg: Config) -> list:
    return [
        "ray",
        "start",
        f"--address={cfg.ray_address}",
        "--block",
        *cfg.extra_start_args,
        *NO_TELEMETRY_ARGS,
    ]


def ray_on_path(log: Launcher) -> bool:
    """`ray` must resolve through PATH; say which PATH was searched when it does not."""
    if shutil.which("ray") is not None:
        return True
    log.error(
        f"the ray CLI is not on PATH={os.environ.get('PATH', '')}: put the bin directory of the "
        "image's Python environment with Ray first on PATH (e.g. /opt/venv/<name>/bin)"
    )
    return False


def ray_stop(log: Launcher) -> None:
    # --force (SIGKILL): no work has run yet, so there is nothing to drain,
    # and a graceful stop only delays the failing pod's restart by seconds.
    log.say("stopping the local Ray processes (ray stop --force)")
    try:
        stopper = subprocess.Popen(["ray", "stop", "--force"])
    except OSError as exc:
        log.error(f"ray stop failed: {exc}")
        return
    # In a container this launcher is PID 1, so the daemons `ray start` left
    # behind are our children now. `ray stop` waits for them to disappear,
    # which a killed process only does once its parent reaps it: reap every
    # child, not just `ray stop`, or it waits out its whole grace period.
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == stopper.pid:
            stopper.returncode = os.waitstatus_to_exitcode(status)
            break

