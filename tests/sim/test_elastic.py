"""Elastic GPU capacity on the simulated cluster (issue 30): the real Karpenter (v1.14.0, kwok cloud
provider) and the real Kueue, with no GPU node until a run is admitted.

The cluster starts with system nodes only; the stack's own NodePool and NodeOverlay
(components/k8s/karpenter_nodes.py) point at a KWOKNodeClass whose registration delay stands for a
p5's boot (cluster/karpenter.py). The deploy stack is `sim` with `gpuNodes.elastic` on, as a
bring-your-own cluster with Karpenter already running (`existingKarpenter`).

1. Zero GPU nodes; a 2-node run is queued -> admitted whole (quota = the maximum) -> Karpenter
   launches 2 nodes -> the run completes -> both nodes removed after the idle time -> zero.
2. Maximum 1 node and a 2-node run submitted to the queue: never admitted, no pod, no node
   launched for it past the PodsReady timeout, still queued whole.
3. Two 2-node runs, maximum 2 nodes: one runs, the other waits whole and runs after.
4. A launch that fails half-way: the cloud gives one of the run's two nodes and not the other (the
   NodePool held at one node, what an insufficient-capacity error leaves). The run holds one node
   while its other pod is Pending, is released whole at Kueue's PodsReady timeout (both pods gone,
   requeued), and runs whole once capacity returns.

Taking a node away by deleting its NodeClaim before the node joins does not work with the kwok
provider: its Create starts a goroutine that creates the Node after the registration delay whatever
happens to the NodeClaim (sigs.k8s.io/karpenter v1.14.0 kwok/cloudprovider/cloudprovider.go), so the
"lost" node still joins and the run goes on; scenario 4 shows the same release without it.

Each prints `[sim] elastic:` lines: the Karpenter version, the GPU node and NodeClaim counts over
time, and the measured times (queued -> admitted, admitted -> all Running, idle -> zero nodes).
"""

from __future__ import annotations

import copy
import datetime
import threading
import time

import pytest
from conftest import ENABLE, POLL_SECONDS, Kind, lane_cluster, log as _log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from faults import pods_of_run, running_on  # noqa: E402
from simdeploy import NAMESPACE, Watcher, deploy_and_check, destroy, wait  # noqa: E402

from cluster import karpenter as karpenter_mod  # noqa: E402
from cluster.stacks import stack_config  # noqa: E402
from components.k8s import karpenter_nodes  # noqa: E402
from components.stack.config import StackConfig  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

RUN = "rltrain-multinode"
SINGLE = "rltrain-training"
# The simulation's timers (tests/sim/conftest.py: set here, never the stack's):
# a launched node joins this long after its NodeClaim (the KWOKNodeClass registration delay, the
# boot: a p5 takes minutes);
BOOT_SECONDS = 5
# Kueue's PodsReady timeout and first requeue backoff (a stack's are at least 10 min / 60 s:
# cluster/sim.py kueue_timed sets these on the simulated Kueue only); the timeout well above what a
# launch takes here (Karpenter's batch window, BOOT_SECONDS, the pods Running), so only a launch that
# fails half-way reaches it;
PODS_READY_TIMEOUT, BACKOFF = 30, 5
# an empty node is removed after this (the NodePool's consolidateAfter on the simulated cluster; the
# stack's own idleMinutes is a minute at least, IDLE_MINUTES below);
IDLE_SECONDS = 20
IDLE_MINUTES = 1
# a run's pods run this long: longer than the PodsReady timeout, so in scenario 4 the pod on the one
# node is still Running when Kueue releases the run (a kwok Job pod succeeds on this timer, not when
# its peer joins).
RUN_SECONDS = PODS_READY_TIMEOUT + 15.0
ELASTIC = {"rltrain:gpuNodes.elastic.enabled": True, "rltrain:gpuNodes.elastic.maxNodes": 2,
           "rltrain:gpuNodes.elastic.idleMinutes": IDLE_MINUTES,
           "rltrain:gpuNodes.elastic.existingKarpenter": True}
