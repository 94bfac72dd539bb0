"""The simulated-cluster tests (docs/simulated-cluster.md): markers, whether they run, their timers,
and the clusters they run on.

They are slow (the default `pytest -q` leaves them out) and run when asked: `.ci/run` (CI=1, after
ci/install.sh built or reused the binaries) or RLTRAIN_SIM=1. Then a missing binary is a failure,
not a skip; anyone else (e.g. `-m slow` without them) skips them with one line saying how.

Clusters and lanes. Several simulated clusters run on one machine at once, each in a lane: a slot of
a machine-wide semaphore (RLTRAIN_SIM_LANES slots, tests/lanes.py; lock files under
RLTRAIN_SIM_LOCK_DIR), whatever test runs or engineers start them. A test process keeps its cluster from one module to the next
when the next module asks for the same kind (KINDS; a module's CLUSTER_KIND, "shared" by default):
the cluster is reset to its baseline (Cluster.reset_baseline: the nodes it started with, fresh
storage) instead of started again, and a cluster something was left on is replaced by a fresh one.
The cluster is stopped, and its lane given back, after the last test that wants it
(pytest_runtest_teardown below). tests/conftest.py hands each group of modules that share a kind to
one test process (tests/lanes.py SIM_GROUPS).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

import pytest
from lanes import lanes

from cluster.binaries import BINARIES, toolset
from components.workloads import serving

ENABLE = ("simulated-cluster tests are off: build the binaries with cluster/build.sh, then "
          "RLTRAIN_SIM=1 python -m pytest -m sim tests/sim (docs/simulated-cluster.md)")

# --- Timers sized for a simulation ----------------------------------------------------------------
# Set here for every scenario, never taken from a stack's defaults (those are sized for real
# clusters: a p5 boots in minutes, Kueue's PodsReady timeout is 10 minutes at least). Every assertion
# that depends on one of them reads it from here or from its scenario's module.

# How long a Job pod "runs" on the shared clusters before kwok completes it (its pod-complete
# stage's delay): long enough for the watchers to see a run hold the GPUs while another waits
# (RUN_SECONDS / POLL_SECONDS polls), short enough that a run of checks and training is seconds.
RUN_SECONDS = 4.0
# How often the tests ask the API server (simdeploy.wait, the Watcher).
POLL_SECONDS = 0.5
# Job pods that never complete on their own (node repair, serving): an hour is past every bound.
HELD_RUN_SECONDS = 3600.0


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (a real cluster, real tools)")
    config.addinivalue_line("markers", "sim: needs the simulated cluster's binaries (cluster/build.sh)")


def sim_requested() -> bool:
    # CI=1 is what .ci/run sets (GitHub's CI=true is not: its runners have no build of them).
    return os.environ.get("RLTRAIN_SIM") == "1" or os.environ.get("CI") == "1"


def missing_binaries() -> list[str]:
    return toolset().missing(BINARIES)


def log(request, line: str) -> None:
    """A `[sim]` line: on the terminal, or from an xdist worker into the file the controller prints
    at the end (tests/conftest.py SIM_LOG); and on stderr (shown with a failing test)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    shared = os.environ.get("RLTRAIN_SIM_LOG")
    if hasattr(request.config, "workerinput") and shared:
        with open(shared, "a") as f:
            f.write(f"[sim] {request.node.nodeid.split('::')[0]}: {line}\n")
    elif reporter is not None:
        # Past pytest's capture (with fd capture the terminal's own fd is redirected during a test).
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(f"[sim] {line}")
    print(f"[sim] {line}", file=sys.stderr)


# --- Lanes: a machine-wide semaphore ------------------------------------------------------------

LANE_DIR = Path(os.environ.get("RLTRAIN_SIM_LOCK_DIR", "/tmp/rltrain-sim-lanes"))


@dataclass
class Lane:
    index: int
    lock: IO[str]
    waited: float


