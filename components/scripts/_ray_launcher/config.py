"""The environment contract (ray_launcher.py's docstring), read and checked whole before anything
starts: a bad value is exit 2 naming the variable, never a half-started Ray."""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Mapping, Optional, Sequence

from .auth import AUTH_DISABLED, auth_mode
from .common import ConfigError

DEFAULT_RAY_PORT = 6379
DEFAULT_START_TIMEOUT_SECONDS = 120
DEFAULT_CONNECT_TIMEOUT_SECONDS = 60
DEFAULT_NODE_WAIT_SECONDS = 300
DEFAULT_JOIN_DEADLINE_SECONDS = 600
# After a failed trainer, how long the head watches for a lost peer (node_wait.check_peers). The
# GCS declares a node dead after health_check_failure_threshold (5) failed health checks, each
# waiting up to health_check_timeout_ms (10 s) and health_check_period_ms (3 s) apart (Ray's
# src/ray/common/ray_config_def.h): 65 s after a node stops answering, in the worst case. A
# trainer can fail sooner than that on a connection the peer reset; 70 s covers the GCS. A trainer
# that failed on its own pays this delay once per failure before its pod ends.
DEFAULT_PEER_CHECK_SECONDS = 70

DASHBOARD_MODES = ("off", "loopback")

_HOSTNAME_ORDINAL = re.compile(r"-(\d+)$")


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
    # RAY_PEER_CHECK_SECONDS: how long the head watches for a lost peer after a failed trainer.
    peer_check_seconds: int = DEFAULT_PEER_CHECK_SECONDS

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
    peer_check = parse_int(env, "RAY_PEER_CHECK_SECONDS", DEFAULT_PEER_CHECK_SECONDS)
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
        ray_address=host_port(host, port),
        start_timeout_seconds=start_timeout,
        connect_timeout_seconds=connect_timeout,
        auth_mode=auth_mode(env),
        dashboard=dashboard,
        node_rank_env=rank_env,
        peer_check_seconds=peer_check,
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


def split_command(argv: Sequence[str]) -> list:
    """The training command: everything after a leading `--`."""
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    return args


def host_port(host: str, port: int) -> str:
    # A bare IPv6 literal needs brackets to be told apart from the port.
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"