ONLY_MULTINODE = {**ELASTIC, "rltrain:workloads.singleNode.enabled": False,
                  "rltrain:workloads.ncclTest.enabled": False, "rltrain:workloads.staging.enabled": False,
                  "rltrain:workloads.validation.enabled": False, "rltrain:workloads.trainingAfterChecks": False}
# Karpenter removes an empty node some seconds after consolidateAfter (its disruption loop, then the
# node's termination): the bound on reaching zero nodes.
ZERO_TIMEOUT = IDLE_SECONDS + 120


def elastic_cfg(max_nodes: int) -> StackConfig:
    base, _ = stack_config("sim")
    g = base.gpu_nodes
    e = g.elastic.model_copy(update={"enabled": True, "max_nodes": max_nodes, "idle_minutes": IDLE_MINUTES,
                                     "existing_karpenter": True})
    return base.model_copy(update={"gpu_nodes": g.model_copy(update={"elastic": e})})


CLUSTER_KIND = Kind("elastic", RUN_SECONDS, {
    "elastic": elastic_cfg(2), "boot_seconds": BOOT_SECONDS, "kueue_timing": (PODS_READY_TIMEOUT, BACKOFF),
    "idle_seconds": IDLE_SECONDS})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    c = lane_cluster(tmp_path_factory, request, CLUSTER_KIND)
    _log(request, f"elastic: Karpenter {karpenter_mod.version()} (kwok provider), NodePool "
                  f"{karpenter_nodes.NODE_POOL}, boot {BOOT_SECONDS}s, PodsReady timeout {PODS_READY_TIMEOUT}s, "
                  f"idle {IDLE_SECONDS}s, runs {RUN_SECONDS:.0f}s")
    return c


class Capacity(threading.Thread):
    """Samples the GPU nodes (of the NodePool) and NodeClaims every second; keeps the changes."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.t0 = time.monotonic()
        self.stop_event = threading.Event()
        self.changes: list[tuple[float, int, int]] = []
        self.most_nodes = 0

    def counts(self) -> tuple[int, int]:
        nodes = self.cluster.api(f"/api/v1/nodes?labelSelector={karpenter_nodes.NODEPOOL_LABEL}")["items"]
        claims = self.cluster.api("/apis/karpenter.sh/v1/nodeclaims")["items"]
        return len(nodes), len(claims)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                n, c = self.counts()
                if not self.changes or self.changes[-1][1:] != (n, c):
                    self.changes.append((time.monotonic() - self.t0, n, c))
                self.most_nodes = max(self.most_nodes, n, c)
            except Exception:  # noqa: BLE001 - a poll during a restart of the API server: next one
                pass
            self.stop_event.wait(POLL_SECONDS)

    def at(self, t: float) -> float:
        return t - self.t0

    def line(self) -> str:
        return " ".join(f"{t:.0f}s:{n}n/{c}c" for t, n, c in self.changes)

    def finish(self) -> None:
        if not self.stop_event.is_set():
            self.stop_event.set()
            self.join(5)
            n, c = self.counts()  # the last state, which the sampler may not have seen yet
            if not self.changes or self.changes[-1][1:] != (n, c):
                self.changes.append((time.monotonic() - self.t0, n, c))


def conditions(wl: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (wl.get("status") or {}).get("conditions", [])}


def workload_of(cluster, owner: str) -> dict | None:
    wls = cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
    return next((w for w in wls if Watcher.owner(w) == owner), None)


def server_seconds(timestamp: str) -> float:
    """An API server timestamp (RFC 3339, whole seconds) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def true(wl: dict | None, kind: str) -> bool:
    return bool(wl) and conditions(wl).get(kind, {}).get("status") == "True"


def job_complete(cluster, name: str) -> bool:
    job = cluster.get("batch/v1", "Job", name, NAMESPACE)
    return bool(job) and any(c["type"] == "Complete" and c["status"] == "True"
                             for c in (job.get("status") or {}).get("conditions", []))


