#!/usr/bin/env python3
"""Start one node of a multi-node Ray cluster in a Kubernetes pod, then train.

Usage (the container command; the ConfigMap mounts this file with mode 0755):

    python3 /scripts/ray_launcher.py -- <training command> [args...]

Every pod of a run executes the same command line. The pod's rank decides its
role: rank 0 is the Ray head and runs the training command once all nodes have
joined; every other rank becomes a Ray worker node and ignores the command.

Environment (set by the Pulumi program):

    NUM_NODES                  required, int >= 1: nodes in the Ray cluster.
    JOB_COMPLETION_INDEX       rank in an Indexed Job. When unset, the rank is
                               the ordinal suffix of HOSTNAME (StatefulSet pod
                               "training-3" -> 3).
    RAY_HEAD_HOST              DNS name of the rank-0 pod, e.g.
                               run-0.run-svc.ns.svc.cluster.local. Required on
                               every rank: workers join it, and the head
                               connects to its own Ray through it (a pod
                               resolves its own FQDN through /etc/hosts). On
                               the head, a --node-ip-address in
                               RAY_START_EXTRA_ARGS takes its place.
    RAY_PORT                   Ray GCS port on the head (default 6379).
    RAY_START_TIMEOUT_SECONDS  how long `ray start` may take (default 120):
                               `ray start --head` must return, and a worker's
                               `ray start --block` must report "Ray runtime
                               started." (it has joined) within this time, or
                               the launcher stops it and exits 7.
    RAY_CONNECT_TIMEOUT_SECONDS  how long the head may take to connect to its
                               own Ray (`ray.init`, run in a child process
                               that is killed at the deadline) before giving
                               up with exit 8 (default 60).
    RAY_NODE_WAIT_SECONDS      how long the head then waits for NUM_NODES
                               alive nodes before giving up (default 300).
    RAY_JOIN_DEADLINE_SECONDS  how long a worker retries reaching the head's
                               port before giving up (default 600).
    RUN_DONE_MARKER            optional file path (e.g. on the shared /fsx
                               volume). When it exists the pod idles instead
                               of training; the head writes it after the
                               training command exits 0.
    RAY_START_EXTRA_ARGS       optional, shell-quoted extra arguments for
                               every `ray start` (head and worker), e.g.
                               "--num-cpus=8" or "--node-ip-address=10.0.0.5".
                               The launcher's own dashboard flags are placed
                               after them, so they cannot be overridden.
    RAY_AUTH_TOKEN             optional (Ray's own variable; from the training
                               Secret): when set, the launcher sets
                               RAY_AUTH_MODE=token for `ray start`, its own
                               connection and the training command, so every
                               Ray gRPC server (GCS, raylets, Ray Client
                               server) refuses clients without this token.
                               All pods of a run must get the same value. An
                               empty value is a configuration error (exit 2),
                               not "no authentication".
    NODE_RANK_ENV              optional: the name of a variable the launcher
                               sets to this pod's rank (for every `ray start`
                               and the training command), e.g.
                               RLINF_NODE_RANK, which RLinf reads on each node
                               to order them (Ray captures it at start).
    RAY_DASHBOARD              optional: "loopback" starts the head's
                               dashboard on 127.0.0.1 only (Ray's state API,
                               which some trainers use, is served by it);
                               default "off".
    RAY_AUTH_MODE              optional (Ray's own variable). Without
                               RAY_AUTH_TOKEN the launcher sets it to
                               "disabled" unless it is set: a token file left
                               at ~/.ray/auth_token would otherwise switch
                               token mode on for `ray start --head` only
                               (Ray 2.60 does that by itself) and lock the
                               workers out. With RAY_AUTH_TOKEN it must be
                               unset or "token".

Ray is only ever reached at an explicit address, never discovered: Ray 2.60's
`ray.init(address="auto")` takes an inherited RAY_ADDRESS first, then the
address the last `ray start` recorded under the temp dir
(ray_current_cluster), then any gcs_server found by scanning the process
table (ray/_private/services.py, get_ray_address_from_environment), any of
which can be another cluster on the same host. So the head connects with
ray.init(address="<RAY_HEAD_HOST or --node-ip-address>:<RAY_PORT>"), workers
run `ray start --address=<RAY_HEAD_HOST>:<RAY_PORT>`, an inherited RAY_ADDRESS
is dropped, and the training command gets RAY_ADDRESS=<that head address>,
which its plain `ray.init()` (or "auto") uses before any discovery. (Also
for trainers: ray.init() replaces the process's SIGTERM handler with one that
exits at once, ray/_private/worker.py init(); a trainer that checkpoints on
SIGTERM installs its handler after ray.init(), as tests/scripts/
resume_trainer.py does.)

Token authentication is Ray's own (2.60): with RAY_AUTH_MODE=token every Ray
gRPC server (GCS, raylet, Ray Client server) checks an "authorization: Bearer
<token>" header and every Ray client sends one (ray/_private/authentication/,
ray/_private/grpc_utils.py). The token comes from RAY_AUTH_TOKEN, else the file
RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token (the C++ token loader in
ray/_raylet.so; ray/exceptions.py AuthenticationError). A client without the
right token fails with "Unauthenticated: ... InvalidAuthToken". RAY_AUTH_TOKEN
without RAY_AUTH_MODE=token sends nothing, hence the launcher sets the mode.

Exit codes (module-level EXIT_* names, importable by the Pulumi program):

    0   success (or an idle pod stopped by SIGTERM/SIGINT, or a worker whose
        `ray start --block` exited 0)
    2   EXIT_USAGE: bad configuration or usage
    3   EXIT_NODES_TIMEOUT: the head did not see NUM_NODES nodes in time
    4   EXIT_HEAD_UNREACHABLE: a worker could not reach the head's port in time
    5   EXIT_RAY_START_FAILED: `ray start --head` failed, or a worker's
        `ray start` exited before it had joined (e.g. a wrong RAY_AUTH_TOKEN)
    6   EXIT_HEAD_LOST: a worker had joined, then lost its head: `ray start
        --block` exited non-zero and either reported that it lost the GCS or
        the head's port no longer answers. A disruption (the head's pod died
        or was replaced), not a failure of this pod: the pod failure policy
        should Ignore it so it does not count against the retry budget. Ray
        notices first: its raylet gives up on the GCS after
        RAY_gcs_rpc_server_reconnect_timeout_s (Ray's setting, 60 s default).
    7   EXIT_RAY_START_TIMEOUT: `ray start` did not finish (head) or join
        (worker) within RAY_START_TIMEOUT_SECONDS
    8   EXIT_RAY_CONNECT_FAILED: the head could not connect to its own Ray
        within RAY_CONNECT_TIMEOUT_SECONDS (or lost it while counting nodes)
    127 EXIT_NOT_FOUND: the training command or the `ray` CLI was not found
        on PATH (the message names the PATH searched: an image whose Ray lives
        in a virtual environment needs its bin directory first on PATH)
    143/130 SIGTERM/SIGINT arrived before training started, or stopped a
        joined worker (`ray start --block` itself would exit 1)
    otherwise the training command's own exit code (128+N when it was killed
    by signal N), or a worker's `ray start --block` exit code when it failed
    while the head was still reachable.

The head passes the training command's exit code through unchanged, so a
trainer should not itself exit with 2-8: a pod failure policy keyed on these
codes cannot tell the launcher's from the trainer's.

Only the standard library is imported at module level, so the pure parts
(parse_rank, load_config, split_command) and the EXIT_* codes can be
imported and tested anywhere; `ray` itself is imported only in the child
process that connects to the head (_node_wait_child).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Mapping, Optional, Sequence

EXIT_USAGE = 2
EXIT_NODES_TIMEOUT = 3
EXIT_HEAD_UNREACHABLE = 4
EXIT_RAY_START_FAILED = 5
EXIT_HEAD_LOST = 6
EXIT_RAY_START_TIMEOUT = 7
EXIT_RAY_CONNECT_FAILED = 8
EXIT_NOT_FOUND = 127

DEFAULT_RAY_PORT = 6379
DEFAULT_START_TIMEOUT_SECONDS = 120
DEFAULT_CONNECT_TIMEOUT_SECONDS = 60
DEFAULT_NODE_WAIT_SECONDS = 300
DEFAULT_JOIN_DEADLINE_SECONDS = 600

# How often the head asks Ray how many nodes are alive. Each poll is one cheap
# GCS request, so a short interval only shortens the time to start training.
NODE_POLL_SECONDS = 2.0
# Pause between a worker's attempts to reach the head. The head's DNS record
# appears only once its pod exists and the headless Service publishes it, and
# its GCS port opens only once `ray start --head` is up, so early failures are
# the normal case.
JOIN_RETRY_SECONDS = 1.0
# Progress lines while waiting are rate-limited so logs stay readable over a
# wait of several minutes.
PROGRESS_EVERY_SECONDS = 10.0
# After a joined worker's `ray start --block` fails, how long the launcher
# keeps trying the head's port before calling the head lost. Ray itself has
# already waited (gcs_rpc_server_reconnect_timeout_s, 60 s by default) before
# its raylet gave up on the GCS, so this only needs to outlast a blip.
HEAD_PROBE_SECONDS = 3.0
# How long a child (`ray start`, the node-wait process) gets to exit after
# SIGTERM before it is killed.
CHILD_STOP_GRACE_SECONDS = 10.0

# What `ray start` prints once its node is up (scripts.py in Ray 2.60, both
# for the head and for a worker; a worker with --block then blocks). A worker
# counts as joined only after this line: a test against the pinned Ray fails
# should a new version reword it.
RAY_STARTED_MARKER = "Ray runtime started."
# What a worker's raylet logs (rpc_client.h) before it exits because the GCS
# went away; `ray start --block` prints the raylet log's tail on its way out.
GCS_LOST_MARKER = "Failed to connect to GCS"

# The Ray variables the launcher manages (see the module docstring).
RAY_ADDRESS_ENV = "RAY_ADDRESS"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN = "token"
AUTH_DISABLED = "disabled"

# The head's node-wait child: `python ray_launcher.py NODE_WAIT_FLAG <address>
# <num_nodes>`. Its protocol lines on stdout start with NODE_WAIT_TAG.
NODE_WAIT_FLAG = "--internal-node-wait"
NODE_WAIT_TAG = "@ray-launcher-node-wait@"

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
DASHBOARD_MODES = ("off", "loopback")
# Ray's usage statistics are sent from the head to an Internet endpoint; a
# training cluster has no reason to phone home, and egress may be blocked.
NO_TELEMETRY_ARGS = ("--disable-usage-stats",)

USAGE = "usage: ray_launcher.py -- <training command> [args...]"

_HOSTNAME_ORDINAL = re.compile(r"-(\d+)$")


class ConfigError(Exception):
    """A missing or invalid environment variable or argument (exit 2)."""


@dataclasses.dataclass(frozen=True)
class Config:
    num_nodes: int
    rank: int
    head_host: Optional[str]
    port: int
    node_wait_seconds: int
    join_deadline_seconds: int
    done_marker: Optional[str]
    extra_start_args: tuple
    # The explicit host:port every Ray connection of this run uses.
    ray_address: str = ""
    start_timeout_seconds: int = DEFAULT_START_TIMEOUT_SECONDS
    connect_timeout_seconds: int = DEFAULT_CONNECT_TIMEOUT_SECONDS
    # RAY_AUTH_MODE for every Ray process of this pod: "token" or "disabled".
    auth_mode: str = AUTH_DISABLED
    # RAY_DASHBOARD: "off" or "loopback".
    dashboard: str = "off"
    # NODE_RANK_ENV: the variable this pod's rank is exported under (None: not exported).
    node_rank_env: Optional[str] = None

    @property
    def is_head(self) -> bool:
        return self.rank == 0


def parse_int(
    env: Mapping[str, str],
    name: str,
    default: Optional[int] = None,
    minimum: int = 0,
    maximum: Optional[int] = None,
) -> int:
    """Read an integer variable, naming the variable and value on failure."""
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise ConfigError(f"{name} is required but not set")
        return default
    text = raw.strip()
    # int() alone would also accept "+3", "1_000" and "٣"; only plain ASCII
    # digits (with an optional minus, rejected below with a clearer message)
    # are a plausible value from a manifest.
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ConfigError(f"{name} must be an integer, got {raw!r}")
    value = int(text)
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {raw!r}")
    return value


def parse_rank(env: Mapping[str, str]) -> int:
    """Rank from JOB_COMPLETION_INDEX (Indexed Job) or the HOSTNAME ordinal.

    JOB_COMPLETION_INDEX wins when present: an Indexed Job's pod names carry a
    random suffix, so their HOSTNAME ordinal would be meaningless.
    """
    if "JOB_COMPLETION_INDEX" in env:
        return parse_int(env, "JOB_COMPLETION_INDEX")
    hostname = env.get("HOSTNAME", "")
    match = _HOSTNAME_ORDINAL.search(hostname)
    if match is None:
        raise ConfigError(
            "cannot determine the rank: JOB_COMPLETION_INDEX is not set and "
            f"HOSTNAME {hostname!r} does not end in -<ordinal> "
            "(expected e.g. 'training-3')"
        )
    return int(match.group(1))


def load_config(env: Mapping[str, str]) -> Config:
    """Validate the whole environment contract up front, before starting Ray."""
    num_nodes = parse_int(env, "NUM_NODES", minimum=1)
    rank = parse_rank(env)
    if rank >= num_nodes:
        raise ConfigError(
            f"rank {rank} is out of range for NUM_NODES={num_nodes} "
            "(ranks are 0..NUM_NODES-1)"
        )
    port = parse_int(env, "RAY_PORT", DEFAULT_RAY_PORT, minimum=1, maximum=65535)
    node_wait = parse_int(env, "RAY_NODE_WAIT_SECONDS", DEFAULT_NODE_WAIT_SECONDS)
    join_deadline = parse_int(
        env, "RAY_JOIN_DEADLINE_SECONDS", DEFAULT_JOIN_DEADLINE_SECONDS
    )
    start_timeout = parse_int(
        env, "RAY_START_TIMEOUT_SECONDS", DEFAULT_START_TIMEOUT_SECONDS, minimum=1
    )
    connect_timeout = parse_int(
        env, "RAY_CONNECT_TIMEOUT_SECONDS", DEFAULT_CONNECT_TIMEOUT_SECONDS, minimum=1
    )
    head_host = (env.get("RAY_HEAD_HOST") or "").strip() or None
    if rank > 0 and head_host is None:
        raise ConfigError(
            f"RAY_HEAD_HOST is required on workers (rank {rank}) but not set"
        )
    done_marker = (env.get("RUN_DONE_MARKER") or "").strip() or None
    raw_extra = env.get("RAY_START_EXTRA_ARGS", "")
    try:
        extra = tuple(shlex.split(raw_extra))
    except ValueError as exc:
        raise ConfigError(
            f"RAY_START_EXTRA_ARGS is not valid shell quoting ({exc}): {raw_extra!r}"
        ) from None
    if rank == 0:
        # Where `ray start --head` binds when told, else the name workers use.
        host = option_value(extra, "--node-ip-address") or head_host
        if host is None:
            raise ConfigError(
                "RAY_HEAD_HOST is required on the head too (or --node-ip-address "
                "in RAY_START_EXTRA_ARGS): the head connects to its own Ray at "
                "that address, never by auto-discovery"
            )
    else:
        host = head_host
    dashboard = (env.get("RAY_DASHBOARD") or "off").strip()
    if dashboard not in DASHBOARD_MODES:
        raise ConfigError(f"RAY_DASHBOARD={dashboard!r}: allowed {', '.join(DASHBOARD_MODES)}")
    rank_env = (env.get("NODE_RANK_ENV") or "").strip() or None
    if rank_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rank_env):
        raise ConfigError(f"NODE_RANK_ENV={rank_env!r} is not an environment variable name")
    return Config(
        num_nodes=num_nodes,
        rank=rank,
        head_host=head_host,
        port=port,
        node_wait_seconds=node_wait,
        join_deadline_seconds=join_deadline,
        done_marker=done_marker,
        extra_start_args=extra,
        ray_address=_host_port(host, port),
        start_timeout_seconds=start_timeout,
        connect_timeout_seconds=connect_timeout,
        auth_mode=auth_mode(env),
        dashboard=dashboard,
        node_rank_env=rank_env,
    )


def option_value(args: Sequence[str], option: str) -> Optional[str]:
    """The last value of `option` (--opt=value or --opt value) in args."""
    value = None
    for index, arg in enumerate(args):
        if arg.startswith(option + "="):
            value = arg[len(option) + 1 :]
        elif arg == option and index + 1 < len(args):
            value = args[index + 1]
    if value is None or not value.strip():
        return None
    return value.strip()


def auth_mode(env: Mapping[str, str]) -> str:
    """RAY_AUTH_MODE for this pod's Ray processes: "token" or "disabled".

    Ray 2.60 reads the token from RAY_AUTH_TOKEN (or the file named by
    RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token) but only uses it when
    RAY_AUTH_MODE=token; without that a client sends no token at all.
    """
    token = env.get(RAY_AUTH_TOKEN_ENV)
    raw_mode = env.get(RAY_AUTH_MODE_ENV)
    mode = (raw_mode or "").strip().lower() or None
    if mode not in (None, AUTH_TOKEN, AUTH_DISABLED):
        raise ConfigError(
            f"{RAY_AUTH_MODE_ENV} must be '{AUTH_TOKEN}' or '{AUTH_DISABLED}', "
            f"got {raw_mode!r}"
        )
    if token is not None:
        if not token.strip():
            raise ConfigError(
                f"{RAY_AUTH_TOKEN_ENV} is set but empty; check the Secret it "
                "comes from (unset it to run without token authentication)"
            )
        if mode == AUTH_DISABLED:
            raise ConfigError(
                f"{RAY_AUTH_TOKEN_ENV} is set but {RAY_AUTH_MODE_ENV}="
                f"{raw_mode!r}; unset {RAY_AUTH_MODE_ENV} or set it to "
                f"'{AUTH_TOKEN}'"
            )
        return AUTH_TOKEN
    # Token mode without RAY_AUTH_TOKEN: the operator points Ray at a token
    # file (RAY_AUTH_TOKEN_PATH); Ray itself fails clearly if there is none.
    return mode or AUTH_DISABLED


def prepare_ray_environment(log: "Launcher", cfg: Config) -> None:
    """Set the variables every Ray process this pod starts inherits."""
    inherited = os.environ.get(RAY_ADDRESS_ENV)
    if cfg.is_head:
        if inherited and inherited != cfg.ray_address:
            log.say(
                f"ignoring the inherited {RAY_ADDRESS_ENV}={inherited}; this "
                f"run's Ray is at {cfg.ray_address}"
            )
        # For the training command: ray.init() and ray.init("auto") take
        # RAY_ADDRESS before any discovery.
        os.environ[RAY_ADDRESS_ENV] = cfg.ray_address
    elif inherited is not None:
        # `ray start --address` does not read it, but the worker's Ray
        # processes should not see another cluster's address either.
        del os.environ[RAY_ADDRESS_ENV]
    os.environ[RAY_AUTH_MODE_ENV] = cfg.auth_mode
    if cfg.auth_mode == AUTH_TOKEN:
        source = (
            RAY_AUTH_TOKEN_ENV if RAY_AUTH_TOKEN_ENV in os.environ
            else "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        )
        log.say(f"Ray token authentication on (token from {source})")


def split_command(argv: Sequence[str]) -> list:
    """The training command: everything after a leading `--`."""
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    return args


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


def _host_port(host: str, port: int) -> str:
    # A bare IPv6 literal needs brackets to be told apart from the port.
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


class Launcher:
    def __init__(self, rank_label: str) -> None:
        self.prefix = f"[ray-launcher rank={rank_label}]"

    def say(self, message: str) -> None:
        # flush: stdout is a pipe in a container, and these lines must appear
        # in `kubectl logs` before a long `ray start` or the trainer's output.
        print(f"{self.prefix} {message}", flush=True)

    def error(self, message: str) -> None:
        print(f"{self.prefix} ERROR: {message}", file=sys.stderr, flush=True)


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _exit_on_signal(signum, _frame) -> None:
    # In a container this launcher is PID 1, and the kernel does not deliver
    # a signal whose disposition is the default to PID 1. Without a handler,
    # SIGTERM during `ray start` or the node wait would be ignored and the pod
    # would linger for the whole termination grace period.
    raise SystemExit(128 + signum)


def _reset_signals_for_exec() -> None:
    # exec keeps a blocked signal mask and ignored dispositions: make sure the
    # process that replaces us can receive SIGTERM/SIGINT normally.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


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


def _node_wait_child(address: str, num_nodes: int) -> int:
    """Child process of the head: connect to Ray, report alive nodes.

    Runs in its own process so the head can abandon it: `ray.init` on an
    address that does not answer retries on its own schedule, and a GCS that
    accepts connections but never replies could hold it (or ray.nodes())
    indefinitely. The parent enforces RAY_CONNECT_TIMEOUT_SECONDS and
    RAY_NODE_WAIT_SECONDS and kills this process at either deadline.
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
        while True:
            # ray.nodes() also lists nodes that joined and died since.
            alive = sum(1 for node in ray.nodes() if node.get("Alive"))
            report("alive", str(alive))
            if alive >= num_nodes:
                return 0
            time.sleep(NODE_POLL_SECONDS)
    except Exception as exc:
        report("error", f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        # Disconnect before the trainer starts, so it is this driver and not
        # the trainer's that Ray sees end.
        ray.shutdown()


class _LineReader:
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


def _stop_child(proc: subprocess.Popen, grace: float = CHILD_STOP_GRACE_SECONDS) -> None:
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


def wait_for_nodes(log: Launcher, cfg: Config) -> tuple:
    """Connect to the head's Ray and wait for NUM_NODES alive nodes.

    Returns (exit code, alive nodes, problem): 0 once all nodes are alive,
    EXIT_RAY_CONNECT_FAILED when the connection fails or does not succeed
    within RAY_CONNECT_TIMEOUT_SECONDS, EXIT_NODES_TIMEOUT when too few nodes
    are alive after RAY_NODE_WAIT_SECONDS more.
    """
    command = [
        sys.executable,
        os.path.abspath(__file__),
        NODE_WAIT_FLAG,
        cfg.ray_address,
        str(cfg.num_nodes),
    ]
    started = time.monotonic()
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return EXIT_RAY_CONNECT_FAILED, 0, f"cannot run {sys.executable}: {exc}"
    reader = _LineReader(child.stdout)
    deadline = started + cfg.connect_timeout_seconds
    connected = False
    alive = 0
    last_report = None
    last_alive = -1
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                if not connected:
                    return (
                        EXIT_RAY_CONNECT_FAILED,
                        0,
                        f"no connection within {cfg.connect_timeout_seconds} s "
                        "(RAY_CONNECT_TIMEOUT_SECONDS)",
                    )
                return EXIT_NODES_TIMEOUT, alive, None
            line = reader.readline(deadline - now)
            if line is None:
                if reader.closed:
                    code = child.wait()
                    return (
                        EXIT_RAY_CONNECT_FAILED,
                        alive,
                        f"the connection process exited with code {code} "
                        "without a result",
                    )
                continue
            if not line.startswith(NODE_WAIT_TAG + " "):
                # Anything Ray printed to stdout: pass it on.
                print(line, flush=True)
                continue
            kind, _, detail = line[len(NODE_WAIT_TAG) + 1 :].partition(" ")
            if kind == "error":
                return EXIT_RAY_CONNECT_FAILED, alive, detail
            if kind == "connected":
                connected = True
                log.say(
                    f"connected to Ray at {cfg.ray_address}; waiting up to "
                    f"{cfg.node_wait_seconds} s for {cfg.num_nodes} nodes"
                )
                deadline = time.monotonic() + cfg.node_wait_seconds
            elif kind == "alive":
                alive = int(detail)
                if alive >= cfg.num_nodes:
                    return 0, alive, None
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
        # A child that reached the count exits by itself after ray.shutdown();
        # one that is stuck is abandoned: killed, not waited for.
        try:
            child.wait(timeout=CHILD_STOP_GRACE_SECONDS if alive >= cfg.num_nodes else 0.1)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()


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
    forwarded = []
    children = []

    def forward(signum, _frame) -> None:
        forwarded.append(signum)
        for child in children:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

    # We stay in between Kubernetes and the trainer here, so pass on the
    # signals the kubelet (SIGTERM) or a terminal (SIGINT) sends us. The
    # handlers go in before the child starts so no signal falls in a gap.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        log.error(f"cannot run {command[0]!r}: {exc}")
        return EXIT_NOT_FOUND
    children.append(child)
    if forwarded:
        # A signal that arrived while the child was being created.
        child.send_signal(forwarded[-1])
    returncode = child.wait()
    code = 128 - returncode if returncode < 0 else returncode
    if code == 0 and forwarded:
        # A trainer that checkpoints and exits 0 on SIGTERM has been stopped,
        # not finished: marking it done would skip the rest of the run.
        log.say(
            "training command exited 0 after "
            f"{signal.Signals(forwarded[0]).name}; not writing {marker}"
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


def ray_on_path(log: Launcher) -> bool:
    """`ray` must resolve through PATH; say which PATH was searched when it does not."""
    if shutil.which("ray") is not None:
        return True
    log.error(
        f"the ray CLI is not on PATH={os.environ.get('PATH', '')}: put the bin directory of the "
        "image's Python environment with Ray first on PATH (e.g. /opt/venv/<name>/bin)"
    )
    return False


def run_head(log: Launcher, cfg: Config, command: Sequence[str]) -> int:
    if not command:
        log.error(f"no training command given after '--'\n{USAGE}")
        return EXIT_USAGE
    if not ray_on_path(log):
        return EXIT_NOT_FOUND
    start = head_start_command(cfg)
    log.say(f"starting the Ray head: {shlex.join(start)}")
    _flush_std_streams()
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
    _flush_std_streams()
    _reset_signals_for_exec()
    try:
        os.execvp(command[0], list(command))
    except OSError as exc:
        log.error(f"cannot run {command[0]!r}: {exc}")
        return EXIT_NOT_FOUND


def wait_for_head(log: Launcher, cfg: Config) -> bool:
    """Retry until the head's GCS port accepts a TCP connection."""
    target = _host_port(cfg.head_host, cfg.port)
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


def _relay(source, target, markers: Mapping[str, threading.Event]) -> None:
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


def _wait_reaping(proc: subprocess.Popen) -> int:
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
    forwarded = []
    children = []

    def forward(signum, _frame) -> None:
        forwarded.append(signum)
        for running in children:
            try:
                running.send_signal(signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    _flush_std_streams()
    try:
        child = subprocess.Popen(
            start, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:
        log.error(f"cannot run the ray CLI (is it on PATH?): {exc}")
        return EXIT_NOT_FOUND
    children.append(child)
    if forwarded:
        child.send_signal(forwarded[-1])
    joined = threading.Event()
    gcs_lost = threading.Event()
    markers = {RAY_STARTED_MARKER: joined, GCS_LOST_MARKER: gcs_lost}
    relays = [
        threading.Thread(target=_relay, args=(child.stdout, sys.stdout, markers), daemon=True),
        threading.Thread(target=_relay, args=(child.stderr, sys.stderr, markers), daemon=True),
    ]
    for relay in relays:
        relay.start()

    def drain_output() -> None:
        # Processes that inherited the pipes may keep them open: bounded.
        for relay in relays:
            relay.join(timeout=2.0)

    deadline = time.monotonic() + cfg.start_timeout_seconds
    while not joined.is_set() and child.poll() is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log.error(
                f"`ray start` did not join the Ray cluster at {cfg.ray_address} "
                f"within {cfg.start_timeout_seconds} s "
                "(RAY_START_TIMEOUT_SECONDS); stopping it and giving up"
            )
            _stop_child(child)
            drain_output()
            return EXIT_RAY_START_TIMEOUT
        joined.wait(min(0.2, remaining))
    if child.returncode is not None:
        # Exited before we saw it join; its last lines may still be in flight.
        drain_output()
    if not joined.is_set():
        code = child.returncode
        if forwarded:
            return 0 if code == 0 else 128 + forwarded[0]
        log.error(
            f"`ray start` exited with code {code} before joining the Ray "
            f"cluster at {cfg.ray_address}; see its output above (a token "
            "mismatch shows as InvalidAuthToken)"
        )
        return EXIT_RAY_START_FAILED
    log.say(f"joined the Ray cluster at {cfg.ray_address}")
    code = _wait_reaping(child)
    code = 128 - code if code < 0 else code
    drain_output()
    if forwarded:
        name = signal.Signals(forwarded[0]).name
        log.say(f"`ray start --block` exited with code {code} after {name}")
        # Ray exits 1 after a SIGTERM it handled; report the signal instead.
        return 0 if code == 0 else 128 + forwarded[0]
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [NODE_WAIT_FLAG] and len(args) == 3:
        return _node_wait_child(args[1], int(args[2]))
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    command = split_command(args)
    try:
        cfg = load_config(os.environ)
    except ConfigError as exc:
        rank = "?"
        try:
            rank = str(parse_rank(os.environ))
        except ConfigError:
            pass
        Launcher(rank).error(str(exc))
        return EXIT_USAGE
    log = Launcher(str(cfg.rank))
    if cfg.node_rank_env:
        # Before `ray start`: Ray captures the node's environment when it starts.
        os.environ[cfg.node_rank_env] = str(cfg.rank)
    if cfg.done_marker is not None and os.path.exists(cfg.done_marker):
        return idle_until_stopped(log, cfg.done_marker)
    prepare_ray_environment(log, cfg)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        if cfg.is_head:
            return run_head(log, cfg, command)
        log.say(f"worker of {cfg.num_nodes}; ignoring the training command")
        return run_worker(log, cfg)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
