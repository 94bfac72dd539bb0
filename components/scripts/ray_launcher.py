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
                               alive nodes, whose Kubernetes nodes are healthy
                               (below), before giving up (default 300; the
                               program sets the time a node repair takes).
    RAY_JOIN_DEADLINE_SECONDS  how long a worker retries reaching the head's
                               port before giving up (default 600; the
                               program sets the time a node repair takes).
    POD_NAMESPACE, RUN_POD_SELECTOR  optional: the namespace and the label
                               selector of this run's pods. With both and the
                               pod's service-account token, the head asks the
                               Kubernetes API about the nodes of those pods
                               (_ray_launcher/node_health.py): it does not
                               start the trainer while one is unhealthy (the
                               node monitoring agent's condition, NotReady,
                               cordoned, a NoExecute taint, deleted), and a
                               trainer that fails while one is exits 9.
                               Without them, or when the API cannot tell, Ray's
                               count alone decides.
    RESUME_LEDGER              optional (the resume wrapper's, beside this
                               file): the head records a wait for nodes that
                               ran out in the start ledger
                               (resume_wrapper.py --record-stall).
    RAY_PEER_CHECK_SECONDS     after the training command failed, how long the
                               head watches its Ray for a lost node before
                               exiting with the trainer's code (default 70:
                               the time Ray's GCS takes to declare a node
                               dead; _ray_launcher/config.py). 0 counts once.
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

Ray is only ever reached at an explicit address, never discovered, and with
RAY_AUTH_TOKEN every Ray server of the run requires the token: see
_ray_launcher/auth.py for why and how (Ray 2.60's sources).

Exit codes (module-level EXIT_* names, importable by the Pulumi program):

    0   success (or an idle pod stopped by SIGTERM/SIGINT, or a worker whose
        `ray start --block` exited 0 without being stopped)
    2   EXIT_USAGE: bad configuration or usage
    3   EXIT_NODES_TIMEOUT: the head did not see NUM_NODES nodes (with healthy
        Kubernetes nodes) in time. With a start ledger the attempt is recorded
        there first (and 10 replaces 3 over its bound): the pod failure
        policy then ignores 3, a peer that is gone, bounded by the ledger.
    4   EXIT_HEAD_UNREACHABLE: a worker could not reach the head's port in time
        (with a start ledger, ignored like 3: the head's own bound and Kueue's
        end the wait of its workers)
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
    9   EXIT_PEER_LOST: the head's training command failed (exited non-zero,
        not stopped by SIGTERM/SIGINT) while fewer than NUM_NODES Ray nodes
        were alive (a worker's node or pod was lost and the trainer failed on
        the lost peer) or while a Kubernetes node of the run was unhealthy (a
        GPU fault the node monitoring agent reported leaves every Ray node
        alive). A disruption, like EXIT_HEAD_LOST: the pod failure policy
        should Ignore it. The head asks only after a failure, Ray in a child
        process bounded by RAY_CONNECT_TIMEOUT_SECONDS and
        RAY_PEER_CHECK_SECONDS (+5 s), the API every 10 s within that window;
        when neither tells, the trainer's code stands. A trainer that itself
        exits 3, 4, 6 or 9 with every node alive and healthy (or unknown)
        gets 1: those codes mean a peer or a wait, nothing else.
    10  EXIT_NO_PROGRESS: the resume wrapper's (its start ledger refused
        another attempt from the same checkpoint), from the trainer's start or
        from the head's record of a wait that ran out (3).
    127 EXIT_NOT_FOUND: the training command or the `ray` CLI was not found
        on PATH (the message names the PATH searched: an image whose Ray lives
        in a virtual environment needs its bin directory first on PATH)
    143/130 SIGTERM/SIGINT arrived before training started, stopped a
        worker (`ray start --block` itself would exit 1, or 0), or stopped the
        head's trainer, which exited 0 on it: a stop is never a success (the
        Job's success policy on index 0 would complete a run that did not
        finish)
    otherwise the training command's own exit code (128+N when it was killed
    by signal N), or a worker's `ray start --block` exit code when it failed
    while the head was still reachable.