def second_run(cluster, name: str, *, nodes: int | None = None, source: str = RUN) -> dict:
    """A copy of the stack's Job `source` under another name, queued on the same LocalQueue (a user
    submitting another run with kubectl): suspended, its controller's labels and selector dropped;
    `nodes` changes its width (parallelism and completions)."""
    job = copy.deepcopy(cluster.get("batch/v1", "Job", source, NAMESPACE))
    meta = job["metadata"]
    new_meta = {"name": name, "namespace": NAMESPACE,
                "labels": {k: v for k, v in (meta.get("labels") or {}).items()},
                "annotations": {}}
    spec = job["spec"]
    spec.pop("selector", None)
    spec["suspend"] = True
    tmpl_meta = spec["template"]["metadata"]
    tmpl_labels = tmpl_meta.setdefault("labels", {})
    for k in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"):
        tmpl_labels.pop(k, None)
    # What Kueue wrote into the source's template at its admission (kueue.x-k8s.io/workload names
    # the source's Workload: kept, the copy's admission fails "conflict for annotations").
    for m in (tmpl_labels, tmpl_meta.setdefault("annotations", {})):
        for k in [k for k in m if k.startswith("kueue.x-k8s.io/")]:
            m.pop(k)
    spec["template"]["spec"].pop("nodeSelector", None)  # Kueue's, from the flavor, at admission
    tmpl_labels["rltrain/run"] = name
    if nodes:
        spec["parallelism"] = spec["completions"] = nodes
        spec["completionMode"] = "Indexed"
    doc = {"apiVersion": "batch/v1", "kind": "Job", "metadata": new_meta, "spec": spec}
    cluster.create([doc])
    return doc


def delete_job(cluster, name: str) -> None:
    cluster.api(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}?propagationPolicy=Background", "DELETE")


def set_node_limit(cluster, nodes: int) -> None:
    """The NodePool's limits for `nodes` nodes, both of them as the stack sets them: `nodes` alone
    does not stop one provisioning pass from launching more (karpenter_nodes.node_pool)."""
    gpus = elastic_cfg(nodes).gpu_nodes.instance.gpu_count * nodes
    cluster.api(f"/apis/karpenter.sh/v1/nodepools/{karpenter_nodes.NODE_POOL}", "PATCH",
                {"spec": {"limits": {"nodes": str(nodes), "nvidia.com/gpu": str(gpus)}}},
                content_type="application/merge-patch+json")


def zero_nodes(cap: Capacity) -> bool:
    return cap.counts() == (0, 0)


def deploy_from_zero(cluster, request, tmp_path, overrides, zero_timeout: float = ZERO_TIMEOUT):
    """Wait until no GPU node is left, start sampling the capacity, deploy: (sampler, deployment)."""
    wait("zero GPU nodes before the run", lambda: zero_nodes(Capacity(cluster)), zero_timeout)
    cap = Capacity(cluster)
    cap.start()
    return cap, deploy_and_check(cluster, request, tmp_path, overrides)


def test_a_queued_run_gets_its_nodes_whole_and_they_go_away_when_idle(cluster, request, tmp_path):
    cap, r = deploy_from_zero(cluster, request, tmp_path, ONLY_MULTINODE, zero_timeout=30)
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the run's workload", lambda: workload_of(cluster, RUN) is not None, 60, watcher.describe)
        t_queued = time.monotonic()
        wait("the run admitted", lambda: true(workload_of(cluster, RUN), "Admitted"), 120, watcher.describe)
        t_admitted = time.monotonic()
        wait("the run Running on 2 launched nodes", lambda: len(running_on(pods_of_run(cluster, RUN))) == 2,
             180, lambda: f"{watcher.describe()} capacity {cap.line()}")
        t_running = time.monotonic()
        nodes_used = set(running_on(pods_of_run(cluster, RUN)).values())
        wait("the run complete", lambda: job_complete(cluster, RUN), 180, watcher.describe)
        t_idle = time.monotonic()
        wait("zero GPU nodes after the idle time", lambda: zero_nodes(cap), ZERO_TIMEOUT,
             lambda: f"capacity {cap.line()}")
        t_zero = time.monotonic()
        cap.finish()
        _log(request, f"elastic: scenario 1: queued -> admitted {t_admitted - t_queued:.0f}s, admitted -> "
                      f"all Running {t_running - t_admitted:.0f}s (boot {BOOT_SECONDS}s), idle -> zero nodes "
                      f"{t_zero - t_idle:.0f}s (consolidateAfter {IDLE_SECONDS}s); nodes/claims over time "
                      f"{cap.line()}")
        assert cap.changes[0][1:] == (0, 0)
        assert cap.most_nodes == 2, cap.line()
        assert len(nodes_used) == 2
        watcher.checked_order(request)
        # Removed only once empty: not before the idle time (less the watchers' polls).
        assert t_zero - t_idle >= IDLE_SECONDS - 5, cap.line()
    finally:
        cap.finish()
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)