def take_lane() -> Lane:
    """A free slot of the machine's RLTRAIN_SIM_LANES, waiting for one (flock: a process that dies
    gives its slot back)."""
    LANE_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    while True:
        for index in range(lanes()):
            f = open(LANE_DIR / f"lane-{index}.lock", "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            return Lane(index, f, time.monotonic() - t0)
        time.sleep(1.0)


def give_back(lane: Optional[Lane]) -> None:
    if lane is not None:
        lane.lock.close()


# --- Cluster kinds and the cluster of this process ------------------------------------------------

@dataclass(frozen=True)
class Kind:
    """What a cluster is started with (cluster.sim.start's keywords); modules asking for the same
    kind share one cluster in turn."""
    name: str
    complete_after: float
    start: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


# The annotation that releases a serving pod from WAITING_STAGE (tests/sim/test_serve_export.py).
RELEASED = "rltrain.sim/init-exited"
# A kwok Stage that keeps a pod with a `wait-for-export` init container Pending, that container
# running and the server `PodInitializing`, until the pod carries RELEASED; then kwok's own pod-ready
# makes it Running. kwok's pod-ready stage has no weight (0): a matching Stage with a weight is always
# chosen over it (kwok v0.8.0 pkg/utils/lifecycle/lifecycle.go Match). It matches no other pod.
WAITING_STAGE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
    "metadata": {"name": "rltrain-sim-wait-for-export"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            {"key": ".spec.initContainers.[].name", "operator": "In", "values": [serving.WAIT_CONTAINER]},
            {"key": f'.metadata.annotations["{RELEASED}"]', "operator": "DoesNotExist"}]},
        "weight": 100,
        # Deterministic (no Now): applied again to the same pod it is no change, so kwok does not
        # patch it again (pod_controller.go checkNeedPatchWithTyped).
        "next": {"statusTemplate": (
            "{{ $t := .metadata.creationTimestamp }}\n"
            "conditions:\n"
            "- {type: Initialized, status: \"False\", reason: ContainersNotInitialized, lastTransitionTime: {{ $t | Quote }}}\n"
            "- {type: Ready, status: \"False\", reason: ContainersNotReady, lastTransitionTime: {{ $t | Quote }}}\n"
            "- {type: ContainersReady, status: \"False\", reason: ContainersNotReady, lastTransitionTime: {{ $t | Quote }}}\n"
            "initContainerStatuses:\n"
            "{{ range .spec.initContainers }}\n"
            "- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: true, restartCount: 0,"
            " state: {running: {startedAt: {{ $t | Quote }}}}}\n"
            "{{ end }}\n"
            "containerStatuses:\n"
            "{{ range .spec.containers }}\n"
            "- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: false, restartCount: 0,"
            " state: {waiting: {reason: PodInitializing}}}\n"
            "{{ end }}\n"
            "phase: Pending\n")},
    },
}

# A node whose kubelet stopped answering (a reboot repair: tests/sim/faults.py reboot_node): while a
# node carries this annotation (its value: when it went down), kwok reports it `Ready=Unknown` as node
# lifecycle would once the kubelet's status went stale, and node lifecycle (kube-controller-manager)
# taints it unreachable. kwok's node-initialize matches every node not Ready and would make it Ready
# again at once: this Stage has a weight and wins (kwok v0.8.0 lifecycle.go Match). Deterministic:
# applied again, it is no change. Once the annotation is gone, node-initialize makes the node Ready.
NODE_DOWN = "rltrain.sim/node-down"
NODE_DOWN_STAGE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
    "metadata": {"name": "rltrain-sim-node-down"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Node"},
        "selector": {"matchExpressions": [{"key": f'.metadata.annotations["{NODE_DOWN}"]', "operator": "Exists"}]},
        "weight": 100,
        "next": {"statusTemplate": (
            f'{{{{ $t := index .metadata.annotations "{NODE_DOWN}" }}}}\n'
            "conditions:\n"
            "- {type: Ready, status: Unknown, reason: NodeStatusUnknown, message: \"Kubelet stopped posting node status.\","
            " lastHeartbeatTime: {{ $t | Quote }}, lastTransitionTime: {{ $t | Quote }}}\n")},
    },
}

# The serving cluster's Kueue: PodsReady timeout and first requeue backoff, seconds (cluster/sim.py
# kueue_timed), as the elastic scenarios use.
SERVING_KUEUE_TIMING = (30, 5)

