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
    RAY_HEAD_HOST              required on workers: DNS name of the rank-0
                               pod, e.g. run-0.run-svc.ns.svc.cluster.local.
    RAY_PORT                   Ray GCS port on the head (default 6379).
    RAY_NODE_WAIT_SECONDS      how long the head waits for NUM_NODES alive
                               nodes before giving up (default 300).
    RAY_JOIN_DEADLINE_SECONDS  how long a worker retries reaching the head
                               before giving up (default 600).
    RUN_DONE_MARKER            optional file path (e.g. on the shared /fsx
                               volume). When it exists the pod idles instead
                               of training; the head writes it after the
                               training command exits 0.
    RAY_START_EXTRA_ARGS       optional, shell-quoted extra arguments for
                               every `ray start` (head and worker), e.g.
                               "--num-cpus=8" or "--node-ip-address=10.0.0.5".
                               The launcher's own dashboard flags are placed
                               after them, so they cannot be overridden.

Exit codes: 0 success (or idle pod stopped by SIGTERM/SIGINT); 2 bad
configuration or usage; 3 the head did not see NUM_NODES nodes in time;
4 a worker could not reach the head in time; 5 `ray start --head` failed;
127 the training command or the `ray` CLI was not found; 143/130 SIGTERM/
SIGINT arrived before training started. Otherwise the training command's own
exit code (128+N when it was killed by signal N), or `ray start --block`'s on
workers.

Only the standard library is imported at module level, so the pure parts
(parse_rank, load_config, split_command) can be imported and tested anywhere;
`ray` itself is imported only inside wait_for_nodes, on the head.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Mapping, Optional, Sequence

EXIT_USAGE = 2
EXIT_NODES_TIMEOUT = 3
EXIT_HEAD_UNREACHABLE = 4
EXIT_RAY_START_FAILED = 5
EXIT_NOT_FOUND = 127

DEFAULT_RAY_PORT = 6379
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

# Appended after RAY_START_EXTRA_ARGS so they win (click keeps the last value
# of a repeated option). The dashboard serves the Jobs API, which runs
# arbitrary code, and Ray has no authentication by default: it must never
# listen on the pod IP, where anything in the cluster network could reach it.
# It is disabled (training does not need it). Ray 2.60 still starts the
# dashboard process in a minimal mode with its HTTP server off; binding it to
# 127.0.0.1 keeps it loopback-only should any version serve HTTP regardless,
# while `kubectl port-forward` (which connects to the pod's loopback) still
# reaches it for debugging. The Ray Client server (port 10001 on the head)
# cannot be disabled or bound to loopback through `ray start` when grpcio is
# installed: restricting who reaches the pods (a NetworkPolicy) is what keeps
# it private.
HEAD_SAFETY_ARGS = (
    "--include-dashboard=false",
    "--dashboard-host=127.0.0.1",
)
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
    return Config(
        num_nodes=num_nodes,
        rank=rank,
        head_host=head_host,
        port=port,
        node_wait_seconds=node_wait,
        join_deadline_seconds=join_deadline,
        done_marker=done_marker,
        extra_start_args=extra,
    )


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
        *HEAD_SAFETY_ARGS,
        *NO_TELEMETRY_ARGS,
    ]


def worker_start_command(cfg: Config) -> list:
    return [
        "ray",
        "start",
        f"--address={_host_port(cfg.head_host, cfg.port)}",
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


def wait_for_nodes(log: Launcher, cfg: Config) -> tuple:
    """Poll Ray until NUM_NODES nodes are alive. Returns (alive, error)."""
    deadline = time.monotonic() + cfg.node_wait_seconds
    try:
        # Imported here, not at module level: the launcher must import (and
        # its tests run) without Ray, and workers never need the package.
        import ray
    except ImportError as exc:
        return 0, f"cannot import ray in {sys.executable}: {exc}"
    try:
        # "auto" connects to the head `ray start` just launched in this pod
        # (it records its address under Ray's temp dir) without us having to
        # guess the pod IP Ray chose.
        ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # Ray raises several unrelated types here.
        return 0, f"cannot connect to the local Ray head: {exc}"
    alive = 0
    last_report = None
    last_alive = -1
    try:
        while True:
            # ray.nodes() also lists nodes that joined and died since.
            alive = sum(1 for node in ray.nodes() if node.get("Alive"))
            now = time.monotonic()
            if alive >= cfg.num_nodes or now >= deadline:
                return alive, None
            if (
                alive != last_alive
                or last_report is None
                or now - last_report >= PROGRESS_EVERY_SECONDS
            ):
                log.say(
                    f"{alive} of {cfg.num_nodes} Ray nodes alive; waiting up "
                    f"to {math.ceil(deadline - now)} s more"
                )
                last_report, last_alive = now, alive
            time.sleep(min(NODE_POLL_SECONDS, max(0.0, deadline - now)))
    finally:
        # Disconnect before the trainer starts, so it is this script's driver
        # and not the trainer's that Ray sees end.
        ray.shutdown()


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


def run_head(log: Launcher, cfg: Config, command: Sequence[str]) -> int:
    if not command:
        log.error(f"no training command given after '--'\n{USAGE}")
        return EXIT_USAGE
    start = head_start_command(cfg)
    log.say(f"starting the Ray head: {shlex.join(start)}")
    _flush_std_streams()
    try:
        result = subprocess.run(start, check=False)
    except OSError as exc:
        log.error(f"cannot run the ray CLI (is it on PATH?): {exc}")
        return EXIT_NOT_FOUND
    if result.returncode != 0:
        log.error(f"`ray start --head` failed with exit code {result.returncode}")
        return EXIT_RAY_START_FAILED
    log.say(
        f"Ray head up; waiting up to {cfg.node_wait_seconds} s for "
        f"{cfg.num_nodes} nodes"
    )
    alive, problem = wait_for_nodes(log, cfg)
    if problem is not None or alive < cfg.num_nodes:
        detail = f" ({problem})" if problem else ""
        log.error(
            f"only {alive} of {cfg.num_nodes} Ray nodes joined within "
            f"{cfg.node_wait_seconds} s{detail}; check the worker pods' logs "
            f"(they must reach this pod on port {cfg.port}) and that all "
            f"{cfg.num_nodes} pods were scheduled"
        )
        ray_stop(log)
        return EXIT_NODES_TIMEOUT
    log.say(
        f"{alive} of {cfg.num_nodes} Ray nodes alive; starting training: "
        f"{shlex.join(command)}"
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


def run_worker(log: Launcher, cfg: Config) -> int:
    if not wait_for_head(log, cfg):
        return EXIT_HEAD_UNREACHABLE
    start = worker_start_command(cfg)
    log.say(f"head reachable; joining: {shlex.join(start)}")
    _flush_std_streams()
    _reset_signals_for_exec()
    try:
        # exec rather than a child: `ray start --block` then gets the
        # kubelet's SIGTERM itself and drains the node, and when it exits
        # (e.g. the head went away) so does the container.
        os.execvp("ray", start)
    except OSError as exc:
        log.error(f"cannot run the ray CLI (is it on PATH?): {exc}")
        return EXIT_NOT_FOUND


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
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
    if cfg.done_marker is not None and os.path.exists(cfg.done_marker):
        return idle_until_stopped(log, cfg.done_marker)
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