def test_a_run_wider_than_the_maximum_never_starts_and_stays_queued_whole(cluster, request, tmp_path):
    """maxNodes 1: the stack's own runs are 1 node (the config refuses a wider one); a 2-node run
    submitted to its queue by hand is never admitted and nothing is launched for it."""
    cluster.apply_node_pool(elastic_cfg(1))
    overrides = {**ONLY_MULTINODE, "rltrain:gpuNodes.elastic.maxNodes": 1, "rltrain:gpuNodes.count": 1,
                 "rltrain:workloads.singleNode.enabled": True, "rltrain:workloads.multiNode.enabled": False}
    cap, r = deploy_from_zero(cluster, request, tmp_path, overrides)
    watcher, pulumi = r["watcher"], r["pulumi"]
    wide = "rltrain-too-wide"
    try:
        second_run(cluster, wide, nodes=2, source=SINGLE)
        t0 = time.monotonic()
        wait("the 1-node run complete", lambda: job_complete(cluster, SINGLE), 240, watcher.describe)
        # Past the PodsReady timeout and the idle time: nothing launched for the wide run.
        wait("zero GPU nodes after the 1-node run", lambda: zero_nodes(cap), ZERO_TIMEOUT,
             lambda: f"capacity {cap.line()}")
        while time.monotonic() - t0 < PODS_READY_TIMEOUT + 10:
            time.sleep(POLL_SECONDS)
        wl = workload_of(cluster, wide)
        job = cluster.get("batch/v1", "Job", wide, NAMESPACE)
        pods = pods_of_run(cluster, wide)
        pending = conditions(wl).get("QuotaReserved", {})
        cap.finish()
        _log(request, f"elastic: scenario 2: maximum 1 node, a 2-node run: admitted={true(wl, 'Admitted')} "
                      f"after {time.monotonic() - t0:.0f}s, suspended={job['spec'].get('suspend')}, pods={len(pods)}, "
                      f"Kueue: {pending.get('reason')}: {pending.get('message', '')[:160]}; nodes/claims over "
                      f"time {cap.line()}")
        assert not true(wl, "Admitted") and not true(wl, "QuotaReserved")
        assert job["spec"].get("suspend") is True and not pods
        assert cap.most_nodes <= 1, cap.line()
        assert cap.counts() == (0, 0)
    finally:
        cap.finish()
        delete_job(cluster, wide)
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)
        cluster.apply_node_pool(elastic_cfg(2))


def test_two_runs_over_a_maximum_of_two_nodes_run_one_after_the_other_whole(cluster, request, tmp_path):
    cap, r = deploy_from_zero(cluster, request, tmp_path, ONLY_MULTINODE)
    watcher, pulumi = r["watcher"], r["pulumi"]
    other = "rltrain-multinode-b"
    try:
        second_run(cluster, other)
        wait("one run admitted", lambda: true(workload_of(cluster, RUN), "Admitted")
             or true(workload_of(cluster, other), "Admitted"), 120, watcher.describe)
        first, second = (RUN, other) if true(workload_of(cluster, RUN), "Admitted") else (other, RUN)
        assert not true(workload_of(cluster, second), "Admitted")
        wait("the first run complete", lambda: job_complete(cluster, first), 240,
             lambda: f"{watcher.describe()} capacity {cap.line()}")
        t_first = time.monotonic()
        wait("the second run admitted", lambda: true(workload_of(cluster, second), "Admitted"), 120, watcher.describe)
        t_second = time.monotonic()
        wait("the second run complete", lambda: job_complete(cluster, second), 240,
             lambda: f"{watcher.describe()} capacity {cap.line()}")
        order = watcher.checked_order(request)
        cap.finish()
        _log(request, f"elastic: scenario 3: two 2-node runs, maximum 2: admitted {order}; the second waited "
                      f"whole behind {sorted(watcher.waited.get(second, ()))}, admitted {t_second - t_first:.0f}s "
                      f"after the first completed; nodes/claims over time {cap.line()}")
        assert order.index(first) < order.index(second)
        assert first in watcher.waited.get(second, set())
        assert cap.most_nodes <= 2, cap.line()
    finally:
        cap.finish()
        delete_job(cluster, other)
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)