# shared: Job pods complete after RUN_SECONDS (deploy, day two, the key sweep, the deploy plan).
# held: Job pods never complete on their own, and a node can go down and come back (node repair).
# serving: held, and serving pods wait in WAITING_STAGE until released (train-export-serve). Kueue's
#   topology-aware assignment of the training run and the scheduler's placement of the serving pod
#   (not queued) can race for the same node when one `up` creates both: the training pod is then
#   Unschedulable on the node TAS named (seen on a warm cluster 2026-12-04 and on a fresh one in
#   .ci/run 2026-12-05). What ends it is Kueue's PodsReady timeout: the run is evicted whole and
#   admitted again beside the bound serving pod. On AWS that costs one timeout
#   (kueue.podsReadyTimeoutMinutes, 10 minutes at least); here the serving cluster gets the
#   sim-sized SERVING_KUEUE_TIMING so that recovery fits the test's wait.
# The elastic cluster is its module's own CLUSTER_KIND.
KINDS = {"shared": Kind("shared", RUN_SECONDS),
         "held": Kind("held", HELD_RUN_SECONDS, {"extra_stages": [NODE_DOWN_STAGE]}),
         "serving": Kind("serving", HELD_RUN_SECONDS, {"extra_stages": [WAITING_STAGE],
                                                       "kueue_timing": SERVING_KUEUE_TIMING})}


@dataclass
class _Current:
    kind: Optional[str] = None
    cluster: Any = None
    lane: Optional[Lane] = None
    modules: int = 0


_current = _Current()


def kind_of(module) -> Kind:
    kind = getattr(module, "CLUSTER_KIND", "shared")
    return kind if isinstance(kind, Kind) else KINDS[kind]


def stop_cluster() -> None:
    c, lane = _current.cluster, _current.lane
    _current.kind, _current.cluster, _current.lane, _current.modules = None, None, None, 0
    try:
        if c is not None:
            c.stop()
    finally:
        give_back(lane)


def lane_cluster(tmp_path_factory, request, kind: Kind):
    """The cluster of this kind for the requesting module: this process's, reset to its baseline,
    or a new one in a lane of its own (started after stopping this process's other cluster)."""
    from cluster import sim

    missing = missing_binaries()
    if missing:
        # Requested (CI=1 or RLTRAIN_SIM=1) and not built: a failure, not a skip.
        pytest.fail(f"simulated cluster: missing {', '.join(missing)}: run cluster/build.sh", pytrace=False)
    c = _current.cluster
    if c is not None and _current.kind == kind.name:
        t0 = time.monotonic()
        try:
            problems = c.reset_baseline()
        except Exception as e:  # noqa: BLE001 - a cluster that cannot be reset is replaced, as below
            problems = [f"reset failed: {e!r}"]
        if not problems:
            _current.modules += 1
            log(request, f"cluster of kind {kind.name} reused in lane {_current.lane.index} (module "
                         f"{_current.modules}): baseline reset in {time.monotonic() - t0:.1f}s")
            return c
        log(request, f"cluster of kind {kind.name} not reused: {'; '.join(problems)[:300]}")
    stop_cluster()
    lane = take_lane()
    root = tmp_path_factory.mktemp(f"cluster-{kind.name}")
    t0 = time.monotonic()
    try:
        c = sim.start("p5", "sim", root=root, complete_after=kind.complete_after, timeout=180.0, **kind.start)
    except BaseException:
        give_back(lane)
        raise
    _current.kind, _current.cluster, _current.lane, _current.modules = kind.name, c, lane, 1
    log(request, f"cluster of kind {kind.name} up in {time.monotonic() - t0:.0f}s in lane {lane.index} of "
                 f"{lanes()} (waited {lane.waited:.0f}s for it; steps {c.info.get('steps')}); "
                 f"Kubernetes /version: {c.api('/version')['gitVersion']}")
    return c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    """The simulated p5 cluster of the module's CLUSTER_KIND ("shared" unless it says otherwise)."""
    return lane_cluster(tmp_path_factory, request, kind_of(request.module))


def _wants(item) -> Optional[str]:
    return kind_of(item.module).name if item is not None and "cluster" in getattr(item, "fixturenames", ()) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    # After the module's own teardown (its `destroy`): the cluster goes once no next test wants it.
    if _current.cluster is not None and _wants(nextitem) != _current.kind:
        stop_cluster()


def pytest_sessionfinish(session):
    stop_cluster()