The head runs the training command as its child, passes SIGTERM/SIGINT on to
it and otherwise passes its exit code through (but for 9 and a stop, above),
so a trainer should not itself exit with 2-10: a pod failure policy keyed on
these codes cannot tell the launcher's from the trainer's.

The program is this file and the package _ray_launcher/ beside it (its parts:
config, auth, start, head, node_wait, training, worker, marker, processes; see its
__init__.py). The scripts ConfigMap of the launcher carries both, so the pod
has /scripts/ray_launcher.py and /scripts/_ray_launcher/*.py. Only the
standard library is imported at module level, so the pure parts and the EXIT_*
codes can be imported and tested anywhere; `ray` itself is imported only in the
child process that connects to the head (node_wait.report_nodes).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Optional, Sequence

# Every part is bound here (`ray_launcher.config.load_config`, `ray_launcher.start.head_start_command`):
# main() reads as their table of contents, and the tests reach the pure parts through this module.
if __package__:
    # Imported as components.scripts.ray_launcher (the Pulumi program reads the exit codes).
    from ._ray_launcher import (auth, common, config, head, marker, node_health, node_wait, processes, start,  # noqa: F401
                                training, worker)
else:
    # Run as a program (python3 /scripts/ray_launcher.py) or loaded from its path: the parts are
    # the package beside this file. Python puts a script's directory first on sys.path itself, but
    # not under `python -P` or PYTHONSAFEPATH (Python 3.11), which an image may set.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    from _ray_launcher import (auth, common, config, head, marker, node_health, node_wait, processes, start,  # noqa: F401
                               training, worker)

# The exit codes of the contract above, importable from here by the Pulumi program.
EXIT_USAGE = common.EXIT_USAGE
EXIT_NODES_TIMEOUT = common.EXIT_NODES_TIMEOUT
EXIT_HEAD_UNREACHABLE = common.EXIT_HEAD_UNREACHABLE
EXIT_RAY_START_FAILED = common.EXIT_RAY_START_FAILED
EXIT_HEAD_LOST = common.EXIT_HEAD_LOST
EXIT_RAY_START_TIMEOUT = common.EXIT_RAY_START_TIMEOUT
EXIT_RAY_CONNECT_FAILED = common.EXIT_RAY_CONNECT_FAILED
EXIT_PEER_LOST = common.EXIT_PEER_LOST
EXIT_NO_PROGRESS = common.EXIT_NO_PROGRESS
EXIT_NOT_FOUND = common.EXIT_NOT_FOUND


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [node_wait.NODE_WAIT_FLAG] and len(args) in (3, 4):
        watch = float(args[3]) if len(args) == 4 else None
        return node_wait.report_nodes(args[1], int(args[2]), watch)
    if args[:1] in (["-h"], ["--help"]):
        print(common.USAGE)
        return 0
    command = config.split_command(args)
    try:
        cfg = config.load_config(os.environ)
    except common.ConfigError as exc:
        rank = "?"
        try:
            rank = str(config.parse_rank(os.environ))
        except common.ConfigError:
            pass
        common.Launcher(rank).error(str(exc))
        return EXIT_USAGE
    log = common.Launcher(str(cfg.rank))
    if cfg.node_rank_env:
        # Before `ray start`: Ray captures the node's environment when it starts.
        os.environ[cfg.node_rank_env] = str(cfg.rank)
    if cfg.done_marker is not None and os.path.exists(cfg.done_marker):
        return marker.idle_until_stopped(log, cfg.done_marker)
    auth.prepare_ray_environment(log, is_head=cfg.is_head, ray_address=cfg.ray_address, mode=cfg.auth_mode)
    signal.signal(signal.SIGTERM, processes.exit_on_signal)
    try:
        if cfg.is_head:
            return head.run_head(log, cfg, command)
        log.say(f"worker of {cfg.num_nodes}; ignoring the training command")
        return worker.run_worker(log, cfg)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