def test_a_launch_that_fails_half_way_releases_the_run_whole_and_it_runs_when_capacity_returns(
        cluster, request, tmp_path):
    wait("zero GPU nodes before the run", lambda: zero_nodes(Capacity(cluster)), ZERO_TIMEOUT)
    set_node_limit(cluster, 1)  # EC2 has one instance for this run, not two
    cap, r = deploy_from_zero(cluster, request, tmp_path, ONLY_MULTINODE)
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the run admitted", lambda: true(workload_of(cluster, RUN), "Admitted"), 120, watcher.describe)
        t_admitted = time.monotonic()
        # Kueue times PodsReady from the Admitted condition's lastTransitionTime (kueue v0.19.2
        # pkg/controller/core/workload_controller.go admittedNotReadyWorkload): the timeout is checked
        # on the server's timestamps, not on when this test saw them (late under a loaded machine).
        admitted_at = conditions(workload_of(cluster, RUN))["Admitted"]["lastTransitionTime"]
        wait("one pod Running, its peer Pending", lambda: len(running_on(pods_of_run(cluster, RUN))) == 1, 120,
             lambda: f"{watcher.describe()} capacity {cap.line()}")
        wait("the run evicted whole at the PodsReady timeout", lambda: true(workload_of(cluster, RUN), "Evicted")
             or not true(workload_of(cluster, RUN), "Admitted"), PODS_READY_TIMEOUT + 90,
             lambda: f"{watcher.describe()} capacity {cap.line()}")
        t_evicted = time.monotonic()
        evicted = conditions(workload_of(cluster, RUN)).get("Evicted", {})
        wait("no pod of the run left", lambda: not [p for p in pods_of_run(cluster, RUN)
                                                    if p["status"].get("phase") not in ("Succeeded", "Failed")],
             120, watcher.describe)
        t_released = time.monotonic()
        assert not [p for p in pods_of_run(cluster, RUN) if p["status"].get("phase") == "Succeeded"]
        set_node_limit(cluster, 2)  # capacity back
        wait("the run Running whole again", lambda: len(running_on(pods_of_run(cluster, RUN))) == 2, 240,
             lambda: f"{watcher.describe()} capacity {cap.line()}")
        t_whole = time.monotonic()
        wait("the run complete", lambda: job_complete(cluster, RUN), 240, watcher.describe)
        wl = workload_of(cluster, RUN)
        requeues = ((wl.get("status") or {}).get("requeueState") or {}).get("count", 0)
        cap.finish()
        _log(request, f"elastic: scenario 4: one node of two launched; evicted whole "
                      f"{t_evicted - t_admitted:.0f}s after admission ({evicted.get('reason')}: "
                      f"{evicted.get('message', '')[:120]}), no pod left {t_released - t_evicted:.0f}s later; "
                      f"requeues={requeues}; whole again {t_whole - t_released:.0f}s after capacity returned; "
                      f"nodes/claims over time {cap.line()}")
        assert evicted.get("reason") == "PodsReadyTimeout", evicted
        assert requeues >= 1
        timed_out_after = server_seconds(evicted["lastTransitionTime"]) - server_seconds(admitted_at)
        assert PODS_READY_TIMEOUT - 1 <= timed_out_after <= PODS_READY_TIMEOUT + 60, (admitted_at, evicted)
        assert not watcher.violations, watcher.violations
    finally:
        cap.finish()
        set_node_limit(cluster, 2)
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)
